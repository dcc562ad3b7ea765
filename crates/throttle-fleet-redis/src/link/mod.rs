//! Connections (standalone or cluster), timeouts, circuit breakers and
//! the counters every mode shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::FromRedisValue;
use throttle_fleet_core::{ConfigError, clock::Clock};

pub(crate) use crate::call_failure::Failure;
use crate::config::{RedisConfig, Target};
use crate::health::Health;
use crate::metrics::CallMetrics;

mod call;
mod cluster;
pub(crate) mod endpoint;
mod lua;
mod node;
mod ping;
mod recovery;
mod refusal;
mod role;
mod sentinel;
mod spacing;
mod version;
mod watch;

pub(crate) use call::{Call, Eval};
use cluster::{Cluster, Redirect, redirect};
pub(crate) use lua::LuaScript;
use node::Node;
use ping::ping_every;
use sentinel::Sentinel;

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

/// Where commands go: the one node of a standalone Redis, the primary
/// of each slot of a cluster, or the primary a Sentinel names.
enum Route {
    Single(Arc<Node>),
    Cluster(Box<Cluster>),
    Sentinel(Box<Sentinel>),
}

pub(crate) struct Redis {
    pub(crate) config: RedisConfig,
    clock: Arc<dyn Clock>,
    /// One breaker for a standalone Redis; for a cluster, one per primary,
    /// so a hung or dead node opens only the breaker of the slots it serves.
    route: Route,
    calls: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    breaker_opened: AtomicU64,
    pub(crate) degraded: AtomicU64,
    pub(crate) denied_locally: AtomicU64,
    metrics: CallMetrics,
    /// Woken when a probe closes a breaker: the approximate mode's flush
    /// tasks that wait to find Redis back try at once, not at their next
    /// probe-interval turn.
    pub(crate) recovered: Arc<tokio::sync::Notify>,
    /// When (µs, the local clock) a probe last closed a breaker, or 0:
    /// what a scheduled job reads to know `recovered` was woken.
    last_recovery: AtomicU64,
    /// The nodes whose breaker is open, published at every change
    /// ([`publish_health`](Self::publish_health)) for the stores of the
    /// public `connection` module.
    health: tokio::sync::watch::Sender<Health>,
    /// The fleet's operations (blocks, resets: `operate::Operations`), started
    /// when a rule first asks for them and kept as long as the backend.
    /// Held by type-erased value: what runs on a connection does not depend
    /// on what uses it.
    pub(crate) ops: std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
}

impl Redis {
    /// Validates `config` and opens lazy connections; then checks once that
    /// Redis answers (for a cluster: reads its slot table). If it does not,
    /// the breaker starts open and a background probe waits for Redis:
    /// starting never fails because Redis is down.
    pub(crate) async fn connect(config: RedisConfig) -> Result<Arc<Self>, ConfigError> {
        config.validate()?;
        let route = match &config.target {
            Target::Standalone(url) => {
                let bad =
                    |e: redis::RedisError| ConfigError::new("redis.url", format!("{:?}", e.kind()));
                let info = endpoint::connection_info(url, "redis.url", &config)?;
                // Named by its URL's address (`host:port`, no credentials),
                // as a cluster names its nodes: in logs, metrics and health.
                let addr = info.addr().to_string();
                Route::Single(Arc::new(Node::open(info, addr, &config).map_err(bad)?))
            }
            Target::Cluster(nodes) => Route::Cluster(Box::new(Cluster::new(nodes, &config)?)),
            Target::Sentinel { sentinels, service } => {
                Route::Sentinel(Box::new(Sentinel::new(sentinels, service, &config)?))
            }
        };
        let clock = config.scheduler.clock();
        let redis = Arc::new(Self {
            clock,
            route,
            config,
            calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            breaker_opened: AtomicU64::new(0),
            degraded: AtomicU64::new(0),
            denied_locally: AtomicU64::new(0),
            metrics: CallMetrics::new(),
            recovered: Arc::new(tokio::sync::Notify::new()),
            last_recovery: AtomicU64::new(0),
            health: tokio::sync::watch::Sender::new(Health::default()),
            ops: std::sync::OnceLock::new(),
        });
        let patience = redis.patience();
        match &redis.route {
            Route::Single(node) => {
                // A refusal (credentials, certificate) is the caller's error.
                if !refusal::first_ping(node, patience).await? {
                    tracing::warn!(
                        "throttle: Redis does not answer at startup; deciding by failure policy until it does"
                    );
                    if node.breaker.trip() {
                        redis.breaker_opened.fetch_add(1, Ordering::Relaxed);
                        redis.publish_health();
                        Self::probe(&redis, node.clone());
                    }
                }
            }
            Route::Cluster(cluster) => {
                if !cluster.refresh(patience).await {
                    cluster.refused_at_start(patience).await?;
                    tracing::warn!(
                        "throttle: no Redis Cluster node answers at startup; deciding by failure policy until one does"
                    );
                }
                if !cluster.is_complete() {
                    Self::discover(&redis);
                }
            }
            Route::Sentinel(sentinel) => {
                if !sentinel.resolve(patience).await {
                    sentinel.refused_at_start(patience).await?;
                    tracing::warn!(
                        "throttle: no sentinel names a primary that answers as one at startup; deciding by failure policy until one does"
                    );
                    Self::discover(&redis);
                }
            }
        }
        redis.check_server().await?;
        Ok(redis)
    }

