//! Redis Sentinel: the primary of a service, as the sentinels name it.
//!
//! The sentinels are asked in turn (the one that answered last first)
//! `SENTINEL get-master-addr-by-name <service>`; the address named is
//! taken only once the node there says it is a writable primary
//! (`role.rs`): a sentinel that has not seen a failover yet, or a
//! partitioned one, may name a server that is down or a replica now, and
//! the next sentinel is asked. Commands go to that primary's [`Node`]
//! (its connections and breaker) until a probe finds it failed and the
//! sentinels name another.
//!
//! Who asks: the check at start; the discovery (a job of the backend's
//! scheduler, every probe interval while no primary is known); the
//! breaker's probe, whose every round asks the sentinels before it pings
//! (so a failover is followed one probe interval at most after the
//! sentinels have made it, whether the old primary is dead, hung or
//! demoted); and a reply that says the node takes no writes now
//! (`READONLY`), at most once per probe interval. Nothing waits for the
//! sentinels' pub/sub: a lost `+switch-master` message changes nothing.
//!
//! Why not the `redis` crate's `sentinel` feature: its clients dial
//! their own connections, with settings of their own, and ask a sentinel
//! anew for every connection they open; here the sentinels and the
//! primaries are both [`Node`]s, opened by one function from one config
//! (timeouts, and whatever the connection settings hold), and the
//! primary's connections, breaker and probe are the standalone node's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::{ConnectionAddr, ConnectionInfo, RedisConnectionInfo};
use throttle_fleet_core::ConfigError;

use super::endpoint;
use super::node::Node;
use super::role::{Role, role};
use super::spacing::Spacing;
use crate::config::RedisConfig;

pub(crate) struct Sentinel {
    /// The sentinels, as nodes of their own (their connections only are
    /// used).
    sentinels: Vec<Arc<Node>>,
    /// The sentinel asked first: the last one whose answer was taken.
    first: AtomicUsize,
    /// What the sentinels call the primary (the master name).
    service: String,
    /// The template of a data node's connection: the sentinels' transport,
    /// the data nodes' own credentials.
    template: ConnectionInfo,
    config: RedisConfig,
    primary: ArcSwapOption<Node>,
    /// Held while the sentinels are asked (concurrent askers share it).
    resolving: tokio::sync::Mutex<()>,
    /// Whether the discovery runs (no primary known).
    pub(crate) discovering: AtomicBool,
    /// Whether the last round found the primary commands go to silent or
    /// no longer a primary (named by a sentinel all the same).
    current_refused: AtomicBool,
    /// The sentinels asked in the background: at most once per interval.
    asked: Spacing,
}

impl Sentinel {
    pub(crate) fn new(
        urls: &[String],
        service: &str,
        config: &RedisConfig,
    ) -> Result<Self, ConfigError> {
        const FIELD: &str = "redis.sentinel";
        let bad = |why: String| ConfigError::new(FIELD, why);
        let mut sentinels = Vec::with_capacity(urls.len());
        let mut template = None;
        for url in urls {
            // A sentinel: its URL's credentials (the sentinels' own), the
            // configuration's TLS settings.
            let info = config.tls.apply(endpoint::parse(url, FIELD)?, FIELD)?;
            let Some((host, port)) = host_port(info.addr()) else {
                return Err(bad(
                    "sentinels are reached over TCP (redis:// or rediss://)".into(),
                ));
            };
            let addr = format!("{host}:{port}");
            if template.is_none() {
                // A data node: the sentinels' transport (TLS or not, the
                // same CA and client certificate), the configuration's
                // credentials, not the sentinels'.
                let bare =
                    RedisConnectionInfo::default().set_protocol(info.redis_settings().protocol());
                let bare = info.clone().set_redis_settings(bare);
                template = Some(config.credentials.apply(bare, FIELD)?);
            }
            let node =
                Node::open(info, addr, config).map_err(|e| bad(format!("{:?}", e.kind())))?;
            sentinels.push(Arc::new(node));
        }
        let template = template.ok_or_else(|| bad("needs at least one sentinel".into()))?;
        Ok(Self {
            sentinels,
            first: AtomicUsize::new(0),
            service: service.to_owned(),
            template,
            config: config.clone(),
            primary: ArcSwapOption::empty(),
            resolving: tokio::sync::Mutex::new(()),
            discovering: AtomicBool::new(false),
            current_refused: AtomicBool::new(false),
            asked: Spacing::new(),
        })
    }

    /// The primary commands go to now, if one is known.
    #[inline]
    pub(crate) fn primary(&self) -> Option<Arc<Node>> {
        self.primary.load_full()
    }

