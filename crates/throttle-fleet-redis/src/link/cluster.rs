//! Redis Cluster routing: which primary serves each hash slot (from
//! `CLUSTER SLOTS`), with one [`Node`] per primary. Commands for a slot go
//! straight to its primary's own connections, so a hung primary stalls only
//! the commands for its slots; `MOVED` patches the table at once and asks
//! for a full refresh.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use arc_swap::ArcSwap;
use redis::{ConnectionAddr, ConnectionInfo, Value};
use throttle_fleet_core::ConfigError;

use super::node::Node;
use super::spacing::Spacing;
use crate::config::RedisConfig;
use crate::hash_slot::HASH_SLOTS;

/// A slot no known primary serves.
const UNROUTED: u16 = u16::MAX;

/// The route table at one moment: replaced whole, never edited in place.
struct Topology {
    /// For each slot, its primary's index in `nodes`, or [`UNROUTED`].
    slots: Box<[u16]>,
    nodes: Vec<Arc<Node>>,
    /// How many slots have a primary.
    routed: usize,
}

impl Topology {
    fn empty() -> Self {
        Self {
            slots: vec![UNROUTED; HASH_SLOTS].into(),
            nodes: Vec::new(),
            routed: 0,
        }
    }

    fn find(&self, addr: &str) -> Option<&Arc<Node>> {
        self.nodes.iter().find(|n| n.addr == addr)
    }
}

pub(crate) struct Cluster {
    /// The configured seed nodes; also the template (credentials, TLS) of
    /// every node's connection.
    seeds: Vec<(ConnectionInfo, String)>,
    config: RedisConfig,
    topology: ArcSwap<Topology>,
    /// Whether a refresh is running (concurrent askers share it).
    refreshing: tokio::sync::Mutex<()>,
    /// Whether the background discovery loop runs (no route known yet).
    pub(crate) discovering: AtomicBool,
    /// A refresh asked for in the background: at most one per interval.
    asked: Spacing,
}

impl Cluster {
    pub(crate) fn new(urls: &[String], config: &RedisConfig) -> Result<Self, ConfigError> {
        let mut seeds = Vec::with_capacity(urls.len());
        for url in urls {
            let info = super::endpoint::connection_info(url, "redis.cluster", config)?;
            let addr = match info.addr() {
                ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
                ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
                _ => {
                    return Err(ConfigError::new(
                        "redis.cluster",
                        "cluster nodes are reached over TCP (redis:// or rediss://)",
                    ));
                }
            };
            seeds.push((info, addr));
        }
        Ok(Self {
            seeds,
            config: config.clone(),
            topology: ArcSwap::from_pointee(Topology::empty()),
            refreshing: tokio::sync::Mutex::new(()),
            discovering: AtomicBool::new(false),
            asked: Spacing::new(),
        })
    }

    /// The primary serving `slot`, if one is known.
    #[inline]
    pub(crate) fn node_for(&self, slot: u16) -> Option<Arc<Node>> {
        let topology = self.topology.load();
        let i = *topology.slots.get(usize::from(slot))?;
        topology.nodes.get(usize::from(i)).cloned()
    }

    /// Whether the breaker of `slot`'s primary is open (true for a slot no
    /// known primary serves: nothing to send it to).
    #[inline]
    pub(crate) fn is_open(&self, slot: u16) -> bool {
        let topology = self.topology.load();
        match topology.slots.get(usize::from(slot)) {
            Some(&i) if i != UNROUTED => topology.nodes[usize::from(i)].breaker.is_open(),
            _ => true,
        }
    }

    /// Every primary of the current table.
    pub(crate) fn nodes(&self) -> Vec<Arc<Node>> {
        self.topology.load().nodes.clone()
    }

    /// Whether every slot has a known primary.
    pub(crate) fn is_complete(&self) -> bool {
        self.topology.load().routed == HASH_SLOTS
    }

    /// Whether no slot has a known primary.
    pub(crate) fn is_unrouted(&self) -> bool {
        self.topology.load().nodes.is_empty()
    }

    /// Whether `node` still serves slots.
    pub(crate) fn serves(&self, node: &Arc<Node>) -> bool {
        self.topology
            .load()
            .nodes
            .iter()
            .any(|n| Arc::ptr_eq(n, node))
    }

    /// The node at `addr` (`host:port`), from the table or opened now.
    pub(crate) fn node_at(&self, addr: &str) -> Option<Arc<Node>> {
        if let Some(node) = self.topology.load().find(addr) {
            return Some(node.clone());
        }
        let (host, port) = split_addr(addr)?;
        self.open(host, port).map(Arc::new)
    }

    /// A `MOVED <slot> <addr>`: from now on `slot` goes to `addr`. Returns
    /// its node; a full refresh should follow (a moved slot rarely moves
    /// alone).
    pub(crate) fn moved(&self, slot: u16, addr: &str) -> Option<Arc<Node>> {
        let node = self.node_at(addr)?;
        let current = self.topology.load();
        let mut nodes = current.nodes.clone();
        let i = match nodes.iter().position(|n| Arc::ptr_eq(n, &node)) {
            Some(i) => i,
            None => {
                nodes.push(node.clone());
                nodes.len() - 1
            }
        };
        let mut slots = current.slots.clone();
        slots[usize::from(slot) % HASH_SLOTS] = i as u16;
        let routed = slots.iter().filter(|&&i| i != UNROUTED).count();
        self.topology.store(Arc::new(Topology {
            slots,
            nodes,
            routed,
        }));
        Some(node)
    }

