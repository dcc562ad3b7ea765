//! A circuit breaker: after K consecutive failures no request waits for
//! Redis; a background probe closes it again.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

#[derive(Debug, Default)]
pub(crate) struct Breaker {
    threshold: u32,
    failures: AtomicU32,
    open: AtomicBool,
    opened: AtomicU64,
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
        if n >= self.threshold && !self.open.swap(true, Ordering::AcqRel) {
            self.opened.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Opens the breaker without counting (no connection at all yet).
    pub(crate) fn trip(&self) -> bool {
        if !self.open.swap(true, Ordering::AcqRel) {
            self.opened.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        false
    }

    pub(crate) fn close(&self) {
        self.failures.store(0, Ordering::Relaxed);
        self.open.store(false, Ordering::Release);
    }

    pub(crate) fn times_opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }
}
