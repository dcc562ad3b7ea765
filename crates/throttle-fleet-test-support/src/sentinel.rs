//! Test support: a primary, its replicas and the sentinels that watch
//! them, as real `redis-server` processes (the sentinels run with
//! `--sentinel`), each on a free port of 127.0.0.1.
//!
//! * [`RedisSentinel::start`] starts the primary, the replicas (attached
//!   and in sync) and the sentinels (each knowing every replica and every
//!   other sentinel), so a failover can start as soon as the primary is
//!   gone. `down-after-milliseconds` and `failover-timeout` are the
//!   test's: short, so a failover takes a second or two.
//! * [`RedisSentinel::data_nodes`] are the primary first, then the
//!   replicas; kill or stop them through their [`RedisServer`].
//! * [`RedisSentinel::wait_failover`] waits until every live sentinel
//!   names another primary than the one given and that one says it is a
//!   primary.
//!
//! ```ignore
//! let set = RedisSentinel::start(SentinelSettings::default());
//! let config = RedisConfig::sentinel(set.sentinel_urls(), set.service());
//! let old = set.primary_port().unwrap();
//! set.data_node_at(old).unwrap().kill();
//! let new = set.wait_failover(old, Duration::from_secs(20));
//! ```

use std::time::{Duration, Instant};

use crate::redis_server::{RedisServer, Reply, info_field, wait_until};
use crate::redis_tls::ServerTls;

/// How a [`RedisSentinel`] is set up.
#[derive(Debug, Clone)]
pub struct SentinelSettings {
    /// Replicas of the primary.
    pub replicas: usize,
    /// Sentinels (the quorum is a majority of them).
    pub sentinels: usize,
    /// `down-after-milliseconds`: how long the primary must not answer
    /// before a sentinel holds it down.
    pub down_after: Duration,
    /// `failover-timeout`.
    pub failover_timeout: Duration,
    /// TLS only, everywhere (clients, replication, the sentinels' own
    /// links), when set.
    pub tls: Option<ServerTls>,
}

impl Default for SentinelSettings {
    fn default() -> Self {
        Self {
            replicas: 1,
            sentinels: 3,
            down_after: Duration::from_millis(500),
            failover_timeout: Duration::from_secs(2),
            tls: None,
        }
    }
}

/// A primary, its replicas and their sentinels; see the [module
/// docs](self). Dropping it kills every process.
#[derive(Debug)]
pub struct RedisSentinel {
    data: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    settings: SentinelSettings,
}

/// The name the sentinels know the primary by.
const SERVICE: &str = "mymaster";

impl RedisSentinel {
    /// Starts everything and waits (up to 30 s) until every sentinel knows
    /// every replica and every other sentinel.
    pub fn start(settings: SentinelSettings) -> Self {
        // Over TLS, replicas reach their primary and sentinels every node
        // over TLS too (`tls-replication`).
        let start = |args: &[&str]| match &settings.tls {
            Some(tls) => {
                RedisServer::start_tls(tls.clone(), &[args, &["--tls-replication", "yes"]].concat())
            }
            None => RedisServer::start_with_args(args),
        };
        let primary = start(&[]);
        let port = primary.port().to_string();
        let mut data = vec![primary];
        for _ in 0..settings.replicas {
            data.push(start(&["--replicaof", "127.0.0.1", &port]));
        }
        let quorum = (settings.sentinels / 2 + 1).to_string();
        let down = settings.down_after.as_millis().to_string();
        let failover = settings.failover_timeout.as_millis().to_string();
        let sentinels = (0..settings.sentinels)
            .map(|_| {
                let args = [
                    [
                        "--sentinel",
                        "monitor",
                        SERVICE,
                        "127.0.0.1",
                        &port,
                        &quorum,
                    ]
                    .as_slice(),
                    &["--sentinel", "down-after-milliseconds", SERVICE, &down],
                    &["--sentinel", "failover-timeout", SERVICE, &failover],
                    if settings.tls.is_some() {
                        &["--tls-replication", "yes"]
                    } else {
                        &[]
                    },
                ]
                .concat()
                .into_iter()
                .map(str::to_owned)
                .collect();
                RedisServer::launch_sentinel(args, settings.tls.clone())
            })
            .collect();
        let set = Self {
            data,
            sentinels,
            settings,
        };
        set.wait_ready();
        set
    }

