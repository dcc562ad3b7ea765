//! Binding rules to their backends, and binding them again on a reload.

use std::sync::Arc;

use crate::Answer;
use crate::algorithm::Step;
use crate::backend::{Limiter, Outcome, Unavailable};
use crate::decision::{Demand, ShadowDenials};
use crate::memory::Direct;
use crate::operate::{Block, BlockCause, Blocks, Escalation};
use crate::{Backend, ConfigError, Key, Quota, Rule, SystemClock};

use super::held::RefundFn;
use super::shedding::Shedding;
use super::{Observer, RuleSet};

pub(super) struct Bound {
    pub(super) rule: Arc<Rule>,
    pub(super) limiter: Arc<dyn Limiter>,
    /// `limiter` called directly when it is one of the memory backend's.
    pub(super) direct: Direct,
    /// `rule.quota()` and its capacity, for a rule without tiers.
    pub(super) quota: Quota,
    pub(super) limit: u64,
    /// `limiter.is_remote()`, asked once.
    pub(super) remote: bool,
    /// `rule.is_shadow()`.
    pub(super) shadow: bool,
    /// One limiter per distinct tier quota, in `rule.tiers()` order
    /// (the default limiter again where a tier's quota is the rule's).
    pub(super) tiers: Option<TierLimiters>,
    /// Sees each of the rule's answers ([`Binding::observe`](crate::rule_set::Binding::observe)).
    pub(super) observer: Option<Arc<dyn Observer>>,
    /// Whether a check keeps what this rule took in its answer's
    /// [`Held`](super::Held): a concurrency rule, or one that settles by
    /// response.
    pub(super) keep: bool,
    /// [`Binding::settle_by`](crate::rule_set::Binding::settle_by).
    pub(super) settle: Option<RefundFn>,
    /// The rule's blocked keys, looked in before the backend is asked.
    pub(super) blocks: Arc<Blocks>,
    /// The rule's penalty counted in this process, for a backend that
    /// does not count it itself ([`KeyOps::violated`](crate::backend::KeyOps::violated)).
    pub(super) escalation: Option<Arc<Escalation>>,
    /// The rule's reserve and adaptive limit, if it has either.
    pub(super) shedding: Option<Arc<Shedding>>,
}

/// One limiter per distinct tier quota of a rule.
type TierLimiters = Arc<[Arc<dyn Limiter>]>;

impl Clone for Bound {
    fn clone(&self) -> Self {
        Self {
            rule: self.rule.clone(),
            limiter: self.limiter.clone(),
            direct: self.direct.clone(),
            quota: self.quota,
            limit: self.limit,
            remote: self.remote,
            shadow: self.shadow,
            tiers: self.tiers.clone(),
            observer: self.observer.clone(),
            keep: self.keep,
            settle: self.settle.clone(),
            blocks: self.blocks.clone(),
            escalation: self.escalation.clone(),
            shedding: self.shedding.clone(),
        }
    }
}

impl Bound {
    /// The limiter of `key`'s tier: one branch for a rule without tiers.
    #[inline]
    pub(super) fn limiter(&self, key: &Key) -> &dyn Limiter {
        if let Some(tiers) = &self.tiers
            && let Some(i) = self.rule.tiers().and_then(|t| t.tier_of(key))
        {
            return &*tiers[i];
        }
        &*self.limiter
    }

    /// The answer for `cost` of a memory limiter called directly (see
    /// [`Direct`]), or `None`: ask [`limiter`](Self::limiter).
    ///
    /// A blocked key is denied here, whatever the backend.
    #[inline(always)]
    pub(super) fn local(&self, key: &Key, cost: u64) -> Option<Outcome> {
        if let Some(left) = self.blocks.remaining_us(key) {
            return Some(self.blocked(left));
        }
        if self.tiers.is_some() {
            return None;
        }
        self.direct.local(key, cost)
    }

    /// The denial of a blocked key, `left_us` before its block ends.
    #[cold]
    #[inline(never)]
    fn blocked(&self, left_us: u64) -> Outcome {
        self.blocks.count_denial();
        Outcome::new(
            Step {
                allowed: false,
                remaining: 0,
                reset_us: left_us,
                retry_after_us: left_us,
                delay_us: 0,
            },
            self.blocks.now_us(),
        )
    }

