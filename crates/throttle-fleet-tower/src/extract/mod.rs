//! Key extractors: request -> who is being limited. The trait and its
//! combinators here; composite keys in `composite`, the extractors that
//! read a request in `request`.

mod composite;
mod inputs;
mod request;
#[cfg(test)]
mod tests;

use std::borrow::Cow;

use crate::RequestHead;
use throttle_fleet_core::{ConfigError, Key};

use crate::MissingKey;

pub use composite::AllOf;
pub use inputs::KeyInputs;
pub use request::{Extension, Global, Header, UserAgentHash};

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
/// Implemented for closures `Fn(&RequestHead<'_>) -> Option<Key>` (where `None` means
/// the key material is missing), and for pairs and triples of extractors,
/// which build a composite key (any part missing makes the whole missing).
///
/// ```
/// use throttle_fleet_tower::{Key, KeyExtractor, RequestHead};
/// use throttle_fleet_tower::key::Extracted;
///
/// let by_tenant = |req: &RequestHead<'_>| req.uri.path().strip_prefix("/t/").map(Key::new);
/// let req = http::Request::get("/t/acme").body(()).unwrap();
/// assert_eq!(by_tenant.extract(&RequestHead::of(&req)), Extracted::Key(Key::new("acme")));
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key for this request.
    fn extract(&self, req: &RequestHead<'_>) -> Extracted;

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

    /// The key a request with these `inputs` would get, byte for byte:
    /// how an operator names a key without knowing its encoding (an
    /// address masked to the rule's prefix, a User-Agent's hash, a
    /// composite's parts). `Err` says which input is missing or malformed;
    /// `None` (the default) means this extractor cannot derive keys from
    /// inputs (a closure, a request extension).
    ///
    /// ```
    /// use throttle_fleet_tower::{KeyExtractor, RequestHead};
    /// use throttle_fleet_tower::key::{Extracted, KeyInputs, UserAgentHash};
    ///
    /// let req = http::Request::get("/").header("user-agent", "curl/8.5.0").body(()).unwrap();
    /// let Extracted::Key(seen) = UserAgentHash.extract(&RequestHead::of(&req)) else { unreachable!() };
    /// let named = UserAgentHash.key_for(&KeyInputs::new().user_agent("curl/8.5.0"));
    /// assert_eq!(named, Some(Ok(seen)));
    /// assert!(UserAgentHash.key_for(&KeyInputs::new()).unwrap().is_err());
    /// ```
    fn key_for(&self, inputs: &KeyInputs) -> Option<Result<Key, String>> {
        let _ = inputs;
        None
    }
}

impl<F> KeyExtractor for F
where
    F: Fn(&RequestHead<'_>) -> Option<Key> + Send + Sync + 'static,
{
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        self(req).into()
    }
}

/// Combinators for extractors.
pub trait KeyExtractorExt: KeyExtractor + Sized {
    /// Uses `fallback` when this extractor finds no key material.
    ///
    /// ```
    /// use throttle_fleet_tower::KeyExtractorExt;
    /// use throttle_fleet_tower::key::{Global, Header};
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
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
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

    /// The first's key; the fallback's when the first's inputs are
    /// missing (as a request whose first key is missing falls back).
    fn key_for(&self, inputs: &KeyInputs) -> Option<Result<Key, String>> {
        match self.first.key_for(inputs)? {
            Ok(key) => Some(Ok(key)),
            Err(first) => match self.fallback.key_for(inputs)? {
                Ok(key) => Some(Ok(key)),
                Err(fallback) => Some(Err(format!("{first}, or else {fallback}"))),
            },
        }
    }
}

/// A boxed extractor is one (for policies built at run time).
impl KeyExtractor for Box<dyn KeyExtractor> {
    #[inline]
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        (**self).extract(req)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        (**self).validate()
    }

    fn on_missing(&self) -> MissingKey {
        (**self).on_missing()
    }

    fn kind(&self) -> Cow<'static, str> {
        (**self).kind()
    }

    fn key_for(&self, inputs: &KeyInputs) -> Option<Result<Key, String>> {
        (**self).key_for(inputs)
    }
}
