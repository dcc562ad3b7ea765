use super::*;
use crate::Quota;
use crate::algorithm::{Gcra, Meter};

/// xorshift64*: a fixed sequence, so a failure replays.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// Quotas whose interval is not whole microseconds, and some that are.
fn quotas() -> Vec<Quota> {
    let mut quotas = Vec::new();
    for limit in [
        1,
        2,
        3,
        7,
        10,
        999,
        1_000,
        4_095,
        4_096,
        4_097,
        65_536,
        1_000_000,
        1_000_000_000,
    ] {
        for period_ms in [1, 1_000, 7_000, 60_000, 3_600_000] {
            let quota = Quota::new(limit, std::time::Duration::from_millis(period_ms));
            quotas.push(quota.with_burst(1));
            quotas.push(quota.with_burst(limit.saturating_mul(3)));
            quotas.push(quota);
        }
    }
    quotas
}

/// Every packing quota, as a token bucket and as a leaky bucket, driven
/// through random checks (costs up to one past the burst) and refunds at
/// random gaps: the word decides as the state does, step for step, and
/// every state comes back from its word.
#[test]
fn a_packed_bucket_decides_as_its_state_does() {
    let (mut packed, mut rng) = (0, 0x9E37_79B9_7F4A_7C15u64);
    for quota in quotas() {
        for meter in [Gcra::token_bucket(quota), Gcra::leaky_bucket(quota)] {
            let Ok(meter) = meter else { continue };
            if !meter.packs() {
                continue;
            }
            packed += 1;
            let origin = 1_700_000_000_000_000 + next(&mut rng) % 1_000_000;
            let (mut st, mut now) = (meter.unpack(0, origin), origin);
            let mut word = 0;
            let gap = quota.period_us() / quota.limit() * 3 + 2;
            for _ in 0..2_000 {
                now += next(&mut rng) % gap;
                let cost = 1 + next(&mut rng) % (quota.burst() + 1).min(4);
                if next(&mut rng).is_multiple_of(5) {
                    meter.refund(&mut st, now, cost);
                    word = meter.pack(&st, origin);
                } else {
                    let (told, new) = meter.acquire_packed(word, origin, now, cost, u64::MAX);
                    let step = meter.acquire(&mut st, now, cost);
                    assert_eq!(told, step, "{quota:?} cost {cost} at {now}");
                    assert_eq!(new == word, !step.allowed, "{quota:?} at {now}");
                    word = new;
                }
                let back = meter.unpack(word, origin);
                if st.tat_us >= origin {
                    assert_eq!(back, st, "{quota:?} at {now}: {word:#x}");
                    assert_eq!(meter.pack(&st, origin), word, "{quota:?} at {now}");
                } else {
                    // A refund took the TAT back before the origin: a full
                    // bucket, as the origin's (every check is at or after it).
                    assert_eq!(back, meter.unpack(0, origin), "{quota:?} at {now}");
                    assert!(meter.idle_at(&st) <= origin);
                    st = back;
                }
            }
        }
    }
    assert!(packed > 200, "only {packed} meters packed");
}

#[test]
fn a_quota_whose_fractions_or_fill_time_do_not_fit_does_not_pack() {
    let packs = |quota: Quota| Gcra::token_bucket(quota).unwrap().packs();
    // 1/4,097 of a microsecond, 1/65,537 of one: more than 12 bits.
    assert!(packs(Quota::per_second(4_096)));
    assert!(!packs(Quota::per_second(4_097)));
    assert!(!packs(Quota::per_second(65_537)));
    // 1,000,000 a second is a whole microsecond each; 1e9 a second is
    // 1/1,000 of one.
    assert!(packs(Quota::per_second(1_000_000)));
    assert!(packs(Quota::per_second(1_000_000_000)));
    // A bucket that takes 2^51 us (71 years) or more to fill.
    let year = std::time::Duration::from_secs(365 * 86_400);
    assert!(packs(Quota::new(1, year).with_burst(71)));
    assert!(!packs(Quota::new(1, year).with_burst(72)));
}

#[test]
fn a_time_before_the_origin_counts_as_the_origin() {
    let meter = Gcra::token_bucket(Quota::per_second(3)).unwrap();
    let st = GcraState {
        tat_us: 5,
        tat_rem: 2,
    };
    assert_eq!(meter.pack(&st, 10), 0);
    // A check from a clock behind the origin decides as at the origin.
    assert_eq!(
        meter.acquire_packed(0, 10, 5, 1, u64::MAX),
        meter.acquire_packed(0, 10, 10, 1, u64::MAX)
    );
    assert_eq!(
        meter.unpack(0, 10),
        GcraState {
            tat_us: 10,
            tat_rem: 0
        }
    );
}
