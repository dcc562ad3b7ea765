//! A [`GatewayConfig`] as an axum layer: each rule's key source becomes an
//! extractor, its routes a gate, the header style a responder.

use http::request::Parts;
use std::net::IpAddr;
use throttle_config::{ConfigFileError, GatewayConfig, HeaderStyle, KeySpec, RuleConfig};

use throttle_core::{Backend, Key, Quota};
use throttle_tower::{HttpResponder, KeyExtractor, MissingKey, Policy};
use throttle_tower::key::{Extracted, Global, Header, IpPrefix, Jwt, UserAgentHash};

use crate::{ClientIp, Route, ThrottleLayer};

/// Builds the layer a configuration describes, on `backend`; `file` names
/// the configuration in errors.
///
/// ```
/// use throttle_axum::{MemoryBackend, from_config};
/// use throttle_config::GatewayConfig;
///
/// let config = GatewayConfig::parse("gateway.toml", r#"
///     [[rules]]
///     name = "ip"
///     key = "ip"
///     limit = 100
///     period_secs = 60
/// "#, None)?;
/// let layer = from_config::layer(&config, "gateway.toml", MemoryBackend::default())?;
/// assert_eq!(layer.rules().len(), 1);
/// # Ok::<(), throttle_config::ConfigFileError>(())
/// ```
pub fn layer(
    config: &GatewayConfig,
    file: &str,
    backend: impl Backend,
) -> Result<ThrottleLayer, ConfigFileError> {
    let responder = HttpResponder::new().ietf_headers(config.headers == HeaderStyle::Ietf);
    ThrottleLayer::with_responder(policy(config, file)?, backend, responder)
        .map_err(|e| ConfigFileError::from_rule_error(file, &e))
}

/// The policy a configuration describes (its rules, in file order).
pub fn policy(config: &GatewayConfig, file: &str) -> Result<Policy, ConfigFileError> {
    let mut policy = Policy::new();
    for rule in &config.rules {
        let mut bound = rule.rule.clone();
        if !rule.tiers.is_empty() {
            bound = bound.tiers(tier_keys(rule, file)?);
        }
        if rule.shadow {
            bound = bound.shadow();
        }
        policy = policy.rule(bound, Dyn(extractor(config, rule, file)?));
    }
    Ok(policy)
}

fn extractor(
    config: &GatewayConfig,
    rule: &RuleConfig,
    file: &str,
) -> Result<Box<dyn KeyExtractor>, ConfigFileError> {
    let key = match (&rule.key, &rule.routes) {
        // Keyed by route and limited to some: the route extractor does both.
        (KeySpec::Route, Some(routes)) => return Ok(Box::new(Route::only(routes.clone()))),
        (spec, _) => part(config, spec, rule, file)?,
    };
    Ok(match &rule.routes {
        Some(routes) => Box::new(OnlyRoutes {
            routes: Route::only(routes.clone()),
            key,
        }),
        None => key,
    })
}

fn part(
    config: &GatewayConfig,
    spec: &KeySpec,
    rule: &RuleConfig,
    file: &str,
) -> Result<Box<dyn KeyExtractor>, ConfigFileError> {
    Ok(match spec {
        KeySpec::Ip {
            ipv4_prefix,
            ipv6_prefix,
        } => {
            let mut ip = ClientIp::default()
                .ipv4_prefix(*ipv4_prefix)
                .ipv6_prefix(*ipv6_prefix)
                .trusted_proxies(config.trusted_proxies.iter().map(ToString::to_string));
            if let Some(hops) = config.proxy_hops {
                ip = ip.trusted_hops(usize::from(hops));
            }
            Box::new(ip)
        }
        KeySpec::Header(name) => Box::new(Header::new(name)),
        KeySpec::Route => Box::new(Route::template()),
        KeySpec::Global => Box::new(Global),
        KeySpec::UserAgent => Box::new(UserAgentHash),
        KeySpec::Jwt(claim) => Box::new(jwt(config, claim, rule, file)?),
        #[cfg(feature = "tls")]
        KeySpec::TlsFingerprint => Box::new(throttle_tls::TlsFingerprint::ja4()),
        #[cfg(not(feature = "tls"))]
        KeySpec::TlsFingerprint => {
            return Err(ConfigFileError::in_file(
                file,
                Some(rule.rule.name()),
                "key",
                "tls-fingerprint keys need throttle-axum's `tls` feature",
            ));
        }
        KeySpec::Composite(parts) => Box::new(AllOf(
            parts
                .iter()
                .map(|p| part(config, p, rule, file))
                .collect::<Result<_, _>>()?,
        )),
    })
}

