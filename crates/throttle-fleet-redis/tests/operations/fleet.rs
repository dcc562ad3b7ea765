//! The fleet the operations' tests run: instances (each its own backend)
//! on one real `redis-server`, in a mode, on a shared test time; and the
//! waits and requests the tests make of it.

use std::time::Duration;

use throttle_fleet_core::{Answer, Key, Quota, Rule, decision::Demand, rule_set::RuleSet};
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;

use super::mode::backend_of;
pub(crate) use super::mode::{MODES, Mode};

pub(crate) const T0: u64 = 1_800_000_000_000_000;
/// How long the backends wait before subscribing again (their probe
/// interval, on the test time).
pub(crate) const RETRY: Duration = Duration::from_millis(250);

/// The instances' patience with Redis: a read of the log that timed out
/// is tried again a probe interval later on the test time, which stands
/// still while a test waits in real time for a change to arrive; on a
/// machine loaded by the runs beside (seen in CI on Redis 6.2) the default
/// 50 ms was missed and the change never arrived. These tests are about
/// what reaches the fleet, not about timeouts.
const PATIENCE: Duration = Duration::from_secs(1);

pub(crate) async fn backend(server: &RedisServer, time: &TestTime, mode: Mode) -> RedisBackend {
    let config = RedisConfig::standalone(server.url())
        .scheduler(time.scheduler())
        .probe_interval(RETRY)
        .command_timeout(PATIENCE);
    backend_of(config, mode).await
}

/// The mode's rule: 5 a minute (a fixed window where the mode counts per
/// interval).
pub(crate) fn rule(mode: Mode) -> Rule {
    let rule = Rule::new("api", Quota::per_minute(5));
    match mode {
        Mode::Approximate => rule.fixed_window(),
        _ => rule,
    }
}

pub(crate) async fn fleet(
    server: &RedisServer,
    time: &TestTime,
    mode: Mode,
    rule: &Rule,
) -> Vec<(RedisBackend, RuleSet)> {
    let mut out = Vec::new();
    for _ in 0..3 {
        let b = backend(server, time, mode).await;
        let mut rules = RuleSet::new();
        rules.bind(rule.clone(), &b).unwrap();
        out.push((b, rules));
    }
    out
}

/// Waits (at most 5 s) until `holds` answers true: what another instance
/// learns arrives on its own connection, in real time.
pub(crate) async fn until<F: Future<Output = bool>>(what: &str, mut holds: impl FnMut() -> F) {
    for _ in 0..1_000 {
        if holds().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{what}: not within 5 s");
}

/// Waits (at most 5 s) until `n` instances listen on the operations'
/// channel; a subscription that failed (a slow machine) is tried again a
/// probe interval later, on the test time moved here.
pub(crate) async fn listening(server: &RedisServer, time: &TestTime, n: u64) {
    for _ in 0..1_000 {
        let reply = server.cli(&["PUBSUB", "NUMSUB", "rl:{throttle-ops}:changed"]);
        if reply
            .lines()
            .last()
            .and_then(|l| l.trim().parse::<u64>().ok())
            == Some(n)
        {
            return;
        }
        time.advance(RETRY).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{n} listeners: not within 5 s");
}

/// Waits until the three instances of a fresh fleet listen and have made
/// their first read of the log (one script call each, in the background):
/// what a test that counts calls must not count.
pub(crate) async fn settled(server: &RedisServer, time: &TestTime) {
    listening(server, time, 3).await;
    until("three first reads", || async {
        server.command_count("evalsha") >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Every instance of `fleet` lists `n` keys blocked under rule 0.
pub(crate) async fn all_list(fleet: &[(RedisBackend, RuleSet)], n: usize) {
    until(
        &format!("{n} blocked on every instance"),
        move || async move { fleet.iter().all(|(_, r)| r.operate().blocked(0).len() == n) },
    )
    .await;
}

/// One request: its verdict and, when denied, its wait.
pub(crate) async fn allowed(time: &TestTime, rules: &RuleSet, key: Key) -> (bool, Duration) {
    let checked = op(time, rules.check(&[Demand::new(0, key, 1)])).await;
    let d = checked.decision();
    (
        d.is_allowed(),
        if d.is_allowed() {
            Duration::ZERO
        } else {
            d.retry_after()
        },
    )
}

/// An answer. One that waits for something only the test's time brings
/// (the approximate mode's flush it asked for) gets that time moved a
/// millisecond at a time, each move run to its end, whenever it has waited
/// for Redis a while.
pub(crate) async fn op<T: Send + 'static>(time: &TestTime, answer: Answer<T>) -> T {
    let mut fut = std::pin::pin!(answer.wait());
    loop {
        if let Ok(t) = tokio::time::timeout(Duration::from_millis(20), &mut fut).await {
            return t;
        }
        time.advance(Duration::from_millis(1)).await;
    }
}
