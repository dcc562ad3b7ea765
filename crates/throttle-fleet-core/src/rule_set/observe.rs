//! Watching each rule's own answer as the rule set gets it: where a layer
//! counts decisions (metrics) without wrapping the rule's limiter, so the
//! memory backend's direct call still applies.

use crate::backend::{Outcome, Unavailable};

/// Sees every answer of one rule's limiter: allowed or not, degraded, or
/// unavailable (before the rule set combines the rules into one decision,
/// so a request that a later rule denies is still seen as allowed by an
/// earlier one). Set with [`Binding::observe`](super::Binding::observe). Called on the checking thread, once per rule asked, after
/// a remote backend's wait when there is one; it must be cheap and must
/// not block.
pub trait Observer: Send + Sync + 'static {
    /// One answer of the rule this observer is set on.
    fn observe(&self, result: &Result<Outcome, Unavailable>);
}
