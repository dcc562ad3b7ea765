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
mod tests {
    //! A flush's plan and a reply's effect as pure code: no Redis, no clock
    //! but the instants passed in.

    use throttle_fleet_core::Key;

    use super::{Planned, Planning, Write, apply, writes};
    use crate::approximate::claims::Reply;
    use crate::approximate::meter::{Known, SpanMeter, SpanState, Window, flag};
    use throttle_fleet_core::algorithm::SlidingWindowCounter;

    /// The start of an interval of the tests' rule (10 s, spans of 1 s).
    const T: u64 = 1_800_000_000_000_000;
    const SPAN: u64 = 1_000_000;
    const UP: Known = Known {
        redis_ok: true,
        fleet: 1,
    };

    fn span_end(now: u64) -> Planning {
        Planning {
            now,
            early: false,
            closing: false,
            fleet: 1,
        }
    }

    fn reply(spent: i64, claim: i64, free: i64) -> Reply {
        Reply {
            spent,
            claim,
            limit: 1_000,
            instances: 2,
            prev: 0,
            estimate: spent,
            rate: 0,
            free,
        }
    }

    /// A key that admitted `n` requests from `T`, one per millisecond.
    fn admitted(m: &SpanMeter, n: u64) -> SpanState {
        let mut st = SpanState::default();
        for i in 0..n {
            assert!(m.decide(&mut st, T + i * 1_000, 1, UP, false).0.allowed);
        }
        st
    }

    #[test]
    fn a_span_end_writes_the_count_and_demand_and_starts_the_demand_over() {
        let m = SpanMeter::for_tests();
        let mut st = admitted(&m, 10);
        let mut out = Vec::new();
        let planned = writes(&m, &Key::new("k"), &mut st, &span_end(T + SPAN), &mut out);
        assert_eq!(
            planned,
            Planned {
                carried: false,
                dropped: 0
            }
        );
        let [w] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert_eq!((w.interval, w.span, w.cum), (T / (10 * SPAN), 1, 10));
        assert_eq!(w.demand, 10, "ten requests over the span");
        // No entry yet: it holds no more than its credit (12).
        assert_eq!(w.hold, 12);
        assert_eq!((st.seen, st.since), (0, T + SPAN));
        assert!(!st.has(flag::LISTED));
    }

    #[test]
    fn a_write_holds_what_was_admitted_plus_an_eighth_of_the_demand() {
        let m = SpanMeter::for_tests();
        let mut st = SpanState::default();
        m.roll(&mut st, T);
        st.flags |= flag::ENTRY;
        st.claim = 500;
        for i in 0..200 {
            assert!(m.decide(&mut st, T + i * 1_000, 1, UP, false).0.allowed);
        }
        let w = written(&m, &mut st, T + SPAN);
        assert_eq!(w.demand, 200);
        assert_eq!(
            w.hold,
            200 + 200 / 8,
            "not the whole claim while the write is out"
        );
        assert_eq!(st.claim, w.hold);
    }

    #[test]
    fn an_early_flush_writes_only_the_keys_that_asked_and_keeps_their_demand() {
        let m = SpanMeter::for_tests();
        let mut quiet = admitted(&m, 3);
        let early = Planning {
            early: true,
            ..span_end(T + 5_000)
        };
        let mut out = Vec::new();
        assert!(writes(&m, &Key::new("quiet"), &mut quiet, &early, &mut out).carried);
        assert!(out.is_empty());
        let mut asking = admitted(&m, 12);
        let (_, asks) = m.decide(&mut asking, T + 20_000, 1, UP, false);
        assert!(asks.wait);
        let early = Planning {
            early: true,
            ..span_end(T + 21_000)
        };
        assert!(!writes(&m, &Key::new("asking"), &mut asking, &early, &mut out).carried);
        assert_eq!((out.len(), out[0].need, out[0].asked), (1, 1, true));
        assert_eq!(
            asking.seen, 13,
            "an early write does not cut the demand short"
        );
    }

    #[test]
    fn a_closing_rule_asks_for_nothing_and_gives_its_claim_back() {
        let m = SpanMeter::for_tests();
        let mut st = admitted(&m, 5);
        st.flags |= flag::ENTRY;
        st.claim = 40;
        let closing = Planning {
            closing: true,
            ..span_end(T + 100_000)
        };
        let mut out = Vec::new();
        writes(&m, &Key::new("k"), &mut st, &closing, &mut out);
        assert_eq!((out[0].demand, out[0].hold, out[0].need), (0, 5, 0));
    }

    fn written(m: &SpanMeter, st: &mut SpanState, now: u64) -> Write {
        let mut out = Vec::new();
        writes(m, &Key::new("k"), st, &span_end(now), &mut out);
        out.pop().unwrap()
    }