    /// Whether a background refresh may be asked for now: at most one per
    /// `every` (of wall time: it bounds the I/O a run of `MOVED` replies
    /// starts, which is real in the tests too).
    pub(crate) fn refresh_due(&self, every: Duration) -> bool {
        self.asked.take(every)
    }

    /// Reads `CLUSTER SLOTS` from the first node that answers within
    /// `patience` (primaries whose breaker is closed first, then the rest,
    /// then the seeds) and installs it. Concurrent callers share one
    /// refresh. Returns whether the table is fresh.
    pub(crate) async fn refresh(&self, patience: Duration) -> bool {
        let Ok(_guard) = self.refreshing.try_lock() else {
            // Someone is refreshing: wait for theirs.
            let _wait = self.refreshing.lock().await;
            return !self.is_unrouted();
        };
        let mut asked: Vec<Arc<Node>> = self.nodes();
        asked.sort_by_key(|n| n.breaker.is_open());
        for (info, addr) in &self.seeds {
            if asked.iter().all(|n| n.addr != *addr)
                && let Ok(node) = Node::open(info.clone(), addr.clone(), &self.config)
            {
                asked.push(Arc::new(node));
            }
        }
        for node in asked {
            let mut conn = node.conn();
            let cmd = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
            let reply = tokio::time::timeout(patience, cmd.query_async::<Value>(&mut conn)).await;
            let Ok(Ok(reply)) = reply else { continue };
            let host = node.addr.rsplit_once(':').map_or("", |(h, _)| h);
            if let Some(topology) = self.parse(&reply, host) {
                self.topology.store(Arc::new(topology));
                return true;
            }
        }
        false
    }

    /// A `CLUSTER SLOTS` reply as a table; primaries already known keep
    /// their node (connections and breaker). `None` if it routes no slot.
    fn parse(&self, reply: &Value, asked_host: &str) -> Option<Topology> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let current = self.topology.load();
        let mut table = Topology::empty();
        for range in ranges {
            let Value::Array(parts) = range else { continue };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(primary))) =
                (parts.first(), parts.get(1), parts.get(2))
            else {
                continue;
            };
            let (Some(host), Some(Value::Int(port))) = (primary.first(), primary.get(1)) else {
                continue;
            };
            let host = match host {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                // `cluster-preferred-endpoint-type unknown-endpoint`: a
                // NULL endpoint, the node asked at the port given.
                Value::Nil => String::new(),
                _ => continue,
            };
            // An empty or unknown host means the node that answered. A
            // host name (`cluster-preferred-endpoint-type hostname`) is
            // kept as it is: the node is reached by that name.
            let host = if host.is_empty() || host == "?" {
                asked_host.to_owned()
            } else {
                host
            };
            let (Ok(start), Ok(end), Ok(port)) = (
                usize::try_from(*start),
                usize::try_from(*end),
                u16::try_from(*port),
            ) else {
                continue;
            };
            if start > end || end >= HASH_SLOTS {
                continue;
            }
            let addr = format!("{host}:{port}");
            let i = match table.nodes.iter().position(|n| n.addr == addr) {
                Some(i) => i,
                None => {
                    let node = match current.find(&addr) {
                        Some(node) => node.clone(),
                        None => Arc::new(self.open(&host, port)?),
                    };
                    table.nodes.push(node);
                    table.nodes.len() - 1
                }
            };
            table.slots[start..=end].fill(i as u16);
        }
        table.routed = table.slots.iter().filter(|&&i| i != UNROUTED).count();
        (table.routed > 0).then_some(table)
    }

    /// Whether a seed refuses the configuration (credentials, certificate)
    /// rather than being out of reach: asked when no seed gave the table
    /// at startup.
    pub(crate) async fn refused_at_start(&self, patience: Duration) -> Result<(), ConfigError> {
        for (info, addr) in &self.seeds {
            if let Ok(node) = Node::open(info.clone(), addr.clone(), &self.config) {
                super::refusal::first_ping(&node, patience).await?;
            }
        }
        Ok(())
    }

    /// A node for `host:port` with the seeds' credentials and TLS settings.
    fn open(&self, host: &str, port: u16) -> Option<Node> {
        let (template, _) = self.seeds.first()?;
        let info = super::endpoint::at(template, host, port);
        Node::open(info, format!("{host}:{port}"), &self.config).ok()
    }
}

/// `host:port` (IPv6 hosts keep their colons).
fn split_addr(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    Some((host, port.parse().ok()?))
}

/// What a reply asks of the router.
pub(crate) enum Redirect<'a> {
    /// The slot lives elsewhere now.
    Moved(u16, &'a str),
    /// This once, ask there (a slot being migrated).
    Ask(&'a str),
}

/// The redirection a failed reply carries, if any.
pub(crate) fn redirect(error: &redis::RedisError) -> Option<Redirect<'_>> {
    use redis::{ErrorKind, ServerErrorKind};
    let (addr, slot) = error.redirect_node()?;
    match error.kind() {
        ErrorKind::Server(ServerErrorKind::Moved) => Some(Redirect::Moved(slot, addr)),
        ErrorKind::Server(ServerErrorKind::Ask) => Some(Redirect::Ask(addr)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
