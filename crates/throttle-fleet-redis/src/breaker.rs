//! A circuit breaker: after K consecutive failures no request waits for
//! Redis; a background probe closes it again.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::metrics::BreakerMetrics;

#[derive(Debug)]
pub(crate) struct Breaker {
    threshold: u32,
    failures: AtomicU32,
    open: AtomicBool,
    metrics: BreakerMetrics,
}

impl Breaker {
    /// A closed breaker of the node at `node` (`host:port`, for metrics),
    /// which opens after `threshold` consecutive failures.
    pub(crate) fn new(threshold: u32, node: &str) -> Self {
        Self {
            threshold,
            failures: AtomicU32::new(0),
            open: AtomicBool::new(false),
            metrics: BreakerMetrics::new(node),
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
        let opened = n >= self.threshold && !self.open.swap(true, Ordering::AcqRel);
        if opened {
            self.metrics.opened();
        }
        opened
    }

    /// Opens the breaker without counting failures (no connection at all
    /// yet); returns true when this opened it.
    pub(crate) fn trip(&self) -> bool {
        let opened = !self.open.swap(true, Ordering::AcqRel);
        if opened {
            self.metrics.opened();
        }
        opened
    }

    pub(crate) fn close(&self) {
        self.failures.store(0, Ordering::Relaxed);
        if self.open.swap(false, Ordering::AcqRel) {
            self.metrics.closed();
        }
    }
}
