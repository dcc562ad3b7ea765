//! Redis Cluster nodes: real `redis-server` processes (see
//! [`redis_server`](crate::redis_server) for ports, temp dirs and signals)
//! joined into a cluster that a test starts for itself.
//!
//! [`RedisCluster::start`] starts `primaries * (1 + replicas)` cluster nodes,
//! joins them with `redis-cli --cluster create` (by hand for fewer than 3
//! primaries) and waits until every node reports `cluster_state:ok`, agrees
//! on the slot map and every replica is in sync.
//! [`RedisCluster::wait_for_failover`] waits until a killed or stopped
//! primary's slots are served by a promoted replica. Node ports are at most
//! 55535, so that their bus ports (port + 10000) exist.
//!
//! ```ignore
//! let cluster = RedisCluster::start(3, 1);
//! let primary = cluster.primary_for_key("rl:{ip:1.2.3.4}:0");
//! let port = primary.port();
//! primary.kill();
//! let promoted = cluster.wait_for_failover(port);
//! ```

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use crate::redis_server::{RedisServer, Reply, info_field, lock, run_with_timeout, wait_until};
use crate::redis_tls::ServerTls;

/// How long a fresh cluster may take to become ready.
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a failover may take (node timeout 1 s, election about 1 s).
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);
/// `cluster-node-timeout` of [`RedisCluster::start`].
const CLUSTER_NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// Number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16_384;

/// A contiguous range of hash slots and the client port of its primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRange {
    /// First slot.
    pub start: u16,
    /// Last slot (inclusive).
    pub end: u16,
    /// Client port of the primary serving the range.
    pub port: u16,
}

/// Slot ranges served by each primary in a `CLUSTER NODES` text, sorted and
/// merged.
fn parse_slot_map(cluster_nodes: &str) -> Result<Vec<SlotRange>, String> {
    let mut ranges = Vec::new();
    for line in cluster_nodes.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            return Err(format!("bad CLUSTER NODES line {line:?}"));
        }
        // <id> <ip:port@cport[,hostname]> <flags> <master> ... <slot>...
        let port: u16 = fields[1]
            .split('@')
            .next()
            .and_then(|addr| addr.rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| format!("bad address in {line:?}"))?;
        for slot in &fields[8..] {
            if slot.starts_with('[') {
                continue; // importing / migrating marker
            }
            let (start, end) = slot.split_once('-').unwrap_or((slot, slot));
            let parse = |s: &str| {
                s.parse::<u16>()
                    .map_err(|_| format!("bad slot in {line:?}"))
            };
            ranges.push(SlotRange {
                start: parse(start)?,
                end: parse(end)?,
                port,
            });
        }
    }
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<SlotRange> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last)
                if last.port == range.port && u32::from(last.end) + 1 == u32::from(range.start) =>
            {
                last.end = range.end;
            }
            _ => merged.push(range),
        }
    }
    Ok(merged)
}

fn covers_all_slots(map: &[SlotRange]) -> bool {
    let mut next = 0u32;
    for range in map {
        if u32::from(range.start) != next {
            return false;
        }
        next = u32::from(range.end) + 1;
    }
    next == u32::from(SLOTS)
}

/// A Redis Cluster of real `redis-server` nodes owned by a test. Dropping it
/// kills every node and removes their temp dirs.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// The last consistent slot map the harness saw (to know which slots a
    /// killed primary served once the survivors have forgotten it).
    last_slot_map: Mutex<Vec<SlotRange>>,
}

impl RedisCluster {
    /// Starts `primaries * (1 + replicas_per_primary)` nodes with
    /// `cluster-node-timeout` 1000 ms and waits until the cluster is ready.
    pub fn start(primaries: usize, replicas_per_primary: usize) -> Self {
        Self::start_with_node_timeout(primaries, replicas_per_primary, CLUSTER_NODE_TIMEOUT)
    }

    /// Like [`start`](Self::start) with another `cluster-node-timeout`
    /// (failure detection takes about this long, failover about 1 s more).
    ///
    /// Nodes run with `cluster-replica-validity-factor 0` (a replica always
    /// tries to take over, however long it was disconnected) and
    /// `cluster-allow-replica-migration no` (replicas stay where they were
    /// put), so failover tests see a predictable topology.
    pub fn start_with_node_timeout(
        primaries: usize,
        replicas_per_primary: usize,
        node_timeout: Duration,
    ) -> Self {
        Self::start_with_args(primaries, replicas_per_primary, node_timeout, &[])
    }

