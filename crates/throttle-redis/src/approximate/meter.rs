//! The local decision: a pure state machine over per-key counts and what
//! the last flush said about the fleet.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use throttle_core::algorithm::{
    FixedWindow, FixedWindowState, Meter, SlidingWindowCounter, SlidingWindowCounterState, Step,
};

use super::shared::Shared;

/// The window code the fleet estimate is fed to.
#[derive(Debug, Clone, Copy)]
pub(super) enum Window {
    Fixed(FixedWindow),
    Sliding(SlidingWindowCounter),
}

/// The local decision of one rule: a pure state machine over the per-key
/// counts and what the last flush said about the fleet.
#[derive(Debug)]
pub(crate) struct SpanMeter {
    pub(super) window: Window,
    pub(super) limit: u64,
    pub(super) interval_us: u64,
    pub(super) spans: u64,
    /// Decide with the stricter per-span limit while Redis is unreachable.
    pub(super) strict_when_down: bool,
    pub(super) shared: Arc<Shared>,
}

/// Per-key state of the approximate mode.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SpanState {
    /// Interval number (`now / interval`).
    pub(super) interval: u64,
    /// Admitted here in this interval.
    pub(super) local: u64,
    /// Absolute span number (`interval * spans + span`), what this instance
    /// had admitted when it began and when the span before it began, and
    /// what it admitted in it.
    pub(super) span: u64,
    pub(super) at_span: u64,
    pub(super) at_prev_span: u64,
    pub(super) span_local: u64,
    /// The last successful flush: the count written, and this instance's
    /// count one span before it was taken.
    pub(super) flushed: u64,
    pub(super) flush_mine_prev: u64,
    /// The other instances' counts in that flush's reply: taken at the same
    /// span end (`a`), one span earlier (`b`), or earlier still (`c`).
    pub(super) others_a: u64,
    pub(super) others_b: u64,
    pub(super) others_c: u64,
    /// The fleet total of the previous interval, as best known.
    pub(super) prev_fleet: u64,
    /// Instances sharing this key, x1000 (0: not estimated yet).
    pub(super) nodes_milli: u64,
    /// Blocked until then by a flush reply over the quota.
    pub(super) blocked_until: u64,
    /// The previous interval's count, if it was not fully flushed.
    pub(super) pending_interval: u64,
    pub(super) pending_local: u64,
    /// `span + 1` of the last early flush (see [`ApproxRule::decide`]).
    pub(super) early_span: u64,
}

/// `others` counted when this instance had `mine`, extrapolated to now (when
/// it has `local`): every instance is assumed to grow in proportion.
pub(super) fn extrapolate(others: u64, mine: u64, local: u64) -> u64 {
    if others == 0 || mine == 0 {
        return others;
    }
    (u128::from(others) * u128::from(local) / u128::from(mine)) as u64
}

impl SpanState {
    pub(super) fn dirty(&self) -> bool {
        self.local != self.flushed || self.pending_local > 0
    }

    pub(super) fn nodes(&self) -> u64 {
        self.nodes_milli.max(1_000)
    }

    /// The fleet's count for this interval, estimated now: what the last
    /// flush said, brought forward; and never less than this instance's
    /// count times the node estimate (the only guide before the first
    /// flush of an interval, or while Redis is away).
    pub(super) fn fleet(&self) -> u64 {
        let heard = self.local
            + self.others_c
            + extrapolate(self.others_a, self.flushed, self.local)
            + extrapolate(self.others_b, self.flush_mine_prev, self.local);
        heard.max(self.local * self.nodes() / 1_000)
    }
}

impl SpanMeter {
    // Periods are at most 366 days (3.2e13 us) and spans at most 1000, so
    // these products fit in a u64.
    pub(super) fn span_of(&self, interval: u64, now_us: u64) -> u64 {
        let into = now_us - interval * self.interval_us;
        into * self.spans / self.interval_us
    }

    pub(super) fn span_end(&self, interval: u64, span: u64) -> u64 {
        interval * self.interval_us + (span + 1) * self.interval_us / self.spans
    }

