//! What the layer reports through the [`metrics`](https://docs.rs/metrics)
//! facade: every rule's decisions, near-limit warnings and configured limit.
//!
//! The layer records; it never installs an exporter. A service that wants
//! Prometheus text installs one (e.g. `metrics-exporter-prometheus`) before
//! it builds the layer, and every decision shows up there:
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `throttle_decisions_total` | counter | `rule`, `outcome` | one per rule asked per request; `outcome` is one of [`DecisionLabel`]'s labels |
//! | `throttle_near_limit_total` | counter | `rule` | allowed decisions that left 20 % of the limit or less (80 % used, as envoy's ratelimit counts `near_limit`) |
//! | `throttle_limit` | gauge | `rule` | the rule's capacity (the `X-RateLimit-Limit` it reports) |
//! | `throttle_blocks_started_total` | counter | `rule` | blocks this process started (an operator's or a penalty's), set by [`report_state`] |
//! | `throttle_blocked_keys` | gauge | `rule` | keys blocked now as this process knows them, set by [`report_state`] |
//! | `throttle_blocked_denials_total` | counter | `rule` | requests denied because their key was blocked, set by [`report_state`] |
//! | `throttle_adaptive_limit` | gauge | `rule` | an adaptive concurrency rule's limit in this process now, set by [`report_state`] |
//!
//! Labels are rule names (the policy's dimensions) and outcomes, never a
//! key: client IPs and API keys stay out of metrics, whose label sets must be
//! bounded.
//!
//! Handles are registered once per rule when the layer is built, with the
//! recorder installed at that moment, so a request costs an atomic
//! increment, not a registry lookup. Install the recorder first; a layer
//! built before it reports to no one.
//!
//! With the crate's `metrics` feature off (it is on by default) nothing is
//! recorded and the `metrics` crate is not a dependency; the names below
//! stay, for code that reads them.

use throttle_fleet_core::Rule;
use throttle_fleet_core::backend::{Outcome, Unavailable};
use throttle_fleet_core::rule_set::Observer;

/// Counter of decisions, labelled `rule` and `outcome`.
pub const DECISIONS: &str = "throttle_decisions_total";
/// Counter of allowed decisions that left at most 20 % of the limit, labelled `rule`.
pub const NEAR_LIMIT: &str = "throttle_near_limit_total";
/// Gauge of each rule's configured capacity, labelled `rule`.
pub const LIMIT: &str = "throttle_limit";
/// Counter of blocks started by this process, labelled `rule`.
pub const BLOCKS_STARTED: &str = "throttle_blocks_started_total";
/// Gauge of the keys blocked now, labelled `rule`.
pub const BLOCKED_KEYS: &str = "throttle_blocked_keys";
/// Counter of requests denied because their key was blocked, labelled `rule`.
pub const BLOCKED_DENIALS: &str = "throttle_blocked_denials_total";
/// Gauge of an adaptive concurrency rule's limit now, labelled `rule`.
pub const ADAPTIVE_LIMIT: &str = "throttle_adaptive_limit";

/// Sets the metrics no request records, in the recorder installed now:
/// the block metrics from every rule's
/// [`block_stats`](throttle_fleet_core::rule_set::Operator::block_stats), and each
/// adaptive rule's [limit](throttle_fleet_core::rule_set::RuleSet::adaptive_limit).
/// Call it when the metrics are scraped (or periodically), with the rules
/// as they are then ([`ThrottleLayer::rules`](crate::ThrottleLayer::rules)).
/// The block table and the adaptive limit count for themselves, so a
/// request pays nothing for these.
pub fn report_state(rules: &throttle_fleet_core::rule_set::RuleSet) {
    #[cfg(feature = "metrics")]
    for i in 0..rules.len() {
        let name = rules.rule(i).name().to_owned();
        if let Some(limit) = rules.adaptive_limit(i) {
            metrics::gauge!(ADAPTIVE_LIMIT, "rule" => name.clone()).set(limit as f64);
        }
        let stats = rules.operate().block_stats(i);
        metrics::counter!(BLOCKS_STARTED, "rule" => name.clone()).absolute(stats.started);
        metrics::gauge!(BLOCKED_KEYS, "rule" => name.clone()).set(stats.blocked_now as f64);
        metrics::counter!(BLOCKED_DENIALS, "rule" => name).absolute(stats.denied);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = rules;
}

/// The `outcome` label of [`DECISIONS`]: what one rule made of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DecisionLabel {
    /// The rule's backend allowed the request (`allowed`).
    Allowed,
    /// The rule denied the request (`denied`), by its backend or by its
    /// local fallback limit while the backend was unreachable.
    Denied,
    /// A shadow rule would have denied the request and let it through
    /// (`shadow_denied`).
    ShadowDenied,
    /// The backend could not be asked and the rule's failure policy let
    /// the request through (`degraded`): fail open, or within the local
    /// fallback limit.
    Degraded,
    /// The backend could not be asked and the rule fails closed
    /// (`unavailable`): the request was refused.
    Unavailable,
    /// The rule refused the request for capacity (`shed`): its reserve
    /// was kept for higher classes, or its adaptive limit was below its
    /// own ([`Decision::is_shed`](throttle_fleet_core::decision::Decision::is_shed)).
    Shed,
}