    /// Like [`start_with_node_timeout`](Self::start_with_node_timeout) with
    /// more `redis-server` arguments for every node (e.g.
    /// `--cluster-require-full-coverage no`).
    pub fn start_with_args(
        primaries: usize,
        replicas_per_primary: usize,
        node_timeout: Duration,
        extra_args: &[&str],
    ) -> Self {
        Self::start_with(
            primaries,
            replicas_per_primary,
            node_timeout,
            extra_args,
            None,
        )
    }

    /// Like [`start_with_node_timeout`](Self::start_with_node_timeout),
    /// every node speaking TLS only: to clients (no plain port), on the
    /// cluster bus (`tls-cluster yes`) and to its primary
    /// (`tls-replication yes`). [`nodes`](Self::nodes) are `rediss://`.
    pub fn start_tls(
        primaries: usize,
        replicas_per_primary: usize,
        node_timeout: Duration,
        tls: ServerTls,
    ) -> Self {
        Self::start_with(
            primaries,
            replicas_per_primary,
            node_timeout,
            &[],
            Some(tls),
        )
    }

    fn start_with(
        primaries: usize,
        replicas_per_primary: usize,
        node_timeout: Duration,
        extra_args: &[&str],
        tls: Option<ServerTls>,
    ) -> Self {
        assert!(primaries >= 1, "a cluster needs at least one primary");
        let total = primaries * (1 + replicas_per_primary);
        let nodes: Vec<RedisServer> = (0..total)
            .map(|_| {
                RedisServer::launch_with(
                    true,
                    false,
                    [
                        "--cluster-enabled",
                        "yes",
                        // Relative to the node's own dir (its working dir).
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        &node_timeout.as_millis().to_string(),
                        "--cluster-replica-validity-factor",
                        "0",
                        "--cluster-allow-replica-migration",
                        "no",
                    ]
                    .iter()
                    .chain(extra_args)
                    .map(|s| s.to_string())
                    .collect(),
                    tls.clone(),
                )
            })
            .collect();
        let cluster = RedisCluster {
            nodes,
            last_slot_map: Mutex::new(Vec::new()),
        };
        if primaries >= 3 {
            cluster.create_with_redis_cli(replicas_per_primary);
        } else {
            // `redis-cli --cluster create` refuses fewer than 3 primaries.
            cluster.create_by_hand(primaries, replicas_per_primary);
        }
        cluster.wait_stable(CLUSTER_READY_TIMEOUT, "the new cluster to become ready");
        let (p, r) = (cluster.primaries().len(), cluster.replicas().len());
        assert!(
            p == primaries && r == primaries * replicas_per_primary,
            "cluster came up with {p} primaries and {r} replicas, expected {primaries} and {}",
            primaries * replicas_per_primary
        );
        cluster
    }

    fn create_with_redis_cli(&self, replicas_per_primary: usize) {
        let mut cmd = crate::server_binary::cli();
        if let Some(tls) = self.nodes[0].tls() {
            cmd.args(tls.cli_args());
        }
        cmd.arg("--cluster").arg("create");
        for node in &self.nodes {
            cmd.arg(format!("127.0.0.1:{}", node.port()));
        }
        cmd.args([
            "--cluster-replicas",
            &replicas_per_primary.to_string(),
            "--cluster-yes",
        ]);
        let result = run_with_timeout(cmd, Duration::from_secs(60));
        let ok = matches!(&result, Ok(out) if out.status.success()
            && String::from_utf8_lossy(&out.stdout).contains("All 16384 slots covered"));
        if !ok {
            let detail = match result {
                Ok(out) => format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
                Err(e) => e,
            };
            panic!(
                "redis-cli --cluster create failed:\n{detail}\n{}",
                self.log_tails()
            );
        }
    }

