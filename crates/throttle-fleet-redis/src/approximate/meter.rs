//! The local decision over one key's counts and the claim the last flush
//! reply granted this instance: pure functions of the key's state, the
//! rule's settings and what the rule knows of Redis and the fleet
//! ([`Known`], read from `view.rs` by the caller), at the instant passed
//! in. The tests below drive them with no Redis and no clock.

use super::claims;
use throttle_fleet_core::algorithm::{
    FixedWindow, FixedWindowState, Meter, SlidingWindowCounter, SlidingWindowCounterState, Step,
};

/// The window code the fleet estimate is fed to (for the decision's
/// remaining count, reset and retry-after, the same figures the memory
/// backend reports).
#[derive(Debug, Clone, Copy)]
pub(super) enum Window {
    Fixed(FixedWindow),
    Sliding(SlidingWindowCounter),
}

/// The flags of a [`SpanState`].
pub(super) mod flag {
    /// A flush reply for this interval was applied: the key has an entry in
    /// Redis and spends its claim, not its credit.
    pub(crate) const ENTRY: u8 = 1;
    /// The key is in the rule's list of keys to write at the next flush.
    pub(crate) const LISTED: u8 = 2;
    /// The key ran out of claim and asked for an early flush.
    pub(crate) const WANTS: u8 = 4;
}

/// Per-key state of the approximate mode: 88 bytes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SpanState {
    /// Interval number (`now / interval`).
    pub(super) interval: u64,
    /// Denied locally until then (a flush showed the fleet over the quota).
    pub(super) full_until: u64,
    /// When the demand now in `seen` started being counted (local time):
    /// the last write, or the key's first request.
    pub(super) since: u64,
    /// No early flush before then (the last reply granted nothing).
    pub(super) quiet_until: u64,
    /// Admitted here in this interval.
    pub(super) local: u32,
    /// The count of the last write whose reply was applied.
    pub(super) flushed: u32,
    /// This instance may have admitted up to this in the interval while its
    /// claim is valid (up to the end of the span after `grant_span`).
    pub(super) claim: u32,
    /// The fleet's count in that reply, and how far behind it probably was
    /// (the other instances' entries brought forward by their demand).
    pub(super) spent: u32,
    pub(super) behind: u32,
    /// The other instances' demand in that reply (requests per span).
    pub(super) others_rate: u32,
    /// The fleet total of the previous interval, as best known.
    pub(super) prev_fleet: u32,
    /// The previous interval's count, not yet written (0: nothing pending).
    pub(super) pending: u32,
    /// Requests seen (admitted or not) since `since`: the demand.
    pub(super) seen: u32,
    /// Admitted here in this span (for the local fallback).
    pub(super) span_local: u32,
    /// Sequence number of the last applied reply.
    pub(super) seq: u32,
    /// The cost of the requests waiting for the next write's answer (the
    /// instance had no claim for them while the fleet had room): the next
    /// write asks for at least this much.
    pub(super) need: u32,
    /// The demand written, smoothed over the writes (requests per span,
    /// x8): a key seen a span ago is likely seen again, and keeps a claim
    /// for a few spans after its traffic stops.
    pub(super) rate8: u16,
    /// Span within the interval now, and of the claim's grant.
    pub(super) span: u16,
    pub(super) grant_span: u16,
    /// Instances that wrote this key, as of the last reply (0: none yet).
    pub(super) instances: u8,
    pub(super) flags: u8,
}

impl SpanState {
    pub(super) fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }

    /// Whether the claim still holds (its owner may spend it and Redis keeps
    /// it for it).
    pub(super) fn claim_valid(&self) -> bool {
        self.has(flag::ENTRY) && self.span <= self.grant_span.saturating_add(1)
    }

    /// The most this instance may have admitted in the interval right now.
    pub(super) fn ceiling(&self, credit: u32) -> u32 {
        if !self.has(flag::ENTRY) {
            credit
        } else if self.claim_valid() {
            self.claim
        } else {
            // An expired claim: a request waits for a new one.
            self.flushed
        }
        .max(self.local)
    }

    /// The fleet's count for this interval as known: the last reply plus
    /// what this instance admitted since.
    pub(super) fn heard(&self) -> u64 {
        u64::from(self.spent) + u64::from(self.local.saturating_sub(self.flushed))
    }

    /// Whether the next flush has something to say for this key.
    pub(super) fn dirty(&self) -> bool {
        self.local != self.flushed
            || self.pending > 0
            || self.seen > 0
            || (self.claim_valid() && self.claim > self.local)
    }
}

