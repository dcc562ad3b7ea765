use throttle_fleet_core::clock::ManualClock;

use super::*;

#[test]
fn a_reset_key_has_a_new_name_until_its_entry_ends() {
    let clock = ManualClock::new(1_000);
    let resets = Resets::new(Arc::new(clock.clone()));
    let key = Key::new("k");
    assert_eq!(resets.renamed(&key), None);
    resets.insert(key, "17-0", 2_000);
    let first = resets.renamed(&key).unwrap();
    assert!(first != key && first.is_digest());
    resets.insert(key, "18-0", 2_000);
    assert!(resets.renamed(&key) != Some(first));
    clock.advance(std::time::Duration::from_millis(1));
    assert_eq!(resets.renamed(&key), None);
}
