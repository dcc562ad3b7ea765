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
    let m = crate::approximate::tests::span_meter();
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
    let m = crate::approximate::tests::span_meter();
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
    let m = crate::approximate::tests::span_meter();
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
    let m = crate::approximate::tests::span_meter();
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
    let m = crate::approximate::tests::span_meter();
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
    let m = crate::approximate::tests::span_meter();
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
    quiet_of(&crate::approximate::tests::span_meter(), 0, asked)
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
        ..crate::approximate::tests::span_meter()
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
    let m = crate::approximate::tests::span_meter();
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
