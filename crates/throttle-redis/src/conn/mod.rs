//! Connections (standalone or cluster), timeouts, the circuit breaker and
//! the counters every mode shares.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, RedisResult, ScriptInvocation};
use throttle_core::{Clock, ConfigError};

use crate::breaker::Breaker;
use crate::config::{RedisConfig, Target};

mod slot;
mod version;

#[cfg(test)]
pub(crate) use slot::slot_of;
pub(crate) use slot::{SLOTS, SLOTS_PER_GROUP, crc16};
use version::parse_version;

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    async fn invoke<T: FromRedisValue>(&mut self, inv: &ScriptInvocation<'_>) -> RedisResult<T> {
        match self {
            Self::Single(c) => inv.invoke_async(c).await,
            Self::Cluster(c) => inv.invoke_async(c).await,
        }
    }

    async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Self::Single(c) => cmd.query_async(c).await,
            Self::Cluster(c) => cmd.query_async(c).await,
        }
    }
}

/// Counters of a Redis backend, for dashboards and for trusting it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStats {
    /// Script calls sent to Redis on the request path.
    pub calls: u64,
    /// Calls that failed with an error.
    pub errors: u64,
    /// Calls that took longer than the command timeout.
    pub timeouts: u64,
    /// Whether the circuit breaker is open now.
    pub breaker_open: bool,
    /// How many times the breaker has opened.
    pub breaker_opened: u64,
    /// Checks decided by a failure policy instead of Redis.
    pub degraded: u64,
    /// Exact mode: checks denied without a Redis call, for a key Redis had
    /// shown over its limit and whose wait was not over.
    pub denied_locally: u64,
}

/// What went wrong with a call.
#[derive(Debug)]
pub(crate) enum Failure {
    Timeout,
    Error(redis::RedisError),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => f.write_str("redis command timed out"),
            Self::Error(e) => write!(f, "redis error: {e}"),
        }
    }
}

pub(crate) struct Redis {
    pub(crate) config: RedisConfig,
    clock: Arc<dyn Clock>,
    conns: Box<[Conn]>,
    next: AtomicUsize,
    /// One breaker for a standalone Redis; for a cluster, one per group of
    /// [`SLOTS_PER_GROUP`] hash slots, so a hung or dead node opens only the
    /// groups of the slots it serves.
    breakers: Box<[Breaker]>,
    probing: Box<[AtomicBool]>,
    /// The slot of each group's last failure: its probe goes there (a group
    /// at the edge of a node's range has slots on two nodes).
    failed_slot: Box<[std::sync::atomic::AtomicU16]>,
    calls: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    pub(crate) degraded: AtomicU64,
    pub(crate) denied_locally: AtomicU64,
}

