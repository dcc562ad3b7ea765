use super::{CLUSTER, HASH_SLOTS, Layout, STANDALONE};
use crate::keys::KeyBase;

#[test]
fn a_standalone_rule_keeps_0_1_names_and_a_cluster_rule_covers_every_range() {
    let keys = KeyBase::new("rl", "tenant");
    let one = Layout::new(&keys, false);
    assert_eq!(one.count(), STANDALONE);
    assert_eq!(one.hash(3, 42), "rl:{tenant:b3}:a:42");
    assert_eq!(one.all(), 0xff);
    let spread = Layout::new(&keys, true);
    assert_eq!(spread.count(), CLUSTER);
    assert_eq!(spread.all(), u64::MAX);
    for n in 0..CLUSTER {
        let slot = u64::from(spread.slot(n));
        assert_eq!(
            slot / (HASH_SLOTS as u64 / CLUSTER),
            n,
            "bucket {n} at slot {slot}"
        );
        assert_eq!(
            u64::from(crate::hash_slot::slot_of(spread.hash(n, 7).as_bytes())),
            slot
        );
    }
}
