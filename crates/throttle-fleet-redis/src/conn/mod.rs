//! Connections (standalone or cluster), timeouts, circuit breakers and
//! the counters every mode shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::{FromRedisValue, IntoConnectionInfo};
use throttle_fleet_core::{Clock, ConfigError};

pub(crate) use crate::call_failure::Failure;
use crate::config::{RedisConfig, Target};
use crate::health::Health;
use crate::metrics::CallMetrics;
use crate::schedule::{Every, Going};

mod call;
mod cluster;
mod node;
mod version;
mod watch;

pub(crate) use call::{Call, Eval};
use cluster::{Cluster, Redirect, redirect};
use node::Node;

use version::parse_version;

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

/// Where commands go: the one node of a standalone Redis, or the primary
/// of each slot of a cluster.
enum Route {
    Single(Arc<Node>),
    Cluster(Box<Cluster>),
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
                let info = url.as_str().into_connection_info().map_err(bad)?;
                Route::Single(Arc::new(
                    Node::open(info, String::new(), &config).map_err(bad)?,
                ))
            }
            Target::Cluster(nodes) => Route::Cluster(Box::new(Cluster::new(nodes, &config)?)),
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
        });
        let patience = redis.patience();
        match &redis.route {
            Route::Single(node) => {
                if !ping(node, patience).await {
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
                    tracing::warn!(
                        "throttle: no Redis Cluster node answers at startup; deciding by failure policy until one does"
                    );
                }
                if !cluster.is_complete() {
                    Self::discover(&redis);
                }
            }
        }
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
            Route::Single(_) => 0,
            Route::Cluster(_) => keys.slot(key),
        }
    }

    /// Whether the breaker of `slot`'s node is open (or, in a cluster, no
    /// primary is known for it yet).
    #[inline]
    pub(crate) fn is_open(&self, slot: u16) -> bool {
        match &self.route {
            Route::Single(node) => node.breaker.is_open(),
            Route::Cluster(cluster) => cluster.is_open(slot),
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

    fn failed(self: &Arc<Self>, failure: &Failure, node: &Arc<Node>) {
        if node.breaker.failure() {
            self.breaker_opened.fetch_add(1, Ordering::Relaxed);
            self.publish_health();
            tracing::warn!(%failure, node = %node.addr, "throttle: circuit breaker opened; Redis gets no request-path traffic for these keys until a probe succeeds");
            Self::probe(self, node.clone());
        } else {
            tracing::debug!(%failure, "throttle: Redis call failed");
        }
    }

    /// Reads the cluster's slot table again in the background (after a
    /// `MOVED` or a failed flush), at most once per probe interval.
    fn refresh_soon(self: &Arc<Self>) {
        let Route::Cluster(cluster) = &self.route else {
            return;
        };
        if !cluster.refresh_due(self.config.probe_interval) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(self);
        rt.spawn(async move {
            if let Some(redis) = weak.upgrade()
                && let Route::Cluster(cluster) = &redis.route
            {
                cluster.refresh(redis.patience()).await;
            }
        });
    }

    /// While the slot table has slots no known primary serves (no node has
    /// answered yet, or a primary failed with no replica to take over),
    /// reads it every probe interval until every slot is served.
    fn discover(this: &Arc<Self>) {
        let Route::Cluster(cluster) = &this.route else {
            return;
        };
        if cluster.discovering.swap(true, Ordering::AcqRel) {
            return;
        }
        let first = this.local_now();
        let discover = Every::new(
            this,
            first,
            this.config.probe_interval,
            |redis: Arc<Self>| {
                Box::pin(async move {
                    if redis.discover_round().await {
                        Going::Over
                    } else {
                        Going::On
                    }
                })
            },
        );
        this.config.scheduler.start(discover);
    }

    /// One discovery round: reads the slot table; returns whether every
    /// slot is served now (the discovery is over).
    async fn discover_round(&self) -> bool {
        let Route::Cluster(cluster) = &self.route else {
            return true;
        };
        if cluster.refresh(self.patience()).await && cluster.is_complete() {
            cluster.discovering.store(false, Ordering::Release);
            tracing::info!("throttle: Redis Cluster serves every slot");
            return true;
        }
        false
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
        }
    }

    /// The server's version (`INFO server`), if it answers; for a cluster,
    /// that of one primary.
    pub(crate) async fn server_version(&self) -> Option<(u32, u32)> {
        let node = match &self.route {
            Route::Single(node) => node.clone(),
            Route::Cluster(cluster) => cluster.nodes().into_iter().next()?,
        };
        let mut conn = node.conn();
        let cmd = redis::cmd("INFO").arg("server").to_owned();
        let info =
            match tokio::time::timeout(self.patience(), cmd.query_async::<redis::Value>(&mut conn))
                .await
            {
                Ok(Ok(v)) => v,
                _ => return None,
            };
        let text = match info {
            redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            redis::Value::VerbatimString { text, .. } => text,
            _ => return None,
        };
        parse_version(&text)
    }

    /// While `node`'s breaker is open, pings it every probe interval and
    /// closes the breaker when it answers on every connection.
    fn probe(this: &Arc<Self>, node: Arc<Node>) {
        if node.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let every = this.config.probe_interval;
        let first = this.local_now() + crate::schedule::micros(every);
        let probe = Every::new(this, first, every, move |redis: Arc<Self>| {
            let node = node.clone();
            Box::pin(async move {
                if redis.probe_round(&node).await {
                    Going::Over
                } else {
                    Going::On
                }
            })
        });
        this.config.scheduler.start(probe);
    }

    /// One probe round. In a cluster it reads the slot table first: a
    /// primary that lost its slots (its replica was promoted) is no longer
    /// probed, its slots went to a node of their own. Returns whether the
    /// probe is over (the breaker closed).
    async fn probe_round(self: &Arc<Self>, node: &Arc<Node>) -> bool {
        let patience = self.patience();
        if let Route::Cluster(cluster) = &self.route {
            cluster.refresh(patience).await;
            if !cluster.serves(node) {
                node.probing.store(false, Ordering::Release);
                node.breaker.close();
                self.publish_health();
                Self::discover(self);
                tracing::info!(node = %node.addr, "throttle: Redis Cluster node serves no slots any more; its keys went to another");
                return true;
            }
        }
        if ping_every(node, patience).await {
            // Lower the flag first: a failure that reopens the breaker
            // after close() must be able to start a probe.
            node.probing.store(false, Ordering::Release);
            node.breaker.close();
            self.publish_health();
            self.last_recovery
                .fetch_max(self.local_now().max(1), Ordering::Relaxed);
            self.recovered.notify_waiters();
            tracing::info!(node = %node.addr, "throttle: Redis answers again; circuit breaker closed");
            return true;
        }
        false
    }

    /// When (µs, the local clock) a probe last closed a breaker, or 0.
    pub(crate) fn last_recovery(&self) -> u64 {
        self.last_recovery.load(Ordering::Relaxed)
    }

    /// Which nodes are down now: a receiver of every change.
    pub(crate) fn health(&self) -> tokio::sync::watch::Receiver<Health> {
        self.health.subscribe()
    }

    /// Publishes the nodes whose breaker is open, if that changed. Called
    /// after every breaker that opened or closed.
    pub(crate) fn publish_health(&self) {
        let nodes = match &self.route {
            Route::Single(node) => vec![node.clone()],
            Route::Cluster(cluster) => cluster.nodes(),
        };
        let mut down: Vec<String> = nodes
            .iter()
            .filter(|n| n.breaker.is_open())
            .map(|n| n.name.clone())
            .collect();
        down.sort_unstable();
        self.health.send_if_modified(|health| {
            let changed = health.down != down;
            if changed {
                health.down = down;
            }
            changed
        });
    }

    pub(crate) fn stats(&self) -> RedisStats {
        let breaker_open = match &self.route {
            Route::Single(node) => node.breaker.is_open(),
            Route::Cluster(cluster) => {
                cluster.is_unrouted() || cluster.nodes().iter().any(|n| n.breaker.is_open())
            }
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

/// One `PING` to `node`, on one of its request-path connections, within
/// `patience` (the heartbeat and the check at start).
async fn ping(node: &Node, patience: Duration) -> bool {
    ping_on(node.conn(), patience).await
}

/// Whether `node` answers on every connection it has, the request path's
/// and the off-path one, each within `patience`. A breaker closes, and an
/// approximate bucket's flushes resume, only on this: a connection lost in
/// the outage is dialled again here, not by the first request or flush
/// after it, which would fail and put the node straight back in its
/// degraded state for another probe interval.
async fn ping_every(node: &Node, patience: Duration) -> bool {
    let pings = node.connections().map(|conn| ping_on(conn, patience));
    futures_util::future::join_all(pings)
        .await
        .into_iter()
        .all(|answered| answered)
}

/// One `PING` on `conn` within `patience`. A lost connection is dialled
/// again only by the command that finds it lost, and that command fails at
/// once; so a failure within the deadline is tried once more, on the
/// connection it dialled. A round thus says whether Redis answers now,
/// not whether it answered when the last round ran: without this, every
/// recovery took one probe interval more than it needed.
async fn ping_on(mut conn: redis::aio::ConnectionManager, patience: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + patience;
    for _ in 0..2 {
        let cmd = redis::cmd("PING");
        match tokio::time::timeout_at(deadline, cmd.query_async::<String>(&mut conn)).await {
            Ok(Ok(_)) => return true,
            Ok(Err(_)) => continue,
            Err(_) => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use throttle_fleet_test_support::RedisServer;

    /// The first round after an outage answers: the `PING` that finds a
    /// connection lost dials it again and is sent once more on it, on the
    /// request path's connections and the off-path one alike; after that
    /// round no connection has a failure left to give its next command.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_round_after_an_outage_answers_on_every_connection() {
        let server = RedisServer::start();
        let config = RedisConfig::standalone(server.url()).connections(3);
        let info = server.url().into_connection_info().unwrap();
        let node = Node::open(info, String::new(), &config).unwrap();
        let patience = Duration::from_secs(2);
        // Each connection by its own accessor, not by the list a round goes
        // through: three request-path ones in turn, then the off-path.
        let each = || (0..3).map(|_| node.conn()).chain([node.off_path()]);
        for conn in each() {
            assert!(ping_on(conn, patience).await);
        }
        server.kill();
        assert!(!ping_every(&node, patience).await);
        // A second of outage: every connection is left holding a failed
        // dial (a redial the round above started, or one of its own).
        tokio::time::sleep(Duration::from_secs(1)).await;
        server.restart();
        assert!(
            ping_every(&node, patience).await,
            "the first round after Redis came back did not answer"
        );
        for mut conn in each() {
            let once = redis::cmd("PING").query_async::<String>(&mut conn).await;
            assert!(once.is_ok(), "a connection left to fail: {once:?}");
        }
    }
}
