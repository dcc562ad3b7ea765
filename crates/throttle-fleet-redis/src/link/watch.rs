//! Down signals of the nodes' own, for the modes that decide locally
//! (approximate): they send Redis nothing on the request path, so no
//! failed call would tell them that a node went away.
//!
//! Per node, a subscription on a connection of its own: Redis pushes
//! nothing on it, and its stream ends when the connection is lost (the
//! process died, the node was restarted, the network dropped it), so a
//! lost node opens its breaker at once; the heartbeat's next round
//! subscribes again (no timer of its own). And per node a heartbeat: a `ROLE`
//! every probe interval on a request-path connection, bounded by the
//! command timeout (it answers whether the node is alive and whether it is
//! still a writable primary: a node answering as a replica has its breaker
//! opened and its connections dialled again). One late answer is not taken
//! for a hung node: a heartbeat that is late (or fails) is followed at once
//! by a `PING` on the
//! node's other connection (the off-path one), bounded by the command
//! timeout too, and only when that one is late (or fails) as well is the
//! breaker opened. The breaker's probe closes it again once the node
//! answers.
//!
//! Why a second `PING` and not a count of late rounds: a hung node holds
//! every connection, so the second is late too and the breaker opens one
//! command timeout after the first missed its deadline, not a probe
//! interval or more later; while an answer late for a reason of its own
//! (a process or a machine too busy for a moment to read it in time, a
//! reply queued behind others on that one connection) is followed by one
//! sent when the heartbeat runs again, after the stall, on another socket,
//! which answers. A breaker opened on one late `PING` made a fail-closed
//! approximate rule refuse traffic with Redis healthy.
//!
//! | the node | its breaker opens |
//! |---|---|
//! | loses its connection (killed, restarted, dropped) | at once (the subscription ends) |
//! | hangs (stopped, connections open, nothing answered) | within **two command timeouts plus one probe interval** (a round starts at most one probe interval after the hang; its two `PING`s wait one command timeout each) |
//! | answers one `PING` late, the next in time | never |
//! | answers, as a replica (demoted in a failover) | at the next round (its `ROLE`, asked after the `PING`; its connections are dialled again) |
//!
//! What remains: a node whose two `PING`s in a row, on two connections,
//! are both later than the command timeout is taken for hung until the
//! probe's next round. With answers late at random, each with a chance p,
//! that is one round in 1/p² (at 1%, one in 10,000: about once in 40
//! minutes at the default probe interval).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use futures_util::StreamExt;

use super::node::Node;
use super::ping::ping_on;
use super::role::{Role, role};
use super::{Redis, Route};
use crate::schedule::{Every, Going};

/// The channel the watch subscribes to (nothing is published on it).
const CHANNEL: &str = "throttle:watch";

impl Redis {
    /// Starts watching every node (the cluster's as its table changes),
    /// until the backend is dropped: a heartbeat round every probe
    /// interval on the backend's scheduler.
    pub(crate) fn watch(this: &Arc<Self>) {
        let first = this.local_now();
        let heartbeat = Every::new(
            this,
            first,
            this.config.probe_interval,
            |redis: Arc<Self>| {
                Box::pin(async move {
                    redis.heartbeat().await;
                    Going::On
                })
            },
        );
        this.config.scheduler.start(heartbeat);
    }

    /// One round: subscribes to the nodes not watched yet, pings every
    /// node whose breaker is closed, and opens the breaker of those that
    /// answer neither that `PING` nor, at once after it, a second one on
    /// another connection, each within the command timeout.
    async fn heartbeat(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let nodes = self.nodes();
        for node in &nodes {
            if !node.watched.swap(true, Ordering::AcqRel) {
                Self::subscribe(&weak, node.clone());
            }
        }
        let patience = self.config.command_timeout;
        let pings = nodes.iter().map(|node| async move {
            if node.breaker.is_open() {
                return;
            }
            // `ROLE`, not `PING`: one command says both that the node
            // answers and that it is still a writable primary (a replica
            // answers a `PING` too), at the cost the `PING` had.
            match role(node, patience).await {
                Role::Primary => return,
                Role::Other => {
                    node.redial(self.config.command_timeout);
                    self.lost(node, "it answers as a replica, no longer a writable primary");
                    return;
                }
                Role::Silent => {}
            }
            if ping_on(node.off_path(), patience).await {
                tracing::debug!(node = %node.addr, "throttle: a heartbeat was late; the next, on another connection, was answered");
                return;
            }
            self.lost(
                node,
                "no answer to two heartbeats in a row, on two connections, each within the command timeout",
            );
        });
        futures_util::future::join_all(pings).await;
    }

    /// The primaries (or the one node) commands go to now.
    fn nodes(&self) -> Vec<Arc<Node>> {
        match &self.route {
            Route::Single(node) => vec![node.clone()],
            Route::Cluster(cluster) => cluster.nodes(),
            Route::Sentinel(sentinel) => sentinel.primary().into_iter().collect(),
        }
    }

    /// Subscribes on `node` once, and opens its breaker when the
    /// subscription's connection ends. Not a loop of its own: a node whose
    /// subscription failed or ended is no longer `watched`, and the next
    /// heartbeat (a job of the scheduler, every probe interval) subscribes
    /// again. The reader holds the node weakly, so a dropped node (with its
    /// backend) aborts it and closes its connection.
    fn subscribe(weak: &Weak<Self>, node: Arc<Node>) {
        let Some(redis) = weak.upgrade() else { return };
        let patience = redis.config.connect_timeout + redis.config.command_timeout;
        drop(redis);
        let (weak, client, watched) = (weak.clone(), node.client.clone(), Arc::downgrade(&node));
        let reader = tokio::spawn(async move {
            let subscribed = tokio::time::timeout(patience, async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(CHANNEL).await?;
                Ok::<_, redis::RedisError>(pubsub)
            })
            .await;
            if let Ok(Ok(pubsub)) = subscribed {
                // Nothing is published: the stream ends when the
                // connection is gone.
                let mut messages = pubsub.into_on_message();
                while messages.next().await.is_some() {}
                if let (Some(redis), Some(node)) = (weak.upgrade(), watched.upgrade()) {
                    redis.lost(&node, "its connection was lost");
                }
            }
            // Not connected: the heartbeat and the breaker's probe say
            // when the node is back, and the next heartbeat subscribes.
            if let Some(node) = watched.upgrade() {
                node.watched.store(false, Ordering::Release);
            }
        });
        if let Some(old) = node.subscription.lock().replace(reader.abort_handle()) {
            old.abort();
        }
    }

    /// Opens `node`'s breaker (if it was closed) and starts its probe.
    fn lost(self: &Arc<Self>, node: &Arc<Node>, why: &str) {
        if node.breaker.trip() {
            self.breaker_opened.fetch_add(1, Ordering::Relaxed);
            self.publish_health();
            tracing::warn!(node = %node.addr, "throttle: Redis node down ({why}); deciding by failure policy until it answers");
            Self::probe(self, node.clone());
        }
    }
}