    /// Counts a denial of `key` (not for a block) under the rule's
    /// penalty, if it has one: in the backend's shared store when it keeps
    /// one, in this process otherwise. The length of the block it starts
    /// here and now, if it does.
    #[inline(always)]
    pub(super) fn denied(&self, key: &Key) -> Option<u64> {
        if self.escalation.is_some() {
            return self.violation(key);
        }
        None
    }

    #[cold]
    #[inline(never)]
    fn violation(&self, key: &Key) -> Option<u64> {
        let (Some(escalation), Some(penalty)) = (&self.escalation, self.rule.penalty()) else {
            return None;
        };
        if self.blocks.remaining_us(key).is_some()
            || self.limiter.ops().is_some_and(|o| o.violated(key, penalty))
        {
            return None;
        }
        let now = self.blocks.now_us();
        let (length, level) = escalation.denied(key, now)?;
        let block = Block {
            until_us: now.saturating_add(length),
            label: Arc::from(""),
            cause: BlockCause::Penalty { level },
        };
        if self.blocks.insert(*key, block) {
            self.blocks.count_start();
            tracing::info!(
                rule = self.rule.name(),
                key = ?key,
                level,
                block_ms = length / 1_000,
                "throttle: a key kept being denied; blocked"
            );
        }
        Some(length)
    }

    /// Shows `result`, this rule's answer, to its observer.
    #[inline(always)]
    pub(super) fn observed(&self, result: &Result<Outcome, Unavailable>) {
        if let Some(observer) = &self.observer {
            observer.observe(result);
        }
    }

    /// Asks the rule for `d`: decided here when it can be
    /// ([`local`](Self::local)), by the limiter otherwise.
    #[inline]
    pub(super) fn acquire(&self, d: &Demand) -> Answer<Result<Outcome, Unavailable>> {
        match self.local(&d.key, d.cost) {
            Some(o) => Answer::Ready(Ok(o)),
            None => self.ask(d),
        }
    }

    /// Asks `d`'s limiter, under the limit of `d`'s class when the rule
    /// has a reserve or an adaptive limit.
    #[inline]
    pub(super) fn ask(&self, d: &Demand) -> Answer<Result<Outcome, Unavailable>> {
        match &self.shedding {
            None => self.limiter(&d.key).acquire(&d.key, d.cost, u64::MAX),
            Some(s) => self.with_shedding(s, d),
        }
    }

    // Out of line: the checks of every other rule stay as small as they
    // were.
    #[inline(never)]
    fn with_shedding(&self, s: &Arc<Shedding>, d: &Demand) -> Answer<Result<Outcome, Unavailable>> {
        s.acquire(&*self.limiter, d, &self.blocks)
    }

    /// `key`'s tier under this rule, as a decision records it.
    #[inline(always)]
    pub(super) fn tier(&self, key: &Key) -> u8 {
        if self.tiers.is_none() {
            return u8::MAX;
        }
        self.rule
            .tiers()
            .and_then(|t| t.tier_of(key))
            .map_or(u8::MAX, |i| i as u8)
    }
}

/// What a reload did with one rule's counts ([`RuleSet::bind_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    /// The rule is unchanged: same limiter, same counts.
    Same,
    /// Same name and algorithm, another quota (or cost, or failure
    /// policy): the counts carried over; the new quota applies from the
    /// next request.
    Requoted,
    /// New, or its algorithm changed, or a token bucket moved between a
    /// quota whose states pack into one word and one whose states do not
    /// ([`Gcra`](crate::algorithm::Gcra)): it starts from nothing (a Redis
    /// mode's counts live in Redis under the rule's name, and are read
    /// again).
    Fresh,
}

/// A rule and what its binding adds to it: who watches its answers, and
/// whether a check keeps what it takes. A rule binds as it is
/// (`Binding::from(rule)`, which [`RuleSet::bind`] does for a bare
/// [`Rule`]); a reload binds the same `Binding` again, so nothing set here
/// is lost with the old rule set.
///
/// ```
/// use std::sync::Arc;
/// use throttle_fleet_core::rule_set::Binding;
/// use throttle_fleet_core::{Answer, decision::Demand, Key, memory::MemoryBackend, Quota, Rule, rule_set::RuleSet};
///
/// let mut rules = RuleSet::new();
/// // Server errors (5xx) do not count against the client.
/// let rule = Rule::new("ip", Quota::per_minute(10));
/// let ip = rules.bind(Binding::from(rule).settle_by(Arc::new(|status| status >= 500)), &MemoryBackend::default())?;
/// let demand = [Demand::new(ip, Key::new("10.0.0.1"), 1)];
/// let Answer::Ready(checked) = rules.check(&demand) else { unreachable!() };
/// let (_, held) = checked.into_parts();
/// held.expect("the rule keeps its charge").settle(503); // given back
/// let Answer::Ready(Ok(state)) = rules.operate().inspect(ip, &demand[0].key) else { unreachable!() };
/// assert_eq!(state.remaining, 10);
/// # Ok::<(), throttle_fleet_core::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Binding {
    rule: Rule,
    observer: Option<Arc<dyn Observer>>,
    keep: bool,
    settle: Option<RefundFn>,
}

