//! A fail-closed approximate rule closes at once: new keys are refused as
//! soon as the node holding their bucket is known down (its connection
//! lost, or no answer to two heartbeats in a row, each within the command
//! timeout), not at the next flush, which here is an hour away; it serves
//! again once the node answers; and one late answer is not a node down.
//! Real `redis-server`, real clock: the assertions are on what decided (no
//! flush had failed yet, no breaker opened), and on the published bounds
//! with slack for a loaded machine; the figures are printed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Key, Quota, Rule};
use throttle_fleet_redis::{ApproximateBackend, ApproximateOptions, RedisBackend, RedisConfig};
use throttle_fleet_test_support::{DelayingProxy, RedisServer, check};

/// The command timeout (the default).
const TIMEOUT: Duration = Duration::from_millis(50);
/// The probe interval (the default).
const PROBE: Duration = Duration::from_millis(250);
/// The bound the node watch publishes (`link/watch.rs`): a hung node's
/// breaker opens within two command timeouts plus one probe interval.
const HANG_BOUND: Duration = Duration::from_millis(2 * 50 + 250);
/// On top of a bound: what a machine busy with other work (two cores, a
/// compiler beside the test) may add to when the test sees a refusal.
const SLACK: Duration = Duration::from_secs(1);

/// What a new key's first request gets.
#[derive(Debug, PartialEq)]
enum Got {
    Admitted,
    Denied,
    Refused,
}

async fn answer(limiter: &dyn Limiter, key: &Key) -> Got {
    let (result, _) = check(limiter, key).await;
    match result {
        Ok(o) if o.step.allowed => Got::Admitted,
        Ok(_) => Got::Denied,
        Err(_) => Got::Refused,
    }
}

/// The default timeouts, written out (the bounds above are built on them).
fn config(url: String) -> RedisConfig {
    RedisConfig::standalone(url)
        .command_timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .probe_interval(PROBE)
}

/// A fail-closed rule whose span-end flushes are an hour apart.
async fn fail_closed(config: RedisConfig) -> (ApproximateBackend, Arc<dyn Limiter>) {
    let backend = RedisBackend::approximate(config, ApproximateOptions::default().spans(2))
        .await
        .unwrap();
    let rule = Rule::new("ip", Quota::new(1_000_000, Duration::from_secs(7_200)))
        .fixed_window()
        .fail_closed();
    let limiter = throttle_fleet_core::backend::Backend::limiter(&backend, &rule).unwrap();
    (backend, limiter)
}

