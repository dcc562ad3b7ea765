//! Operations for the whole fleet: three instances (each its own backend)
//! on one real `redis-server`, in every mode. A block, an unblock or a
//! reset made on one instance holds on the others once the change's
//! message has reached them (waited for: at most 5 s), also after their
//! subscription was lost; penalties escalate in Redis; a blocked key costs
//! Redis nothing, and nor do the operations while nothing changes. The
//! scripts, the limits and the backends' timers run on a shared test time.

use std::time::Duration;

use throttle_fleet_core::operate::BlockCause;
use throttle_fleet_core::{Key, Quota, Rule, operate::Penalty, rule_set::RuleSet};
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_test_support::RedisServer;

mod fleet;
#[path = "../support/mode.rs"]
mod mode;
mod outage;

use fleet::{
    MODES, Mode, RETRY, T0, all_list, allowed, backend, fleet, listening, op, rule, settled, until,
};
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_an_unblock_and_a_reset_reach_every_instance_in_every_mode() {
    for mode in MODES {
        let server = RedisServer::start();
        let time = TestTime::new(T0);
        let fleet = fleet(&server, &time, mode, &rule(mode)).await;
        let key = Key::new("203.0.113.7");

        // Blocked through instance 0: at once there, on the others once
        // told.
        fleet[0]
            .1
            .operate()
            .block(0, &key, Duration::from_secs(60), "203.0.113.7")
            .wait()
            .await
            .unwrap();
        assert!(!allowed(&time, &fleet[0].1, key).await.0, "{mode:?}");
        all_list(&fleet, 1).await;
        for (i, (_, rules)) in fleet.iter().enumerate() {
            let (ok, wait) = allowed(&time, rules, key).await;
            assert!(!ok, "{mode:?}: instance {i} lets a blocked key in");
            assert!(
                wait > Duration::from_secs(59) && wait <= Duration::from_secs(60),
                "{mode:?}: {wait:?}"
            );
            let state = op(&time, rules.operate().inspect(0, &key)).await.unwrap();
            assert_eq!(state.remaining, 0, "{mode:?}");
            assert!(state.blocked_for.is_some(), "{mode:?}");
            let listed = rules.operate().blocked(0);
            assert_eq!(listed.len(), 1, "{mode:?}");
            assert_eq!(
                (&*listed[0].1.label, listed[0].1.cause),
                ("203.0.113.7", BlockCause::Operator)
            );
        }

        // Unblocked through instance 2.
        assert!(
            op(&time, fleet[2].1.operate().unblock(0, &key))
                .await
                .unwrap()
                .0
        );
        all_list(&fleet, 0).await;
        for (i, (_, rules)) in fleet.iter().enumerate() {
            assert!(
                rules.operate().blocked(0).is_empty(),
                "{mode:?}: instance {i}"
            );
            assert!(
                op(&time, rules.operate().inspect(0, &key))
                    .await
                    .unwrap()
                    .blocked_for
                    .is_none()
            );
        }

        // Spent through instance 0 (a penalty takes what is left), then
        // reset through instance 1: every instance finds a fresh key.
        let spender = Key::new("tenant-9");
        op(&time, fleet[0].1.operate().penalize(0, &spender, 5))
            .await
            .unwrap();
        if matches!(mode, Mode::Exact) {
            for (_, rules) in &fleet {
                assert!(
                    !allowed(&time, rules, spender).await.0,
                    "{mode:?}: spent everywhere"
                );
            }
        }
        assert!(
            !allowed(&time, &fleet[0].1, spender).await.0,
            "{mode:?}: spent where it was spent"
        );
        op(&time, fleet[1].1.operate().reset(0, &spender))
            .await
            .unwrap();
        let (f, t) = (&fleet, &time);
        until(
            "a fresh key on every instance after the reset",
            move || async move {
                for (_, rules) in f {
                    if op(t, rules.operate().inspect(0, &spender))
                        .await
                        .unwrap()
                        .remaining
                        != 5
                    {
                        return false;
                    }
                }
                true
            },
        )
        .await;
        assert!(allowed(&time, &fleet[0].1, spender).await.0, "{mode:?}");
        for (b, _) in &fleet {
            let _ = b.shutdown().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_starts_later_loads_the_blocks_that_hold() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let rule = rule(Mode::Exact);
    let first = fleet(&server, &time, Mode::Exact, &rule).await;
    let key = Key::new("bot");
    first[0]
        .1
        .operate()
        .block(0, &key, Duration::from_secs(30), "bot")
        .wait()
        .await
        .unwrap();
    let late = backend(&server, &time, Mode::Exact).await;
    let mut rules = RuleSet::new();
    rules.bind(rule.clone(), &late).unwrap();
    let r = &rules;
    until("the late instance loads the block", move || async move {
        r.operate().blocked(0).len() == 1
    })
    .await;
    assert!(!allowed(&time, &rules, key).await.0);
}

/// A change published while an instance's subscription was down is read
/// from the log when it subscribes again (a probe interval later, on the
/// test time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_made_while_an_instance_was_not_listening_reaches_it_when_it_listens_again() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let fleet = fleet(&server, &time, Mode::Exact, &rule(Mode::Exact)).await;
    let f = &fleet;
    listening(&server, &time, 3).await;
    server.cli(&["CLIENT", "KILL", "TYPE", "pubsub"]);
    let key = Key::new("while-away");
    op(
        &time,
        fleet[0]
            .1
            .operate()
            .block(0, &key, Duration::from_secs(60), ""),
    )
    .await
    .unwrap();
    // Nobody listened: the others do not know yet...
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        fleet[1].1.operate().blocked(0).is_empty() && fleet[2].1.operate().blocked(0).is_empty()
    );
    // ...until they subscribe again and read what they missed.
    time.advance(RETRY).await;
    until("the block after subscribing again", move || async move {
        f.iter().all(|(_, r)| r.operate().blocked(0).len() == 1)
    })
    .await;
}

