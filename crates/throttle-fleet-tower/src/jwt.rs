//! Verified identities from a JWT (`Authorization: Bearer`), behind the
//! `jwt` feature.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::RequestHead;
use http::StatusCode;
use http::header::AUTHORIZATION;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Map, Value};
use throttle_fleet_core::{ConfigError, Key};

use crate::extract::{Extracted, KeyInputs};
use crate::{KeyExtractor, MissingKey};

/// The longest bearer token that is looked at; a longer one is
/// [`Extracted::Missing`] without being decoded, so a client cannot make
/// the limiter spend its time on megabyte tokens.
pub const MAX_TOKEN_LEN: usize = 8 * 1024;

/// A claim of a verified JWT (`sub` by default) from `Authorization:
/// Bearer <token>`: the user id of the seed's tiered identification.
///
/// Only a token that passes every check becomes a key:
///
/// - its signature verifies with the configured key, under the one
///   algorithm the key is for (HS256, RS256 or ES256): `alg: none`, another
///   algorithm (e.g. an HS256 token signed with an RSA public key) or a bad
///   signature is refused;
/// - it has an `exp` claim, in the future (no leeway unless
///   [`leeway`](Self::leeway) gives some); an `nbf` claim, if present, is
///   in the past;
/// - its `aud` names one of the configured [`audience`](Self::audience)s;
///   with none configured, a token carrying `aud` is refused (RFC 7519: a
///   recipient that does not identify itself with a value of `aud` must
///   reject the token). Its `iss` is one of the configured
///   [`issuer`](Self::issuer)s, when some are;
/// - the claim is a non-empty string or an integer.
///
/// Anything else (no `Authorization` header, another scheme, a token longer
/// than [`MAX_TOKEN_LEN`], a forged or expired token) is
/// [`Extracted::Missing`], and the rule's [`MissingKey`] decides: by default
/// the request is rejected with `401 Unauthorized` (gRPC
/// `UNAUTHENTICATED`). To limit anonymous traffic by address instead, fall
/// back: `Jwt::hs256(secret).or(ClientIp::default())`. Long claim values
/// are hashed into the key like any key material.
///
/// Verification uses `jsonwebtoken` with its RustCrypto backend. Building
/// with `jsonwebtoken`'s `aws_lc_rs` feature enabled as well (by another
/// crate of the same program) leaves it without a default provider:
/// install one with `jsonwebtoken::crypto::CryptoProvider::install_default`
/// at start-up then.
///
/// ```
/// use throttle_fleet_tower::{KeyExtractor, RequestHead};
/// use throttle_fleet_tower::key::{Extracted, Jwt};
///
/// let by_user = Jwt::hs256(b"a secret of at least 32 bytes!!!").audience(["api"]);
/// assert!(by_user.validate().is_ok());
/// let req = http::Request::get("/")
///     .header("authorization", "Bearer not.a.token")
///     .body(()).unwrap();
/// assert_eq!(by_user.extract(&RequestHead::of(&req)), Extracted::Missing);
///
/// let bad_key = Jwt::rs256_pem(b"-----BEGIN NONSENSE-----");
/// assert_eq!(bad_key.validate().unwrap_err().field(), "jwt.key");
/// ```
#[derive(Clone)]
pub struct Jwt {
    key: Result<DecodingKey, String>,
    validation: Validation,
    claim: Box<str>,
    empty_audience: bool,
    empty_issuer: bool,
}

impl fmt::Debug for Jwt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key: an HMAC secret is a secret.
        f.debug_struct("Jwt")
            .field("algorithms", &self.validation.algorithms)
            .field("claim", &self.claim)
            .field("audience", &self.validation.aud)
            .field("issuer", &self.validation.iss)
            .field("leeway_secs", &self.validation.leeway)
            .finish_non_exhaustive()
    }
}

impl Jwt {
    fn with(alg: Algorithm, key: Result<DecodingKey, String>) -> Self {
        let mut validation = Validation::new(alg);
        validation.set_required_spec_claims(&["exp"]);
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.validate_aud = true;
        validation.leeway = 0;
        Self {
            key,
            validation,
            claim: "sub".into(),
            empty_audience: false,
            empty_issuer: false,
        }
    }

    /// HS256 tokens, signed with this shared secret (at least 32 bytes,
    /// checked when the layer is built).
    pub fn hs256(secret: impl AsRef<[u8]>) -> Self {
        let secret = secret.as_ref();
        let key = match secret.len() {
            n if n < 32 => Err(format!("an HS256 secret needs at least 32 bytes (got {n})")),
            _ => DecodingKey::from_secret(secret).map_err(|e| e.to_string()),
        };
        Self::with(Algorithm::HS256, key)
    }

    /// RS256 tokens, verified with this RSA public key in PEM (`BEGIN
    /// PUBLIC KEY` or `BEGIN RSA PUBLIC KEY`).
    pub fn rs256_pem(pem: impl AsRef<[u8]>) -> Self {
        let key = DecodingKey::from_rsa_pem(pem.as_ref())
            .map_err(|e| format!("not an RSA public key in PEM: {e}"));
        Self::with(Algorithm::RS256, key)
    }

