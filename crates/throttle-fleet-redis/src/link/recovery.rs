//! The nodes' health: a breaker opened by failures on the request path (or
//! by the watch, `watch.rs`), the probe that closes it again once the node
//! answers as a writable primary (`role.rs`), the discovery while some slot
//! has no known primary (a Cluster's table, a Sentinel's primary), and the
//! publication of which nodes are down.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::node::Node;
use super::ping::ping_every;
use super::role::{Role, role};
use super::{Failure, Redis, Route};
use crate::health::Health;
use crate::schedule::{Every, Going};

impl Redis {
    pub(super) fn failed(self: &Arc<Self>, failure: &Failure, node: &Arc<Node>) {
        if node.breaker.failure() {
            self.breaker_opened.fetch_add(1, Ordering::Relaxed);
            self.publish_health();
            tracing::warn!(%failure, node = %node.addr, "throttle: circuit breaker opened; Redis gets no request-path traffic for these keys until a probe succeeds");
            Self::probe(self, node.clone());
        } else {
            tracing::debug!(%failure, "throttle: Redis call failed");
        }
    }

    /// `node` answered that it takes no writes now (`READONLY`,
    /// `MASTERDOWN`, `LOADING`): its connections are dialled again (a name
    /// that moved to the promoted replica is resolved again), and the
    /// cluster's table or the sentinels are read again in the background.
    /// The failure counts for the breaker all the same (the caller tells
    /// it).
    pub(super) fn not_writable(self: &Arc<Self>, node: &Arc<Node>) {
        if node.redial(self.config.command_timeout) {
            tracing::warn!(node = %node.addr, "throttle: Redis node takes no writes now (a replica, or loading); its connections are dialled again");
        }
        self.refresh_soon();
    }

    /// Reads the cluster's slot table again in the background (after a
    /// `MOVED` or a failed flush), or asks the sentinels again, at most
    /// once per probe interval.
    pub(super) fn refresh_soon(self: &Arc<Self>) {
        let due = match &self.route {
            Route::Single(_) => false,
            Route::Cluster(cluster) => cluster.refresh_due(self.config.probe_interval),
            Route::Sentinel(sentinel) => sentinel.ask_due(self.config.probe_interval),
        };
        if !due {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak = Arc::downgrade(self);
        rt.spawn(async move {
            let Some(redis) = weak.upgrade() else { return };
            match &redis.route {
                Route::Cluster(cluster) => {
                    cluster.refresh(redis.patience()).await;
                }
                Route::Sentinel(sentinel) => {
                    sentinel.resolve(redis.patience()).await;
                    redis.publish_health();
                }
                Route::Single(_) => {}
            }
        });
    }

    /// While the slot table has slots no known primary serves (no node has
    /// answered yet, or a primary failed with no replica to take over), or
    /// no sentinel names a primary that answers as one, reads the table or
    /// asks the sentinels every probe interval until every slot is served.
    pub(super) fn discover(this: &Arc<Self>) {
        let discovering = match &this.route {
            Route::Single(_) => return,
            Route::Cluster(cluster) => &cluster.discovering,
            Route::Sentinel(sentinel) => &sentinel.discovering,
        };
        if discovering.swap(true, Ordering::AcqRel) {
            return;
        }
        let first = this.local_now();
        let discover = Every::new(
            this,
            first,
            this.config.probe_interval,
            |redis: Arc<Self>| {
                Box::pin(async move { Going::over_if(redis.discover_round().await) })
            },
        );
        this.config.scheduler.start(discover);
    }

    /// One discovery round: reads the slot table; returns whether every
    /// slot is served now (the discovery is over).
    pub(super) async fn discover_round(&self) -> bool {
        match &self.route {
            Route::Single(_) => true,
            Route::Cluster(cluster) => {
                if cluster.refresh(self.patience()).await && cluster.is_complete() {
                    cluster.discovering.store(false, Ordering::Release);
                    tracing::info!("throttle: Redis Cluster serves every slot");
                    return true;
                }
                false
            }
            Route::Sentinel(sentinel) => {
                if sentinel.resolve(self.patience()).await {
                    sentinel.discovering.store(false, Ordering::Release);
                    self.publish_health();
                    self.recovered.notify_waiters();
                    return true;
                }
                false
            }
        }
    }

    /// While `node`'s breaker is open, pings it every probe interval and
    /// closes the breaker when it answers on every connection.
    pub(super) fn probe(this: &Arc<Self>, node: Arc<Node>) {
        if node.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let every = this.config.probe_interval;
        let first = this.local_now() + crate::schedule::micros(every);
        let probe = Every::new(this, first, every, move |redis: Arc<Self>| {
            let node = node.clone();
            Box::pin(async move { Going::over_if(redis.probe_round(&node).await) })
        });
        this.config.scheduler.start(probe);
    }

    /// One probe round. In a cluster it reads the slot table first: a
    /// primary that lost its slots (its replica was promoted) is no longer
    /// probed, its slots went to a node of their own. With Sentinel it
    /// asks the sentinels first: a primary they no longer name is no
    /// longer probed, its successor took its place. The breaker closes
    /// when the node answers on every connection and says it is a
    /// writable primary; a node that answers as a replica has its
    /// connections dialled again at once and is asked once more on them
    /// (a name that moved is followed in the same round). Returns whether
    /// the probe is over (the breaker closed).
    pub(super) async fn probe_round(self: &Arc<Self>, node: &Arc<Node>) -> bool {
        let patience = self.patience();
        let replaced = match &self.route {
            Route::Single(_) => false,
            Route::Cluster(cluster) => {
                cluster.refresh(patience).await;
                !cluster.serves(node)
            }
            Route::Sentinel(sentinel) => {
                sentinel.resolve(patience).await;
                if sentinel.serves(node) && sentinel.current_refused() {
                    return false;
                }
                !sentinel.serves(node)
            }
        };
        if replaced {
            node.probing.store(false, Ordering::Release);
            node.breaker.close();
            self.publish_health();
            match &self.route {
                Route::Sentinel(_) => {
                    self.last_recovery
                        .fetch_max(self.local_now().max(1), Ordering::Relaxed);
                    self.recovered.notify_waiters();
                    tracing::info!(node = %node.addr, "throttle: the sentinels name another primary; commands go there");
                }
                _ => {
                    Self::discover(self);
                    tracing::info!(node = %node.addr, "throttle: Redis Cluster node serves no slots any more; its keys went to another");
                }
            }
            return true;
        }
        let mut writable = self.writable(node).await;
        if writable == Some(Role::Other) && node.redial(self.config.command_timeout) {
            writable = self.writable(node).await;
        }
        if writable == Some(Role::Primary) {
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

    /// What `node` says it is once it answered a `PING` on every
    /// connection (`None` if it did not): a writable primary, or a node
    /// that says it is not (a replica), or silent (a late `ROLE` is left to
    /// the next round, as a late `PING` is).
    async fn writable(&self, node: &Node) -> Option<Role> {
        let patience = self.patience();
        if !ping_every(node, patience).await {
            return None;
        }
        let role = role(node, patience).await;
        if role == Role::Other {
            tracing::debug!(node = %node.addr, "throttle: Redis node answers as a replica; its breaker stays open");
        }
        Some(role)
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
            Route::Sentinel(sentinel) => sentinel.primary().into_iter().collect(),
        };
        let mut down: Vec<String> = nodes
            .iter()
            .filter(|n| n.breaker.is_open())
            .map(|n| n.addr.clone())
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
}