    #[test]
    fn a_reply_grants_a_claim_and_a_stale_one_changes_nothing() {
        let m = SpanMeter::for_tests();
        let mut st = admitted(&m, 10);
        let w = written(&m, &mut st, T + SPAN);
        let relist = apply(&m, &mut st, &w, &reply(30, 40, 500), 2, T + SPAN, None);
        assert!(relist, "a claim to renew or give back at the span end");
        assert_eq!((st.claim, st.spent, st.flushed, st.seq), (40, 30, 10, 2));
        assert!(st.has(flag::ENTRY | flag::LISTED));
        let before = st.clone();
        assert!(!apply(
            &m,
            &mut st,
            &w,
            &reply(99, 99, 0),
            1,
            T + SPAN,
            None
        ));
        assert_eq!(st, before, "an older flush's reply is not applied");
    }

    #[test]
    fn a_fleet_at_the_limit_blocks_the_key_until_the_interval_ends_or_the_cooldown() {
        let m = SpanMeter::for_tests();
        for (cooldown, until) in [(None, T + 10 * SPAN), (Some(3 * SPAN), T + 4 * SPAN)] {
            let mut st = admitted(&m, 10);
            let w = written(&m, &mut st, T + SPAN);
            apply(&m, &mut st, &w, &reply(1_000, 10, 0), 1, T + SPAN, cooldown);
            assert_eq!(st.full_until, until, "cooldown {cooldown:?}");
            assert_eq!(st.claim, st.local, "nothing more to spend");
        }
    }

    /// The quiet time after an asked write that was granted nothing, for
    /// the ask made at `asked` into the first span and answered 1 ms later.
    fn quiet_after(asked: u64) -> u64 {
        quiet_of(&SpanMeter::for_tests(), 0, asked)
    }

    /// The same with the meter `m`, the previous interval's total `prev`.
    fn quiet_of(m: &SpanMeter, prev: u32, asked: u64) -> u64 {
        let mut st = admitted(m, 12);
        st.prev_fleet = prev;
        let _ = m.decide(&mut st, T + asked, 1, UP, false);
        let mut out = Vec::new();
        let early = Planning {
            early: true,
            ..span_end(T + asked + 1_000)
        };
        writes(m, &Key::new("k"), &mut st, &early, &mut out);
        apply(
            m,
            &mut st,
            &out[0],
            &reply(500, 12, 0),
            1,
            T + asked + 2_000,
            None,
        );
        st.quiet_until
    }

    #[test]
    fn an_asked_write_granted_nothing_quiets_the_key_until_past_its_span_end() {
        assert_eq!(quiet_after(SPAN / 2), T + SPAN + SPAN / 5);
    }

    #[test]
    fn an_answer_before_the_others_wrote_at_the_span_start_quiets_only_until_they_have() {
        // The other instances' span-end writes land up to a fifth of a span
        // late, and may give back claims (a client that moved away): an
        // instance granted nothing before then asks again once they are in,
        // not a span later.
        assert_eq!(quiet_after(20_000), T + SPAN / 5);
        assert_eq!(quiet_after(SPAN / 5), T + SPAN + SPAN / 5);
    }

    #[test]
    fn a_sliding_window_quiets_a_key_until_its_room_has_grown_by_one() {
        let q = throttle_fleet_core::Quota::new(1_000, std::time::Duration::from_secs(10));
        let m = SpanMeter {
            window: Window::Sliding(SlidingWindowCounter::new(q).unwrap()),
            ..SpanMeter::for_tests()
        };
        let answered = T + SPAN / 2 + 2_000;
        // The previous interval's weight leaves room for one more every
        // interval / 40 = 250 ms.
        assert_eq!(quiet_of(&m, 40, SPAN / 2), answered + SPAN / 4);
        // Every 10 ms at 1,000: asked again a fifth of a span later at the
        // soonest.
        assert_eq!(quiet_of(&m, 1_000, SPAN / 2), answered + SPAN / 5);
        // Nothing from the previous interval: no room grows before the
        // span ends (the others' span-end writes).
        assert_eq!(quiet_of(&m, 0, SPAN / 2), T + SPAN);
    }

    #[test]
    fn the_previous_intervals_pending_count_is_cleared_by_its_reply() {
        let m = SpanMeter::for_tests();
        let mut st = admitted(&m, 10);
        // Rolled into the next interval before the last write.
        let mut out = Vec::new();
        writes(
            &m,
            &Key::new("k"),
            &mut st,
            &span_end(T + 10 * SPAN + 5),
            &mut out,
        );
        let pending = out
            .iter()
            .find(|w| w.interval == T / (10 * SPAN))
            .copied()
            .expect("the last interval's count is written");
        assert_eq!(pending.cum, 10);
        apply(
            &m,
            &mut st,
            &pending,
            &reply(700, 10, 0),
            1,
            T + 10 * SPAN + 9,
            None,
        );
        assert_eq!((st.pending, st.prev_fleet), (0, 700));
    }
}
