//! One rule's operations as this instance knows them: its blocked keys
//! (core's table) and the keys reset recently, counted under a new name.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::RwLock;
use throttle_fleet_core::operate::Blocks;
use throttle_fleet_core::{Key, clock::Clock};

/// The most keys of one rule held reset at once: past it, the oldest
/// reset is forgotten first.
const MAX_RESETS: usize = 100_000;

/// One rule's tables.
#[derive(Debug)]
pub(crate) struct RuleOps {
    pub(crate) blocks: Arc<Blocks>,
    pub(crate) resets: Resets,
}

impl RuleOps {
    pub(super) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            blocks: Arc::new(Blocks::new(clock.clone())),
            resets: Resets::new(clock),
        }
    }
}

/// The keys reset recently. A reset key is counted under a new name (its
/// generation, the reset's log id, with the key): every mode's state of
/// the old name (in Redis, and cached on each instance) is left behind at
/// once and expires on its own, with no mode-specific deletion. Until the
/// reset's entry ends, each instance maps the key to its new name.
pub(crate) struct Resets {
    clock: Arc<dyn Clock>,
    map: RwLock<HashMap<Key, (Key, u64)>>,
    live: AtomicUsize,
}

impl std::fmt::Debug for Resets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resets")
            .field("live", &self.live.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Resets {
    fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            map: RwLock::new(HashMap::new()),
            live: AtomicUsize::new(0),
        }
    }

    /// The name `key` is counted under now if it was reset (`None`: its
    /// own). While nothing is reset, one atomic load and no copy.
    #[inline]
    pub(crate) fn renamed(&self, key: &Key) -> Option<Key> {
        if self.live.load(Ordering::Relaxed) == 0 {
            return None;
        }
        self.look(key)
    }

    #[inline(never)]
    fn look(&self, key: &Key) -> Option<Key> {
        match self.map.read().get(key) {
            Some((name, until)) if *until > self.clock.now_us() => Some(*name),
            _ => None,
        }
    }

    /// `key` was reset, as generation `generation`, held until `until_us`.
    pub(crate) fn insert(&self, key: Key, generation: &str, until_us: u64) {
        let name = renamed(&key, generation);
        let now = self.clock.now_us();
        let mut map = self.map.write();
        if map.len() >= MAX_RESETS && !map.contains_key(&key) {
            map.retain(|_, (_, until)| *until > now);
            if map.len() >= MAX_RESETS
                && let Some(oldest) = map.iter().min_by_key(|(_, (_, u))| *u).map(|(k, _)| *k)
            {
                map.remove(&oldest);
            }
        }
        map.insert(key, (name, until_us));
        self.live.store(map.len(), Ordering::Relaxed);
    }

    /// Replaces every entry (a full load).
    pub(crate) fn replace_all(&self, entries: impl IntoIterator<Item = (Key, String, u64)>) {
        let now = self.clock.now_us();
        let fresh: HashMap<Key, (Key, u64)> = entries
            .into_iter()
            .filter(|(_, _, until)| *until > now)
            .take(MAX_RESETS)
            .map(|(key, generation, until)| (key, (renamed(&key, &generation), until)))
            .collect();
        let mut map = self.map.write();
        *map = fresh;
        self.live.store(map.len(), Ordering::Relaxed);
    }
}

/// `key`'s name in generation `generation`: a digest (marked as one), so
/// no client's raw key can be it.
fn renamed(key: &Key, generation: &str) -> Key {
    const PAD: [u8; throttle_fleet_core::limits::MAX_KEY_LEN] =
        [0; throttle_fleet_core::limits::MAX_KEY_LEN];
    Key::from_parts(&[
        b"throttle-reset",
        generation.as_bytes(),
        &[u8::from(key.is_digest())],
        key.as_bytes(),
        &PAD,
    ])
}

#[cfg(test)]
mod tests;
