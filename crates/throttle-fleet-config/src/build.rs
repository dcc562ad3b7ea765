//! A [`GatewayConfig`] as a policy: each rule's key source becomes an
//! extractor, its routes a gate. What depends on the server (where the
//! peer address is, what a route is, how denials are answered) comes from
//! its [`Integration`].

use std::net::IpAddr;

use throttle_fleet_core::{Class, Key, Quota, backend::Backend};
use throttle_fleet_tower::RequestHead;
use throttle_fleet_tower::key::{
    AllOf, ClientAddr, Extracted, Global, Header, IpPrefix, Jwt, PeerSource, UserAgentHash,
};
use throttle_fleet_tower::responder::Responder;
use throttle_fleet_tower::{KeyExtractor, Limit, MissingKey, Policy, ThrottleLayer};

use crate::error::ConfigFileError;
use crate::model::{ClassSpec, GatewayConfig, KeySpec, RuleConfig};

/// What a server integration supplies to turn a file into rules: where
/// `ip` keys find the peer address, what a `route` is, and how denials are
/// answered. `throttle-fleet-axum` and `throttle-fleet-tonic` each have one (behind
/// their `config` feature); another server can write its own.
pub trait Integration {
    /// Where the connection's peer address is in a request.
    type Peer: PeerSource;
    /// How denials are answered.
    type Responder: Responder;
    /// How the layer's responses carry their bodies
    /// ([`ResponseBodies`](throttle_fleet_tower::ResponseBodies):
    /// `throttle_fleet_tower::Wrap` unless the server has a body type of its
    /// own).
    type Bodies: Send + Sync + 'static;

    /// The peer address source of `ip` keys (proxies, hops and prefixes
    /// are set from the file).
    fn peer(&self) -> Self::Peer;

    /// The extractor of `route` keys: with `only`, one that keys by route
    /// and skips the rule on every route not listed; without, one count
    /// per route. A rule with `routes` and another key gates with it.
    fn route(&self, only: Option<&[String]>) -> Box<dyn KeyExtractor>;

    /// The responder the file asks for (its `headers` style).
    fn responder(&self, config: &GatewayConfig) -> Self::Responder;
}

/// Builds the layer a configuration describes, on `backend`, for the
/// server `integration` describes; `file` names the configuration in
/// errors.
pub fn layer<I: Integration>(
    config: &GatewayConfig,
    file: &str,
    backend: impl Backend,
    integration: &I,
) -> Result<ThrottleLayer<I::Responder, I::Bodies>, ConfigFileError> {
    let responder = integration.responder(config);
    ThrottleLayer::with_responder(policy(config, file, integration)?, backend, responder)
        .map_err(|e| ConfigFileError::from_rule_error(file, &e))
}

/// The policy a configuration describes (its rules, in file order), for
/// the server `integration` describes.
pub fn policy<I: Integration>(
    config: &GatewayConfig,
    file: &str,
    integration: &I,
) -> Result<Policy, ConfigFileError> {
    let mut policy = Policy::new();
    for rule in &config.rules {
        let mut bound = rule.rule.clone();
        if !rule.tiers.is_empty() {
            bound = bound.with_tiers(tier_keys(rule, file)?);
        }
        if rule.shadow {
            bound = bound.shadow();
        }
        let mut limit = Limit::new(bound, extractor(config, rule, file, integration)?);
        if let Some(class) = &rule.class {
            limit = limit.class_by(class_of(config, class, rule, file, integration)?);
        }
        // An adaptive limit is this instance's own, measured on its own
        // requests: its slots are counted here, whatever the file's backend.
        if rule
            .rule
            .in_flight_limit()
            .is_some_and(|c| c.adaptive.is_some())
        {
            limit = limit.backend(throttle_fleet_core::memory::MemoryBackend::default());
        }
        policy = policy.limit(limit);
    }
    Ok(policy)
}

/// A request's class under `rule`: the value its `class` source reads,
/// looked up among the values its `classes` name (as the source's keys
/// make them, like tiers); `default` when missing or not listed.
fn class_of<I: Integration>(
    config: &GatewayConfig,
    class: &ClassSpec,
    rule: &RuleConfig,
    file: &str,
    integration: &I,
) -> Result<impl Fn(&RequestHead<'_>) -> Class + Send + Sync + 'static, ConfigFileError> {
    let source = part(config, &class.key, rule, file, integration)?;
    let values: Vec<(Key, Class)> = class
        .values
        .iter()
        .map(|(written, c)| (Key::new(written), *c))
        .collect();
    Ok(move |req: &RequestHead<'_>| match source.extract(req) {
        Extracted::Key(key) => values
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(Class::Default, |(_, c)| *c),
        _ => Class::Default,
    })
}

