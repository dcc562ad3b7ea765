//! A failover behind one name, as managed services make it (ElastiCache
//! and MemoryDB primary endpoints, Azure Cache): four instances reach Redis
//! through one address (a TCP proxy standing for the DNS name), which moves
//! from the old primary to the promoted replica while the old primary
//! becomes a replica of it (`REPLICAOF`). Connections opened before the move
//! stay on the old server, now a replica, unless the move cuts them; the
//! instances must notice (`READONLY`), dial again and count exactly on the
//! new primary within a second, with no request waiting for the command
//! timeout meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use throttle_fleet_core::backend::{Backend as _, Limiter};
use throttle_fleet_core::{Key, Quota, Rule};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::{DelayingProxy, RedisServer, check};

const TIMEOUT: Duration = Duration::from_millis(250);
const INSTANCES: usize = 4;
/// Per fixed window of one second, over the fleet.
const QUOTA: u64 = 40;
const WINDOW_US: u64 = 1_000_000;
/// How soon after the move every instance must be deciding on Redis again.
/// Measured: a few milliseconds (see the test's output); the bound leaves a
/// loaded machine two orders of magnitude.
const RESUME_WITHIN: Duration = Duration::from_secs(1);

fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

#[derive(Debug, Default)]
struct Seen {
    /// The exact rule's admissions by Redis, per window (Redis time).
    allowed: BTreeMap<u64, u64>,
    /// The first answer from Redis (not a policy's) to a check started
    /// after the move, as time since the move.
    resumed: Option<Duration>,
    slowest: Duration,
}

async fn client(
    exact: Arc<dyn Limiter>,
    probe: Arc<dyn Limiter>,
    moved: Arc<parking_lot::Mutex<Option<Instant>>>,
    done: Arc<AtomicBool>,
) -> Seen {
    let (key, mut seen) = (Key::new("tenant-1"), Seen::default());
    while !done.load(Ordering::Relaxed) {
        let t = Instant::now();
        let (r, _) = check(exact.as_ref(), &key).await;
        seen.slowest = seen.slowest.max(t.elapsed());
        if let Ok(o) = r
            && !o.degraded
            && o.step.allowed
        {
            *seen.allowed.entry(o.at_us / WINDOW_US).or_default() += 1;
        }
        // A rule never over its quota: every answer of Redis is asked for,
        // so the first after the move says when Redis decides again.
        let t = Instant::now();
        let (r, asked) = check(probe.as_ref(), &key).await;
        seen.slowest = seen.slowest.max(t.elapsed());
        let moved_at = *moved.lock();
        if let Some(at) = moved_at
            && t > at
            && seen.resumed.is_none()
            && asked
            && r.is_ok_and(|o| !o.degraded)
        {
            seen.resumed = Some(at.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(4)).await;
    }
    seen
}

async fn the_name_moves(cut: bool) {
    let old = RedisServer::start();
    let new = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &old.port().to_string()]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !new.info("replication").contains("master_link_status:up") {
        assert!(Instant::now() < deadline, "the replica never synced");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let proxy = DelayingProxy::start(old.port());
    let config = RedisConfig::standalone(proxy.url())
        .command_timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .probe_interval(Duration::from_millis(100));
    let exact = Rule::new("dns-exact", Quota::per_second(QUOTA))
        .fixed_window()
        .fail_closed();
    let probe = Rule::new("dns-probe", Quota::per_second(1_000_000)).fail_open();
    let (done, moved) = (Arc::new(AtomicBool::new(false)), Arc::default());
    let (mut backends, mut clients) = (Vec::new(), Vec::new());
    for _ in 0..INSTANCES {
        let backend = RedisBackend::exact(config.clone()).await.unwrap();
        let e: Arc<dyn Limiter> = backend.limiter(&exact).unwrap();
        let p: Arc<dyn Limiter> = backend.limiter(&probe).unwrap();
        for _ in 0..2 {
            clients.push(tokio::spawn(client(
                e.clone(),
                p.clone(),
                Arc::clone(&moved),
                done.clone(),
            )));
        }
        backends.push(backend);
    }
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let timeouts_before: u64 = backends.iter().map(|b| b.stats().timeouts).sum();

    // The move: the replica promoted, the name pointed at it, the old
    // primary made its replica.
    new.query(&["REPLICAOF", "NO", "ONE"]).unwrap();
    proxy.redirect(new.port(), cut);
    old.query(&["REPLICAOF", "127.0.0.1", &new.port().to_string()])
        .unwrap();
    *moved.lock() = Some(Instant::now());
    let moved_us = unix_us();
    tokio::time::sleep(Duration::from_millis(3_300)).await;
    let end_us = unix_us();
    done.store(true, Ordering::Relaxed);

    let (mut allowed, mut slowest, mut resumed) =
        (BTreeMap::<u64, u64>::new(), Duration::ZERO, Vec::new());
    for c in clients {
        let seen = c.await.unwrap();
        for (w, n) in seen.allowed {
            *allowed.entry(w).or_default() += n;
        }
        slowest = slowest.max(seen.slowest);
        resumed.push(seen.resumed);
    }
    let timeouts: u64 = backends.iter().map(|b| b.stats().timeouts).sum::<u64>() - timeouts_before;
    println!(
        "cut: {cut}; Redis decided again after the move, per client: {resumed:?}; slowest check {slowest:?}; \
         command timeouts {timeouts}; allowed per window: {allowed:?}"
    );
    for r in &resumed {
        let r = r.expect("a client never had an answer from Redis after the move");
        assert!(
            r <= RESUME_WITHIN,
            "Redis decided again only {r:?} after the move"
        );
    }
    let after: Vec<u64> = allowed
        .keys()
        .copied()
        .filter(|w| w * WINDOW_US >= moved_us && (w + 1) * WINDOW_US <= end_us)
        .collect();
    assert!(after.len() >= 2, "windows after the move: {after:?}");
    for w in after {
        assert_eq!(
            allowed[&w], QUOTA,
            "window {w} (after the move) admitted {} of a quota of {QUOTA}",
            allowed[&w]
        );
    }
    assert_eq!(timeouts, 0, "calls waited for the command timeout");
    assert!(slowest <= 2 * TIMEOUT, "a check took {slowest:?}");
    assert!(new.command_count("evalsha") > 0);
    for b in &backends {
        assert!(!b.stats().breaker_open, "{:?}", b.stats());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_moved_to_the_promoted_replica_is_followed_though_connections_stay_open() {
    the_name_moves(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_moved_to_the_promoted_replica_is_followed_when_connections_are_cut() {
    the_name_moves(true).await;
}