/// While nothing changes, the operations cost Redis nothing: a minute of
/// the test's time on three idle instances, not one script call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operations_cost_redis_nothing_while_nothing_changes() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let fleet = fleet(&server, &time, Mode::Exact, &rule(Mode::Exact)).await;
    settled(&server, &time).await;
    let before = server.command_count("evalsha");
    time.advance(Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.command_count("evalsha"), before);
    drop(fleet);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_key_costs_redis_no_call() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let fleet = fleet(&server, &time, Mode::Exact, &rule(Mode::Exact)).await;
    let (rules, key) = (&fleet[0].1, Key::new("blocked"));
    settled(&server, &time).await;
    // A key that is not blocked costs a call each: the count can move.
    let before = server.command_count("evalsha");
    allowed(&time, rules, Key::new("someone else")).await;
    assert!(server.command_count("evalsha") > before);
    rules
        .operate()
        .block(0, &key, Duration::from_secs(60), "")
        .wait()
        .await
        .unwrap();
    // Each instance reads the log once, told of the block: counted apart.
    all_list(&fleet, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = server.command_count("evalsha");
    for _ in 0..10_000 {
        assert!(!allowed(&time, rules, key).await.0);
    }
    assert_eq!(server.command_count("evalsha"), before);
    assert_eq!(rules.operate().block_stats(0).denied, 10_000);
}

/// 20 requests a second from one key against 5 a minute, spread over the
/// three instances: the fleet counts its denials in Redis and blocks it
/// for 10 s, 20 s, 40 s, then 40 s (the maximum); another key, one request
/// every 15 s, is never denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn penalties_escalate_across_the_fleet_and_spare_a_neighbour() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let penalty = Penalty::new(5, Duration::from_secs(60), Duration::from_secs(10))
        .with_max_block(Duration::from_secs(40));
    let rule = Rule::new("login", Quota::per_minute(5)).with_penalty(penalty);
    let fleet = fleet(&server, &time, Mode::Exact, &rule).await;
    let (bot, neighbour) = (Key::new("bot"), Key::new("neighbour"));
    let mut lengths = Vec::new();
    let mut was_blocked = false;
    let mut neighbour_denied = 0;
    for tick in 0..(20 * 200u64) {
        let rules = &fleet[(tick % 3) as usize].1;
        allowed(&time, rules, bot).await;
        // The penalty's script runs in the background: let it land.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let listed = fleet[0].1.operate().blocked(0);
        if let Some((_, _, left)) = listed.first()
            && !was_blocked
        {
            lengths.push(left.as_secs_f64().round() as u64);
        }
        was_blocked = !listed.is_empty();
        if tick % 300 == 0
            && !allowed(&time, &fleet[(tick % 2) as usize].1, neighbour)
                .await
                .0
        {
            neighbour_denied += 1;
        }
        time.advance(Duration::from_millis(50)).await;
    }
    assert!(lengths.len() >= 4, "{lengths:?}");
    assert_eq!(&lengths[..4], [10, 20, 40, 40]);
    assert_eq!(neighbour_denied, 0);
}

