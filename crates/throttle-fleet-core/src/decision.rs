//! Decisions: what a check of a request's rules says.
//!
//! A [`Decision`] is plain data of at most 32 bytes, made on every request;
//! what a responder reports (the limit, the remaining units, the reset,
//! the wait) is read from it through methods, the limit and quota with the
//! rule that decided ([`Decision::limit`], [`Decision::quota`]).

use std::fmt;
use std::time::Duration;

use crate::backend::{Outcome, Unavailable};
#[cfg(doc)]
use crate::rule_set::RuleSet;
use crate::{Class, Key, Quota, Rule};

/// The shadow rules that would have denied a request (see
/// [`Rule::shadow`]): a small set of rule indices, plain data.
///
/// Only the first 32 rules of a rule set may be shadow rules
/// ([`RuleSet::bind`] refuses others), so the set is one `u32`.
///
/// ```
/// use throttle_fleet_core::decision::ShadowDenials;
///
/// let none = ShadowDenials::default();
/// assert!(none.is_empty());
/// assert_eq!(none.iter().count(), 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ShadowDenials(u32);

impl ShadowDenials {
    /// The largest rule index a shadow rule may have, plus one
    /// ([`limits::MAX_SHADOW_RULES`](crate::limits::MAX_SHADOW_RULES)).
    pub(crate) const CAPACITY: usize = 32;

    /// Whether no shadow rule would have denied.
    pub const fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// How many shadow rules would have denied.
    pub const fn len(&self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the rule at `index` would have denied.
    pub const fn contains(&self, index: usize) -> bool {
        index < Self::CAPACITY && self.0 & (1 << index) != 0
    }

    /// The indices of the shadow rules that would have denied, in rule
    /// order ([`RuleSet::rule`] names them).
    pub fn iter(&self) -> impl Iterator<Item = usize> + use<> {
        let bits = self.0;
        (0..Self::CAPACITY).filter(move |i| bits & (1 << i) != 0)
    }

    /// The set with the rule at `index` added (ignored past
    /// [`limits::MAX_SHADOW_RULES`](crate::limits::MAX_SHADOW_RULES)).
    #[must_use]
    pub const fn with(self, index: usize) -> Self {
        if index < Self::CAPACITY {
            Self(self.0 | 1 << index)
        } else {
            self
        }
    }
}

/// What kind of answer a [`Decision`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// No rule applied to the request (every rule was skipped).
    Unlimited,
    /// Every enforced rule that applied allowed the request (shadow rules
    /// may have said otherwise: [`Decision::shadow_denied`]).
    Allowed,
    /// A rule denied the request; no other rule keeps its cost.
    Denied,
    /// A fail-closed rule's backend could not answer
    /// ([`Decision::error`]).
    Refused,
}

/// What a check of all rules decided: [`kind`](Self::kind), and the
/// figures of the rule that speaks for the decision (for an allowed
/// request the most restrictive rule, the fewest units remaining; for a
/// denied one the first rule in policy order that denied).
///
/// Rules are named by their index in the [`RuleSet`] ([`RuleSet::rule`]).
/// Durations are kept to the microsecond up to 17 minutes, to the
/// millisecond up to 12 days and to the second beyond, always rounded up,
/// so a wait is never reported shorter than the backend found it.
///
/// ```
/// use throttle_fleet_core::{Answer, decision::Demand, Key, memory::MemoryBackend, Quota, Rule, rule_set::RuleSet};
/// use throttle_fleet_core::decision::Kind;
///
/// let mut rules = RuleSet::new();
/// let ip = rules.bind(Rule::new("ip", Quota::per_minute(1)), &MemoryBackend::default())?;
/// let demand = [Demand::new(ip, Key::new("10.0.0.1"), 1)];
/// let Answer::Ready(first) = rules.check(&demand) else { unreachable!() };
/// assert_eq!(first.decision().kind(), Kind::Allowed);
/// let Answer::Ready(second) = rules.check(&demand) else { unreachable!() };
/// let denied = second.decision();
/// assert!(denied.is_denied());
/// assert_eq!(denied.rule(), Some(ip));
/// assert_eq!(denied.limit(rules.rule(ip)), 1);
/// assert!(denied.retry_after().as_secs() >= 59);
/// # Ok::<(), throttle_fleet_core::ConfigError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Decision {
    repr: Repr,
}

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    Unlimited,
    Decided(Figures),
    Refused { rule: u16, error: Unavailable },
}