impl DecisionLabel {
    /// Every outcome, in label order.
    pub const ALL: [Self; 6] = [
        Self::Allowed,
        Self::Denied,
        Self::ShadowDenied,
        Self::Degraded,
        Self::Unavailable,
        Self::Shed,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Denied => "denied",
            Self::ShadowDenied => "shadow_denied",
            Self::Degraded => "degraded",
            Self::Unavailable => "unavailable",
            Self::Shed => "shed",
        }
    }
}

/// Whether a rule's denials are enforced or only reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Enforcement {
    /// Denials deny: counted as [`DecisionLabel::Denied`].
    #[default]
    Enforced,
    /// A shadow rule: it is decided and counted, and its denials are
    /// counted as [`DecisionLabel::ShadowDenied`].
    Shadow,
}

/// Gives the metrics above their descriptions and units in the recorder
/// installed now. The layer calls it when it is built; call it yourself
/// after installing an exporter if you want the descriptions before the
/// first layer exists.
pub fn describe() {
    #[cfg(feature = "metrics")]
    {
        metrics::describe_counter!(
            DECISIONS,
            metrics::Unit::Count,
            "Rate limit decisions, one per rule asked per request, by rule and outcome"
        );
        metrics::describe_counter!(
            NEAR_LIMIT,
            metrics::Unit::Count,
            "Allowed decisions that left 20% of the rule's limit or less"
        );
        metrics::describe_gauge!(
            LIMIT,
            metrics::Unit::Count,
            "The rule's configured capacity"
        );
        metrics::describe_counter!(
            BLOCKS_STARTED,
            metrics::Unit::Count,
            "Blocks this process started, an operator's or a penalty's"
        );
        metrics::describe_gauge!(
            BLOCKED_KEYS,
            metrics::Unit::Count,
            "Keys blocked now, as this process knows them"
        );
        metrics::describe_counter!(
            BLOCKED_DENIALS,
            metrics::Unit::Count,
            "Requests denied because their key was blocked"
        );
    }
}

/// The observer that counts `rule`'s decisions under the names above
/// (its denials as `shadow_denied` when it is a shadow rule), registered
/// with the recorder installed now: for a server that checks a
/// [`RuleSet`](throttle_fleet_core::rule_set::RuleSet) without the layer (the Envoy
/// rate limit services) and counts the same way. `None` with the crate's
/// `metrics` feature off.
pub fn rule_observer(rule: &Rule) -> Option<std::sync::Arc<dyn Observer>> {
    let enforcement = if rule.is_shadow() {
        Enforcement::Shadow
    } else {
        Enforcement::Enforced
    };
    cfg!(feature = "metrics").then(|| {
        std::sync::Arc::new(RuleMetrics::new(rule, enforcement)) as std::sync::Arc<dyn Observer>
    })
}

/// The pre-registered handles of one rule.
#[derive(Debug)]
pub(crate) struct RuleMetrics {
    #[cfg(feature = "metrics")]
    inner: imp::Handles,
}

impl RuleMetrics {
    /// Registers `rule`'s handles with the recorder installed now and sets
    /// its limit gauge.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(rule: &Rule, enforcement: Enforcement) -> Self {
        Self {
            #[cfg(feature = "metrics")]
            inner: imp::Handles::new(rule, enforcement),
        }
    }

    /// Counts what `rule` decided.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn record(&self, outcome: &Result<Outcome, Unavailable>) {
        #[cfg(feature = "metrics")]
        self.inner.record(outcome);
    }
}

/// The rule set shows each rule's own answers to its [`RuleMetrics`]
/// ([`Binding::observe`](throttle_fleet_core::rule_set::Binding::observe)): counted
/// where the rule set gets them, so it sees each rule's outcome, not only
/// the combined decision, and the rule's limiter is not wrapped (the
/// memory backend's direct call still applies).
impl Observer for RuleMetrics {
    #[inline]
    fn observe(&self, result: &Result<Outcome, Unavailable>) {
        self.record(result);
    }
}

