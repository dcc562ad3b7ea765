//! What the check benchmarks share (and `benches/tower-rate-limiter`,
//! which includes this file): the subjects (ours bare, ours through
//! `RuleSet`, governor, throttle-kit) with the same quota, and the visiting
//! order of keys.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use throttle_fleet_core::InFlightLimit;

use governor::{DefaultKeyedRateLimiter, RateLimiter};
use throttle_fleet_core::adaptive::Vegas;
use throttle_fleet_core::algorithm::{Concurrency, Gcra};
use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::memory::MemoryLimiter;
use throttle_fleet_core::{
    Answer, Key, Quota, Rule, clock::SystemClock, decision::Demand, memory::MemoryBackend,
    rule_set::RuleSet,
};

/// Length of the shared visiting order (a power of two, 1,048,576 entries).
pub(crate) const ORDER_LEN: usize = 1 << 20;
pub(crate) const ORDER_MASK: usize = ORDER_LEN - 1;

/// Room in the memory backend: above the largest key count measured.
const MAX_KEYS: usize = 2_000_000;

/// A rate limiter as the benchmark drives it: one check of one unit for the
/// key numbered `key`, answering whether it was allowed.
pub(crate) trait Subject: Sync {
    fn check(&self, key: u64) -> bool;
}

pub(crate) struct Ours(pub(crate) Arc<MemoryLimiter<Gcra, SystemClock>>);

impl Subject for Ours {
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.check(&Key::from(key), 1).step.allowed
    }
}

/// A concurrency rule's meter in the memory backend: a request taking its
/// slot (the request path), and with `release` also giving it back as it
/// ends (the whole request's cost).
pub(crate) struct OursConcurrency {
    limiter: Arc<MemoryLimiter<Concurrency, SystemClock>>,
    release: bool,
}

impl Subject for OursConcurrency {
    #[inline]
    fn check(&self, key: u64) -> bool {
        let key = Key::from(key);
        let outcome = self.limiter.check(&key, 1);
        if self.release && outcome.step.allowed {
            Limiter::refund(&*self.limiter, &key, 1, &outcome);
        }
        outcome.step.allowed
    }
}

pub(crate) struct OursRuleSet {
    rules: RuleSet,
    rule: usize,
}

impl Subject for OursRuleSet {
    #[inline]
    fn check(&self, key: u64) -> bool {
        let demand = [Demand::new(self.rule, Key::from(key), 1)];
        match self.rules.check(&demand) {
            Answer::Ready(checked) => checked.decision().is_allowed(),
            Answer::Pending(_) => unreachable!("the memory backend decides at once"),
        }
    }
}

/// A concurrency rule with an adaptive limit, through `RuleSet`: a
/// request takes its slot and, with `release`, gives it back as it ends
/// (a latency sample for the adaptive limit). The limit is pinned at `n`
/// (`min` = `initial` = `n`), so that every scenario decides as the
/// concurrency meter's do while the rule set's shedding path runs in full.
pub(crate) struct OursShedding {
    rules: RuleSet,
    rule: usize,
    release: bool,
}

impl Subject for OursShedding {
    #[inline]
    fn check(&self, key: u64) -> bool {
        let demand = [Demand::new(self.rule, Key::from(key), 1)];
        let Answer::Ready(checked) = self.rules.check(&demand) else {
            unreachable!("the memory backend decides at once")
        };
        let (decision, held) = checked.into_parts();
        if !self.release {
            // The slot stays taken (the denied scenario's one unit).
            std::mem::forget(held);
        }
        decision.is_allowed()
    }
}

pub(crate) struct Governor(DefaultKeyedRateLimiter<u64>);

impl Subject for Governor {
    #[inline]
    fn check(&self, key: u64) -> bool {
        self.0.check_key(&key).is_ok()
    }
}

/// `throttle-kit`'s keyed in-memory limiter (GCRA on a `DashMap` keyed by
/// `String`): its keys are strings, so each key's text is rendered once at
/// setup, as a server holds the key's text from the request already. Its
/// check is an `async fn` that never waits on the in-memory backend; it is
/// polled once with a no-op waker, which is what `.await` costs there.
pub(crate) struct ThrottleKit {
    limiter: throttle_kit::RateLimiter<throttle_kit::InMemoryBackend>,
    names: Vec<String>,
}

impl ThrottleKit {
    fn new(quota: throttle_kit::Quota, keys: u64) -> Self {
        Self {
            limiter: throttle_kit::RateLimiter::new(quota, throttle_kit::InMemoryBackend::new()),
            names: (0..keys.max(1)).map(|k| k.to_string()).collect(),
        }
    }
}

impl Subject for ThrottleKit {
    #[inline]
    fn check(&self, key: u64) -> bool {
        let check = pin!(self.limiter.check(&self.names[key as usize]));
        match check.poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(result) => result.allowed,
            Poll::Pending => unreachable!("the in-memory backend decides at once"),
        }
    }
}

