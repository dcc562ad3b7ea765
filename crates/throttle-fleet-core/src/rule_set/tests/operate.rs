//! Operations on keys through a rule set, on the memory backend and on a
//! backend that implements none of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::backend::{Limiter, Outcome, Unavailable};
use crate::clock::ManualClock;
use crate::decision::Demand;
use crate::memory::MemoryBackend;
use crate::operate::{BlockCause, OpError, Penalty, Reach};
use crate::rule_set::RuleSet;
use crate::{Answer, Backend, ConfigError, Key, Quota, Rule};

fn decide(set: &RuleSet, rule: usize, key: Key) -> (bool, Duration) {
    let Answer::Ready(c) = set.check(&[Demand::new(rule, key, 1)]) else {
        panic!("memory decides at once")
    };
    let d = c.decision();
    (
        d.is_allowed(),
        if d.is_allowed() {
            Duration::ZERO
        } else {
            d.retry_after()
        },
    )
}

/// A brute-force client at 20 requests a second against 2 a minute: each
/// block is twice the last, up to the maximum; a neighbour is never denied.
#[test]
fn blocks_grow_twofold_up_to_the_maximum_and_spare_other_keys() {
    let clock = ManualClock::new(1_000_000_000);
    let backend = MemoryBackend::with_clock(clock.clone());
    let mut set = RuleSet::new();
    let penalty = Penalty::new(3, Duration::from_secs(60), Duration::from_secs(10))
        .with_max_block(Duration::from_secs(40));
    let login = set
        .bind(
            Rule::new("login", Quota::per_minute(2))
                .fixed_window()
                .with_penalty(penalty),
            &backend,
        )
        .unwrap();
    let (bot, neighbour) = (Key::new("bot"), Key::new("neighbour"));
    let mut blocks = Vec::new();
    let mut was_blocked = false;
    let mut neighbour_denied = 0;
    for tick in 0..(20 * 400) {
        clock.advance(Duration::from_millis(50));
        let (_, wait) = decide(&set, login, bot);
        let listed = set.operate().blocked(login);
        if let [(key, _, length)] = listed.as_slice() {
            assert_eq!(*key, bot);
            if !was_blocked {
                // The denial that started it already tells the client to
                // wait out the block (or the window, if that is longer).
                assert!(wait >= *length, "{wait:?} < {length:?}");
                blocks.push(length.as_secs());
            }
        }
        was_blocked = !listed.is_empty();
        // The neighbour: one request every 40 s, under its 2 a minute.
        if tick % 800 == 0 && !decide(&set, login, neighbour).0 {
            neighbour_denied += 1;
        }
    }
    assert_eq!(&blocks[..5], [10, 20, 40, 40, 40]);
    assert_eq!(neighbour_denied, 0);
    assert_eq!(
        set.operate().block_stats(login).started as usize,
        blocks.len()
    );
}

#[test]
fn a_block_holds_its_retry_after_and_survives_a_reload() {
    let clock = ManualClock::new(1_000_000);
    let backend = MemoryBackend::with_clock(clock.clone());
    let mut set = RuleSet::new();
    let ip = set
        .bind(Rule::new("ip", Quota::per_minute(100)), &backend)
        .unwrap();
    let key = Key::new("203.0.113.9");
    let Answer::Ready(Ok(Reach::Instance)) =
        set.operate()
            .block(ip, &key, Duration::from_secs(90), "203.0.113.9")
    else {
        panic!()
    };
    clock.advance(Duration::from_secs(30));
    assert_eq!(decide(&set, ip, key), (false, Duration::from_secs(60)));
    let mut reloaded = RuleSet::new();
    reloaded
        .bind_after(Rule::new("ip", Quota::per_minute(50)), &backend, &set)
        .unwrap();
    assert_eq!(decide(&reloaded, 0, key), (false, Duration::from_secs(60)));
    let (_, block, _) = &reloaded.operate().blocked(0)[0];
    assert_eq!(
        (block.label.as_ref(), block.cause),
        ("203.0.113.9", BlockCause::Operator)
    );
    clock.advance(Duration::from_secs(60));
    assert!(decide(&reloaded, 0, key).0);
    assert!(reloaded.operate().blocked(0).is_empty());
}

