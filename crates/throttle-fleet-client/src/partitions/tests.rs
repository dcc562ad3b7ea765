use std::time::Duration;

use tokio::time::Instant;

use proptest::prelude::*;

use super::*;

fn told(remaining: Option<u64>, wait: Option<u64>, limit: Option<u64>) -> Told {
    Told {
        remaining,
        wait: wait.map(Duration::from_secs),
        limit,
        ..Told::default()
    }
}

#[test]
fn untold_partitions_let_everything_go() {
    let mut gate = Gate::default();
    let now = Instant::now();
    for _ in 0..100 {
        assert_eq!(gate.turn(now, None), Turn::Go);
    }
}

#[test]
fn a_wait_closes_the_gate_and_it_opens_onto_the_quota_not_the_queue() {
    let mut gate = Gate::default();
    let t0 = Instant::now();
    assert_eq!(gate.turn(t0, None), Turn::Go);
    gate.answered(Some(&told(Some(0), Some(1), Some(3))), t0);
    let open = t0 + Duration::from_secs(1);
    assert_eq!(gate.turn(t0, None), Turn::Until(open));
    assert_eq!(
        gate.turn(open - Duration::from_nanos(1), None),
        Turn::Until(open)
    );
    // Three go (the quota), the fourth waits for an answer.
    for _ in 0..3 {
        assert_eq!(gate.turn(open, None), Turn::Go);
    }
    assert_eq!(gate.turn(open, None), Turn::Answer);
    // An answer: 2 left of which 2 are in flight: still nothing.
    gate.answered(Some(&told(Some(2), None, Some(3))), open);
    assert_eq!(gate.turn(open, None), Turn::Answer);
    // All answered, the last saying 1 is left: one goes.
    gate.answered(Some(&told(Some(1), None, Some(3))), open);
    gate.answered(Some(&told(Some(1), None, Some(3))), open);
    assert_eq!(gate.turn(open, None), Turn::Go);
    assert_eq!(gate.turn(open, None), Turn::Answer);
}

#[test]
fn an_answer_overtaken_on_its_way_back_does_not_raise_what_may_go() {
    // Seen in the storm benchmark: of a window's requests, the first two
    // sent were answered last; the very first one's "9 left" arrived when
    // nothing was in flight, and let 8 more go into a window with 2 left.
    let mut gate = Gate::default();
    let t0 = Instant::now();
    assert_eq!(gate.turn(t0, None), Turn::Go);
    let first = gate.sent();
    gate.answered_as(first, Some(&told(Some(5), None, Some(6))), t0);
    // 5 left: three go (numbers 2, 3, 4), decided in that order.
    let sent: Vec<u64> = (0..3)
        .map(|_| {
            assert_eq!(gate.turn(t0, None), Turn::Go);
            gate.sent()
        })
        .collect();
    // 3 and 4 come back first (3 then 2 left), 2 last saying 4 left.
    gate.answered_as(sent[1], Some(&told(Some(3), None, Some(6))), t0);
    gate.answered_as(sent[2], Some(&told(Some(2), None, Some(6))), t0);
    gate.answered_as(sent[0], Some(&told(Some(4), None, Some(6))), t0);
    // 2 are left at the server: no more than 2 may go before an answer.
    let mut went = 0;
    while gate.turn(t0, None) == Turn::Go {
        went += 1;
        assert!(went <= 2, "an overtaken answer let {went} go with 2 left");
    }
    assert!(went >= 1, "the next goes and asks");
}

#[test]
fn without_a_quota_size_one_goes_and_asks() {
    let mut gate = Gate::default();
    let t0 = Instant::now();
    assert_eq!(gate.turn(t0, None), Turn::Go);
    gate.answered(Some(&told(None, Some(2), None)), t0);
    let open = t0 + Duration::from_secs(2);
    assert_eq!(gate.turn(open, None), Turn::Go);
    assert_eq!(gate.turn(open, None), Turn::Answer);
    // Its answer has no quota field: counting stops.
    gate.answered(Some(&told(None, None, None)), open);
    assert_eq!(gate.turn(open, None), Turn::Go);
    assert_eq!(gate.turn(open, None), Turn::Go);
}