/// One rule's answer, as a decision reports it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Figures {
    at_us: u64,
    remaining: u64,
    reset: Span,
    /// `retry_after` when denied, `delay` when allowed.
    wait: Span,
    shadow_denied: ShadowDenials,
    rule: u16,
    /// The key's tier (its index in `rule.tiers()`), or [`NO_TIER`].
    tier: u8,
    flags: Flags,
}

const NO_TIER: u8 = u8::MAX;

/// Allowed, degraded, and a third bit that says shadow on an allowed
/// decision (the figures are a shadow rule's) and shed on a denied one (a
/// refusal for capacity): a denial never reports a shadow rule's figures,
/// and an allowed request is never shed. An enum rather than a `u8` so
/// that its unused values leave the decision room for the other two kinds
/// without a tag of their own.
///
/// Kept for what it saves: with four `bool`s instead, a decision is 40
/// bytes and a check through the rule set costs 8 instructions more when
/// allowed (497 against 489, 1.6%) and 4 more when denied (554 against
/// 550, 0.7%) in `cargo bench -p throttle-fleet-core --bench
/// check_instructions`. Per HTTP request (`benches/http/callgrind.sh`,
/// about 17,700) the difference is within the spread of runs.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Flags {
    F0,
    F1,
    F2,
    F3,
    F4,
    F5,
    F6,
    F7,
}

impl Flags {
    const ALLOWED: u8 = 1;
    const DEGRADED: u8 = 2;
    /// [`SHADOW`](Self::SHADOW) when allowed, [`SHED`](Self::SHED) when not.
    const SHADOW_OR_SHED: u8 = 4;
    const SHADOW: u8 = Self::SHADOW_OR_SHED;
    const SHED: u8 = Self::SHADOW_OR_SHED;

    #[inline(always)]
    const fn of(bits: u8) -> Self {
        match bits & 7 {
            0 => Self::F0,
            1 => Self::F1,
            2 => Self::F2,
            3 => Self::F3,
            4 => Self::F4,
            5 => Self::F5,
            6 => Self::F6,
            _ => Self::F7,
        }
    }

    #[inline(always)]
    const fn has(self, bit: u8) -> bool {
        self as u8 & bit != 0
    }
}

/// A duration in 32 bits: 30 bits of microseconds, milliseconds or
/// seconds (the top two bits say which), rounded up; past 2^30 seconds,
/// the longest a step can say (`u64::MAX` microseconds).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
struct Span(u32);

impl Span {
    const VALUE: u64 = (1 << 30) - 1;

    #[inline(always)]
    fn from_us(us: u64) -> Self {
        if us <= Self::VALUE {
            return Self(us as u32);
        }
        let ms = us.div_ceil(1_000);
        if ms <= Self::VALUE {
            return Self(1 << 30 | ms as u32);
        }
        let secs = us.div_ceil(1_000_000);
        if secs <= Self::VALUE {
            Self(2 << 30 | secs as u32)
        } else {
            // Past 34 years: the longest wait there is, never a shorter one.
            Self(3 << 30)
        }
    }

    #[inline]
    fn get(self) -> Duration {
        if self.0 == 0 {
            // No wait (every allowed request but a leaky bucket's).
            return Duration::ZERO;
        }
        let value = u64::from(self.0) & Self::VALUE;
        match self.0 >> 30 {
            0 => Duration::from_micros(value),
            1 => Duration::from_millis(value),
            2 => Duration::from_secs(value),
            _ => Duration::from_micros(u64::MAX),
        }
    }
}

impl Decision {
    /// No rule applied to the request.
    pub(crate) const fn unlimited() -> Self {
        Self {
            repr: Repr::Unlimited,
        }
    }

    /// A fail-closed rule, at index `rule`, could not be checked.
    pub(crate) fn refused(rule: usize, error: Unavailable) -> Self {
        Self {
            repr: Repr::Refused {
                rule: u16::try_from(rule).unwrap_or(u16::MAX),
                error,
            },
        }
    }

    #[inline(always)]
    pub(crate) fn decided(
        rule: u16,
        tier: u8,
        outcome: &Outcome,
        wait_us: u64,
        allowed: bool,
        shadow: bool,
        shadow_denied: ShadowDenials,
    ) -> Self {
        let bits = ((allowed as u8) * Flags::ALLOWED)
            | ((outcome.degraded as u8) * Flags::DEGRADED)
            // (Only a denial is shed, whatever a backend's outcome says,
            // and a denial never speaks for a shadow rule: the two never
            // meet.)
            | (((shadow | (outcome.shed && !allowed)) as u8) * Flags::SHADOW_OR_SHED);
        Self {
            repr: Repr::Decided(Figures {
                at_us: outcome.at_us,
                remaining: outcome.step.remaining,
                reset: Span::from_us(outcome.step.reset_us),
                wait: Span::from_us(wait_us),
                shadow_denied,
                rule,
                tier,
                flags: Flags::of(bits),
            }),
        }
    }

