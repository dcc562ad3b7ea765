//! The file's descriptor rules bound to a backend, as both services read
//! them: swapped whole on a reload, counts carried over where a rule's
//! name and algorithm stay.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use throttle_fleet_config::reload::ReloadTarget;
use throttle_fleet_config::{ConfigFileError, GatewayConfig, KeySpec, RuleConfig};
use throttle_fleet_core::rule_set::{Binding, Carried};
use throttle_fleet_core::{Key, Quota, Rule, backend::Backend, rule_set::RuleSet};
use throttle_fleet_tower::Reloaded;

use crate::catalog::Catalog;

/// The rules both services answer from, reloadable
/// ([`ReloadTarget`]): built from a [`GatewayConfig`] whose rules all have
/// a `domain` and a `descriptor`.
///
/// ```
/// use throttle_fleet_config::GatewayConfig;
/// use throttle_fleet_core::memory::MemoryBackend;
/// use throttle_fleet_envoy::EnvoyRules;
///
/// let config = GatewayConfig::parse("rls.toml", r#"
///     [[rules]]
///     name = "per-user"
///     domain = "api"
///     descriptor = ["user_id"]
///     limit = 10
///     period_secs = 60
/// "#, None)?;
/// let rules = EnvoyRules::new(&config, "rls.toml", MemoryBackend::default())?;
/// assert_eq!(rules.rule_names(), vec!["per-user"]);
/// # Ok::<(), throttle_fleet_config::ConfigFileError>(())
/// ```
#[derive(Clone)]
pub struct EnvoyRules {
    loaded: Arc<ArcSwap<Loaded>>,
    backend: Arc<dyn Backend>,
}

impl std::fmt::Debug for EnvoyRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvoyRules")
            .field("rules", &self.rule_names())
            .finish_non_exhaustive()
    }
}

/// One version of the rules.
pub(crate) struct Loaded {
    pub(crate) rules: RuleSet,
    pub(crate) catalog: Catalog,
    /// What answers say of each rule, by index.
    pub(crate) facts: Vec<Facts>,
}

/// What answers say of one rule, worked out once per load.
pub(crate) struct Facts {
    /// `current_limit`, when the period is one of the protocol's units.
    pub(crate) current_limit: Option<RateLimit>,
    /// `RateLimit-Policy`'s value for the rule's own quota.
    pub(crate) policy: String,
}

impl Facts {
    fn of(rule: &Rule) -> Self {
        let quota = rule.quota();
        Self {
            current_limit: current_limit(rule.name(), quota),
            policy: policy_text(rule.name(), quota, rule.capacity()),
        }
    }
}

/// `RateLimit-Policy`'s value for a rule with `quota` (its capacity
/// `limit`), as the layer writes it.
pub(crate) fn policy_text(name: &str, quota: Quota, limit: u64) -> String {
    throttle_fleet_core::fields::policy_item(name, limit, quota.period())
}

/// `current_limit` for `quota`: its limit per second, minute, hour, day or
/// week; `None` for any other period (100 per 10 s has no exact unit, and
/// a rounded one would tell Envoy a limit the rule does not apply).
pub(crate) fn current_limit(name: &str, quota: Quota) -> Option<RateLimit> {
    let unit = match quota.period() {
        p if p == Duration::from_secs(1) => Unit::Second,
        p if p == Duration::from_secs(60) => Unit::Minute,
        p if p == Duration::from_secs(3600) => Unit::Hour,
        p if p == Duration::from_secs(86_400) => Unit::Day,
        p if p == Duration::from_secs(7 * 86_400) => Unit::Week,
        _ => return None,
    };
    Some(RateLimit {
        name: name.to_owned(),
        requests_per_unit: u32::try_from(quota.limit()).ok()?,
        unit: unit as i32,
    })
}

impl EnvoyRules {
    /// Binds `config`'s rules to `backend`; `file` names the configuration
    /// in errors. Every rule needs a `descriptor`; the leaky bucket (it
    /// delays, which neither service can say) and concurrency rules (no
    /// service says when a request ends) are refused, naming `algorithm`.
    pub fn new(
        config: &GatewayConfig,
        file: &str,
        backend: impl Backend,
    ) -> Result<Self, ConfigFileError> {
        let backend: Arc<dyn Backend> = Arc::new(backend);
        let (loaded, _) = load(config, file, &*backend, None)?;
        Ok(Self {
            loaded: Arc::new(ArcSwap::from_pointee(loaded)),
            backend,
        })
    }

    /// The names of the rules, in file order.
    pub fn rule_names(&self) -> Vec<String> {
        let loaded = self.loaded.load();
        (0..loaded.rules.len())
            .map(|i| loaded.rules.rule(i).name().to_owned())
            .collect()
    }

