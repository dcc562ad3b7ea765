//! An operator's inspect in every mode and algorithm, on a real
//! `redis-server` and a test time: a read writes nothing in Redis (every
//! key, value and expiry the same after it as before, and Redis counts no
//! write), and while Redis cannot be asked the answer says so (`degraded`)
//! and is what the instance would still admit.

use std::collections::BTreeMap;
use std::time::Duration;

use throttle_fleet_core::operate::{KeyState, OpError};
use throttle_fleet_core::{Answer, Key, Quota, Rule, decision::Demand, rule_set::RuleSet};
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;

#[path = "support/mode.rs"]
mod mode;

use mode::{MODES, Mode, backend_of};

const T0: u64 = 1_800_000_000_000_000;
const LIMIT: u64 = 10;

async fn backend(server: &RedisServer, time: &TestTime, mode: Mode, fleet: u32) -> RedisBackend {
    let config = RedisConfig::standalone(server.url())
        .scheduler(time.scheduler())
        .fleet_size(fleet);
    backend_of(config, mode).await
}

/// Every algorithm the mode runs, `LIMIT` a minute (the exact mode's
/// concurrency rule: `LIMIT` in flight).
fn rules(mode: Mode) -> Vec<Rule> {
    let q = Quota::per_minute(LIMIT);
    match mode {
        Mode::Exact => vec![
            Rule::new("fw", q).fixed_window(),
            Rule::new("swc", q).sliding_window_counter(),
            Rule::new("log", q).sliding_window_log(),
            Rule::new("tb", q).token_bucket(),
            Rule::new("lb", q).leaky_bucket(),
            Rule::concurrency("slots", LIMIT),
        ],
        Mode::Approximate => vec![
            Rule::new("fw", q).fixed_window(),
            Rule::new("swc", q).sliding_window_counter(),
        ],
        Mode::Leased => vec![Rule::new("tb", q).token_bucket()],
    }
}

/// A rule's answer; one that waits for something only the test's time
/// brings (the approximate mode's flush it asked for) gets that time
/// moved a millisecond at a time whenever it has waited a while.
async fn answer<T: Send + 'static>(time: &TestTime, answer: Answer<T>) -> T {
    let mut fut = std::pin::pin!(answer.wait());
    loop {
        if let Ok(t) = tokio::time::timeout(Duration::from_millis(20), &mut fut).await {
            return t;
        }
        time.advance(Duration::from_millis(1)).await;
    }
}

async fn inspect(time: &TestTime, rules: &RuleSet, rule: usize, key: &str) -> KeyState {
    let state = answer(time, rules.operate().inspect(rule, &Key::new(key))).await;
    state.unwrap_or_else(|e| panic!("inspect of {key} under rule {rule}: {e}"))
}

/// One request on `key` under rule `rule`: whether it was admitted, and
/// what it holds (a concurrency rule's slot) until dropped.
async fn request(
    time: &TestTime,
    rules: &RuleSet,
    rule: usize,
    key: &str,
) -> (bool, throttle_fleet_core::rule_set::Checked) {
    let checked = answer(time, rules.check(&[Demand::new(rule, Key::new(key), 1)])).await;
    (checked.decision().is_allowed(), checked)
}

/// What Redis holds: every key with its value (`DUMP`) and its expiry in
/// milliseconds (`PTTL`).
async fn holdings(
    conn: &mut redis::aio::MultiplexedConnection,
) -> BTreeMap<Vec<u8>, (Vec<u8>, i64)> {
    let mut out = BTreeMap::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1_000)
            .query_async(conn)
            .await
            .unwrap();
        for key in keys {
            let dump: Vec<u8> = redis::cmd("DUMP")
                .arg(&key)
                .query_async(conn)
                .await
                .unwrap();
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(conn)
                .await
                .unwrap();
            out.insert(key, (dump, ttl));
        }
        if next == 0 {
            return out;
        }
        cursor = next;
    }
}

/// The writes Redis has counted since it started (`INFO persistence`'s
/// `rdb_changes_since_last_save`: every command that changed a key, a
/// value written again as it was and an expiry moved included).
async fn writes(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("persistence")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("rdb_changes_since_last_save in INFO persistence")
}

