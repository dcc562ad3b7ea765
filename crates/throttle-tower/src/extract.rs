//! Key extractors: request -> who is being limited.

use std::borrow::Cow;
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
/// use throttle_tower::{Key, KeyExtractor};
/// use throttle_tower::key::Extracted;
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

    /// What kind of key this is, for answers that name it without echoing
    /// the key itself: `peer-ip`, `header:x-api-key`, `method`, ... (the
    /// gRPC responder's `QuotaFailure` subject reads `"<rule>:<kind>"`).
    /// Asked once, when the layer is built. The default is `custom`;
    /// composites join their parts' kinds with `+`, and
    /// [`or`](KeyExtractorExt::or) joins its two with `|`.
    fn kind(&self) -> Cow<'static, str> {
        Cow::Borrowed("custom")
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
    /// use throttle_tower::KeyExtractorExt;
    /// use throttle_tower::key::{Global, Header};
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

    fn kind(&self) -> Cow<'static, str> {
        [self.first.kind(), self.fallback.kind()].join("|").into()
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

/// One key for every request: a global limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl KeyExtractor for Global {
    fn extract(&self, _: &Parts) -> Extracted {
        Extracted::Key(Key::global())
    }

    fn kind(&self) -> Cow<'static, str> {
        Cow::Borrowed("global")
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

    /// `header:<name>`, e.g. `header:x-api-key`.
    fn kind(&self) -> Cow<'static, str> {
        let name = match &self.name {
            Ok(name) => name.as_str(),
            Err(name) => name,
        };
        format!("header:{name}").into()
    }
}

/// A stable hash of the `User-Agent` header: one part of an
/// unauthenticated composite key, as in `(ClientIp::v4_prefix(24),
/// UserAgentHash)`, which keeps the clients of one carrier-grade NAT pool
/// apart by what they run without limiting each address alone.
///
/// The key is the first 16 bytes of a BLAKE3 digest (keyed by a context
/// string of this extractor) of the header's raw bytes: the same value
/// gives the same key in every process and every release, the key has a
/// fixed length whatever the client sent, and the raw header is never
/// stored. As with [`Header`], a missing or empty header (or the first of
/// several, when it is empty) is [`Extracted::Missing`], and the rule's
/// [`MissingKey`] decides (default: reject with 400). To give clients that
/// send none a shared bucket instead, fall back to [`Global`]:
/// `UserAgentHash.or(Global)`.
///
/// ```
/// use throttle_tower::KeyExtractor;
/// use throttle_tower::key::{Extracted, UserAgentHash};
///
/// let req = |ua: &str| http::Request::get("/").header("user-agent", ua).body(()).unwrap().into_parts().0;
/// let a = UserAgentHash.extract(&req("curl/8.5.0"));
/// assert_eq!(a, UserAgentHash.extract(&req("curl/8.5.0")));
/// assert_ne!(a, UserAgentHash.extract(&req("curl/8.6.0")));
/// let Extracted::Key(key) = a else { unreachable!() };
/// assert_eq!(key.as_bytes().len(), 16);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct UserAgentHash;

impl UserAgentHash {
    /// The length of the key, in bytes.
    pub const KEY_LEN: usize = 16;

    /// The key of a `User-Agent` value.
    pub fn key_of(user_agent: &[u8]) -> Key {
        let mut hasher = blake3::Hasher::new_derive_key("throttle UserAgentHash v1");
        hasher.update(user_agent);
        let digest = hasher.finalize();
        Key::new(&digest.as_bytes()[..Self::KEY_LEN])
    }
}

impl KeyExtractor for UserAgentHash {
    #[inline]
    fn extract(&self, req: &Parts) -> Extracted {
        match req.headers.get(http::header::USER_AGENT) {
            Some(v) if !v.is_empty() => Extracted::Key(Self::key_of(v.as_bytes())),
            _ => Extracted::Missing,
        }
    }

    fn kind(&self) -> Cow<'static, str> {
        Cow::Borrowed("user-agent-hash")
    }
}