    /// Moves the state to `now`'s interval and span; returns `now` (never
    /// before the state's interval, should the clock step back).
    pub(crate) fn roll(&self, st: &mut SpanState, now_us: u64) -> u64 {
        let now_us = now_us.max(st.interval * self.interval_us);
        let w = now_us / self.interval_us;
        if w > st.interval {
            if w == st.interval + 1 {
                if st.pending_local > 0 {
                    // Two intervals old and never sent: given up.
                    self.shared
                        .counters
                        .dropped
                        .fetch_add(st.pending_local, Ordering::Relaxed);
                    st.pending_local = 0;
                }
                if st.local != st.flushed {
                    st.pending_interval = st.interval;
                    st.pending_local = st.local;
                }
                st.prev_fleet = st.fleet();
            } else {
                // Counts of an interval long over: too late to matter.
                let lost = st.pending_local + st.local.saturating_sub(st.flushed);
                if lost > 0 {
                    self.shared
                        .counters
                        .dropped
                        .fetch_add(lost, Ordering::Relaxed);
                }
                st.prev_fleet = 0;
                st.pending_local = 0;
            }
            *st = SpanState {
                interval: w,
                span: w * self.spans,
                prev_fleet: st.prev_fleet,
                nodes_milli: st.nodes_milli,
                blocked_until: st.blocked_until,
                pending_interval: st.pending_interval,
                pending_local: st.pending_local,
                ..SpanState::default()
            };
        }
        let span = w * self.spans + self.span_of(w, now_us);
        if span != st.span {
            st.at_prev_span = if span == st.span + 1 {
                st.at_span
            } else {
                st.local
            };
            st.at_span = st.local;
            st.span = span;
            st.span_local = 0;
        }
        now_us
    }

    pub(super) fn deny(&self, retry_after_us: u64, reset_us: u64) -> Step {
        Step {
            allowed: false,
            remaining: 0,
            reset_us,
            retry_after_us: retry_after_us.max(1),
            delay_us: 0,
        }
    }
}

impl Meter for SpanMeter {
    type State = SpanState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn acquire(&self, st: &mut SpanState, now_us: u64, cost: u64) -> Step {
        let now = self.roll(st, now_us);
        let interval_end = (st.interval + 1) * self.interval_us;
        if now < st.blocked_until {
            return self.deny(st.blocked_until - now, st.blocked_until - now);
        }
        if self.strict_when_down && !self.shared.redis_ok.load(Ordering::Relaxed) {
            // Redis unreachable: no key may take more than its share of a span.
            let share = self.limit.div_ceil(self.spans);
            if (st.span_local + cost) * st.nodes() > share * 1_000 {
                let span_end = self.span_end(st.interval, st.span % self.spans);
                return self.deny(span_end - now, interval_end - now);
            }
        }
        let fleet = st.fleet();
        let step = match self.window {
            Window::Fixed(fw) => {
                let mut s = FixedWindowState {
                    window: st.interval,
                    count: fleet,
                };
                fw.acquire(&mut s, now, cost)
            }
            Window::Sliding(swc) => {
                let mut s = SlidingWindowCounterState {
                    window: st.interval,
                    cur: fleet,
                    prev: st.prev_fleet,
                };
                swc.acquire(&mut s, now, cost)
            }
        };
        if step.allowed {
            st.local += cost;
            st.span_local += cost;
        }
        step
    }

    fn release(&self, st: &mut SpanState, acquired_at_us: u64, cost: u64) {
        if st.interval == acquired_at_us / self.interval_us {
            // The next flush writes the lower cumulative count.
            st.local = st.local.saturating_sub(cost);
            st.span_local = st.span_local.saturating_sub(cost);
        }
    }

    fn idle_at(&self, st: &SpanState) -> u64 {
        if st.dirty() {
            return u64::MAX;
        }
        // The counts weigh until the next interval ends (sliding), and a
        // block until it lifts.
        ((st.interval + 2) * self.interval_us).max(st.blocked_until)
    }
}