/// What a decision knows besides the key's state.
#[derive(Debug, Clone, Copy)]
pub(super) struct Known {
    /// Whether Redis answers for the key's bucket (its last flush got
    /// there, the one out is not overdue, its node's breaker is closed).
    pub(super) redis_ok: bool,
    /// The fleet's size as learnt from the replies (at least one).
    pub(super) fleet: u32,
}

/// What one decision asks of the rule besides its answer.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Asks {
    /// Put the key in the list of keys to write.
    pub(super) list: bool,
    /// Wake the flusher now: the key needs a claim before the span ends.
    pub(super) early: bool,
    /// Decided without Redis and without a claim (the failure policy's
    /// call); with `fail_closed()` the step is a denial to report as
    /// unavailable.
    pub(super) degraded: bool,
    /// Not decided: the fleet has room but this instance has no claim for
    /// it. The request waits for the next write's answer (the early flush
    /// this asks for) and is decided again then, with `retry`.
    pub(super) wait: bool,
    /// Counts given up as the key rolled to a new interval (for the
    /// rule's statistics).
    pub(super) dropped: u64,
}

/// The local decision of one rule.
#[derive(Debug)]
pub(crate) struct SpanMeter {
    pub(super) window: Window,
    pub(super) limit: u64,
    pub(super) interval_us: u64,
    pub(super) spans: u64,
    /// Decide with the stricter per-span limit while Redis is unreachable.
    pub(super) strict_when_down: bool,
    /// Refuse (as unavailable) what no claim covers while Redis is away.
    pub(super) closed_when_down: bool,
    /// The instances configured to share the quota (`RedisConfig::fleet_size`):
    /// while Redis is away, never fewer are assumed.
    pub(super) configured_fleet: u64,
}