    /// RS256 tokens, verified with this RSA public key in DER (PKCS#1
    /// `RSAPublicKey`). DER is not parsed until a token is checked: a bad
    /// key makes every token [`Extracted::Missing`].
    pub fn rs256_der(der: impl AsRef<[u8]>) -> Self {
        Self::with(
            Algorithm::RS256,
            Ok(DecodingKey::from_rsa_der(der.as_ref())),
        )
    }

    /// ES256 tokens, verified with this P-256 public key in PEM (`BEGIN
    /// PUBLIC KEY`).
    pub fn es256_pem(pem: impl AsRef<[u8]>) -> Self {
        let key = DecodingKey::from_ec_pem(pem.as_ref())
            .map_err(|e| format!("not an EC public key in PEM: {e}"));
        Self::with(Algorithm::ES256, key)
    }

    /// ES256 tokens, verified with this P-256 public key as a DER-encoded
    /// point (as `jsonwebtoken::DecodingKey::from_ec_der` takes it). DER
    /// is not parsed until a token is checked.
    pub fn es256_der(der: impl AsRef<[u8]>) -> Self {
        Self::with(Algorithm::ES256, Ok(DecodingKey::from_ec_der(der.as_ref())))
    }

    /// The claim whose value is the key (default `sub`), e.g. `user_id` or
    /// `tenant`.
    #[must_use]
    pub fn claim(mut self, name: &str) -> Self {
        self.claim = name.into();
        self
    }

    /// Accepts only tokens whose `aud` names one of these.
    #[must_use]
    pub fn audience<I, S>(mut self, audience: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let aud: Vec<String> = audience.into_iter().map(Into::into).collect();
        self.empty_audience = aud.is_empty();
        self.validation.set_audience(&aud);
        self.validation.required_spec_claims.insert("aud".into());
        self
    }

    /// Accepts only tokens whose `iss` is one of these.
    #[must_use]
    pub fn issuer<I, S>(mut self, issuers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let iss: Vec<String> = issuers.into_iter().map(Into::into).collect();
        self.empty_issuer = iss.is_empty();
        self.validation.set_issuer(&iss);
        self.validation.required_spec_claims.insert("iss".into());
        self
    }

    /// Tolerates this much clock difference with the issuer on `exp` and
    /// `nbf` (default none: a token is refused from its `exp` second on).
    #[must_use]
    pub fn leeway(mut self, leeway: Duration) -> Self {
        self.validation.leeway = leeway.as_secs();
        self
    }

    /// The key of a token, when it passes every check.
    pub fn verify(&self, token: &str) -> Option<Key> {
        let key = self.key.as_ref().ok()?;
        if token.len() > MAX_TOKEN_LEN {
            return None;
        }
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, key, &self.validation).ok()?;
        match data.claims.get(&*self.claim)? {
            Value::String(s) if !s.is_empty() => Some(Key::new(s)),
            Value::Number(n) if n.is_i64() || n.is_u64() => Some(Key::new(n.to_string())),
            _ => None,
        }
    }
}

/// The token of `Authorization: Bearer <token>` (scheme case-insensitive).
fn bearer<'a>(req: &RequestHead<'a>) -> Option<&'a str> {
    let value = req.headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_matches(' '))
        .filter(|t| !t.is_empty())
}

impl KeyExtractor for Jwt {
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        bearer(req).and_then(|token| self.verify(token)).into()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if let Err(e) = &self.key {
            return Err(ConfigError::new("jwt.key", e.clone()));
        }
        if self.claim.is_empty() {
            return Err(ConfigError::new("jwt.claim", "the claim name is empty"));
        }
        if self.empty_audience {
            return Err(ConfigError::new(
                "jwt.audience",
                "needs at least one audience: an empty list would refuse every token",
            ));
        }
        if self.empty_issuer {
            return Err(ConfigError::new(
                "jwt.issuer",
                "needs at least one issuer: an empty list would refuse every token",
            ));
        }
        Ok(())
    }

    fn on_missing(&self) -> MissingKey {
        MissingKey::Reject(StatusCode::UNAUTHORIZED)
    }

    /// `jwt:<claim>`, e.g. `jwt:sub`.
    fn kind(&self) -> Cow<'static, str> {
        format!("jwt:{}", self.claim).into()
    }

    /// The key a verified token whose claim has the value `inputs.claim`
    /// gets (a number's claim is written as its digits): no token needed.
    fn key_for(&self, inputs: &KeyInputs) -> Option<Result<Key, String>> {
        Some(match inputs.claim.as_deref() {
            Some("") => Err(format!("claim {:?} is empty", &*self.claim)),
            Some(value) => Ok(Key::new(value)),
            None => Err(format!("needs the value of claim {:?}", &*self.claim)),
        })
    }
}
