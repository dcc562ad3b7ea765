//! "At most once per interval" for work any of several tasks may start:
//! a Cluster's table read again after `MOVED`, the sentinels asked again
//! after `READONLY`, a node's connections dialled again. The first caller
//! in each interval wins; the others leave it to that one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(crate) struct Spacing {
    /// When (µs after `started`) it was last taken, or [`NEVER`].
    last_us: AtomicU64,
    started: Instant,
}

/// Never taken yet.
const NEVER: u64 = u64::MAX;

impl Spacing {
    pub(crate) fn new() -> Self {
        Self {
            last_us: AtomicU64::new(NEVER),
            started: Instant::now(),
        }
    }

    /// Whether the caller may do the work now: true for the first caller,
    /// then for one caller at least `every` (of wall time) after the last
    /// one that got true.
    pub(crate) fn take(&self, every: Duration) -> bool {
        let now_us = self.started.elapsed().as_micros() as u64;
        let last = self.last_us.load(Ordering::Relaxed);
        (last == NEVER || now_us.saturating_sub(last) >= every.as_micros() as u64)
            && self
                .last_us
                .compare_exchange(last, now_us, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }
}

#[cfg(test)]
mod tests;
