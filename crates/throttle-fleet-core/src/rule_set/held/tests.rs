use crate::decision::Demand;
use crate::memory::MemoryBackend;
use crate::rule_set::Binding;
use crate::rule_set::RuleSet;
use crate::{Answer, Key, Rule};

use super::Checked;

fn check(rules: &RuleSet, demands: &[Demand]) -> Checked {
    match rules.check(demands) {
        Answer::Ready(c) => c,
        Answer::Pending(_) => unreachable!("memory decides at once"),
    }
}

#[test]
fn a_shadow_denial_holds_no_slot_so_its_end_frees_none_of_the_others() {
    let mut rules = RuleSet::new();
    let backend = MemoryBackend::default();
    let shadow = rules
        .bind(Rule::concurrency("shadow", 1).shadow(), &backend)
        .unwrap();
    let demands = [Demand::new(shadow, Key::new("k"), 1)];
    let (_, held) = check(&rules, &demands).into_parts();
    let held = held.expect("the first takes the slot");
    let second = check(&rules, &demands);
    assert!(second.decision().shadow_denied().contains(shadow));
    // It took nothing: it holds nothing, and its end gives nothing back.
    assert!(second.held().is_none());
    drop(second);
    let third = check(&rules, &demands);
    assert!(
        third.decision().shadow_denied().contains(shadow),
        "the first still runs"
    );
    drop(held);
    let fourth = check(&rules, &demands);
    assert!(fourth.decision().shadow_denied().is_empty());
}

#[test]
fn a_settled_cost_goes_back_only_when_its_rule_says_so() {
    let mut rules = RuleSet::new();
    let backend = MemoryBackend::default();
    let rule = Rule::new("r", crate::Quota::per_minute(1));
    let settled = Binding::from(rule).settle_by(std::sync::Arc::new(|status| status >= 500));
    let r = rules.bind(settled, &backend).unwrap();
    let demands = [Demand::new(r, Key::new("k"), 1)];
    let (_, held) = check(&rules, &demands).into_parts();
    let mut held = held.expect("a settling rule keeps its charge");
    assert_eq!(held.slots(), 0);
    held.settle(503);
    drop(held);
    let (_, held) = check(&rules, &demands).into_parts();
    held.expect("given back, so allowed again").settle(200);
    assert!(check(&rules, &demands).decision().is_denied(), "kept");
}
