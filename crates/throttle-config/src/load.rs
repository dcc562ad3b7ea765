//! Reading and validating a file: every error names the file, the rule and
//! the field, at the line and column of the offending value.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use throttle_core::{Algorithm, FailurePolicy, Quota, Rule};
use toml::Spanned;

use crate::error::ConfigFileError;
use crate::file;
use crate::model::{
    BackendConfig, BackendKind, Cidr, GatewayConfig, HeaderStyle, InvalidHello, JwtConfig, KeySpec,
    RuleConfig, ServerConfig, TlsConfig, TlsIdentity,
};

/// The most rules one file may hold.
pub const MAX_RULES: usize = 256;

/// The most tiers one rule may hold.
pub const MAX_TIER_KEYS: usize = 10_000;

/// The most parts of a composite key.
pub const MAX_KEY_PARTS: usize = 4;

/// The largest file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

impl GatewayConfig {
    /// Reads and validates the file at `path`. Relative paths inside it
    /// (`[jwt] public_key_file`, `[tls] cert_file` and `key_file`) are taken
    /// from the file's directory.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigFileError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let too_big = std::fs::metadata(path)
            .map(|m| m.len() > MAX_FILE_BYTES)
            .unwrap_or(false);
        if too_big {
            return Err(ConfigFileError::new(
                &name,
                "file",
                format!("is larger than {MAX_FILE_BYTES} bytes"),
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigFileError::new(&name, "file", format!("cannot be read: {e}")))?;
        Self::parse(&name, &text, path.parent())
    }

    /// Validates `text`, named `name` in errors; relative paths are taken
    /// from `dir` (the working directory if `None`).
    ///
    /// ```
    /// use throttle_config::{GatewayConfig, KeySpec};
    ///
    /// let config = GatewayConfig::parse("gateway.toml", r#"
    ///     [[rules]]
    ///     name = "ip"
    ///     key = "ip"
    ///     limit = 100
    ///     period_secs = 60
    /// "#, None)?;
    /// assert_eq!(config.rules[0].rule.quota().limit(), 100);
    /// assert_eq!(config.rules[0].key, KeySpec::Ip { ipv4_prefix: 32, ipv6_prefix: 64 });
    ///
    /// let bad = GatewayConfig::parse("gateway.toml", "[[rules]]\nname = \"ip\"\nkey = \"ip\"\nlimit = 0\nperiod_secs = 60\n", None);
    /// assert_eq!(bad.unwrap_err().to_string(),
    ///     "gateway.toml:4:9: rule \"ip\", field \"limit\": must be at least 1 (got 0)");
    /// # Ok::<(), throttle_config::ConfigFileError>(())
    /// ```
    pub fn parse(name: &str, text: &str, dir: Option<&Path>) -> Result<Self, ConfigFileError> {
        let raw: file::File = toml::from_str(text).map_err(|e| {
            let field = field_of_message(e.message());
            ConfigFileError::new(name, field, e.message().trim().to_owned()).at(text, e.span())
        })?;
        Loader { name, text, dir }.config(raw)
    }
}

/// The field a parser message is about (`unknown field `limt``, `missing
/// field `limit``), or `file`.
fn field_of_message(message: &str) -> String {
    for marker in ["unknown field `", "missing field `", "duplicate key `"] {
        if let Some(rest) = message.split(marker).nth(1)
            && let Some(field) = rest.split('`').next()
        {
            return field.to_owned();
        }
    }
    "file".to_owned()
}

struct Loader<'a> {
    name: &'a str,
    text: &'a str,
    dir: Option<&'a Path>,
}

type Result<T, E = ConfigFileError> = std::result::Result<T, E>;

/// The tables that some keys need, present or not.
#[derive(Clone, Copy)]
struct Tables {
    jwt: bool,
    tls: bool,
}

