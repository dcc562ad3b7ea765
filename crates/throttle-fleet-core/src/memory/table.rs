//! A bounded, sharded table of per-key algorithm states.
//!
//! Each shard is a SwissTable holding the slots themselves (key and state,
//! no stored hash): a check is one probe and one slot read. Eviction picks
//! random occupied buckets, so any slot can be chosen in O(1).
//!
//! A shard's table sits behind a reader-writer lock, taken exclusively
//! only to insert or evict a key (and for the few operations that rewrite
//! a packed state in place). A check of a tracked key takes it shared and
//! updates the key's [`Cell`]: a packed word by compare-and-swap, or a
//! state behind a lock of its own; so two cores checking keys of one shard
//! do not take turns, and a denial of a packed state writes nothing but
//! the lock word.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashTable;
use parking_lot::RwLock;
use smallvec::SmallVec;

use super::cell::Cell;
use crate::Key;
use crate::algorithm::{Meter, Step};

/// Keys of up to 15 bytes (an IP prefix, a short id) live inside the slot;
/// longer ones take one allocation when first tracked. The first byte marks
/// a digest.
type StoredKey = SmallVec<[u8; 16]>;

/// How many random slots an eviction compares.
const EVICTION_SAMPLE: usize = 5;

/// Counters of one memory limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// Keys tracked now.
    pub tracked_keys: usize,
    /// The most keys that will ever be tracked.
    pub max_keys: usize,
    /// Keys forgotten while not idle because the table was full.
    pub evictions: u64,
}

/// One shard: its table behind its lock, on a cache line of its own.
#[repr(align(128))]
#[derive(Debug)]
struct ShardCell<K> {
    lock: RwLock<Shard<K>>,
}

/// One rule's keys and their states, kept in cells of type `K`.
#[derive(Debug)]
pub(crate) struct Table<M: Meter, K> {
    meter: M,
    /// Shared with the tables of the same rule at another quota (a reload).
    shards: Arc<[ShardCell<K>]>,
    hasher: foldhash::fast::RandomState,
    shard_mask: usize,
    max_keys: usize,
    evictions: Arc<AtomicU64>,
    /// At or before every time a check passes in: what packed states keep
    /// their times from.
    origin_us: u64,
}

#[derive(Debug)]
struct Shard<K> {
    table: HashTable<Slot<K>>,
    cap: usize,
    rng: u64,
    inserts_since_sweep: usize,
}

#[derive(Debug)]
struct Slot<K> {
    key: StoredKey,
    cell: K,
}

#[inline]
fn matches(stored: &StoredKey, key: &Key) -> bool {
    let bytes = key.as_bytes();
    stored.len() == bytes.len() + 1
        && stored[0] == u8::from(key.is_digest())
        && same_bytes(&stored[1..], bytes)
}

/// `a == b` for slices of the same length, eight bytes at a time: keys are
/// short, and this stays inline where `==` calls `memcmp`.
#[inline]
fn same_bytes(mut a: &[u8], mut b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    while let (Some((wa, ra)), Some((wb, rb))) =
        (a.split_first_chunk::<8>(), b.split_first_chunk::<8>())
    {
        if wa != wb {
            return false;
        }
        (a, b) = (ra, rb);
    }
    a.iter().zip(b).all(|(x, y)| x == y)
}

fn stored_key(stored: &StoredKey) -> Key {
    Key::from_stored(stored[0] == 1, &stored[1..])
}

impl<M: Meter, K: Cell<M>> Table<M, K> {
    pub(crate) fn new(meter: M, shards: usize, max_keys: usize, origin_us: u64) -> Self {
        let cap = max_keys / shards;
        Self {
            meter,
            shards: (0..shards)
                .map(|i| ShardCell {
                    lock: RwLock::new(Shard {
                        table: HashTable::new(),
                        cap,
                        rng: 0x9E37_79B9_7F4A_7C15
                            ^ (i as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9),
                        // Sweep the first time the shard fills up.
                        inserts_since_sweep: usize::MAX,
                    }),
                })
                .collect(),
            hasher: foldhash::fast::RandomState::default(),
            shard_mask: shards - 1,
            max_keys: cap * shards,
            evictions: Arc::new(AtomicU64::new(0)),
            origin_us,
        }
    }

