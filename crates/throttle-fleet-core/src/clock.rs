//! Time sources: the system clock, the wall clock, and a manual clock that
//! moves only when told to (a simulation's time).
//!
//! Every algorithm counts in whole microseconds since the Unix epoch, so the
//! memory backend and the Redis scripts (which read Redis `TIME`) align
//! windows on the same boundaries.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of "now", in microseconds since the Unix epoch.
///
/// [`SystemClock`] and [`ManualClock`] never go backwards; [`WallClock`]
/// follows the wall clock and steps back when the system time is corrected.
/// The algorithms treat time that steps back as standing still.
pub trait Clock: Send + Sync + 'static {
    /// The current time in microseconds since the Unix epoch.
    fn now_us(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_us(&self) -> u64 {
        (**self).now_us()
    }
}

/// Microseconds since the Unix epoch, read from the wall clock.
pub(crate) fn unix_now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The wall clock itself, read on every call: what instances of a fleet
/// agree on (through NTP), so it numbers shared intervals. It can step back
/// when the system time is corrected; the algorithms treat time that steps
/// back as standing still.
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock;

impl Clock for WallClock {
    #[inline]
    fn now_us(&self) -> u64 {
        unix_now_us()
    }
}

/// The default clock: anchored to the wall clock once, then advanced by a
/// fast monotonic counter (TSC where available, via `quanta`), so it is cheap
/// to read and never jumps back when the wall clock is adjusted.
#[derive(Debug, Clone)]
pub struct SystemClock {
    anchor_us: u64,
    /// The counter's raw reading at `anchor_us`.
    start: u64,
    clock: quanta::Clock,
}

impl SystemClock {
    /// A clock anchored at the current wall-clock time.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let start = clock.raw();
        Self {
            anchor_us: unix_now_us(),
            start,
            clock,
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now_us(&self) -> u64 {
        // The raw counter scaled once (no `Duration` on the way): the
        // clock read of every check.
        let elapsed_ns = self.clock.delta_as_nanos(self.start, self.clock.raw());
        self.anchor_us + elapsed_ns / 1_000
    }
}

/// A clock that moves only when told to. Clones share the same time, so
/// one handed to a backend is advanced from outside (a simulation drives its
/// limiters so).
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_core::{clock::Clock, clock::ManualClock};
///
/// let clock = ManualClock::new(1_000_000);
/// let shared = clock.clone();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(shared.now_us(), 1_005_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `now_us` microseconds since the Unix epoch.
    pub fn new(now_us: u64) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(now_us)),
        }
    }

    /// Moves time forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(
            u64::try_from(by.as_micros()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }

    /// Sets the time; it must not go backwards, so an earlier value is ignored.
    pub fn set(&self, now_us: u64) {
        self.now.fetch_max(now_us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}
