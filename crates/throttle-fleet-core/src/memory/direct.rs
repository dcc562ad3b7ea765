//! The memory backend's fast path: its own limiters, on the system clock,
//! for the algorithms whose state is plain data, are called directly by the
//! rule set, their check inlined into the rule set's.

use std::any::Any;
use std::sync::Arc;

use super::MemoryLimiter;
use crate::algorithm::{FixedWindow, Gcra, SlidingWindowCounter};
use crate::backend::{Limiter, Outcome};
use crate::{Key, SystemClock};

/// How the rule set calls a rule's limiter directly: the memory backend's
/// own limiters (on the system clock, for the algorithms whose state is
/// plain data), their check inlined into the rule set's; any other limiter
/// (`Other`) goes through the [`Limiter`] trait.
#[derive(Clone)]
pub(crate) enum Direct {
    Bucket(Arc<MemoryLimiter<Gcra, SystemClock>>),
    Window(Arc<MemoryLimiter<FixedWindow, SystemClock>>),
    Counter(Arc<MemoryLimiter<SlidingWindowCounter, SystemClock>>),
    /// Not one of those: ask through the trait.
    Other,
}

impl Direct {
    pub(crate) fn new(limiter: &Arc<dyn Limiter>) -> Self {
        let any: Arc<dyn Any + Send + Sync> = limiter.clone();
        any.downcast()
            .map(Self::Bucket)
            .or_else(|any| any.downcast().map(Self::Window))
            .or_else(|any| any.downcast().map(Self::Counter))
            .unwrap_or(Self::Other)
    }

    /// The memory backend's answer, made here; `None` for another limiter.
    #[inline(always)]
    pub(crate) fn local(&self, key: &Key, cost: u64) -> Option<Outcome> {
        match self {
            Self::Bucket(l) => Some(l.check(key, cost)),
            Self::Window(l) => Some(l.check(key, cost)),
            Self::Counter(l) => Some(l.check(key, cost)),
            Self::Other => None,
        }
    }
}
