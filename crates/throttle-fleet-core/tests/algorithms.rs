//! The five algorithms, the rule set and the bounded memory backend, driven by
//! explicit microsecond timestamps (the meters are pure) and by a
//! [`ManualClock`] where a backend is involved. Nothing here sleeps or reads
//! the wall clock.

use std::time::Duration;

use throttle_fleet_core::algorithm::{
    FixedWindow, FixedWindowState, Gcra, GcraState, SlidingWindowCounter,
    SlidingWindowCounterState, SlidingWindowLog, SlidingWindowLogState,
};
use throttle_fleet_core::algorithm::{Meter, Step};
use throttle_fleet_core::decision::Kind;
use throttle_fleet_core::{
    Answer, Key, Quota, Rule, clock::Clock, clock::ManualClock, decision::Demand,
    memory::MemoryBackend, rule_set::RuleSet,
};

const MS: u64 = 1_000;
const S: u64 = 1_000_000;
/// 2023-11-14T22:00:00Z: a multiple of every period used here (1 s to 1 h),
/// so windows start exactly at `T0`.
const T0: u64 = 1_699_999_200 * S;

/// Checks `cost` at `now` on a copy of `st`, leaving `st` alone.
fn probe<M: Meter>(m: &M, st: &M::State, now: u64, cost: u64) -> Step
where
    M::State: Clone,
{
    m.acquire(&mut st.clone(), now, cost)
}

/// Asserts that `cost` at `now` from `st` is denied and that its
/// `retry_after_us` is exact: the same request is still denied one
/// microsecond earlier and allowed right on time, both from `st` and from the
/// state the denial left behind. Returns the wait.
fn exact_retry<M: Meter>(m: &M, st: &M::State, now: u64, cost: u64) -> u64
where
    M::State: Clone,
{
    let mut after = st.clone();
    let denied = m.acquire(&mut after, now, cost);
    assert!(!denied.allowed, "expected a denial at {now}: {denied:?}");
    let retry = denied.retry_after_us;
    assert!(retry > 0, "a denial must say to wait: {denied:?}");
    for from in [st, &after] {
        let early = probe(m, from, now + retry - 1, cost);
        assert!(
            !early.allowed,
            "allowed 1us before the retry of {retry}us: {early:?}"
        );
        let on_time = probe(m, from, now + retry, cost);
        assert!(
            on_time.allowed,
            "denied at the retry of {retry}us: {on_time:?}"
        );
    }
    retry
}

fn step(allowed: bool, remaining: u64, reset_us: u64, retry_after_us: u64) -> Step {
    Step {
        allowed,
        remaining,
        reset_us,
        retry_after_us,
        delay_us: 0,
    }
}

// ---------------------------------------------------------------------------
// Fixed window
// ---------------------------------------------------------------------------

fn fixed(limit: u64) -> FixedWindow {
    FixedWindow::new(Quota::per_second(limit)).unwrap()
}

#[test]
fn fixed_window_honours_the_quota_with_exact_remaining_and_reset() {
    let fw = fixed(5);
    assert_eq!(fw.capacity(), 5);
    let mut st = FixedWindowState::default();
    for (i, left) in (0..5).rev().enumerate() {
        let now = T0 + 100 * MS + i as u64;
        assert_eq!(
            fw.acquire(&mut st, now, 1),
            step(true, left, T0 + S - now, 0)
        );
    }
    let now = T0 + 700 * MS;
    assert_eq!(
        fw.acquire(&mut st, now, 1),
        step(false, 0, 300 * MS, 300 * MS)
    );
    assert_eq!(exact_retry(&fw, &st, now, 1), 300 * MS);
}

#[test]
fn fixed_window_resets_exactly_at_the_window_boundary() {
    let fw = fixed(5);
    let mut st = FixedWindowState::default();
    for _ in 0..5 {
        assert!(fw.acquire(&mut st, T0, 1).allowed);
    }
    assert!(!probe(&fw, &st, T0 + S - 1, 1).allowed);
    assert_eq!(fw.acquire(&mut st, T0 + S, 1), step(true, 4, S, 0));
    // A window that saw nothing reports no reset.
    assert_eq!(
        probe(&fw, &FixedWindowState::default(), T0, 5),
        step(true, 0, S, 0)
    );
    assert_eq!(
        probe(&fw, &FixedWindowState::default(), T0 + 3, 6).reset_us,
        0
    );
}

#[test]
fn fixed_window_weighs_cost() {
    let fw = fixed(5);
    let mut st = FixedWindowState::default();
    assert_eq!(fw.acquire(&mut st, T0, 3), step(true, 2, S, 0));
    let now = T0 + 250 * MS;
    assert_eq!(
        fw.acquire(&mut st, now, 3),
        step(false, 2, 750 * MS, 750 * MS)
    );
    assert_eq!(exact_retry(&fw, &st, now, 3), 750 * MS);
    assert_eq!(fw.acquire(&mut st, now, 2), step(true, 0, 750 * MS, 0));
    assert_eq!(exact_retry(&fw, &st, now, 1), 750 * MS);
}

#[test]
fn fixed_window_cost_above_capacity_is_denied_with_retry_of_one_period() {
    let fw = fixed(5);
    let mut st = FixedWindowState::default();
    assert_eq!(fw.acquire(&mut st, T0, 6), step(false, 5, 0, S));
    assert_eq!(fw.acquire(&mut st, T0, 5), step(true, 0, S, 0));
    assert_eq!(fw.acquire(&mut st, T0 + 1, 6), step(false, 0, S - 1, S));
}

