//! Which rules an Envoy descriptor (or an RLQS bucket id) matches: the
//! file's `domain` and `descriptor`, looked up per domain.

use std::collections::HashMap;

use throttle_fleet_config::{Descriptor, KeySpec, RuleConfig};
use throttle_fleet_core::Key;

use throttle_fleet_config::limits::MAX_DESCRIPTOR_ENTRIES;

/// The rules of every domain, in file order.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    domains: HashMap<String, Vec<Pattern>>,
}

/// One rule's descriptor: the entries it matches, and its index in the
/// rule set.
#[derive(Debug)]
struct Pattern {
    rule: usize,
    descriptor: Descriptor,
}

/// A domain no rule names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UnknownDomain;

impl Catalog {
    /// The catalog of `rules` (their indices in the rule set are their
    /// positions); a rule without a descriptor is skipped (the caller
    /// refuses it first).
    pub(crate) fn new(rules: &[RuleConfig]) -> Self {
        let mut domains: HashMap<String, Vec<Pattern>> = HashMap::new();
        for (rule, config) in rules.iter().enumerate() {
            if let KeySpec::Descriptor(d) = &config.key {
                domains.entry(d.domain.clone()).or_default().push(Pattern {
                    rule,
                    descriptor: d.clone(),
                });
            }
        }
        Self { domains }
    }

    /// The key rule `rule` counts a descriptor of `entries` under, if they
    /// match its descriptor (what a request's descriptor would get).
    pub(crate) fn key_for<'e>(
        &self,
        rule: usize,
        entries: impl Iterator<Item = (&'e str, &'e str)>,
    ) -> Option<Key> {
        let p = self.domains.values().flatten().find(|p| p.rule == rule)?;
        key_if_matches(&p.descriptor, entries)
    }

    /// Whether any rule names `domain`.
    pub(crate) fn knows(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// Every rule of `domain` whose descriptor is `entries` (the same keys
    /// in the same order, fixed values equal), with the key the entries'
    /// values make, handed to `each` in file order.
    pub(crate) fn matches<'e>(
        &self,
        domain: &str,
        entries: impl Iterator<Item = (&'e str, &'e str)> + Clone,
        mut each: impl FnMut(usize, Key),
    ) -> Result<(), UnknownDomain> {
        let patterns = self.domains.get(domain).ok_or(UnknownDomain)?;
        for p in patterns {
            if let Some(key) = key_if_matches(&p.descriptor, entries.clone()) {
                each(p.rule, key);
            }
        }
        Ok(())
    }
}

impl Catalog {
    /// Every rule of `domain` whose descriptor has exactly the keys of
    /// `bucket` (an RLQS bucket id, a map: order does not count), fixed
    /// values equal, with the key its values make, handed to `each`.
    pub(crate) fn matches_bucket(
        &self,
        domain: &str,
        bucket: &HashMap<String, String>,
        mut each: impl FnMut(usize, Key),
    ) -> Result<(), UnknownDomain> {
        let patterns = self.domains.get(domain).ok_or(UnknownDomain)?;
        'rules: for p in patterns {
            if p.descriptor.entries.len() != bucket.len() {
                continue;
            }
            let mut values: [&str; MAX_DESCRIPTOR_ENTRIES] = [""; MAX_DESCRIPTOR_ENTRIES];
            let mut n = 0;
            for want in &p.descriptor.entries {
                let Some(value) = bucket.get(&want.key) else {
                    continue 'rules;
                };
                match &want.value {
                    Some(fixed) if fixed != value => continue 'rules,
                    Some(_) => {}
                    None => {
                        values[n] = value;
                        n += 1;
                    }
                }
            }
            each(p.rule, Descriptor::key_of(&values[..n]));
        }
        Ok(())
    }
}

/// The key of `entries` under `descriptor`, if they match it.
fn key_if_matches<'e>(
    descriptor: &Descriptor,
    mut entries: impl Iterator<Item = (&'e str, &'e str)>,
) -> Option<Key> {
    let mut values: [&str; MAX_DESCRIPTOR_ENTRIES] = [""; MAX_DESCRIPTOR_ENTRIES];
    let mut n = 0;
    for want in &descriptor.entries {
        let (key, value) = entries.next()?;
        if key != want.key {
            return None;
        }
        match &want.value {
            Some(fixed) if fixed != value => return None,
            Some(_) => {}
            None => {
                values[n] = value;
                n += 1;
            }
        }
    }
    if entries.next().is_some() {
        return None;
    }
    Some(Descriptor::key_of(&values[..n]))
}

#[cfg(test)]
mod tests;
