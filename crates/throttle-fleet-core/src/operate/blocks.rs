//! The keys blocked now under one rule: the table every request of the
//! rule looks in first.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::RwLock;

use super::room::make_room;
use crate::{Clock, Key};

/// The most keys one rule holds blocked at once. A block past it is
/// refused ([`Blocks::insert`] answers `false`), so a flood of penalties
/// cannot grow memory without bound.
pub const MAX_BLOCKED_KEYS: usize = 100_000;

/// Why a key is blocked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockCause {
    /// An operator blocked it.
    Operator,
    /// It kept being denied: the rule's [`Penalty`](super::Penalty), at
    /// `level` (0 for the first block, 1 for the second within the
    /// penalty's memory, ...).
    Penalty {
        /// How many blocks came before this one within the memory window.
        level: u32,
    },
}

/// One block: until when, and what to show beside the key in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// When it ends, in microseconds since the Unix epoch.
    pub until_us: u64,
    /// What the operator gave to name the key (its secrets redacted), or
    /// empty: keys longer than [`MAX_KEY_LEN`](crate::key::MAX_KEY_LEN) bytes
    /// are stored as digests, so this is what a listing can show.
    pub label: Arc<str>,
    /// Why.
    pub cause: BlockCause,
}

/// Counters of one rule's blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockStats {
    /// Blocks started by this process since it started (an operator's or a
    /// penalty's; blocks learnt from the fleet are not counted here).
    pub started: u64,
    /// Keys blocked now, as far as this process knows.
    pub blocked_now: u64,
    /// Requests denied because their key was blocked.
    pub denied: u64,
}

/// The keys blocked now under one rule, in this process: what a request
/// looks in before its rule's backend is asked. While nothing is blocked,
/// that look is one atomic load.
///
/// A fleet-wide backend fills the table from what it shares (a block made
/// on another instance arrives within its published bound); a local one
/// holds its blocks here only.
///
/// ```
/// use std::sync::Arc;
/// use throttle_fleet_core::operate::{Block, BlockCause, Blocks};
/// use throttle_fleet_core::{Key, clock::ManualClock};
///
/// let clock = ManualClock::new(1_000_000);
/// let blocks = Blocks::new(Arc::new(clock.clone()));
/// let key = Key::new("10.0.0.7");
/// let left = |blocks: &Blocks| blocks.list().into_iter().map(|(k, _, left)| (k, left.as_secs())).collect::<Vec<_>>();
/// assert_eq!(left(&blocks), []);
/// blocks.insert(key, Block { until_us: 31_000_000, label: "10.0.0.7".into(), cause: BlockCause::Operator });
/// assert_eq!(left(&blocks), [(key, 30)]);
/// clock.advance(std::time::Duration::from_secs(30));
/// assert_eq!(left(&blocks), []);
/// ```
pub struct Blocks {
    clock: Arc<dyn Clock>,
    map: RwLock<HashMap<Key, Block>>,
    /// `map.len()`, read without the lock.
    live: AtomicUsize,
    started: AtomicU64,
    denied: AtomicU64,
    /// When a full table may next be scanned for ended blocks.
    next_sweep_us: AtomicU64,
}

impl std::fmt::Debug for Blocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blocks")
            .field("live", &self.live.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Blocks {
    /// An empty table on `clock` (the backend's: blocks end on its time).
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            map: RwLock::new(HashMap::new()),
            live: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            next_sweep_us: AtomicU64::new(0),
        }
    }

    /// The table's clock, in microseconds since the Unix epoch.
    pub fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// What is left of `key`'s block, if it is blocked now. An ended block
    /// is forgotten here.
    #[inline]
    pub(crate) fn remaining_us(&self, key: &Key) -> Option<u64> {
        if self.live.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.look(key)
    }

    #[inline(never)]
    fn look(&self, key: &Key) -> Option<u64> {
        let until = self.map.read().get(key)?.until_us;
        let now = self.clock.now_us();
        if until > now {
            return Some(until - now);
        }
        let mut map = self.map.write();
        if map.get(key).is_some_and(|b| b.until_us <= now) {
            map.remove(key);
            self.live.store(map.len(), Ordering::Relaxed);
        }
        None
    }

    /// Counts a request denied because its key is blocked.
    #[inline]
    pub(crate) fn count_denial(&self) {
        self.denied.fetch_add(1, Ordering::Relaxed);
    }

    /// Blocks `key` (replacing a block it had); `false` when the table is
    /// full ([`MAX_BLOCKED_KEYS`]) even after forgetting ended blocks (a
    /// scan of a full table runs at most once a second).
    pub fn insert(&self, key: Key, block: Block) -> bool {
        let now = self.clock.now_us();
        let mut map = self.map.write();
        if !map.contains_key(&key)
            && !make_room(&mut map, MAX_BLOCKED_KEYS, now, &self.next_sweep_us, |b| {
                b.until_us > now
            })
        {
            return false;
        }
        map.insert(key, block);
        self.live.store(map.len(), Ordering::Relaxed);
        true
    }

    /// Counts a block this process started (an operator's or a penalty's).
    pub fn count_start(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
    }

    /// Lifts `key`'s block; whether it had one.
    pub fn remove(&self, key: &Key) -> bool {
        let mut map = self.map.write();
        let had = map.remove(key).is_some();
        self.live.store(map.len(), Ordering::Relaxed);
        had
    }

    /// Replaces every block with `blocks` (a fleet-wide backend loading
    /// what the fleet holds).
    pub fn replace_all(&self, blocks: impl IntoIterator<Item = (Key, Block)>) {
        let now = self.clock.now_us();
        let fresh: HashMap<Key, Block> = blocks
            .into_iter()
            .filter(|(_, b)| b.until_us > now)
            .take(MAX_BLOCKED_KEYS)
            .collect();
        let mut map = self.map.write();
        *map = fresh;
        self.live.store(map.len(), Ordering::Relaxed);
    }

    /// The keys blocked now, with their blocks and what is left of each
    /// (on the table's clock), soonest to end first.
    pub fn list(&self) -> Vec<(Key, Block, Duration)> {
        let now = self.clock.now_us();
        let mut out: Vec<(Key, Block, Duration)> = self
            .map
            .read()
            .iter()
            .filter(|(_, b)| b.until_us > now)
            .map(|(k, b)| (*k, b.clone(), Duration::from_micros(b.until_us - now)))
            .collect();
        out.sort_by_key(|(_, _, left)| *left);
        out
    }

    /// The table's counters.
    pub fn stats(&self) -> BlockStats {
        let now = self.clock.now_us();
        let blocked_now = self
            .map
            .read()
            .values()
            .filter(|b| b.until_us > now)
            .count() as u64;
        BlockStats {
            started: self.started.load(Ordering::Relaxed),
            blocked_now,
            denied: self.denied.load(Ordering::Relaxed),
        }
    }
}
