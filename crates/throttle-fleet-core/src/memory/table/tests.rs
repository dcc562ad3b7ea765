use super::*;
use crate::Quota;
use crate::algorithm::{FixedWindow, Gcra, SlidingWindowLog};

#[test]
fn the_table_never_grows_past_its_bound() {
    let store = Store::new(Gcra::token_bucket(Quota::per_minute(5)).unwrap(), 16, 1_600);
    for i in 0..50_000u64 {
        // Every key stays busy for a minute, so most inserts must evict.
        let s = store.acquire(&Key::from(i), 1_000_000, 1);
        assert!(s.allowed);
    }
    let stats = store.stats();
    assert!(stats.tracked_keys <= 1_600, "{stats:?}");
    assert!(stats.tracked_keys >= 1_500, "{stats:?}");
    assert!(stats.evictions >= 48_000, "{stats:?}");
    // Every tracked key is still found and still counted.
    let mut found = 0;
    for i in 0..50_000u64 {
        if store.update(&Key::from(i), |_| ()).is_some() {
            found += 1;
        }
    }
    assert_eq!(found, stats.tracked_keys);
}

#[test]
fn idle_keys_are_swept_before_anything_is_evicted() {
    let store = Store::new(FixedWindow::new(Quota::per_second(5)).unwrap(), 16, 1_600);
    // About 62 keys per shard of 100: no shard fills up.
    for i in 0..1_000u64 {
        store.acquire(&Key::from(i), 0, 1);
    }
    assert_eq!(store.stats().tracked_keys, 1_000);
    // A second later every window has expired: new keys replace idle ones.
    for i in 10_000..11_000u64 {
        store.acquire(&Key::from(i), 1_000_000, 1);
    }
    let stats = store.stats();
    assert_eq!(stats.evictions, 0, "{stats:?}");
    assert!(
        stats.tracked_keys < 2_000,
        "idle keys were swept: {stats:?}"
    );
}

#[test]
fn keys_come_back_as_they_went_in() {
    let store = Store::new(FixedWindow::new(Quota::per_second(5)).unwrap(), 16, 1_600);
    let keys = [
        Key::new("short"),
        Key::new([7u8; 64]),
        Key::new(vec![1u8; 500]),
        Key::global(),
    ];
    for (i, k) in keys.iter().enumerate() {
        store.with_state(k, 0, |st| st.count = i as u64 + 1);
    }
    let mut seen = Vec::new();
    store.for_each(|k, st| seen.push((*k, st.count)));
    seen.sort_by_key(|(_, c)| *c);
    let expected: Vec<(Key, u64)> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (*k, i as u64 + 1))
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(store.update(&Key::new("absent"), |st| st.count), None);
    assert_eq!(store.update(&keys[2], |st| st.count), Some(3));
}

/// A meter that counts its `acquire`s: the store calls `acquire` only
/// under the shard's exclusive lock (where it may write the state), and
/// `deny_read_only` under the shared one, so the count is the exclusive
/// locks taken.
#[derive(Debug)]
struct Counting<M> {
    inner: M,
    acquires: AtomicU64,
}

impl<M: Meter> Counting<M> {
    fn new(inner: M) -> Self {
        Self {
            inner,
            acquires: AtomicU64::new(0),
        }
    }
}

impl<M: Meter> Meter for Counting<M> {
    type State = M::State;
    const DENIES_READ_ONLY: bool = M::DENIES_READ_ONLY;

    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn acquire(&self, state: &mut M::State, now_us: u64, cost: u64) -> Step {
        self.acquires.fetch_add(1, Ordering::Relaxed);
        self.inner.acquire(state, now_us, cost)
    }
    fn refund(&self, state: &mut M::State, acquired_at_us: u64, cost: u64) {
        self.inner.refund(state, acquired_at_us, cost);
    }
    fn idle_at(&self, state: &M::State) -> u64 {
        self.inner.idle_at(state)
    }
    fn deny_read_only(&self, state: &M::State, now_us: u64, cost: u64) -> Option<Step> {
        self.inner.deny_read_only(state, now_us, cost)
    }
}

/// Exclusive locks taken by `checks` checks of `key` at `now`, and
/// whether all were allowed.
fn exclusive_locks<M: Meter>(
    store: &Store<Counting<M>>,
    key: &Key,
    now: u64,
    checks: usize,
) -> (u64, bool) {
    let before = store.meter().acquires.load(Ordering::Relaxed);
    let allowed = (0..checks).fold(true, |all, _| store.acquire(key, now, 1).allowed && all);
    (
        store.meter().acquires.load(Ordering::Relaxed) - before,
        allowed,
    )
}

#[test]
fn a_key_that_stays_denied_is_decided_without_an_exclusive_lock() {
    let tb = Gcra::token_bucket(Quota::per_second(2)).unwrap();
    let store = Store::new(Counting::new(tb), 16, 1_600);
    let (hot, other) = (Key::new("hot"), Key::new("other"));
    assert_eq!(exclusive_locks(&store, &hot, 0, 2), (2, true));
    // The first denial is found under the exclusive lock; the rest only
    // read, and say the same.
    let first = store.acquire(&hot, 0, 1);
    assert!(!first.allowed);
    assert_eq!(exclusive_locks(&store, &hot, 0, 100), (0, false));
    assert_eq!(store.acquire(&hot, 0, 1), first);
    // Another key of the table is not affected.
    assert_eq!(exclusive_locks(&store, &other, 0, 1), (1, true));
    // Once the key fits again it takes the exclusive lock to be charged,
    // and its next checks do too while they are allowed.
    assert_eq!(exclusive_locks(&store, &hot, 500_000, 1), (1, true));
    assert_eq!(exclusive_locks(&store, &hot, 2_000_000, 2), (2, true));
}

#[test]
fn a_meter_without_read_only_denials_always_locks() {
    let log = SlidingWindowLog::new(Quota::per_second(1)).unwrap();
    let store = Store::new(Counting::new(log), 16, 1_600);
    let key = Key::new("k");
    assert_eq!(exclusive_locks(&store, &key, 0, 1), (1, true));
    assert_eq!(exclusive_locks(&store, &key, 0, 3), (3, false));
}

#[test]
fn a_slot_is_small() {
    assert_eq!(std::mem::size_of::<StoredKey>(), 24);
    assert_eq!(std::mem::size_of::<Slot<crate::algorithm::GcraState>>(), 40);
}
