//! Where counts live: the backend trait, satisfied synchronously by local
//! backends and asynchronously by remote ones.

use std::any::Any;
use std::sync::Arc;

pub use crate::answer::Pending;
pub use crate::rule::MeterVisitor;

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

/// One rule bound to a backend: checks and takes cost for a key.
///
/// (`Any`, which every `'static` type is, lets a [`RuleSet`](crate::RuleSet)
/// recognise the memory backend's own limiters and call them directly.)
pub trait Limiter: Any + Send + Sync + 'static {
    /// Checks `cost` for `key` and takes it when it fits.
    ///
    /// A local backend answers [`Answer::Ready`] without awaiting or
    /// allocating; a remote one may answer [`Answer::Pending`].
    fn acquire(&self, key: &Key, cost: u64) -> Answer<Result<Outcome, Unavailable>>;

    /// [`acquire`](Self::acquire) under `limit` instead of the rule's own
    /// (at most that): a concurrency rule's share for a request's class,
    /// or its adaptive limit. Asked only when
    /// [`takes_a_limit`](Self::takes_a_limit) says so; the default ignores
    /// `limit`.
    fn acquire_under(
        &self,
        key: &Key,
        cost: u64,
        limit: u64,
    ) -> Answer<Result<Outcome, Unavailable>> {
        let _ = limit;
        self.acquire(key, cost)
    }

    /// Whether [`acquire_under`](Self::acquire_under) applies its limit
    /// (default: no). A rule with a reserve or an adaptive limit binds
    /// only to a limiter that does: anything else would let every class
    /// use every slot, unnoticed.
    fn takes_a_limit(&self) -> bool {
        false
    }

    /// Gives back `cost` that an allowed `acquire` took (its `outcome`),
    /// because another rule of the same request denied it. Best effort and
    /// never blocking.
    fn refund(&self, key: &Key, cost: u64, outcome: &Outcome);

    /// A limiter for `rule` (this one's rule reloaded with another quota,
    /// cost or failure policy, same name and algorithm) that keeps this
    /// one's counts, if the backend can; `None` otherwise (a reload then
    /// binds the rule afresh). The memory backend shares its table; the
    /// Redis modes keep their counts in Redis under the rule's name anyway.
    fn requota(&self, rule: &Rule) -> Option<Arc<dyn Limiter>> {
        let _ = rule;
        None
    }

    /// Whether `acquire` may need a round trip (default: no). A
    /// [`RuleSet`](crate::RuleSet) asks the local rules of a request first,
    /// so a request one of them denies costs no round trip and no refund.
    fn is_remote(&self) -> bool {
        false
    }

    /// `key`'s state, taking nothing and writing nothing (an operator's
    /// inspect). Default: a check of cost 0, which every algorithm answers
    /// with what is left without taking anything; a backend whose check
    /// writes even at cost 0 (a remote store that saves the key's state
    /// and its expiry) overrides it with a read. While the backend cannot
    /// be asked, the answer is what its failure policy would admit, marked
    /// [`degraded`](Outcome::degraded).
    fn peek(&self, key: &Key) -> Answer<Result<Outcome, OpError>> {
        self.acquire(key, 0).map(|r| r.map_err(OpError::from))
    }

    /// Forgets `key`'s counts: its next request finds a fresh key. A
    /// fleet-wide backend does it for every instance (caches of the key's
    /// state included). Default: unsupported.
    fn reset(&self, key: &Key) -> Answer<Result<(), OpError>> {
        let _ = key;
        Answer::Ready(Err(OpError::unsupported(
            "reset",
            "the rule's backend does not implement it",
        )))
    }

    /// The table of the rule's blocked keys that this limiter fills from
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
