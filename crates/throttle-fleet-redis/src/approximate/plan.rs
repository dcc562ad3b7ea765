//! What a flush writes for one key, and what its reply does to the key:
//! pure functions of the key's state, the rule's meter and what the rule
//! knows, at the instant passed in. `flush.rs` runs them under the store's
//! lock and does the I/O around them; the tests below drive them with no
//! Redis and no clock.

use throttle_fleet_core::Key;

use super::claims::Reply;
use super::meter::{SpanMeter, SpanState, Window, flag, sat32};

/// The margin a write holds beyond what the key has admitted while the
/// write is out: an eighth of its demand (at least a credit).
const HOLD_MARGIN: u32 = 8;

/// One key's entry to write.
#[derive(Debug, Clone, Copy)]
pub(super) struct Write {
    pub(super) key: Key,
    pub(super) interval: u64,
    /// Span within `interval` the write was made in.
    pub(super) span: u16,
    /// This instance's cumulative count.
    pub(super) cum: u32,
    /// The most it may admit before the reply is applied.
    pub(super) hold: u32,
    /// Requests per span.
    pub(super) demand: u32,
    /// The fleet's count as this instance last heard it.
    pub(super) known: u32,
    /// The cost of the requests waiting for this write's answer: the claim
    /// covers at least this much if the fleet has it free.
    pub(super) need: u32,
    /// Whether a request asked for this write (an early flush).
    pub(super) asked: bool,
}

/// The flush a plan is for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Planning {
    /// The rule's clock at the flush.
    pub(super) now: u64,
    /// An early flush (requests asked for it), not a span end.
    pub(super) early: bool,
    /// The rule is going away (its limiter dropped, or the backend shutting
    /// down): it asks for nothing and gives its claim back.
    pub(super) closing: bool,
    /// The fleet's size as learnt from the replies.
    pub(super) fleet: u32,
}

/// What planning a key's writes did besides the writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Planned {
    /// The key stays listed without a write.
    pub(super) carried: bool,
    /// Counts given up as the key rolled to a new interval.
    pub(super) dropped: u64,
}

/// The entries a flush writes for one key now, and resets its demand.
/// Returns whether the key stays listed without a write: blocked with
/// nothing new to say, it is carried to the flush after its block lifts,
/// which asks for a claim with the demand seen meanwhile (so the first
/// requests of the next interval need no early flush).
pub(super) fn writes(
    meter: &SpanMeter,
    key: &Key,
    st: &mut SpanState,
    at: &Planning,
    out: &mut Vec<Write>,
) -> Planned {
    let &Planning {
        now,
        early,
        closing,
        fleet,
    } = at;
    let (_, dropped) = meter.roll(st, now);
    let carried = Planned {
        carried: true,
        dropped,
    };
    if now < st.full_until && st.local == st.flushed && st.pending == 0 {
        return carried;
    }
    if early && !st.has(flag::WANTS) && st.need == 0 {
        // An early flush writes the keys that asked for it; the others
        // wait for the span's end (their claims hold until then, and a
        // moment's demand would shrink them).
        return carried;
    }
    let asked = st.has(flag::WANTS);
    st.flags &= !(flag::LISTED | flag::WANTS);
    if st.pending > 0 {
        out.push(Write {
            key: *key,
            interval: st.interval - 1,
            span: (meter.spans - 1) as u16,
            cum: st.pending,
            hold: st.pending,
            demand: 0,
            known: st.prev_fleet,
            need: 0,
            asked: false,
        });
    }
    // (A key with recent demand and no entry in this interval yet, just
    // rolled into it while it held a claim: it asks for a claim in the
    // new interval now, so that its next request need not wait.)
    let asks = st.rate8 > 0 && !st.has(flag::ENTRY);
    if st.local != st.flushed || st.seen > 0 || asks || (st.claim_valid() && st.claim > st.local) {
        // A rule that is going away (its limiter dropped, or the backend
        // shutting down) asks for nothing and gives its claim back.
        let demand = if closing {
            0
        } else {
            meter.smoothed_demand(st, now, early)
        };
        // While the write is out, this instance spends at most a little
        // more than it has (a flight takes milliseconds): the old claim
        // is not carried into the new one. Nothing seen since the last
        // write: all of it goes back (a request that comes later waits
        // for a claim).
        let credit = meter.credit(fleet);
        let margin = if closing || demand == 0 {
            0
        } else {
            credit.max(demand / HOLD_MARGIN)
        };
        let hold = st.ceiling(credit).min(st.local.saturating_add(margin));
        if st.claim_valid() {
            st.claim = st.claim.min(hold);
        }
        out.push(Write {
            key: *key,
            interval: st.interval,
            span: st.span,
            cum: st.local,
            hold,
            demand,
            known: sat32(st.heard()),
            need: if closing { 0 } else { st.need },
            asked,
        });
        st.need = 0;
        if !early {
            // The demand is counted from one span-end write to the
            // next: an early write in between does not cut it short.
            st.seen = 0;
            st.since = now;
        }
    }
    Planned {
        carried: false,
        dropped,
    }
}

