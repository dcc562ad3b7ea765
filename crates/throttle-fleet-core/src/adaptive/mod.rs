//! Adaptive concurrency: a concurrency rule whose limit moves with the
//! latency of the requests it admits ([`InFlightLimit::adaptive`](crate::InFlightLimit::adaptive)),
//! per instance.

mod vegas;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

pub use vegas::{Vegas, VegasState};

/// One rule's adaptive limit in this process: the limit admissions read
/// (one atomic load), the requests in flight under it, whether it denied
/// one since its window was last folded, the window's samples added up
/// without a lock, and the algorithm's state.
///
/// A request that ends adds its latency to the window in atomics
/// ([`Pending`]); the request that finds the window due (it lasted
/// `window` and holds `min_samples`) folds it into the [`VegasState`]
/// under the lock, which decides as [`VegasState::sample`] would have
/// decided on the last of those samples. Only a probe's samples, which
/// the probe weighs one by one (was the request admitted under it?), take
/// the lock each.
///
/// One request after another, this decides exactly as a `VegasState` fed
/// every sample (the tests drive both side by side). With requests
/// ending on several threads at once, a sample that ends while its window
/// is being folded may count in the next window instead (its latency and
/// its count always together: they share one word), and its requests in
/// flight in either window; with the lock, which of two windows such a
/// sample fell in was a race as well.
#[derive(Debug)]
pub(crate) struct Adaptive {
    limit: AtomicU64,
    in_flight: AtomicU64,
    denied: AtomicBool,
    /// Whether a probe runs: samples then go to the state one by one.
    probing: AtomicBool,
    pending: Pending,
    /// The state's window length in µs and samples it needs, copied for
    /// the check without the lock.
    window_us: u64,
    min_samples: u64,
    state: Mutex<VegasState>,
}

/// The samples of the window being filled that the state has not seen.
#[derive(Debug)]
struct Pending {
    /// How many (the high [`COUNT_SHIFT`] bits) and the sum of their
    /// latencies in µs (the low bits), in one word so that a fold takes
    /// both of the same samples.
    sums: AtomicU64,
    /// When the window's first sample ended, [`NONE`] before it.
    start_us: AtomicU64,
    /// The most requests in flight when one of them ended.
    in_flight: AtomicU64,
    /// Samples of this window already folded into the state (a fold that
    /// found it not due yet): counted towards `min_samples`.
    folded: AtomicU64,
}

/// [`Pending::start_us`] before the window's first sample.
const NONE: u64 = u64::MAX;
/// The latency sum's bits in [`Pending::sums`]: 2^44 µs, 203 days.
const COUNT_SHIFT: u32 = 44;
const SUM_MASK: u64 = (1 << COUNT_SHIFT) - 1;
const COUNT_MAX: u64 = u64::MAX >> COUNT_SHIFT;
/// A latency above this (71 minutes) goes to the state under the lock.
const RTT_MAX_US: u64 = 1 << 32;

impl Adaptive {
    pub(crate) fn new(params: Vegas, max: u64) -> Self {
        let state = VegasState::new(params, max);
        let (window_us, min_samples) = state.window_needs();
        Self {
            limit: AtomicU64::new(state.limit()),
            in_flight: AtomicU64::new(0),
            denied: AtomicBool::new(false),
            probing: AtomicBool::new(state.probing()),
            pending: Pending {
                sums: AtomicU64::new(0),
                start_us: AtomicU64::new(NONE),
                in_flight: AtomicU64::new(0),
                folded: AtomicU64::new(0),
            },
            window_us,
            min_samples: u64::from(min_samples),
            state: Mutex::new(state),
        }
    }

    /// The limit admissions use now.
    #[inline]
    pub(crate) fn limit(&self) -> u64 {
        self.limit.load(Relaxed)
    }

    /// A request of `cost` was admitted.
    #[inline]
    pub(crate) fn admitted(&self, cost: u64) {
        self.in_flight.fetch_add(cost, Relaxed);
    }

    /// The limit denied a request: told to the algorithm when its window
    /// is folded (a flag, not the lock, on the denial's path; written
    /// only when not yet set).
    #[inline]
    pub(crate) fn denied(&self) {
        if !self.denied.load(Relaxed) {
            self.denied.store(true, Relaxed);
        }
    }

    /// A request of `cost` admitted at `since_us` ended at `now_us`: a
    /// sample of the backend's latency, with the requests in flight when
    /// it ended (itself included).
    #[inline]
    pub(crate) fn ended(&self, cost: u64, since_us: u64, now_us: u64) {
        let in_flight = self.leave(cost);
        let rtt_us = now_us.saturating_sub(since_us).max(1);
        if self.probing.load(Relaxed) || !self.add(now_us, rtt_us, in_flight) {
            self.sample_locked(now_us, rtt_us, in_flight);
        }
    }

