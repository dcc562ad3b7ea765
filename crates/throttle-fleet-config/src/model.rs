//! The configuration once validated: every value here can work.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use throttle_fleet_core::{Key, Quota, Rule};
use throttle_fleet_tower::server::ServeLimits;

/// A whole gateway's configuration, validated.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// Where the gateway listens (`listen`), if set.
    pub listen: Option<SocketAddr>,
    /// Peers whose `X-Forwarded-For` / `Forwarded` headers are read.
    pub trusted_proxies: Vec<Cidr>,
    /// How many trusted hops to walk at most (`proxy_hops`), if set.
    pub proxy_hops: Option<u8>,
    /// The rate-limit header style of answers (`headers`).
    pub headers: HeaderStyle,
    /// Where Prometheus text is served (`[metrics] listen`), if set.
    pub metrics_listen: Option<SocketAddr>,
    /// How the gateway treats connections (`[server]`).
    pub server: ServeLimits,
    /// The backend every rule uses (`[backend]`; memory when absent).
    pub backend: BackendConfig,
    /// How bearer tokens are verified (`[jwt]`), for `jwt:<claim>` keys.
    pub jwt: Option<JwtConfig>,
    /// HTTPS, with TLS fingerprints for `tls-fingerprint` keys (`[tls]`).
    pub tls: Option<TlsConfig>,
    /// The Envoy rate limit services' settings (`[rls]`), if set.
    pub rls: Option<RlsConfig>,
    /// The admin endpoint (`[admin]`), if set: absent, there is none.
    pub admin: Option<AdminConfig>,
    /// The rules, in file order.
    pub rules: Vec<RuleConfig>,
}

/// The `[admin]` table: where the gateway's admin endpoint listens, and the
/// bearer token its requests must carry.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// Where the admin endpoint listens (`listen`): its own address, never
    /// the public one.
    pub listen: SocketAddr,
    /// The bearer token, read when the file was loaded from `token_file`
    /// or from the environment variable `token_env`.
    pub token: AdminToken,
}

/// The admin endpoint's bearer token: at least
/// [`MIN_ADMIN_TOKEN_LEN`](crate::limits::MIN_ADMIN_TOKEN_LEN) bytes, its
/// surrounding whitespace trimmed. Its `Debug` shows its length only, and it
/// has no `PartialEq`: compare what a request presents in constant time
/// (over digests of equal length, say).
#[derive(Clone)]
pub struct AdminToken(Arc<str>);

impl AdminToken {
    /// The token as read (trimmed), or `None` if it is shorter than
    /// [`MIN_ADMIN_TOKEN_LEN`](crate::limits::MIN_ADMIN_TOKEN_LEN) bytes.
    ///
    /// ```
    /// use throttle_fleet_config::AdminToken;
    ///
    /// assert!(AdminToken::new("too short").is_none());
    /// let token = AdminToken::new(&format!("{}\n", "k".repeat(32))).unwrap();
    /// assert_eq!(token.secret().len(), 32);
    /// assert_eq!(format!("{token:?}"), "AdminToken(32 bytes)");
    /// ```
    pub fn new(text: &str) -> Option<Self> {
        let text = text.trim();
        (text.len() >= crate::limits::MIN_ADMIN_TOKEN_LEN).then(|| Self(Arc::from(text)))
    }

    /// The token itself, to compare a request's with.
    pub fn secret(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdminToken({} bytes)", self.0.len())
    }
}