fn printable(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// Inspects a key each rule has counted (one request, its slot still
/// held) and one it never saw, in every mode and algorithm: the answers
/// are right, and Redis holds exactly what it held before, with no write
/// counted. A check of cost 0 (what the exact mode's inspect was) writes
/// the key's state again and creates the unseen key's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inspect_writes_nothing_in_redis_in_any_mode_or_algorithm() {
    for mode in MODES {
        let server = RedisServer::start();
        let time = TestTime::new(T0);
        let backend = backend(&server, &time, mode, 1).await;
        let mut rules = RuleSet::new();
        let bound = self::rules(mode);
        for rule in &bound {
            rules.bind(rule.clone(), &backend).unwrap();
        }
        let mut held = Vec::new();
        for (i, rule) in bound.iter().enumerate() {
            let (allowed, checked) = request(&time, &rules, i, "seen").await;
            assert!(allowed, "{mode:?} {}", rule.name());
            held.push(checked);
        }
        if let RedisBackend::Approximate(b) = &backend {
            assert!(b.flush().await, "the counts reach Redis");
        }
        // The background calls made so far (the operations' first read of
        // their log, a concurrency slot's) are over.
        server.first_reads(1);

        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let before = holdings(&mut conn).await;
        let written = writes(&mut conn).await;
        assert!(!before.is_empty(), "{mode:?}: nothing in Redis to keep");
        for (i, rule) in bound.iter().enumerate() {
            let seen = inspect(&time, &rules, i, "seen").await;
            let never = inspect(&time, &rules, i, "never").await;
            let what = format!("{mode:?} {}", rule.name());
            assert!(!seen.degraded && !never.degraded, "{what}");
            assert_eq!((seen.limit, seen.remaining), (LIMIT, LIMIT - 1), "{what}");
            assert_eq!((never.limit, never.remaining), (LIMIT, LIMIT), "{what}");
        }
        let after = holdings(&mut conn).await;
        let created: Vec<String> = after
            .keys()
            .filter(|k| !before.contains_key(*k))
            .map(|k| printable(k))
            .collect();
        assert!(created.is_empty(), "{mode:?}: a read created {created:?}");
        for (key, (value, ttl)) in &before {
            let (value_after, ttl_after) = after
                .get(key)
                .unwrap_or_else(|| panic!("{mode:?}: a read dropped {}", printable(key)));
            assert_eq!(value, value_after, "{mode:?}: {} changed", printable(key));
            // Redis' own clock runs on: an expiry only comes nearer.
            assert!(
                *ttl_after <= *ttl && (*ttl < 0) == (*ttl_after < 0),
                "{mode:?}: the expiry of {} moved from {ttl} ms to {ttl_after} ms",
                printable(key)
            );
        }
        assert_eq!(
            writes(&mut conn).await,
            written,
            "{mode:?}: Redis counted writes"
        );
        drop(held);
        let _ = backend.shutdown().await;
    }
}

/// Waits (at most 5 s) until the breaker of the backend's node is open,
/// now that Redis is gone: the exact and leased modes learn it from
/// requests (on keys of their own), the approximate mode from its watch.
async fn breaker_opens(time: &TestTime, backend: &RedisBackend, rules: &RuleSet, mode: Mode) {
    for i in 0..1_000 {
        if backend.stats().breaker_open {
            return;
        }
        if !matches!(mode, Mode::Approximate) {
            request(time, rules, 0, &format!("trip-{i}")).await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{mode:?}: the breaker did not open within 5 s");
}

/// How many requests on `key` this instance admits in a row now (at most
/// 100), each holding what it took (a concurrency slot) until the last.
async fn admitted(time: &TestTime, rules: &RuleSet, key: &str) -> u64 {
    let mut held = Vec::new();
    for n in 0..100 {
        let (allowed, checked) = request(time, rules, 0, key).await;
        if !allowed {
            return n;
        }
        held.push(checked);
    }
    100
}

/// With Redis killed, an inspect in every mode is marked degraded and
/// answers what this instance would still admit for the key, by the rule's
/// failure policy (a local fallback's share; failing closed, the leased
/// mode's tokens alone): exactly that many requests are admitted next.
/// A fail-closed rule of the exact mode has nothing to read but Redis:
/// unavailable, as its requests are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_an_inspect_is_degraded_and_says_what_this_instance_admits() {
    let q = Quota::per_minute(20);
    let cases = [
        (Mode::Exact, Rule::new("api", q).fixed_window()),
        (Mode::Exact, Rule::concurrency("api", 20)),
        (Mode::Approximate, Rule::new("api", q).fixed_window()),
        (Mode::Leased, Rule::new("api", q).token_bucket()),
    ];
    for (mode, rule) in cases {
        for closed in [false, true] {
            let server = RedisServer::start();
            let time = TestTime::new(T0);
            // Two instances in the fleet: the local fallback's share is 10.
            let backend = backend(&server, &time, mode, 2).await;
            let rule = if closed {
                rule.clone().fail_closed()
            } else {
                rule.clone().local_fallback()
            };
            let what = format!(
                "{mode:?}, {}, {:?}",
                rule.algorithm().name(),
                rule.failure_policy()
            );
            let mut rules = RuleSet::new();
            rules.bind(rule, &backend).unwrap();
            let mut held = Vec::new();
            for _ in 0..3 {
                let (allowed, checked) = request(&time, &rules, 0, "seen").await;
                assert!(allowed, "{what}");
                held.push(checked);
            }
            if let RedisBackend::Approximate(b) = &backend {
                assert!(b.flush().await, "{what}: the counts reach Redis");
            }
            let up = inspect(&time, &rules, 0, "seen").await;
            assert!(!up.degraded, "{what}");
            assert_eq!(up.remaining, 17, "{what}");

            server.kill();
            breaker_opens(&time, &backend, &rules, mode).await;
            for key in ["seen", "never"] {
                let down = answer(&time, rules.operate().inspect(0, &Key::new(key))).await;
                if closed && matches!(mode, Mode::Exact) {
                    assert!(
                        matches!(down, Err(OpError::Unavailable(_))),
                        "{what}: {down:?}"
                    );
                    assert!(!request(&time, &rules, 0, key).await.0, "{what}");
                    continue;
                }
                let down = down.unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(down.degraded, "{what}: {key} read as if Redis answered");
                let n = admitted(&time, &rules, key).await;
                assert_eq!(down.remaining, n, "{what}: {key}: read vs admitted");
            }
            drop(held);
        }
    }
}
