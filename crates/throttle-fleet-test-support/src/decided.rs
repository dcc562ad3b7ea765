//! Decisions for a responder's tests: what a rule set decides when a
//! rule's limiter answers a given outcome, or cannot answer, made through
//! the public path.

use std::sync::Arc;

use throttle_fleet_core::backend::{Backend, Limiter, Outcome, Unavailable};
use throttle_fleet_core::decision::{Decision, Demand};
use throttle_fleet_core::rule_set::RuleSet;
use throttle_fleet_core::{Answer, ConfigError, Key, Quota, Rule};

/// The decision a rule set makes when the rule at `index` (`rule`, the
/// others plain) answers `outcome` for `key`: made through the public path,
/// a backend whose limiter answers `outcome` whatever it is asked.
pub fn decided(rule: Rule, index: usize, key: Key, outcome: Outcome) -> Decision {
    decide(rule, index, key, Ok(outcome))
}

/// The decision a rule set makes when the fail-closed rule at `index`
/// (the others plain) cannot be checked: its backend is unavailable for
/// `reason`.
pub fn refused(index: usize, reason: &str) -> Decision {
    let rule = Rule::new("refused", Quota::per_second(1)).fail_closed();
    decide(rule, index, Key::global(), Err(Unavailable::new(reason)))
}

fn decide(rule: Rule, index: usize, key: Key, answer: Result<Outcome, Unavailable>) -> Decision {
    #[derive(Clone)]
    struct Fixed(Result<Outcome, Unavailable>);
    impl Limiter for Fixed {
        fn acquire(&self, _: &Key, _: u64, _: u64) -> Answer<Result<Outcome, Unavailable>> {
            Answer::Ready(self.0.clone())
        }
        fn refund(&self, _: &Key, _: u64, _: &Outcome) {}
    }
    impl Backend for Fixed {
        fn limiter(&self, _: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
            Ok(Arc::new(self.clone()))
        }
    }
    let backend = Fixed(answer);
    let mut rules = RuleSet::new();
    for i in 0..index {
        let other = Rule::new(format!("other-{i}"), Quota::per_second(1));
        rules.bind(other, &backend).unwrap();
    }
    let index = rules.bind(rule, &backend).unwrap();
    let Answer::Ready(checked) = rules.check(&[Demand::new(index, key, 1)]) else {
        unreachable!("the limiter answers at once")
    };
    checked.into_decision()
}