    /// Whether no primary is known or its breaker is open: read on every
    /// check, without taking a reference to the node.
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        self.primary
            .load()
            .as_ref()
            .is_none_or(|p| p.breaker.is_open())
    }

    /// Whether `node` is the primary commands go to now.
    pub(crate) fn serves(&self, node: &Arc<Node>) -> bool {
        self.primary
            .load()
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, node))
    }

    /// Whether the last round of [`resolve`](Self::resolve) found the
    /// primary commands go to silent or not a primary: its probe need not
    /// ping it again in that round (a hung node would hold the round for
    /// another patience).
    pub(crate) fn current_refused(&self) -> bool {
        self.current_refused.load(Ordering::Relaxed)
    }

    /// Whether the sentinels may be asked in the background now: at most
    /// once per `every`.
    pub(crate) fn ask_due(&self, every: Duration) -> bool {
        self.asked.take(every)
    }

    /// Asks the sentinels in turn for the service's primary, each within
    /// `patience`, and installs the first one named that says it is a
    /// writable primary. Concurrent callers share one round. Returns
    /// whether a writable primary is installed now.
    pub(crate) async fn resolve(&self, patience: Duration) -> bool {
        let Ok(_guard) = self.resolving.try_lock() else {
            let _wait = self.resolving.lock().await;
            return self.primary().is_some_and(|p| !p.breaker.is_open());
        };
        self.current_refused.store(false, Ordering::Relaxed);
        let n = self.sentinels.len();
        let first = self.first.load(Ordering::Relaxed);
        // Addresses found not to be a writable primary in this round: the
        // next sentinel naming the same is not believed either.
        let mut refused: Vec<String> = Vec::new();
        for k in 0..n {
            let i = (first + k) % n;
            let Some((host, port)) = self.ask(&self.sentinels[i], patience).await else {
                continue;
            };
            let addr = format!("{host}:{port}");
            if refused.contains(&addr) {
                continue;
            }
            let current = self.primary();
            let node = match &current {
                Some(p) if p.addr == addr => p.clone(),
                _ => match self.open(&host, port) {
                    Some(node) => Arc::new(node),
                    None => continue,
                },
            };
            if role(&node, patience).await != Role::Primary {
                if current.as_ref().is_some_and(|p| Arc::ptr_eq(p, &node)) {
                    self.current_refused.store(true, Ordering::Relaxed);
                }
                refused.push(addr);
                continue;
            }
            self.first.store(i, Ordering::Relaxed);
            if !current.as_ref().is_some_and(|p| Arc::ptr_eq(p, &node)) {
                tracing::info!(
                    service = %self.service,
                    primary = %node.addr,
                    previous = current.as_ref().map_or("none", |p| p.addr.as_str()),
                    "throttle: Redis Sentinel names a primary; commands go there",
                );
                self.primary.store(Some(node));
            }
            return true;
        }
        false
    }

    /// Whether a sentinel, or the primary one names, refuses the
    /// configuration (credentials, certificate) at startup: the error,
    /// named by its field (a sentinel's own password is in its URL:
    /// `redis.sentinel`). Called when no primary was found.
    pub(crate) async fn refused_at_start(&self, patience: Duration) -> Result<(), ConfigError> {
        for sentinel in &self.sentinels {
            super::refusal::first_ping(sentinel, patience)
                .await
                .map_err(|e| ConfigError::new("redis.sentinel", e.reason().to_owned()))?;
            if let Some((host, port)) = self.ask(sentinel, patience).await
                && let Some(node) = self.open(&host, port)
            {
                super::refusal::first_ping(&node, patience).await?;
            }
        }
        Ok(())
    }

    /// One sentinel's answer: the primary's host and port, if it knows one.
    async fn ask(&self, sentinel: &Node, patience: Duration) -> Option<(String, u16)> {
        let mut conn = sentinel.conn();
        let cmd = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.service)
            .to_owned();
        // A connection lost earlier is dialled again by the command that
        // finds it lost, which fails at once: that one is sent once more
        // (as a `PING` of the probe is).
        let reply = tokio::time::timeout(patience, async {
            match cmd.query_async::<Option<(String, String)>>(&mut conn).await {
                Err(e) if !e.is_timeout() => cmd.query_async(&mut conn).await,
                r => r,
            }
        })
        .await;
        match reply {
            Ok(Ok(Some((host, port)))) => Some((host, port.parse().ok()?)),
            Ok(Ok(None)) => {
                tracing::debug!(sentinel = %sentinel.addr, service = %self.service, "throttle: a sentinel knows no such service");
                None
            }
            Ok(Err(e)) => {
                tracing::debug!(sentinel = %sentinel.addr, error = %e, "throttle: a sentinel did not answer");
                None
            }
            Err(_) => None,
        }
    }

    /// A data node at `host:port`, with the sentinels' transport and the
    /// data nodes' credentials.
    fn open(&self, host: &str, port: u16) -> Option<Node> {
        let info = endpoint::at(&self.template, host, port);
        Node::open(info, format!("{host}:{port}"), &self.config).ok()
    }
}

/// The host and port of a TCP address.
fn host_port(addr: &ConnectionAddr) -> Option<(&str, u16)> {
    match addr {
        ConnectionAddr::Tcp(host, port) => Some((host, *port)),
        ConnectionAddr::TcpTls { host, port, .. } => Some((host, *port)),
        _ => None,
    }
}
