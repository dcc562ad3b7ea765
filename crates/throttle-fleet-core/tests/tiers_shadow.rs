//! Tiers, shadow rules and settled charges in the rule set, on the memory
//! backend and a manual clock.

use std::time::Duration;

use throttle_fleet_core::decision::{Kind, ShadowDenials};
use throttle_fleet_core::limits::MAX_TIER_QUOTAS;
use throttle_fleet_core::rule_set::Binding;
use throttle_fleet_core::{
    Answer, Key, Quota, Rule, clock::ManualClock, decision::Decision, decision::Demand,
    memory::MemoryBackend, rule_set::RuleSet,
};

fn decide(check: Answer) -> Decision {
    match check {
        Answer::Ready(c) => c.into_decision(),
        Answer::Pending(_) => panic!("the memory backend decides at once"),
    }
}

/// A decision's figures, with the limit and quota its rule gives them.
#[derive(Debug)]
struct Got {
    rule: usize,
    limit: u64,
    quota: Quota,
    remaining: u64,
    retry_after: Duration,
    shadow: bool,
    shadow_denied: ShadowDenials,
}

fn got(rules: &RuleSet, d: Decision, kind: Kind) -> Got {
    assert_eq!(d.kind(), kind, "{d:?}");
    let rule = d.rule().unwrap();
    Got {
        rule,
        limit: d.limit(rules.rule(rule)),
        quota: d.quota(rules.rule(rule)),
        remaining: d.remaining(),
        retry_after: d.retry_after(),
        shadow: d.is_shadow(),
        shadow_denied: d.shadow_denied(),
    }
}

fn allowed(rules: &RuleSet, check: Answer) -> Got {
    got(rules, decide(check), Kind::Allowed)
}

fn denied(rules: &RuleSet, check: Answer) -> Got {
    got(rules, decide(check), Kind::Denied)
}

fn backend() -> MemoryBackend<ManualClock> {
    MemoryBackend::with_clock(ManualClock::new(1_000_000))
}

#[test]
fn each_tier_has_its_own_quota_and_counters() {
    let mut rules = RuleSet::new();
    let rule = Rule::new("tenant", Quota::per_minute(2))
        .fixed_window()
        .with_tiers([
            ("gold", Quota::per_minute(4)),
            ("silver", Quota::per_minute(3)),
            ("gold-2", Quota::per_minute(4)),
        ]);
    assert_eq!(rule.tiers().unwrap().quotas().len(), 2);
    let t = rules.bind(rule, &backend()).unwrap();
    for (key, quota) in [("gold", 4), ("gold-2", 4), ("silver", 3), ("other", 2)] {
        let d = [Demand::new(t, Key::new(key), 1)];
        for left in (0..quota).rev() {
            let a = allowed(&rules, rules.check(&d));
            assert_eq!((a.limit, a.remaining), (quota, left), "{key}");
            assert_eq!(a.quota, Quota::per_minute(quota), "{key}");
        }
        let no = denied(&rules, rules.check(&d));
        assert_eq!((no.limit, no.quota.limit()), (quota, quota), "{key}");
    }
}

#[test]
fn a_tier_function_picks_among_declared_quotas() {
    let (free, paid) = (Quota::per_minute(1), Quota::per_minute(3).with_burst(3));
    let rule = Rule::new("user", free).with_tiers_by([paid], move |k: &Key| {
        if k.as_bytes().starts_with(b"paid:") {
            paid
        } else {
            free
        }
    });
    let mut rules = RuleSet::new();
    let u = rules.bind(rule, &backend()).unwrap();
    let d = |k: &str| [Demand::new(u, Key::new(k), 1)];
    for _ in 0..3 {
        assert_eq!(allowed(&rules, rules.check(&d("paid:1"))).limit, 3);
    }
    assert_eq!(
        denied(&rules, rules.check(&d("paid:1"))).retry_after,
        Duration::from_secs(20)
    );
    assert_eq!(allowed(&rules, rules.check(&d("u:1"))).limit, 1);
    assert_eq!(denied(&rules, rules.check(&d("u:1"))).limit, 1);
}

