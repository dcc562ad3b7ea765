//! Concurrency rules in Redis: several instances (each its own backend,
//! connections and instance id) on one real `redis-server`, driven
//! through the rule set and the `Held` slots a layer keeps with each response.
//! Time is a shared test time that the scripts read too, and the slots'
//! renewal timers run on it, so slot expiry and renewal are decided on the
//! test's timeline, not by sleeps.

use std::collections::VecDeque;
use std::time::Duration;
use throttle_fleet_core::InFlightLimit;

use throttle_fleet_core::decision::Kind;
use throttle_fleet_core::rule_set::Held;
use throttle_fleet_core::{
    Answer, Key, Rule, decision::Decision, decision::Demand, rule_set::RuleSet,
};
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_redis::{
    ApproximateOptions, ExactBackend, LeaseOptions, RedisBackend, RedisConfig,
};
use throttle_fleet_test_support::RedisServer;
use throttle_fleet_test_support::Rng;

const T0: u64 = 1_800_000_000_000_000;
const TTL: Duration = Duration::from_secs(3);

/// One instance: its own backend and rule set with the rule at index 0.
struct Instance {
    backend: ExactBackend,
    rules: RuleSet,
}

async fn instance(server: &RedisServer, time: &TestTime, rule: &Rule) -> Instance {
    // Timeouts far above the default 50 ms: these tests count slots under
    // every interleaving, and a check that a starved machine (the compat
    // run beside the contracts in CI) made wait past 50 ms decides
    // degraded, failing open, which is not what they are about.
    let config = RedisConfig::standalone(server.url())
        .scheduler(time.scheduler())
        .command_timeout(Duration::from_secs(2))
        .connect_timeout(Duration::from_secs(2));
    let backend = RedisBackend::exact(config).await.unwrap();
    let mut rules = RuleSet::new();
    rules.bind(rule.clone(), &backend).unwrap();
    Instance { backend, rules }
}

/// One request of `cost` on `key`: its decision and, when admitted, its slots.
async fn request(inst: &Instance, key: &str, cost: u64) -> (Decision, Option<Box<Held>>) {
    let demands = [Demand::new(0, Key::new(key), cost)];
    let checked = match inst.rules.check(&demands) {
        Answer::Ready(c) => c,
        Answer::Pending(f) => f.await,
    };
    checked.into_parts()
}

/// The name of `key`'s `part` (`ct`, `cz`) under `rule` in Redis.
fn redis_key(rule: &str, key: &str, part: &str) -> String {
    let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
    format!("rl:{{{rule}:r{hex}}}:{part}")
}

/// The cost Redis holds for `key` (its `ct` value), 0 when absent.
fn held_in_redis(server: &RedisServer, rule: &str, key: &str) -> u64 {
    let name = redis_key(rule, key, "ct");
    server.cli(&["GET", &name]).trim().parse().unwrap_or(0)
}