    /// How long a probe or a topology read may wait.
    fn patience(&self) -> Duration {
        self.config.connect_timeout + self.config.command_timeout
    }

    /// "Now" for the scripts: 0 (they read Redis `TIME`), or a test's time.
    pub(crate) fn script_now(&self) -> u64 {
        self.config.scheduler.script_now()
    }

    /// "Now" for local decisions and schedules: the scheduler's clock.
    pub(crate) fn local_now(&self) -> u64 {
        self.clock.now_us()
    }

    /// The clock local decisions, flushes and leases all read: the
    /// scheduler's (one clock, so local instants compare).
    pub(crate) fn local_clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// Whether the target is a Redis Cluster (pipelines must stay in one slot).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.route, Route::Cluster(_))
    }

    /// The hash slot of `key`'s Redis keys in a cluster, for its route and
    /// breaker (0 for a standalone Redis, which has one); computed without
    /// building the key.
    #[inline]
    pub(crate) fn slot_for(
        &self,
        keys: &crate::keys::KeyBase,
        key: &throttle_fleet_core::Key,
    ) -> u16 {
        match self.route {
            Route::Single(_) | Route::Sentinel(_) => 0,
            Route::Cluster(_) => keys.slot(key),
        }
    }

    /// A client for the node serving `slot`, to subscribe with (a channel
    /// published there reaches it; in a Cluster, published anywhere), or
    /// `None` while no node is known for the slot.
    pub(crate) fn pubsub_client(&self, slot: u16) -> Option<redis::Client> {
        match &self.route {
            Route::Single(node) => Some(node.client.clone()),
            Route::Cluster(cluster) => cluster.node_for(slot).map(|n| n.client.clone()),
            Route::Sentinel(sentinel) => sentinel.primary().map(|n| n.client.clone()),
        }
    }

    /// Whether the breaker of `slot`'s node is open (or, in a cluster, no
    /// primary is known for it yet).
    #[inline]
    pub(crate) fn is_open(&self, slot: u16) -> bool {
        match &self.route {
            Route::Single(node) => node.breaker.is_open(),
            Route::Cluster(cluster) => cluster.is_open(slot),
            Route::Sentinel(sentinel) => sentinel.is_open(),
        }
    }

    /// Runs a script off the request path (flushes) on the node of `slot`:
    /// bounded by `timeout`, counted, but not reported to the breaker.
    pub(crate) async fn eval_off_path<T: FromRedisValue>(
        self: &Arc<Self>,
        inv: &impl Call,
        slot: u16,
        timeout: Duration,
    ) -> Result<T, Failure> {
        self.routed(inv, slot, timeout, false).await
    }

    /// Runs a script on the request path: bounded by the command timeout,
    /// counted, and reported to the breaker of the node serving `slot`.
    pub(crate) async fn eval<T: FromRedisValue>(
        self: &Arc<Self>,
        inv: &impl Call,
        slot: u16,
    ) -> Result<T, Failure> {
        self.routed(inv, slot, self.config.command_timeout, true)
            .await
    }

    async fn routed<T: FromRedisValue>(
        self: &Arc<Self>,
        inv: &impl Call,
        slot: u16,
        timeout: Duration,
        report: bool,
    ) -> Result<T, Failure> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.metrics.call();
        let deadline = tokio::time::Instant::now() + timeout;
        let (node, result) = match &self.route {
            Route::Single(node) => (
                node.clone(),
                invoke(node, inv, deadline, false, !report).await,
            ),
            Route::Cluster(cluster) => {
                let Some(node) = cluster.node_for(slot) else {
                    Self::discover(self);
                    self.metrics.failed(&Failure::Unrouted);
                    return Err(Failure::Unrouted);
                };
                let first = invoke(&node, inv, deadline, false, !report).await;
                match first {
                    Err(Failure::Error(ref e)) => match redirect(e) {
                        Some(Redirect::Moved(slot, addr)) => {
                            let moved = cluster.moved(slot, addr);
                            self.refresh_soon();
                            match moved {
                                Some(to) => {
                                    let r = invoke(&to, inv, deadline, false, !report).await;
                                    (to, r)
                                }
                                None => (node, first),
                            }
                        }
                        Some(Redirect::Ask(addr)) => match cluster.node_at(addr) {
                            Some(to) => {
                                let r = invoke(&to, inv, deadline, true, !report).await;
                                (to, r)
                            }
                            None => (node, first),
                        },
                        None => (node, first),
                    },
                    _ => (node, first),
                }
            }
            Route::Sentinel(sentinel) => {
                let Some(node) = sentinel.primary() else {
                    Self::discover(self);
                    self.metrics.failed(&Failure::Unrouted);
                    return Err(Failure::Unrouted);
                };
                let result = invoke(&node, inv, deadline, false, !report).await;
                (node, result)
            }
        };
        match &result {
            Ok(_) if report => node.breaker.success(),
            Ok(_) => {}
            Err(failure) => {
                self.metrics.failed(failure);
                match failure {
                    Failure::Timeout => self.timeouts.fetch_add(1, Ordering::Relaxed),
                    _ => self.errors.fetch_add(1, Ordering::Relaxed),
                };
                if let Failure::Error(e) = failure
                    && role::is_not_writable(e)
                {
                    self.not_writable(&node);
                }
                if report {
                    self.failed(failure, &node);
                } else {
                    // Off the path no breaker probes the node: the table is
                    // read again here, so a failover is followed all the same.
                    self.refresh_soon();
                }
            }
        }
        result
    }

    /// Sends a script in the background (refunds): never waited for, never
    /// sent while the breaker is open.
    pub(crate) fn spawn_eval(self: &Arc<Self>, inv: impl Call + Send + 'static, slot: u16) {
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

    /// Like [`spawn_eval`](Self::spawn_eval), but the command is queued on
    /// the node's connection before this returns (its first poll happens
    /// here), and the rest runs in the background. A later call of this
    /// instance on that connection (with one connection per node, the
    /// default: any later call for the same key) runs after it in Redis:
    /// a concurrency slot released at a response's last frame is free
    /// before the client that read it can send its next request.
    pub(crate) fn send_now(self: &Arc<Self>, inv: impl Call + Send + 'static, slot: u16) {
        if self.is_open(slot) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        let mut call = Box::pin(async move {
            let _ = this.eval::<redis::Value>(&inv, slot).await;
        });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if call.as_mut().poll(&mut cx).is_pending() {
            rt.spawn(call);
        }
    }

    /// Whether the node serving `slot` answers a `PING` now, on every
    /// connection (off the request path: no breaker is told).
    pub(crate) async fn ping_slot(&self, slot: u16) -> bool {
        let patience = self.patience();
        match &self.route {
            Route::Single(node) => ping_every(node, patience).await,
            Route::Cluster(cluster) => match cluster.node_for(slot) {
                Some(node) => ping_every(&node, patience).await,
                None => cluster.refresh(patience).await && cluster.node_for(slot).is_some(),
            },
            Route::Sentinel(sentinel) => match sentinel.primary() {
                Some(node) => ping_every(&node, patience).await,
                None => sentinel.resolve(patience).await,
            },
        }
    }

    pub(crate) fn stats(&self) -> RedisStats {
        let breaker_open = match &self.route {
            Route::Single(node) => node.breaker.is_open(),
            Route::Cluster(cluster) => {
                cluster.is_unrouted() || cluster.nodes().iter().any(|n| n.breaker.is_open())
            }
            Route::Sentinel(sentinel) => sentinel.is_open(),
        };
        RedisStats {
            calls: self.calls.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            breaker_open,
            breaker_opened: self.breaker_opened.load(Ordering::Relaxed),
            degraded: self.degraded.load(Ordering::Relaxed),
            denied_locally: self.denied_locally.load(Ordering::Relaxed),
        }
    }
}

/// One script call on `node` until `deadline`, on its off-path connection
/// if `off_path`; `asking` sends `ASKING` first (a slot in migration).
async fn invoke<T: FromRedisValue>(
    node: &Node,
    inv: &impl Call,
    deadline: tokio::time::Instant,
    asking: bool,
    off_path: bool,
) -> Result<T, Failure> {
    let mut conn = if off_path {
        node.off_path()
    } else {
        node.conn()
    };
    let call = async {
        let reply = inv.send(&mut conn, asking).await?;
        Ok::<T, redis::RedisError>(T::from_redis_value(reply)?)
    };
    match tokio::time::timeout_at(deadline, call).await {
        Ok(Ok(v)) => Ok(v),
        // The off-path connection's own response timeout may fire first: a
        // timeout all the same, not an error.
        Ok(Err(e)) if e.is_timeout() => Err(Failure::Timeout),
        Ok(Err(e)) => Err(Failure::Error(e)),
        Err(_) => Err(Failure::Timeout),
    }
}