#[test]
fn nothing_left_and_nothing_in_flight_sends_one_to_ask() {
    let mut gate = Gate::default();
    let t0 = Instant::now();
    assert_eq!(gate.turn(t0, None), Turn::Go);
    // r=0 with no reset known: no time to wait for, so one asks.
    gate.answered(Some(&told(Some(0), None, None)), t0);
    assert_eq!(gate.turn(t0, None), Turn::Go);
    assert_eq!(gate.turn(t0, None), Turn::Answer);
}

#[test]
fn a_later_wait_extends_an_earlier_one_never_shortens_it() {
    let mut gate = Gate::default();
    let t0 = Instant::now();
    gate.turn(t0, None);
    gate.turn(t0, None);
    gate.answered(Some(&told(Some(0), Some(5), None)), t0);
    gate.answered(Some(&told(Some(0), Some(1), None)), t0);
    assert_eq!(
        gate.turn(t0, None),
        Turn::Until(t0 + Duration::from_secs(5))
    );
}

#[test]
fn an_answer_lost_in_flight_frees_its_place() {
    let mut gate = Gate::default();
    let t0 = Instant::now();
    gate.turn(t0, None);
    gate.answered(Some(&told(Some(1), None, None)), t0);
    assert_eq!(gate.turn(t0, None), Turn::Go);
    assert_eq!(gate.turn(t0, None), Turn::Answer);
    gate.answered(None, t0);
    assert_eq!(gate.turn(t0, None), Turn::Go, "one asks again");
}

#[test]
fn partitions_are_bounded_and_forget_the_idle_first() {
    let partitions = Partitions::new(2);
    let now = Instant::now();
    let a = partitions.slot(Partition::new("c", "a"), now);
    let b = partitions.slot(Partition::new("c", "b"), now);
    assert!(Arc::ptr_eq(
        &a,
        &partitions.slot(Partition::new("c", "a"), now)
    ));
    // Both in use: a third gets a slot of its own, untracked.
    let c = partitions.slot(Partition::new("c", "c"), now);
    assert_eq!(partitions.len(), 2);
    assert!(!Arc::ptr_eq(
        &c,
        &partitions.slot(Partition::new("c", "c"), now)
    ));
    // b idle but told to wait: kept; a idle: forgotten.
    b.gate
        .lock()
        .answered(Some(&told(Some(0), Some(9), None)), now);
    drop((a, b));
    let d = partitions.slot(Partition::new("c", "d"), now);
    assert_eq!(partitions.len(), 2);
    assert!(Arc::ptr_eq(
        &d,
        &partitions.slot(Partition::new("c", "d"), now)
    ));
    let b = partitions.slot(Partition::new("c", "b"), now);
    assert_eq!(
        b.gate.lock().turn(now, None),
        Turn::Until(now + Duration::from_secs(9))
    );
}

#[test]
fn a_call_due_sooner_than_an_answer_takes_is_not_sent() {
    let mut gate = Gate::default();
    let t0 = Instant::now();
    // Nothing timed yet: only a deadline already past is too late.
    assert_eq!(gate.turn(t0, Some(t0 - ms(1))), Turn::TooLate);
    assert_eq!(gate.turn(t0, Some(t0)), Turn::Go);
    gate.answered(Some(&told(None, None, None)), t0);
    gate.timed(ms(80));
    assert_eq!(gate.turn(t0, Some(t0 + ms(79))), Turn::TooLate);
    assert_eq!(gate.turn(t0, Some(t0 + ms(80))), Turn::Go);
    // Smoothed: one fast answer moves it an eighth of the way.
    gate.answered(Some(&told(None, None, None)), t0);
    gate.timed(ms(0));
    assert_eq!(gate.turn(t0, Some(t0 + ms(69))), Turn::TooLate);
    assert_eq!(gate.turn(t0, Some(t0 + ms(70))), Turn::Go);
    // A call turned away takes no credit and is not in flight.
    let mut gate = Gate::default();
    gate.turn(t0, None);
    gate.answered(Some(&told(Some(1), None, None)), t0);
    assert_eq!(gate.turn(t0, Some(t0 - ms(1))), Turn::TooLate);
    assert_eq!(gate.turn(t0, None), Turn::Go);
    assert_eq!(gate.turn(t0, None), Turn::Answer);
}