#[test]
fn fixed_window_release_gives_cost_back_in_the_same_window_only() {
    let fw = fixed(5);
    let mut st = FixedWindowState::default();
    assert!(fw.acquire(&mut st, T0 + 10, 5).allowed);
    fw.refund(&mut st, T0 + 10, 2);
    assert_eq!(fw.acquire(&mut st, T0 + 20, 2), step(true, 0, S - 20, 0));
    assert!(!probe(&fw, &st, T0 + 20, 1).allowed);
    // Cost taken in a window that has ended is not given to the new one.
    assert!(fw.acquire(&mut st, T0 + S, 5).allowed);
    fw.refund(&mut st, T0 + 20, 2);
    assert!(!probe(&fw, &st, T0 + S + 1, 1).allowed);
}

// ---------------------------------------------------------------------------
// Sliding window log
// ---------------------------------------------------------------------------

fn log(limit: u64) -> SlidingWindowLog {
    SlidingWindowLog::new(Quota::per_second(limit)).unwrap()
}

#[test]
fn sliding_log_honours_the_quota_with_exact_remaining_and_reset() {
    let log = log(3);
    assert_eq!(log.capacity(), 3);
    let mut st = SlidingWindowLogState::default();
    for (i, left) in (0..3).rev().enumerate() {
        let now = T0 + 200 * MS * i as u64;
        // Reset: when the newest entry leaves, the window is empty again.
        assert_eq!(log.acquire(&mut st, now, 1), step(true, left, S, 0));
    }
    let now = T0 + 500 * MS;
    // The oldest entry (at T0) leaves at T0 + 1 s; the newest at T0 + 1.4 s.
    assert_eq!(
        log.acquire(&mut st, now, 1),
        step(false, 0, 900 * MS, 500 * MS)
    );
    assert_eq!(exact_retry(&log, &st, now, 1), 500 * MS);
}

#[test]
fn sliding_log_slides_exactly_at_each_entry_expiry() {
    let log = log(3);
    let mut st = SlidingWindowLogState::default();
    for at in [T0, T0 + 200 * MS, T0 + 400 * MS] {
        assert!(log.acquire(&mut st, at, 1).allowed);
    }
    // An entry admitted at t counts while now < t + period.
    assert!(!probe(&log, &st, T0 + S - 1, 1).allowed);
    assert_eq!(log.acquire(&mut st, T0 + S, 1), step(true, 0, S, 0));
    assert!(!probe(&log, &st, T0 + 1_200 * MS - 1, 1).allowed);
    assert!(log.acquire(&mut st, T0 + 1_200 * MS, 1).allowed);
    assert_eq!(
        exact_retry(&log, &st, T0 + 1_200 * MS, 1),
        200 * MS,
        "the entry at 400 ms leaves at 1.4 s"
    );
}

#[test]
fn sliding_log_weighs_cost_and_waits_for_enough_entries_to_leave() {
    let log = log(3);
    let mut st = SlidingWindowLogState::default();
    assert_eq!(log.acquire(&mut st, T0, 1), step(true, 2, S, 0));
    assert_eq!(log.acquire(&mut st, T0 + 100 * MS, 2), step(true, 0, S, 0));
    let now = T0 + 500 * MS;
    // One unit frees when the entry at 0 leaves (1 s), three when the one at
    // 100 ms leaves (1.1 s).
    assert_eq!(exact_retry(&log, &st, now, 1), 500 * MS);
    assert_eq!(exact_retry(&log, &st, now, 2), 600 * MS);
    assert_eq!(exact_retry(&log, &st, now, 3), 600 * MS);
    assert_eq!(
        log.acquire(&mut st, now, 2),
        step(false, 0, 600 * MS, 600 * MS)
    );
}

#[test]
fn sliding_log_cost_above_capacity_is_denied_with_retry_of_one_period() {
    let log = log(3);
    let mut st = SlidingWindowLogState::default();
    assert_eq!(log.acquire(&mut st, T0, 4), step(false, 3, 0, S));
    assert!(st.entries.is_empty());
    assert!(log.acquire(&mut st, T0, 1).allowed);
    assert_eq!(log.acquire(&mut st, T0 + 1, 4), step(false, 2, S - 1, S));
}

#[test]
fn sliding_log_release_gives_cost_back() {
    let log = log(3);
    let mut st = SlidingWindowLogState::default();
    assert!(log.acquire(&mut st, T0, 1).allowed);
    assert!(log.acquire(&mut st, T0 + 10, 2).allowed);
    log.refund(&mut st, T0 + 10, 2);
    assert_eq!(st.total, 1);
    assert_eq!(st.entries.len(), 1);
    assert_eq!(log.acquire(&mut st, T0 + 20, 2), step(true, 0, S, 0));
    // Part of a merged entry can be given back.
    log.refund(&mut st, T0 + 20, 1);
    assert_eq!(st.total, 2);
    assert_eq!(probe(&log, &st, T0 + 30, 1), step(true, 0, S, 0));
}

// ---------------------------------------------------------------------------
// Sliding window counter
// ---------------------------------------------------------------------------

fn counter(limit: u64) -> SlidingWindowCounter {
    SlidingWindowCounter::new(Quota::per_second(limit)).unwrap()
}

