use super::*;

#[test]
fn denials_spread_wider_than_the_window_never_block() {
    let p = Penalty::new(3, Duration::from_secs(10), Duration::from_secs(5));
    let mut st = PenaltyState::default();
    // Two denials per window, forever: never three within ten seconds.
    let mut now = 1;
    for _ in 0..100 {
        assert_eq!(p.escalate(&mut st, now), None);
        assert_eq!(p.escalate(&mut st, now + 1_000_000), None);
        now += 10_000_000;
    }
}

#[test]
fn a_block_after_the_memory_starts_again_at_the_first_length() {
    let p = Penalty::new(1, Duration::from_secs(1), Duration::from_secs(10))
        .with_memory_window(Duration::from_secs(60));
    let mut st = PenaltyState::default();
    assert_eq!(p.escalate(&mut st, 1), Some((10_000_000, 0)));
    // Ended at 10 s; denied again 60 s after: still remembered.
    assert_eq!(p.escalate(&mut st, 70_000_001), Some((20_000_000, 1)));
    // Ended at 90 s; denied 61 s after: forgotten.
    assert_eq!(p.escalate(&mut st, 151_000_002), Some((10_000_000, 0)));
}
