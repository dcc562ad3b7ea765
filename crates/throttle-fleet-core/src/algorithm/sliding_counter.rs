use crate::{ConfigError, Quota};

use super::{Meter, Step};

/// Sliding window counter: counts per aligned window like [`FixedWindow`],
/// and estimates the sliding window as the current count plus the previous
/// window's count weighted by the part of the previous window still inside
/// the sliding window:
///
/// ```text
/// estimate = floor(prev * (period - elapsed) / period) + cur
/// admit if estimate + cost <= limit
/// ```
///
/// `elapsed` is the time since the current window began. Because `cur + cost
/// <= limit` whenever a cost is admitted, **no aligned window ever holds more
/// than `limit`**. Across a boundary it is much smoother than a fixed window,
/// but it is an estimate: it assumes the previous window's traffic was spread
/// evenly, so a sliding window can briefly hold more than `limit` (bounded by
/// `limit + ceil(prev * elapsed / period)`) or less.
///
/// The weight is computed in IEEE-754 doubles in exactly this order, by the
/// Rust code and by the Redis script alike, so both always agree.
///
/// [`FixedWindow`]: super::FixedWindow
///
/// ```
/// use throttle_fleet_core::{Quota, algorithm::{Meter, SlidingWindowCounter, SlidingWindowCounterState}};
///
/// let swc = SlidingWindowCounter::new(Quota::per_second(10)).unwrap();
/// let mut st = SlidingWindowCounterState::default();
/// for _ in 0..10 {
///     assert!(swc.acquire(&mut st, 500_000, 1).allowed); // window 0
/// }
/// // 30% into window 1 the previous ten still weigh floor(10 * 0.7) = 7.
/// let s = swc.acquire(&mut st, 1_300_000, 1);
/// assert!(s.allowed);
/// assert_eq!(s.remaining, 2);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowCounter {
    limit: u64,
    period_us: u64,
}

/// Per-key state of a [`SlidingWindowCounter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlidingWindowCounterState {
    /// The current window number (`now / period`).
    pub window: u64,
    /// Cost taken in the current window.
    pub cur: u64,
    /// Cost taken in the window before it.
    pub prev: u64,
}

/// `floor(prev * (period - elapsed) / period)`, in doubles, in this order.
#[inline]
pub(crate) fn weighted(prev: u64, period_us: u64, elapsed_us: u64) -> u64 {
    if prev == 0 {
        return 0;
    }
    ((prev as f64) * ((period_us - elapsed_us) as f64) / (period_us as f64)).floor() as u64
}

impl SlidingWindowCounter {
    /// Compiles the quota; a burst is rejected (the window is the burst).
    pub fn new(quota: Quota) -> Result<Self, ConfigError> {
        quota.validate(false)?;
        Ok(Self {
            limit: quota.limit(),
            period_us: quota.period_us(),
        })
    }

    /// The window length in microseconds.
    pub fn period_us(&self) -> u64 {
        self.period_us
    }

    /// Moves `st` to the window holding `now_us` (the previous count becomes
    /// `prev`, older counts are dropped).
    pub fn roll(&self, st: &mut SlidingWindowCounterState, now_us: u64) {
        let window = now_us / self.period_us;
        if window == st.window + 1 {
            *st = SlidingWindowCounterState {
                window,
                cur: 0,
                prev: st.cur,
            };
        } else if window > st.window + 1 {
            *st = SlidingWindowCounterState {
                window,
                cur: 0,
                prev: 0,
            };
        }
    }

    /// The smallest elapsed time in `[from, period)` at which the weighted
    /// `prev` is at most `room`, if any. The weight never grows with elapsed
    /// time, so a binary search finds the exact boundary.
    fn first_fit(&self, prev: u64, room: u64, from: u64) -> Option<u64> {
        let p = self.period_us;
        if from >= p || weighted(prev, p, p - 1) > room {
            return None;
        }
        if weighted(prev, p, from) <= room {
            return Some(from);
        }
        // Invariant: weight(lo) > room, weight(hi) <= room.
        let (mut lo, mut hi) = (from, p - 1);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if weighted(prev, p, mid) <= room {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }

    /// The report for a state already rolled to `now`'s window.
    pub fn report(
        &self,
        st: &SlidingWindowCounterState,
        now_us: u64,
        cost: u64,
        allowed: bool,
    ) -> Step {
        let p = self.period_us;
        let start = st.window * p;
        let elapsed = now_us - start;
        let estimate = weighted(st.prev, p, elapsed) + st.cur;
        // Back to the full allowance once the estimate is zero: when the
        // weighed count rounds down to nothing.
        let to_next = start + p - now_us;
        let reset_us = if st.cur > 0 {
            to_next + self.first_fit(st.cur, 0, 0).unwrap_or(p)
        } else if st.prev > 0 {
            self.first_fit(st.prev, 0, elapsed)
                .map_or(to_next, |at| at - elapsed)
        } else {
            0
        };
        let retry_after_us = if allowed {
            0
        } else if cost > self.limit {
            p
        } else {
            self.retry_after(st, elapsed, cost)
        };
        Step {
            allowed,
            remaining: self.limit.saturating_sub(estimate),
            reset_us,
            retry_after_us,
            delay_us: 0,
        }
    }

    fn retry_after(&self, st: &SlidingWindowCounterState, elapsed: u64, cost: u64) -> u64 {
        let p = self.period_us;
        // Later in this window, as the previous window's weight decays.
        if let Some(at) = self
            .limit
            .checked_sub(st.cur + cost)
            .and_then(|room| self.first_fit(st.prev, room, elapsed + 1))
        {
            return at - elapsed;
        }
        // In the next window, where today's count becomes the weighed one.
        let to_next = p - elapsed;
        match self.first_fit(st.cur, self.limit - cost, 0) {
            Some(at) => to_next + at,
            None => to_next + p,
        }
    }
}

impl Meter for SlidingWindowCounter {
    type State = SlidingWindowCounterState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn acquire(&self, st: &mut SlidingWindowCounterState, now_us: u64, cost: u64) -> Step {
        // A clock that stepped back is treated as standing still.
        let now_us = now_us.max(st.window * self.period_us);
        self.roll(st, now_us);
        let elapsed = now_us - st.window * self.period_us;
        // Saturating: a cost near u64::MAX must be denied, not wrap into a fit.
        let allowed = (weighted(st.prev, self.period_us, elapsed) + st.cur).saturating_add(cost)
            <= self.limit;
        if allowed {
            st.cur += cost;
        }
        self.report(st, now_us, cost, allowed)
    }

    fn refund(&self, st: &mut SlidingWindowCounterState, acquired_at_us: u64, cost: u64) {
        if st.window == acquired_at_us / self.period_us {
            st.cur = st.cur.saturating_sub(cost);
        }
    }

    fn idle_at(&self, st: &SlidingWindowCounterState) -> u64 {
        // The same instant `report` gives as the reset: when the weighed
        // count rounds down to nothing.
        let p = self.period_us;
        if st.cur > 0 {
            (st.window + 1) * p + self.first_fit(st.cur, 0, 0).unwrap_or(p)
        } else if st.prev > 0 {
            st.window * p + self.first_fit(st.prev, 0, 0).unwrap_or(p)
        } else {
            0
        }
    }
}
