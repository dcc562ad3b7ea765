//! The per-key transitions as pure code: no Redis, no clock but the
//! instants passed in.

use super::{Known, SpanMeter, SpanState, flag};

const T: u64 = 1_800_000_000_000_000;
/// Redis answers; a fleet of one.
const UP: Known = Known {
    redis_ok: true,
    fleet: 1,
};
/// Redis does not answer.
const DOWN: Known = Known {
    redis_ok: false,
    fleet: 1,
};
const SPAN: u64 = 1_000_000;

fn meter() -> SpanMeter {
    crate::approximate::tests::span_meter()
}

#[test]
fn per_key_state_stays_under_96_bytes() {
    assert!(std::mem::size_of::<SpanState>() <= 88);
}

#[test]
fn a_new_key_spends_its_credit_then_waits_for_a_claim() {
    let m = meter();
    let mut st = SpanState::default();
    assert_eq!(m.credit(1), 12, "an eighth of a span's share, fleet of one");
    for i in 0..12 {
        let (step, asks) = m.decide(&mut st, T + i, 1, UP, false);
        assert!(step.allowed && !asks.wait, "request {i}");
    }
    let (_, asks) = m.decide(&mut st, T + 20, 1, UP, false);
    assert!(asks.wait && asks.early, "the 13th waits and asks: {asks:?}");
    assert_eq!((st.local, st.need), (12, 1));
    assert!(st.has(flag::WANTS));
    // Asked once: the next one waits for the same flush.
    let (_, asks) = m.decide(&mut st, T + 21, 1, UP, false);
    assert!(asks.wait && !asks.early);
    assert_eq!(st.need, 2);
}

#[test]
fn a_claim_is_spent_then_a_request_waits_and_is_denied_after_its_wait() {
    let m = meter();
    let mut st = SpanState::default();
    m.roll(&mut st, T);
    st.flags |= flag::ENTRY;
    st.claim = 30;
    st.flushed = 0;
    for _ in 0..30 {
        assert!(m.decide(&mut st, T + 10, 1, UP, false).0.allowed);
    }
    let (_, asks) = m.decide(&mut st, T + 10, 1, UP, false);
    assert!(asks.wait);
    // The answer granted nothing more: decided again, denied, told to
    // come back at the span end.
    let (step, asks) = m.decide(&mut st, T + 10, 1, UP, true);
    assert!(!step.allowed && !asks.wait);
    assert_eq!(step.retry_after_us, SPAN - 10);
}

#[test]
fn a_quiet_key_is_denied_without_waiting() {
    let m = meter();
    let mut st = SpanState::default();
    m.roll(&mut st, T);
    st.flags |= flag::ENTRY;
    st.quiet_until = T + SPAN;
    let (step, asks) = m.decide(&mut st, T + 10, 1, UP, false);
    assert!(!step.allowed && !asks.wait && !asks.early);
}

#[test]
fn a_fleet_at_the_limit_as_heard_denies_at_once() {
    let m = meter();
    let mut st = SpanState::default();
    m.roll(&mut st, T);
    st.flags |= flag::ENTRY;
    st.spent = 1_000;
    let (step, asks) = m.decide(&mut st, T + 10, 1, UP, false);
    assert!(!step.allowed && !asks.wait && !asks.degraded);
}

#[test]
fn without_redis_a_fail_closed_key_without_a_claim_is_refused() {
    let m = meter();
    let mut st = SpanState::default();
    // Even within its credit: a new key follows the failure policy.
    let (step, asks) = m.decide(&mut st, T, 1, DOWN, false);
    assert!(!step.allowed && asks.degraded && !asks.wait);
}

#[test]
fn a_valid_claim_is_spent_while_redis_is_away() {
    let m = meter();
    let mut st = SpanState::default();
    m.roll(&mut st, T);
    st.flags |= flag::ENTRY;
    st.claim = 5;
    let (step, asks) = m.decide(&mut st, T + 10, 1, DOWN, false);
    assert!(step.allowed && !asks.degraded);
}

#[test]
fn rolling_to_the_next_interval_keeps_what_is_unwritten() {
    let m = meter();
    let mut st = SpanState::default();
    m.roll(&mut st, T);
    st.flags |= flag::ENTRY | flag::LISTED;
    (st.local, st.flushed, st.spent) = (40, 30, 700);
    let (now, dropped) = m.roll(&mut st, T + 10 * SPAN + 5);
    assert_eq!((now, dropped), (T + 10 * SPAN + 5, 0));
    assert_eq!((st.pending, st.local, st.claim), (40, 0, 0));
    assert_eq!(
        st.prev_fleet, 710,
        "heard: the reply plus what was admitted since"
    );
    assert!(!st.has(flag::ENTRY) && st.has(flag::LISTED));
    // Two intervals on, unwritten counts are given up.
    let (_, dropped) = m.roll(&mut st, T + 30 * SPAN);
    assert_eq!(dropped, 40);
}

#[test]
fn demand_counts_from_one_span_end_write_to_the_next() {
    let m = meter();
    let mut st = SpanState {
        since: T,
        seen: 20,
        ..SpanState::default()
    };
    // An early write half a span in: the first request opens the
    // window, the rest is a rate; the smoothing is not touched.
    assert_eq!(m.smoothed_demand(&mut st, T + SPAN / 2, true), 38);
    assert_eq!(st.rate8, 0);
    // At the span end: the span's count, and the smoothing moves.
    assert_eq!(m.smoothed_demand(&mut st, T + SPAN, false), 20);
    assert_eq!(st.rate8, 80);
    // Nothing seen a span later: a key seen recently keeps demand 1.
    st.seen = 0;
    assert_eq!(m.smoothed_demand(&mut st, T + 2 * SPAN, false), 1);
    assert_eq!(st.rate8, 40);
}
