//! Where counts live: the backend trait, satisfied synchronously by local
//! backends and asynchronously by remote ones.

use std::any::Any;
use std::sync::Arc;

pub use crate::answer::Pending;

pub use crate::unavailable::Unavailable;

use crate::algorithm::Step;
use crate::operate::{Block, Blocks, OpError, Penalty, Reach};
use crate::{Answer, ConfigError, Key, Rule};

/// Where counts live. A backend turns each rule into a [`Limiter`] once, when
/// the layer is built; that is where the rule is checked against what the
/// backend supports.
///
/// The trait is object safe: a layer holds `Arc<dyn Backend>` so that one
/// rule can use another backend than the rest.
pub trait Backend: Send + Sync + 'static {
    /// The limiter that enforces `rule` in this backend.
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError>;
}

impl<B: Backend + ?Sized> Backend for Arc<B> {
    fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
        (**self).limiter(rule)
    }
}

/// One rule bound to a backend: the request path. It checks and takes
/// cost for a key ([`acquire`](Self::acquire)) and gives it back
/// ([`refund`](Self::refund)); everything else has a default. An operator's
/// work on keys (read, reset, blocks shared by a fleet, penalties) is
/// apart, behind [`ops`](Self::ops).
///
/// A backend written outside this project implements `acquire` and
/// `refund`, and says [`is_remote`](Self::is_remote) when `acquire` may
/// wait:
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
/// use throttle_fleet_core::algorithm::Step;
/// use throttle_fleet_core::backend::{Limiter, Outcome, Unavailable};
/// use throttle_fleet_core::{Answer, backend::Backend, ConfigError, decision::Demand, Key, Quota, Rule, rule_set::RuleSet};
///
/// /// Counts each key's requests, forever, up to the rule's limit.
/// struct Tally { limit: u64, used: Mutex<HashMap<Key, u64>> }
///
/// impl Limiter for Tally {
///     fn acquire(&self, key: &Key, cost: u64, limit: u64) -> Answer<Result<Outcome, Unavailable>> {
///         let limit = limit.min(self.limit);
///         let mut used = self.used.lock().unwrap();
///         let used = used.entry(*key).or_default();
///         let allowed = *used + cost <= limit;
///         if allowed {
///             *used += cost;
///         }
///         let step = Step { allowed, remaining: limit - *used, ..Step::default() };
///         Answer::Ready(Ok(Outcome::new(step, 0)))
///     }
///
///     fn refund(&self, key: &Key, cost: u64, _: &Outcome) {
///         if let Some(used) = self.used.lock().unwrap().get_mut(key) {
///             *used = used.saturating_sub(cost);
///         }
///     }
/// }
///
/// struct Tallies;
///
/// impl Backend for Tallies {
///     fn limiter(&self, rule: &Rule) -> Result<Arc<dyn Limiter>, ConfigError> {
///         Ok(Arc::new(Tally { limit: rule.quota().limit(), used: Mutex::default() }))
///     }
/// }
///
/// let mut rules = RuleSet::new();
/// let ip = rules.bind(Rule::new("ip", Quota::per_minute(1)), &Tallies)?;
/// let demand = [Demand::new(ip, Key::new("10.0.0.1"), 1)];
/// let Answer::Ready(first) = rules.check(&demand) else { unreachable!() };
/// let Answer::Ready(second) = rules.check(&demand) else { unreachable!() };
/// assert!(first.decision().is_allowed() && second.decision().is_denied());
/// # Ok::<(), ConfigError>(())
/// ```
///
/// (`Any`, which every `'static` type is, lets a [`RuleSet`](crate::rule_set::RuleSet)
/// recognise the memory backend's own limiters and call them directly.)
pub trait Limiter: Any + Send + Sync + 'static {
    /// Checks `cost` for `key` and takes it when it fits.
    ///
    /// `limit` is what the key may fill when less than the rule's own: a
    /// concurrency rule's request of a lower class (its reserve), or one
    /// under the rule's adaptive limit; `u64::MAX` when nothing lowers it.
    /// A concurrency limiter holds the key to the lesser of `limit` and
    /// its own; a rate limiter, whose rules have neither, may ignore it.
    ///
    /// A local backend answers [`Answer::Ready`] without awaiting or
    /// allocating; a remote one may answer [`Answer::Pending`].
    fn acquire(&self, key: &Key, cost: u64, limit: u64) -> Answer<Result<Outcome, Unavailable>>;

    /// Gives back `cost` that an allowed `acquire` took (its `outcome`):
    /// another rule of the same request denied it, a concurrency rule's
    /// request ended, or a charge settled by the response went back. Best
    /// effort and never blocking.
    fn refund(&self, key: &Key, cost: u64, outcome: &Outcome);

    /// Whether `acquire` may need a round trip (default: no). A
    /// [`RuleSet`](crate::rule_set::RuleSet) asks the local rules of a request first,
    /// so a request one of them denies costs no round trip and no refund;
    /// an adaptive limit, which is this process's own, binds only to a
    /// limiter that is not remote.
    fn is_remote(&self) -> bool {
        false
    }

    /// A limiter for `rule` (this one's rule reloaded with another quota,
    /// cost or failure policy, same name and algorithm) that keeps this
    /// one's counts, if the backend can; `None` otherwise (a reload then
    /// binds the rule afresh). The memory backend shares its table; the
    /// Redis modes keep their counts in Redis under the rule's name anyway.
    fn requota(&self, rule: &Rule) -> Option<Arc<dyn Limiter>> {
        let _ = rule;
        None
    }

    /// The operations on this limiter's keys, if it has any of its own
    /// (default: none). Without them a [`RuleSet`](crate::rule_set::RuleSet) reads a
    /// key with a check of cost 0, keeps the rule's blocks and penalties
    /// in this process, and refuses a reset.
    fn ops(&self) -> Option<&dyn KeyOps> {
        None
    }
}