/// Applies the reply `r` to the flush numbered `seq` of the write `w` to
/// the key's state at `now`; returns whether the key must be listed again
/// (it holds a claim to renew or give back at the span end, or is blocked
/// and carried to the flush after the block).
pub(super) fn apply(
    meter: &SpanMeter,
    st: &mut SpanState,
    w: &Write,
    r: &Reply,
    seq: u32,
    now: u64,
    cooldown_us: Option<u64>,
) -> bool {
    let [spent, claim, limit, instances, prev, estimate, rate, free] = r.as_u32();
    let instances = u8::try_from(instances).unwrap_or(u8::MAX);
    if st.interval == w.interval {
        if seq <= st.seq && st.has(flag::ENTRY) {
            return false;
        }
        st.seq = seq;
        st.flags |= flag::ENTRY;
        st.flushed = w.cum;
        st.claim = claim;
        st.grant_span = w.span;
        st.spent = spent;
        st.behind = estimate.saturating_sub(spent);
        st.others_rate = rate;
        st.instances = instances;
        st.prev_fleet = st.prev_fleet.max(prev);
        if spent >= limit {
            // No room left in the fleet: denied here without a
            // flush until the window can have room again.
            st.claim = st.local;
            st.seen = 0;
            st.since = now;
            st.full_until = match meter.window {
                Window::Fixed(_) => {
                    let end = (w.interval + 1) * meter.interval_us;
                    cooldown_us.map_or(end, |cd| now + cd)
                }
                // Until the window, as this instance knows it now,
                // has room for one more (its room grows with time),
                // at most until the span ends.
                Window::Sliding(_) => {
                    let step = meter.window_step(st, now, st.heard(), 1);
                    let end = meter.span_end(w.interval, u64::from(st.span));
                    if step.allowed {
                        0
                    } else {
                        (now + step.retry_after_us).min(end)
                    }
                }
            };
        } else if w.asked
            && (claim <= st.local || (free == 0 && matches!(meter.window, Window::Fixed(_))))
        {
            // Asked for, and nothing (or the last of what was free)
            // granted: other instances hold the rest, and asking
            // again before they flush at their span end gives
            // nothing more (a sliding window grows its room with
            // time: until the previous interval's weight has left
            // room for one more, at most the span end). Meanwhile requests this
            // instance has no claim for are denied, not kept
            // waiting for a Redis call that would deny them. The
            // others write at a span end up to a fifth of a span late
            // (their timers' phase), and may give back what a client
            // that moved away left them: an answer before then quiets
            // the key only until then.
            let span_end = meter.span_end(w.interval, u64::from(st.span));
            let settled = span_end - meter.span_us() + meter.span_us() / 5;
            st.quiet_until = if now < settled {
                settled
            } else {
                match meter.window {
                    Window::Fixed(_) => span_end + meter.span_us() / 5,
                    // Until the previous interval's weight has left
                    // room for one more (a fifth of a span at least).
                    Window::Sliding(_) => {
                        let grows = meter.interval_us / u64::from(st.prev_fleet).max(1);
                        span_end.min(now + grows.max(meter.span_us() / 5))
                    }
                }
            };
        }
        // Holding a claim: written again at the span end, to renew
        // it or give back all but a credit (which keeps a key seen in
        // the interval answering at once, and costs bytes in calls
        // made anyway); blocked: carried to the flush after the block.
        (st.claim > st.local || now < st.full_until) && !st.has(flag::LISTED) && {
            st.flags |= flag::LISTED;
            true
        }
    } else {
        if st.interval == w.interval + 1 && st.pending == w.cum {
            st.pending = 0;
            st.prev_fleet = st.prev_fleet.max(spent);
        }
        false
    }
}

#[cfg(test)]
mod tests;