    fn create_by_hand(&self, primaries: usize, replicas_per_primary: usize) {
        let fail = |e: String| -> ! { panic!("creating the cluster: {e}\n{}", self.log_tails()) };
        let per = usize::from(SLOTS) / primaries;
        for (i, node) in self.nodes[..primaries].iter().enumerate() {
            let start = i * per;
            let end = if i + 1 == primaries {
                usize::from(SLOTS) - 1
            } else {
                start + per - 1
            };
            node.query(&["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()])
                .unwrap_or_else(|e| fail(e));
            // `ADDSLOTS` with every slot, not `ADDSLOTSRANGE`: Redis 6.2
            // does not have it.
            let slots: Vec<String> = (start..=end).map(|s| s.to_string()).collect();
            let mut args = vec!["CLUSTER", "ADDSLOTS"];
            args.extend(slots.iter().map(String::as_str));
            node.query(&args).unwrap_or_else(|e| fail(e));
        }
        for node in &self.nodes[1..] {
            self.nodes[0]
                .query(&["CLUSTER", "MEET", "127.0.0.1", &node.port().to_string()])
                .unwrap_or_else(|e| fail(e));
        }
        let total = self.nodes.len().to_string();
        wait_until(CLUSTER_READY_TIMEOUT, "all nodes to meet", || {
            for node in &self.nodes {
                let info = node.query_text(&["CLUSTER", "INFO"])?;
                if info_field(&info, "cluster_known_nodes") != Some(total.as_str()) {
                    return Err(format!("port {}: {info}", node.port()));
                }
            }
            Ok(())
        });
        let ids: Vec<String> = self.nodes[..primaries]
            .iter()
            .map(|n| {
                n.query_text(&["CLUSTER", "MYID"])
                    .unwrap_or_else(|e| fail(e))
            })
            .collect();
        for (k, replica) in self.nodes[primaries..].iter().enumerate() {
            let master = &ids[k / replicas_per_primary.max(1)];
            // The replica may not have learned the primary's id yet: retry.
            wait_until(CLUSTER_READY_TIMEOUT, "CLUSTER REPLICATE", || {
                replica.query(&["CLUSTER", "REPLICATE", master]).map(drop)
            });
        }
    }

    fn log_tails(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let _ = writeln!(
                out,
                "--- node {} log tail:\n{}",
                node.port(),
                node.log_tail(15)
            );
        }
        out
    }

    /// All nodes, in start order.
    pub fn servers(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// `redis://` URLs of all nodes (also killed or stopped ones).
    pub fn nodes(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Node `i` (in start order), to kill, stop, resume or restart it.
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// The node listening on `port`. Panics if no node of this cluster does.
    pub fn node_by_port(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node of this cluster has port {port}"))
    }

    fn live_nodes(&self) -> Vec<&RedisServer> {
        self.nodes.iter().filter(|n| n.is_live()).collect()
    }

    fn any_live_node(&self) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.is_live())
            .expect("no live node in the cluster")
    }

    fn live_with_role(&self, wanted: &str) -> Vec<&RedisServer> {
        self.live_nodes()
            .into_iter()
            .filter(|node| {
                node.query(&["ROLE"])
                    .ok()
                    .and_then(|r| {
                        r.items()
                            .first()
                            .and_then(|x| x.as_str().map(str::to_owned))
                    })
                    .is_some_and(|role| role == wanted)
            })
            .collect()
    }

    /// Live (running, not stopped) nodes whose `ROLE` is master.
    pub fn primaries(&self) -> Vec<&RedisServer> {
        self.live_with_role("master")
    }

    /// Live (running, not stopped) nodes whose `ROLE` is slave.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.live_with_role("slave")
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &str) -> u16 {
        let node = self.any_live_node();
        match node.query(&["CLUSTER", "KEYSLOT", key]) {
            Ok(Reply::Int(slot)) => u16::try_from(slot).expect("slot out of range"),
            other => panic!("CLUSTER KEYSLOT {key:?}: {other:?}"),
        }
    }

