use throttle_fleet_core::Key;

use super::KeyBase;
use crate::hash_slot::slot_of;

#[test]
fn slots_are_those_of_the_keys_written() {
    let base = KeyBase::new("rl", "ip");
    let long = "x".repeat(300);
    for key in [
        Key::new("10.0.0.1"),
        Key::new(""),
        Key::from(42u64),
        Key::new(&long),
    ] {
        assert_eq!(
            base.slot(&key),
            slot_of(base.key(&key, "fw").as_bytes()),
            "{key:?}"
        );
    }
}