/// Reset of a one-second counter holding `cur` in the current window,
/// `to_next` before it ends: the count weighs nothing once
/// `cur * (1 s - e) < 1 s` in the next window, i.e. from
/// `e = 1 s - ceil(1 s / cur) + 1`.
fn counter_reset(to_next: u64, cur: u64) -> u64 {
    to_next + S - S.div_ceil(cur) + 1
}

#[test]
fn sliding_counter_honours_the_quota_with_exact_remaining_and_reset() {
    let swc = counter(10);
    assert_eq!(swc.capacity(), 10);
    let mut st = SlidingWindowCounterState::default();
    for left in (0..10).rev() {
        // Reset: the count weighs on into the next window, until the
        // weighed count rounds down to nothing.
        assert_eq!(
            swc.acquire(&mut st, T0 + 500 * MS, 1),
            step(true, left, counter_reset(500 * MS, 10 - left), 0)
        );
    }
    assert_eq!(counter_reset(500 * MS, 10), 1_400_001);
    // In the next window the ten weigh floor(10 * (1 - elapsed)): 10 at its
    // very start, 9 one microsecond later.
    let now = T0 + 500 * MS;
    assert_eq!(
        swc.acquire(&mut st, now, 1),
        step(false, 0, 1_400_001, 500 * MS + 1)
    );
    assert_eq!(exact_retry(&swc, &st, now, 1), 500 * MS + 1);
    assert!(!probe(&swc, &st, T0 + S, 1).allowed);
    // 30% into the next window the ten weigh floor(10 * 0.7) = 7.
    let now = T0 + 1_300 * MS;
    assert_eq!(swc.acquire(&mut st, now, 1), step(true, 2, 700 * MS + 1, 0));
    assert_eq!(
        swc.acquire(&mut st, now, 2),
        step(true, 0, 700 * MS + 666_667, 0)
    );
    // The weight drops to 6 a microsecond later.
    assert_eq!(exact_retry(&swc, &st, now, 1), 1);
}

#[test]
fn sliding_counter_weighs_cost_against_the_decaying_previous_window() {
    let swc = counter(10);
    let mut st = SlidingWindowCounterState::default();
    assert!(swc.acquire(&mut st, T0 + 900 * MS, 10).allowed);
    let now = T0 + 1_300 * MS;
    // The three weigh nothing from 666,667 us into the next window.
    assert_eq!(
        swc.acquire(&mut st, now, 3),
        step(true, 0, 700 * MS + 666_667, 0)
    );
    assert_eq!(
        swc.acquire(&mut st, now, 1),
        step(false, 0, 700 * MS + 666_667, 1)
    );
    // Two units fit once the previous ten weigh 5: just after 40%.
    assert_eq!(exact_retry(&swc, &st, now, 2), 100 * MS + 1);
    // Seven fit in this window once the ten weigh nothing: just after 90%.
    assert_eq!(exact_retry(&swc, &st, now, 7), 600 * MS + 1);
    // Eight never fit beside this window's three: in the next window, once
    // the three weigh at most 2 (one microsecond in).
    assert_eq!(exact_retry(&swc, &st, now, 8), 700 * MS + 1);
    // Ten need the three to weigh nothing: floor(3 * (1 - e)) = 0 for
    // e > 2/3, that is from 666_667 us.
    assert_eq!(exact_retry(&swc, &st, now, 10), 700 * MS + 666_667);
    // At most `limit` per aligned window, whatever the estimate.
    assert!(!probe(&swc, &st, T0 + 1_999 * MS, 8).allowed);
}

#[test]
fn sliding_counter_retry_can_be_the_very_start_of_the_next_window() {
    // 5,000 per millisecond: even at the last microsecond of a window the
    // previous one still weighs floor(5000 / 1000) = 5.
    let swc = SlidingWindowCounter::new(Quota::new(5_000, Duration::from_millis(1))).unwrap();
    let mut st = SlidingWindowCounterState::default();
    assert!(swc.acquire(&mut st, T0, 5_000).allowed);
    let now = T0 + 1_999;
    assert_eq!(swc.acquire(&mut st, now, 4_995), step(true, 0, 1_001, 0));
    // Two more never fit beside the five in this window, but at the start
    // of the next the 4,995 weigh 4,995 and leave room for exactly five.
    assert_eq!(exact_retry(&swc, &st, now, 2), 1);
    assert_eq!(exact_retry(&swc, &st, now, 5), 1);
    assert_eq!(exact_retry(&swc, &st, now, 6), 2);
}

#[test]
fn sliding_counter_forgets_everything_after_two_windows() {
    let swc = counter(10);
    let mut st = SlidingWindowCounterState::default();
    assert!(swc.acquire(&mut st, T0, 10).allowed);
    assert!(!probe(&swc, &st, T0 + S, 1).allowed);
    assert_eq!(
        probe(&swc, &st, T0 + 2 * S, 10),
        step(true, 0, counter_reset(S, 10), 0)
    );
    // Ten units weigh nothing from 900,001 us into the next window.
    assert_eq!(swc.idle_at(&st), T0 + S + 900_001);
}

#[test]
fn sliding_counter_cost_above_capacity_is_denied_with_retry_of_one_period() {
    let swc = counter(10);
    let mut st = SlidingWindowCounterState::default();
    assert_eq!(swc.acquire(&mut st, T0, 11), step(false, 10, 0, S));
    assert!(swc.acquire(&mut st, T0, 1).allowed);
    // One unit weighs nothing from the first microsecond of the next window.
    assert_eq!(swc.acquire(&mut st, T0 + 1, 11), step(false, 9, S, S));
}