/// New keys, one after another, until one is refused (at most `within`);
/// returns how many were admitted before it.
async fn new_keys_until_refused(limiter: &dyn Limiter, first: u64, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    let mut admitted = 0;
    for i in first.. {
        match answer(limiter, &Key::from(i)).await {
            Got::Refused => return admitted,
            Got::Admitted => admitted += 1,
            Got::Denied => panic!("a new key denied with the fleet empty"),
        }
        assert!(
            Instant::now() < deadline,
            "new keys still admitted {within:?} after Redis went away ({admitted} of them)"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    unreachable!()
}

/// The subscription's end, not the heartbeat, says so: the probe interval
/// here is two seconds, so the next heartbeat round is over a second after
/// the kill, and the refusal comes before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_redis_closes_new_keys_at_once_before_any_flush_fails() {
    let server = RedisServer::start();
    let probe = Duration::from_secs(2);
    let (backend, limiter) = fail_closed(config(server.url()).probe_interval(probe)).await;
    // Served while Redis is up, on the new-key credit.
    assert_eq!(
        answer(limiter.as_ref(), &Key::new("before")).await,
        Got::Admitted
    );
    // (The watch's subscription is made in the background, with the first
    // heartbeat round, when the backend starts.)
    tokio::time::sleep(Duration::from_millis(300)).await;
    let killed = Instant::now();
    server.kill();
    let admitted = new_keys_until_refused(limiter.as_ref(), 0, Duration::from_secs(5)).await;
    let took = killed.elapsed();
    let stats = backend.approximate_stats();
    println!(
        "killed: {admitted} new keys admitted before the first refusal, {took:?} after the kill"
    );
    assert_eq!(
        stats.failed_flushes, 0,
        "refused on a failed flush, not on the lost connection"
    );
    assert!(
        took < SLACK,
        "refused {took:?} after the kill: not at once (the next heartbeat was {probe:?} away)"
    );
    server.restart();
    wait_until_served(limiter.as_ref()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_redis_closes_new_keys_within_two_command_timeouts_and_a_probe_interval() {
    let server = RedisServer::start();
    let (backend, limiter) = fail_closed(config(server.url())).await;
    assert_eq!(
        answer(limiter.as_ref(), &Key::new("before")).await,
        Got::Admitted
    );
    let stopped = Instant::now();
    server.stop();
    let admitted = new_keys_until_refused(limiter.as_ref(), 0, Duration::from_secs(5)).await;
    let took = stopped.elapsed();
    println!(
        "hung: {admitted} new keys admitted before the first refusal, {took:?} after SIGSTOP \
         (bound {HANG_BOUND:?})"
    );
    assert_eq!(backend.approximate_stats().failed_flushes, 0);
    assert_eq!(backend.stats().breaker_opened, 1);
    assert!(
        took < HANG_BOUND + SLACK,
        "refused {took:?} after SIGSTOP; the bound is {HANG_BOUND:?}"
    );
    server.resume();
    wait_until_served(limiter.as_ref()).await;
}

/// A Redis that answers one command in a hundred three command timeouts
/// late, behind a proxy, while new keys come every two milliseconds until
/// three heartbeats were late (their replies are in the proxy's list) and
/// a second after: no breaker opened, so the fail-closed rule refused
/// nothing. Each request here is a new key admitted on its credit, without
/// asking Redis; one that had asked and been refused would have been
/// refused for its own late call, which is allowed, and is counted apart.
/// The probe interval is 10 ms, so that a hundred replies go by in about
/// a second; the command timeout is 200 ms, so that the `PING` sent after
/// a late one is late only if this machine stalls for that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_late_answer_in_a_hundred_opens_no_breaker() {
    let server = RedisServer::start();
    let proxy = DelayingProxy::start(server.port());
    let timeout = Duration::from_millis(200);
    let config = config(proxy.url())
        .command_timeout(timeout)
        .connect_timeout(timeout)
        .probe_interval(Duration::from_millis(10));
    let (backend, limiter) = fail_closed(config).await;
    proxy.delay_every(100, 3 * timeout);
    let late_pings = || {
        let delayed = proxy.delayed();
        // A heartbeat is a `ROLE` (its reply `*3\r\n$6\r\nmaster...`),
        // the one sent after a late one a `PING`.
        delayed
            .iter()
            .filter(|c| c.starts_with(b"+PONG") || c.starts_with(b"*3\r\n$6\r\nmaster"))
            .count()
    };
    let (mut admitted, mut refused, mut own_call_refused) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    let mut third: Option<Instant> = None;
    for i in 0u64.. {
        if third.is_none() && late_pings() >= 3 {
            third = Some(Instant::now());
        }
        if third.is_some_and(|t| t.elapsed() >= Duration::from_secs(1)) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "fewer than three late heartbeats in a minute: {:?}",
            proxy.delayed()
        );
        let (result, asked) = check(limiter.as_ref(), &Key::from(i)).await;
        match result {
            Ok(o) => {
                assert!(o.step.allowed, "a new key denied with the fleet empty");
                admitted += 1;
            }
            Err(_) if asked => own_call_refused += 1,
            Err(_) => refused += 1,
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let stats = backend.stats();
    println!(
        "one in 100 late, for {:?}: {} replies, {} delayed ({} of them heartbeat replies); {admitted} \
         admitted, {refused} refused, {own_call_refused} refused on their own late call; \
         breaker opened {} times",
        started.elapsed(),
        proxy.chunks(),
        proxy.delayed().len(),
        late_pings(),
        stats.breaker_opened
    );
    assert_eq!(stats.breaker_opened, 0, "a late answer opened the breaker");
    assert_eq!(refused, 0, "refused without a late call of its own");
}

/// New keys are admitted again soon after Redis answers again.
async fn wait_until_served(limiter: &dyn Limiter) {
    let woke = Instant::now();
    for i in 1_000_000u64.. {
        if answer(limiter, &Key::from(i)).await == Got::Admitted {
            println!("served again {:?} after Redis came back", woke.elapsed());
            return;
        }
        assert!(
            woke.elapsed() < Duration::from_secs(5),
            "new keys still refused 5 s after Redis came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
