//! Classes of request under a concurrency rule's reserve and adaptive
//! limit, through the rule set and the memory backend.

use std::sync::Arc;
use std::time::Duration;
use throttle_fleet_core::InFlightLimit;

use throttle_fleet_core::adaptive::Vegas;
use throttle_fleet_core::backend::{Limiter, Outcome, Unavailable};
use throttle_fleet_core::{
    Answer, Class, ConfigError, Key, Rule, backend::Backend, clock::ManualClock, decision::Demand,
    memory::MemoryBackend, rule_set::Checked, rule_set::RuleSet,
};

fn check(rules: &RuleSet, d: Demand) -> Checked {
    match rules.check(&[d]) {
        Answer::Ready(c) => c,
        Answer::Pending(_) => unreachable!("memory decides at once"),
    }
}

#[test]
fn each_class_fills_the_slots_its_reserve_leaves_it_and_a_refusal_for_the_reserve_is_shed() {
    let mut rules = RuleSet::new();
    let backend = MemoryBackend::default();
    let r = rules
        .bind(
            Rule::concurrency(
                "backend",
                InFlightLimit {
                    reserve: 2,
                    ..InFlightLimit::new(10)
                },
            ),
            &backend,
        )
        .unwrap();
    let d = |class| Demand::new(r, Key::global(), 1).class(class);
    let mut held = Vec::new();
    // Sheddable requests fill 10 - 2 x 2 = 6 slots.
    for _ in 0..6 {
        held.push(check(&rules, d(Class::Sheddable)));
    }
    let refused = check(&rules, d(Class::Sheddable));
    assert!(refused.decision().is_denied() && refused.decision().is_shed());
    // Default ones two more, critical ones the last two.
    for class in [
        Class::Default,
        Class::Default,
        Class::Critical,
        Class::Critical,
    ] {
        let c = check(&rules, d(class));
        assert!(c.decision().is_allowed(), "{class}");
        held.push(c);
    }
    let refused = check(&rules, d(Class::Default));
    assert!(refused.decision().is_shed());
    // Every slot held: a critical request is refused at the rule's own
    // limit, which is a plain concurrency denial (429), not a shed.
    let full = check(&rules, d(Class::Critical));
    assert!(full.decision().is_denied() && !full.decision().is_shed());
    // One slot back: a sheddable request still finds 9 held of its 6.
    held.pop();
    assert!(check(&rules, d(Class::Sheddable)).decision().is_shed());
    assert!(check(&rules, d(Class::Critical)).decision().is_allowed());
}

#[test]
fn an_adaptive_limit_grows_while_latency_holds_and_its_refusals_are_shed() {
    let clock = ManualClock::new(1_000_000);
    let backend = MemoryBackend::with_clock(clock.clone());
    let mut rules = RuleSet::new();
    let vegas = Vegas::new().initial(4).window(Duration::from_millis(10));
    let r = rules
        .bind(
            Rule::concurrency(
                "backend",
                InFlightLimit {
                    adaptive: Some(vegas),
                    ..InFlightLimit::new(64)
                },
            ),
            &backend,
        )
        .unwrap();
    assert_eq!(rules.adaptive_limit(r), Some(4));
    let d = Demand::new(r, Key::global(), 1);
    let fill = |rules: &RuleSet| {
        let mut held = Vec::new();
        loop {
            let c = check(rules, d);
            if c.decision().is_denied() {
                // Refused under an adaptive limit below the rule's 64:
                // shed; at 64, a plain concurrency denial.
                let below = rules.adaptive_limit(r) < Some(64);
                assert_eq!(c.decision().is_shed(), below, "{:?}", c.decision());
                return held;
            }
            held.push(c);
        }
    };
    let first = fill(&rules);
    assert_eq!(first.len(), 4);
    clock.advance(Duration::from_millis(5));
    drop(first);
    // Requests that take 5 ms however many run: no queue, the limit grows.
    for _ in 0..20 {
        let held = fill(&rules);
        clock.advance(Duration::from_millis(5));
        drop(held);
    }
    let grown = rules.adaptive_limit(r).unwrap();
    assert!(grown > 16, "{grown}");
    // Latency that grows with what runs (a pool of 4): the limit comes down.
    for _ in 0..100 {
        let held = fill(&rules);
        clock.advance(Duration::from_millis(5) * (held.len() as u32).div_ceil(4));
        drop(held);
    }
    let settled = rules.adaptive_limit(r).unwrap();
    assert!(settled < grown && settled <= 16, "{grown} then {settled}");
}

