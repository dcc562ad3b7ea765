use std::time::Duration;

use tokio::time::Instant;

use super::*;

fn retries_allowed(budget: &Budget, requests: u64, now: Instant) -> u64 {
    for _ in 0..requests {
        budget.deposit(now);
    }
    let mut n = 0;
    while budget.withdraw(now) {
        n += 1;
        assert!(n < 1_000_000);
    }
    n
}

#[test]
fn a_fractional_share_allows_exactly_that_share() {
    let now = Instant::now();
    // tower's TpsBudget with 0.3 allows one retry per 3 requests: 33 in 100.
    for (share, requests, expected) in [
        (0.3, 100, 30),
        (0.2, 100, 20),
        (0.25, 1000, 250),
        (0.7, 10, 7),
        (1.5, 10, 15),
        (0.0, 100, 0),
    ] {
        let budget = Budget::new(Duration::from_secs(10), 0, share).unwrap();
        assert_eq!(retries_allowed(&budget, requests, now), expected, "{share}");
    }
}

#[test]
fn the_floor_is_per_second_over_the_window() {
    let now = Instant::now();
    let budget = Budget::new(Duration::from_secs(10), 10, 0.2).unwrap();
    assert_eq!(retries_allowed(&budget, 0, now), 100);
    let budget = Budget::new(Duration::from_secs(10), 10, 0.2).unwrap();
    assert_eq!(retries_allowed(&budget, 50, now), 110);
}

#[test]
fn what_the_window_has_left_behind_no_longer_counts() {
    let start = Instant::now();
    let budget = Budget::new(Duration::from_secs(10), 0, 0.5).unwrap();
    assert_eq!(retries_allowed(&budget, 100, start), 50);
    // Within the window: spent.
    assert!(!budget.withdraw(start + Duration::from_secs(5)));
    // One window on, the requests and the retries are both gone.
    assert!(!budget.withdraw(start + Duration::from_secs(11)));
    assert_eq!(
        retries_allowed(&budget, 10, start + Duration::from_secs(11)),
        5
    );
    // Long idle: nothing carried, nothing overflows.
    let later = start + Duration::from_secs(10_000_000);
    assert!(!budget.withdraw(later));
    assert_eq!(retries_allowed(&budget, 4, later), 2);
}

#[test]
fn a_window_slides_a_tenth_at_a_time() {
    let budget = Budget::new(Duration::from_secs(10), 0, 1.0).unwrap();
    // After the budget's own start: each second in a slot of its own.
    let start = Instant::now();
    for s in 0..10 {
        budget.deposit(start + Duration::from_secs(s));
    }
    // At 10.5 s the first second's request has left: 9 remain.
    assert_eq!(
        retries_allowed(&budget, 0, start + Duration::from_millis(10_500)),
        9
    );
}

#[test]
fn settings_out_of_range_are_refused_by_name() {
    assert_eq!(
        Budget::new(Duration::ZERO, 1, 0.2).unwrap_err().field(),
        "budget window"
    );
    assert_eq!(
        Budget::new(Duration::from_secs(1), 1, -0.1)
            .unwrap_err()
            .field(),
        "budget share"
    );
    assert_eq!(
        Budget::new(Duration::from_secs(1), 1, f64::NAN)
            .unwrap_err()
            .field(),
        "budget share"
    );
}