/// `x` as a u32, saturating.
pub(super) fn sat32(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
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

    /// Just after the end of `now`'s span: when the span-end flush runs.
    pub(super) fn next_boundary(&self, now_us: u64) -> u64 {
        let w = now_us / self.interval_us;
        self.span_end(w, self.span_of(w, now_us)) + 200
    }

    pub(super) fn span_us(&self) -> u64 {
        self.interval_us / self.spans
    }

    /// What an instance may admit for a key before Redis has heard of it
    /// (`claims.rs`).
    pub(super) fn credit(&self, fleet: u32) -> u32 {
        sat32(claims::credit(self.limit, u64::from(fleet), self.spans))
    }

    /// The most a key's waiting requests may get per interval beyond what
    /// is free (`claims.rs`).
    pub(super) fn overdraft(&self) -> u64 {
        claims::overdraft(self.limit, self.spans)
    }

    /// The requests per span that `st.seen` stands for.
    pub(super) fn demand(&self, st: &SpanState, now_us: u64) -> u32 {
        if st.seen == 0 {
            return 0;
        }
        let span = self.span_us();
        // Seen since the last write (`since`), over at most a span (a key
        // idle for long is not thinned by its idle time). Over less than a
        // span (an early flush), the first request only opens the window:
        // the rate is that of the requests after it, over a tenth of a span
        // at least, and one request per span at the least.
        let elapsed = now_us.saturating_sub(st.since);
        let (seen, elapsed) = if elapsed >= span {
            (st.seen, span)
        } else {
            (st.seen - 1, elapsed.max(span / 10).max(1))
        };
        sat32((u128::from(seen) * u128::from(span) / u128::from(elapsed)) as u64).max(1)
    }

    /// The demand to write now (requests per span): what `st.seen` stands
    /// for, and at least one request while the demand written before,
    /// halved at each span's write, is not gone (a key seen a span ago is
    /// likely seen again: it keeps a small claim for a few spans, not a
    /// large one); in an early flush, at least the demand written before.
    pub(super) fn smoothed_demand(&self, st: &mut SpanState, now_us: u64, early: bool) -> u32 {
        let measured = self.demand(st, now_us);
        if early {
            // Part of a span only: it does not replace the demand seen over
            // the spans before.
            return measured.max(u32::from(st.rate8).div_ceil(8));
        }
        let rate8 = (u32::from(st.rate8) + measured.saturating_mul(8).min(u32::from(u16::MAX))) / 2;
        st.rate8 = rate8 as u16;
        measured.max(rate8.div_ceil(8).min(1))
    }

    /// Moves the state to `now`'s interval and span; returns `now` (never
    /// before the state's interval, should the clock step back) and the
    /// counts given up (of an interval that ended unwritten).
    pub(crate) fn roll(&self, st: &mut SpanState, now_us: u64) -> (u64, u64) {
        let now_us = now_us.max(st.interval * self.interval_us);
        let w = now_us / self.interval_us;
        let mut dropped = 0;
        if w > st.interval {
            // Two intervals old and never written: given up.
            dropped += u64::from(st.pending);
            let unwritten = st.local.saturating_sub(st.flushed);
            let (pending, prev_fleet) = if w == st.interval + 1 {
                (
                    if st.local != st.flushed { st.local } else { 0 },
                    sat32(st.heard()).max(st.local),
                )
            } else {
                // Counts of an interval long over: too late to matter.
                dropped += u64::from(unwritten);
                (0, 0)
            };
            *st = SpanState {
                interval: w,
                full_until: st.full_until,
                since: st.since,
                prev_fleet,
                pending,
                seen: st.seen,
                rate8: st.rate8,
                instances: st.instances,
                seq: st.seq,
                flags: st.flags & (flag::LISTED | flag::WANTS),
                ..SpanState::default()
            };
        }
        let span = self.span_of(w, now_us) as u16;
        if span != st.span {
            st.span = span;
            st.span_local = 0;
        }
        (now_us, dropped)
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

    /// The window's verdict on a fleet count of `fleet` (and the previous
    /// interval's `prev`) for `cost` more.
    pub(super) fn window_step(&self, st: &SpanState, now: u64, fleet: u64, cost: u64) -> Step {
        match self.window {
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
                    prev: u64::from(st.prev_fleet),
                };
                swc.acquire(&mut s, now, cost)
            }
        }
    }

    /// Checks and takes `cost` for a key; says what the rule must do next.
    /// `retry`: the request waited for a write's answer and is decided
    /// again (it does not wait twice, nor count twice as demand).
    pub(super) fn decide(
        &self,
        st: &mut SpanState,
        now_us: u64,
        cost: u64,
        known: Known,
        retry: bool,
    ) -> (Step, Asks) {
        let Known { redis_ok, fleet } = known;
        let (now, dropped) = self.roll(st, now_us);
        let mut asks = Asks {
            dropped,
            ..Asks::default()
        };
        if st.since == 0 {
            // Never written: its demand counts from its first request.
            st.since = now;
        }
        if !retry {
            st.seen = st.seen.saturating_add(1);
        }
        if now < st.full_until {
            // Counted as demand (for the claim asked when the fleet has room again),
            // nothing else: the denial path stays this short.
            return (self.deny(st.full_until - now, st.full_until - now), asks);
        }
        if !st.has(flag::LISTED) {
            st.flags |= flag::LISTED;
            asks.list = true;
        }
        let step = self.window_step(st, now, st.heard(), cost);
        let ceiling = u64::from(st.ceiling(self.credit(fleet)));
        let covered = u64::from(st.local) + cost <= ceiling;
        let step = if !step.allowed || (covered && (redis_ok || st.claim_valid())) {
            // Within the claim (it holds while Redis is away, too), or the
            // fleet is over the limit as last heard.
            step
        } else if redis_ok {
            // The fleet has room, but this instance's claim does not cover
            // the request. Unless a write has just shown that the other
            // instances hold the rest (or this request already waited),
            // it waits for a claim: asked now, in an early flush.
            if !retry && now >= st.quiet_until {
                if !st.has(flag::WANTS) {
                    st.flags |= flag::WANTS;
                    asks.early = true;
                }
                st.need = st.need.saturating_add(sat32(cost));
                asks.wait = true;
                return (step, asks);
            }
            let span_end = self.span_end(st.interval, u64::from(st.span));
            self.deny(span_end - now, step.reset_us)
        } else {
            asks.degraded = true;
            if self.closed_when_down {
                return (self.deny(self.span_us(), step.reset_us), asks);
            }
            self.degraded(st, now, cost, fleet)
        };
        if step.allowed {
            st.local = st.local.saturating_add(sat32(cost));
            st.span_local = st.span_local.saturating_add(sat32(cost));
        }
        (step, asks)
    }

    /// Redis unreachable and no claim left: decide on what was last heard,
    /// with the other instances brought forward at the demand they reported
    /// (not in proportion to this one), and never below this instance's
    /// count times the instances known. Under the local fallback,
    /// `remaining` is at most what this instance's shares of the interval
    /// and of the span still admit.
    fn degraded(&self, st: &SpanState, now: u64, cost: u64, fleet: u32) -> Step {
        let nodes = u64::from(st.instances.max(1))
            .max(if st.instances == 0 {
                u64::from(fleet)
            } else {
                1
            })
            .max(self.configured_fleet);
        let mut shares_left = u64::MAX;
        if self.strict_when_down {
            // No key may take more than this instance's share of the
            // interval, nor of a span (at least one request per span, so a
            // small share is spread over the interval).
            let span_share = (self.limit.div_ceil(self.spans) / nodes).max(1);
            let (local, span_local) = (u64::from(st.local) + cost, u64::from(st.span_local) + cost);
            if local * nodes > self.limit || span_local > span_share {
                let span_end = self.span_end(st.interval, u64::from(st.span));
                let interval_end = (st.interval + 1) * self.interval_us;
                return self.deny(span_end - now, interval_end - now);
            }
            shares_left = (self.limit / nodes - local).min(span_share - span_local);
        }
        let fleet = self.heard_now(st, now).max(u64::from(st.local) * nodes);
        let mut step = self.window_step(st, now, fleet, cost);
        step.remaining = step.remaining.min(shares_left);
        step
    }

    /// The fleet's count now as best guessed without Redis: the last reply,
    /// what this instance admitted since, and the others brought forward at
    /// the demand they reported.
    pub(super) fn heard_now(&self, st: &SpanState, now: u64) -> u64 {
        if !st.has(flag::ENTRY) {
            return st.heard();
        }
        let heard_at = st.interval * self.interval_us + u64::from(st.grant_span) * self.span_us();
        let since = now.saturating_sub(heard_at);
        let others = u128::from(st.others_rate) * u128::from(since) / u128::from(self.span_us());
        st.heard() + u64::from(st.behind) + u64::try_from(others).unwrap_or(u64::MAX / 2)
    }
}