    /// Every replica in sync, and every sentinel knowing all replicas and
    /// all other sentinels.
    fn wait_ready(&self) {
        let replicas = self.settings.replicas;
        for replica in &self.data[1..] {
            wait_until(Duration::from_secs(30), "a replica in sync", || {
                let info = replica.query_text(&["INFO", "replication"])?;
                match info_field(&info, "master_link_status") {
                    Some("up") => Ok(()),
                    _ => Err(info),
                }
            });
        }
        let (want_replicas, want_sentinels) = (
            format!("slaves={replicas},"),
            format!("sentinels={}", self.sentinels.len()),
        );
        for sentinel in &self.sentinels {
            wait_until(
                Duration::from_secs(30),
                "a sentinel knowing every replica and sentinel",
                || {
                    let info = sentinel.query_text(&["INFO", "sentinel"])?;
                    let line = info_field(&info, "master0").unwrap_or_default();
                    if line.contains("status=ok")
                        && line.contains(&want_replicas)
                        && line.contains(&want_sentinels)
                    {
                        Ok(())
                    } else {
                        Err(info)
                    }
                },
            );
        }
    }

    /// The name the sentinels know the primary by.
    pub fn service(&self) -> &str {
        SERVICE
    }

    /// `redis://127.0.0.1:<port>` of every sentinel (`rediss://` over TLS).
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The sentinels' processes.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The data nodes: the first primary, then the replicas.
    pub fn data_nodes(&self) -> &[RedisServer] {
        &self.data
    }

    /// The data node on `port`.
    pub fn data_node_at(&self, port: u16) -> Option<&RedisServer> {
        self.data.iter().find(|s| s.port() == port)
    }

    /// The primary's port as the first sentinel that answers names it.
    pub fn primary_port(&self) -> Option<u16> {
        self.sentinels
            .iter()
            .filter(|s| s.is_live())
            .find_map(named_primary)
    }

    /// Waits (up to `timeout`) until every live sentinel names a primary
    /// other than the one on `old_port`, and that one answers `ROLE` as a
    /// primary; returns its port. Panics with the sentinels' logs if not.
    pub fn wait_failover(&self, old_port: u16, timeout: Duration) -> u16 {
        let deadline = Instant::now() + timeout;
        loop {
            let named: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .filter(|s| s.is_live())
                .map(named_primary)
                .collect();
            if let Some(Some(port)) = named.first()
                && *port != old_port
                && named.iter().all(|n| *n == Some(*port))
                && self.data_node_at(*port).is_some_and(is_primary)
            {
                return *port;
            }
            if Instant::now() >= deadline {
                let logs: Vec<String> = self.sentinels.iter().map(|s| s.log_tail(15)).collect();
                panic!(
                    "no failover from port {old_port} within {timeout:?}: sentinels name {named:?}\n{}",
                    logs.join("\n---\n")
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The primary's port as `sentinel` names it.
fn named_primary(sentinel: &RedisServer) -> Option<u16> {
    let reply = sentinel
        .query(&["SENTINEL", "get-master-addr-by-name", SERVICE])
        .ok()?;
    match reply.items() {
        [_, port] => port.as_str()?.parse().ok(),
        _ => None,
    }
}

/// Whether `server` answers `ROLE` as a primary.
fn is_primary(server: &RedisServer) -> bool {
    match server.query(&["ROLE"]) {
        Ok(reply) => {
            matches!(reply.items().first(), Some(Reply::Bulk(Some(role))) if role == "master")
        }
        Err(_) => false,
    }
}