    /// What kind of answer this is.
    #[inline]
    pub fn kind(&self) -> Kind {
        match &self.repr {
            Repr::Unlimited => Kind::Unlimited,
            Repr::Decided(f) if f.flags.has(Flags::ALLOWED) => Kind::Allowed,
            Repr::Decided(_) => Kind::Denied,
            Repr::Refused { .. } => Kind::Refused,
        }
    }

    /// Whether the request may go on (allowed, or no rule applied).
    #[inline]
    pub fn is_allowed(&self) -> bool {
        match &self.repr {
            Repr::Unlimited => true,
            Repr::Decided(f) => f.flags.has(Flags::ALLOWED),
            Repr::Refused { .. } => false,
        }
    }

    /// Whether a rule denied the request (over its limit).
    #[inline]
    pub fn is_denied(&self) -> bool {
        self.kind() == Kind::Denied
    }

    #[inline(always)]
    fn figures(&self) -> Option<&Figures> {
        match &self.repr {
            Repr::Decided(f) => Some(f),
            _ => None,
        }
    }

    /// The rule that speaks for this decision (its index in the rule
    /// set): the most restrictive allowing rule, the first denying one,
    /// or the fail-closed rule that could not be checked. `None` when no
    /// rule applied.
    #[inline]
    pub fn rule(&self) -> Option<usize> {
        match &self.repr {
            Repr::Unlimited => None,
            Repr::Decided(f) => Some(usize::from(f.rule)),
            Repr::Refused { rule, .. } => Some(usize::from(*rule)),
        }
    }