/// An operator's read of a key takes nothing and asks Redis nothing: in
/// the approximate mode a check of cost 0 used to list the key and ask
/// for a claim, and the claims it shaped made the third instance deny a
/// client's first request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_read_asks_redis_nothing_and_denies_no_one() {
    for mode in [Mode::Approximate, Mode::Leased] {
        let server = RedisServer::start();
        let time = TestTime::new(T0);
        let rule = Rule::new("api", Quota::per_minute(30));
        let rule = if matches!(mode, Mode::Approximate) {
            rule.fixed_window()
        } else {
            rule
        };
        let fleet = fleet(&server, &time, mode, &rule).await;
        let key = Key::new("127.4.2.1");
        settled(&server, &time).await;
        let before = server.command_count("evalsha");
        for (_, rules) in &fleet {
            let state = op(&time, rules.operate().inspect(0, &key)).await.unwrap();
            assert_eq!(state.remaining, 30, "{mode:?}");
        }
        assert_eq!(
            server.command_count("evalsha"),
            before,
            "{mode:?}: a read called Redis"
        );
        for (i, (_, rules)) in fleet.iter().enumerate() {
            assert!(
                allowed(&time, rules, key).await.0,
                "{mode:?}: instance {i} denied a first request"
            );
        }
    }
}

/// Ended blocks leave Redis' table as later writes go by, a few fields per
/// write: 200 blocks of one second, then 200 of a minute written after
/// they ended; the table ends with the 200 that hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ended_blocks_leave_the_table_a_few_at_each_write() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let fleet = fleet(&server, &time, Mode::Exact, &rule(Mode::Exact)).await;
    let rules = &fleet[0].1;
    for i in 0..200 {
        let key = Key::new(format!("short-{i}"));
        op(
            &time,
            rules.operate().block(0, &key, Duration::from_secs(1), ""),
        )
        .await
        .unwrap();
    }
    time.advance(Duration::from_secs(2)).await;
    for i in 0..200 {
        let key = Key::new(format!("long-{i}"));
        op(
            &time,
            rules.operate().block(0, &key, Duration::from_secs(60), ""),
        )
        .await
        .unwrap();
    }
    let held: u64 = server
        .cli(&["HLEN", "rl:{throttle-ops}:blocks"])
        .trim()
        .parse()
        .unwrap();
    assert_eq!(held, 200);
}

/// A reset forgets the key's denials under the rule's penalty, in Redis
/// too: two denials before it and two after never make the three that
/// start a block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_forgets_the_denials_a_penalty_counted() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let penalty = Penalty::new(3, Duration::from_secs(60), Duration::from_secs(10));
    let rule = Rule::new("login", Quota::per_minute(5)).with_penalty(penalty);
    let fleet = fleet(&server, &time, Mode::Exact, &rule).await;
    let (rules, key) = (&fleet[0].1, Key::new("guesser"));
    let two_denials = || async {
        op(&time, rules.operate().penalize(0, &key, 5))
            .await
            .unwrap();
        for _ in 0..2 {
            assert!(!allowed(&time, rules, key).await.0);
            // The penalty's script runs in the background: let it land.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    two_denials().await;
    op(&time, rules.operate().reset(0, &key)).await.unwrap();
    two_denials().await;
    assert!(
        rules.operate().blocked(0).is_empty(),
        "{:?}",
        rules.operate().blocked(0)
    );
    // A third denial does start one: the count is real.
    assert!(!allowed(&time, rules, key).await.0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(rules.operate().blocked(0).len(), 1);
}
