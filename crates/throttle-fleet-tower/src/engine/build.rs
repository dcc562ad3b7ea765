//! Binding a policy's rules to their backends.

use std::sync::Arc;

use throttle_fleet_core::rule_set::{Binding, Carried};
use throttle_fleet_core::{ConfigError, backend::Backend, rule_set::RuleSet};

use super::{BoundLimit, Engine};
use crate::metrics::{Enforcement, RuleMetrics, describe};
use crate::policy::Policy;
use crate::responder::Responder;

impl<R> Engine<R> {
    /// Binds every rule of `policy` (after `previous`, on a reload).
    pub(crate) fn build(
        policy: Policy,
        backend: Arc<dyn Backend>,
        mut responder: R,
        previous: Option<&RuleSet>,
    ) -> Result<(Self, Vec<(String, Carried)>), ConfigError>
    where
        R: Responder,
    {
        if policy.limits.is_empty() {
            return Err(ConfigError::new(
                "policy",
                "has no rules: add at least one with Policy::rule",
            ));
        }
        if cfg!(feature = "metrics") {
            describe();
        }
        let mut rules = RuleSet::new();
        let mut limits = Vec::with_capacity(policy.limits.len());
        let mut carried = Vec::with_capacity(policy.limits.len());
        let mut kinds = Vec::with_capacity(policy.limits.len());
        let shadow_header = policy.shadow_header;
        for limit in policy.limits {
            limit
                .extractor
                .validate()
                .map_err(|e| e.in_rule(limit.rule.name()))?;
            if limit.refund.is_some() && limit.rule.algorithm().is_concurrency() {
                return Err(ConfigError::new(
                    "refund_when",
                    "does not apply to a concurrency rule: its slots always come back when the response ends",
                )
                .in_rule(limit.rule.name()));
            }
            let static_cost = u64::from(limit.rule.cost());
            kinds.push(limit.extractor.kind());
            let name = limit.rule.name().to_owned();
            let own = limit.backend.as_ref().unwrap_or(&backend);
            let enforcement = if limit.rule.is_shadow() {
                Enforcement::Shadow
            } else {
                Enforcement::Enforced
            };
            // Made before binding (the rule moves into the set) and afresh
            // on every build, so a reload's new capacity reaches the gauge.
            let metrics =
                cfg!(feature = "metrics").then(|| RuleMetrics::new(&limit.rule, enforcement));
            let mut binding = Binding::from(limit.rule);
            // Each rule's decisions are counted as the rule set gets them.
            if let Some(metrics) = metrics {
                binding = binding.observe(Arc::new(metrics));
            }
            // A response-aware limit settles its cost from the status.
            if let Some(refund) = limit.refund {
                binding = binding.settle_by(refund);
            }
            let (index, how) = match previous {
                Some(previous) => rules.bind_after(binding, &**own, previous)?,
                None => (rules.bind(binding, &**own)?, Carried::Fresh),
            };
            carried.push((name, how));
            limits.push(BoundLimit {
                index,
                extractor: limit.extractor,
                on_missing: limit.on_missing,
                cost: limit.cost,
                class: limit.class,
                static_cost,
            });
            // Demands name their rule by index, in policy order.
            debug_assert_eq!(index, limits.len() - 1);
        }
        let bound: Vec<_> = (0..rules.len())
            .map(|i| (&**rules.rule(i), &*kinds[i]))
            .collect();
        responder.bind(&bound);
        Ok((
            Self {
                rules,
                limits: limits.into(),
                responder,
                shadow_header,
            },
            carried,
        ))
    }
}