impl Meter for SpanMeter {
    type State = SpanState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    /// The rule's limiter decides through [`decide`](SpanMeter::decide),
    /// with what it knows of Redis and the fleet; this path (the trait's,
    /// which the rule does not take) decides as if Redis answered and the
    /// fleet were its configured size, and never waits.
    fn acquire(&self, st: &mut SpanState, now_us: u64, cost: u64) -> Step {
        let known = Known {
            redis_ok: true,
            fleet: u32::try_from(self.configured_fleet).unwrap_or(u32::MAX),
        };
        self.decide(st, now_us, cost, known, true).0
    }

    fn refund(&self, st: &mut SpanState, acquired_at_us: u64, cost: u64) {
        if st.interval == acquired_at_us / self.interval_us {
            // The next flush writes the lower cumulative count.
            st.local = st.local.saturating_sub(sat32(cost));
            st.span_local = st.span_local.saturating_sub(sat32(cost));
        }
    }

    fn idle_at(&self, st: &SpanState) -> u64 {
        if st.dirty() || st.has(flag::LISTED) {
            return u64::MAX;
        }
        // The counts weigh until the next interval ends (sliding), and a
        // block until it lifts.
        ((st.interval + 2) * self.interval_us).max(st.full_until)
    }
}

#[cfg(test)]
mod tests;
