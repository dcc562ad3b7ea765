//! A throttle gateway's configuration file (TOML): where it listens, which
//! proxies it trusts, the backend, and the rules with their keys, quotas,
//! tiers, routes, failure policies and shadow flags.
//!
//! [`GatewayConfig::load`] reads and validates a file; every error names
//! the file, the rule and the field, with the line and column of the value
//! (`gateway.toml:14:9: rule "ip", field "limit": must be at least 1 (got
//! 0)`). Nothing is half-applied: a file either validates whole or not at
//! all, so a reload can keep the old rules running on an error.
//!
//! ```toml
//! listen = "127.0.0.1:8080"
//! trusted_proxies = ["10.0.0.0/8"]
//!
//! [backend]
//! kind = "redis-exact"        # memory | redis-exact | redis-approximate | redis-leased
//! url = "redis://127.0.0.1:6379"
//!
//! [[rules]]
//! name = "ip"
//! key = "ip"                  # ip | header:<name> | route | jwt:<claim> | user-agent | tls-fingerprint | global | composite
//! algorithm = "sliding_window_counter"
//! limit = 100
//! period_secs = 60
//! failure = "open"            # open | closed | local
//!
//! [[rules]]
//! name = "tenant"
//! key = "header:x-api-key"
//! limit = 1000
//! period_secs = 60
//! tiers = { "premium-key" = 5000 }
//!
//! [[rules]]
//! name = "login"              # a key denied 10 times within a minute is blocked
//! key = "ip"                  # for 5 minutes, then 10, 20, ... at most a day
//! routes = ["/login"]
//! limit = 5
//! period_secs = 60
//! penalty = { after = 10, within_secs = 60, block_secs = 300, max_block_secs = 86400 }
//!                             # memory_secs (default 3600): how long after a block ends
//!                             # the next one still doubles; fractions of seconds allowed
//!
//! [[rules]]
//! name = "backend"            # protect a pool: at most 64 requests in flight, and
//! key = "global"              # when it runs short, shed the less important first
//! algorithm = "concurrency"
//! limit = 64                  # the hard bound; the adaptive limit finds the pool below it
//! reserve = 8                 # critical may use 64, default 56, sheddable 48 (503 when shed)
//! class = "route"             # where the class is read: header:<name> | route | jwt:<claim>
//! classes = { critical = ["/book"], sheddable = ["/browse"] }
//!                             # without classes, the value names the class (critical,
//!                             # default, sheddable); anything else is default
//! adaptive = { initial = 20, min = 4 }
//!                             # the limit follows latency (window_secs, probe_every too);
//!                             # counted in this instance, whatever the backend
//!
//! [admin]                     # the gateway's admin endpoint (absent: none)
//! listen = "127.0.0.1:9091"   # its own address, never the public one
//! token_file = "admin.token"  # the bearer token (at least 32 bytes, trimmed), relative
//!                             # to this file; or token_env = "THROTTLE_ADMIN_TOKEN".
//!                             # The token itself is never written here.
//!
//! [tls]                       # HTTPS; needed by tls-fingerprint keys
//! cert_file = "cert.pem"      # relative to this file; or self_signed = true
//! key_file = "key.pem"
//!
//! [[rules]]
//! name = "unauthenticated"    # behind a carrier-grade NAT: /24 + TLS stack + User-Agent
//! key = "composite"
//! parts = ["ip", "tls-fingerprint", "user-agent"]
//! ipv4_prefix = 24
//! limit = 60
//! period_secs = 60
//! ```
//!
//! [`build::policy`] and [`build::layer`] turn a [`GatewayConfig`] into
//! rules for any server: the server's [`Integration`](build::Integration) says where the peer
//! address is and what a route is (`throttle-fleet-axum` and `throttle-fleet-tonic`
//! have one each, behind their `config` feature).

// docs.rs (`--cfg docsrs`, nightly) marks each feature-gated item with
// the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
pub mod build;
mod error;
mod file;
mod load;
mod model;
pub mod reload;

pub use backend::BuiltBackend;
pub use error::ConfigFileError;
/// Why an algorithm cannot be served to Envoy, if it cannot.
pub use load::not_for_envoy;
pub use model::{
    AdminConfig, AdminToken, BackendConfig, BackendKind, Cidr, ClassSpec, Descriptor,
    DescriptorEntry, GatewayConfig, HeaderStyle, InvalidHello, JwtConfig, KeySpec, RedisPassword,
    RlsConfig, RuleConfig, SentinelConfig, TlsConfig, TlsIdentity,
};
/// The certificate and key types of [`TlsIdentity`].
pub use rustls_pki_types as pki_types;

pub mod limits;
