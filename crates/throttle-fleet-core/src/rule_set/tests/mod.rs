//! The rule set's own tests: what the memory fast path decides, and which
//! refusal the fold reports after a wait.

use std::time::Duration;

mod operate;

use super::*;
use crate::algorithm::Algorithm;
use crate::clock::ManualClock;
use crate::memory::Direct;
use crate::memory::MemoryBackend;
use std::sync::Arc;

use crate::backend::{Limiter, Outcome, Unavailable};
use crate::decision::Demand;
use crate::decision::Kind;
use crate::{Answer, Backend, ConfigError, Key, Quota, Rule};

/// What a decision says, without the instants (which the system clock
/// moves between two rule sets).
fn figures(check: Answer) -> (bool, usize, u64, u64) {
    let Answer::Ready(decision) = check else {
        panic!("the memory backend decides at once")
    };
    let d = decision.decision();
    assert!(matches!(d.kind(), Kind::Allowed | Kind::Denied), "{d:?}");
    (
        d.is_allowed(),
        d.rule().unwrap(),
        d.remaining(),
        u64::from(d.is_degraded()),
    )
}

/// The delay of the second of two requests at once to a leaky bucket.
fn second_delay(rule: Rule) -> Duration {
    let mut set = RuleSet::new();
    set.bind(rule, &MemoryBackend::with_clock(ManualClock::new(0)))
        .unwrap();
    let demand = [Demand::new(0, Key::new("k"), 1)];
    let _ = set.check(&demand);
    match set.check(&demand) {
        Answer::Ready(c) if c.decision().is_allowed() => c.decision().delay(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_lone_shadow_rule_never_delays() {
    let rule = Rule::new("lb", Quota::per_second(1).with_burst(3)).leaky_bucket();
    assert_eq!(second_delay(rule.clone()), Duration::from_secs(1));
    assert_eq!(second_delay(rule.shadow()), Duration::ZERO);
}

#[test]
fn memory_limiters_are_called_directly_and_decide_as_through_the_trait() {
    for algorithm in Algorithm::ALL {
        let rule = Rule::new("r", Quota::per_hour(3)).with_algorithm(algorithm);
        let mut direct = RuleSet::new();
        direct
            .bind(rule.clone(), &MemoryBackend::default())
            .unwrap();
        let how = &direct.rules[0].direct;
        let expected = match algorithm {
            Algorithm::TokenBucket | Algorithm::LeakyBucket => {
                matches!(how, Direct::Bucket(_))
            }
            Algorithm::FixedWindow => matches!(how, Direct::Window(_)),
            Algorithm::SlidingWindowCounter => matches!(how, Direct::Counter(_)),
            _ => matches!(how, Direct::Other),
        };
        assert!(expected, "{algorithm:?}");

        let mut by_trait = RuleSet::new();
        by_trait.bind(rule, &MemoryBackend::default()).unwrap();
        by_trait.rules = by_trait
            .rules
            .iter()
            .map(|b| Bound {
                direct: Direct::Other,
                ..b.clone()
            })
            .collect();
        let demand = [Demand::new(0, Key::new("k"), 1)];
        let seen: Vec<_> = (0..5).map(|_| figures(direct.check(&demand))).collect();
        for (i, s) in seen.iter().enumerate() {
            assert_eq!(
                figures(by_trait.check(&demand)),
                *s,
                "{algorithm:?} check {i}"
            );
        }
        assert_eq!(
            seen.iter().filter(|s| s.0).count(),
            3,
            "{algorithm:?}: {seen:?}"
        );
    }
    // Another clock goes through the trait.
    let mut manual = RuleSet::new();
    let backend = MemoryBackend::with_clock(ManualClock::new(0));
    manual
        .bind(Rule::new("r", Quota::per_hour(3)), &backend)
        .unwrap();
    assert!(matches!(manual.rules[0].direct, Direct::Other));
}

/// A memory limiter that answers after a (ready) round trip, as a remote
/// backend does.
struct Later(Arc<dyn Limiter>);

impl Limiter for Later {
    fn acquire(&self, key: &Key, cost: u64, limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        let Answer::Ready(result) = self.0.acquire(key, cost, limit) else {
            unreachable!("a memory limiter decides at once")
        };
        Answer::Pending(Box::pin(std::future::ready(result)))
    }

    fn refund(&self, key: &Key, cost: u64, outcome: &Outcome) {
        self.0.refund(key, cost, outcome);
    }

    fn is_remote(&self) -> bool {
        true
    }
}

struct LaterBackend(MemoryBackend<ManualClock>);

impl Backend for LaterBackend {
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        Ok(Arc::new(Later(self.0.limiter(rule)?)))
    }
}

#[test]
fn after_a_wait_the_refusal_reported_is_the_first_in_rule_order() {
    let backend = LaterBackend(MemoryBackend::with_clock(ManualClock::new(0)));
    let mut set = RuleSet::new();
    for name in ["first", "second", "third"] {
        set.bind(Rule::new(name, Quota::per_hour(1)), &backend)
            .unwrap();
    }
    let demands: Vec<Demand> = (0..3)
        .map(|rule| Demand::new(rule, Key::new("k"), 1))
        .collect();
    let resolve = |answer: Answer| match answer {
        Answer::Ready(d) => d,
        Answer::Pending(f) => futures_util::FutureExt::now_or_never(f).expect("ready"),
    };
    assert!(resolve(set.check(&demands)).decision().is_allowed());
    // Every rule now denies; all three are asked at once after the first
    // wait, and the first in rule order is the one reported.
    let denied = resolve(set.check(&demands)).into_decision();
    assert!(denied.is_denied(), "{denied:?}");
    assert_eq!(set.rule(denied.rule().unwrap()).name(), "first");
}