impl From<Rule> for Binding {
    fn from(rule: Rule) -> Self {
        Self {
            rule,
            observer: None,
            keep: false,
            settle: None,
        }
    }
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Binding")
            .field("rule", &self.rule)
            .field("observed", &self.observer.is_some())
            .field("keep", &self.keep)
            .field("settled", &self.settle.is_some())
            .finish()
    }
}

impl Binding {
    /// Shows each of the rule's answers to `observer`. Rules without an
    /// observer pay one branch per check.
    pub fn observe(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Makes checks keep what the rule takes in their answer's
    /// [`Held`](super::Held), to read ([`Held::taken`](super::Held::taken))
    /// or refund ([`Held::refund`](super::Held::refund)): a service that
    /// answers per demand (Envoy's RLS answers each descriptor). A kept
    /// cost nobody refunds stays taken.
    pub fn keep(mut self) -> Self {
        self.keep = true;
        self
    }

    /// Keeps what the rule takes, so that
    /// [`Held::settle`](super::Held::settle) decides from the response's
    /// status code whether it goes back (`refund` says `true`): costs that
    /// depend on how the request went, such as not counting a request the
    /// server failed. Refused, when the rule is bound, for a concurrency
    /// rule, whose slots always come back when the request ends.
    pub fn settle_by(mut self, refund: RefundFn) -> Self {
        self.keep = true;
        self.settle = Some(refund);
        self
    }
}

impl RuleSet {
    /// An empty rule set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Validates `rule`, binds it to `backend` and appends it; returns its
    /// index. Rule names must be unique within a set.
    pub fn bind(
        &mut self,
        binding: impl Into<Binding>,
        backend: &dyn Backend,
    ) -> Result<usize, ConfigError> {
        let binding = binding.into();
        let rule = &binding.rule;
        rule.validate()?;
        self.check_unique(rule)?;
        let limiter = backend.limiter(rule)?;
        let tiers = Self::tier_limiters(rule, &limiter, backend)?;
        self.push(binding, limiter, tiers, None)
    }

    fn check_unique(&self, rule: &Rule) -> Result<(), ConfigError> {
        if self.rules.iter().any(|b| b.rule.name() == rule.name()) {
            return Err(
                ConfigError::new("name", "is used by another rule of the policy")
                    .in_rule(rule.name()),
            );
        }
        Ok(())
    }

    /// One limiter per distinct tier quota of `rule` (the rule's own
    /// `limiter` where a tier's quota is the rule's), or `None`.
    fn tier_limiters(
        rule: &Rule,
        limiter: &Arc<dyn Limiter>,
        backend: &dyn Backend,
    ) -> Result<Option<TierLimiters>, ConfigError> {
        Ok(match rule.tiers() {
            None => None,
            Some(tiers) => {
                let mut bound = Vec::with_capacity(tiers.quotas().len());
                let n = tiers.quotas().len();
                for (i, q) in tiers.quotas().iter().enumerate() {
                    bound.push(if *q == rule.quota() {
                        limiter.clone()
                    } else {
                        backend.limiter(&rule.for_tier(*q)).map_err(|e| {
                            ConfigError::new(
                                "tiers",
                                format!(
                                    "quota {} of {n} ({} per {:?}): {} {}",
                                    i + 1,
                                    q.limit(),
                                    q.period(),
                                    e.field(),
                                    e.reason()
                                ),
                            )
                            .in_rule(rule.name())
                        })?
                    });
                }
                Some(Arc::from(bound))
            }
        })
    }