    /// Units left for the key under [`rule`](Self::rule) (`X-RateLimit-Remaining`;
    /// less than the request's cost when denied). Zero when no figures
    /// apply (unlimited, refused).
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.figures().map_or(0, |f| f.remaining)
    }

    /// Time until that rule is back to its full allowance
    /// (`X-RateLimit-Reset` counts from [`at_us`](Self::at_us)).
    #[inline]
    pub fn reset(&self) -> Duration {
        self.figures().map_or(Duration::ZERO, |f| f.reset.get())
    }

    /// When denied: the shortest wait after which the same request fits
    /// (at least a microsecond). Zero for every other kind.
    #[inline]
    pub fn retry_after(&self) -> Duration {
        match self.figures() {
            Some(f) if !f.flags.has(Flags::ALLOWED) => f.wait.get(),
            _ => Duration::ZERO,
        }
    }

    /// When allowed by a leaky bucket: how long the request must wait for
    /// its turn. Zero for every other algorithm and kind.
    #[inline]
    pub fn delay(&self) -> Duration {
        match self.figures() {
            Some(f) if f.flags.has(Flags::ALLOWED) => f.wait.get(),
            _ => Duration::ZERO,
        }
    }

    /// When the rule's backend decided, in microseconds since the Unix
    /// epoch (`reset` and `retry_after` count from there); zero when no
    /// figures apply.
    #[inline]
    pub fn at_us(&self) -> u64 {
        self.figures().map_or(0, |f| f.at_us)
    }

    /// The backend could not be asked and the rule's failure policy let
    /// the request through (fail open, or the local fallback):
    /// [`remaining`](Self::remaining) is this instance's own count, not the
    /// fleet's, and responders leave it out rather than report it as the
    /// fleet's.
    #[inline]
    pub fn is_degraded(&self) -> bool {
        self.figures().is_some_and(|f| f.flags.has(Flags::DEGRADED))
    }

    /// A denial for capacity, not for a client over its limit: a
    /// concurrency rule kept its free slots for higher classes of request
    /// ([`InFlightLimit::reserve`](crate::InFlightLimit::reserve)), or its adaptive limit was below its own
    /// ([`InFlightLimit::adaptive`](crate::InFlightLimit::adaptive)). Answered 503 with the problem type
    /// `temporary-reduced-capacity` (gRPC `UNAVAILABLE`), never 429.
    #[inline]
    pub fn is_shed(&self) -> bool {
        self.figures()
            .is_some_and(|f| !f.flags.has(Flags::ALLOWED) && f.flags.has(Flags::SHED))
    }

    /// Only shadow rules applied: the figures are a shadow rule's, which
    /// clients must not be told about (the layer sends no `X-RateLimit-*`
    /// headers for such a decision).
    #[inline]
    pub fn is_shadow(&self) -> bool {
        self.figures()
            .is_some_and(|f| f.flags.has(Flags::ALLOWED) && f.flags.has(Flags::SHADOW))
    }

    /// The shadow rules that would have denied this request (empty almost
    /// always). For logs and metrics; the request goes on regardless, and
    /// the other rules keep their cost.
    #[inline]
    pub fn shadow_denied(&self) -> ShadowDenials {
        self.figures()
            .map_or_else(ShadowDenials::default, |f| f.shadow_denied)
    }

    /// What went wrong, for a fail-closed rule that could not be checked.
    pub fn error(&self) -> Option<&Unavailable> {
        match &self.repr {
            Repr::Refused { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The key's tier under [`rule`](Self::rule) (its index in the rule's
    /// [`Tiers::quotas`](crate::Tiers::quotas)), when the rule has tiers
    /// and the key is in one.
    pub fn tier(&self) -> Option<usize> {
        self.figures()
            .filter(|f| f.tier != NO_TIER)
            .map(|f| usize::from(f.tier))
    }

    /// The quota `rule` (the rule this decision names, from
    /// [`RuleSet::rule`]) applied to the key: its tier's, or the rule's.
    pub fn quota(&self, rule: &Rule) -> Quota {
        match (self.tier(), rule.tiers()) {
            (Some(t), Some(tiers)) => tiers.quotas().get(t).copied().unwrap_or(rule.quota()),
            _ => rule.quota(),
        }
    }

    /// `rule`'s capacity for the key (`X-RateLimit-Limit`): its tier's,
    /// when the rule has tiers.
    pub fn limit(&self, rule: &Rule) -> u64 {
        rule.capacity_of(self.quota(rule))
    }
}

impl Default for Decision {
    fn default() -> Self {
        Self::unlimited()
    }
}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            Repr::Unlimited => f.write_str("Unlimited"),
            Repr::Refused { rule, error } => f
                .debug_struct("Refused")
                .field("rule", rule)
                .field("error", error)
                .finish(),
            Repr::Decided(fig) => {
                let mut d = f.debug_struct(if fig.flags.has(Flags::ALLOWED) {
                    "Allowed"
                } else {
                    "Denied"
                });
                d.field("rule", &fig.rule)
                    .field("remaining", &fig.remaining)
                    .field("reset", &fig.reset.get())
                    .field("wait", &fig.wait.get())
                    .field("at_us", &fig.at_us);
                if fig.tier != NO_TIER {
                    d.field("tier", &fig.tier);
                }
                if fig.flags.has(Flags::DEGRADED) {
                    d.field("degraded", &true);
                }
                if fig.flags.has(Flags::SHADOW) {
                    let allowed = fig.flags.has(Flags::ALLOWED);
                    d.field(if allowed { "shadow" } else { "shed" }, &true);
                }
                if !fig.shadow_denied.is_empty() {
                    d.field("shadow_denied", &fig.shadow_denied);
                }
                d.finish()
            }
        }
    }
}

/// One rule to check for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand {
    /// Index of the rule in the [`RuleSet`].
    pub rule: usize,
    /// Who is limited.
    pub key: Key,
    /// Units of cost the request takes under this rule.
    pub cost: u64,
    /// How much the request matters when capacity runs short: a rule with
    /// a reserve ([`InFlightLimit::reserve`](crate::InFlightLimit::reserve)) keeps slots for higher classes.
    /// Other rules ignore it.
    pub class: Class,
}

impl Demand {
    /// A demand of `cost` under the rule at index `rule` for `key`, of the
    /// [`Default`](Class::Default) class.
    ///
    /// ```
    /// use throttle_fleet_core::{Class, decision::Demand, Key};
    ///
    /// let d = Demand::new(0, Key::new("10.0.0.1"), 1).class(Class::Critical);
    /// assert_eq!((d.cost, d.class), (1, Class::Critical));
    /// ```
    pub const fn new(rule: usize, key: Key, cost: u64) -> Self {
        Self {
            rule,
            key,
            cost,
            class: Class::Default,
        }
    }

    /// The same demand, of `class`.
    #[must_use]
    pub const fn class(mut self, class: Class) -> Self {
        self.class = class;
        self
    }
}

#[cfg(test)]
mod tests;
