//! Operations across a Redis outage and a Redis that lost its data: a
//! block or an unblock made while Redis cannot be asked holds on its
//! instance and reaches the others within a second of Redis answering
//! again; blocks that Redis lost are sent again by the instances that
//! hold them, so an instance started after the loss denies the key too;
//! and two changes to one key end as the one made last, in either order
//! of arrival. "Within a second" is counted on the test time, which the
//! backends' probes and retries run on, a probe interval at a time.

use std::time::Duration;

use throttle_fleet_core::operate::OpError;
use throttle_fleet_core::{Key, operate::Reach, rule_set::RuleSet};
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_test_support::RedisServer;

use super::fleet::{Mode, RETRY, T0, allowed, backend, fleet, listening, op, rule, until};

/// DESIGN's bound: a change reaches every instance within a second.
const BOUND: Duration = Duration::from_secs(1);

/// Moves the test time a probe interval at a time, each move given up to
/// 2 s of real time to play out, until `holds`: the test time it took.
async fn test_time_until<F: Future<Output = bool>>(
    time: &TestTime,
    what: &str,
    mut holds: impl FnMut() -> F,
) -> Duration {
    let mut spent = Duration::ZERO;
    loop {
        for _ in 0..100 {
            if holds().await {
                return spent;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            spent < 5 * BOUND,
            "{what}: not after {spent:?} of test time"
        );
        time.advance(RETRY).await;
        spent += RETRY;
    }
}

/// Whether `rules` holds `key` blocked (its table, which a request looks
/// in first).
fn holds(rules: &RuleSet, key: &Key) -> bool {
    rules.operate().blocked(0).iter().any(|(k, _, _)| k == key)
}

/// Whether a request for `key` is denied by `rules` for a block (its wait
/// is what is left of a block of 60 s or more, not the quota's).
async fn denies_for_a_block(time: &TestTime, rules: &RuleSet, key: Key) -> bool {
    let (ok, wait) = allowed(time, rules, key).await;
    !ok && wait > Duration::from_secs(50)
}

/// Whether Redis' blocks table has `key` under the test rule `api`.
fn redis_holds_block(server: &RedisServer, key: &Key) -> bool {
    let mut field = String::from("api ");
    key.write_hex(&mut field);
    server
        .cli(&["HEXISTS", "rl:{throttle-ops}:blocks", &field])
        .trim()
        == "1"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_made_while_redis_is_down_reaches_every_instance_within_a_second_of_its_return() {
    // Killed: Redis comes back empty (the block is also among those its
    // instance sends again). Hung: it comes back with its data, and the
    // block arrives only as the change that waited.
    for (mode, killed) in [
        (Mode::Exact, true),
        (Mode::Approximate, true),
        (Mode::Leased, true),
        (Mode::Exact, false),
        (Mode::Leased, false),
    ] {
        let server = RedisServer::start();
        let time = TestTime::new(T0);
        let fleet = fleet(&server, &time, mode, &rule(mode)).await;
        listening(&server, &time, 3).await;
        let key = Key::new("203.0.113.7");

        if killed {
            server.kill();
        } else {
            server.stop();
        }
        let reach = op(
            &time,
            fleet[0]
                .1
                .operate()
                .block(0, &key, Duration::from_secs(60), "203.0.113.7"),
        )
        .await;
        assert_eq!(reach, Ok(Reach::Queued), "{mode:?}");
        assert!(
            denies_for_a_block(&time, &fleet[0].1, key).await,
            "{mode:?}: held here"
        );
        assert!(fleet[1].1.operate().blocked(0).is_empty(), "{mode:?}");

        if killed {
            server.restart();
        } else {
            server.resume();
        }
        let f = &fleet;
        let what = format!("{mode:?}, killed: {killed}: the block on every instance");
        let took = test_time_until(&time, &what, move || async move {
            f.iter().all(|(_, r)| holds(r, &key))
        })
        .await;
        assert!(took <= BOUND, "{what}: {took:?}");
        for (i, (_, rules)) in fleet.iter().enumerate() {
            assert!(
                denies_for_a_block(&time, rules, key).await,
                "{mode:?}: instance {i}"
            );
        }
        assert!(redis_holds_block(&server, &key), "{mode:?}");
        for (b, _) in &fleet {
            let _ = b.shutdown().await;
        }
    }
}

/// How Redis loses the fleet's state.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// Restarted without its data, and written to at once by an instance
    /// started after (so the log is not behind: the epoch tells).
    Restart,
    /// A replica promoted before it had the newest entry: the log and the
    /// table lack it, the epoch is the same, and the connections drop.
    LaggingReplica,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_redis_lost_holds_on_an_instance_started_after_the_loss() {
    for loss in [Loss::Restart, Loss::LaggingReplica] {
        let server = RedisServer::start();
        let time = TestTime::new(T0);
        let rule = rule(Mode::Exact);
        let fleet = fleet(&server, &time, Mode::Exact, &rule).await;
        listening(&server, &time, 3).await;
        let key = Key::new("bot");
        let reach = op(
            &time,
            fleet[0]
                .1
                .operate()
                .block(0, &key, Duration::from_secs(600), "bot"),
        )
        .await;
        assert_eq!(reach, Ok(Reach::Fleet));
        super::all_list(&fleet, 1).await;

        match loss {
            Loss::Restart => server.restart(),
            Loss::LaggingReplica => {
                let mut field = String::from("api ");
                key.write_hex(&mut field);
                server.cli(&["DEL", "rl:{throttle-ops}:log"]);
                server.cli(&["HDEL", "rl:{throttle-ops}:blocks", &field]);
                server.cli(&["HDEL", "rl:{throttle-ops}:stamps", &field]);
                server.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
            }
        }
        assert!(!redis_holds_block(&server, &key), "{loss:?}");
        // An instance starts at once, before the others have noticed, and
        // writes.
        let late = backend(&server, &time, Mode::Exact).await;
        let mut rules = RuleSet::new();
        rules.bind(rule.clone(), &late).unwrap();
        let other = Key::new("other");
        op(
            &time,
            rules
                .operate()
                .block(0, &other, Duration::from_secs(60), ""),
        )
        .await
        .unwrap();
        let r = &rules;
        let what = format!("{loss:?}: the late instance holds the block");
        let took = test_time_until(&time, &what, move || async move { holds(r, &key) }).await;
        assert!(took <= BOUND, "{loss:?}: {took:?}");
        assert!(redis_holds_block(&server, &key), "{loss:?}");
        let (ok, wait) = allowed(&time, &rules, key).await;
        assert!(!ok && wait > Duration::from_secs(590), "{loss:?}: {wait:?}");
        // The block made after the loss reached the others too.
        let f = &fleet;
        until("the later block everywhere", move || async move {
            f.iter().all(|(_, r)| holds(r, &other))
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unblock_made_while_redis_is_down_is_not_undone_by_its_return() {
    // Killed (Redis comes back empty, and the others send their block
    // again) and hung (it comes back with its data).
    for killed in [true, false] {
        let server = RedisServer::start();
        let time = TestTime::new(T0);
        let fleet = fleet(&server, &time, Mode::Exact, &rule(Mode::Exact)).await;
        listening(&server, &time, 3).await;
        let key = Key::new("k");
        op(
            &time,
            fleet[0]
                .1
                .operate()
                .block(0, &key, Duration::from_secs(60), "k"),
        )
        .await
        .unwrap();
        super::all_list(&fleet, 1).await;

        if killed {
            server.kill();
        } else {
            server.stop();
        }
        let unblocked = op(&time, fleet[2].1.operate().unblock(0, &key)).await;
        assert_eq!(unblocked, Ok((true, Reach::Queued)), "killed: {killed}");
        assert!(!holds(&fleet[2].1, &key) && holds(&fleet[0].1, &key));
        if killed {
            server.restart();
        } else {
            server.resume();
        }

        let f = &fleet;
        let took = test_time_until(&time, "unblocked everywhere", move || async move {
            f.iter().all(|(_, r)| r.operate().blocked(0).is_empty())
        })
        .await;
        assert!(took <= BOUND, "killed: {killed}: {took:?}");
        // Nothing brings it back: every instance has read, resent and
        // settled by now.
        time.advance(2 * BOUND).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        for (i, (_, rules)) in fleet.iter().enumerate() {
            assert!(
                !holds(rules, &key) && allowed(&time, rules, key).await.0,
                "killed: {killed}: instance {i} denies an unblocked key"
            );
        }
        assert!(!redis_holds_block(&server, &key), "killed: {killed}");
    }
}

/// Two changes to one key end, on every instance and in Redis, as the one
/// made last, whichever arrives first: a block that waited on its
/// instance while Redis hung arrives after an unblock made later on
/// another instance, and is dropped; an unblock made first and a block
/// made later, which waited, ends blocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_changes_to_a_key_end_as_the_one_made_last_in_either_order_of_arrival() {
    for later_arrives_first in [true, false] {
        let server = RedisServer::start();
        let time = TestTime::new(T0);
        let fleet = fleet(&server, &time, Mode::Exact, &rule(Mode::Exact)).await;
        listening(&server, &time, 3).await;
        let key = Key::new("contested");
        let f = &fleet;
        let expect_blocked = !later_arrives_first;

        if later_arrives_first {
            // Made first, sent last: a block that waits while Redis hangs.
            server.stop();
            let reach = op(
                &time,
                fleet[0]
                    .1
                    .operate()
                    .block(0, &key, Duration::from_secs(60), ""),
            )
            .await;
            assert_eq!(reach, Ok(Reach::Queued));
            server.resume();
            time.advance(Duration::from_millis(10)).await;
            // Made later, sent at once.
            let reach = op(&time, fleet[1].1.operate().unblock(0, &key)).await;
            assert_eq!(reach.map(|(_, r)| r), Ok(Reach::Fleet));
        } else {
            let reach = op(&time, fleet[1].1.operate().unblock(0, &key)).await;
            assert_eq!(reach.map(|(_, r)| r), Ok(Reach::Fleet));
            server.stop();
            time.advance(Duration::from_millis(10)).await;
            let reach = op(
                &time,
                fleet[0]
                    .1
                    .operate()
                    .block(0, &key, Duration::from_secs(60), ""),
            )
            .await;
            assert_eq!(reach, Ok(Reach::Queued));
            server.resume();
        }

        // Instance 0 sends what waited at its next probe interval.
        let state = move || async move { f.iter().all(|(_, r)| holds(r, &key) == expect_blocked) };
        let took = test_time_until(&time, "one state everywhere", state).await;
        assert!(
            took <= BOUND,
            "later arrives first: {later_arrives_first}: {took:?}"
        );
        // And it stays.
        time.advance(2 * RETRY).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(state().await, "later arrives first: {later_arrives_first}");
        assert_eq!(
            redis_holds_block(&server, &key),
            expect_blocked,
            "later arrives first: {later_arrives_first}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_a_reset_is_refused() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let fleet = fleet(&server, &time, Mode::Exact, &rule(Mode::Exact)).await;
    let rules = &fleet[0].1;
    let key = Key::new("k");
    server.kill();
    // Let the breaker see it.
    for _ in 0..5 {
        allowed(&time, rules, Key::new("probe")).await;
    }
    let reset = rules.operate().reset(0, &key).wait().await;
    assert!(matches!(reset, Err(OpError::Unavailable(_))), "{reset:?}");
}
