use std::collections::VecDeque;

use crate::{ConfigError, Quota};

use super::{Meter, Step};

/// Sliding window log: remembers when each admitted request happened and
/// admits a cost only if the costs admitted in the last `period` plus this
/// one stay within `limit`. Exact: **no window of length `period`, wherever
/// it starts, ever holds more than `limit`**.
///
/// An entry admitted at `t` counts while `now < t + period`. The state holds
/// one entry per admitted request still inside the window, so memory and the
/// time to compute a retry grow with `limit`: use it for small, strict limits
/// (logins, payments), and a counter or bucket for large ones.
///
/// ```
/// use throttle_fleet_core::{Quota, algorithm::{Meter, SlidingWindowLog, SlidingWindowLogState}};
///
/// let log = SlidingWindowLog::new(Quota::per_second(2)).unwrap();
/// let mut st = SlidingWindowLogState::default();
/// assert!(log.acquire(&mut st, 0, 1).allowed);
/// assert!(log.acquire(&mut st, 600_000, 1).allowed);
/// let d = log.acquire(&mut st, 900_000, 1);
/// assert!(!d.allowed);
/// assert_eq!(d.retry_after_us, 100_000); // the entry at 0 leaves at 1 s
/// assert!(log.acquire(&mut st, 1_000_000, 1).allowed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowLog {
    limit: u64,
    period_us: u64,
}

/// Per-key state of a [`SlidingWindowLog`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlidingWindowLogState {
    /// `(admitted at, cost)` in time order.
    pub entries: VecDeque<(u64, u64)>,
    /// Sum of the entries' costs.
    pub total: u64,
}

impl SlidingWindowLog {
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

    fn expire(&self, st: &mut SlidingWindowLogState, now_us: u64) {
        while let Some(&(at, cost)) = st.entries.front() {
            if at + self.period_us > now_us {
                break;
            }
            st.entries.pop_front();
            st.total -= cost;
        }
    }
}

impl Meter for SlidingWindowLog {
    type State = SlidingWindowLogState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn acquire(&self, st: &mut SlidingWindowLogState, now_us: u64, cost: u64) -> Step {
        // A clock that stepped back is treated as standing still.
        let now = st.entries.back().map_or(now_us, |&(at, _)| now_us.max(at));
        self.expire(st, now);
        // Saturating: a cost near u64::MAX must be denied, not wrap into a fit.
        let allowed = st.total.saturating_add(cost) <= self.limit;
        let mut retry_after_us = 0;
        if allowed {
            match st.entries.back_mut() {
                Some((at, c)) if *at == now => *c += cost,
                _ => st.entries.push_back((now, cost)),
            }
            st.total += cost;
        } else if cost > self.limit {
            retry_after_us = self.period_us;
        } else {
            let need = st.total + cost - self.limit;
            let mut freed = 0;
            for &(at, c) in &st.entries {
                freed += c;
                if freed >= need {
                    retry_after_us = at + self.period_us - now;
                    break;
                }
            }
        }
        Step {
            allowed,
            remaining: self.limit - st.total.min(self.limit),
            reset_us: st
                .entries
                .back()
                .map_or(0, |&(at, _)| at + self.period_us - now),
            retry_after_us,
            delay_us: 0,
        }
    }

    fn refund(&self, st: &mut SlidingWindowLogState, acquired_at_us: u64, cost: u64) {
        if let Some(i) = st.entries.iter().rposition(|&(at, _)| at == acquired_at_us) {
            let entry = &mut st.entries[i];
            let give = cost.min(entry.1);
            entry.1 -= give;
            st.total -= give;
            if entry.1 == 0 {
                st.entries.remove(i);
            }
        }
    }

    fn idle_at(&self, st: &SlidingWindowLogState) -> u64 {
        st.entries.back().map_or(0, |&(at, _)| at + self.period_us)
    }
}