#[cfg(feature = "metrics")]
mod imp {
    use metrics::{Counter, counter, gauge};
    use throttle_fleet_core::Rule;
    use throttle_fleet_core::backend::{Outcome, Unavailable};

    use super::{DECISIONS, DecisionLabel, Enforcement, LIMIT, NEAR_LIMIT};

    #[derive(Debug)]
    pub(super) struct Handles {
        allowed: Counter,
        /// `denied`, or `shadow_denied` for a shadow rule.
        denied: Counter,
        degraded: Counter,
        unavailable: Counter,
        /// `shed`, or `shadow_denied` for a shadow rule.
        shed: Counter,
        near_limit: Counter,
        /// An allowed decision leaving this many units or fewer is near
        /// the limit (20 % of the capacity, rounded down).
        near_at: u64,
    }

    impl Handles {
        pub(super) fn new(rule: &Rule, enforcement: Enforcement) -> Self {
            let name = rule.name().to_owned();
            let decisions = |outcome: DecisionLabel| counter!(DECISIONS, "rule" => name.clone(), "outcome" => outcome.as_str());
            let capacity = rule.capacity();
            gauge!(LIMIT, "rule" => name.clone()).set(capacity as f64);
            Self {
                allowed: decisions(DecisionLabel::Allowed),
                denied: decisions(match enforcement {
                    Enforcement::Enforced => DecisionLabel::Denied,
                    Enforcement::Shadow => DecisionLabel::ShadowDenied,
                }),
                degraded: decisions(DecisionLabel::Degraded),
                unavailable: decisions(DecisionLabel::Unavailable),
                shed: decisions(match enforcement {
                    Enforcement::Enforced => DecisionLabel::Shed,
                    Enforcement::Shadow => DecisionLabel::ShadowDenied,
                }),
                near_limit: counter!(NEAR_LIMIT, "rule" => name.clone()),
                near_at: capacity / 5,
            }
        }

        #[inline]
        pub(super) fn record(&self, outcome: &Result<Outcome, Unavailable>) {
            match outcome {
                Ok(v) if v.step.allowed && v.degraded => self.degraded.increment(1),
                Ok(v) if v.step.allowed => {
                    self.allowed.increment(1);
                    if v.step.remaining <= self.near_at {
                        self.near_limit.increment(1);
                    }
                }
                Ok(v) if v.shed => self.shed.increment(1),
                Ok(_) => self.denied.increment(1),
                Err(_) => self.unavailable.increment(1),
            }
        }
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use throttle_fleet_core::algorithm::Step;
    use throttle_fleet_core::backend::Outcome;
    use throttle_fleet_core::{Quota, Rule};

    use super::{DECISIONS, Enforcement, RuleMetrics};

    fn outcome(allowed: bool) -> Outcome {
        let step = Step {
            allowed,
            remaining: 5,
            reset_us: 0,
            retry_after_us: 0,
            delay_us: 0,
        };
        Outcome::new(step, 0)
    }

    /// What one rule's meter counted, by outcome label.
    fn counted(enforcement: Enforcement) -> Vec<(String, u64)> {
        let recorder = DebuggingRecorder::new();
        let snapshots = recorder.snapshotter();
        let meter = metrics::with_local_recorder(&recorder, || {
            RuleMetrics::new(&Rule::new("r", Quota::per_minute(10)), enforcement)
        });
        meter.record(&Ok(outcome(true)));
        meter.record(&Ok(outcome(false)));
        meter.record(&Ok(outcome(false)));
        let mut out: Vec<(String, u64)> = snapshots
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(ck, ..)| ck.key().name() == DECISIONS)
            .filter_map(|(ck, _, _, v)| {
                let outcome = ck.key().labels().find(|l| l.key() == "outcome")?;
                let DebugValue::Counter(n) = v else {
                    return None;
                };
                (n > 0).then(|| (outcome.value().to_owned(), n))
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_shadow_rules_denials_count_as_shadow_denied() {
        let own = |s: &str, n| (s.to_owned(), n);
        assert_eq!(
            counted(Enforcement::Enforced),
            [own("allowed", 1), own("denied", 2)]
        );
        assert_eq!(
            counted(Enforcement::Shadow),
            [own("allowed", 1), own("shadow_denied", 2)]
        );
    }
}