#[test]
fn penalize_takes_what_is_left_and_reward_gives_it_back() {
    let backend = MemoryBackend::with_clock(ManualClock::new(5_000_000));
    let mut set = RuleSet::new();
    let r = set
        .bind(
            Rule::new("api", Quota::per_minute(10)).fixed_window(),
            &backend,
        )
        .unwrap();
    let key = Key::new("tenant-1");
    let remaining = |set: &RuleSet| match set.operate().inspect(r, &key) {
        Answer::Ready(Ok(s)) => s.remaining,
        other => panic!("{other:?}"),
    };
    assert_eq!(remaining(&set), 10);
    assert!(matches!(
        set.operate().penalize(r, &key, 4),
        Answer::Ready(Ok(4))
    ));
    assert_eq!(remaining(&set), 6);
    assert!(matches!(
        set.operate().penalize(r, &key, 50),
        Answer::Ready(Ok(6))
    ));
    assert_eq!(remaining(&set), 0);
    assert!(matches!(
        set.operate().reward(r, &key, 3),
        Answer::Ready(Ok(()))
    ));
    assert_eq!(remaining(&set), 3);
    assert!(matches!(
        set.operate().reset(r, &key),
        Answer::Ready(Ok(()))
    ));
    assert_eq!(remaining(&set), 10);
    assert!(matches!(
        set.operate().block(r, &key, Duration::ZERO, ""),
        Answer::Ready(Err(OpError::Invalid(_)))
    ));
}

/// A limiter written before the operations: it counts its calls.
struct Counting(AtomicU64);

impl Limiter for Counting {
    fn acquire(&self, _: &Key, _: u64, _limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Answer::Ready(Ok(Outcome::new(
            crate::algorithm::Step {
                allowed: true,
                remaining: 5,
                ..Default::default()
            },
            0,
        )))
    }
    fn refund(&self, _: &Key, _: u64, _: &Outcome) {}
}

struct Outside(Arc<Counting>);

impl Backend for Outside {
    fn limiter(&self, _: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        Ok(self.0.clone())
    }
}

#[test]
fn a_backend_without_the_operations_still_blocks_in_this_process() {
    let counting = Arc::new(Counting(AtomicU64::new(0)));
    let mut set = RuleSet::new();
    let r = set
        .bind(
            Rule::new("x", Quota::per_second(5)),
            &Outside(counting.clone()),
        )
        .unwrap();
    let key = Key::new("k");
    assert!(matches!(
        set.operate().block(r, &key, Duration::from_secs(5), "k"),
        Answer::Ready(Ok(Reach::Instance))
    ));
    for _ in 0..1_000 {
        assert!(!decide(&set, r, key).0);
    }
    assert_eq!(
        counting.0.load(Ordering::Relaxed),
        0,
        "a blocked key asks nothing"
    );
    assert!(matches!(
        set.operate().reset(r, &key),
        Answer::Ready(Err(OpError::Unsupported {
            operation: "reset",
            ..
        }))
    ));
    assert!(decide(&set, r, Key::new("other")).0);
    assert_eq!(counting.0.load(Ordering::Relaxed), 1);
}

/// A limiter that denies every request and cannot reset (the default).
struct Denying;

impl Limiter for Denying {
    fn acquire(&self, _: &Key, _: u64, _limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        Answer::Ready(Ok(Outcome::new(crate::algorithm::Step::default(), 0)))
    }
    fn refund(&self, _: &Key, _: u64, _: &Outcome) {}
}

impl Backend for Denying {
    fn limiter(&self, _: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        Ok(Arc::new(Denying))
    }
}

/// A reset the backend could not make changes nothing here either: the
/// key's denials under the rule's penalty are still counted, so the third
/// starts a block as it would have without the reset.
#[test]
fn a_reset_that_fails_keeps_the_penalty_history() {
    let penalty = Penalty::new(3, Duration::from_secs(60), Duration::from_secs(10));
    let mut set = RuleSet::new();
    let r = set
        .bind(
            Rule::new("login", Quota::per_minute(5)).with_penalty(penalty),
            &Denying,
        )
        .unwrap();
    let key = Key::new("guesser");
    for _ in 0..2 {
        assert!(!decide(&set, r, key).0);
    }
    assert!(set.operate().blocked(r).is_empty());
    assert!(matches!(
        set.operate().reset(r, &key),
        Answer::Ready(Err(OpError::Unsupported { .. }))
    ));
    assert!(!decide(&set, r, key).0);
    assert_eq!(
        set.operate().blocked(r).len(),
        1,
        "the failed reset forgot two denials"
    );
}
