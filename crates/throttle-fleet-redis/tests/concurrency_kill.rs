//! A process holding every slot of a concurrency rule is killed with
//! SIGKILL: it releases nothing and renews nothing, and the key is served
//! again once its slots' lifetime has passed (within the lifetime plus one
//! second, on Redis' own clock). While it lives, its background renewal
//! keeps its slots past their lifetime.
//!
//! The process is this test binary run again with `THROTTLE_SLOT_CHILD`
//! set (the test `child_holds_every_slot` does nothing otherwise): a real
//! process with a real backend, its own connections and renewal task.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use throttle_fleet_core::InFlightLimit;

use throttle_fleet_core::{
    Answer, Key, Rule, decision::Decision, decision::Demand, rule_set::RuleSet,
};
use throttle_fleet_redis::{ExactBackend, RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;

const CHILD: &str = "THROTTLE_SLOT_CHILD";
const N: u64 = 3;
const TTL: Duration = Duration::from_secs(2);

fn rule() -> Rule {
    Rule::concurrency(
        "inflight",
        InFlightLimit {
            slot_ttl: TTL,
            ..InFlightLimit::new(N)
        },
    )
}

async fn bound(url: String) -> (ExactBackend, RuleSet) {
    let backend = RedisBackend::exact(RedisConfig::standalone(url))
        .await
        .unwrap();
    let mut rules = RuleSet::new();
    rules.bind(rule(), &backend).unwrap();
    (backend, rules)
}

/// One request: its decision, its slots forgotten (never given back).
async fn take(rules: &RuleSet) -> Decision {
    let demands = [Demand::new(0, Key::new("k"), 1)];
    let checked = match rules.check(&demands) {
        Answer::Ready(c) => c,
        Answer::Pending(f) => f.await,
    };
    let (decision, held) = checked.into_parts();
    std::mem::forget(held);
    decision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_holds_every_slot() {
    let Ok(url) = std::env::var(CHILD) else {
        return;
    };
    let (_backend, rules) = bound(url).await;
    for _ in 0..N {
        assert!(take(&rules).await.is_allowed());
    }
    println!("HELD");
    // Runs (renewing) until killed.
    tokio::time::sleep(Duration::from_secs(600)).await;
}

/// Redis' clock, in milliseconds.
fn redis_ms(server: &RedisServer) -> u64 {
    let time = server.cli(&["TIME"]);
    let mut parts = time.split_whitespace().map(|p| p.parse::<u64>().unwrap());
    let (s, us) = (parts.next().unwrap(), parts.next().unwrap());
    s * 1000 + us / 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_process_slots_come_back_within_the_lifetime_and_a_live_ones_are_renewed() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let server = RedisServer::start();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_holds_every_slot", "--nocapture"])
        .env(CHILD, server.url())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let held = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("HELD"))
    });
    assert!(held.join().unwrap(), "the child never held its slots");
    let (_backend, rules) = bound(server.url()).await;

    // Alive, it renews: two lifetimes on, every slot is still its own.
    let start = Instant::now();
    while start.elapsed() < 2 * TTL {
        assert!(
            take(&rules).await.is_denied(),
            "a slot of a live process expired {:?} after it was taken",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let killed_ms = redis_ms(&server);
    let served_at_ms = loop {
        let d = take(&rules).await;
        if d.is_allowed() {
            break d.at_us() / 1000;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            redis_ms(&server) < killed_ms + 10_000,
            "the dead process's slots never came back"
        );
    };
    let after = served_at_ms.saturating_sub(killed_ms);
    println!("served again {after} ms after the kill (slot lifetime {TTL:?})");
    assert!(
        after <= TTL.as_millis() as u64 + 1_000,
        "served again only {after} ms after the kill"
    );
}
