//! The buckets of a rule's keys: the hashes a rule's keys are spread over
//! per interval, one script call per bucket and 1,000 keys at a flush.

use throttle_fleet_core::Key;

/// How many hashes a rule's keys are spread over per interval. A flush
/// costs a few commands per bucket, whatever the number of keys; in a
/// cluster the buckets spread over the slots. A bit per bucket fits the
/// masks of [`Buckets`].
pub(super) const BUCKETS: u64 = 8;

/// A set of buckets, bit `b` for bucket `b`.
pub(super) type Buckets = u8;

/// A set of buckets that threads share.
pub(super) type AtomicBuckets = std::sync::atomic::AtomicU8;

/// Every bucket.
pub(super) const ALL: Buckets = Buckets::MAX;

const _: () = assert!(Buckets::BITS as u64 == BUCKETS);

/// The bucket of a key: the same on every instance (FNV-1a of its bytes).
pub(super) fn bucket_of(key: &Key) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in std::iter::once(u8::from(key.is_digest())).chain(key.as_bytes().iter().copied()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % BUCKETS
}

/// The buckets of `set`, in order.
pub(super) fn each(set: Buckets) -> impl Iterator<Item = u64> {
    (0..BUCKETS).filter(move |b| set & (1 << b) != 0)
}
