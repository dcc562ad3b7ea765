//! A backend written outside the project, against the request-path
//! contract alone: `Backend::limiter`, and `Limiter::acquire` and `refund`
//! (with `is_remote` and `requota` left to their defaults, and no key
//! operations of its own). It counts each key's requests in a `HashMap`
//! for a fixed window that never rolls, and it serves an axum router over
//! real TCP: 200s up to the quota, then 429; the operations a backend
//! without `KeyOps` still gets (a read, a block in this process) work on
//! it; and a concurrency rule's reserve reaches it as the limit of each
//! class.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use throttle_fleet::axum::InFlightLimit;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use throttle_fleet::axum::key::Header;
use throttle_fleet::axum::{Limit, Policy, ThrottleLayer};
use throttle_fleet::core::algorithm::Step;
use throttle_fleet::core::backend::{Limiter, Outcome, Unavailable};
use throttle_fleet::core::{
    Answer, Class, ConfigError, Key, Quota, Rule, backend::Backend, decision::Demand,
    operate::Reach, rule_set::RuleSet,
};
use throttle_fleet_test_support::http::{client, serve};

/// Each key's cost in flight or spent, up to the rule's limit.
struct Counts {
    limit: u64,
    used: Mutex<HashMap<Key, u64>>,
}

impl Limiter for Counts {
    fn acquire(&self, key: &Key, cost: u64, limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        let limit = limit.min(self.limit);
        let mut used = self.used.lock().unwrap();
        let used = used.entry(*key).or_default();
        let allowed = used.saturating_add(cost) <= limit;
        if allowed {
            *used += cost;
        }
        let step = Step {
            allowed,
            remaining: limit.saturating_sub(*used),
            reset_us: 60_000_000,
            retry_after_us: if allowed { 0 } else { 60_000_000 },
            delay_us: 0,
        };
        Answer::Ready(Ok(Outcome::new(step, 0)))
    }

    fn refund(&self, key: &Key, cost: u64, _: &Outcome) {
        if let Some(used) = self.used.lock().unwrap().get_mut(key) {
            *used = used.saturating_sub(cost);
        }
    }
}

struct HashMapBackend;

impl Backend for HashMapBackend {
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        Ok(Arc::new(Counts {
            limit: rule.quota().limit(),
            used: Mutex::default(),
        }))
    }
}

fn check(rules: &RuleSet, demand: Demand) -> bool {
    let Answer::Ready(checked) = rules.check(&[demand]) else {
        unreachable!("this backend decides at once")
    };
    checked.decision().is_allowed()
}

#[tokio::test]
async fn an_outside_backend_limits_an_axum_router_over_tcp() {
    let policy = Policy::new().limit(
        Limit::new(
            Rule::new("tenant", Quota::per_minute(3)).fixed_window(),
            Header::new("x-tenant"),
        )
        .backend(HashMapBackend),
    );
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(ThrottleLayer::new(policy, HashMapBackend).unwrap());
    let addr = serve(app, false).await;
    let c = client();
    for remaining in (0..3).rev() {
        let r = c.get(addr, "/", &[("x-tenant", "acme")]).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.header_u64("x-ratelimit-remaining"), remaining);
    }
    let r = c.get(addr, "/", &[("x-tenant", "acme")]).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.header_u64("retry-after"), 60);
    // Another tenant has its own count.
    let r = c.get(addr, "/", &[("x-tenant", "initech")]).await;
    assert_eq!(r.status, StatusCode::OK);
}

#[test]
fn a_backend_without_key_operations_is_read_and_blocked_in_this_process() {
    let mut rules = RuleSet::new();
    let ip = rules
        .bind(Rule::new("ip", Quota::per_minute(5)), &HashMapBackend)
        .unwrap();
    let key = Key::new("10.0.0.1");
    assert!(check(&rules, Demand::new(ip, key, 2)));
    // A read is a check of cost 0: it takes nothing.
    for _ in 0..2 {
        let Answer::Ready(Ok(state)) = rules.operate().inspect(ip, &key) else {
            unreachable!()
        };
        assert_eq!((state.limit, state.remaining), (5, 3));
    }
    // A block holds in this process; a reset is refused, naming why.
    let Answer::Ready(Ok(Reach::Instance)) =
        rules
            .operate()
            .block(ip, &key, Duration::from_secs(60), "abuse")
    else {
        unreachable!()
    };
    assert!(!check(&rules, Demand::new(ip, key, 1)));
    let Answer::Ready(Err(e)) = rules.operate().reset(ip, &key) else {
        unreachable!()
    };
    assert!(e.to_string().contains("reset"), "{e}");
}

#[test]
fn a_concurrency_rule_s_reserve_reaches_an_outside_backend_as_each_class_s_limit() {
    let mut rules = RuleSet::new();
    let r = rules
        .bind(
            Rule::concurrency(
                "backend",
                InFlightLimit {
                    reserve: 1,
                    ..InFlightLimit::new(4)
                },
            ),
            &HashMapBackend,
        )
        .unwrap();
    let d = |class| Demand::new(r, Key::global(), 1).class(class);
    // Each admission holds its slot until its answer is dropped.
    let mut held = Vec::new();
    let mut admit = |class| {
        let Answer::Ready(c) = rules.check(&[d(class)]) else {
            unreachable!("this backend decides at once")
        };
        let allowed = c.decision().is_allowed();
        held.push(c);
        allowed
    };
    // Sheddable requests may fill 4 - 2 x 1 slots, default ones 3, critical
    // ones all 4.
    assert!(admit(Class::Sheddable) && admit(Class::Sheddable));
    assert!(!admit(Class::Sheddable));
    assert!(admit(Class::Default) && !admit(Class::Default));
    assert!(admit(Class::Critical) && !admit(Class::Critical));
}

/// Marks every answer shed, allowed or not, as a careless backend might.
struct ShedsEverything;

impl Limiter for ShedsEverything {
    fn acquire(&self, _: &Key, cost: u64, _: u64) -> Answer<Result<Outcome, Unavailable>> {
        let step = Step {
            allowed: cost <= 1,
            retry_after_us: if cost <= 1 { 0 } else { 1_000_000 },
            ..Step::default()
        };
        Answer::Ready(Ok(Outcome {
            shed: true,
            ..Outcome::new(step, 0)
        }))
    }

    fn refund(&self, _: &Key, _: u64, _: &Outcome) {}
}

impl Backend for ShedsEverything {
    fn limiter(&self, _: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        Ok(Arc::new(ShedsEverything))
    }
}

#[test]
fn an_allowed_answer_marked_shed_is_neither_shed_nor_shadow() {
    let mut rules = RuleSet::new();
    let r = rules
        .bind(Rule::new("r", Quota::per_minute(5)), &ShedsEverything)
        .unwrap();
    let decide = |cost| {
        let Answer::Ready(c) = rules.check(&[Demand::new(r, Key::new("k"), cost)]) else {
            unreachable!()
        };
        c.into_decision()
    };
    let allowed = decide(1);
    assert!(allowed.is_allowed() && !allowed.is_shed() && !allowed.is_shadow());
    let denied = decide(2);
    assert!(denied.is_denied() && denied.is_shed());
}