/// A key from a typed request extension, such as a verified identity that
/// an authentication layer inserted. A request without the extension is
/// [`Extracted::Missing`], never a key derived from unverified input.
///
/// ```
/// use throttle_tower::Key;
/// use throttle_tower::key::Extension;
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

    /// `extension` (the type's name is the server's business).
    fn kind(&self) -> Cow<'static, str> {
        Cow::Borrowed("extension")
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

    #[test]
    fn kinds_name_the_extractor_and_compose() {
        assert_eq!(Global.kind(), "global");
        assert_eq!(Header::new("x-api-key").kind(), "header:x-api-key");
        assert_eq!(UserAgentHash.kind(), "user-agent-hash");
        let custom = |_: &Parts| Some(Key::global());
        assert_eq!(custom.kind(), "custom");
        assert_eq!(
            (Header::new("a"), UserAgentHash).kind(),
            "header:a+user-agent-hash"
        );
        assert_eq!(
            (Global, Header::new("b"), Global).kind(),
            "global+header:b+global"
        );
        assert_eq!(Header::new("a").or(Global).kind(), "header:a|global");
        assert_eq!(Extension::new(|u: &u64| Key::from(*u)).kind(), "extension");
    }

    const PINNED_MOZILLA: &str = "rc3defd1610faba825d9bf8046d9bfb9e";

    #[test]
    fn user_agent_hashes_are_stable_fixed_length_and_missing_like_headers() {
        let ua = |v: &[u8]| {
            parts(
                http::Request::get("/")
                    .header("user-agent", http::HeaderValue::from_bytes(v).unwrap()),
            )
        };
        // Pinned: the key of a value must not change between releases, or
        // every client's count would restart (and Redis keys would move).
        let Extracted::Key(k) = UserAgentHash.extract(&ua(b"Mozilla/5.0")) else {
            panic!()
        };
        let mut hex = String::new();
        k.write_hex(&mut hex);
        assert_eq!(hex, PINNED_MOZILLA);
        assert_eq!(k.as_bytes().len(), UserAgentHash::KEY_LEN);
        let long = ua(&[b'x'; 4000]);
        let Extracted::Key(k) = UserAgentHash.extract(&long) else {
            panic!()
        };
        assert_eq!(k.as_bytes().len(), UserAgentHash::KEY_LEN);
        assert!(!k.is_digest(), "short enough to stay raw in a composite");
        assert_ne!(
            UserAgentHash.extract(&ua(b"a")),
            UserAgentHash.extract(&ua(b"b"))
        );
        // Not UTF-8: hashed all the same.
        assert!(matches!(
            UserAgentHash.extract(&ua(b"\xff\xfe")),
            Extracted::Key(_)
        ));
        assert_eq!(
            UserAgentHash.extract(&parts(http::Request::get("/"))),
            Extracted::Missing
        );
        assert_eq!(UserAgentHash.extract(&ua(b"")), Extracted::Missing);
        assert_eq!(
            UserAgentHash
                .or(Global)
                .extract(&parts(http::Request::get("/"))),
            Extracted::Key(Key::global())
        );
    }

    #[test]
    fn user_agent_composes_with_other_parts() {
        let pair = (Header::new("x-net"), UserAgentHash);
        let req = |net: &str, ua: &str| {
            parts(
                http::Request::get("/")
                    .header("x-net", net)
                    .header("user-agent", ua),
            )
        };
        let a = pair.extract(&req("203.0.113.0", "curl/8"));
        assert_eq!(a, pair.extract(&req("203.0.113.0", "curl/8")));
        assert_ne!(a, pair.extract(&req("203.0.113.0", "wget/1")));
        assert_ne!(a, pair.extract(&req("198.51.100.0", "curl/8")));
        let no_ua = parts(http::Request::get("/").header("x-net", "203.0.113.0"));
        assert_eq!(pair.extract(&no_ua), Extracted::Missing);
    }
}