#[test]
fn sliding_counter_release_gives_cost_back_in_the_same_window_only() {
    let swc = counter(10);
    let mut st = SlidingWindowCounterState::default();
    assert!(swc.acquire(&mut st, T0, 10).allowed);
    swc.refund(&mut st, T0, 4);
    assert_eq!(
        swc.acquire(&mut st, T0 + 1, 4),
        step(true, 0, counter_reset(S - 1, 10), 0)
    );
    swc.refund(&mut st, T0 - 1, 4);
    assert!(!probe(&swc, &st, T0 + 2, 1).allowed);
}

// ---------------------------------------------------------------------------
// Token bucket (GCRA)
// ---------------------------------------------------------------------------

#[test]
fn token_bucket_honours_the_quota_with_exact_remaining_and_reset() {
    // One token every 250 ms, four in the bucket.
    let tb = Gcra::token_bucket(Quota::per_second(4)).unwrap();
    assert_eq!(tb.capacity(), 4);
    let mut st = GcraState::default();
    for (i, left) in (0..4).rev().enumerate() {
        let full_in = 250 * MS * (i as u64 + 1);
        assert_eq!(tb.acquire(&mut st, T0, 1), step(true, left, full_in, 0));
    }
    assert_eq!(tb.acquire(&mut st, T0, 1), step(false, 0, S, 250 * MS));
    assert_eq!(exact_retry(&tb, &st, T0, 1), 250 * MS);
    // Refills one token per 250 ms, exactly.
    assert!(!probe(&tb, &st, T0 + 250 * MS - 1, 1).allowed);
    assert_eq!(tb.acquire(&mut st, T0 + 250 * MS, 1), step(true, 0, S, 0));
    assert_eq!(probe(&tb, &st, T0 + 750 * MS, 2), step(true, 0, S, 0));
    assert!(!probe(&tb, &st, T0 + 750 * MS - 1, 2).allowed);
    // Idle for a period: full again, and never more than full.
    assert_eq!(probe(&tb, &st, T0 + 10 * S, 4), step(true, 0, S, 0));
    assert!(!probe(&tb, &st, T0 + 10 * S, 5).allowed);
}

#[test]
fn token_bucket_weighs_cost() {
    let tb = Gcra::token_bucket(Quota::per_second(4)).unwrap();
    let mut st = GcraState::default();
    assert_eq!(tb.acquire(&mut st, T0, 3), step(true, 1, 750 * MS, 0));
    assert_eq!(
        tb.acquire(&mut st, T0 + 100 * MS, 2),
        step(false, 1, 650 * MS, 150 * MS)
    );
    assert_eq!(exact_retry(&tb, &st, T0 + 100 * MS, 2), 150 * MS);
    assert_eq!(exact_retry(&tb, &st, T0 + 100 * MS, 4), 650 * MS);
    assert_eq!(
        tb.acquire(&mut st, T0 + 100 * MS, 1),
        step(true, 0, 900 * MS, 0)
    );
}

#[test]
fn token_bucket_burst_is_the_capacity() {
    let tb = Gcra::token_bucket(Quota::per_second(4).with_burst(2)).unwrap();
    assert_eq!(tb.capacity(), 2);
    let mut st = GcraState::default();
    assert_eq!(tb.acquire(&mut st, T0, 3), step(false, 2, 0, S));
    assert_eq!(tb.acquire(&mut st, T0, 2), step(true, 0, 500 * MS, 0));
    assert_eq!(exact_retry(&tb, &st, T0, 1), 250 * MS);
    assert_eq!(
        tb.acquire(&mut st, T0 + 1, 3),
        step(false, 0, 500 * MS - 1, S)
    );

    // A larger burst than the rate: ten at once, then four per second.
    let tb = Gcra::token_bucket(Quota::per_second(4).with_burst(10)).unwrap();
    let mut st = GcraState::default();
    assert_eq!(tb.acquire(&mut st, T0, 10), step(true, 0, 2_500 * MS, 0));
    assert_eq!(exact_retry(&tb, &st, T0, 4), S);
}

#[test]
fn token_bucket_cost_above_capacity_is_denied_with_retry_of_one_period() {
    let tb = Gcra::token_bucket(Quota::per_second(4)).unwrap();
    let mut st = GcraState::default();
    assert_eq!(tb.acquire(&mut st, T0, 5), step(false, 4, 0, S));
    assert_eq!(st, GcraState::default());
}

#[test]
fn token_bucket_release_gives_cost_back() {
    let tb = Gcra::token_bucket(Quota::per_second(4)).unwrap();
    let mut st = GcraState::default();
    assert!(tb.acquire(&mut st, T0, 1).allowed);
    assert!(tb.acquire(&mut st, T0, 3).allowed);
    tb.refund(&mut st, T0, 3);
    assert_eq!(probe(&tb, &st, T0, 3), step(true, 0, S, 0));
    tb.refund(&mut st, T0, 1);
    // Back to a bucket that behaves like a fresh one.
    assert!(tb.idle_at(&st) <= T0);
    assert_eq!(probe(&tb, &st, T0, 4), step(true, 0, S, 0));
}