/// What a backend does for an operator on one rule's keys, beside the
/// request path ([`Limiter::ops`]): read a key, reset it, and share blocks
/// and penalties with the rest of a fleet.
pub trait KeyOps: Send + Sync {
    /// `key`'s state, taking nothing and writing nothing (an operator's
    /// inspect). While the backend cannot be asked, the answer is what
    /// its failure policy would admit, marked
    /// [`degraded`](Outcome::degraded).
    fn peek(&self, key: &Key) -> Answer<Result<Outcome, OpError>>;

    /// Forgets `key`'s counts: its next request finds a fresh key. A
    /// fleet-wide backend does it for every instance (caches of the key's
    /// state included). Default: unsupported.
    fn reset(&self, key: &Key) -> Answer<Result<(), OpError>> {
        let _ = key;
        no_reset()
    }

    /// The table of the rule's blocked keys that this backend fills from
    /// what its fleet shares, asked once when the rule is bound. Default:
    /// none; the rule set then keeps a table of its own, in this process.
    fn blocks(&self) -> Option<Arc<Blocks>> {
        None
    }

    /// Tells the fleet that `key` is blocked (`Some`) or no longer is
    /// (`None`); the table of [`blocks`](Self::blocks) already says so in
    /// this process. Answers how far the change reached: a backend whose
    /// shared store cannot be asked keeps the change and sends it when the
    /// store answers again ([`Reach::Queued`]), so that its fleet does
    /// not stay split. Default: nothing to tell ([`Reach::Instance`]).
    fn share_block(&self, key: &Key, block: Option<&Block>) -> Answer<Result<Reach, OpError>> {
        let _ = (key, block);
        Answer::Ready(Ok(Reach::Instance))
    }

    /// Counts a denial of `key` under the rule's `penalty` in a store the
    /// fleet shares, and blocks the key in [`blocks`](Self::blocks) when
    /// that starts a block; `true` when it does so (in the background,
    /// never waiting). Default: `false`, and the rule set counts the
    /// denials in this process.
    fn violated(&self, key: &Key, penalty: &Penalty) -> bool {
        let _ = (key, penalty);
        false
    }
}

/// The answer to a reset a backend does not implement (with or without
/// [`KeyOps`]).
pub(crate) fn no_reset() -> Answer<Result<(), OpError>> {
    Answer::Ready(Err(OpError::unsupported(
        "reset",
        "the rule's backend does not implement it",
    )))
}

/// `key`'s state under `limiter`, taking nothing: its own read when it has
/// [`KeyOps`], a check of cost 0 otherwise (which every algorithm answers
/// with what is left, without taking anything).
pub(crate) fn peek(limiter: &dyn Limiter, key: &Key) -> Answer<Result<Outcome, OpError>> {
    match limiter.ops() {
        Some(ops) => ops.peek(key),
        None => limiter
            .acquire(key, 0, u64::MAX)
            .map(|r| r.map_err(OpError::from)),
    }
}

/// A decision of one rule for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// What the algorithm found.
    pub step: Step,
    /// The backend's "now" when it decided, in microseconds since the Unix
    /// epoch.
    pub at_us: u64,
    /// Whether the backend could not be asked and the rule's failure policy
    /// decided instead (fail open, or the local fallback).
    pub degraded: bool,
    /// Whether a denial was for capacity kept for higher classes, or
    /// under an adaptive limit below the rule's own: load shed, not a
    /// client over its limit ([`Decision::is_shed`](crate::Decision::is_shed)).
    pub shed: bool,
}

impl Outcome {
    /// A decision made by the backend itself.
    pub fn new(step: Step, at_us: u64) -> Self {
        Self {
            step,
            at_us,
            degraded: false,
            shed: false,
        }
    }
}
