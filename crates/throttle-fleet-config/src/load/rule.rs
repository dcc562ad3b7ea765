//! The `[[rules]]`: quota, algorithm (a rate, or a concurrency rule's
//! slots in flight), failure policy, tiers and keys.

use std::ops::Range;
use std::time::Duration;

use throttle_fleet_core::limits::{MAX_SLOT_TTL, MIN_SLOT_TTL};
use throttle_fleet_core::{
    FailurePolicy, InFlightLimit, Quota, Rule, algorithm::Algorithm, operate::Penalty,
};
use toml::Spanned;

use super::Tables;
use super::{Loader, Result};
use crate::file;
use crate::limits::{MAX_DESCRIPTOR_ENTRIES, MAX_KEY_PARTS, MAX_TIER_KEYS};
use crate::model::{Descriptor, DescriptorEntry, KeySpec, RuleConfig};

/// The algorithms a rule may name: the five rates and the concurrency
/// rule.
fn algorithms() -> impl Iterator<Item = Algorithm> {
    Algorithm::ALL.into_iter().chain([Algorithm::Concurrency])
}

/// Why a rule with `algorithm` cannot be served to Envoy (a descriptor
/// rule), if it cannot: Envoy's rate limit services answer yes or no, at
/// once, and are never told when a request ends.
pub fn not_for_envoy(algorithm: Algorithm) -> Option<&'static str> {
    match algorithm {
        Algorithm::LeakyBucket => Some(
            "leaky_bucket delays requests, which Envoy's rate limit services cannot say (they answer yes or no): use token_bucket",
        ),
        Algorithm::Concurrency => Some(
            "a concurrency rule gives its slot back when a request ends, which Envoy's rate limit services are never told",
        ),
        _ => None,
    }
}

