//! A circuit breaker: after K consecutive failures no request waits for
//! Redis; a background probe closes it again.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

#[derive(Debug, Default)]
pub(crate) struct Breaker {
    threshold: u32,
    failures: AtomicU32,
    open: AtomicBool,
}

impl Breaker {
    pub(crate) fn new(threshold: u32) -> Self {
        Self {
            threshold,
            ..Self::default()
        }
    }

    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn success(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// Records a failure; returns true when this one opened the breaker.
    pub(crate) fn failure(&self) -> bool {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        n >= self.threshold && !self.open.swap(true, Ordering::AcqRel)
    }

    /// Opens the breaker without counting failures (no connection at all
    /// yet); returns true when this opened it.
    pub(crate) fn trip(&self) -> bool {
        !self.open.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn close(&self) {
        self.failures.store(0, Ordering::Relaxed);
        self.open.store(false, Ordering::Release);
    }
}
