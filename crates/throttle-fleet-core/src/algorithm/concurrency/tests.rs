use super::*;

#[test]
fn never_more_than_the_limit_in_flight_and_every_end_gives_its_cost_back() {
    let c = Concurrency::new(Quota::in_flight(3)).unwrap();
    let mut st = InFlight::default();
    assert!(c.acquire(&mut st, 0, 2).allowed);
    let s = c.acquire(&mut st, 0, 2);
    assert!(!s.allowed);
    assert_eq!(
        (s.remaining, s.retry_after_us, s.reset_us),
        (1, 1_000_000, 1_000_000)
    );
    let s = c.acquire(&mut st, 5, 1);
    assert!(s.allowed);
    assert_eq!((s.remaining, s.retry_after_us, s.reset_us), (0, 0, 0));
    assert_eq!(c.idle_at(&st), u64::MAX);
    c.refund(&mut st, 0, 2);
    c.refund(&mut st, 0, 1);
    assert_eq!(st, InFlight(0));
    assert_eq!(c.idle_at(&st), 0);
    // A release that was already given back (or evicted) cannot go below zero.
    c.refund(&mut st, 0, 1);
    assert_eq!(st, InFlight(0));
    assert!(!c.acquire(&mut st, 0, u64::MAX).allowed);
    assert!(c.packs());
    assert_eq!(c.unpack(c.pack(&InFlight(7), 5), 5), InFlight(7));
}
