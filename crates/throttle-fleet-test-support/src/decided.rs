//! Decisions for a responder's tests: what a rule set decides when a
//! rule's limiter answers a given outcome, made through the public path.

use throttle_fleet_core::backend::Outcome;
use throttle_fleet_core::decision::Decision;
use throttle_fleet_core::{Key, Rule};

/// The decision a rule set makes when the rule at `index` (`rule`, the
/// others plain) answers `outcome` for `key`: made through the public path,
/// a backend whose limiter answers `outcome` whatever it is asked.
pub fn decided(rule: Rule, index: usize, key: Key, outcome: Outcome) -> Decision {
    use std::sync::Arc;
    use throttle_fleet_core::backend::{Backend, Limiter, Unavailable};
    use throttle_fleet_core::decision::Demand;
    use throttle_fleet_core::rule_set::RuleSet;
    use throttle_fleet_core::{Answer, ConfigError};

    #[derive(Clone, Copy)]
    struct Fixed(Outcome);
    impl Limiter for Fixed {
        fn acquire(&self, _: &Key, _: u64, _: u64) -> Answer<Result<Outcome, Unavailable>> {
            Answer::Ready(Ok(self.0))
        }
        fn refund(&self, _: &Key, _: u64, _: &Outcome) {}
    }
    impl Backend for Fixed {
        fn limiter(&self, _: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
            Ok(Arc::new(*self))
        }
    }
    let mut rules = RuleSet::new();
    for i in 0..index {
        let other = Rule::new(
            format!("other-{i}"),
            throttle_fleet_core::Quota::per_second(1),
        );
        rules.bind(other, &Fixed(outcome)).unwrap();
    }
    let index = rules.bind(rule, &Fixed(outcome)).unwrap();
    let Answer::Ready(checked) = rules.check(&[Demand::new(index, key, 1)]) else {
        unreachable!("the limiter answers at once")
    };
    checked.into_decision()
}