    /// A table over the same shards (the same keys and states) deciding
    /// with `meter`: a rule reloaded with another quota keeps its counts.
    pub(crate) fn with_meter(&self, meter: M) -> Self {
        Self {
            meter,
            shards: self.shards.clone(),
            hasher: self.hasher.clone(),
            shard_mask: self.shard_mask,
            max_keys: self.max_keys,
            evictions: self.evictions.clone(),
            origin_us: self.origin_us,
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> &ShardCell<K> {
        // Bits 40.. pick the shard: the table uses the low bits for the
        // bucket and the top seven for its control bytes.
        &self.shards[(hash >> 40) as usize & self.shard_mask]
    }

    /// Checks and takes `cost` for `key` under `limit` (for a meter that
    /// [takes one](Meter::TAKES_A_LIMIT)), tracking the key first if needed.
    #[inline(always)]
    pub(crate) fn acquire(&self, key: &Key, now_us: u64, cost: u64, limit: u64) -> Step {
        let hash = self.hasher.hash_one(key);
        let cell = self.shard(hash);
        {
            let shard = cell.lock.read();
            if let Some(slot) = shard.table.find(hash, |s| matches(&s.key, key)) {
                return slot
                    .cell
                    .acquire(&self.meter, self.origin_us, now_us, cost, limit);
            }
        }
        self.tracked(cell, hash, key, now_us, |c, meter, origin| {
            c.acquire(meter, origin, now_us, cost, limit)
        })
    }

    /// Runs `f` on `key`'s cell, with the shard held exclusively, tracking
    /// the key first if it is not (another core may have meanwhile).
    #[cold]
    #[inline(never)]
    fn tracked<R>(
        &self,
        cell: &ShardCell<K>,
        hash: u64,
        key: &Key,
        now_us: u64,
        f: impl FnOnce(&mut K, &M, u64) -> R,
    ) -> R {
        let mut shard = cell.lock.write();
        if let Some(slot) = shard.table.find_mut(hash, |s| matches(&s.key, key)) {
            return f(&mut slot.cell, &self.meter, self.origin_us);
        }
        let evicted = shard.make_room(now_us, &self.meter, self.origin_us);
        if evicted {
            self.evictions.fetch_add(1, Ordering::Relaxed);
        }
        let mut stored = StoredKey::with_capacity(key.as_bytes().len() + 1);
        stored.push(u8::from(key.is_digest()));
        stored.extend_from_slice(key.as_bytes());
        let slot = Slot {
            key: stored,
            cell: K::fresh(&self.meter, self.origin_us),
        };
        let hasher = &self.hasher;
        let mut entry = shard
            .table
            .insert_unique(hash, slot, |s| hasher.hash_one(stored_key(&s.key)));
        f(&mut entry.get_mut().cell, &self.meter, self.origin_us)
    }

    /// Runs `f` on `key`'s state, tracking the key first if needed: under
    /// the shard's shared lock and the key's own when the cell has one.
    pub(crate) fn with_state<R>(
        &self,
        key: &Key,
        now_us: u64,
        f: impl FnOnce(&mut M::State) -> R,
    ) -> R {
        let hash = self.hasher.hash_one(key);
        let cell = self.shard(hash);
        let mut f = f;
        if K::SHARED_WITH {
            let shard = cell.lock.read();
            if let Some(slot) = shard.table.find(hash, |s| matches(&s.key, key)) {
                match slot.cell.try_with(&self.meter, self.origin_us, f) {
                    Ok(r) => return r,
                    Err(back) => f = back,
                }
            }
        }
        self.tracked(cell, hash, key, now_us, |c, meter, origin| {
            c.with_mut(meter, origin, f)
        })
    }

    /// Runs `f` on `key`'s state if the key is tracked.
    pub(crate) fn update<R>(&self, key: &Key, f: impl FnOnce(&mut M::State) -> R) -> Option<R> {
        let hash = self.hasher.hash_one(key);
        let cell = self.shard(hash);
        let mut f = f;
        if K::SHARED_WITH {
            let shard = cell.lock.read();
            let slot = shard.table.find(hash, |s| matches(&s.key, key))?;
            match slot.cell.try_with(&self.meter, self.origin_us, f) {
                Ok(r) => return Some(r),
                Err(back) => f = back,
            }
        }
        let mut shard = cell.lock.write();
        let slot = shard.table.find_mut(hash, |s| matches(&s.key, key))?;
        Some(slot.cell.with_mut(&self.meter, self.origin_us, f))
    }

    /// Visits every tracked key, one shard (and one lock) at a time.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Key, &mut M::State)) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock.write();
            for slot in shard.table.iter_mut() {
                let key = stored_key(&slot.key);
                slot.cell
                    .with_mut(&self.meter, self.origin_us, |st| f(&key, st));
            }
        }
    }