#[test]
fn bad_tiers_are_named() {
    let q = Quota::per_minute(10);
    let err = |rule: Rule| {
        let e = rule.validate().unwrap_err();
        (e.rule().map(str::to_owned), e.field(), e.to_string())
    };
    let (rule, field, msg) = err(Rule::new("t", q).with_tiers([("k", Quota::per_minute(0))]));
    assert_eq!((rule.as_deref(), field), (Some("t"), "tiers"));
    assert!(msg.contains("quota.limit must be at least 1"), "{msg}");
    // A window algorithm takes no burst, in a tier either.
    let (_, field, _) = err(Rule::new("t", q)
        .fixed_window()
        .with_tiers([("k", q.with_burst(3))]));
    assert_eq!(field, "tiers");
    // The rule's cost must fit every tier.
    let (_, field, msg) = err(Rule::new("t", q)
        .with_cost(5)
        .with_tiers([("k", Quota::per_minute(4))]));
    assert_eq!(field, "tiers");
    assert!(msg.contains("cost"), "{msg}");
    let many = (1..=MAX_TIER_QUOTAS as u64 + 1).map(|n| (Key::from(n), Quota::per_minute(n)));
    let (_, field, msg) = err(Rule::new("t", q).with_tiers(many));
    assert_eq!(field, "tiers");
    assert!(msg.contains("at most 64"), "{msg}");
    let enough = (1..=MAX_TIER_QUOTAS as u64).map(|n| (Key::from(n), Quota::per_minute(n)));
    Rule::new("t", q).with_tiers(enough).validate().unwrap();
}

#[test]
fn a_shadow_rule_counts_and_never_denies() {
    let mut rules = RuleSet::new();
    let b = backend();
    let ip = rules
        .bind(Rule::new("ip", Quota::per_minute(10)), &b)
        .unwrap();
    let trial = rules
        .bind(Rule::new("trial", Quota::per_minute(2)).shadow(), &b)
        .unwrap();
    let key = Key::new("k");
    let d = [Demand::new(ip, key, 1), Demand::new(trial, key, 1)];
    for n in 1..=5u64 {
        let a = allowed(&rules, rules.check(&d));
        // The enforced rule supplies the figures, and keeps every cost.
        assert_eq!((a.rule, a.remaining, a.shadow), (ip, 10 - n, false));
        assert_eq!(a.shadow_denied.contains(trial), n > 2, "request {n}");
        assert_eq!(
            a.shadow_denied.iter().collect::<Vec<_>>(),
            if n > 2 { vec![trial] } else { vec![] }
        );
    }
    // Alone, a shadow rule's decision is flagged so that no headers go out.
    let alone = [Demand::new(trial, key, 1)];
    let a = allowed(&rules, rules.check(&alone));
    assert!(a.shadow && a.shadow_denied.contains(trial));
}

#[test]
fn an_enforced_denial_gives_the_shadow_rule_its_cost_back() {
    let mut rules = RuleSet::new();
    let b = backend();
    let trial = rules
        .bind(Rule::new("trial", Quota::per_minute(10)).shadow(), &b)
        .unwrap();
    let ip = rules
        .bind(Rule::new("ip", Quota::per_minute(1)), &b)
        .unwrap();
    let key = Key::new("k");
    let d = [Demand::new(trial, key, 1), Demand::new(ip, key, 1)];
    allowed(&rules, rules.check(&d));
    for _ in 0..5 {
        assert_eq!(denied(&rules, rules.check(&d)).rule, ip);
    }
    // The trial rule counted only the request that went on.
    let a = allowed(&rules, rules.check(&[Demand::new(trial, key, 1)]));
    assert_eq!(a.remaining, 8);
}

#[test]
fn charges_come_back_through_release_in_their_tier() {
    let mut rules = RuleSet::new();
    let rule = Rule::new("t", Quota::per_minute(2)).with_tiers([("vip", Quota::per_minute(3))]);
    let rule = Binding::from(rule).settle_by(std::sync::Arc::new(|status| status >= 500));
    let t = rules.bind(rule, &backend()).unwrap();
    let d = [Demand::new(t, Key::new("vip"), 1)];
    for _ in 0..10 {
        let Answer::Ready(checked) = rules.check(&d) else {
            panic!()
        };
        let (decision, held) = checked.into_parts();
        let a = got(&rules, decision, Kind::Allowed);
        assert_eq!((a.limit, a.remaining), (3, 2));
        held.expect("a settling rule keeps its charge").settle(503);
    }
    // A denied check took nothing.
    for _ in 0..3 {
        allowed(&rules, rules.check(&d));
    }
    let Answer::Ready(checked) = rules.check(&d) else {
        panic!()
    };
    assert!(!checked.decision().is_allowed() && checked.held().is_none());
}

#[test]
fn the_same_tiers_listed_in_another_order_are_the_same_rule() {
    // A configuration file's map iterates in any order; a reload compares
    // rules, so the order must not matter.
    let (a, b) = (Quota::per_minute(5), Quota::per_hour(7).with_burst(2));
    let q = Quota::per_minute(1);
    let one = Rule::new("t", q).with_tiers([("x", a), ("y", b)]);
    let other = Rule::new("t", q).with_tiers([("y", b), ("x", a)]);
    assert_eq!(one, other);
    assert_eq!(one.tiers().unwrap().quotas(), &[a, b]);
    assert_ne!(one, Rule::new("t", q).with_tiers([("x", b), ("y", a)]));
}