fn extractor<I: Integration>(
    config: &GatewayConfig,
    rule: &RuleConfig,
    file: &str,
    integration: &I,
) -> Result<Box<dyn KeyExtractor>, ConfigFileError> {
    let key = match (&rule.key, &rule.routes) {
        // Keyed by route and limited to some: the route extractor does both.
        (KeySpec::Route, Some(routes)) => return Ok(integration.route(Some(routes))),
        (spec, _) => part(config, spec, rule, file, integration)?,
    };
    Ok(match &rule.routes {
        Some(routes) => Box::new(OnlyRoutes {
            routes: integration.route(Some(routes)),
            key,
        }),
        None => key,
    })
}

/// The client address as the file sees it: the peer from `peer`, or what
/// the file's trusted proxies (`trusted_proxies`, `proxy_hops`) forwarded
/// for; the default prefixes (IPv4 `/32`, IPv6 `/64`). `ip` keys start
/// from it, and so does a server's per-client connection cap.
pub fn client_addr<P: PeerSource>(config: &GatewayConfig, peer: P) -> ClientAddr<P> {
    let ip = ClientAddr::new(peer)
        .trusted_proxies(config.trusted_proxies.iter().map(ToString::to_string));
    match config.proxy_hops {
        Some(hops) => ip.trusted_hops(usize::from(hops)),
        None => ip,
    }
}

fn part<I: Integration>(
    config: &GatewayConfig,
    spec: &KeySpec,
    rule: &RuleConfig,
    file: &str,
    integration: &I,
) -> Result<Box<dyn KeyExtractor>, ConfigFileError> {
    Ok(match spec {
        KeySpec::Ip {
            ipv4_prefix,
            ipv6_prefix,
        } => Box::new(
            client_addr(config, integration.peer())
                .ipv4_prefix(*ipv4_prefix)
                .ipv6_prefix(*ipv6_prefix),
        ),
        KeySpec::Header(name) => Box::new(Header::new(name)),
        KeySpec::Route => integration.route(None),
        KeySpec::Global => Box::new(Global),
        KeySpec::UserAgent => Box::new(UserAgentHash),
        KeySpec::Jwt(claim) => Box::new(jwt(config, claim, rule, file)?),
        #[cfg(feature = "tls")]
        KeySpec::TlsFingerprint => Box::new(throttle_fleet_tls::TlsFingerprint::ja4()),
        #[cfg(not(feature = "tls"))]
        KeySpec::TlsFingerprint => {
            return Err(ConfigFileError::in_file(
                file,
                Some(rule.rule.name()),
                "key",
                "tls-fingerprint keys need throttle-fleet-config's `tls` feature",
            ));
        }
        KeySpec::Descriptor(_) => return Err(served_by_envoy(rule, file)),
        KeySpec::Composite(parts) => Box::new(AllOf::new(
            parts
                .iter()
                .map(|p| part(config, p, rule, file, integration))
                .collect::<Result<Vec<_>, _>>()?,
        )),
    })
}
/// A descriptor rule given to a server's layer.
fn served_by_envoy(rule: &RuleConfig, file: &str) -> ConfigFileError {
    ConfigFileError::in_file(
        file,
        Some(rule.rule.name()),
        "descriptor",
        "is an Envoy descriptor: such a rule is served by the Envoy rate limit service (throttle-fleet-envoy), not by a server's layer",
    )
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
                KeySpec::Descriptor(_) => return Err(served_by_envoy(rule, file)),
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
    routes: Box<dyn KeyExtractor>,
    key: Box<dyn KeyExtractor>,
}

impl KeyExtractor for OnlyRoutes {
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        match self.routes.extract(req) {
            Extracted::Key(_) => self.key.extract(req),
            other => other,
        }
    }

    fn validate(&self) -> Result<(), throttle_fleet_core::ConfigError> {
        self.routes.validate()?;
        self.key.validate()
    }

    fn on_missing(&self) -> MissingKey {
        self.key.on_missing()
    }

    fn kind(&self) -> std::borrow::Cow<'static, str> {
        self.key.kind()
    }

    /// The key's; with a route given, an error if the rule does not apply
    /// to it.
    fn key_for(
        &self,
        inputs: &throttle_fleet_tower::key::KeyInputs,
    ) -> Option<Result<Key, String>> {
        if inputs.route.is_some()
            && let Some(Err(e)) = self.routes.key_for(inputs)
        {
            return Some(Err(e));
        }
        self.key.key_for(inputs)
    }
}