/// The `[rls]` table: the Envoy rate limit services (RLS v3 and the quota
/// service, RLQS) of `throttle-fleet-envoy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RlsConfig {
    /// Where both services listen (`listen`, default `127.0.0.1:8081`).
    pub listen: SocketAddr,
    /// How often each Envoy reports its usage to the quota service
    /// (`report_interval_secs`, default 5: the filter's
    /// `reporting_interval`, which must be the same).
    pub report_interval: Duration,
    /// Connections open at once (`max_connections`, default 1,024); past
    /// it, new ones wait in the listen backlog.
    pub max_connections: usize,
    /// Connections one client address holds at once
    /// (`max_connections_per_client`, default 64); past it a new one is
    /// closed at accept.
    pub max_connections_per_client: usize,
    /// HTTP/2 streams one connection has open at once, RLS calls and
    /// quota streams together (`max_streams_per_connection`, default
    /// 1,024, sent to the client as `SETTINGS_MAX_CONCURRENT_STREAMS`;
    /// Envoy opens another connection past it).
    pub max_streams_per_connection: u32,
    /// How often an HTTP/2 PING checks that a connection's client is
    /// still there (`keepalive_interval_secs`, default 30).
    pub keepalive_interval: Duration,
    /// How long a PING may go unanswered before the connection is closed
    /// (`keepalive_timeout_secs`, default 10).
    pub keepalive_timeout: Duration,
    /// Quota streams open at once, from every client (`max_streams`,
    /// default 1,024); past it a new stream is refused
    /// `RESOURCE_EXHAUSTED`.
    pub max_streams: usize,
    /// Buckets all quota streams hold together (`max_buckets`, default
    /// 1,000,000); past it a new bucket gets no assignment.
    pub max_buckets: usize,
    /// Buckets one quota stream holds (`max_buckets_per_stream`, default
    /// 10,000); past it a new bucket gets no assignment.
    pub max_buckets_per_stream: usize,
    /// Bytes of bucket ids one quota stream holds
    /// (`max_stream_bytes`, default 1 MiB); past it a new bucket gets no
    /// assignment.
    pub max_stream_bytes: usize,
    /// Bytes of one bucket id, keys and values (`max_bucket_id_bytes`,
    /// default 1 KiB); a longer one gets no assignment.
    pub max_bucket_id_bytes: usize,
}

impl Default for RlsConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            report_interval: Duration::from_secs(5),
            max_connections: 1_024,
            max_connections_per_client: 64,
            max_streams_per_connection: 1_024,
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            max_streams: 1_024,
            max_buckets: 1_000_000,
            max_buckets_per_stream: 10_000,
            max_stream_bytes: 1 << 20,
            max_bucket_id_bytes: 1 << 10,
        }
    }
}

/// An address block, `a.b.c.d/n` or `x::/n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The network's address (host bits as written).
    pub addr: IpAddr,
    /// The prefix length.
    pub prefix: u8,
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Which rate-limit headers answers carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HeaderStyle {
    /// `X-RateLimit-Limit`, `-Remaining`, `-Reset` (`"x-ratelimit"`, the
    /// default).
    #[default]
    XRateLimit,
    /// The IETF draft's `RateLimit` and `RateLimit-Policy` as well
    /// (`"ietf"`).
    Ietf,
    /// The IETF draft's fields instead of the `X-RateLimit-*` trio
    /// (`"ietf-only"`; a `429` keeps `Retry-After`).
    IetfOnly,
}

impl HeaderStyle {
    /// The HTTP responder sending these headers.
    pub fn responder(self) -> throttle_fleet_tower::HttpResponder {
        let responder = throttle_fleet_tower::HttpResponder::new();
        match self {
            Self::XRateLimit => responder,
            Self::Ietf => responder.ietf_headers(true),
            Self::IetfOnly => responder.ietf_headers(true).x_ratelimit_headers(false),
        }
    }
}

/// Which backend counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// In this process only (`"memory"`).
    Memory,
    /// Redis, one atomic script per check (`"redis-exact"`).
    RedisExact,
    /// Redis, counted locally and flushed each span (`"redis-approximate"`).
    RedisApproximate,
    /// Redis, tokens leased in batches (`"redis-leased"`).
    RedisLeased,
}

