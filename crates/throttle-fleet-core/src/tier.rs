//! Tiers: a rule whose quota depends on the key (standard and premium
//! tenants of one `tenant` rule).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::{ConfigError, Key, Quota};

/// The most distinct quotas a rule's tiers may use (the rule's own quota,
/// the default, not counted). Each distinct quota is compiled once, when the
/// rule is bound, into a limiter of its own.
pub const MAX_TIER_QUOTAS: usize = 64;

type SelectFn = dyn Fn(&Key) -> Quota + Send + Sync;

/// How a rule picks the quota of a key: a map from keys to quotas, or a
/// function of the key. Keys the map does not hold, and keys for which the
/// function returns the rule's own quota, get the rule's quota (the
/// default). Built by [`Rule::with_tiers`](crate::Rule::with_tiers) and
/// [`Rule::with_tiers_by`](crate::Rule::with_tiers_by).
///
/// The distinct quotas are known when the rule is bound, so each gets its
/// own compiled algorithm (a GCRA's emission interval, a window's length)
/// and its own counters; looking a key's tier up is one hash-map probe (or
/// one call of the function) per request, and rules without tiers pay
/// nothing.
#[derive(Clone)]
pub struct Tiers {
    /// The distinct quotas, ordered by period, limit and burst.
    quotas: Arc<[Quota]>,
    select: Select,
}

#[derive(Clone)]
enum Select {
    /// Key -> index in `quotas`.
    Map(Arc<HashMap<Key, u32, foldhash::fast::RandomState>>),
    /// Key -> quota; an unlisted quota means the default.
    Fn(Arc<SelectFn>),
}

impl Tiers {
    pub(crate) fn from_map<K: Into<Key>>(entries: impl IntoIterator<Item = (K, Quota)>) -> Self {
        let entries: Vec<(Key, Quota)> = entries.into_iter().map(|(k, q)| (k.into(), q)).collect();
        let quotas = distinct(entries.iter().map(|(_, q)| *q));
        let mut map = HashMap::with_capacity_and_hasher(
            entries.len(),
            foldhash::fast::RandomState::default(),
        );
        for (key, quota) in entries {
            let at = quotas.iter().position(|q| *q == quota).unwrap_or(0);
            map.insert(key, at as u32);
        }
        Self {
            quotas: quotas.into(),
            select: Select::Map(Arc::new(map)),
        }
    }

    pub(crate) fn from_fn(
        quotas: impl IntoIterator<Item = Quota>,
        select: impl Fn(&Key) -> Quota + Send + Sync + 'static,
    ) -> Self {
        Self {
            quotas: distinct(quotas).into(),
            select: Select::Fn(Arc::new(select)),
        }
    }

    /// Checks the count of distinct quotas; the quotas themselves are
    /// checked by the rule, like its own.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.quotas.len() > MAX_TIER_QUOTAS {
            return Err(ConfigError::new(
                "tiers",
                format!(
                    "may use at most {MAX_TIER_QUOTAS} distinct quotas (got {})",
                    self.quotas.len()
                ),
            ));
        }
        Ok(())
    }

    /// The distinct tier quotas, ordered by period, limit and burst (the
    /// rule's own quota may be among them; keys of that tier share the
    /// default's counters).
    pub fn quotas(&self) -> &[Quota] {
        &self.quotas
    }

    /// The index in [`quotas`](Self::quotas) of `key`'s tier, or `None`
    /// for the default (also when a function returns a quota it did not
    /// declare).
    #[inline]
    pub fn tier_of(&self, key: &Key) -> Option<usize> {
        match &self.select {
            Select::Map(m) => m.get(key).map(|&i| i as usize),
            Select::Fn(f) => {
                let q = f(key);
                self.quotas.iter().position(|t| *t == q)
            }
        }
    }
}

/// The distinct quotas in a fixed order (by period, limit, burst), so that
/// the same tiers compare equal however they were listed (a map from a
/// configuration file iterates in any order).
fn distinct(quotas: impl IntoIterator<Item = Quota>) -> Vec<Quota> {
    let mut out: Vec<Quota> = Vec::new();
    for q in quotas {
        if !out.contains(&q) {
            out.push(q);
        }
    }
    out.sort_by_key(|q| (q.period(), q.limit(), q.explicit_burst()));
    out
}

impl PartialEq for Tiers {
    fn eq(&self, other: &Self) -> bool {
        self.quotas == other.quotas
            && match (&self.select, &other.select) {
                (Select::Map(a), Select::Map(b)) => a == b,
                (Select::Fn(a), Select::Fn(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl Eq for Tiers {}

impl fmt::Debug for Tiers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the keys: they may be API keys.
        let mut d = f.debug_struct("Tiers");
        d.field("quotas", &self.quotas);
        match &self.select {
            Select::Map(m) => d.field("keys", &m.len()),
            Select::Fn(_) => d.field("select", &"fn"),
        };
        d.finish()
    }
}