/// A limiter outside the memory backend that records the limit each
/// request is handed, and counts under it.
struct Recording(Arc<dyn Limiter>, Arc<std::sync::Mutex<Vec<u64>>>);

impl Limiter for Recording {
    fn acquire(&self, key: &Key, cost: u64, limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        self.1.lock().unwrap().push(limit);
        self.0.acquire(key, cost, limit)
    }
    fn refund(&self, key: &Key, cost: u64, outcome: &Outcome) {
        self.0.refund(key, cost, outcome);
    }
}

struct RecordingBackend(Arc<std::sync::Mutex<Vec<u64>>>);

impl Backend for RecordingBackend {
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        let inner = MemoryBackend::default().limiter(rule)?;
        Ok(Arc::new(Recording(inner, self.0.clone())))
    }
}

#[test]
fn a_backend_outside_the_memory_one_is_handed_the_limit_of_each_class() {
    let limits = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut rules = RuleSet::new();
    let r = rules
        .bind(
            Rule::concurrency(
                "backend",
                InFlightLimit {
                    reserve: 2,
                    ..InFlightLimit::new(10)
                },
            ),
            &RecordingBackend(limits.clone()),
        )
        .unwrap();
    let d = |class| Demand::new(r, Key::global(), 1).class(class);
    let held: Vec<_> = [Class::Critical, Class::Default, Class::Sheddable]
        .into_iter()
        .map(|class| check(&rules, d(class)))
        .collect();
    assert!(held.iter().all(|c| c.decision().is_allowed()));
    // n, n - reserve, n - 2 x reserve.
    assert_eq!(*limits.lock().unwrap(), [10, 8, 6]);
}

#[test]
fn a_reload_keeps_an_unchanged_rule_s_adaptive_limit_and_starts_a_changed_one_afresh() {
    let clock = ManualClock::new(1_000_000);
    let backend = MemoryBackend::with_clock(clock.clone());
    let rule = |initial| {
        Rule::concurrency(
            "backend",
            InFlightLimit {
                adaptive: Some(
                    Vegas::new()
                        .initial(initial)
                        .window(Duration::from_millis(10)),
                ),
                ..InFlightLimit::new(64)
            },
        )
    };
    let mut rules = RuleSet::new();
    let r = rules.bind(rule(4), &backend).unwrap();
    let d = Demand::new(r, Key::global(), 1);
    // Requests of 5 ms however many run: the limit grows from 4.
    for _ in 0..20 {
        let mut held = Vec::new();
        loop {
            let c = check(&rules, d);
            if c.decision().is_denied() {
                break;
            }
            held.push(c);
        }
        clock.advance(Duration::from_millis(5));
        drop(held);
    }
    let learnt = rules.adaptive_limit(r).unwrap();
    assert!(learnt > 4, "{learnt}");

    let mut same = RuleSet::new();
    let (i, carried) = same.bind_after(rule(4), &backend, &rules).unwrap();
    assert_eq!(carried, throttle_fleet_core::rule_set::Carried::Same);
    assert_eq!(same.adaptive_limit(i), Some(learnt));

    let mut changed = RuleSet::new();
    let (i, _) = changed.bind_after(rule(6), &backend, &rules).unwrap();
    assert_eq!(changed.adaptive_limit(i), Some(6));
}