/// The `[backend]` table. Its `Debug` prints the URLs without their
/// passwords.
///
/// ```
/// use throttle_fleet_config::BackendConfig;
///
/// let config = BackendConfig {
///     url: Some("redis://throttle:s3cret@redis.internal:6379".to_owned()),
///     ..BackendConfig::default()
/// };
/// let printed = format!("{config:?}");
/// assert!(!printed.contains("s3cret") && printed.contains("throttle:<redacted>@redis.internal"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct BackendConfig {
    /// Which backend.
    pub kind: BackendKind,
    /// A standalone Redis (`url`).
    pub url: Option<String>,
    /// Redis Cluster seed nodes (`cluster`); used instead of `url` if set.
    pub cluster: Vec<String>,
    /// Redis Sentinel (`sentinel = { nodes, service }`); exclusive with
    /// `url` and `cluster`.
    pub sentinel: Option<SentinelConfig>,
    /// Prefix of every Redis key (`key_prefix`).
    pub key_prefix: Option<String>,
    /// How long a check may wait for Redis (`command_timeout_ms`).
    pub command_timeout: Option<Duration>,
    /// Instances sharing each quota (`fleet_size`), for the local fallback.
    pub fleet_size: Option<u32>,
    /// Approximate mode: spans per interval (`spans`).
    pub spans: Option<u32>,
    /// Leased mode: tokens per lease (`batch`).
    pub batch: Option<u64>,
    /// Memory: keys tracked per rule (`max_keys`).
    pub max_keys: Option<usize>,
    /// TLS to Redis: the CA that verifies the servers (`tls_ca_file`,
    /// instead of the platform's roots), read and checked at load.
    pub tls_ca_file: Option<PathBuf>,
    /// TLS to Redis: the client certificate (`tls_cert_file`) shown to
    /// servers that ask for one, and its key (`tls_key_file`).
    pub tls_cert_file: Option<PathBuf>,
    /// The client certificate's private key (`tls_key_file`).
    pub tls_key_file: Option<PathBuf>,
    /// The ACL user every connection authenticates as (`username`).
    pub username: Option<String>,
    /// Its password, read from `password_file` or `password_env`.
    pub password: Option<RedisPassword>,
}

impl std::fmt::Debug for BackendConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            kind,
            url,
            cluster,
            sentinel,
            key_prefix,
            command_timeout,
            fleet_size,
            spans,
            batch,
            max_keys,
            tls_ca_file,
            tls_cert_file,
            tls_key_file,
            username,
            password,
        } = self;
        let cluster: Vec<String> = cluster.iter().map(|u| without_password(u)).collect();
        f.debug_struct("BackendConfig")
            .field("kind", kind)
            .field("url", &url.as_deref().map(without_password))
            .field("cluster", &cluster)
            .field("sentinel", sentinel)
            .field("key_prefix", key_prefix)
            .field("command_timeout", command_timeout)
            .field("fleet_size", fleet_size)
            .field("spans", spans)
            .field("batch", batch)
            .field("max_keys", max_keys)
            .field("tls_ca_file", tls_ca_file)
            .field("tls_cert_file", tls_cert_file)
            .field("tls_key_file", tls_key_file)
            .field("username", username)
            .field("password", password)
            .finish()
    }
}

/// `url` with the password of its user part (`user:password@`) replaced
/// by `<redacted>`.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user, host)) => {
            let name = user.split_once(':').map_or(user, |(name, _)| name);
            format!("{scheme}://{name}:<redacted>@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

/// A Redis password read from `[backend] password_file` or
/// `password_env`, its surrounding whitespace trimmed. Its `Debug` never
/// shows it.
///
/// ```
/// use throttle_fleet_config::RedisPassword;
///
/// let password = RedisPassword::new("s3cret\n", "backend.password_file").unwrap();
/// assert_eq!(password.secret(), "s3cret");
/// assert!(!format!("{password:?}").contains("s3cret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RedisPassword {
    secret: Arc<str>,
    field: &'static str,
}

impl RedisPassword {
    /// The password in `text` (trimmed), read from `field` (what errors
    /// about it name); `None` if it is empty.
    pub fn new(text: &str, field: &'static str) -> Option<Self> {
        let text = text.trim();
        (!text.is_empty()).then(|| Self {
            secret: Arc::from(text),
            field,
        })
    }

    /// The password itself.
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Where it was read from: `backend.password_file` or
    /// `backend.password_env`.
    pub fn field(&self) -> &'static str {
        self.field
    }
}

impl std::fmt::Debug for RedisPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RedisPassword(<redacted>, from {})", self.field)
    }
}

impl Default for BackendConfig {
    fn default() -> Self {
        Self {
            kind: BackendKind::Memory,
            url: None,
            cluster: Vec::new(),
            sentinel: None,
            key_prefix: None,
            command_timeout: None,
            fleet_size: None,
            spans: None,
            batch: None,
            max_keys: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            username: None,
            password: None,
        }
    }
}

