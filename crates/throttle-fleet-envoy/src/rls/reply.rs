//! What one `ShouldRateLimit` answers: each descriptor's status (its most
//! restrictive rule), the overall code, the IETF fields for the response,
//! and the shadow rules and unavailable rules in the dynamic metadata.

use std::collections::HashMap;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::{self as pb, ListValue, Struct, Value, value::Kind};
use throttle_fleet_core::backend::Outcome;
use throttle_fleet_core::fields::{names, ratelimit_item, retry_after_secs};
use throttle_fleet_core::{Quota, decision::Decision, decision::Demand};

use crate::rules::{Loaded, current_limit, policy_text};

/// What one rule said of one descriptor.
#[derive(Debug, Clone, Copy)]
pub(super) struct Asked {
    over: bool,
    rule: usize,
    quota: Quota,
    limit: u64,
    remaining: u64,
    cost: u64,
    reset: Duration,
    /// When denied: the shortest wait after which the cost fits.
    retry_after: Option<Duration>,
}

impl Asked {
    fn quota_of(loaded: &Loaded, demand: &Demand) -> (Quota, u64) {
        let rule = loaded.rules.rule(demand.rule);
        let quota = rule.quota_for(&demand.key);
        (quota, rule.capacity_of(quota))
    }

    pub(super) fn allowed(loaded: &Loaded, demand: &Demand, outcome: &Outcome) -> Self {
        let (quota, limit) = Self::quota_of(loaded, demand);
        Self {
            over: false,
            rule: demand.rule,
            quota,
            limit,
            remaining: outcome.step.remaining,
            cost: demand.cost,
            reset: Duration::from_micros(outcome.step.reset_us),
            retry_after: None,
        }
    }

    pub(super) fn denied(loaded: &Loaded, demand: &Demand, d: &Decision) -> Self {
        let rule = loaded.rules.rule(demand.rule);
        Self {
            over: true,
            rule: demand.rule,
            quota: d.quota(rule),
            limit: d.limit(rule),
            remaining: d.remaining(),
            cost: demand.cost,
            reset: d.reset(),
            retry_after: Some(d.retry_after()),
        }
    }

    /// A fail-closed rule whose backend could not be asked.
    pub(super) fn unavailable(loaded: &Loaded, demand: &Demand) -> Self {
        let (quota, limit) = Self::quota_of(loaded, demand);
        Self {
            over: true,
            rule: demand.rule,
            quota,
            limit,
            remaining: 0,
            cost: demand.cost,
            reset: Duration::ZERO,
            retry_after: None,
        }
    }

    /// Whether `self` says more than `other` about a descriptor: a denial
    /// before an allowance, then the fewest units left.
    fn stricter_than(&self, other: &Self) -> bool {
        (self.over, std::cmp::Reverse(self.remaining))
            > (other.over, std::cmp::Reverse(other.remaining))
    }

    fn status(&self, loaded: &Loaded) -> DescriptorStatus {
        let rule = loaded.rules.rule(self.rule);
        let current_limit = if self.quota == rule.quota() {
            loaded.facts[self.rule].current_limit.clone()
        } else {
            current_limit(rule.name(), self.quota)
        };
        DescriptorStatus {
            code: if self.over { Code::OverLimit } else { Code::Ok } as i32,
            current_limit,
            limit_remaining: u32::try_from(self.remaining).unwrap_or(u32::MAX),
            duration_until_reset: Some(duration(self.reset)),
            quota: None,
        }
    }
}

/// The reply being put together.
#[derive(Debug)]
pub(super) struct Reply {
    /// Each descriptor's most restrictive rule, if one matched and was
    /// asked.
    statuses: Vec<Option<Asked>>,
    shadow_denied: Vec<String>,
    unavailable: Option<String>,
}

impl Reply {
    pub(super) fn new(descriptors: usize) -> Self {
        Self {
            statuses: vec![None; descriptors],
            shadow_denied: Vec::new(),
            unavailable: None,
        }
    }

    /// What a rule said of the descriptor at `index`.
    pub(super) fn asked(&mut self, index: usize, asked: Asked) {
        let slot = &mut self.statuses[index];
        if slot.is_none_or(|s| asked.stricter_than(&s)) {
            *slot = Some(asked);
        }
    }

    /// A shadow rule would have denied.
    pub(super) fn shadow_denied(&mut self, rule: &str) {
        if !self.shadow_denied.iter().any(|r| r == rule) {
            self.shadow_denied.push(rule.to_owned());
        }
    }

    /// A fail-closed rule could not be checked.
    pub(super) fn unavailable(&mut self, rule: &str) {
        self.unavailable = Some(rule.to_owned());
    }

    /// What the allowed rules took was refunded (another denied): their
    /// figures are those before this request.
    pub(super) fn refunded(&mut self) {
        for asked in self.statuses.iter_mut().flatten() {
            if !asked.over {
                asked.remaining = asked.remaining.saturating_add(asked.cost).min(asked.limit);
            }
        }
    }

    pub(super) fn is_over_limit(&self) -> bool {
        self.statuses.iter().flatten().any(|a| a.over)
    }

    pub(super) fn response(&self, loaded: &Loaded) -> RateLimitResponse {
        let over = self.is_over_limit();
        let statuses = self
            .statuses
            .iter()
            .map(|s| match s {
                Some(asked) => asked.status(loaded),
                None => DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                },
            })
            .collect();
        let strictest = self
            .statuses
            .iter()
            .flatten()
            .copied()
            .reduce(|a, b| if b.stricter_than(&a) { b } else { a });
        RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add: strictest.map(|a| headers(loaded, &a)).unwrap_or_default(),
            dynamic_metadata: self.metadata(),
            ..Default::default()
        }
    }

    /// `shadow_denied` (the shadow rules that would have denied) and
    /// `unavailable` (the fail-closed rule that could not be checked), when
    /// there are any.
    fn metadata(&self) -> Option<Struct> {
        let mut fields = HashMap::new();
        if !self.shadow_denied.is_empty() {
            let values = self.shadow_denied.iter().map(|r| string(r)).collect();
            fields.insert(
                "shadow_denied".to_owned(),
                Value {
                    kind: Some(Kind::ListValue(ListValue { values })),
                },
            );
        }
        if let Some(rule) = &self.unavailable {
            fields.insert("unavailable".to_owned(), string(rule));
        }
        (!fields.is_empty()).then_some(Struct { fields })
    }
}

fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    }
}

/// The IETF fields of the most restrictive rule (`ratelimit-policy`,
/// `ratelimit`, the layer's values) and, when it denied, `retry-after`.
fn headers(loaded: &Loaded, a: &Asked) -> Vec<HeaderValue> {
    let rule = loaded.rules.rule(a.rule);
    let policy = if a.quota == rule.quota() {
        loaded.facts[a.rule].policy.clone()
    } else {
        policy_text(rule.name(), a.quota, a.limit)
    };
    let mut out = Vec::with_capacity(3);
    let field = ratelimit_item(rule.name(), a.remaining, retry_after_secs(a.reset));
    out.push(header(names::RATELIMIT_POLICY, policy));
    out.push(header(names::RATELIMIT, field));
    if let Some(wait) = a.retry_after {
        out.push(header(
            names::RETRY_AFTER,
            retry_after_secs(wait).to_string(),
        ));
    }
    out
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        ..Default::default()
    }
}

fn duration(d: Duration) -> pb::Duration {
    pb::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}