#[test]
fn gcra_three_per_second_does_not_drift() {
    // T = 333_333 1/3 us: rounding it either way would drift by a token
    // every few seconds. A client that always comes back exactly when told
    // gets two at once (the burst), then the k-th at ceil((k - 1) * T).
    let tb = Gcra::token_bucket(Quota::per_second(3).with_burst(2)).unwrap();
    let mut st = GcraState::default();
    let mut now = T0;
    for k in 0..=30_000u64 {
        let mut s = tb.acquire(&mut st, now, 1);
        if !s.allowed {
            now += exact_retry(&tb, &st, now, 1);
            s = tb.acquire(&mut st, now, 1);
        }
        assert!(s.allowed);
        let due = T0 + (k.saturating_sub(1) * S).div_ceil(3);
        assert_eq!(now, due, "token {k}");
    }
    // 30,001 in [0, 10,000 s): the burst plus exactly three a second; the
    // next one is due at exactly 10,000 s.
    assert_eq!(now, T0 + 9_999_666_667);
    assert_eq!(now + exact_retry(&tb, &st, now, 1), T0 + 10_000 * S);

    // A full bucket every second, for hours.
    let tb = Gcra::token_bucket(Quota::per_second(3)).unwrap();
    let mut st = GcraState::default();
    for n in 0..20_000u64 {
        let now = T0 + n * S;
        if n > 0 {
            assert!(
                !probe(&tb, &st, now - 1, 3).allowed,
                "second {n} came early"
            );
        }
        assert_eq!(
            tb.acquire(&mut st, now, 3),
            step(true, 0, S, 0),
            "second {n}"
        );
    }
}

#[test]
fn a_bucket_too_slow_to_represent_is_a_config_error_and_a_slow_one_is_exact() {
    let year = Duration::from_secs(366 * 86_400);
    let year_us = 366 * 86_400 * S;
    // A million years to fill: the TAT would not fit in a u64.
    let q = Quota::new(1, year).with_burst(1 << 20);
    assert_eq!(Gcra::token_bucket(q).unwrap_err().field(), "quota.burst");
    assert_eq!(Gcra::leaky_bucket(q).unwrap_err().field(), "quota.burst");
    let backend = MemoryBackend::with_clock(ManualClock::new(T0));
    let err = RuleSet::new()
        .bind(Rule::new("slow", q), &backend)
        .unwrap_err();
    assert_eq!((err.field(), err.rule()), ("quota.burst", Some("slow")));
    // A hundred thousand years still counts exactly.
    let tb = Gcra::token_bucket(Quota::new(1, year).with_burst(100_000)).unwrap();
    let mut st = GcraState::default();
    assert_eq!(
        tb.acquire(&mut st, T0, 50_000),
        step(true, 50_000, 50_000 * year_us, 0)
    );
    assert_eq!(
        tb.acquire(&mut st, T0, 50_000),
        step(true, 0, 100_000 * year_us, 0)
    );
    assert_eq!(exact_retry(&tb, &st, T0, 1), year_us);
}

// ---------------------------------------------------------------------------
// Leaky bucket (GCRA, shaping)
// ---------------------------------------------------------------------------

#[test]
fn leaky_bucket_spaces_admitted_requests_at_the_emission_interval() {
    // Drains one every 250 ms; at most three queued.
    let lb = Gcra::leaky_bucket(Quota::per_second(4).with_burst(3)).unwrap();
    assert!(lb.is_shaping());
    assert_eq!(lb.capacity(), 3);
    let mut st = GcraState::default();
    for (i, left) in (0..3).rev().enumerate() {
        let i = i as u64;
        let s = lb.acquire(&mut st, T0, 1);
        assert_eq!(
            s,
            Step {
                allowed: true,
                remaining: left,
                reset_us: 250 * MS * (i + 1),
                retry_after_us: 0,
                delay_us: 250 * MS * i,
            }
        );
    }
    // The queue is full: the next waits for a slot.
    assert_eq!(
        lb.acquire(&mut st, T0, 1),
        step(false, 0, 750 * MS, 250 * MS)
    );
    assert_eq!(exact_retry(&lb, &st, T0, 1), 250 * MS);
    // At 250 ms one has left; the newcomer leaves after the two queued.
    let s = lb.acquire(&mut st, T0 + 250 * MS, 1);
    assert!(s.allowed);
    assert_eq!(s.delay_us, 500 * MS, "departs at 750 ms");
    // An idle bucket lets a request through at once.
    assert_eq!(probe(&lb, &st, T0 + 5 * S, 1).delay_us, 0);
}

#[test]
fn leaky_bucket_weighs_cost_and_never_waits_more_than_the_burst() {
    let lb = Gcra::leaky_bucket(Quota::per_second(4).with_burst(3)).unwrap();
    let mut st = GcraState::default();
    let s = lb.acquire(&mut st, T0, 2);
    assert_eq!((s.allowed, s.delay_us, s.remaining), (true, 0, 1));
    let s = lb.acquire(&mut st, T0, 1);
    assert_eq!((s.allowed, s.delay_us, s.remaining), (true, 500 * MS, 0));
    assert_eq!(exact_retry(&lb, &st, T0, 2), 500 * MS);
    assert_eq!(lb.acquire(&mut st, T0, 4), step(false, 0, 750 * MS, S));
    // Saturated, every admitted request waits (burst - 1) intervals, no more.
    let mut now = T0;
    for _ in 0..100 {
        let s = lb.acquire(&mut st, now, 1);
        let s = if s.allowed {
            s
        } else {
            now += s.retry_after_us;
            lb.acquire(&mut st, now, 1)
        };
        assert!(s.allowed);
        assert_eq!(s.delay_us, 500 * MS);
    }
}