    /// The slot map as a live node sees it now (`CLUSTER NODES`).
    pub fn slot_map(&self) -> Vec<SlotRange> {
        let node = self.any_live_node();
        node.query_text(&["CLUSTER", "NODES"])
            .and_then(|text| parse_slot_map(&text))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The primary currently serving `key`'s slot, as the cluster sees it
    /// (right after a kill, before failover, that is still the dead node).
    pub fn primary_for_key(&self, key: &str) -> &RedisServer {
        let slot = self.keyslot(key);
        let map = self.slot_map();
        if covers_all_slots(&map) {
            *lock(&self.last_slot_map) = map.clone();
        }
        let range = map
            .iter()
            .find(|r| r.start <= slot && slot <= r.end)
            .unwrap_or_else(|| panic!("slot {slot} of {key:?} is not served: {map:?}"));
        self.node_by_port(range.port)
    }

    /// Waits until the cluster is ready: every live node reports
    /// `cluster_state:ok` and all slots ok, all live nodes agree on a slot
    /// map that covers every slot with live primaries, and every live
    /// replica's link to a live primary is up. Use after restarting nodes.
    pub fn wait_ready(&self) {
        self.wait_stable(CLUSTER_READY_TIMEOUT, "the cluster to become ready");
    }

    /// After killing (or stopping) the primary on `killed_port`, waits up to
    /// 20 s until one of its replicas has been promoted, serves its slots, and
    /// the cluster is ready again (see [`wait_ready`](Self::wait_ready)).
    /// Returns the node that now serves those slots.
    pub fn wait_for_failover(&self, killed_port: u16) -> &RedisServer {
        let killed = self.node_by_port(killed_port);
        assert!(
            !killed.is_live(),
            "wait_for_failover({killed_port}): kill or stop that node first"
        );
        let current = self
            .live_nodes()
            .first()
            .and_then(|n| n.query_text(&["CLUSTER", "NODES"]).ok())
            .and_then(|text| parse_slot_map(&text).ok())
            .unwrap_or_default();
        let mut slots: Vec<SlotRange> = current
            .into_iter()
            .filter(|r| r.port == killed_port)
            .collect();
        if slots.is_empty() {
            // Failover already happened: take the slots from the last map.
            slots = lock(&self.last_slot_map)
                .iter()
                .copied()
                .filter(|r| r.port == killed_port)
                .collect();
        }
        let first_slot = slots
            .first()
            .unwrap_or_else(|| panic!("port {killed_port} served no slots: was it a primary?"))
            .start;
        let map = self.wait_stable(FAILOVER_TIMEOUT, &format!("failover of port {killed_port}"));
        let owner = map
            .iter()
            .find(|r| r.start <= first_slot && first_slot <= r.end)
            .expect("a stable map covers every slot");
        self.node_by_port(owner.port)
    }

    fn wait_stable(&self, timeout: Duration, what: &str) -> Vec<SlotRange> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.check_stable() {
                Ok(map) => {
                    *lock(&self.last_slot_map) = map.clone();
                    return map;
                }
                Err(reason) if Instant::now() >= deadline => panic!(
                    "timed out after {timeout:?} waiting for {what}; last state: {reason}\n{}",
                    self.log_tails()
                ),
                Err(_) => thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn check_stable(&self) -> Result<Vec<SlotRange>, String> {
        let live = self.live_nodes();
        let live_ports: HashSet<u16> = live.iter().map(|n| n.port()).collect();
        let mut reference: Option<(u16, Vec<SlotRange>)> = None;
        for node in &live {
            let port = node.port();
            let info = node.query_text(&["CLUSTER", "INFO"])?;
            if info_field(&info, "cluster_state") != Some("ok")
                || info_field(&info, "cluster_slots_ok") != Some("16384")
            {
                return Err(format!("port {port} CLUSTER INFO:\n{info}"));
            }
            let map = parse_slot_map(&node.query_text(&["CLUSTER", "NODES"])?)?;
            if !covers_all_slots(&map) {
                return Err(format!(
                    "port {port} does not see every slot served: {map:?}"
                ));
            }
            if let Some(dead) = map.iter().find(|r| !live_ports.contains(&r.port)) {
                return Err(format!("port {port} still routes {dead:?} to a dead node"));
            }
            match &reference {
                None => reference = Some((port, map)),
                Some((other, expected)) if *expected != map => {
                    return Err(format!(
                        "ports {other} and {port} disagree: {expected:?} vs {map:?}"
                    ));
                }
                Some(_) => {}
            }
            let role = node.query(&["ROLE"])?;
            let items = role.items();
            if items.first().and_then(Reply::as_str) == Some("slave") {
                let master_port = match items.get(2) {
                    Some(Reply::Int(p)) => u16::try_from(*p).unwrap_or(0),
                    _ => 0,
                };
                let link = items.get(3).and_then(Reply::as_str).unwrap_or("?");
                if link != "connected" || !live_ports.contains(&master_port) {
                    return Err(format!("replica {port}: link to {master_port} is {link:?}"));
                }
            }
        }
        reference
            .map(|(_, map)| map)
            .ok_or_else(|| "no live node".to_owned())
    }
}