impl Loader<'_> {
    fn err(&self, field: &str, span: Range<usize>, message: impl Into<String>) -> ConfigFileError {
        ConfigFileError::new(self.name, field, message).at(self.text, Some(span))
    }

    fn config(&self, raw: file::File) -> Result<GatewayConfig> {
        let listen = raw
            .listen
            .as_ref()
            .map(|l| self.socket_addr("listen", l))
            .transpose()?;
        let trusted_proxies = raw
            .trusted_proxies
            .iter()
            .map(|c| self.cidr(c))
            .collect::<Result<Vec<_>>>()?;
        let proxy_hops = raw
            .proxy_hops
            .as_ref()
            .map(|h| self.int("proxy_hops", h, 1, 32).map(|h| h as u8))
            .transpose()?;
        let headers = match raw.headers.as_ref() {
            None => HeaderStyle::default(),
            Some(h) => match h.get_ref().as_str() {
                "x-ratelimit" => HeaderStyle::XRateLimit,
                "ietf" => HeaderStyle::Ietf,
                other => {
                    return Err(self.err(
                        "headers",
                        h.span(),
                        format!("must be \"x-ratelimit\" or \"ietf\" (got {other:?})"),
                    ));
                }
            },
        };
        let metrics_listen = raw
            .metrics
            .as_ref()
            .map(|m| self.socket_addr("metrics.listen", &m.listen))
            .transpose()?;
        let mut server = ServerConfig::default();
        if let Some(table) = &raw.server {
            if let Some(v) = &table.max_connections {
                server.max_connections =
                    self.int("server.max_connections", v, 1, 1_000_000)? as usize;
            }
            if let Some(v) = &table.header_timeout_secs {
                server.header_timeout = Duration::from_secs(self.int(
                    "server.header_timeout_secs",
                    v,
                    1,
                    3_600,
                )? as u64);
            }
        }
        let backend = match &raw.backend {
            Some(b) => self.backend(b.get_ref())?,
            None => BackendConfig::default(),
        };
        let jwt = raw
            .jwt
            .as_ref()
            .map(|j| self.jwt(j.get_ref()))
            .transpose()?;
        let tls = raw
            .tls
            .as_ref()
            .map(|t| self.tls(t.get_ref(), t.span()))
            .transpose()?;
        let tables = Tables {
            jwt: jwt.is_some(),
            tls: tls.is_some(),
        };
        if raw.rules.is_empty() {
            return Err(ConfigFileError::new(
                self.name,
                "rules",
                "has no [[rules]]: a gateway without rules limits nothing",
            ));
        }
        if raw.rules.len() > MAX_RULES {
            return Err(self.err(
                "rules",
                raw.rules[MAX_RULES].span(),
                format!("at most {MAX_RULES} rules"),
            ));
        }
        let mut names = HashSet::new();
        let mut rules = Vec::with_capacity(raw.rules.len());
        for rule in &raw.rules {
            let rule = rule.get_ref();
            let name = rule.name.get_ref();
            let config = self.rule(rule, tables).map_err(|e| e.in_rule(Some(name)))?;
            if !names.insert(name.clone()) {
                return Err(self
                    .err("name", rule.name.span(), "is used by an earlier rule")
                    .in_rule(Some(name)));
            }
            rules.push(config);
        }
        Ok(GatewayConfig {
            listen,
            trusted_proxies,
            proxy_hops,
            headers,
            metrics_listen,
            server,
            backend,
            jwt,
            tls,
            rules,
        })
    }

    fn socket_addr(&self, field: &str, value: &Spanned<String>) -> Result<SocketAddr> {
        value.get_ref().parse().map_err(|_| {
            self.err(
                field,
                value.span(),
                format!(
                    "must be an address and port like \"127.0.0.1:8080\" (got {:?})",
                    value.get_ref()
                ),
            )
        })
    }

    fn cidr(&self, value: &Spanned<String>) -> Result<Cidr> {
        let text = value.get_ref().trim();
        let bad = |why: &str| {
            self.err(
                "trusted_proxies",
                value.span(),
                format!("{text:?} {why} (write e.g. \"10.0.0.0/8\" or \"fd00::/8\")"),
            )
        };
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad("is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => return Err(bad(&format!("needs a prefix length from 0 to {max}"))),
            },
        };
        Ok(Cidr { addr, prefix })
    }

    fn int(&self, field: &str, value: &Spanned<i64>, min: i64, max: i64) -> Result<i64> {
        let v = *value.get_ref();
        if v < min {
            return Err(self.err(
                field,
                value.span(),
                format!("must be at least {min} (got {v})"),
            ));
        }
        if v > max {
            return Err(self.err(
                field,
                value.span(),
                format!("must be at most {max} (got {v})"),
            ));
        }
        Ok(v)
    }

    fn backend(&self, raw: &file::Backend) -> Result<BackendConfig> {
        let kind = match raw.kind.get_ref().as_str() {
            "memory" => BackendKind::Memory,
            "redis-exact" => BackendKind::RedisExact,
            "redis-approximate" => BackendKind::RedisApproximate,
            "redis-leased" => BackendKind::RedisLeased,
            other => {
                return Err(self.err(
                    "backend.kind",
                    raw.kind.span(),
                    format!(
                        "must be memory, redis-exact, redis-approximate or redis-leased (got {other:?})"
                    ),
                ));
            }
        };
        let redis = kind != BackendKind::Memory;
        // A setting that does nothing for this backend is an error, not a
        // silent no-op: whoever wrote it expected it to matter.
        let only = |field: &str, span: Range<usize>, allowed: bool, for_what: &str| {
            if allowed {
                Ok(())
            } else {
                Err(self.err(
                    &format!("backend.{field}"),
                    span,
                    format!("applies only to {for_what}, not to {}", raw.kind.get_ref()),
                ))
            }
        };
        if let Some(v) = &raw.url {
            only("url", v.span(), redis, "Redis backends")?;
            if !v.get_ref().starts_with("redis://") && !v.get_ref().starts_with("rediss://") {
                return Err(self.err(
                    "backend.url",
                    v.span(),
                    "must start with redis:// or rediss://",
                ));
            }
        }
        if let Some(v) = &raw.cluster {
            only("cluster", v.span(), redis, "Redis backends")?;
            if v.get_ref().is_empty() {
                return Err(self.err("backend.cluster", v.span(), "needs at least one node URL"));
            }
            if raw.url.is_some() {
                return Err(self.err(
                    "backend.cluster",
                    v.span(),
                    "give either url (one Redis) or cluster (seed nodes), not both",
                ));
            }
        }
        if redis && raw.url.is_none() && raw.cluster.is_none() {
            return Err(self.err(
                "backend.url",
                raw.kind.span(),
                "a Redis backend needs url (or cluster)",
            ));
        }
        let mut config = BackendConfig {
            kind,
            url: raw.url.as_ref().map(|v| v.get_ref().clone()),
            cluster: raw
                .cluster
                .as_ref()
                .map(|v| v.get_ref().clone())
                .unwrap_or_default(),
            ..BackendConfig::default()
        };
        if let Some(v) = &raw.key_prefix {
            only("key_prefix", v.span(), redis, "Redis backends")?;
            config.key_prefix = Some(v.get_ref().clone());
        }
        if let Some(v) = &raw.command_timeout_ms {
            only("command_timeout_ms", v.span(), redis, "Redis backends")?;
            let ms = self.int("backend.command_timeout_ms", v, 1, 60_000)?;
            config.command_timeout = Some(Duration::from_millis(ms as u64));
        }
        if let Some(v) = &raw.fleet_size {
            only("fleet_size", v.span(), redis, "Redis backends")?;
            config.fleet_size = Some(self.int("backend.fleet_size", v, 1, 100_000)? as u32);
        }
        if let Some(v) = &raw.spans {
            only(
                "spans",
                v.span(),
                kind == BackendKind::RedisApproximate,
                "redis-approximate",
            )?;
            config.spans = Some(self.int("backend.spans", v, 2, 1_000)? as u32);
        }
        if let Some(v) = &raw.batch {
            only(
                "batch",
                v.span(),
                kind == BackendKind::RedisLeased,
                "redis-leased",
            )?;
            config.batch = Some(self.int("backend.batch", v, 1, 4_096)? as u64);
        }
        if let Some(v) = &raw.max_keys {
            only("max_keys", v.span(), kind == BackendKind::Memory, "memory")?;
            config.max_keys = Some(self.int("backend.max_keys", v, 1, 1 << 32)? as usize);
        }
        Ok(config)
    }

    fn jwt(&self, raw: &file::Jwt) -> Result<JwtConfig> {
        let algorithm = raw.algorithm.get_ref().as_str();
        let hmac = match algorithm {
            "HS256" => true,
            "RS256" | "ES256" => false,
            other => {
                return Err(self.err(
                    "jwt.algorithm",
                    raw.algorithm.span(),
                    format!(
                        "must be HS256, RS256 or ES256 (got {other:?}; `none` is never accepted)"
                    ),
                ));
            }
        };
        let mut config = JwtConfig {
            algorithm: algorithm.to_owned(),
            secret: None,
            public_key_file: None,
            audience: raw.audience.as_ref().map(|v| v.get_ref().clone()),
            issuer: raw.issuer.as_ref().map(|v| v.get_ref().clone()),
        };
        match (hmac, &raw.secret_env, &raw.public_key_file) {
            (true, Some(var), None) => {
                let secret = std::env::var_os(var.get_ref()).unwrap_or_default();
                if secret.is_empty() {
                    return Err(self.err(
                        "jwt.secret_env",
                        var.span(),
                        format!("names {:?}, which is not set or empty", var.get_ref()),
                    ));
                }
                config.secret = Some(secret.into_encoded_bytes());
            }
            (false, None, Some(file)) => {
                let path = self.path(file.get_ref());
                if !path.is_file() {
                    return Err(self.err(
                        "jwt.public_key_file",
                        file.span(),
                        format!("{:?} is not a readable file", file.get_ref()),
                    ));
                }
                config.public_key_file = Some(path);
            }
            (true, _, _) => {
                return Err(self.err(
                    "jwt.secret_env",
                    raw.algorithm.span(),
                    "HS256 needs secret_env (the environment variable holding the secret) and no public_key_file",
                ));
            }
            (false, _, _) => {
                return Err(self.err(
                    "jwt.public_key_file",
                    raw.algorithm.span(),
                    format!(
                        "{algorithm} needs public_key_file (a PEM public key) and no secret_env"
                    ),
                ));
            }
        }
        Ok(config)
    }

    /// A path written in the file, taken from the file's directory.
    fn path(&self, written: &str) -> std::path::PathBuf {
        match self.dir {
            Some(dir) => dir.join(written),
            None => written.into(),
        }
    }

    fn tls(&self, raw: &file::Tls, span: Range<usize>) -> Result<TlsConfig> {
        let self_signed = raw.self_signed.as_ref().is_some_and(|v| *v.get_ref());
        let identity = match (&raw.cert_file, &raw.key_file, self_signed) {
            (Some(cert), Some(key), false) => self.pem_identity(cert, key)?,
            (None, None, true) => TlsIdentity::SelfSigned,
            (Some(cert), _, true) | (_, Some(cert), true) => {
                return Err(self.err(
                    "tls.self_signed",
                    cert.span(),
                    "give either cert_file and key_file or self_signed = true, not both",
                ));
            }
            (Some(_), None, false) => {
                return Err(self.err(
                    "tls.key_file",
                    span,
                    "cert_file needs key_file (the certificate's PEM private key)",
                ));
            }
            (None, _, false) => {
                return Err(self.err(
                    "tls.cert_file",
                    span,
                    "[tls] needs cert_file and key_file (PEM), or self_signed = true to try it out",
                ));
            }
        };
        let handshake_timeout = match &raw.handshake_timeout_secs {
            None => Duration::from_secs(5),
            Some(v) => {
                Duration::from_secs(self.int("tls.handshake_timeout_secs", v, 1, 60)? as u64)
            }
        };
        let invalid_hello = match raw.invalid_hello.as_ref() {
            None => InvalidHello::default(),
            Some(v) => match v.get_ref().as_str() {
                "close" => InvalidHello::Close,
                "proceed" => InvalidHello::Proceed,
                other => {
                    return Err(self.err(
                        "tls.invalid_hello",
                        v.span(),
                        format!("must be \"close\" or \"proceed\" (got {other:?})"),
                    ));
                }
            },
        };
        Ok(TlsConfig {
            identity,
            handshake_timeout,
            invalid_hello,
        })
    }

    /// Reads and parses the PEM files now, so that a wrong file is an
    /// error pointing at its name in the configuration.
    fn pem_identity(&self, cert: &Spanned<String>, key: &Spanned<String>) -> Result<TlsIdentity> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};

        let cert_file = self.path(cert.get_ref());
        let key_file = self.path(key.get_ref());
        let unreadable = |field: &str, value: &Spanned<String>, e: &dyn std::fmt::Display| {
            self.err(
                field,
                value.span(),
                format!("{:?} cannot be read as PEM: {e}", value.get_ref()),
            )
        };
        let cert_chain = CertificateDer::pem_file_iter(&cert_file)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| unreadable("tls.cert_file", cert, &e))?;
        if cert_chain.is_empty() {
            return Err(self.err(
                "tls.cert_file",
                cert.span(),
                format!("{:?} holds no CERTIFICATE block", cert.get_ref()),
            ));
        }
        let key_der = PrivateKeyDer::from_pem_file(&key_file)
            .map_err(|e| unreadable("tls.key_file", key, &e))?;
        Ok(TlsIdentity::Pem {
            cert_file,
            key_file,
            cert_chain,
            key: std::sync::Arc::new(key_der),
        })
    }

    fn rule(&self, raw: &file::Rule, tables: Tables) -> Result<RuleConfig> {
        let limit = self.int("limit", &raw.limit, 1, throttle_core::limits::MAX_LIMIT as i64)? as u64;
        let period = self.int(
            "period_secs",
            &raw.period_secs,
            1,
            throttle_core::limits::MAX_PERIOD.as_secs() as i64,
        )? as u64;
        let mut quota = Quota::new(limit, Duration::from_secs(period));
        let algorithm = match raw.algorithm.as_ref() {
            None => Algorithm::default(),
            Some(a) => Algorithm::ALL
                .into_iter()
                .find(|x| x.name() == a.get_ref())
                .ok_or_else(|| {
                    let names: Vec<&str> = Algorithm::ALL.iter().map(|x| x.name()).collect();
                    self.err(
                        "algorithm",
                        a.span(),
                        format!(
                            "must be one of {} (got {:?})",
                            names.join(", "),
                            a.get_ref()
                        ),
                    )
                })?,
        };
        if let Some(b) = &raw.burst {
            if !algorithm.uses_burst() {
                return Err(self.err(
                    "burst",
                    b.span(),
                    format!(
                        "applies only to token_bucket and leaky_bucket, not {}",
                        algorithm.name()
                    ),
                ));
            }
            quota =
                quota.with_burst(self.int("burst", b, 1, throttle_core::limits::MAX_LIMIT as i64)? as u64);
        }
        let mut rule = Rule::new(raw.name.get_ref(), quota).algorithm_is(algorithm);
        if let Some(c) = &raw.cost {
            rule = rule.cost(self.int("cost", c, 1, i64::from(u32::MAX))? as u32);
        }
        if let Some(f) = &raw.failure {
            rule = rule.on_failure(match f.get_ref().as_str() {
                "open" => FailurePolicy::FailOpen,
                "closed" => FailurePolicy::FailClosed,
                "local" => FailurePolicy::LocalFallback,
                other => {
                    return Err(self.err(
                        "failure",
                        f.span(),
                        format!("must be open, closed or local (got {other:?})"),
                    ));
                }
            });
        }
        rule.validate().map_err(|e| {
            let (field, span) = match e.field() {
                "name" => ("name", raw.name.span()),
                "cost" => (
                    "cost",
                    raw.cost.as_ref().map_or(raw.name.span(), Spanned::span),
                ),
                "quota.limit" => ("limit", raw.limit.span()),
                "quota.period" => ("period_secs", raw.period_secs.span()),
                "quota.burst" => (
                    "burst",
                    raw.burst.as_ref().map_or(raw.limit.span(), Spanned::span),
                ),
                _ => ("name", raw.name.span()),
            };
            self.err(field, span, e.reason().to_owned())
        })?;
        let key = self.key(raw, tables)?;
        let routes = match &raw.routes {
            None => None,
            Some(list) => {
                if list.get_ref().is_empty() {
                    return Err(self.err(
                        "routes",
                        list.span(),
                        "needs at least one route template",
                    ));
                }
                let mut routes = Vec::with_capacity(list.get_ref().len());
                for r in list.get_ref() {
                    if !r.get_ref().starts_with('/') {
                        return Err(self.err(
                            "routes",
                            r.span(),
                            format!(
                                "{:?} is not a route template: it must start with '/'",
                                r.get_ref()
                            ),
                        ));
                    }
                    routes.push(r.get_ref().clone());
                }
                Some(routes)
            }
        };
        let mut tiers = Vec::new();
        if let Some(map) = &raw.tiers {
            if map.get_ref().len() > MAX_TIER_KEYS {
                return Err(self.err("tiers", map.span(), format!("at most {MAX_TIER_KEYS} keys")));
            }
            for (key, limit) in map.get_ref() {
                if key.is_empty() {
                    return Err(self.err("tiers", map.span(), "a tier's key must not be empty"));
                }
                let limit = self.int("tiers", limit, 1, throttle_core::limits::MAX_LIMIT as i64)? as u64;
                let mut q = Quota::new(limit, quota.period());
                if let Some(b) = quota.explicit_burst() {
                    // The burst scales with the tier's limit.
                    q = q.with_burst(
                        (u128::from(b) * u128::from(limit) / u128::from(quota.limit())).max(1)
                            as u64,
                    );
                }
                tiers.push((key.clone(), q));
            }
        }
        Ok(RuleConfig {
            rule,
            key,
            routes,
            tiers,
            shadow: raw.shadow,
        })
    }

    fn key(&self, raw: &file::Rule, tables: Tables) -> Result<KeySpec> {
        let mut uses_ip = false;
        let key = match raw.key.get_ref().as_str() {
            "composite" => {
                let Some(parts) = &raw.parts else {
                    return Err(self.err(
                        "parts",
                        raw.key.span(),
                        "a composite key needs parts, e.g. [\"ip\", \"user-agent\"]",
                    ));
                };
                let list = parts.get_ref();
                if !(2..=MAX_KEY_PARTS).contains(&list.len()) {
                    return Err(self.err(
                        "parts",
                        parts.span(),
                        format!(
                            "a composite key has 2 to {MAX_KEY_PARTS} parts (got {})",
                            list.len()
                        ),
                    ));
                }
                let mut specs = Vec::with_capacity(list.len());
                for part in list {
                    if part.get_ref() == "composite" {
                        return Err(self.err(
                            "parts",
                            part.span(),
                            "a part cannot itself be composite",
                        ));
                    }
                    specs.push(self.simple_key("parts", part, raw, tables, &mut uses_ip)?);
                }
                KeySpec::Composite(specs)
            }
            _ => {
                if let Some(parts) = &raw.parts {
                    return Err(self.err(
                        "parts",
                        parts.span(),
                        "applies only to key = \"composite\"",
                    ));
                }
                self.simple_key("key", &raw.key, raw, tables, &mut uses_ip)?
            }
        };
        for (field, v) in [
            ("ipv4_prefix", &raw.ipv4_prefix),
            ("ipv6_prefix", &raw.ipv6_prefix),
        ] {
            if let Some(v) = v
                && !uses_ip
            {
                return Err(self.err(field, v.span(), "applies only to keys by ip"));
            }
        }
        Ok(key)
    }

    fn simple_key(
        &self,
        field: &str,
        value: &Spanned<String>,
        raw: &file::Rule,
        tables: Tables,
        uses_ip: &mut bool,
    ) -> Result<KeySpec> {
        let text = value.get_ref().as_str();
        let spec = if text == "ip" {
            *uses_ip = true;
            KeySpec::Ip {
                ipv4_prefix: raw
                    .ipv4_prefix
                    .as_ref()
                    .map(|v| self.int("ipv4_prefix", v, 1, 32))
                    .transpose()?
                    .unwrap_or(32) as u8,
                ipv6_prefix: raw
                    .ipv6_prefix
                    .as_ref()
                    .map(|v| self.int("ipv6_prefix", v, 1, 128))
                    .transpose()?
                    .unwrap_or(64) as u8,
            }
        } else if let Some(name) = text.strip_prefix("header:") {
            let ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !ok {
                return Err(self.err(
                    field,
                    value.span(),
                    format!("{name:?} is not a header name"),
                ));
            }
            KeySpec::Header(name.to_ascii_lowercase())
        } else if let Some(claim) = text.strip_prefix("jwt:") {
            if claim.is_empty() {
                return Err(self.err(field, value.span(), "jwt: needs a claim name, e.g. jwt:sub"));
            }
            if !tables.jwt {
                return Err(self.err(
                    field,
                    value.span(),
                    "a jwt key needs a [jwt] table saying how tokens are verified",
                ));
            }
            KeySpec::Jwt(claim.to_owned())
        } else {
            match text {
                "route" => KeySpec::Route,
                "user-agent" => KeySpec::UserAgent,
                "global" => KeySpec::Global,
                "tls-fingerprint" if !tables.tls => {
                    return Err(self.err(
                        field,
                        value.span(),
                        "a tls-fingerprint key needs a [tls] table: fingerprints come from the TLS handshake, which a plain-HTTP gateway never sees",
                    ));
                }
                "tls-fingerprint" => KeySpec::TlsFingerprint,
                other => {
                    return Err(self.err(
                        field,
                        value.span(),
                        format!(
                            "must be ip, header:<name>, route, jwt:<claim>, user-agent, tls-fingerprint, global or composite (got {other:?})"
                        ),
                    ));
                }
            }
        };
        Ok(spec)
    }
}