#[test]
fn leaky_bucket_departures_follow_an_exact_fractional_rate() {
    // Three per second, three queued: the k-th request leaves at ceil(k/3 s).
    let lb = Gcra::leaky_bucket(Quota::per_second(3)).unwrap();
    let mut st = GcraState::default();
    let mut now = T0;
    for k in 0..3_000u64 {
        let mut s = lb.acquire(&mut st, now, 1);
        if !s.allowed {
            let retry = exact_retry(&lb, &st, now, 1);
            now += retry;
            s = lb.acquire(&mut st, now, 1);
        }
        assert!(s.allowed);
        assert!(
            s.delay_us <= 666_667,
            "waited more than two intervals: {s:?}"
        );
        assert_eq!(now + s.delay_us, T0 + (k * S).div_ceil(3), "request {k}");
    }
}

#[test]
fn leaky_bucket_cost_above_capacity_and_release() {
    let lb = Gcra::leaky_bucket(Quota::per_second(4).with_burst(3)).unwrap();
    let mut st = GcraState::default();
    assert_eq!(lb.acquire(&mut st, T0, 4), step(false, 3, 0, S));
    assert!(lb.acquire(&mut st, T0, 3).allowed);
    lb.refund(&mut st, T0, 2);
    let s = probe(&lb, &st, T0, 2);
    assert_eq!((s.allowed, s.delay_us, s.remaining), (true, 250 * MS, 0));
}

// ---------------------------------------------------------------------------
// Across algorithms
// ---------------------------------------------------------------------------

/// Takes one unit, then asks for far more than could ever fit.
fn huge_cost_is_denied<M: Meter>(m: &M, period_us: u64)
where
    M::State: Clone + PartialEq,
{
    let mut st = M::State::default();
    assert!(m.acquire(&mut st, T0, 1).allowed);
    for cost in [m.capacity() + 1, u64::MAX / 2, u64::MAX] {
        let before = st.clone();
        let s = m.acquire(&mut st, T0 + 1, cost);
        assert!(!s.allowed, "cost {cost} admitted: {s:?}");
        assert_eq!(s.retry_after_us, period_us, "cost {cost}");
        assert!(st == before, "cost {cost} changed the state: {st:?}");
    }
    assert_eq!(m.acquire(&mut st, T0 + 1, 1).remaining, m.capacity() - 2);
}

#[test]
fn a_cost_beyond_capacity_never_fits_whatever_its_size() {
    let q = Quota::per_second(4);
    huge_cost_is_denied(&FixedWindow::new(q).unwrap(), S);
    huge_cost_is_denied(&SlidingWindowLog::new(q).unwrap(), S);
    huge_cost_is_denied(&SlidingWindowCounter::new(q).unwrap(), S);
    huge_cost_is_denied(&Gcra::token_bucket(q).unwrap(), S);
    huge_cost_is_denied(&Gcra::leaky_bucket(q).unwrap(), S);
}

#[test]
fn window_algorithms_reject_a_burst() {
    let q = Quota::per_second(4).with_burst(8);
    assert_eq!(FixedWindow::new(q).unwrap_err().field(), "quota.burst");
    assert_eq!(SlidingWindowLog::new(q).unwrap_err().field(), "quota.burst");
    assert_eq!(
        SlidingWindowCounter::new(q).unwrap_err().field(),
        "quota.burst"
    );
    assert!(Gcra::token_bucket(q).is_ok());
}

// ---------------------------------------------------------------------------
// Rule set on the memory backend
// ---------------------------------------------------------------------------

/// A decision's figures, with the limit its rule gives it.
#[derive(Debug)]
struct Got {
    rule: usize,
    limit: u64,
    remaining: u64,
    reset: Duration,
    retry_after: Duration,
    delay: Duration,
}

fn got(rules: &RuleSet, check: Answer, kind: Kind) -> Got {
    let Answer::Ready(checked) = check else {
        panic!("the memory backend decides at once")
    };
    let d = checked.decision();
    assert_eq!(d.kind(), kind, "{d:?}");
    let rule = d.rule().unwrap();
    Got {
        rule,
        limit: d.limit(rules.rule(rule)),
        remaining: d.remaining(),
        reset: d.reset(),
        retry_after: d.retry_after(),
        delay: d.delay(),
    }
}

fn allowed(rules: &RuleSet, check: Answer) -> Got {
    got(rules, check, Kind::Allowed)
}

fn denied(rules: &RuleSet, check: Answer) -> Got {
    got(rules, check, Kind::Denied)
}

fn demand(rule: usize, key: &str) -> Demand {
    Demand::new(rule, Key::new(key), 1)
}

#[test]
fn rule_set_reports_the_most_restrictive_rule_on_allow() {
    let clock = ManualClock::new(T0);
    let backend = MemoryBackend::with_clock(clock.clone());
    let mut rules = RuleSet::new();
    let ip = rules
        .bind(
            Rule::new("ip", Quota::per_minute(5)).fixed_window(),
            &backend,
        )
        .unwrap();
    let tenant = rules
        .bind(
            Rule::new("tenant", Quota::per_minute(3)).sliding_window_log(),
            &backend,
        )
        .unwrap();
    let both = [demand(ip, "10.0.0.1"), demand(tenant, "acme")];

    let a = allowed(&rules, rules.check(&both));
    assert_eq!(rules.rule(a.rule).name(), "tenant");
    assert_eq!((a.limit, a.remaining), (3, 2));
    assert_eq!(a.reset, Duration::from_secs(60));
    assert_eq!(a.delay, Duration::ZERO);

    // Alone, the ip rule reports its own figures.
    clock.advance(Duration::from_secs(1));
    let a = allowed(&rules, rules.check(&both[..1]));
    assert_eq!(rules.rule(a.rule).name(), "ip");
    assert_eq!((a.limit, a.remaining), (5, 3));
    assert_eq!(a.reset, Duration::from_secs(59));
}

