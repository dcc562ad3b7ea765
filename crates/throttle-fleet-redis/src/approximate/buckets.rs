//! The buckets of a rule's keys: the hashes a rule's keys are spread over
//! per interval, one script call per bucket and 1,000 keys at a flush.
//!
//! On a standalone Redis a rule has [`STANDALONE`] buckets, named as 0.1
//! named them (`<prefix>:{<rule>:b<n>}:a:<interval>`), so 0.1 and 0.2
//! instances share one Redis during a rolling upgrade. On a Cluster a rule
//! has [`CLUSTER`] buckets whose hash tags are picked so that bucket `n`
//! lands in the `n`-th of [`CLUSTER`] equal ranges of the 16,384 slots
//! (`<prefix>:{<rule>:s<n>.<salt>}:a:<interval>`): a cluster whose
//! primaries each own a contiguous range of at least 16,384 / [`CLUSTER`]
//! slots (up to 64 primaries of equal ranges, as `redis-cli --cluster
//! create` makes them) gets some of every rule. The buckets do not change
//! with the cluster: a reshard moves slots, never a key from one bucket to
//! another, so no interval's counts are ever split between two hashes.

use std::sync::atomic::AtomicU64;

use throttle_fleet_core::Key;

use crate::hash_slot::HASH_SLOTS;
use crate::keys::KeyBase;

/// A set of buckets, bit `n` for bucket `n`.
pub(super) type Buckets = u64;

/// A set of buckets that threads share.
pub(super) type AtomicBuckets = AtomicU64;

/// A rule's buckets on a standalone Redis (0.1's number and names).
pub(super) const STANDALONE: u64 = 8;

/// A rule's buckets on a Redis Cluster: one per equal range of slots.
pub(super) const CLUSTER: u64 = Buckets::BITS as u64;

/// The buckets of one rule: their number, each one's hash name before the
/// interval, and each one's Cluster slot.
#[derive(Debug)]
pub(super) struct Layout {
    heads: Box<[String]>,
    slots: Box<[u16]>,
}

impl Layout {
    /// The layout of the rule `keys` names, on a Cluster or not.
    pub(super) fn new(keys: &KeyBase, cluster: bool) -> Self {
        let heads: Box<[String]> = if cluster {
            (0..CLUSTER).map(|n| spread_head(keys, n)).collect()
        } else {
            (0..STANDALONE)
                .map(|n| keys.hash_head(&format!("b{n}"), "a:"))
                .collect()
        };
        let slots = heads
            .iter()
            .map(|h| crate::hash_slot::slot_of(h.as_bytes()))
            .collect();
        Self { heads, slots }
    }

    /// How many buckets.
    pub(super) fn count(&self) -> u64 {
        self.heads.len() as u64
    }

    /// Every bucket.
    pub(super) fn all(&self) -> Buckets {
        Buckets::MAX >> (Buckets::BITS as u64 - self.count())
    }

    /// The bucket of a key: the same on every instance (FNV-1a of its
    /// bytes).
    pub(super) fn bucket_of(&self, key: &Key) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in std::iter::once(u8::from(key.is_digest())).chain(key.as_bytes().iter().copied()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h % self.count()
    }

    /// The hash of bucket `n` for `interval`.
    pub(super) fn hash(&self, n: u64, interval: u64) -> String {
        format!("{}{interval}", self.heads[n as usize])
    }

    /// The Cluster slot of bucket `n`'s hashes (every interval's).
    pub(super) fn slot(&self, n: u64) -> u16 {
        self.slots[n as usize]
    }
}

/// The hash name of Cluster bucket `n`: the first salt whose tag lands in
/// the bucket's range of slots (found in about 64 tries).
fn spread_head(keys: &KeyBase, n: u64) -> String {
    let width = HASH_SLOTS as u64 / CLUSTER;
    let range = n * width..(n + 1) * width;
    (0u64..)
        .map(|salt| keys.hash_head(&format!("s{n}.{salt}"), "a:"))
        .find(|head| range.contains(&u64::from(crate::hash_slot::slot_of(head.as_bytes()))))
        .expect("every range of slots has tags")
}

/// The buckets of `set`, in order.
pub(super) fn each(set: Buckets) -> impl Iterator<Item = u64> {
    (0..Buckets::BITS as u64).filter(move |b| set & (1 << b) != 0)
}

#[cfg(test)]
mod tests;
