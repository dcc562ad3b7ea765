//! One Redis server as the backend sees it: its connections and its
//! breaker. A standalone Redis is one node; a cluster has one per primary,
//! so a hung or dead primary delays and breaks only the slots it serves.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ConnectionInfo, RedisResult};

use crate::breaker::Breaker;
use crate::config::RedisConfig;

pub(crate) struct Node {
    /// `host:port`, as the cluster names it (for the route table and logs).
    pub(crate) addr: String,
    conns: Box<[ConnectionManager]>,
    next: AtomicUsize,
    pub(crate) breaker: Breaker,
    /// Whether a probe is running for this node's open breaker.
    pub(crate) probing: AtomicBool,
}

impl Node {
    /// Opens `config.connections` lazy multiplexed connections to `info`:
    /// nothing is dialled until the first command.
    pub(crate) fn open(
        info: ConnectionInfo,
        addr: String,
        config: &RedisConfig,
    ) -> RedisResult<Self> {
        // A standalone node has no cluster name: its metrics name it by
        // its URL's address.
        let node = match addr.is_empty() {
            true => info.addr().to_string(),
            false => addr.clone(),
        };
        let client = redis::Client::open(info)?;
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.command_timeout))
            .set_number_of_retries(1);
        let conns = (0..config.connections.max(1))
            .map(|_| ConnectionManager::new_lazy_with_config(client.clone(), cfg.clone()))
            .collect::<RedisResult<Vec<_>>>()?;
        Ok(Self {
            breaker: Breaker::new(config.breaker_threshold, &node),
            addr,
            conns: conns.into(),
            next: AtomicUsize::new(0),
            probing: AtomicBool::new(false),
        })
    }

    /// One of the node's connections, round robin.
    pub(crate) fn conn(&self) -> ConnectionManager {
        let i = if self.conns.len() == 1 {
            0
        } else {
            self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len()
        };
        self.conns[i].clone()
    }
}
