use super::*;
use crate::algorithm::Step;
use crate::backend::Outcome;

#[test]
fn items_are_exactly_their_length_in_every_form() {
    for (text, expected) in [
        (
            policy_item("a", 10, Duration::from_millis(1_500)),
            "\"a\";q=10;w=2",
        ),
        (
            in_flight_policy_item("b.c", 64),
            "\"b.c\";q=64;qu=\"concurrent-requests\"",
        ),
        (
            ratelimit_item("a", 0, u64::MAX),
            "\"a\";r=0;t=18446744073709551615",
        ),
        (in_flight_ratelimit_item("b.c", 7), "\"b.c\";r=7"),
    ] {
        assert_eq!(text, expected);
        assert_eq!(text.capacity(), text.len(), "{text}");
    }
}

#[test]
fn retry_after_rounds_up_and_is_never_zero_for_a_wait() {
    assert_eq!(retry_after_secs(Duration::ZERO), 0);
    assert_eq!(retry_after_secs(Duration::from_nanos(1)), 1);
    assert_eq!(retry_after_secs(Duration::from_micros(1)), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(999)), 1);
    assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
    assert_eq!(retry_after_secs(Duration::from_secs(14)), 14);
    assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
}

fn decided(at_us: u64, reset_us: u64) -> Decision {
    let step = Step {
        allowed: false,
        remaining: 0,
        reset_us,
        retry_after_us: reset_us,
        delay_us: 0,
    };
    let wait = step.retry_after_us;
    Decision::decided(
        0,
        u8::MAX,
        &Outcome::new(step, at_us),
        wait,
        false,
        false,
        crate::decision::ShadowDenials::default(),
    )
}

#[test]
fn the_reset_counts_from_the_decision_and_rounds_up() {
    // On a second, and a microsecond past it.
    assert_eq!(
        reset_epoch_secs(&decided(1_700_000_000_000_000, 60_000_000)),
        1_700_000_060
    );
    assert_eq!(
        reset_epoch_secs(&decided(1_700_000_000_000_001, 60_000_000)),
        1_700_000_061
    );
    // Nothing to wait for: the decision's own second, rounded up.
    assert_eq!(
        reset_epoch_secs(&decided(1_700_000_000_500_000, 0)),
        1_700_000_001
    );
    // Far in the future: saturates rather than wraps.
    assert_eq!(
        reset_epoch_secs(&decided(u64::MAX - 1, 60_000_000)),
        u64::MAX.div_ceil(1_000_000)
    );
}