/// The four subjects, all with the same quota.
pub(crate) struct Subjects {
    pub(crate) ours: Ours,
    pub(crate) ruleset: OursRuleSet,
    pub(crate) governor: Governor,
    pub(crate) throttle_kit: ThrottleKit,
    pub(crate) concurrency: OursConcurrency,
    pub(crate) concurrency_ended: OursConcurrency,
    pub(crate) shedding_ended: OursShedding,
}

impl Subjects {
    pub(crate) fn new(
        quota: Quota,
        governor_quota: governor::Quota,
        kit_quota: throttle_kit::Quota,
        keys: u64,
    ) -> Self {
        let backend = MemoryBackend::default().max_keys(MAX_KEYS);
        let ours = Ours(
            backend
                .limiter_for(Gcra::token_bucket(quota).expect("valid quota"))
                .expect("valid backend"),
        );
        let mut rules = RuleSet::new();
        let rule = rules
            .bind(Rule::new("bench", quota).token_bucket(), &backend)
            .expect("valid rule");
        // Allowed scenarios: room for every request (and, ended, each
        // gives its slot back); denied: the one slot stays taken.
        let concurrency = |release: bool| OursConcurrency {
            limiter: backend
                .limiter_for(
                    Concurrency::new(Quota::in_flight(quota.limit())).expect("valid quota"),
                )
                .expect("valid backend"),
            release: release && quota.limit() > 1,
        };
        let (concurrency, concurrency_ended) = (concurrency(false), concurrency(true));
        let n = quota.limit();
        let mut shedding = RuleSet::new();
        let adaptive = Rule::concurrency(
            "bench",
            InFlightLimit {
                adaptive: Some(Vegas::new().initial(n).min(n)),
                ..InFlightLimit::new(n)
            },
        );
        let shedding_rule = shedding.bind(adaptive, &backend).expect("valid rule");
        Self {
            shedding_ended: OursShedding {
                rules: shedding,
                rule: shedding_rule,
                release: n > 1,
            },
            concurrency,
            concurrency_ended,
            ours,
            ruleset: OursRuleSet { rules, rule },
            governor: Governor(RateLimiter::keyed(governor_quota)),
            throttle_kit: ThrottleKit::new(kit_quota, keys),
        }
    }

    pub(crate) fn each(&self) -> [(&'static str, &dyn Subject); 7] {
        [
            ("throttle", &self.ours),
            ("throttle_ruleset", &self.ruleset),
            ("governor", &self.governor),
            ("throttle_kit", &self.throttle_kit),
            ("throttle_concurrency", &self.concurrency),
            ("throttle_concurrency_ended", &self.concurrency_ended),
            ("throttle_shedding_ended", &self.shedding_ended),
        ]
    }
}

/// splitmix64: a small, fixed pseudo-random sequence. (The test support's
/// `Rng` is the same generator; core cannot take it as a dev-dependency
/// without building itself twice, since the test support depends on core.)
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `ORDER_LEN` key numbers below `keys`: shuffled rounds of every key, so
/// every key is visited and the order defeats the prefetcher.
pub(crate) fn visiting_order(keys: u64) -> Vec<u64> {
    let mut rng = 0x5EED_u64 ^ keys;
    let mut order = Vec::with_capacity(ORDER_LEN);
    let mut round: Vec<u64> = (0..keys).collect();
    while order.len() < ORDER_LEN {
        for i in (1..round.len()).rev() {
            let j = (splitmix(&mut rng) % (i as u64 + 1)) as usize;
            round.swap(i, j);
        }
        let take = round.len().min(ORDER_LEN - order.len());
        order.extend_from_slice(&round[..take]);
    }
    order
}

/// `n` as a governor quota figure.
pub(crate) fn nonzero(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("non-zero")
}

/// The subjects for a scenario of `keys` keys, allowed or `denied`, with
/// every key already tracked (by the subject named `only`, or by all), and
/// the order to visit them in.
pub(crate) fn scenario(keys: u64, denied: bool, only: Option<&str>) -> (Subjects, Vec<u64>) {
    let subjects = if denied {
        Subjects::new(
            Quota::per_hour(1),
            governor::Quota::per_hour(nonzero(1)),
            throttle_kit::Quota::per_hour(1),
            keys,
        )
    } else {
        Subjects::new(
            Quota::per_second(1_000_000_000),
            governor::Quota::per_second(nonzero(1_000_000_000)),
            throttle_kit::Quota::per_second(1_000_000_000),
            keys,
        )
    };
    for (name, subject) in subjects.each() {
        if only.is_some_and(|only| only != name) {
            continue;
        }
        for key in 0..keys {
            assert!(subject.check(key), "{name}: setup check was denied");
        }
        if denied {
            assert!(!subject.check(0), "{name}: the second check must be denied");
        }
        if name == "throttle" {
            let stats = subjects.ours.0.stats();
            assert_eq!(stats.tracked_keys as u64, keys, "{stats:?}");
            assert_eq!(stats.evictions, 0, "{stats:?}");
        }
    }
    (subjects, visiting_order(keys))
}
