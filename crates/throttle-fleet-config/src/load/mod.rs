//! Reading and validating a file: every error names the file, the rule and
//! the field, at the line and column of the offending value. This module
//! reads the file's top level; the backend, the JWT and TLS tables, the
//! gateway's own server settings and the rules each have a file.

mod admin;
mod backend;
mod backend_access;
mod rule;
mod shedding;

pub use rule::not_for_envoy;
mod secrets;
mod server;

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use toml::Spanned;

use crate::error::ConfigFileError;
use crate::file;
use crate::limits::{MAX_FILE_BYTES, MAX_RULES};
use crate::model::{BackendConfig, Cidr, GatewayConfig, HeaderStyle, RlsConfig};
use throttle_fleet_tower::server::ServeLimits;

impl GatewayConfig {
    /// Reads and validates the file at `path`. Relative paths inside it
    /// (`[jwt] public_key_file`, `[tls] cert_file` and `key_file`, `[admin]
    /// token_file`) are taken from the file's directory.
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
    /// use throttle_fleet_config::{GatewayConfig, KeySpec};
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
    /// # Ok::<(), throttle_fleet_config::ConfigFileError>(())
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
    pub(super) fn err(
        &self,
        field: &str,
        span: Range<usize>,
        message: impl Into<String>,
    ) -> ConfigFileError {
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
                "ietf-only" => HeaderStyle::IetfOnly,
                other => {
                    return Err(self.err(
                        "headers",
                        h.span(),
                        format!(
                            "must be \"x-ratelimit\", \"ietf\" or \"ietf-only\" (got {other:?})"
                        ),
                    ));
                }
            },
        };
        let metrics_listen = raw
            .metrics
            .as_ref()
            .map(|m| self.socket_addr("metrics.listen", &m.listen))
            .transpose()?;
        let server = match &raw.server {
            Some(table) => self.server(table)?,
            None => ServeLimits::default(),
        };
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
        let rls = raw.rls.as_ref().map(|r| self.rls(r)).transpose()?;
        let admin = raw
            .admin
            .as_ref()
            .map(|a| {
                let public = [
                    ("listen", listen),
                    ("metrics.listen", metrics_listen),
                    ("rls.listen", rls.map(|r| r.listen)),
                ];
                self.admin(a.get_ref(), a.span(), &public)
            })
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
            let span = rule.span();
            let rule = rule.get_ref();
            let name = rule.name.get_ref();
            let config = self
                .rule(rule, span, tables)
                .map_err(|e| e.in_rule(Some(name)))?;
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
            rls,
            admin,
            rules,
        })
    }

    /// The `[rls]` table.
    fn rls(&self, raw: &file::Rls) -> Result<RlsConfig> {
        let mut rls = RlsConfig::default();
        if let Some(l) = &raw.listen {
            rls.listen = self.socket_addr("rls.listen", l)?;
        }
        if let Some(r) = &raw.report_interval_secs {
            rls.report_interval =
                Duration::from_secs(self.int("rls.report_interval_secs", r, 1, 3600)? as u64);
        }
        let count = |field: &str, value: &Option<Spanned<i64>>, max: i64, into: &mut usize| {
            if let Some(v) = value {
                *into = self.int(field, v, 1, max)? as usize;
            }
            Ok::<_, crate::ConfigFileError>(())
        };
        count(
            "rls.max_connections",
            &raw.max_connections,
            1_000_000,
            &mut rls.max_connections,
        )?;
        count(
            "rls.max_connections_per_client",
            &raw.max_connections_per_client,
            1_000_000,
            &mut rls.max_connections_per_client,
        )?;
        let mut streams = rls.max_streams_per_connection as usize;
        count(
            "rls.max_streams_per_connection",
            &raw.max_streams_per_connection,
            i64::from(u32::MAX),
            &mut streams,
        )?;
        rls.max_streams_per_connection = streams as u32;
        count(
            "rls.max_streams",
            &raw.max_streams,
            1_000_000,
            &mut rls.max_streams,
        )?;
        count(
            "rls.max_buckets",
            &raw.max_buckets,
            1_000_000_000,
            &mut rls.max_buckets,
        )?;
        count(
            "rls.max_buckets_per_stream",
            &raw.max_buckets_per_stream,
            10_000_000,
            &mut rls.max_buckets_per_stream,
        )?;
        count(
            "rls.max_stream_bytes",
            &raw.max_stream_bytes,
            1 << 32,
            &mut rls.max_stream_bytes,
        )?;
        count(
            "rls.max_bucket_id_bytes",
            &raw.max_bucket_id_bytes,
            1 << 24,
            &mut rls.max_bucket_id_bytes,
        )?;
        if let Some(k) = &raw.keepalive_interval_secs {
            rls.keepalive_interval =
                Duration::from_secs(self.int("rls.keepalive_interval_secs", k, 1, 86_400)? as u64);
        }
        if let Some(k) = &raw.keepalive_timeout_secs {
            rls.keepalive_timeout =
                Duration::from_secs(self.int("rls.keepalive_timeout_secs", k, 1, 3_600)? as u64);
        }
        Ok(rls)
    }

    pub(super) fn socket_addr(&self, field: &str, value: &Spanned<String>) -> Result<SocketAddr> {
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

    pub(super) fn cidr(&self, value: &Spanned<String>) -> Result<Cidr> {
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

    pub(super) fn int(&self, field: &str, value: &Spanned<i64>, min: i64, max: i64) -> Result<i64> {
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

    /// A path written in the file, taken from the file's directory.
    pub(super) fn path(&self, written: &str) -> std::path::PathBuf {
        match self.dir {
            Some(dir) => dir.join(written),
            None => written.into(),
        }
    }
}
