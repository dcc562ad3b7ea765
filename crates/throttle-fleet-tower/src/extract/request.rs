//! The extractors that read a request: one global key, a header, a
//! request extension, the user agent's hash.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use crate::RequestHead;
use http::HeaderName;
use throttle_fleet_core::{ConfigError, Key};

use super::{Extracted, KeyExtractor, KeyInputs};

/// One key for every request: a global limit.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl KeyExtractor for Global {
    fn extract(&self, _: &RequestHead<'_>) -> Extracted {
        Extracted::Key(Key::global())
    }

    fn kind(&self) -> Cow<'static, str> {
        Cow::Borrowed("global")
    }

    fn key_for(&self, _: &KeyInputs) -> Option<Result<Key, String>> {
        Some(Ok(Key::global()))
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
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
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

    /// The header's value in `inputs`, as a request carrying it would give.
    fn key_for(&self, inputs: &KeyInputs) -> Option<Result<Key, String>> {
        let name = match &self.name {
            Ok(name) => name.as_str(),
            Err(name) => return Some(Err(format!("{name:?} is not a header name"))),
        };
        Some(inputs.header_value(name).map(|v| Key::new(v.as_bytes())))
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
/// [`MissingKey`](crate::MissingKey) decides (default: reject with 400). To give clients that
/// send none a shared bucket instead, fall back to [`Global`]:
/// `UserAgentHash.or(Global)`.
///
/// ```
/// use throttle_fleet_tower::{KeyExtractor, RequestHead};
/// use throttle_fleet_tower::key::{Extracted, UserAgentHash};
///
/// let req = |ua: &str| http::Request::get("/").header("user-agent", ua).body(()).unwrap();
/// let key = |ua: &str| UserAgentHash.extract(&RequestHead::of(&req(ua)));
/// let a = key("curl/8.5.0");
/// assert_eq!(a, key("curl/8.5.0"));
/// assert_ne!(a, key("curl/8.6.0"));
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
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        match req.headers.get(http::header::USER_AGENT) {
            Some(v) if !v.is_empty() => Extracted::Key(Self::key_of(v.as_bytes())),
            _ => Extracted::Missing,
        }
    }

    fn kind(&self) -> Cow<'static, str> {
        Cow::Borrowed("user-agent-hash")
    }

    /// The hash of `inputs.user_agent`, or of a `User-Agent` header given.
    fn key_for(&self, inputs: &KeyInputs) -> Option<Result<Key, String>> {
        let ua = match inputs.user_agent.as_deref() {
            Some(ua) => Ok(ua.trim_matches([' ', '\t'])),
            None => inputs.header_value("user-agent"),
        };
        Some(match ua {
            Ok("") => Err("the user agent is empty".to_owned()),
            Ok(ua) => Ok(Self::key_of(ua.as_bytes())),
            Err(_) => Err("needs the user agent".to_owned()),
        })
    }
}

/// A key from a typed request extension, such as a verified identity that
/// an authentication layer inserted. A request without the extension is
/// [`Extracted::Missing`], never a key derived from unverified input.
///
/// ```
/// use throttle_fleet_tower::Key;
/// use throttle_fleet_tower::key::Extension;
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
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        req.extensions.get::<T>().map(|t| (self.key)(t)).into()
    }

    /// `extension` (the type's name is the server's business).
    fn kind(&self) -> Cow<'static, str> {
        Cow::Borrowed("extension")
    }
}
