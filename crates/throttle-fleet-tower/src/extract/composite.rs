//! Composite keys: every part must be found. Pairs and triples of
//! extractors, and `AllOf` for parts chosen at run time.

use std::borrow::Cow;
use std::fmt;

use crate::RequestHead;
use throttle_fleet_core::{ConfigError, Key};

use super::{Extracted, KeyExtractor, KeyInputs};
use crate::MissingKey;

/// Composite keys: every part must be found.
macro_rules! composite {
    ($($name:ident),+) => {
        impl<$($name: KeyExtractor),+> KeyExtractor for ($($name,)+) {
            #[allow(non_snake_case)]
            fn extract(&self, req: &RequestHead<'_>) -> Extracted {
                let ($($name,)+) = self;
                $(
                    let $name = match $name.extract(req) {
                        Extracted::Key(k) => k,
                        other => return other,
                    };
                )+
                Extracted::Key(compose(&[$($name),+]))
            }

            #[allow(non_snake_case)]
            fn key_for(&self, inputs: &KeyInputs) -> Option<Result<Key, String>> {
                let ($($name,)+) = self;
                // A part that cannot derive keys makes the whole unable to,
                // whatever another part's inputs lack.
                $(let $name = $name.key_for(inputs)?;)+
                Some((|| Ok(compose(&[$($name?),+])))())
            }

            #[allow(non_snake_case)]
            fn validate(&self) -> Result<(), ConfigError> {
                let ($($name,)+) = self;
                $($name.validate()?;)+
                Ok(())
            }

            #[allow(non_snake_case)]
            fn kind(&self) -> Cow<'static, str> {
                let ($($name,)+) = self;
                [$($name.kind()),+].join("+").into()
            }
        }
    };
}

composite!(A, B);
composite!(A, B, C);

/// See [`AllOf::MAX_PARTS`].
const MAX_PARTS: usize = 8;

/// The key of a composite of `keys` (at most [`MAX_PARTS`]), in order: a
/// tag, then the part, for each part. Digest parts are marked so a raw
/// part can't imitate one.
fn compose(keys: &[Key]) -> Key {
    let n = keys.len().min(MAX_PARTS);
    let mut encoded: [&[u8]; 2 * MAX_PARTS] = [&[]; 2 * MAX_PARTS];
    for (i, key) in keys[..n].iter().enumerate() {
        encoded[2 * i] = tag(key);
        encoded[2 * i + 1] = key.as_bytes();
    }
    Key::from_parts(&encoded[..2 * n])
}

/// The tag that marks a part of a composite key as a digest (`h`) or raw
/// material (`r`), so a raw part can't imitate a digest one.
#[inline]
fn tag(key: &Key) -> &'static [u8] {
    if key.is_digest() { b"h" } else { b"r" }
}

/// A composite key of parts chosen at run time (from a configuration file,
/// say), every one of which must be found: the key of `AllOf::new([a, b])`
/// is the key of the pair `(a, b)`, and so on for up to
/// [`AllOf::MAX_PARTS`] parts. Extracting one allocates nothing.
///
/// Parts of different types are boxed (`Box<dyn KeyExtractor>`, the
/// default). A part that skips the rule or is missing makes the whole skip
/// or miss. A missing key is rejected with 400 (the client's), unless every
/// part can only be missing through the same server misconfiguration (the
/// peer address of [`ClientAddr`](crate::key::ClientAddr), say: 500).
///
/// ```
/// use throttle_fleet_tower::{KeyExtractor, RequestHead};
/// use throttle_fleet_tower::key::{AllOf, Header, UserAgentHash};
///
/// let parts: Vec<Box<dyn KeyExtractor>> = vec![Box::new(Header::new("x-net")), Box::new(UserAgentHash)];
/// let any = AllOf::new(parts);
/// let pair = (Header::new("x-net"), UserAgentHash);
/// let req = http::Request::get("/").header("x-net", "a").header("user-agent", "b").body(()).unwrap();
/// let head = RequestHead::of(&req);
/// assert_eq!(any.extract(&head), pair.extract(&head));
/// assert_eq!(any.kind(), "header:x-net+user-agent-hash");
/// ```
pub struct AllOf<E = Box<dyn KeyExtractor>> {
    parts: Box<[E]>,
}

impl<E: KeyExtractor> AllOf<E> {
    /// The most parts a composite key may have (checked when the layer is
    /// built).
    pub const MAX_PARTS: usize = MAX_PARTS;

    /// The composite of `parts`, in order.
    pub fn new(parts: impl IntoIterator<Item = E>) -> Self {
        Self {
            parts: parts.into_iter().collect(),
        }
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[E] {
        &self.parts
    }
}

impl<E> fmt::Debug for AllOf<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AllOf({} parts)", self.parts.len())
    }
}

impl<E: KeyExtractor> KeyExtractor for AllOf<E> {
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        let n = self.parts.len();
        if n == 0 || n > Self::MAX_PARTS {
            // Refused by `validate`: never limit by a key built otherwise.
            return Extracted::Missing;
        }
        let mut keys = [Key::global(); MAX_PARTS];
        for (slot, part) in keys.iter_mut().zip(self.parts.iter()) {
            match part.extract(req) {
                Extracted::Key(k) => *slot = k,
                other => return other,
            }
        }
        // The tuples' encoding.
        Extracted::Key(compose(&keys[..n]))
    }

    /// Every part's key from `inputs`, composed as a request's would be.
    fn key_for(&self, inputs: &KeyInputs) -> Option<Result<Key, String>> {
        let n = self.parts.len();
        if n == 0 || n > Self::MAX_PARTS {
            return Some(Err(format!("a composite key has 1 to {MAX_PARTS} parts")));
        }
        let mut keys = [Key::global(); MAX_PARTS];
        let mut missing = None;
        for (slot, part) in keys.iter_mut().zip(self.parts.iter()) {
            // A part that cannot derive keys makes the whole unable to.
            match part.key_for(inputs)? {
                Ok(k) => *slot = k,
                Err(e) => missing = missing.or(Some(e)),
            }
        }
        Some(match missing {
            Some(e) => Err(e),
            None => Ok(compose(&keys[..n])),
        })
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=Self::MAX_PARTS).contains(&self.parts.len()) {
            return Err(ConfigError::new(
                "key.parts",
                format!(
                    "a composite key has 1 to {} parts (got {})",
                    Self::MAX_PARTS,
                    self.parts.len()
                ),
            ));
        }
        self.parts.iter().try_for_each(KeyExtractor::validate)
    }

    fn on_missing(&self) -> MissingKey {
        let mut all = self.parts.iter().map(KeyExtractor::on_missing);
        match all.next() {
            Some(first @ MissingKey::Reject(s))
                if s.is_server_error() && all.all(|m| m == first) =>
            {
                first
            }
            _ => MissingKey::default(),
        }
    }

    fn kind(&self) -> Cow<'static, str> {
        let kinds: Vec<_> = self.parts.iter().map(KeyExtractor::kind).collect();
        kinds.join("+").into()
    }
}
