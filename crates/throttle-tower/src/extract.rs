//! Key extractors: request -> who is being limited.

use std::fmt;
use std::marker::PhantomData;

use http::HeaderName;
use http::request::Parts;
use throttle_core::{ConfigError, Key};

use crate::MissingKey;

/// What an extractor found in a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extracted {
    /// The key to limit under this rule.
    Key(Key),
    /// The rule does not apply to this request (e.g. another route); it is
    /// skipped without further ado.
    Skip,
    /// The key material is missing or malformed; the rule's
    /// [`MissingKey`](crate::MissingKey) setting decides what happens.
    Missing,
}

impl From<Option<Key>> for Extracted {
    fn from(key: Option<Key>) -> Self {
        key.map_or(Self::Missing, Self::Key)
    }
}

impl From<Key> for Extracted {
    fn from(key: Key) -> Self {
        Self::Key(key)
    }
}

/// Finds the key a rule limits by in a request.
///
/// Implemented for closures `Fn(&Parts) -> Option<Key>` (where `None` means
/// the key material is missing), and for pairs and triples of extractors,
/// which build a composite key (any part missing makes the whole missing).
///
/// ```
/// use http::request::Parts;
/// use throttle_tower::{Extracted, Key, KeyExtractor};
///
/// let by_tenant = |req: &Parts| req.uri.path().strip_prefix("/t/").map(Key::new);
/// let (parts, ()) = http::Request::get("/t/acme").body(()).unwrap().into_parts();
/// assert_eq!(by_tenant.extract(&parts), Extracted::Key(Key::new("acme")));
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key for this request.
    fn extract(&self, req: &Parts) -> Extracted;

    /// Checks the extractor's own configuration when the layer is built.
    fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }

    /// What a rule keyed by this extractor does with a request whose key is
    /// missing, unless the [`Limit`](crate::Limit) says otherwise. The
    /// default rejects with 400; an extractor whose key can only be missing
    /// through a server misconfiguration answers 500 instead.
    fn on_missing(&self) -> MissingKey {
        MissingKey::default()
    }
}

impl<F> KeyExtractor for F
where
    F: Fn(&Parts) -> Option<Key> + Send + Sync + 'static,
{
    fn extract(&self, req: &Parts) -> Extracted {
        self(req).into()
    }
}

/// Combinators for extractors.
pub trait KeyExtractorExt: KeyExtractor + Sized {
    /// Uses `fallback` when this extractor finds no key material.
    ///
    /// ```
    /// use throttle_tower::{Global, Header, KeyExtractorExt};
    /// let by_key_or_everyone = Header::new("x-api-key").or(Global);
    /// # let _ = by_key_or_everyone;
    /// ```
    fn or<E: KeyExtractor>(self, fallback: E) -> Or<Self, E> {
        Or {
            first: self,
            fallback,
        }
    }
}

impl<E: KeyExtractor> KeyExtractorExt for E {}

/// See [`KeyExtractorExt::or`].
#[derive(Debug, Clone)]
pub struct Or<A, B> {
    first: A,
    fallback: B,
}

impl<A: KeyExtractor, B: KeyExtractor> KeyExtractor for Or<A, B> {
    fn extract(&self, req: &Parts) -> Extracted {
        match self.first.extract(req) {
            Extracted::Missing => self.fallback.extract(req),
            found => found,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        self.first.validate()?;
        self.fallback.validate()
    }
}

/// Composite keys: every part must be found.
macro_rules! composite {
    ($($name:ident),+) => {
        impl<$($name: KeyExtractor),+> KeyExtractor for ($($name,)+) {
            #[allow(non_snake_case)]
            fn extract(&self, req: &Parts) -> Extracted {
                let ($($name,)+) = self;
                $(
                    let $name = match $name.extract(req) {
                        Extracted::Key(k) => k,
                        other => return other,
                    };
                )+
                // Digest parts are marked so a raw part can't imitate one.
                let tagged = [$(($name.is_digest(), $name)),+];
                let mut parts: [&[u8]; 2 * [$(stringify!($name)),+].len()] = [&[]; 2 * [$(stringify!($name)),+].len()];
                for (i, (digest, key)) in tagged.iter().enumerate() {
                    parts[2 * i] = if *digest { b"h" } else { b"r" };
                    parts[2 * i + 1] = key.as_bytes();
                }
                Extracted::Key(Key::from_parts(&parts))
            }

            #[allow(non_snake_case)]
            fn validate(&self) -> Result<(), ConfigError> {
                let ($($name,)+) = self;
                $($name.validate()?;)+
                Ok(())
            }
        }
    };
}

composite!(A, B);
composite!(A, B, C);

/// One key for every request: a global limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl KeyExtractor for Global {
    fn extract(&self, _: &Parts) -> Extracted {
        Extracted::Key(Key::global())
    }
}