/// `[backend] sentinel`: the sentinels and the name they know the primary
/// by. The nodes' URLs may hold the sentinels' password: never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelConfig {
    /// The sentinels' URLs (`nodes`).
    pub nodes: Vec<String>,
    /// The primary's name as the sentinels know it (`service`, Sentinel's
    /// master name).
    pub service: String,
}

impl std::fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelConfig")
            .field("nodes", &self.nodes.len())
            .field("service", &self.service)
            .finish()
    }
}

/// The `[jwt]` table: how tokens are verified before a claim becomes a key.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    /// `HS256`, `RS256` or `ES256`.
    pub algorithm: String,
    /// The HMAC secret (read from the environment variable `secret_env`).
    pub secret: Option<Vec<u8>>,
    /// The PEM public key file (`public_key_file`, relative to the file).
    pub public_key_file: Option<PathBuf>,
    /// The audience a token must name (`audience`).
    pub audience: Option<String>,
    /// The issuer a token must name (`issuer`).
    pub issuer: Option<String>,
}

/// The `[tls]` table: the gateway serves HTTPS, and reads each client's
/// ClientHello fingerprint (JA4) for `tls-fingerprint` keys.
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// The certificate and key.
    pub identity: TlsIdentity,
    /// How long a client may take to finish its TLS handshake
    /// (`handshake_timeout_secs`, default 5).
    pub handshake_timeout: Duration,
    /// What to do with a ClientHello that cannot be fingerprinted
    /// (`invalid_hello`).
    pub invalid_hello: InvalidHello,
}

/// Where the gateway's certificate comes from.
#[derive(Debug, Clone)]
pub enum TlsIdentity {
    /// PEM files (`cert_file`, `key_file`, relative to the configuration
    /// file), read and parsed when the configuration was loaded.
    Pem {
        /// The certificate file, as resolved.
        cert_file: PathBuf,
        /// The key file, as resolved.
        key_file: PathBuf,
        /// The certificate chain, leaf first.
        cert_chain: Vec<CertificateDer<'static>>,
        /// The private key.
        key: Arc<PrivateKeyDer<'static>>,
    },
    /// A self-signed certificate for `localhost` made at start
    /// (`self_signed = true`), for trying the gateway out.
    SelfSigned,
}

/// What the gateway does with a ClientHello it cannot fingerprint
/// (malformed, larger than the bound, not TLS at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InvalidHello {
    /// Close the connection (`"close"`, the default).
    #[default]
    Close,
    /// Let the TLS library try; requests of the connection have no
    /// fingerprint, so `tls-fingerprint` keys are missing (`"proceed"`).
    Proceed,
}

/// Where a rule's key comes from (`key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySpec {
    /// The client's address (`"ip"`), grouped by prefix.
    Ip {
        /// IPv4 prefix length (`ipv4_prefix`, default 32).
        ipv4_prefix: u8,
        /// IPv6 prefix length (`ipv6_prefix`, default 64).
        ipv6_prefix: u8,
    },
    /// A request header's value (`"header:<name>"`).
    Header(String),
    /// The matched route template (`"route"`).
    Route,
    /// A verified bearer token's claim (`"jwt:<claim>"`).
    Jwt(String),
    /// A hash of the `User-Agent` header (`"user-agent"`).
    UserAgent,
    /// One key for every request (`"global"`).
    Global,
    /// The JA4 fingerprint of the connection's TLS ClientHello
    /// (`"tls-fingerprint"`); needs `[tls]`.
    TlsFingerprint,
    /// Every part must be found (`"composite"`, with `parts`).
    Composite(Vec<KeySpec>),
    /// An Envoy rate limit descriptor (`domain` and `descriptor`, no
    /// `key`): the rule is served by `throttle-fleet-envoy`, not by a
    /// server's layer.
    Descriptor(Descriptor),
}

/// The Envoy descriptors a rule matches (`domain = "api"`, `descriptor =
/// ["user_id", "path=/search"]`): the same entries, in the same order, in
/// that domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// The rate limit domain (`domain`).
    pub domain: String,
    /// The entries, in order.
    pub entries: Vec<DescriptorEntry>,
}

/// One entry of a [`Descriptor`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorEntry {
    /// The entry's key.
    pub key: String,
    /// The one value it must have (`"key=value"`), or any value (`"key"`),
    /// which is then part of the rule's key.
    pub value: Option<String>,
}

