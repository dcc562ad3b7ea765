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
mod tests {
    use super::*;

    #[test]
    fn a_full_table_is_scanned_at_most_once_a_second() {
        let next = AtomicU64::new(0);
        let mut map: HashMap<u32, u64> = (0..4).map(|k| (k, 10_000_000)).collect();
        // Full, nothing ended: a scan, then none until a second has passed.
        assert!(!make_room(&mut map, 4, 100, &next, |until| *until > 100));
        assert_eq!(next.load(Ordering::Relaxed), 1_000_100);
        // Everything ended by now, but the scan waits for its second.
        assert!(!make_room(&mut map, 4, 500_000, &next, |_| false));
        assert_eq!(map.len(), 4);
        assert!(make_room(&mut map, 4, 1_000_100, &next, |_| false));
        assert!(map.is_empty());
    }
}