/// The value of a request header (e.g. `x-api-key`), as raw bytes. A missing
/// or empty header is [`Extracted::Missing`]; with several values the first
/// one counts.
#[derive(Debug, Clone)]
pub struct Header {
    name: Result<HeaderName, String>,
}

impl Header {
    /// The header called `name` (checked when the layer is built).
    pub fn new(name: &str) -> Self {
        Self {
            name: HeaderName::try_from(name).map_err(|_| name.to_owned()),
        }
    }
}

impl KeyExtractor for Header {
    #[inline]
    fn extract(&self, req: &Parts) -> Extracted {
        let Ok(name) = &self.name else {
            return Extracted::Missing;
        };
        match req.headers.get(name) {
            Some(v) if !v.is_empty() => Extracted::Key(Key::new(v.as_bytes())),
            _ => Extracted::Missing,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        match &self.name {
            Ok(_) => Ok(()),
            Err(name) => Err(ConfigError::new(
                "key.header",
                format!("{name:?} is not a valid HTTP header name"),
            )),
        }
    }
}

/// A key from a typed request extension, such as a verified identity that
/// an authentication layer inserted. A request without the extension is
/// [`Extracted::Missing`], never a key derived from unverified input.
///
/// ```
/// use throttle_tower::{Extension, Key};
///
/// #[derive(Clone)]
/// struct UserId(u64);
///
/// let by_user = Extension::new(|user: &UserId| Key::from(user.0));
/// # let _ = by_user;
/// ```
pub struct Extension<T, F> {
    key: F,
    _t: PhantomData<fn(&T)>,
}

impl<T, F> Extension<T, F>
where
    T: Send + Sync + 'static,
    F: Fn(&T) -> Key + Send + Sync + 'static,
{
    /// Limits by `key(extension)`.
    pub fn new(key: F) -> Self {
        Self {
            key,
            _t: PhantomData,
        }
    }
}

impl<T, F: Clone> Clone for Extension<T, F> {
    fn clone(&self) -> Self {
        Self {
            key: self.key.clone(),
            _t: PhantomData,
        }
    }
}

impl<T, F> fmt::Debug for Extension<T, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Extension<{}>", std::any::type_name::<T>())
    }
}

impl<T, F> KeyExtractor for Extension<T, F>
where
    T: Send + Sync + 'static,
    F: Fn(&T) -> Key + Send + Sync + 'static,
{
    fn extract(&self, req: &Parts) -> Extracted {
        req.extensions.get::<T>().map(|t| (self.key)(t)).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(req: http::request::Builder) -> Parts {
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn header_values_and_their_absence() {
        let h = Header::new("x-api-key");
        assert!(h.validate().is_ok());
        let req = parts(http::Request::get("/").header("x-api-key", "k1"));
        assert_eq!(h.extract(&req), Extracted::Key(Key::new("k1")));
        assert_eq!(
            h.extract(&parts(http::Request::get("/"))),
            Extracted::Missing
        );
        let empty = parts(http::Request::get("/").header("x-api-key", ""));
        assert_eq!(h.extract(&empty), Extracted::Missing);
        let err = Header::new("bad name").validate().unwrap_err();
        assert_eq!(err.field(), "key.header");
    }

    #[test]
    fn composites_need_every_part_and_are_unambiguous() {
        let pair = (Header::new("a"), Header::new("b"));
        let both = parts(http::Request::get("/").header("a", "x").header("b", "yz"));
        let shifted = parts(http::Request::get("/").header("a", "xy").header("b", "z"));
        let one = parts(http::Request::get("/").header("a", "x"));
        let (Extracted::Key(k1), Extracted::Key(k2)) =
            (pair.extract(&both), pair.extract(&shifted))
        else {
            panic!()
        };
        assert_ne!(k1, k2);
        assert_eq!(pair.extract(&one), Extracted::Missing);
    }

    #[test]
    fn fallback_only_when_missing() {
        let ex = Header::new("a").or(|_: &Parts| Some(Key::new("fallback")));
        assert_eq!(
            ex.extract(&parts(http::Request::get("/"))),
            Extracted::Key(Key::new("fallback"))
        );
        let with = parts(http::Request::get("/").header("a", "1"));
        assert_eq!(ex.extract(&with), Extracted::Key(Key::new("1")));
    }

    #[test]
    fn extensions_are_the_only_source_of_verified_identity() {
        #[derive(Clone)]
        struct User(&'static str);
        let ex = Extension::new(|u: &User| Key::new(u.0));
        let mut req = parts(http::Request::get("/").header("x-user", "mallory"));
        assert_eq!(ex.extract(&req), Extracted::Missing);
        req.extensions.insert(User("alice"));
        assert_eq!(ex.extract(&req), Extracted::Key(Key::new("alice")));
    }
}