impl Descriptor {
    /// The rule's key for a descriptor with these values, in the order of
    /// the entries that take any value: the one value itself when there is
    /// one, all of them as parts when there are several, one key for every
    /// request when every entry is fixed. Tiers are written the same way
    /// (one value per variable entry, joined by `|` when several).
    ///
    /// ```
    /// use throttle_fleet_config::Descriptor;
    /// use throttle_fleet_core::Key;
    ///
    /// assert_eq!(Descriptor::key_of(&["alice"]), Key::new("alice"));
    /// assert_eq!(Descriptor::key_of(&[]), Key::global());
    /// ```
    pub fn key_of(values: &[&str]) -> Key {
        match values {
            [] => Key::global(),
            [one] => Key::new(one),
            many => {
                // At most MAX_DESCRIPTOR_ENTRIES values: no allocation.
                let mut parts: [&[u8]; crate::limits::MAX_DESCRIPTOR_ENTRIES] =
                    [&[]; crate::limits::MAX_DESCRIPTOR_ENTRIES];
                let n = many.len().min(parts.len());
                for (part, value) in parts.iter_mut().zip(many) {
                    *part = value.as_bytes();
                }
                Key::from_parts(&parts[..n])
            }
        }
    }

    /// The key of a tier written as the descriptor's variable values joined
    /// by `|` (`"alice"`; `"acme|alice"` for two), or `None` when it does
    /// not have one value per variable entry.
    ///
    /// ```
    /// use throttle_fleet_config::{Descriptor, DescriptorEntry};
    ///
    /// let d = Descriptor {
    ///     domain: "api".into(),
    ///     entries: vec![DescriptorEntry { key: "user_id".into(), value: None }],
    /// };
    /// assert_eq!(d.tier_key("alice"), Some(Descriptor::key_of(&["alice"])));
    ///
    /// let two = Descriptor {
    ///     domain: "api".into(),
    ///     entries: vec![
    ///         DescriptorEntry { key: "tenant".into(), value: None },
    ///         DescriptorEntry { key: "user_id".into(), value: None },
    ///     ],
    /// };
    /// assert_eq!(two.tier_key("acme|alice"), Some(Descriptor::key_of(&["acme", "alice"])));
    /// assert_eq!(two.tier_key("alice"), None);
    /// ```
    pub fn tier_key(&self, written: &str) -> Option<Key> {
        let n = self.variables();
        let values: Vec<&str> = if n == 1 {
            vec![written]
        } else {
            written.split('|').collect()
        };
        (n > 0 && values.len() == n).then(|| Self::key_of(&values))
    }

    /// How many entries take any value.
    pub fn variables(&self) -> usize {
        self.entries.iter().filter(|e| e.value.is_none()).count()
    }
}

/// One `[[rules]]` entry.
#[derive(Debug, Clone)]
pub struct RuleConfig {
    /// The rule (name, quota, algorithm, cost, failure policy; a
    /// concurrency rule's slot lifetime).
    pub rule: Rule,
    /// Where its key comes from.
    pub key: KeySpec,
    /// The only route templates it applies to (`routes`), if set.
    pub routes: Option<Vec<String>>,
    /// Quotas of particular keys (`tiers`: key as written -> limit per the
    /// rule's period; for a concurrency rule, the key's own number of
    /// requests in flight, [`Quota::in_flight`]).
    pub tiers: Vec<(String, Quota)>,
    /// Decide, count and report, never deny (`shadow`).
    pub shadow: bool,
    /// How a request's class is read (`class`, `classes`), for a rule with
    /// a reserve or an adaptive limit.
    pub class: Option<ClassSpec>,
}

/// How a rule reads a request's class: a value from the request (`class`,
/// in the key syntax: `header:<name>`, `route` or `jwt:<claim>`), and the
/// values that make each class (`classes`; without it, the value must
/// name the class: `critical`, `default` or `sheddable`). A request whose
/// value is missing or not listed is of the `default` class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassSpec {
    /// Where the value is read.
    pub key: KeySpec,
    /// Each value as written, and its class.
    pub values: Vec<(String, throttle_fleet_core::Class)>,
}
