use crate::{ConfigError, Quota};

use super::{Meter, Step};

/// Fixed window: at most `limit` units of cost per window of `period`,
/// windows aligned on multiples of `period` since the Unix epoch (a
/// per-minute quota resets on the minute).
///
/// Boundary behaviour: a client can spend `limit` at the very end of one
/// window and `limit` again at the start of the next, so up to **2x `limit`
/// pass within a short time across a boundary**. The tests demonstrate it.
/// Use the sliding algorithms or a bucket where that matters.
///
/// ```
/// use throttle_fleet_core::{Quota, algorithm::{FixedWindow, FixedWindowState, Meter}};
///
/// let fw = FixedWindow::new(Quota::per_second(2)).unwrap();
/// let mut st = FixedWindowState::default();
/// let t = 10_000_000; // 10 s after the epoch: a window boundary
/// assert!(fw.acquire(&mut st, t, 1).allowed);
/// assert!(fw.acquire(&mut st, t + 1, 1).allowed);
/// let denied = fw.acquire(&mut st, t + 400_000, 1);
/// assert!(!denied.allowed);
/// assert_eq!(denied.retry_after_us, 600_000); // until the next window
/// assert!(fw.acquire(&mut st, t + 1_000_000, 1).allowed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    limit: u64,
    period_us: u64,
}

/// Per-key state of a [`FixedWindow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FixedWindowState {
    /// The window number (`now / period`) the count belongs to.
    pub window: u64,
    /// Cost taken in that window.
    pub count: u64,
}

impl FixedWindow {
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

    /// The report for a state (already rolled to `now`'s window).
    pub fn report(&self, state: &FixedWindowState, now_us: u64, cost: u64, allowed: bool) -> Step {
        let end = (state.window + 1) * self.period_us;
        let to_end = end.saturating_sub(now_us);
        let remaining = self.limit.saturating_sub(state.count);
        let retry_after_us = if allowed {
            0
        } else if cost > self.limit {
            self.period_us
        } else {
            to_end
        };
        Step {
            allowed,
            remaining,
            reset_us: if state.count == 0 { 0 } else { to_end },
            retry_after_us,
            delay_us: 0,
        }
    }
}

impl Meter for FixedWindow {
    type State = FixedWindowState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn acquire(&self, st: &mut FixedWindowState, now_us: u64, cost: u64) -> Step {
        // A clock that stepped back is treated as standing still.
        let now_us = now_us.max(st.window * self.period_us);
        let window = now_us / self.period_us;
        if st.window != window {
            *st = FixedWindowState { window, count: 0 };
        }
        // Saturating: a cost near u64::MAX must be denied, not wrap into a fit.
        let allowed = st.count.saturating_add(cost) <= self.limit;
        if allowed {
            st.count += cost;
        }
        self.report(st, now_us, cost, allowed)
    }

    fn refund(&self, st: &mut FixedWindowState, acquired_at_us: u64, cost: u64) {
        if st.window == acquired_at_us / self.period_us {
            st.count = st.count.saturating_sub(cost);
        }
    }

    fn idle_at(&self, st: &FixedWindowState) -> u64 {
        if st.count == 0 {
            0
        } else {
            (st.window + 1) * self.period_us
        }
    }
}
