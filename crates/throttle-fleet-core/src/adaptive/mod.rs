//! Adaptive concurrency: a concurrency rule whose limit moves with the
//! latency of the requests it admits ([`InFlightLimit::adaptive`](crate::InFlightLimit::adaptive)),
//! per instance.

mod vegas;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

pub use vegas::{Vegas, VegasState};

/// One rule's adaptive limit in this process: the limit admissions read
/// (one atomic load), the requests in flight under it, whether it denied
/// one since a request last ended, and the algorithm's state, fed when a
/// request ends.
#[derive(Debug)]
pub(crate) struct Adaptive {
    limit: AtomicU64,
    in_flight: AtomicU64,
    denied: AtomicBool,
    state: Mutex<VegasState>,
}

impl Adaptive {
    pub(crate) fn new(params: Vegas, max: u64) -> Self {
        let state = VegasState::new(params, max);
        Self {
            limit: AtomicU64::new(state.limit()),
            in_flight: AtomicU64::new(0),
            denied: AtomicBool::new(false),
            state: Mutex::new(state),
        }
    }

    /// The limit admissions use now.
    #[inline]
    pub(crate) fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// A request of `cost` was admitted.
    pub(crate) fn admitted(&self, cost: u64) {
        self.in_flight.fetch_add(cost, Ordering::Relaxed);
    }

    /// The limit denied a request: told to the algorithm when the next
    /// request ends (a flag, not the lock, on the denial's path; written
    /// only when not yet set).
    #[inline]
    pub(crate) fn denied(&self) {
        if !self.denied.load(Ordering::Relaxed) {
            self.denied.store(true, Ordering::Relaxed);
        }
    }

    /// A request of `cost` admitted at `since_us` ended at `now_us`: a
    /// sample of the backend's latency.
    pub(crate) fn ended(&self, cost: u64, since_us: u64, now_us: u64) {
        let in_flight = self.in_flight.load(Ordering::Relaxed);
        self.left(cost);
        let denied =
            self.denied.load(Ordering::Relaxed) && self.denied.swap(false, Ordering::Relaxed);
        let mut state = self.state.lock();
        if denied {
            state.denied();
        }
        let limit = state.sample(now_us, now_us.saturating_sub(since_us), in_flight);
        self.limit.store(limit, Ordering::Relaxed);
    }

    /// A request of `cost` gave its slot back without having run (another
    /// rule denied it): no sample.
    pub(crate) fn left(&self, cost: u64) {
        // Never below zero, whatever order ends arrive in.
        let _ = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(cost))
            });
    }
}