#[test]
fn rule_set_reports_the_first_denial_in_rule_order() {
    let clock = ManualClock::new(T0);
    let backend = MemoryBackend::with_clock(clock.clone());
    let mut rules = RuleSet::new();
    let a = rules
        .bind(
            Rule::new("a", Quota::per_minute(1)).fixed_window(),
            &backend,
        )
        .unwrap();
    let b = rules
        .bind(Rule::new("b", Quota::per_second(1)), &backend)
        .unwrap();
    let both = [demand(a, "k"), demand(b, "k")];
    let first = allowed(&rules, rules.check(&both));
    assert_eq!(
        rules.rule(first.rule).name(),
        "a",
        "a tie goes to the first rule"
    );
    assert_eq!(first.remaining, 0);

    clock.advance(Duration::from_millis(400));
    let d = denied(&rules, rules.check(&both));
    assert_eq!(rules.rule(d.rule).name(), "a");
    assert_eq!((d.limit, d.remaining), (1, 0));
    assert_eq!(d.retry_after, Duration::from_millis(59_600));
    assert_eq!(d.reset, Duration::from_millis(59_600));
    let d = denied(&rules, rules.check(&both[1..]));
    assert_eq!(rules.rule(d.rule).name(), "b");
    assert_eq!(d.retry_after, Duration::from_millis(600));

    // Waiting for the advertised retry is enough, and not a microsecond less.
    clock.advance(Duration::from_micros(59_600_000 - 1));
    assert_eq!(
        denied(&rules, rules.check(&both)).retry_after,
        Duration::from_micros(1)
    );
    clock.advance(Duration::from_micros(1));
    allowed(&rules, rules.check(&both));
}

#[test]
fn a_denied_request_does_not_use_up_the_other_rules_quota() {
    for rule in [
        Rule::new("first", Quota::per_minute(4)).fixed_window(),
        Rule::new("first", Quota::per_minute(4)).sliding_window_log(),
        Rule::new("first", Quota::per_minute(4)).sliding_window_counter(),
        Rule::new("first", Quota::per_minute(4)).token_bucket(),
        Rule::new("first", Quota::per_minute(4)).leaky_bucket(),
    ] {
        let algorithm = rule.algorithm().name();
        let clock = ManualClock::new(T0);
        let backend = MemoryBackend::with_clock(clock.clone());
        let mut rules = RuleSet::new();
        let first = rules.bind(rule, &backend).unwrap();
        let gate = rules
            .bind(
                Rule::new("gate", Quota::per_minute(1)).fixed_window(),
                &backend,
            )
            .unwrap();
        let both = [demand(first, "k"), demand(gate, "k")];
        allowed(&rules, rules.check(&both));
        for _ in 0..10 {
            clock.advance(Duration::from_millis(1));
            assert_eq!(
                rules.rule(denied(&rules, rules.check(&both)).rule).name(),
                "gate",
                "{algorithm}"
            );
        }
        // Only the allowed request counted: 4 - 1 - this one.
        let a = allowed(&rules, rules.check(&both[..1]));
        assert_eq!(
            a.remaining, 2,
            "{algorithm}: denied requests kept their cost"
        );
    }
}

#[test]
fn rule_set_reports_the_longest_delay_of_a_leaky_bucket() {
    let clock = ManualClock::new(T0);
    let backend = MemoryBackend::with_clock(clock.clone());
    let mut rules = RuleSet::new();
    let shape = rules
        .bind(
            Rule::new("shape", Quota::per_second(10)).leaky_bucket(),
            &backend,
        )
        .unwrap();
    let narrow = rules
        .bind(
            Rule::new("narrow", Quota::per_minute(3)).fixed_window(),
            &backend,
        )
        .unwrap();
    let both = [demand(shape, "k"), demand(narrow, "k")];
    assert_eq!(allowed(&rules, rules.check(&both)).delay, Duration::ZERO);
    let a = allowed(&rules, rules.check(&both));
    assert_eq!(rules.rule(a.rule).name(), "narrow");
    assert_eq!(a.remaining, 1);
    assert_eq!(a.delay, Duration::from_millis(100));
}

#[test]
fn rule_set_weighs_each_demand_by_its_cost() {
    let clock = ManualClock::new(T0);
    let backend = MemoryBackend::with_clock(clock.clone());
    let mut rules = RuleSet::new();
    let tb = rules
        .bind(Rule::new("tokens", Quota::per_second(10)), &backend)
        .unwrap();
    let heavy = [Demand::new(tb, Key::new("k"), 7)];
    assert_eq!(allowed(&rules, rules.check(&heavy)).remaining, 3);
    let d = denied(&rules, rules.check(&heavy));
    assert_eq!(d.remaining, 3);
    assert_eq!(d.retry_after, Duration::from_millis(400));
}

