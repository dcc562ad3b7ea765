//! One Redis server as the backend sees it: its connections and its
//! breaker. A standalone Redis is one node; a cluster has one per primary,
//! so a hung or dead primary delays and breaks only the slots it serves.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use arc_swap::ArcSwap;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionInfo, RedisResult};

use super::spacing::Spacing;
use crate::breaker::Breaker;

/// The longest an off-path call waits for a reply on its connection (its
/// caller's own bound is usually shorter).
const OFF_PATH_RESPONSE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
use crate::config::RedisConfig;

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(reader) = self.subscription.get_mut().take() {
            reader.abort();
        }
    }
}

pub(crate) struct Node {
    /// `host:port`: as the cluster names it, or a standalone node's URL's
    /// (without its credentials). What the route table, the logs, the
    /// metrics and the published [`Health`](crate::health::Health) call it.
    pub(crate) addr: String,
    /// Replaced whole by [`redial`](Self::redial).
    conns: Box<[ArcSwap<ConnectionManager>]>,
    next: AtomicUsize,
    /// The connection of flushes and their probes.
    off_path: ArcSwap<ConnectionManager>,
    /// How the connections are made, for [`redial`](Self::redial).
    dial: ConnectionManagerConfig,
    /// The connections replaced: at most once per interval.
    redialed: Spacing,
    pub(crate) breaker: Breaker,
    /// Whether a probe is running for this node's open breaker.
    pub(crate) probing: AtomicBool,
    /// Whether a watch subscription runs for this node (`watch.rs`).
    pub(crate) watched: AtomicBool,
    /// The watch subscription's reader, ended when the node is dropped
    /// (it holds the node weakly, and its connection until it ends).
    pub(crate) subscription: parking_lot::Mutex<Option<tokio::task::AbortHandle>>,
    /// For the watch's own connection.
    pub(crate) client: redis::Client,
}

impl Node {
    /// Opens `config.connections` lazy multiplexed connections to `info`:
    /// nothing is dialled until the first command.
    pub(crate) fn open(
        info: ConnectionInfo,
        addr: String,
        config: &RedisConfig,
    ) -> RedisResult<Self> {
        let client = redis::Client::open(info)?;
        // No response timeout on the request path's connections: every call
        // on them is bounded by its caller's deadline (the command timeout),
        // which drops the call as the connection's own timer would (a
        // timed-out call never makes the connection reconnect either way),
        // and a second timer per call costs as much as the rest of the hop.
        // A redial is one attempt, with no retry of its own after a backoff:
        // the breaker's probe is the retry, every probe interval, and a
        // backoff here only made its rounds late (a round's second PING
        // waited for it while Redis was down, and once Redis was back the
        // round waited for the backoff to end).
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(None)
            .set_number_of_retries(0);
        let conns = (0..config.connections.max(1))
            .map(|_| lazy(&client, &cfg))
            .collect::<RedisResult<Vec<_>>>()?;
        let off_path = lazy_off_path(&client, &cfg)?;
        Ok(Self {
            breaker: Breaker::new(config.breaker_threshold, &addr),
            addr,
            off_path: ArcSwap::from_pointee(off_path),
            conns: conns.into_iter().map(ArcSwap::from_pointee).collect(),
            next: AtomicUsize::new(0),
            dial: cfg,
            redialed: Spacing::new(),
            probing: AtomicBool::new(false),
            watched: AtomicBool::new(false),
            subscription: parking_lot::Mutex::new(None),
            client,
        })
    }

    /// The connection for calls off the request path.
    pub(crate) fn off_path(&self) -> ConnectionManager {
        (**self.off_path.load()).clone()
    }

    /// Every connection of the node: the request path's, then the
    /// off-path one.
    pub(crate) fn connections(&self) -> impl Iterator<Item = ConnectionManager> + '_ {
        self.conns
            .iter()
            .chain(std::iter::once(&self.off_path))
            .map(|conn| (**conn.load()).clone())
    }

    /// Replaces every connection with a new lazy one, dialled (its host
    /// name resolved again) by its first command; calls in flight finish
    /// on the old ones. For a node that answered as no longer a writable
    /// primary: a name that moved to another server (a managed service's
    /// failover) is followed only by a new dial, since a connection stays
    /// with the server it reached. At most once per `spacing` (the calls
    /// sent on the old connections before the first such answer fail the
    /// same way, and must not redial again); returns whether this redialled.
    pub(crate) fn redial(&self, spacing: std::time::Duration) -> bool {
        if !self.redialed.take(spacing) {
            return false;
        }
        for conn in &*self.conns {
            if let Ok(new) = lazy(&self.client, &self.dial) {
                conn.store(new.into());
            }
        }
        if let Ok(new) = lazy_off_path(&self.client, &self.dial) {
            self.off_path.store(new.into());
        }
        true
    }

    /// One of the node's request-path connections, round robin.
    pub(crate) fn conn(&self) -> ConnectionManager {
        let i = if self.conns.len() == 1 {
            0
        } else {
            self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len()
        };
        (**self.conns[i].load()).clone()
    }
}

/// A request-path connection, dialled by its first command.
fn lazy(client: &redis::Client, cfg: &ConnectionManagerConfig) -> RedisResult<ConnectionManager> {
    ConnectionManager::new_lazy_with_config(client.clone(), cfg.clone())
}

/// The off-path connection: flushes get a connection of their own, so they
/// neither queue with the request path's calls nor are cut short at the
/// command timeout (their callers bound them by the flush timeout).
fn lazy_off_path(
    client: &redis::Client,
    cfg: &ConnectionManagerConfig,
) -> RedisResult<ConnectionManager> {
    let cfg = cfg
        .clone()
        .set_response_timeout(Some(OFF_PATH_RESPONSE_TIMEOUT));
    ConnectionManager::new_lazy_with_config(client.clone(), cfg)
}
