//! The server's script cache emptied under load (`SCRIPT FLUSH` in a loop
//! while every mode checks: the exact mode's algorithms and its
//! concurrency slots, the approximate mode's flushes, the leased mode's
//! leases and give-backs, and the operations' scripts). A call whose
//! script the server lost (`NOSCRIPT`) is sent again whole (`EVAL`): one
//! round trip more, never a check decided by a failure policy. Counted on
//! the server: every `NOSCRIPT` answered is followed by exactly one
//! `EVAL`, and no `SCRIPT LOAD` is sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use throttle_fleet_core::{Answer, Key, Quota, Rule, decision::Demand, rule_set::RuleSet};
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_redis::{
    ApproximateOptions, LeaseOptions, RedisBackend, RedisConfig, RedisStats,
};
use throttle_fleet_test_support::RedisServer;

const T0: u64 = 1_800_000_000_000_000;

/// How many `NOSCRIPT` errors the server answered (`INFO errorstats`).
fn noscript_answers(server: &RedisServer) -> u64 {
    server
        .info("errorstats")
        .lines()
        .find_map(|l| l.strip_prefix("errorstat_NOSCRIPT:count="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// One check of rule `rule` (index in `rules`) on `key`: whether allowed.
async fn checked(time: &TestTime, rules: &RuleSet, rule: usize, key: &Key) -> bool {
    let demands = [Demand::new(rule, *key, 1)];
    // Concurrency slots are held with the answer and given back here.
    wait(time, rules.check(&demands))
        .await
        .decision()
        .is_allowed()
}

/// An answer; one that waits for what only the test's time brings (a
/// flush) gets that time moved a millisecond at a time.
async fn wait<T>(time: &TestTime, answer: Answer<T>) -> T
where
    T: Send + 'static,
{
    let mut fut = std::pin::pin!(answer.wait());
    loop {
        if let Ok(t) = tokio::time::timeout(Duration::from_millis(20), &mut fut).await {
            return t;
        }
        time.advance(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_script_cache_costs_one_round_trip_and_decides_nothing_by_policy() {
    let server = Arc::new(RedisServer::start());
    let time = TestTime::new(T0);
    let config = || {
        RedisConfig::standalone(server.url())
            .scheduler(time.scheduler())
            .command_timeout(Duration::from_secs(2))
    };
    let quota = Quota::per_second(1_000_000);

    // Exact: every algorithm, a concurrency rule, and the operations.
    let exact = RedisBackend::exact(config()).await.unwrap();
    let mut exact_rules = RuleSet::new();
    for rule in [
        Rule::new("gcra", quota).fail_closed(),
        Rule::new("fixed", quota).fixed_window().fail_closed(),
        Rule::new("log", Quota::per_second(100_000))
            .sliding_window_log()
            .fail_closed(),
        Rule::new("counter", quota)
            .sliding_window_counter()
            .fail_closed(),
        Rule::concurrency("inflight", 1_000).fail_closed(),
    ] {
        exact_rules.bind(rule, &exact).unwrap();
    }
    let approximate = RedisBackend::approximate(config(), ApproximateOptions::default())
        .await
        .unwrap();
    let mut approximate_rules = RuleSet::new();
    for rule in [
        Rule::new("afixed", quota).fixed_window(),
        Rule::new("acounter", quota).sliding_window_counter(),
    ] {
        approximate_rules.bind(rule, &approximate).unwrap();
    }
    let leased = RedisBackend::leased(config(), LeaseOptions::default())
        .await
        .unwrap();
    let mut leased_rules = RuleSet::new();
    leased_rules
        .bind(Rule::new("lease", quota).fail_closed(), &leased)
        .unwrap();

    // The cache is emptied in a loop, beside the traffic.
    let stop = Arc::new(AtomicBool::new(false));
    let flushes = Arc::new(AtomicU64::new(0));
    let flusher = {
        let (server, stop, flushes) = (server.clone(), stop.clone(), flushes.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                server.query(&["SCRIPT", "FLUSH"]).unwrap();
                flushes.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };

    let mut allowed = 0u64;
    for round in 0..300u64 {
        let key = Key::from(round % 17);
        for rule in 0..5 {
            allowed += u64::from(checked(&time, &exact_rules, rule, &key).await);
        }
        for rule in 0..2 {
            allowed += u64::from(checked(&time, &approximate_rules, rule, &key).await);
        }
        allowed += u64::from(checked(&time, &leased_rules, 0, &key).await);
        if round % 30 == 0 {
            // The operations' scripts: a block, a read, an unblock.
            let blocked = Key::new(format!("blocked-{round}"));
            for rules in [&exact_rules, &approximate_rules, &leased_rules] {
                wait(
                    &time,
                    rules
                        .operate()
                        .block(0, &blocked, Duration::from_secs(60), "test"),
                )
                .await
                .unwrap();
                wait(&time, rules.operate().inspect(0, &key)).await.unwrap();
                wait(&time, rules.operate().unblock(0, &blocked))
                    .await
                    .unwrap();
            }
        }
        // Spans end (the approximate mode flushes), leases run out.
        time.advance(Duration::from_millis(20)).await;
    }
    // What is still out: the approximate counts and the leases.
    assert!(approximate.flush().await, "the last flush reached Redis");
    stop.store(true, Ordering::Relaxed);
    flusher.join().unwrap();

    assert_eq!(
        allowed,
        300 * 8,
        "every check allowed (by Redis: see below)"
    );
    let stats: [(&str, RedisStats); 3] = [
        ("exact", exact.stats()),
        ("approximate", approximate.stats()),
        ("leased", leased.stats()),
    ];
    for (mode, stats) in stats {
        assert_eq!(
            stats.degraded, 0,
            "{mode}: checks decided by policy: {stats:?}"
        );
        assert_eq!(stats.errors, 0, "{mode}: calls failed: {stats:?}");
    }
    let noscript = noscript_answers(&server);
    let evals = server.command_count("eval");
    let evalshas = server.command_count("evalsha");
    let script_commands = server.commands_starting("cmdstat_script");
    let flushes = flushes.load(Ordering::Relaxed);
    eprintln!(
        "{flushes} SCRIPT FLUSH, {evalshas} EVALSHA, {noscript} NOSCRIPT, {evals} EVAL \
         (the extra round trips)"
    );
    assert!(
        noscript >= 20,
        "the flushes emptied the cache under the calls: {noscript} NOSCRIPT"
    );
    assert_eq!(
        evals, noscript,
        "each NOSCRIPT costs one EVAL, no more, and each EVAL answers"
    );
    assert_eq!(
        script_commands, flushes,
        "no SCRIPT LOAD: the test's SCRIPT FLUSH are the only SCRIPT commands"
    );
}