    /// Appends `rule` bound to `limiter`; `previous` is the rule's binding
    /// before a reload, whose blocks and penalty histories carry over.
    fn push(
        &mut self,
        binding: Binding,
        limiter: Arc<dyn Limiter>,
        tiers: Option<TierLimiters>,
        previous: Option<&Bound>,
    ) -> Result<usize, ConfigError> {
        let Binding {
            rule,
            observer,
            keep,
            settle,
        } = binding;
        self.check_unique(&rule)?;
        if settle.is_some() && rule.algorithm().is_concurrency() {
            return Err(ConfigError::new(
                "settle_by",
                "does not apply to a concurrency rule: its slots always come back when the request ends",
            )
            .in_rule(rule.name()));
        }
        if rule.is_shadow() && self.rules.len() >= ShadowDenials::CAPACITY {
            return Err(ConfigError::new(
                "shadow",
                format!(
                    "only the first {} rules of a policy may be shadow rules",
                    ShadowDenials::CAPACITY
                ),
            )
            .in_rule(rule.name()));
        }
        if self.rules.len() >= crate::limits::MAX_RULES {
            return Err(ConfigError::new(
                "policy",
                format!("may have at most {} rules", crate::limits::MAX_RULES),
            )
            .in_rule(rule.name()));
        }
        let concurrency = rule.algorithm().is_concurrency();
        let blocks = previous
            .map(|b| b.blocks.clone())
            .or_else(|| limiter.ops().and_then(|o| o.blocks()))
            .unwrap_or_else(|| Arc::new(Blocks::new(Arc::new(SystemClock::new()))));
        let escalation = rule.penalty().map(|p| {
            previous
                .filter(|b| b.rule.penalty() == Some(p))
                .and_then(|b| b.escalation.clone())
                .unwrap_or_else(|| Arc::new(Escalation::new(*p)))
        });
        // An unchanged rule keeps its adaptive limit (what it learnt, and
        // the requests in flight under it); anything else starts afresh.
        let shedding =
            match previous.filter(|b| *b.rule == rule && Arc::ptr_eq(&b.limiter, &limiter)) {
                Some(b) => b.shedding.clone(),
                None => Shedding::of(&rule, &*limiter)?.map(Arc::new),
            };
        let mut rules: Vec<Bound> = self.rules.to_vec();
        rules.push(Bound {
            shedding,
            keep: concurrency || keep,
            settle,
            remote: limiter.is_remote(),
            shadow: rule.is_shadow(),
            quota: rule.quota(),
            limit: rule.capacity(),
            rule: Arc::new(rule),
            direct: Direct::new(&limiter),
            limiter,
            tiers,
            observer,
            blocks,
            escalation,
        });
        self.reorder = rules.iter().skip_while(|b| !b.remote).any(|b| !b.remote);
        self.keeps = rules.iter().any(|b| b.keep);
        self.rules = rules.into();
        Ok(self.rules.len() - 1)
    }

    /// Like [`bind`](Self::bind) for a rule set replacing `previous` (a
    /// reload): a rule `previous` holds unchanged keeps its limiter, so its
    /// counts carry on; one with the same name and algorithm but another
    /// quota, cost or failure policy asks the old limiter for one that
    /// keeps its counts ([`Limiter::requota`]); anything else is bound
    /// afresh. A kept rule keeps its previous backend: pass the same one.
    pub fn bind_after(
        &mut self,
        binding: impl Into<Binding>,
        backend: &dyn Backend,
        previous: &RuleSet,
    ) -> Result<(usize, Carried), ConfigError> {
        let binding = binding.into();
        let rule = &binding.rule;
        rule.validate()?;
        let old = previous
            .rules
            .iter()
            .find(|b| b.rule.name() == rule.name() && b.rule.algorithm() == rule.algorithm());
        if let Some(b) = old
            && *b.rule == *rule
        {
            let (limiter, tiers) = (b.limiter.clone(), b.tiers.clone());
            return Ok((self.push(binding, limiter, tiers, Some(b))?, Carried::Same));
        }
        // (Tier limiters are bound afresh: a tier's counts carry over only
        // while the rule stays the same.)
        let (limiter, carried) = match old.and_then(|b| b.limiter.requota(rule)) {
            Some(limiter) => (limiter, Carried::Requoted),
            None => (backend.limiter(rule)?, Carried::Fresh),
        };
        let tiers = Self::tier_limiters(rule, &limiter, backend)?;
        // Blocks and penalty histories carry over whenever the name does.
        let same_name = previous.rules.iter().find(|b| b.rule.name() == rule.name());
        let index = self.push(binding, limiter, tiers, same_name)?;
        Ok((index, carried))
    }
}