impl Loader<'_> {
    /// One rule; `at` is where the rule's table starts (for a missing
    /// field).
    pub(super) fn rule(
        &self,
        raw: &file::Rule,
        at: Range<usize>,
        tables: Tables,
    ) -> Result<RuleConfig> {
        let limit = self.int(
            "limit",
            &raw.limit,
            1,
            throttle_fleet_core::limits::MAX_LIMIT as i64,
        )? as u64;
        let algorithm = match raw.algorithm.as_ref() {
            None => Algorithm::default(),
            Some(a) => algorithms()
                .find(|x| x.name() == a.get_ref())
                .ok_or_else(|| {
                    let names: Vec<&str> = algorithms().map(|x| x.name()).collect();
                    self.err(
                        "algorithm",
                        a.span(),
                        format!(
                            "must be one of {} (got {:?})",
                            names.join(", "),
                            a.get_ref()
                        ),
                    )
                })?,
        };
        let mut quota = if algorithm.is_concurrency() {
            if let Some(p) = &raw.period_secs {
                return Err(self.err(
                    "period_secs",
                    p.span(),
                    "does not apply to a concurrency rule: it bounds requests in flight, not a rate over a period",
                ));
            }
            Quota::in_flight(limit)
        } else {
            let Some(p) = &raw.period_secs else {
                return Err(self.err(
                    "period_secs",
                    at,
                    format!(
                        "is missing: a {} rule needs one (only a concurrency rule has none)",
                        algorithm.name()
                    ),
                ));
            };
            let period = self.int(
                "period_secs",
                p,
                1,
                throttle_fleet_core::limits::MAX_PERIOD.as_secs() as i64,
            )? as u64;
            Quota::new(limit, Duration::from_secs(period))
        };
        if let Some(b) = &raw.burst {
            if !algorithm.uses_burst() {
                return Err(self.err(
                    "burst",
                    b.span(),
                    format!(
                        "applies only to token_bucket and leaky_bucket, not {}",
                        algorithm.name()
                    ),
                ));
            }
            quota = quota.with_burst(self.int(
                "burst",
                b,
                1,
                throttle_fleet_core::limits::MAX_LIMIT as i64,
            )? as u64);
        }
        let mut rule = if algorithm.is_concurrency() {
            let mut limit = InFlightLimit::new(quota.limit());
            if let Some(ttl) = &raw.slot_ttl_secs {
                limit.slot_ttl = self.slot_ttl(ttl)?;
            }
            self.shedding(raw, &mut limit)?;
            Rule::concurrency(raw.name.get_ref(), limit)
        } else {
            let concurrency_only = [
                (
                    "slot_ttl_secs",
                    raw.slot_ttl_secs.as_ref().map(Spanned::span),
                ),
                ("reserve", raw.reserve.as_ref().map(Spanned::span)),
                ("adaptive", raw.adaptive.as_ref().map(Spanned::span)),
            ];
            if let Some((field, Some(span))) =
                concurrency_only.into_iter().find(|(_, s)| s.is_some())
            {
                return Err(self.err(
                    field,
                    span,
                    format!(
                        "applies only to algorithm = \"concurrency\", not {}",
                        algorithm.name()
                    ),
                ));
            }
            Rule::new(raw.name.get_ref(), quota).with_algorithm(algorithm)
        };
        if let Some(c) = &raw.cost {
            rule = rule.with_cost(self.int("cost", c, 1, i64::from(u32::MAX))? as u32);
        }
        if let Some(f) = &raw.failure {
            rule = rule.with_failure_policy(match f.get_ref().as_str() {
                "open" => FailurePolicy::FailOpen,
                "closed" => FailurePolicy::FailClosed,
                "local" => FailurePolicy::LocalFallback,
                other => {
                    return Err(self.err(
                        "failure",
                        f.span(),
                        format!("must be open, closed or local (got {other:?})"),
                    ));
                }
            });
        }
        if let Some(p) = &raw.penalty {
            if raw.shadow {
                return Err(self.err(
                    "penalty",
                    p.span(),
                    "does not apply to a shadow rule: it never denies, so nothing would ever be blocked",
                ));
            }
            rule = rule.with_penalty(self.penalty(p.get_ref(), p.span())?);
        }
        rule.validate().map_err(|e| {
            let penalty = raw.penalty.as_ref();
            let in_penalty = |pick: fn(&file::Penalty) -> Option<Range<usize>>| {
                penalty.map_or(raw.name.span(), |p| pick(p.get_ref()).unwrap_or(p.span()))
            };
            let (field, span) = match e.field() {
                "penalty" => ("penalty", in_penalty(|_| None)),
                "penalty.after" => (
                    "penalty.after",
                    in_penalty(|p| p.after.as_ref().map(Spanned::span)),
                ),
                "penalty.within_secs" => (
                    "penalty.within_secs",
                    in_penalty(|p| p.within_secs.as_ref().map(Spanned::span)),
                ),
                "penalty.block_secs" => (
                    "penalty.block_secs",
                    in_penalty(|p| p.block_secs.as_ref().map(Spanned::span)),
                ),
                "penalty.max_block_secs" => (
                    "penalty.max_block_secs",
                    in_penalty(|p| p.max_block_secs.as_ref().map(Spanned::span)),
                ),
                "penalty.memory_secs" => (
                    "penalty.memory_secs",
                    in_penalty(|p| p.memory_secs.as_ref().map(Spanned::span)),
                ),
                "name" => ("name", raw.name.span()),
                "cost" => (
                    "cost",
                    raw.cost.as_ref().map_or(raw.name.span(), Spanned::span),
                ),
                "quota.limit" => ("limit", raw.limit.span()),
                "quota.period" => (
                    "period_secs",
                    raw.period_secs
                        .as_ref()
                        .map_or(raw.limit.span(), Spanned::span),
                ),
                "slot_ttl" => (
                    "slot_ttl_secs",
                    raw.slot_ttl_secs
                        .as_ref()
                        .map_or(raw.name.span(), Spanned::span),
                ),
                "quota.burst" => (
                    "burst",
                    raw.burst.as_ref().map_or(raw.limit.span(), Spanned::span),
                ),
                "reserve" => (
                    "reserve",
                    raw.reserve.as_ref().map_or(raw.name.span(), Spanned::span),
                ),
                "tiers" => (
                    "tiers",
                    raw.tiers.as_ref().map_or(raw.name.span(), Spanned::span),
                ),
                adaptive if adaptive.starts_with("adaptive") => (
                    "adaptive",
                    raw.adaptive.as_ref().map_or(raw.name.span(), Spanned::span),
                ),
                _ => ("name", raw.name.span()),
            };
            self.err(field, span, e.reason().to_owned())
        })?;
        let key = self.key(raw, tables)?;
        let descriptor = match &key {
            KeySpec::Descriptor(d) => Some(d),
            _ => None,
        };
        if descriptor.is_some()
            && let Some(why) = not_for_envoy(algorithm)
        {
            let span = raw
                .algorithm
                .as_ref()
                .map_or(raw.name.span(), Spanned::span);
            return Err(self.err("algorithm", span, why));
        }
        let routes = match &raw.routes {
            None => None,
            Some(list) if descriptor.is_some() => {
                return Err(self.err(
                    "routes",
                    list.span(),
                    "does not apply to a rule with a descriptor: Envoy chooses its descriptors per route",
                ));
            }
            Some(list) => {
                if list.get_ref().is_empty() {
                    return Err(self.err(
                        "routes",
                        list.span(),
                        "needs at least one route template",
                    ));
                }
                let mut routes = Vec::with_capacity(list.get_ref().len());
                for r in list.get_ref() {
                    if !r.get_ref().starts_with('/') {
                        return Err(self.err(
                            "routes",
                            r.span(),
                            format!(
                                "{:?} is not a route template: it must start with '/'",
                                r.get_ref()
                            ),
                        ));
                    }
                    routes.push(r.get_ref().clone());
                }
                Some(routes)
            }
        };
        let mut tiers = Vec::new();
        if let Some(map) = &raw.tiers {
            if map.get_ref().len() > MAX_TIER_KEYS {
                return Err(self.err("tiers", map.span(), format!("at most {MAX_TIER_KEYS} keys")));
            }
            for (key, limit) in map.get_ref() {
                if key.is_empty() {
                    return Err(self.err("tiers", map.span(), "a tier's key must not be empty"));
                }
                if let Some(d) = descriptor
                    && d.tier_key(key).is_none()
                {
                    return Err(self.err(
                        "tiers",
                        map.span(),
                        format!(
                            "{key:?} is not a key of this descriptor: write its {} variable value(s), joined by '|'",
                            d.variables()
                        ),
                    ));
                }
                let limit = self.int(
                    "tiers",
                    limit,
                    1,
                    throttle_fleet_core::limits::MAX_LIMIT as i64,
                )? as u64;
                // A concurrency rule's tier is its own number of slots.
                let mut q = if algorithm.is_concurrency() {
                    Quota::in_flight(limit)
                } else {
                    Quota::new(limit, quota.period())
                };
                if let Some(b) = quota.explicit_burst() {
                    // The burst scales with the tier's limit.
                    q = q.with_burst(
                        (u128::from(b) * u128::from(limit) / u128::from(quota.limit())).max(1)
                            as u64,
                    );
                }
                tiers.push((key.clone(), q));
            }
        }
        let class = self.class(raw, &rule, tables)?;
        Ok(RuleConfig {
            rule,
            key,
            routes,
            tiers,
            shadow: raw.shadow,
            class,
        })
    }

    /// A slot lifetime in seconds, fractions allowed, as whole
    /// milliseconds within the core's bounds.
    fn slot_ttl(&self, value: &Spanned<f64>) -> Result<Duration> {
        let secs = *value.get_ref();
        let (min, max) = (MIN_SLOT_TTL.as_secs_f64(), MAX_SLOT_TTL.as_secs_f64());
        if !(min..=max).contains(&secs) {
            return Err(self.err(
                "slot_ttl_secs",
                value.span(),
                format!("must be from {min} to {max} seconds (got {secs})"),
            ));
        }
        let ms = (secs * 1000.0).round();
        if (secs * 1000.0 - ms).abs() > 1e-6 {
            return Err(self.err(
                "slot_ttl_secs",
                value.span(),
                format!("must be a whole number of milliseconds (got {secs} seconds)"),
            ));
        }
        Ok(Duration::from_millis(ms as u64))
    }

    /// A rule's `penalty` table; `at` is where it starts (for a missing
    /// field).
    fn penalty(&self, raw: &file::Penalty, at: Range<usize>) -> Result<Penalty> {
        let missing = |field: &str, what: &str| {
            self.err(
                field,
                at.clone(),
                format!("is missing: a penalty needs after, within_secs and block_secs ({what})"),
            )
        };
        let after = raw
            .after
            .as_ref()
            .ok_or_else(|| missing("penalty.after", "the denials that start a block"))?;
        let after = self.int("penalty.after", after, 1, i64::from(u32::MAX))? as u32;
        let within = raw.within_secs.as_ref().ok_or_else(|| {
            missing(
                "penalty.within_secs",
                "the window those denials are counted in",
            )
        })?;
        let within = self.seconds("penalty.within_secs", within)?;
        let block = raw
            .block_secs
            .as_ref()
            .ok_or_else(|| missing("penalty.block_secs", "the first block's length"))?;
        let block = self.seconds("penalty.block_secs", block)?;
        let mut penalty = Penalty::new(after, within, block);
        if let Some(max) = &raw.max_block_secs {
            penalty = penalty.with_max_block(self.seconds("penalty.max_block_secs", max)?);
        }
        if let Some(memory) = &raw.memory_secs {
            penalty = penalty.with_memory_window(self.seconds("penalty.memory_secs", memory)?);
        }
        Ok(penalty)
    }

    /// A duration in seconds, fractions allowed, as whole milliseconds (at
    /// least one; the core checks the upper bounds).
    pub(super) fn seconds(&self, field: &str, value: &Spanned<f64>) -> Result<Duration> {
        let secs = *value.get_ref();
        // 100 years: past any bound the core sets, and far from overflow.
        if !(0.001..=3.2e9).contains(&secs) {
            return Err(self.err(
                field,
                value.span(),
                format!("must be from 0.001 seconds to 30 days (got {secs})"),
            ));
        }
        let ms = (secs * 1000.0).round();
        if (secs * 1000.0 - ms).abs() > 1e-6 {
            return Err(self.err(
                field,
                value.span(),
                format!("must be a whole number of milliseconds (got {secs} seconds)"),
            ));
        }
        Ok(Duration::from_millis(ms as u64))
    }

    pub(super) fn key(&self, raw: &file::Rule, tables: Tables) -> Result<KeySpec> {
        let mut uses_ip = false;
        let key = if let Some(entries) = &raw.descriptor {
            self.descriptor(raw, entries)?
        } else {
            if let Some(domain) = &raw.domain {
                return Err(self.err(
                    "domain",
                    domain.span(),
                    "applies only with a descriptor (a rule served to Envoy)",
                ));
            }
            let Some(key) = &raw.key else {
                return Err(self.err(
                    "key",
                    raw.name.span(),
                    "is missing: a rule needs a key (or, served to Envoy, a domain and a descriptor)",
                ));
            };
            self.layer_key(raw, key, tables, &mut uses_ip)?
        };
        for (field, v) in [
            ("ipv4_prefix", &raw.ipv4_prefix),
            ("ipv6_prefix", &raw.ipv6_prefix),
        ] {
            if let Some(v) = v
                && !uses_ip
            {
                return Err(self.err(field, v.span(), "applies only to keys by ip"));
            }
        }
        Ok(key)
    }

    /// An Envoy descriptor: `domain` and the entries, `"name"` or
    /// `"name=value"`.
    fn descriptor(
        &self,
        raw: &file::Rule,
        entries: &Spanned<Vec<Spanned<String>>>,
    ) -> Result<KeySpec> {
        if let Some(key) = &raw.key {
            return Err(self.err(
                "key",
                key.span(),
                "does not apply to a rule with a descriptor: its key is the descriptor's values",
            ));
        }
        if let Some(parts) = &raw.parts {
            return Err(self.err("parts", parts.span(), "applies only to key = \"composite\""));
        }
        let Some(domain) = &raw.domain else {
            return Err(self.err(
                "domain",
                entries.span(),
                "is missing: a rule with a descriptor names its Envoy rate limit domain",
            ));
        };
        if domain.get_ref().is_empty() {
            return Err(self.err("domain", domain.span(), "must not be empty"));
        }
        let list = entries.get_ref();
        if !(1..=MAX_DESCRIPTOR_ENTRIES).contains(&list.len()) {
            return Err(self.err(
                "descriptor",
                entries.span(),
                format!(
                    "has 1 to {MAX_DESCRIPTOR_ENTRIES} entries (got {})",
                    list.len()
                ),
            ));
        }
        let mut parsed = Vec::with_capacity(list.len());
        for entry in list {
            let text = entry.get_ref();
            let (key, value) = match text.split_once('=') {
                Some((k, v)) => (k, Some(v.to_owned())),
                None => (text.as_str(), None),
            };
            if key.is_empty() {
                return Err(self.err(
                    "descriptor",
                    entry.span(),
                    format!(
                        "{text:?} has no entry name: write \"name\" (any value) or \"name=value\""
                    ),
                ));
            }
            parsed.push(DescriptorEntry {
                key: key.to_owned(),
                value,
            });
        }
        Ok(KeySpec::Descriptor(Descriptor {
            domain: domain.get_ref().clone(),
            entries: parsed,
        }))
    }

    /// A key read from the request by a server's layer.
    fn layer_key(
        &self,
        raw: &file::Rule,
        key: &Spanned<String>,
        tables: Tables,
        uses_ip: &mut bool,
    ) -> Result<KeySpec> {
        let key = match key.get_ref().as_str() {
            "composite" => {
                let Some(parts) = &raw.parts else {
                    return Err(self.err(
                        "parts",
                        key.span(),
                        "a composite key needs parts, e.g. [\"ip\", \"user-agent\"]",
                    ));
                };
                let list = parts.get_ref();
                if !(2..=MAX_KEY_PARTS).contains(&list.len()) {
                    return Err(self.err(
                        "parts",
                        parts.span(),
                        format!(
                            "a composite key has 2 to {MAX_KEY_PARTS} parts (got {})",
                            list.len()
                        ),
                    ));
                }
                let mut specs = Vec::with_capacity(list.len());
                for part in list {
                    if part.get_ref() == "composite" {
                        return Err(self.err(
                            "parts",
                            part.span(),
                            "a part cannot itself be composite",
                        ));
                    }
                    specs.push(self.simple_key("parts", part, raw, tables, uses_ip)?);
                }
                KeySpec::Composite(specs)
            }
            _ => {
                if let Some(parts) = &raw.parts {
                    return Err(self.err(
                        "parts",
                        parts.span(),
                        "applies only to key = \"composite\"",
                    ));
                }
                self.simple_key("key", key, raw, tables, uses_ip)?
            }
        };
        Ok(key)
    }

    pub(super) fn simple_key(
        &self,
        field: &str,
        value: &Spanned<String>,
        raw: &file::Rule,
        tables: Tables,
        uses_ip: &mut bool,
    ) -> Result<KeySpec> {
        let text = value.get_ref().as_str();
        let spec = if text == "ip" {
            *uses_ip = true;
            KeySpec::Ip {
                ipv4_prefix: raw
                    .ipv4_prefix
                    .as_ref()
                    .map(|v| self.int("ipv4_prefix", v, 1, 32))
                    .transpose()?
                    .unwrap_or(32) as u8,
                ipv6_prefix: raw
                    .ipv6_prefix
                    .as_ref()
                    .map(|v| self.int("ipv6_prefix", v, 1, 128))
                    .transpose()?
                    .unwrap_or(64) as u8,
            }
        } else if let Some(name) = text.strip_prefix("header:") {
            let ok = !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !ok {
                return Err(self.err(
                    field,
                    value.span(),
                    format!("{name:?} is not a header name"),
                ));
            }
            KeySpec::Header(name.to_ascii_lowercase())
        } else if let Some(claim) = text.strip_prefix("jwt:") {
            if claim.is_empty() {
                return Err(self.err(field, value.span(), "jwt: needs a claim name, e.g. jwt:sub"));
            }
            if !tables.jwt {
                return Err(self.err(
                    field,
                    value.span(),
                    "a jwt key needs a [jwt] table saying how tokens are verified",
                ));
            }
            KeySpec::Jwt(claim.to_owned())
        } else {
            match text {
                "route" => KeySpec::Route,
                "user-agent" => KeySpec::UserAgent,
                "global" => KeySpec::Global,
                "tls-fingerprint" if !tables.tls => {
                    return Err(self.err(
                        field,
                        value.span(),
                        "a tls-fingerprint key needs a [tls] table: fingerprints come from the TLS handshake, which a plain-HTTP gateway never sees",
                    ));
                }
                "tls-fingerprint" => KeySpec::TlsFingerprint,
                other => {
                    return Err(self.err(
                        field,
                        value.span(),
                        format!(
                            "must be ip, header:<name>, route, jwt:<claim>, user-agent, tls-fingerprint, global or composite (got {other:?})"
                        ),
                    ));
                }
            }
        };
        Ok(spec)
    }
}
