use std::time::Duration;

use crate::{ConfigError, Quota};

use super::{Meter, Step};

/// Concurrency: at most `limit` units of cost *in flight* per key at once.
/// A request takes its cost when it is admitted and gives it back when it
/// ends ([`Meter::refund`]); there is no window and nothing refills with
/// time.
///
/// What its [`Step`]s say, for a rule that has no window:
///
/// | field | meaning |
/// |---|---|
/// | `remaining` | slots free after this request took its own (`limit` − in flight) |
/// | `reset_us` | 0 when allowed (nothing to wait for); [`RETRY_AFTER`](Self::RETRY_AFTER) when denied |
/// | `retry_after_us` | [`RETRY_AFTER`](Self::RETRY_AFTER) when denied: a slot comes back whenever a running request ends, which no clock can tell, so the shortest wait a `Retry-After` header can say |
///
/// ```
/// use throttle_fleet_core::{Quota, algorithm::{Concurrency, InFlight, Meter}};
///
/// let c = Concurrency::new(Quota::in_flight(2)).unwrap();
/// let mut st = InFlight::default();
/// assert!(c.acquire(&mut st, 0, 1).allowed);
/// assert_eq!(c.acquire(&mut st, 0, 1).remaining, 0);
/// let denied = c.acquire(&mut st, 0, 1);
/// assert!(!denied.allowed);
/// assert_eq!(denied.retry_after_us, 1_000_000);
/// c.refund(&mut st, 0, 1); // one request ended
/// assert!(c.acquire(&mut st, 0, 1).allowed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    limit: u64,
}

/// Per-key state of a [`Concurrency`] meter: the cost in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InFlight(pub u64);

impl Concurrency {
    /// The wait a denial reports (`Retry-After: 1`).
    pub const RETRY_AFTER: Duration = Duration::from_secs(1);

    const RETRY_AFTER_US: u64 = Self::RETRY_AFTER.as_micros() as u64;

    /// Compiles the quota: its limit is the number of slots; its period is
    /// not used.
    pub fn new(quota: Quota) -> Result<Self, ConfigError> {
        quota.validate(false)?;
        Ok(Self {
            limit: quota.limit(),
        })
    }

    /// The step for `in_flight` after a check that `allowed` or not.
    #[inline]
    pub fn report(&self, in_flight: u64, allowed: bool) -> Step {
        self.report_under(self.limit, in_flight, allowed)
    }

    /// The step for `in_flight` after a check under `limit` (a class's
    /// share, an adaptive limit) that `allowed` or not: `remaining` counts
    /// from `limit`.
    #[inline]
    pub fn report_under(&self, limit: u64, in_flight: u64, allowed: bool) -> Step {
        let wait = if allowed { 0 } else { Self::RETRY_AFTER_US };
        Step {
            allowed,
            remaining: limit.min(self.limit).saturating_sub(in_flight),
            reset_us: wait,
            retry_after_us: wait,
            delay_us: 0,
        }
    }
}

impl Meter for Concurrency {
    type State = InFlight;

    fn capacity(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn acquire(&self, st: &mut InFlight, now_us: u64, cost: u64) -> Step {
        self.acquire_under(st, now_us, cost, self.limit)
    }

    const TAKES_A_LIMIT: bool = true;

    #[inline]
    fn acquire_under(&self, st: &mut InFlight, _now_us: u64, cost: u64, limit: u64) -> Step {
        let limit = limit.min(self.limit);
        // Saturating: a cost near u64::MAX must be denied, not wrap into a fit.
        let allowed = st.0.saturating_add(cost) <= limit;
        if allowed {
            st.0 += cost;
        }
        self.report_under(limit, st.0, allowed)
    }

    /// The request ended: its slots come back, whenever it was admitted.
    fn refund(&self, st: &mut InFlight, _acquired_at_us: u64, cost: u64) {
        st.0 = st.0.saturating_sub(cost);
    }

    /// A key with requests in flight is never idle: forgetting it would
    /// forget its slots.
    fn idle_at(&self, st: &InFlight) -> u64 {
        if st.0 == 0 { 0 } else { u64::MAX }
    }

    /// The count in flight is the word: every state packs.
    fn packs(&self) -> bool {
        true
    }

    #[inline]
    fn pack(&self, st: &InFlight, _epoch_us: u64) -> u64 {
        st.0
    }

    #[inline]
    fn unpack(&self, word: u64, _epoch_us: u64) -> InFlight {
        InFlight(word)
    }
}

#[cfg(test)]
mod tests;