/// Waits (bounded) until the background releases have reached Redis.
async fn settled(server: &RedisServer, rule: &str, key: &str, expect: u64) {
    for _ in 0..500 {
        if held_in_redis(server, rule, key) == expect {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "Redis holds {} for {key}, expected {expect}",
        held_in_redis(server, rule, key)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_interleaving_of_acquires_and_releases_on_four_instances_holds_more_than_n() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let n = 5;
    let rule = Rule::concurrency(
        "inflight",
        InFlightLimit {
            slot_ttl: TTL,
            ..InFlightLimit::new(n)
        },
    );
    let mut fleet = Vec::new();
    for _ in 0..4 {
        fleet.push(instance(&server, &time, &rule).await);
    }
    for seed in 0..4u64 {
        let mut rng = Rng::new(seed);
        // The perfect limiter: what is in flight, request by request.
        let mut running: VecDeque<(u64, Box<Held>)> = VecDeque::new();
        let mut in_flight = 0;
        for step in 0..300 {
            if rng.below(100) < 55 {
                let cost = 1 + rng.below(2);
                let at = rng.below(4) as usize;
                let (decision, slots) = request(&fleet[at], "k", cost).await;
                let fits = in_flight + cost <= n;
                assert_eq!(
                    decision.is_allowed(),
                    fits,
                    "seed {seed} step {step}: {in_flight} in flight, cost {cost}: {decision:?}"
                );
                if let Some(slots) = slots {
                    in_flight += cost;
                    running.push_back((cost, slots));
                }
            } else if !running.is_empty() {
                let i = rng.below(running.len() as u64) as usize;
                let (cost, slots) = running.remove(i).unwrap();
                drop(slots);
                in_flight -= cost;
                // A release leaves the response path: wait for it to land.
                settled(&server, "inflight", "k", in_flight).await;
            }
            assert!(held_in_redis(&server, "inflight", "k") <= n);
            time.advance(Duration::from_millis(1)).await;
        }
        running.clear();
        settled(&server, "inflight", "k", 0).await;
    }
    // Every request ended: nothing is left in Redis.
    assert_eq!(server.cli(&["DBSIZE"]).trim(), "0");
    let stats = fleet[0].backend.slot_stats();
    assert_eq!(stats.held, 0);
    assert_eq!(stats.granted, stats.released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_instances_slots_come_back_after_one_lifetime_while_a_renewed_request_keeps_its_own()
{
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let rule = Rule::concurrency(
        "inflight",
        InFlightLimit {
            slot_ttl: TTL,
            ..InFlightLimit::new(3)
        },
    );
    // Its own time, never moved: the timers of a killed process never fire.
    let dead = instance(&server, &TestTime::new(T0), &rule).await;
    let alive = instance(&server, &time, &rule).await;
    let other = instance(&server, &time, &rule).await;

    // The instance that will die holds two slots, the living one one.
    let (_, a) = request(&dead, "k", 1).await;
    let (_, b) = request(&dead, "k", 1).await;
    let (_, kept) = request(&alive, "k", 1).await;
    assert!(a.is_some() && b.is_some() && kept.is_some());
    assert!(!request(&other, "k", 1).await.0.is_allowed());
    // SIGKILL: no release, no renewal ever again.
    std::mem::forget((a, b));
    drop(dead);

    // The living request runs for ten lifetimes, renewed every third of one.
    let step = TTL / 3;
    let mut came_back_at = None;
    for i in 1..=30u32 {
        let renewals = alive.backend.slot_stats().renewals;
        time.advance(step).await;
        assert!(
            alive.backend.slot_stats().renewals > renewals,
            "its renewal timer ran"
        );
        let (decision, slots) = request(&other, "k", 1).await;
        if decision.is_allowed() {
            came_back_at.get_or_insert(step * i);
        }
        // Never more than the limit: the renewed slot is never taken.
        let (two, more) = (request(&other, "k", 1).await, request(&other, "k", 1).await);
        assert!(
            !(decision.is_allowed() && two.0.is_allowed() && more.0.is_allowed()),
            "three new slots while a renewed request held one"
        );
        drop((slots, two, more));
        let before = if came_back_at.is_some() { 1 } else { 3 };
        settled(&server, "inflight", "k", before).await;
    }
    // The dead instance's slots came back once their lifetime had passed
    // (its members expire at the millisecond they were last renewed plus
    // the lifetime), not a step before.
    assert_eq!(came_back_at, Some(TTL));
    assert_eq!(alive.backend.slot_stats().lost, 0);
    drop(kept);
    settled(&server, "inflight", "k", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_not_renewed_for_a_lifetime_is_lost_and_counted_not_brought_back() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let clock = time.clock();
    let rule = Rule::concurrency(
        "inflight",
        InFlightLimit {
            slot_ttl: TTL,
            ..InFlightLimit::new(1)
        },
    );
    let slow = instance(&server, &time, &rule).await;
    let other = instance(&server, &time, &rule).await;
    let (_, held) = request(&slow, "k", 1).await;
    assert!(held.is_some());
    // No renewal for a whole lifetime (Redis away, say): another instance
    // takes the slot back, and the late renewal does not add it again.
    // (The clock moves without running the timers: the process stalled.)
    clock.advance(TTL + Duration::from_millis(1));
    let (_, taken) = request(&other, "k", 1).await;
    assert!(taken.is_some());
    // It runs again: its renewal, overdue, runs now.
    time.advance(Duration::ZERO).await;
    assert_eq!(slow.backend.slot_stats().lost, 1);
    assert_eq!(held_in_redis(&server, "inflight", "k"), 1);
    // Its late release does not free the other instance's slot either.
    drop(held);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!request(&slow, "k", 1).await.0.is_allowed());
    drop(taken);
    settled(&server, "inflight", "k", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiers_costs_and_shutdown_give_every_slot_back() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let rule = Rule::concurrency(
        "inflight",
        InFlightLimit {
            slot_ttl: TTL,
            ..InFlightLimit::new(2)
        },
    )
    .with_tiers([("big", throttle_fleet_core::Quota::in_flight(4))]);
    let a = instance(&server, &time, &rule).await;
    let (_, s1) = request(&a, "big", 3).await;
    assert!(s1.is_some(), "the tier's own limit");
    assert!(!request(&a, "big", 2).await.0.is_allowed());
    let (d, s2) = request(&a, "small", 2).await;
    assert!(d.is_allowed(), "{d:?}");
    assert_eq!((d.limit(&rule), d.remaining()), (2, 0));
    // Shutdown gives back what requests still hold.
    std::mem::forget((s1, s2));
    assert_eq!(a.backend.slot_stats().held, 2);
    a.backend.shutdown().await.unwrap();
    assert_eq!(server.cli(&["DBSIZE"]).trim(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_policies_decide_while_redis_is_away() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let open = Rule::concurrency(
        "open",
        InFlightLimit {
            slot_ttl: TTL,
            ..InFlightLimit::new(2)
        },
    );
    let closed = Rule::concurrency(
        "closed",
        InFlightLimit {
            slot_ttl: TTL,
            ..InFlightLimit::new(2)
        },
    )
    .fail_closed();
    let local = Rule::concurrency(
        "local",
        InFlightLimit {
            slot_ttl: TTL,
            ..InFlightLimit::new(4)
        },
    )
    .local_fallback();
    let config = RedisConfig::standalone(server.url())
        .scheduler(time.scheduler())
        .fleet_size(2);
    let backend = RedisBackend::exact(config).await.unwrap();
    let mut rules = RuleSet::new();
    for rule in [open, closed, local] {
        rules.bind(rule, &backend).unwrap();
    }
    let inst = Instance { backend, rules };
    server.kill();
    let ask = |rule: usize| {
        let demands = [Demand::new(rule, Key::new("k"), 1)];
        let inst = &inst;
        async move {
            let checked = match inst.rules.check(&demands) {
                Answer::Ready(c) => c,
                Answer::Pending(f) => f.await,
            };
            checked.into_parts()
        }
    };
    // Fail open: allowed past the limit, counted locally.
    let mut held = Vec::new();
    for _ in 0..3 {
        let (d, s) = ask(0).await;
        assert!(d.is_allowed(), "{d:?}");
        held.push(s);
    }
    // Fail closed: refused.
    assert_eq!(ask(1).await.0.kind(), Kind::Refused);
    // Local fallback: a share of the limit (4 / fleet of 2), given back
    // when a request ends.
    let (d1, s1) = ask(2).await;
    let (d2, _s2) = ask(2).await;
    assert!(d1.is_allowed() && d2.is_allowed());
    assert!(ask(2).await.0.is_denied());
    drop(s1);
    assert!(ask(2).await.0.is_allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approximate_and_leased_modes_refuse_a_concurrency_rule_naming_the_field() {
    let server = RedisServer::start();
    let rule = Rule::concurrency("inflight", 2);
    let approximate = RedisBackend::approximate(
        RedisConfig::standalone(server.url()),
        ApproximateOptions::default(),
    )
    .await
    .unwrap();
    let leased = RedisBackend::leased(
        RedisConfig::standalone(server.url()),
        LeaseOptions::default(),
    )
    .await
    .unwrap();
    for backend in [RedisBackend::from(approximate), RedisBackend::from(leased)] {
        let err = RuleSet::new().bind(rule.clone(), &backend).unwrap_err();
        assert_eq!(
            (err.rule(), err.field()),
            (Some("inflight"), "algorithm"),
            "{err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_cancelled_while_its_acquire_is_on_its_way_leaves_no_slot() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    // A lifetime far longer than the wait below: Redis' own expiry of the
    // keys (real time) must not be what frees the slot.
    let rule = Rule::concurrency(
        "inflight",
        InFlightLimit {
            slot_ttl: Duration::from_secs(600),
            ..InFlightLimit::new(2)
        },
    );
    let a = instance(&server, &time, &rule).await;
    // Polled only until Redis has run the script, then dropped with its
    // answer unread (the client went away). A poll that happens to find the
    // answer already there completes the request: try again on a new key.
    for attempt in 0..20 {
        let key = format!("k{attempt}");
        let demands = [Demand::new(0, Key::new(&key), 1)];
        let Answer::Pending(mut pending) = a.rules.check(&demands) else {
            panic!("a Redis check is answered later");
        };
        let mut completed = false;
        while held_in_redis(&server, "inflight", &key) == 0 {
            let once = std::future::poll_fn(|cx| std::task::Poll::Ready(pending.as_mut().poll(cx)));
            if once.await.is_ready() {
                completed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if completed {
            continue;
        }
        drop(pending);
        settled(&server, "inflight", &key, 0).await;
        return;
    }
    panic!("every attempt was answered before it could be cancelled");
}

/// What an operator's inspect answers for a key of a concurrency rule.
async fn inspect(inst: &Instance, key: &str) -> (u64, u64) {
    let state = match inst.rules.operate().inspect(0, &Key::new(key)) {
        Answer::Ready(r) => r,
        Answer::Pending(f) => f.await,
    }
    .unwrap();
    (state.limit, state.remaining)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inspect_reads_what_the_fleet_holds_and_takes_nothing() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let clock = time.clock();
    let rule = Rule::concurrency(
        "inflight",
        InFlightLimit {
            slot_ttl: TTL,
            ..InFlightLimit::new(3)
        },
    );
    let (a, b) = (
        instance(&server, &time, &rule).await,
        instance(&server, &time, &rule).await,
    );
    assert_eq!(inspect(&b, "k").await, (3, 3), "a key never seen");
    let (_, first) = request(&a, "k", 1).await;
    let (_, second) = request(&a, "k", 1).await;
    assert!(first.is_some() && second.is_some());
    // Another instance reads the fleet's count, and reading takes nothing
    // (three reads, then the last slot is still there to take).
    for _ in 0..3 {
        assert_eq!(inspect(&b, "k").await, (3, 1));
    }
    assert_eq!(held_in_redis(&server, "inflight", "k"), 2);
    let (_, third) = request(&b, "k", 1).await;
    assert!(third.is_some());
    assert_eq!(inspect(&a, "k").await, (3, 0));
    assert!(!request(&b, "k", 1).await.0.is_allowed());
    // Released slots come back in the reading.
    drop(third);
    settled(&server, "inflight", "k", 2).await;
    assert_eq!(inspect(&b, "k").await, (3, 1));
    // A slot whose time has passed (its instance stalled for a lifetime)
    // is not counted, though no acquire has dropped it yet.
    clock.advance(TTL + Duration::from_millis(1));
    assert_eq!(inspect(&b, "k").await, (3, 3));
    let members = server.cli(&["ZCARD", &redis_key("inflight", "k", "cz")]);
    assert_eq!(members.trim(), "2", "a read drops nothing");
    assert_eq!(held_in_redis(&server, "inflight", "k"), 2);
    drop((first, second));
}
