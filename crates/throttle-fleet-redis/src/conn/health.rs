//! The nodes' health: a breaker opened by failures on the request path (or
//! by the watch, `watch.rs`), the probe that closes it again, the Cluster's
//! discovery while some slot has no primary, and the publication of which
//! nodes are down.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::node::Node;
use super::ping::ping_every;
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

    /// Reads the cluster's slot table again in the background (after a
    /// `MOVED` or a failed flush), at most once per probe interval.
    pub(super) fn refresh_soon(self: &Arc<Self>) {
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
    pub(super) fn discover(this: &Arc<Self>) {
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
                Box::pin(async move { Going::over_if(redis.discover_round().await) })
            },
        );
        this.config.scheduler.start(discover);
    }

    /// One discovery round: reads the slot table; returns whether every
    /// slot is served now (the discovery is over).
    pub(super) async fn discover_round(&self) -> bool {
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
    /// probed, its slots went to a node of their own. Returns whether the
    /// probe is over (the breaker closed).
    pub(super) async fn probe_round(self: &Arc<Self>, node: &Arc<Node>) -> bool {
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