    /// The rules as they are now, for operations on their keys
    /// ([`RuleSet::operate`]: `inspect`, `block`, `reset`, ...): take them
    /// afresh for each operation, a reload replaces them.
    /// With a Redis backend the operations hold for every instance of the
    /// service, and for the layers on the same Redis.
    ///
    /// ```
    /// use std::time::Duration;
    /// use throttle_fleet_config::GatewayConfig;
    /// use throttle_fleet_core::memory::MemoryBackend;
    /// use throttle_fleet_envoy::EnvoyRules;
    ///
    /// let config = GatewayConfig::parse("rls.toml", r#"
    ///     [[rules]]
    ///     name = "per-user"
    ///     domain = "api"
    ///     descriptor = ["user_id"]
    ///     limit = 10
    ///     period_secs = 60
    /// "#, None)?;
    /// let envoy = EnvoyRules::new(&config, "rls.toml", MemoryBackend::default())?;
    /// let rules = envoy.rules();
    /// let rule = rules.index_of("per-user").unwrap();
    /// // The key a descriptor `user_id = alice` is counted under.
    /// let key = envoy.key_for("per-user", &[("user_id", "alice")]).unwrap();
    /// assert!(envoy.key_for("per-user", &[("tenant", "alice")]).is_none());
    /// let _ = rules.operate().block(rule, &key, Duration::from_secs(60), "user_id=alice");
    /// assert_eq!(rules.operate().blocked(rule).len(), 1);
    /// # Ok::<(), throttle_fleet_config::ConfigFileError>(())
    /// ```
    pub fn rules(&self) -> RuleSet {
        self.loaded.load().rules.clone()
    }

    /// The key the rule named `rule` counts a descriptor of `entries` (its
    /// keys and values, in order, as Envoy sends them) under; `None` when
    /// no rule has that name or the entries do not match its descriptor.
    pub fn key_for(&self, rule: &str, entries: &[(&str, &str)]) -> Option<Key> {
        let loaded = self.loaded.load();
        let index = loaded.rules.index_of(rule)?;
        loaded
            .catalog
            .key_for(index, entries.iter().map(|(k, v)| (*k, *v)))
    }

    /// The rules as they are now (a reload swaps them; a check in progress
    /// keeps the version it started with).
    pub(crate) fn current_full(&self) -> Arc<Loaded> {
        self.loaded.load_full()
    }
}

impl ReloadTarget for EnvoyRules {
    fn apply(&mut self, config: &GatewayConfig, file: &str) -> Result<Reloaded, String> {
        let previous = self.loaded.load_full();
        let (loaded, carried) =
            load(config, file, &*self.backend, Some(&previous.rules)).map_err(|e| e.to_string())?;
        let names: Vec<String> = carried.iter().map(|(n, _)| n.clone()).collect();
        let removed = (0..previous.rules.len())
            .map(|i| previous.rules.rule(i).name().to_owned())
            .filter(|n| !names.contains(n))
            .collect();
        self.loaded.store(Arc::new(loaded));
        Ok(Reloaded::new(carried, removed))
    }
}

/// The rules of `config` bound afresh, or after `previous` (a reload),
/// with what became of each rule's counts.
fn load(
    config: &GatewayConfig,
    file: &str,
    backend: &dyn Backend,
    previous: Option<&RuleSet>,
) -> Result<(Loaded, Vec<(String, Carried)>), ConfigFileError> {
    let mut rules = RuleSet::new();
    let mut facts = Vec::with_capacity(config.rules.len());
    let mut carried = Vec::with_capacity(config.rules.len());
    for rc in &config.rules {
        let rule = served_rule(rc, file)?;
        let name = rule.name().to_owned();
        facts.push(Facts::of(&rule));
        let observer = throttle_fleet_tower::metrics::rule_observer(&rule);
        // Each descriptor is answered with its own rule's figures, and a
        // later round's denial gives back what earlier rounds took: checks
        // keep every charge.
        let mut binding = Binding::from(rule).keep();
        if let Some(observer) = observer {
            binding = binding.observe(observer);
        }
        let (_, how) = match previous {
            Some(previous) => rules.bind_after(binding, backend, previous),
            None => rules.bind(binding, backend).map(|i| (i, Carried::Fresh)),
        }
        .map_err(|e| ConfigFileError::from_rule_error(file, &e))?;
        carried.push((name, how));
    }
    let catalog = Catalog::new(&config.rules);
    Ok((
        Loaded {
            rules,
            catalog,
            facts,
        },
        carried,
    ))
}

/// The core rule one file rule is, with its tiers and shadow flag; or why
/// Envoy cannot be served it.
fn served_rule(rc: &RuleConfig, file: &str) -> Result<Rule, ConfigFileError> {
    let name = Some(rc.rule.name());
    let KeySpec::Descriptor(descriptor) = &rc.key else {
        return Err(ConfigFileError::in_file(
            file,
            name,
            "key",
            "is read from a request by a server's layer; the Envoy services match rules by domain and descriptor",
        ));
    };
    let why = throttle_fleet_config::not_for_envoy(rc.rule.algorithm());
    if let Some(why) = why {
        return Err(ConfigFileError::in_file(file, name, "algorithm", why));
    }
    let mut rule = rc.rule.clone();
    if !rc.tiers.is_empty() {
        let tiers: Vec<(Key, Quota)> = rc
            .tiers
            .iter()
            .filter_map(|(written, q)| descriptor.tier_key(written).map(|k| (k, *q)))
            .collect();
        rule = rule.with_tiers(tiers);
    }
    if rc.shadow {
        rule = rule.shadow();
    }
    Ok(rule)
}