    /// Gives back `cost` taken from `key` at `acquired_at_us`, if the key
    /// is still tracked.
    pub(crate) fn refund(&self, key: &Key, acquired_at_us: u64, cost: u64) {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash).lock.read();
        if let Some(slot) = shard.table.find(hash, |s| matches(&s.key, key)) {
            slot.cell
                .refund(&self.meter, self.origin_us, acquired_at_us, cost);
        }
    }

    pub(crate) fn meter(&self) -> &M {
        &self.meter
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        MemoryStats {
            tracked_keys: self.shards.iter().map(|s| s.lock.read().table.len()).sum(),
            max_keys: self.max_keys,
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }
}

impl<K> Shard<K> {
    /// Makes room for one more key if the shard is full. Returns whether a
    /// key that was not idle had to be evicted.
    fn make_room<M: Meter>(&mut self, now_us: u64, meter: &M, origin_us: u64) -> bool
    where
        K: Cell<M>,
    {
        self.inserts_since_sweep = self.inserts_since_sweep.saturating_add(1);
        if self.table.len() < self.cap {
            return false;
        }
        // Sweeping is O(shard); doing it at most once per cap/8 inserts keeps
        // inserts amortised O(1) even when nothing is idle.
        if self.inserts_since_sweep >= (self.cap / 8).max(1) {
            self.inserts_since_sweep = 0;
            self.table
                .retain(|slot| slot.cell.idle_at(meter, origin_us) > now_us);
            if self.table.len() < self.cap {
                return false;
            }
        }
        // Evict the sampled slot that will be idle soonest.
        let mut victim: Option<(usize, u64)> = None;
        let buckets = self.table.num_buckets();
        let (mut sampled, mut probes) = (0, 0);
        while sampled < EVICTION_SAMPLE && probes < 64 * EVICTION_SAMPLE {
            probes += 1;
            let i = self.random_below(buckets);
            if let Some(slot) = self.table.get_bucket(i) {
                sampled += 1;
                let idle = slot.cell.idle_at(meter, origin_us);
                if victim.is_none_or(|(_, v)| idle < v) {
                    victim = Some((i, idle));
                }
            }
        }
        let Some((i, idle)) = victim else {
            // A full table is at least 7/8 occupied: unreachable in practice,
            // and refusing to track a key is not an option, so grow instead.
            return false;
        };
        if let Ok(entry) = self.table.get_bucket_entry(i) {
            entry.remove();
        }
        idle > now_us
    }

    fn random_below(&mut self, n: usize) -> usize {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let r = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (((r >> 32) * n as u64) >> 32) as usize
    }
}

#[cfg(test)]
mod tests;
