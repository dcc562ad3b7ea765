use super::*;

#[test]
fn a_full_table_is_scanned_at_most_once_a_second() {
    let next = AtomicU64::new(0);
    let mut map: HashMap<u32, u64> = (0..4).map(|k| (k, 10_000_000)).collect();
    // Full, nothing ended: a scan, then none until a second has passed.
    assert!(!make_room(&mut map, 4, 100, &next, |until| *until > 100));
    assert_eq!(next.load(Ordering::Relaxed), 1_000_100);
    // Everything ended by now, but the scan waits for its second.
    assert!(!make_room(&mut map, 4, 500_000, &next, |_| false));
    assert_eq!(map.len(), 4);
    assert!(make_room(&mut map, 4, 1_000_100, &next, |_| false));
    assert!(map.is_empty());
}