    /// A request of `cost` gave its slot back without having run (another
    /// rule denied it): no sample.
    #[inline]
    pub(crate) fn left(&self, cost: u64) {
        self.leave(cost);
    }

    /// Takes `cost` off the requests in flight (never below zero, whatever
    /// order ends arrive in); answers how many there were.
    #[inline]
    fn leave(&self, cost: u64) -> u64 {
        match self
            .in_flight
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(cost)))
        {
            Ok(n) | Err(n) => n,
        }
    }

    /// Adds a sample to the pending window, and folds the window if that
    /// makes it due. `false` when the sample does not fit in the atomics
    /// (a latency above [`RTT_MAX_US`], or a window full): the caller
    /// gives it to the state under the lock.
    #[inline]
    fn add(&self, now_us: u64, rtt_us: u64, in_flight: u64) -> bool {
        if rtt_us > RTT_MAX_US {
            return false;
        }
        let p = &self.pending;
        if p.in_flight.load(Relaxed) < in_flight {
            p.in_flight.fetch_max(in_flight, Relaxed);
        }
        let start = match p.start_us.load(Relaxed) {
            NONE => p.start_us.fetch_min(now_us, Relaxed).min(now_us),
            start => start,
        };
        let mut sums = p.sums.load(Relaxed);
        loop {
            if sums >> COUNT_SHIFT == COUNT_MAX || (sums & SUM_MASK) + rtt_us > SUM_MASK {
                return false;
            }
            let added = sums + (1 << COUNT_SHIFT) + rtt_us;
            match p.sums.compare_exchange_weak(sums, added, Relaxed, Relaxed) {
                Ok(_) => break,
                Err(now) => sums = now,
            }
        }
        let samples = (sums >> COUNT_SHIFT) + 1 + p.folded.load(Relaxed);
        if now_us.saturating_sub(start) >= self.window_us && samples >= self.min_samples {
            self.close(now_us);
        }
        true
    }

    /// The window is due at `now_us`: folded by this request, unless
    /// another holds the lock (then the next sample tries again).
    #[cold]
    #[inline(never)]
    fn close(&self, now_us: u64) {
        if let Some(mut state) = self.state.try_lock() {
            // A probe started under the lock since this sample looked:
            // the pending samples wait for the probe's end (which drops
            // them, as the probe drops the window).
            if !state.probing() {
                self.fold(&mut state, now_us, None);
            }
        }
    }

    /// A sample given to the state under the lock: one of a probe's, or
    /// one that did not fit in the atomics.
    #[cold]
    #[inline(never)]
    fn sample_locked(&self, now_us: u64, rtt_us: u64, in_flight: u64) {
        let mut state = self.state.lock();
        if state.probing() {
            if self.denied.load(Relaxed) && self.denied.swap(false, Relaxed) {
                state.denied();
            }
            let limit = state.sample(now_us, rtt_us, in_flight);
            if !state.probing() {
                // The probe ended, and the window with it: samples that
                // raced its start are not the next window's.
                self.clear();
            }
            self.publish(&state, limit);
        } else {
            self.fold(&mut state, now_us, Some((rtt_us, in_flight)));
        }
    }

    /// Folds the pending samples into `state`, then `last` (a latency and
    /// the requests in flight, of a sample ended at `now_us`) if given,
    /// and ends the window if it is due at `now_us`.
    fn fold(&self, state: &mut VegasState, now_us: u64, last: Option<(u64, u64)>) {
        if self.denied.load(Relaxed) && self.denied.swap(false, Relaxed) {
            state.denied();
        }
        let p = &self.pending;
        let start = p.start_us.swap(NONE, Relaxed);
        let sums = p.sums.swap(0, Relaxed);
        let in_flight = p.in_flight.swap(0, Relaxed);
        let samples = (sums >> COUNT_SHIFT) as u32;
        if samples > 0 {
            state.merge(start.min(now_us), sums & SUM_MASK, samples, in_flight);
        }
        if let Some((rtt_us, in_flight)) = last {
            state.merge(now_us, rtt_us, 1, in_flight);
        }
        let limit = state.close_if_due(now_us);
        match state.window() {
            // Not due yet: the window goes on from its first sample.
            (Some(start), samples) => {
                p.start_us.fetch_min(start, Relaxed);
                p.folded.store(u64::from(samples), Relaxed);
            }
            (None, _) => p.folded.store(0, Relaxed),
        }
        self.publish(state, limit);
    }

    /// Forgets the pending samples.
    fn clear(&self) {
        let p = &self.pending;
        p.start_us.store(NONE, Relaxed);
        p.sums.store(0, Relaxed);
        p.in_flight.store(0, Relaxed);
        p.folded.store(0, Relaxed);
    }

    /// What admissions and the next samples read of `state`.
    fn publish(&self, state: &VegasState, limit: u64) {
        self.limit.store(limit, Relaxed);
        self.probing.store(state.probing(), Relaxed);
    }
}

#[cfg(test)]
mod tests;
