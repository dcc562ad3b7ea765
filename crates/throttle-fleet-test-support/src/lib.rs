//! The workspace's test harness, shared by the test binaries of every crate
//! (as a dev-dependency) instead of copied or included by path.
//!
//! * [`check`](mod@check): a limiter's answer, awaited when pending or taken when
//!   ready.
//! * [`redis_server`]: real `redis-server` processes on free ports that a
//!   test starts, stops, kills and restarts ([`RedisServer`]).
//! * [`redis_tls`]: TLS servers and clusters (a CA made for the test, its
//!   certificates as PEM files; the certificates need feature `redis-tls`).
//! * [`server_binary`]: which server those are (`redis-server`, or the
//!   binary `THROTTLE_REDIS_SERVER` names: Valkey, an older Redis).
//! * [`cluster`]: Redis Cluster nodes joined into a cluster, with failover
//!   waits ([`RedisCluster`]).
//! * [`proxy`]: a TCP proxy in front of a server that answers one reply in
//!   `n` late, or nothing at all, or moves to another server
//!   ([`DelayingProxy`]).
//! * [`sentinel`]: a primary, its replicas and Redis Sentinels watching
//!   them ([`RedisSentinel`]).
//! * `http` (feature `http`): axum apps served on free ports and a real
//!   HTTP/1.1 client.
//! * `grpc` (feature `grpc`): the tonic tests' services as routes a test
//!   serves behind its layer, tonic clients and status details.
//! * `http_faults` (feature `faults`): the HTTP fault suites' apps per mode
//!   and failure policy, concurrent bursts and the policies' promises.
//!
//! * `sim`: a small traffic simulator driving any meter or algorithm with a
//!   timeline, for the algorithms' tests and the laboratory.
//!
//! Crates take only the features they need, so a test build of one does
//! not compile tonic or axum for nothing; and no feature a crate takes
//! depends on that crate (the Redis, TLS and tonic crates' tests use this
//! one): what names a crate's own types stays in its tests (the Redis
//! crate's fleet driver is in its `tests/support/`).

pub mod check;
pub mod cluster;
pub mod decided;
#[cfg(feature = "grpc")]
pub mod grpc;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "faults")]
pub mod http_faults;
pub mod proxy;
pub mod redis_server;
pub mod redis_tls;
mod resp;
mod rng;
pub mod sentinel;
pub mod server_binary;
pub mod sim;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "clock")]
pub mod tokio_clock;

pub use check::{allowed, check, check_cost, outcome};
pub use cluster::RedisCluster;
pub use decided::{decided, refused};
pub use proxy::DelayingProxy;
pub use redis_server::RedisServer;
pub use redis_tls::{ServerTls, TlsFiles};
pub use rng::Rng;
pub use sentinel::{RedisSentinel, SentinelSettings};

/// Seconds since the Unix epoch (for checking reset times in headers and
/// metadata).
pub fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}