/// The `[jwt]` verifier, keyed by `claim`.
fn jwt(
    config: &GatewayConfig,
    claim: &str,
    rule: &RuleConfig,
    file: &str,
) -> Result<Jwt, ConfigFileError> {
    let name = Some(rule.rule.name());
    let Some(j) = &config.jwt else {
        return Err(ConfigFileError::in_file(
            file,
            name,
            "key",
            "a jwt key needs a [jwt] table",
        ));
    };
    let pem = || {
        let path = j.public_key_file.as_ref().ok_or_else(|| {
            ConfigFileError::in_file(file, None, "jwt.public_key_file", "is missing")
        })?;
        std::fs::read(path).map_err(|e| {
            ConfigFileError::in_file(
                file,
                None,
                "jwt.public_key_file",
                format!("cannot be read: {e}"),
            )
        })
    };
    let verifier = match j.algorithm.as_str() {
        "HS256" => Jwt::hs256(j.secret.clone().unwrap_or_default()),
        "RS256" => Jwt::rs256_pem(pem()?),
        _ => Jwt::es256_pem(pem()?),
    };
    let mut verifier = verifier.claim(claim);
    if let Some(aud) = &j.audience {
        verifier = verifier.audience([aud.as_str()]);
    }
    if let Some(iss) = &j.issuer {
        verifier = verifier.issuer([iss.as_str()]);
    }
    Ok(verifier)
}

/// The keys of a rule's tiers as its extractor makes them: an address
/// under the rule's prefix, a header's value, a route template or a claim
/// as written.
fn tier_keys(rule: &RuleConfig, file: &str) -> Result<Vec<(Key, Quota)>, ConfigFileError> {
    let name = Some(rule.rule.name());
    rule.tiers
        .iter()
        .map(|(written, quota)| {
            let key = match &rule.key {
                KeySpec::Ip {
                    ipv4_prefix,
                    ipv6_prefix,
                } => {
                    let ip: IpAddr = written.parse().map_err(|_| {
                        ConfigFileError::in_file(
                            file,
                            name,
                            "tiers",
                            format!("{written:?} is not an IP address (the rule is keyed by ip)"),
                        )
                    })?;
                    IpPrefix::new()
                        .ipv4(*ipv4_prefix)
                        .ipv6(*ipv6_prefix)
                        .key_of(ip)
                }
                // A fingerprint's tier is its JA4 as written (a known
                // scraper's stack can get less).
                KeySpec::Header(_) | KeySpec::Route | KeySpec::Jwt(_) | KeySpec::TlsFingerprint => {
                    Key::new(written)
                }
                KeySpec::UserAgent | KeySpec::Global | KeySpec::Composite(_) => {
                    return Err(ConfigFileError::in_file(
                        file,
                        name,
                        "tiers",
                        "apply only to keys by ip, header, route, jwt or tls-fingerprint",
                    ));
                }
            };
            Ok((key, *quota))
        })
        .collect()
}

/// Applies `key` only on some routes; other requests skip the rule.
struct OnlyRoutes {
    routes: Route,
    key: Box<dyn KeyExtractor>,
}

impl KeyExtractor for OnlyRoutes {
    fn extract(&self, req: &Parts) -> Extracted {
        match self.routes.extract(req) {
            Extracted::Key(_) => self.key.extract(req),
            other => other,
        }
    }

    fn validate(&self) -> Result<(), throttle_core::ConfigError> {
        self.routes.validate()?;
        self.key.validate()
    }

    fn on_missing(&self) -> MissingKey {
        self.key.on_missing()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        self.key.kind()
    }
}

/// A composite key of any number of parts (every part must be found), as
/// the tuples build it.
struct AllOf(Vec<Box<dyn KeyExtractor>>);

impl KeyExtractor for AllOf {
    fn extract(&self, req: &Parts) -> Extracted {
        let mut keys = Vec::with_capacity(self.0.len());
        for part in &self.0 {
            match part.extract(req) {
                Extracted::Key(k) => keys.push(k),
                other => return other,
            }
        }
        // Digest parts are marked so a raw part can't imitate one.
        let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * keys.len());
        for key in &keys {
            parts.push(if key.is_digest() { b"h" } else { b"r" });
            parts.push(key.as_bytes());
        }
        Extracted::Key(Key::from_parts(&parts))
    }

    fn validate(&self) -> Result<(), throttle_core::ConfigError> {
        self.0.iter().try_for_each(|p| p.validate())
    }

    fn on_missing(&self) -> MissingKey {
        // As the tuples: a missing part is the client's (400), unless every
        // part can only be missing through a server misconfiguration.
        let all: Vec<MissingKey> = self.0.iter().map(|p| p.on_missing()).collect();
        match all.first() {
            Some(first @ MissingKey::Reject(s))
                if s.is_server_error() && all.iter().all(|m| m == first) =>
            {
                *first
            }
            _ => MissingKey::default(),
        }
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        let kinds: Vec<_> = self.0.iter().map(|p| p.kind()).collect();
        kinds.join("+").into()
    }
}

/// A boxed extractor, as a policy takes one.
struct Dyn(Box<dyn KeyExtractor>);

impl KeyExtractor for Dyn {
    fn extract(&self, req: &Parts) -> Extracted {
        self.0.extract(req)
    }

    fn validate(&self) -> Result<(), throttle_core::ConfigError> {
        self.0.validate()
    }

    fn on_missing(&self) -> MissingKey {
        self.0.on_missing()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        self.0.kind()
    }
}
