//! The policy engine: a request in; call, delay or reject out, with the
//! headers. It knows nothing of `Service`s: the layer builds and swaps it,
//! the service asks it in `call`, the response future asks it again after a
//! remote check, and it can be tested on its own.

mod build;
mod prepare;
mod respond;
#[cfg(test)]
mod tests;

use throttle_fleet_core::rule_set::RuleSet;

use crate::KeyExtractor;
use crate::policy::{ClassFn, CostFn, MissingKey};

pub(crate) use respond::Next;

use crate::key::KeyInputs;
use throttle_fleet_core::Key;

/// A policy bound to its backends, with the responder that answers for it:
/// what one reload of a layer holds.
pub(crate) struct Engine<R> {
    pub(crate) rules: RuleSet,
    limits: Box<[BoundLimit]>,
    pub(crate) responder: R,
    /// `Policy::shadow_header`.
    pub(crate) shadow_header: bool,
}

/// One limit of the policy: how a request's key and cost are found for its
/// rule (at `index` in the rule set).
pub(super) struct BoundLimit {
    pub(super) index: usize,
    pub(super) extractor: Box<dyn KeyExtractor>,
    pub(super) on_missing: MissingKey,
    pub(super) cost: Option<CostFn>,
    pub(super) static_cost: u64,
    pub(super) class: Option<ClassFn>,
}

impl<R> Engine<R> {
    /// The key rule `rule` gives a request with `inputs` (see
    /// [`KeyExtractor::key_for`]); `None` when no rule has that name or its
    /// extractor cannot derive keys from inputs.
    pub(crate) fn key_for(&self, rule: &str, inputs: &KeyInputs) -> Option<Result<Key, String>> {
        let index = self.rules.index_of(rule)?;
        let limit = self.limits.iter().find(|l| l.index == index)?;
        limit.extractor.key_for(inputs)
    }
}