#[test]
fn no_demand_means_unlimited() {
    let backend = MemoryBackend::with_clock(ManualClock::new(T0));
    let mut rules = RuleSet::new();
    rules
        .bind(Rule::new("ip", Quota::per_minute(1)), &backend)
        .unwrap();
    let Answer::Ready(checked) = rules.check(&[]) else {
        panic!("a local check completes at once");
    };
    assert_eq!(checked.decision().kind(), Kind::Unlimited);
    assert!(checked.decision().is_allowed());
    assert!(matches!(
        RuleSet::new().check(&[]),
        Answer::Ready(c) if c.decision().kind() == Kind::Unlimited
    ));
}

#[test]
fn rule_names_are_unique_within_a_set() {
    let backend = MemoryBackend::with_clock(ManualClock::new(T0));
    let mut rules = RuleSet::new();
    rules
        .bind(Rule::new("ip", Quota::per_minute(1)), &backend)
        .unwrap();
    let err = rules
        .bind(Rule::new("ip", Quota::per_minute(2)), &backend)
        .unwrap_err();
    assert_eq!((err.field(), err.rule()), ("name", Some("ip")));
    assert_eq!(rules.len(), 1);
}

// ---------------------------------------------------------------------------
// Memory backend bounds
// ---------------------------------------------------------------------------

/// Inserts `keys` distinct keys, `per_tick` at a time, advancing the clock by
/// `tick` between batches, and checks the bound all along.
fn tracks_at_most_max_keys<M: Meter>(
    meter: M,
    keys: u64,
    per_tick: u64,
    tick: Duration,
) -> throttle_fleet_core::memory::MemoryStats {
    let clock = ManualClock::new(T0);
    let backend = MemoryBackend::with_clock(clock.clone())
        .shards(16)
        .max_keys(1_000);
    let limiter = backend.limiter_for(meter).unwrap();
    for i in 0..keys {
        let outcome = limiter.check(&Key::from(i), 1);
        assert!(
            outcome.step.allowed,
            "a new key starts with a full allowance"
        );
        assert_eq!(outcome.at_us, clock.now_us());
        if i % 97 == 0 {
            let stats = limiter.stats();
            assert!(stats.tracked_keys <= 1_000, "{stats:?}");
        }
        if (i + 1) % per_tick == 0 {
            clock.advance(tick);
        }
    }
    let stats = limiter.stats();
    assert!(stats.tracked_keys <= stats.max_keys, "{stats:?}");
    assert!(stats.max_keys <= 1_000, "{stats:?}");
    stats
}

#[test]
fn memory_backend_never_tracks_more_than_max_keys() {
    let q = Quota::per_minute(5);
    // Every key stays busy for a minute: the table must evict.
    let busy = Duration::from_millis(1);
    let stats = tracks_at_most_max_keys(Gcra::token_bucket(q).unwrap(), 30_000, 100, busy);
    assert!(stats.evictions >= 25_000, "{stats:?}");
    assert!(stats.tracked_keys >= 900, "{stats:?}");
    tracks_at_most_max_keys(Gcra::leaky_bucket(q).unwrap(), 20_000, 100, busy);
    tracks_at_most_max_keys(FixedWindow::new(q).unwrap(), 20_000, 100, busy);
    tracks_at_most_max_keys(SlidingWindowLog::new(q).unwrap(), 20_000, 100, busy);
    tracks_at_most_max_keys(SlidingWindowCounter::new(q).unwrap(), 20_000, 100, busy);
}

#[test]
fn memory_backend_sweeps_idle_keys_before_evicting_busy_ones() {
    // 200 new keys a second, each idle a second later: the table never has
    // to forget a key that still counts.
    let stats = tracks_at_most_max_keys(
        FixedWindow::new(Quota::per_second(5)).unwrap(),
        20_000,
        200,
        Duration::from_secs(1),
    );
    assert_eq!(stats.evictions, 0, "{stats:?}");
}

#[test]
fn memory_backend_counts_per_key_on_its_clock() {
    let clock = ManualClock::new(T0);
    let backend = MemoryBackend::with_clock(clock.clone());
    let limiter = backend
        .limiter_for(SlidingWindowLog::new(Quota::per_second(2)).unwrap())
        .unwrap();
    let (a, b) = (Key::new("a"), Key::new("b"));
    assert!(limiter.check(&a, 2).step.allowed);
    assert!(!limiter.check(&a, 1).step.allowed);
    assert!(limiter.check(&b, 2).step.allowed, "keys are counted apart");
    clock.advance(Duration::from_micros(S - 1));
    assert_eq!(limiter.check(&a, 1).step.retry_after_us, 1);
    clock.advance(Duration::from_micros(1));
    assert!(limiter.check(&a, 1).step.allowed);
    assert_eq!(limiter.stats().tracked_keys, 2);
}

#[test]
fn memory_backend_rejects_impossible_bounds() {
    let backend = MemoryBackend::with_clock(ManualClock::new(T0))
        .shards(16)
        .max_keys(15);
    let err = backend
        .limiter_for(FixedWindow::new(Quota::per_second(1)).unwrap())
        .unwrap_err();
    assert_eq!(err.field(), "memory.max_keys");
    let err = MemoryBackend::with_clock(ManualClock::new(T0))
        .shards(24)
        .limiter_for(FixedWindow::new(Quota::per_second(1)).unwrap())
        .unwrap_err();
    assert_eq!(err.field(), "memory.shards");
    let mut rules = RuleSet::new();
    let err = rules
        .bind(Rule::new("ip", Quota::per_second(1)), &backend)
        .unwrap_err();
    assert_eq!((err.field(), err.rule()), ("memory.max_keys", Some("ip")));
}
