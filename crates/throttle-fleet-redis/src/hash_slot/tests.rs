#[test]
fn slots_match_redis() {
    // `CLUSTER KEYSLOT foo` is 12182 (the Redis Cluster specification's
    // example); a hash tag hashes alone; an empty one does not count.
    assert_eq!(super::slot_of(b"foo"), 12182);
    assert_eq!(super::slot_of(b"{foo}.bar"), 12182);
    assert_eq!(
        super::slot_of(b"{user1000}.following"),
        super::slot_of(b"{user1000}.followers")
    );
    assert_eq!(
        super::slot_of(b"rl:{ip:r0a000001}:fw"),
        super::slot_of(b"ip:r0a000001")
    );
    assert_ne!(super::slot_of(b"foo{}{bar}"), super::slot_of(b"bar"));
}