/// An answer's figures with a reset: what is left, the reset, the wait
/// (when nothing is left) and the quota's size, 3.
fn with_reset(remaining: u64, reset: Reset, wait: Option<Duration>) -> Told {
    Told {
        remaining: Some(remaining),
        reset: Some(reset),
        wait,
        limit: Some(3),
        ..Told::default()
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Sends one request at `now` for each of `resets` and records its
/// answer: 2, 1, ... left with that reset, the last with nothing left and
/// `wait`. How long the gate then holds the partition.
fn held_after(gate: &mut Gate, now: Instant, resets: &[Reset], wait: Duration) -> Duration {
    for (i, reset) in resets.iter().enumerate() {
        let left = (resets.len() - 1 - i) as u64;
        let told = with_reset(left, *reset, (left == 0).then_some(wait));
        assert_eq!(gate.turn(now, None), Turn::Go);
        gate.answered(Some(&told), now);
    }
    match gate.turn(now, None) {
        Turn::Until(until) => until - now,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_partition_whose_reset_moves_later_as_it_empties_is_paced_not_held() {
    // A token bucket of 3 told in Unix seconds: full again at 1,001 while
    // 2 and 1 are left, at 1,002 once empty.
    let mut gate = Gate::default();
    let t0 = Instant::now();
    let resets = [Reset::Unix(1_001), Reset::Unix(1_001), Reset::Unix(1_002)];
    // Held for a third of the time to full, then one goes and asks.
    assert_eq!(held_after(&mut gate, t0, &resets, ms(1_500)), ms(500));
    let paced = t0 + ms(500);
    assert_eq!(gate.turn(paced, None), Turn::Go);
    assert_eq!(gate.turn(paced, None), Turn::Answer);
    // Its answer says 1 came back meanwhile: it goes at once.
    gate.answered(Some(&with_reset(1, Reset::Unix(1_002), None)), paced);
    assert_eq!(gate.turn(paced, None), Turn::Go);
}

#[test]
fn a_reset_that_stays_put_or_moves_with_a_new_window_is_held_to() {
    let t0 = Instant::now();
    // A fixed window: the same reset as what is left falls ...
    let mut gate = Gate::default();
    let window = [Reset::Unix(1_001); 3];
    assert_eq!(held_after(&mut gate, t0, &window, ms(900)), ms(900));
    // ... and in the next window a later reset, but with more left.
    let next = [Reset::Unix(1_002); 3];
    assert_eq!(held_after(&mut gate, t0 + ms(900), &next, ms(950)), ms(950));
    // Relative resets a second apart may be the same instant rounded
    // twice: not taken for a refill; two seconds apart are.
    let relative = |a, b| {
        held_after(
            &mut Gate::default(),
            t0,
            &[Reset::After(a), Reset::After(b)],
            ms(6_000),
        )
    };
    assert_eq!(relative(5, 6), ms(6_000));
    assert_eq!(relative(4, 6), ms(2_000));
}

#[test]
fn a_refusal_turns_pacing_off_for_good_and_its_own_wait_is_never_paced() {
    let t0 = Instant::now();
    let refusal = |reset, wait| Told {
        refused: true,
        ..with_reset(0, Reset::Unix(reset), Some(ms(wait)))
    };
    // A refusal's wait is waited out whole, even the one that shows the
    // partition refills.
    let mut gate = Gate::default();
    assert_eq!(gate.turn(t0, None), Turn::Go);
    gate.answered(Some(&with_reset(1, Reset::Unix(1_001), None)), t0);
    assert_eq!(gate.turn(t0, None), Turn::Go);
    gate.answered(Some(&refusal(1_002, 1_000)), t0);
    assert_eq!(gate.turn(t0, None), Turn::Until(t0 + ms(1_000)));

    let mut gate = Gate::default();
    let resets = [Reset::Unix(1_001), Reset::Unix(1_002)];
    assert_eq!(held_after(&mut gate, t0, &resets, ms(1_500)), ms(500));
    // Refused all the same: its Retry-After is waited out whole ...
    let paced = t0 + ms(500);
    assert_eq!(gate.turn(paced, None), Turn::Go);
    gate.answered(Some(&refusal(1_003, 1_000)), paced);
    assert_eq!(gate.turn(paced, None), Turn::Until(paced + ms(1_000)));
    // ... and the partition is held to its resets from then on, even
    // when they move later again.
    let open = paced + ms(1_000);
    let again = [Reset::Unix(1_003), Reset::Unix(1_004)];
    assert_eq!(held_after(&mut gate, open, &again, ms(1_200)), ms(1_200));
}

/// A limiter as this project's servers keep one, answering as they do:
/// what is left (rounded down), `X-RateLimit-Reset` as the Unix second,
/// rounded up, at which the quota is whole again, and a refusal's
/// `Retry-After` in seconds, rounded up. Times are microseconds from the
/// run's start; the Unix clock is that plus `epoch_us`.
enum Model {
    /// `level` is the refill banked, in microseconds of it: a token every
    /// `per_token`, at most `capacity`.
    Bucket {
        capacity: u64,
        per_token: u64,
        level: u64,
        at: u64,
    },
    /// `limit` a window of `window` microseconds, windows cut from the
    /// Unix epoch.
    Window {
        limit: u64,
        window: u64,
        index: u64,
        used: u64,
    },
}

/// One decision: allowed, what is left, the Unix reset, and a refusal's
/// wait in whole seconds.
struct Decided {
    allowed: bool,
    left: u64,
    reset: u64,
    retry_secs: u64,
}

const SECOND_US: u64 = 1_000_000;

impl Model {
    fn decide(&mut self, now: u64, epoch_us: u64) -> Decided {
        let unix = epoch_us + now;
        match self {
            Model::Bucket {
                capacity,
                per_token,
                level,
                at,
            } => {
                let full = *capacity * *per_token;
                *level = (*level + (now - *at)).min(full);
                *at = now;
                let allowed = *level >= *per_token;
                if allowed {
                    *level -= *per_token;
                }
                Decided {
                    allowed,
                    left: *level / *per_token,
                    reset: (unix + (full - *level)).div_ceil(SECOND_US),
                    retry_secs: per_token.saturating_sub(*level).div_ceil(SECOND_US),
                }
            }
            Model::Window {
                limit,
                window,
                index,
                used,
            } => {
                if unix / *window != *index {
                    (*index, *used) = (unix / *window, 0);
                }
                let allowed = *used < *limit;
                *used += u64::from(allowed);
                let end = (*index + 1) * *window;
                Decided {
                    allowed,
                    left: *limit - *used,
                    reset: end.div_ceil(SECOND_US),
                    retry_secs: (end - unix).div_ceil(SECOND_US),
                }
            }
        }
    }

    fn limit(&self) -> u64 {
        match self {
            Model::Bucket { capacity, .. } => *capacity,
            Model::Window { limit, .. } => *limit,
        }
    }
}

/// A client sends through a gate to `model` for `span` microseconds, its
/// next request ready `gap` after each answer, each answer `rtt` after its
/// request (decided halfway), its clock the server's. What was allowed
/// and refused, and the gate.
fn drive(model: &mut Model, epoch_us: u64, rtt: u64, gap: u64, span: u64) -> (u64, u64, Gate) {
    let mut gate = Gate::default();
    let t0 = Instant::now();
    let (mut now, mut allowed, mut refused) = (0, 0, 0);
    while now < span {
        match gate.turn(t0 + Duration::from_micros(now), None) {
            Turn::Go => {
                let d = model.decide(now + rtt / 2, epoch_us);
                now += rtt;
                let until_reset = (d.reset * SECOND_US).saturating_sub(epoch_us + now);
                let wait = if !d.allowed {
                    Some(Duration::from_secs(d.retry_secs))
                } else {
                    (d.left == 0).then_some(Duration::from_micros(until_reset))
                };
                let told = Told {
                    refused: !d.allowed,
                    wait,
                    remaining: Some(d.left),
                    limit: Some(model.limit()),
                    reset: Some(Reset::Unix(d.reset)),
                    ..Told::default()
                };
                gate.answered(Some(&told), t0 + Duration::from_micros(now));
                allowed += u64::from(d.allowed);
                refused += u64::from(!d.allowed);
                now += gap;
            }
            // Rounded up to the microsecond, or the gate is not open yet.
            Turn::Until(until) => now = ((until - t0).as_nanos() as u64).div_ceil(1_000),
            other => panic!("{other:?} with one request at a time"),
        }
    }
    (allowed, refused, gate)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Against a token bucket whose size is the limit it tells, pacing is
    /// never refused, and the client gets the bucket's rate less 5%: once
    /// the first burst's answers show the refill, every paced request
    /// finds its token back.
    #[test]
    fn a_paced_token_bucket_is_never_refused_and_yields_its_rate(
        capacity in 5_u64..=20,
        per_token_ms in 50_u64..=500,
        epoch_frac in 0_u64..SECOND_US,
        rtt_share in 0_u64..=25,
    ) {
        let per_token = per_token_ms * 1_000;
        // Rounding a reset up costs under a second; paced, it costs
        // nothing as long as the bucket does not fill while the gate
        // waits (at most a token's time and a second's share).
        proptest::prop_assume!((capacity - 1) * per_token >= SECOND_US + SECOND_US / 5);
        let rtt = per_token * rtt_share / 100;
        let mut bucket = Model::Bucket { capacity, per_token, level: capacity * per_token, at: 0 };
        let span = 60 * SECOND_US;
        let (allowed, refused, gate) =
            drive(&mut bucket, 1_800_000_000 * SECOND_US + epoch_frac, rtt, 0, span);
        prop_assert_eq!(refused, 0);
        prop_assert_eq!(gate.refills, Some(true));
        let ideal = capacity + span / per_token;
        prop_assert!(allowed * 100 >= ideal * 95, "{} of {}", allowed, ideal);
    }

    /// Against a fixed window the gate never takes its resets for a
    /// refill, whether its client spends each window (held to the
    /// window's end, it gets the limit each time) or comes a few times a
    /// window: never refused.
    #[test]
    fn a_fixed_window_is_held_to_its_reset_and_never_refused(
        limit in 1_u64..=20,
        window_secs in 1_u64..=5,
        epoch_frac in 0_u64..SECOND_US,
        rtt_ms in 0_u64..=20,
        gap_ms in prop_oneof![Just(0_u64), 0_u64..=3_000],
    ) {
        let window = window_secs * SECOND_US;
        let mut model = Model::Window { limit, window, index: 0, used: 0 };
        let span = 60 * SECOND_US;
        let epoch = 1_800_000_000 * SECOND_US + epoch_frac;
        let (allowed, refused, gate) =
            drive(&mut model, epoch, rtt_ms * 1_000, gap_ms * 1_000, span);
        prop_assert_eq!(refused, 0);
        prop_assert_eq!(gate.refills, None);
        if gap_ms == 0 {
            // Every window the run spans whole, at least.
            prop_assert!(allowed >= limit * (span / window - 1), "{}", allowed);
        }
    }
}
