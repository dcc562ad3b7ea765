//! Room in a bounded table of keys: what the blocked keys and the
//! penalties' histories share.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

/// How often, at most, a full table is scanned for entries that ended.
const SWEEP_EVERY_US: u64 = 1_000_000;

/// Whether `map` has room for one more key under `max`, after forgetting
/// the entries no longer `alive` if it is full. That scan runs at most once
/// a second (`next_sweep_us`, updated here under the caller's lock): a
/// table kept full by a flood of new keys costs one scan a second, not one
/// per key.
pub(super) fn make_room<K: Eq + Hash, V>(
    map: &mut HashMap<K, V>,
    max: usize,
    now_us: u64,
    next_sweep_us: &AtomicU64,
    alive: impl Fn(&V) -> bool,
) -> bool {
    if map.len() < max {
        return true;
    }
    if now_us >= next_sweep_us.load(Ordering::Relaxed) {
        map.retain(|_, v| alive(v));
        next_sweep_us.store(now_us.saturating_add(SWEEP_EVERY_US), Ordering::Relaxed);
    }
    map.len() < max
}

#[cfg(test)]
mod tests;
