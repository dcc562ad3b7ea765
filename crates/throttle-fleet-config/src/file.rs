//! The file as written: what serde reads, with the span of every value so
//! that errors can point at it. Nothing here is validated yet.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct File {
    pub(crate) listen: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) trusted_proxies: Vec<Spanned<String>>,
    pub(crate) proxy_hops: Option<Spanned<i64>>,
    pub(crate) headers: Option<Spanned<String>>,
    pub(crate) metrics: Option<Metrics>,
    pub(crate) server: Option<Server>,
    pub(crate) backend: Option<Spanned<Backend>>,
    pub(crate) jwt: Option<Spanned<Jwt>>,
    pub(crate) tls: Option<Spanned<Tls>>,
    /// The Envoy rate limit services' own settings.
    pub(crate) rls: Option<Rls>,
    /// The gateway's admin endpoint.
    pub(crate) admin: Option<Spanned<Admin>>,
    #[serde(default)]
    pub(crate) rules: Vec<Spanned<Rule>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Metrics {
    pub(crate) listen: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Admin {
    pub(crate) listen: Option<Spanned<String>>,
    /// A file holding the bearer token, relative to the config file.
    pub(crate) token_file: Option<Spanned<String>>,
    /// The name of an environment variable holding the bearer token.
    pub(crate) token_env: Option<Spanned<String>>,
    /// Read only to refuse it with a clear message: the token itself is
    /// never written in the file.
    pub(crate) token: Option<Spanned<toml::Value>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rls {
    pub(crate) listen: Option<Spanned<String>>,
    /// How often the Envoys report their usage to the quota service.
    pub(crate) report_interval_secs: Option<Spanned<i64>>,
    pub(crate) max_connections: Option<Spanned<i64>>,
    pub(crate) max_connections_per_client: Option<Spanned<i64>>,
    pub(crate) max_streams_per_connection: Option<Spanned<i64>>,
    pub(crate) keepalive_interval_secs: Option<Spanned<i64>>,
    pub(crate) keepalive_timeout_secs: Option<Spanned<i64>>,
    pub(crate) max_streams: Option<Spanned<i64>>,
    pub(crate) max_buckets: Option<Spanned<i64>>,
    pub(crate) max_buckets_per_stream: Option<Spanned<i64>>,
    pub(crate) max_stream_bytes: Option<Spanned<i64>>,
    pub(crate) max_bucket_id_bytes: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Server {
    pub(crate) max_connections: Option<Spanned<i64>>,
    pub(crate) header_timeout_secs: Option<Spanned<i64>>,
    pub(crate) idle_timeout_secs: Option<Spanned<i64>>,
    pub(crate) write_timeout_secs: Option<Spanned<i64>>,
    pub(crate) body_timeout_secs: Option<Spanned<i64>>,
    pub(crate) body_min_bytes_per_sec: Option<Spanned<i64>>,
    pub(crate) max_connections_per_client: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Backend {
    pub(crate) kind: Spanned<String>,
    pub(crate) url: Option<Spanned<String>>,
    pub(crate) cluster: Option<Spanned<Vec<String>>>,
    pub(crate) sentinel: Option<Spanned<Sentinel>>,
    pub(crate) key_prefix: Option<Spanned<String>>,
    pub(crate) command_timeout_ms: Option<Spanned<i64>>,
    pub(crate) fleet_size: Option<Spanned<i64>>,
    /// Approximate mode: spans per interval.
    pub(crate) spans: Option<Spanned<i64>>,
    /// Leased mode: tokens per lease.
    pub(crate) batch: Option<Spanned<i64>>,
    /// Memory: keys tracked per rule.
    pub(crate) max_keys: Option<Spanned<i64>>,
    /// TLS to Redis (`rediss://`): a CA file, a client certificate and
    /// its key, relative to the config file.
    pub(crate) tls_ca_file: Option<Spanned<String>>,
    pub(crate) tls_cert_file: Option<Spanned<String>>,
    pub(crate) tls_key_file: Option<Spanned<String>>,
    /// The ACL user, and where its password is (a file or an environment
    /// variable; never this file: `password` is read only to refuse it).
    pub(crate) username: Option<Spanned<String>>,
    pub(crate) password_file: Option<Spanned<String>>,
    pub(crate) password_env: Option<Spanned<String>>,
    pub(crate) password: Option<Spanned<String>>,
}

/// `[backend] sentinel = { nodes = [...], service = "..." }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Sentinel {
    pub(crate) nodes: Spanned<Vec<String>>,
    pub(crate) service: Spanned<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Jwt {
    pub(crate) algorithm: Spanned<String>,
    /// Name of the environment variable holding the HMAC secret (HS256).
    pub(crate) secret_env: Option<Spanned<String>>,
    /// A PEM public key file (RS256, ES256), relative to the config file.
    pub(crate) public_key_file: Option<Spanned<String>>,
    pub(crate) audience: Option<Spanned<String>>,
    pub(crate) issuer: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Tls {
    /// PEM certificate chain, relative to the config file.
    pub(crate) cert_file: Option<Spanned<String>>,
    /// PEM private key, relative to the config file.
    pub(crate) key_file: Option<Spanned<String>>,
    /// A certificate made at start, for trying it out.
    pub(crate) self_signed: Option<Spanned<bool>>,
    pub(crate) handshake_timeout_secs: Option<Spanned<i64>>,
    pub(crate) invalid_hello: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rule {
    pub(crate) name: Spanned<String>,
    /// Where a server's layer finds the key; a rule served to Envoy has
    /// `descriptor` instead.
    pub(crate) key: Option<Spanned<String>>,
    /// The Envoy rate limit domain of a `descriptor` rule.
    pub(crate) domain: Option<Spanned<String>>,
    /// The descriptor entries a rule served to Envoy matches: `"name"`
    /// (any value, part of the key) or `"name=value"` (that value only).
    pub(crate) descriptor: Option<Spanned<Vec<Spanned<String>>>>,
    /// Parts of a `composite` key.
    pub(crate) parts: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) ipv4_prefix: Option<Spanned<i64>>,
    pub(crate) ipv6_prefix: Option<Spanned<i64>>,
    pub(crate) algorithm: Option<Spanned<String>>,
    pub(crate) limit: Spanned<i64>,
    /// Required by the rate algorithms; refused on a concurrency rule.
    pub(crate) period_secs: Option<Spanned<i64>>,
    /// A concurrency rule's slot lifetime in a shared backend, in seconds
    /// (fractions allowed).
    pub(crate) slot_ttl_secs: Option<Spanned<f64>>,
    pub(crate) burst: Option<Spanned<i64>>,
    pub(crate) cost: Option<Spanned<i64>>,
    pub(crate) failure: Option<Spanned<String>>,
    pub(crate) routes: Option<Spanned<Vec<Spanned<String>>>>,
    pub(crate) tiers: Option<Spanned<BTreeMap<String, Spanned<i64>>>>,
    #[serde(default)]
    pub(crate) shadow: bool,
    /// Blocks for keys that keep being denied.
    pub(crate) penalty: Option<Spanned<Penalty>>,
    /// A concurrency rule's slots kept for each class above a request's.
    pub(crate) reserve: Option<Spanned<i64>>,
    /// Where a request's class is read, in the key syntax.
    pub(crate) class: Option<Spanned<String>>,
    /// The values (or routes) that name each class.
    pub(crate) classes: Option<Spanned<Classes>>,
    /// A concurrency rule's adaptive limit.
    pub(crate) adaptive: Option<Spanned<Adaptive>>,
}

/// A rule's `classes` table: the values of its `class` source that make a
/// request of each class.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Classes {
    #[serde(default)]
    pub(crate) critical: Vec<Spanned<String>>,
    #[serde(default)]
    pub(crate) default: Vec<Spanned<String>>,
    #[serde(default)]
    pub(crate) sheddable: Vec<Spanned<String>>,
}

/// A rule's `adaptive` table; every field optional (the algorithm's
/// defaults), the window in seconds.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Adaptive {
    pub(crate) initial: Option<Spanned<i64>>,
    pub(crate) min: Option<Spanned<i64>>,
    pub(crate) window_secs: Option<Spanned<f64>>,
    pub(crate) probe_every: Option<Spanned<i64>>,
}

/// A rule's `penalty` table; durations in seconds, fractions allowed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Penalty {
    pub(crate) after: Option<Spanned<i64>>,
    pub(crate) within_secs: Option<Spanned<f64>>,
    pub(crate) block_secs: Option<Spanned<f64>>,
    pub(crate) max_block_secs: Option<Spanned<f64>>,
    pub(crate) memory_secs: Option<Spanned<f64>>,
}
