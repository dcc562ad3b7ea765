use super::*;

const SECOND: Duration = Duration::from_secs(1);

#[test]
fn a_wait_lasts_at_most_the_timeout() {
    let bound = BodyTimeout::default();
    assert_eq!(bound.allowance(0, Duration::ZERO), bound.timeout);
    // Bytes earn time for later waits, never a longer single wait.
    assert_eq!(bound.allowance(1_000_000, Duration::ZERO), bound.timeout);
}

#[test]
fn the_waits_together_last_the_grace_plus_a_second_per_rate_of_bytes() {
    let bound = BodyTimeout::default();
    // 1,000 bytes at 500 a second earned 2 s past the 60 s of grace.
    assert_eq!(bound.allowance(1_000, 61 * SECOND), SECOND);
    assert_eq!(bound.allowance(1_000, 62 * SECOND), Duration::ZERO);
    assert_eq!(bound.allowance(1_000, 63 * SECOND), Duration::ZERO);
    // 250 bytes: half a second.
    assert_eq!(bound.allowance(250, 60 * SECOND), SECOND / 2);
}

#[test]
fn a_trickle_of_a_byte_a_second_is_cut_after_the_grace() {
    // The wait for byte n+1 after n bytes in n seconds of waiting.
    let bound = BodyTimeout::default();
    let cut = (0u64..)
        .find(|&n| bound.allowance(n, Duration::from_secs(n)) < SECOND)
        .unwrap();
    // 60 / (1 - 1/500) = 60.12 s.
    assert_eq!(cut, 60);
    assert_eq!(bound.allowance(60, 60 * SECOND), Duration::from_millis(120));
}

#[test]
fn no_bound_overflows_or_divides_by_zero() {
    let huge = BodyTimeout {
        timeout: Duration::MAX,
        min_bytes_per_sec: 0,
    };
    assert_eq!(huge.allowance(u64::MAX, Duration::ZERO), Duration::MAX);
    let zero_rate = BodyTimeout {
        min_bytes_per_sec: 0,
        ..BodyTimeout::default()
    };
    assert_eq!(
        zero_rate.allowance(0, Duration::from_secs(3_600)),
        zero_rate.timeout
    );
    assert_eq!(
        zero_rate.validate().unwrap_err().field(),
        "min_bytes_per_sec"
    );
}