impl Redis {
    /// Validates `config` and opens lazy connections; then checks once that
    /// Redis answers. If it does not, the breaker starts open and a
    /// background probe waits for Redis: starting never fails because Redis
    /// is down.
    pub(crate) async fn connect(config: RedisConfig) -> Result<Arc<Self>, ConfigError> {
        config.validate()?;
        let mut conns = Vec::with_capacity(config.connections);
        for _ in 0..config.connections {
            conns.push(match &config.target {
                Target::Standalone(url) => {
                    let client = redis::Client::open(url.as_str())
                        .map_err(|e| ConfigError::new("redis.url", format!("{:?}", e.kind())))?;
                    let cfg = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(config.connect_timeout))
                        .set_response_timeout(Some(config.command_timeout))
                        .set_number_of_retries(1);
                    Conn::Single(
                        ConnectionManager::new_lazy_with_config(client, cfg).map_err(|e| {
                            ConfigError::new("redis.url", format!("{:?}", e.kind()))
                        })?,
                    )
                }
                Target::Cluster(nodes) => {
                    let client = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                        .connection_timeout(config.connect_timeout)
                        .response_timeout(config.command_timeout)
                        .retries(2)
                        .build()
                        .map_err(|e| {
                            ConfigError::new("redis.cluster", format!("{:?}", e.kind()))
                        })?;
                    let cfg = ClusterConfig::new()
                        .set_connection_timeout(config.connect_timeout)
                        .set_response_timeout(config.command_timeout);
                    Conn::Cluster(client.get_pending_async_connection_with_config(cfg))
                }
            });
        }
        let clock: Arc<dyn Clock> = match &config.test_clock {
            Some(c) => c.clone(),
            None => Arc::new(throttle_core::WallClock),
        };
        let groups = match config.target {
            Target::Standalone(_) => 1,
            Target::Cluster(_) => SLOTS / SLOTS_PER_GROUP,
        };
        let redis = Arc::new(Self {
            clock,
            breakers: (0..groups)
                .map(|_| Breaker::new(config.breaker_threshold))
                .collect(),
            probing: (0..groups).map(|_| AtomicBool::new(false)).collect(),
            failed_slot: (0..groups)
                .map(|g| std::sync::atomic::AtomicU16::new((g * SLOTS_PER_GROUP) as u16))
                .collect(),
            config,
            conns: conns.into(),
            next: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            degraded: AtomicU64::new(0),
            denied_locally: AtomicU64::new(0),
        });
        let patience = redis.config.connect_timeout + redis.config.command_timeout;
        if !redis.ping(patience).await {
            tracing::warn!(
                "throttle: Redis does not answer at startup; deciding by failure policy until it does"
            );
            for group in 0..redis.breakers.len() {
                if redis.breakers[group].trip() {
                    Self::probe(&redis, group);
                }
            }
        }
        Ok(redis)
    }

    fn conn(&self) -> Conn {
        let i = if self.conns.len() == 1 {
            0
        } else {
            self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len()
        };
        self.conns[i].clone()
    }

    /// "Now" for the scripts: 0 (read Redis `TIME`) unless a test clock is set.
    pub(crate) fn script_now(&self) -> u64 {
        self.config.test_clock.as_ref().map_or(0, |c| c.now_us())
    }

    /// "Now" for local decisions and flush schedules: the test clock if set.
    pub(crate) fn local_now(&self) -> u64 {
        self.clock.now_us()
    }

    /// The clock local decisions, flushes and leases all read: the test
    /// clock, or the wall clock (one clock, so local instants compare).
    pub(crate) fn local_clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// Whether the target is a Redis Cluster (pipelines must stay in one slot).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.config.target, Target::Cluster(_))
    }

    /// Runs a script off the request path (flushes): bounded by `timeout`,
    /// counted, but not reported to the breaker.
    pub(crate) async fn eval_off_path<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
        timeout: std::time::Duration,
    ) -> Result<T, Failure> {
        self.timed(inv, timeout).await
    }

    /// The hash slot of `key`'s Redis keys in a cluster, for its breaker
    /// (0 for a standalone Redis, which has one); computed without building
    /// the key.
    #[inline]
    pub(crate) fn slot_for(&self, keys: &crate::keys::KeyBase, key: &throttle_core::Key) -> u16 {
        if self.breakers.len() == 1 {
            return 0;
        }
        keys.slot(key)
    }

    fn group(&self, slot: u16) -> usize {
        if self.breakers.len() == 1 {
            0
        } else {
            usize::from(slot) / SLOTS_PER_GROUP
        }
    }

    /// Whether the breaker of `slot`'s group is open.
    #[inline]
    pub(crate) fn is_open(&self, slot: u16) -> bool {
        self.breakers[self.group(slot)].is_open()
    }

    /// Runs a script on the request path: bounded by the command timeout,
    /// counted, and reported to the breaker of its keys' `slot`.
    pub(crate) async fn eval<T: FromRedisValue>(
        self: &Arc<Self>,
        inv: &ScriptInvocation<'_>,
        slot: u16,
    ) -> Result<T, Failure> {
        let result = self.timed(inv, self.config.command_timeout).await;
        match &result {
            Ok(_) => self.breakers[self.group(slot)].success(),
            Err(failure) => self.failed(failure, slot),
        }
        result
    }

    async fn timed<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
        timeout: std::time::Duration,
    ) -> Result<T, Failure> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut conn = self.conn();
        let result = match tokio::time::timeout(timeout, conn.invoke(inv)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Failure::Error(e)),
            Err(_) => Err(Failure::Timeout),
        };
        if let Err(failure) = &result {
            match failure {
                Failure::Timeout => self.timeouts.fetch_add(1, Ordering::Relaxed),
                Failure::Error(_) => self.errors.fetch_add(1, Ordering::Relaxed),
            };
        }
        result
    }

    /// Sends a script in the background (refunds): never waited for, never
    /// sent while the breaker is open.
    pub(crate) fn spawn_eval(self: &Arc<Self>, inv: ScriptInvocation<'static>, slot: u16) {
        if self.is_open(slot) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        rt.spawn(async move {
            let _ = this.eval::<redis::Value>(&inv, slot).await;
        });
    }

    fn failed(self: &Arc<Self>, failure: &Failure, slot: u16) {
        let group = self.group(slot);
        self.failed_slot[group].store(slot, Ordering::Relaxed);
        if self.breakers[group].failure() {
            tracing::warn!(%failure, group, "throttle: circuit breaker opened; Redis gets no request-path traffic for these keys until a probe succeeds");
            Self::probe(self, group);
        } else {
            tracing::debug!(%failure, "throttle: Redis call failed");
        }
    }

    /// One `PING` within the connect and command timeouts: whether Redis
    /// answers now (off the request path: the breaker is not told).
    pub(crate) async fn ping_once(&self) -> bool {
        self.ping(self.config.connect_timeout + self.config.command_timeout)
            .await
    }

    /// The server's version (`INFO server`), if it answers; for each node
    /// of a cluster the one the query reached.
    pub(crate) async fn server_version(&self) -> Option<(u32, u32)> {
        let mut conn = self.conn();
        let cmd = redis::cmd("INFO").arg("server").to_owned();
        let patience = self.config.connect_timeout + self.config.command_timeout;
        let info = match tokio::time::timeout(patience, conn.query::<redis::Value>(&cmd)).await {
            Ok(Ok(v)) => v,
            _ => return None,
        };
        let text = match info {
            redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            redis::Value::VerbatimString { text, .. } => text,
            redis::Value::Map(nodes) => nodes
                .into_iter()
                .find_map(|(_, v)| match v {
                    redis::Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
                    redis::Value::VerbatimString { text, .. } => Some(text),
                    _ => None,
                })
                .unwrap_or_default(),
            _ => return None,
        };
        parse_version(&text)
    }

    async fn ping(&self, patience: std::time::Duration) -> bool {
        let mut conn = self.conn();
        let cmd = redis::cmd("PING");
        let ping = conn.query::<String>(&cmd);
        matches!(tokio::time::timeout(patience, ping).await, Ok(Ok(_)))
    }

    /// `PING` on the route the scripts of `group` take: the node serving
    /// the slot of the group's last failure, in a cluster.
    async fn ping_group(&self, group: usize, patience: std::time::Duration) -> bool {
        match self.conn() {
            Conn::Single(_) => self.ping(patience).await,
            Conn::Cluster(mut c) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let slot = self.failed_slot[group].load(Ordering::Relaxed);
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(slot, SlotAddr::Master),
                ));
                let ping = c.route_command(redis::cmd("PING"), route);
                matches!(tokio::time::timeout(patience, ping).await, Ok(Ok(_)))
            }
        }
    }

    /// While the breaker of `group` is open, pings its route every probe
    /// interval and closes the breaker when it answers.
    fn probe(this: &Arc<Self>, group: usize) {
        if this.probing[group].swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            this.probing[group].store(false, Ordering::Release);
            return;
        };
        let weak: Weak<Self> = Arc::downgrade(this);
        rt.spawn(async move {
            loop {
                let interval = match weak.upgrade() {
                    Some(r) => r.config.probe_interval,
                    None => return,
                };
                tokio::time::sleep(interval).await;
                let Some(redis) = weak.upgrade() else { return };
                let patience = redis.config.connect_timeout + redis.config.command_timeout;
                if redis.ping_group(group, patience).await {
                    // Lower the flag first: a failure that reopens the
                    // breaker after close() must be able to start a probe.
                    redis.probing[group].store(false, Ordering::Release);
                    redis.breakers[group].close();
                    tracing::info!(
                        group,
                        "throttle: Redis answers again; circuit breaker closed"
                    );
                    return;
                }
            }
        });
    }

    pub(crate) fn stats(&self) -> RedisStats {
        RedisStats {
            calls: self.calls.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            breaker_open: self.breakers.iter().any(Breaker::is_open),
            breaker_opened: self.breakers.iter().map(Breaker::times_opened).sum(),
            degraded: self.degraded.load(Ordering::Relaxed),
            denied_locally: self.denied_locally.load(Ordering::Relaxed),
        }
    }
}
