use std::sync::{Arc, OnceLock, Weak};

use super::super::cell::Packed;
use super::super::store::Store;
use super::*;
use crate::Quota;
use crate::algorithm::{Concurrency, FixedWindow, Gcra, GcraState};

#[test]
fn the_table_never_grows_past_its_bound() {
    let store = Store::new(
        Gcra::token_bucket(Quota::per_minute(5)).unwrap(),
        16,
        1_600,
        0,
    );
    for i in 0..50_000u64 {
        // Every key stays busy for a minute, so most inserts must evict.
        let s = store.acquire(&Key::from(i), 1_000_000, 1, u64::MAX);
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
    let store = Store::new(
        FixedWindow::new(Quota::per_second(5)).unwrap(),
        16,
        1_600,
        0,
    );
    // About 62 keys per shard of 100: no shard fills up.
    for i in 0..1_000u64 {
        store.acquire(&Key::from(i), 0, 1, u64::MAX);
    }
    assert_eq!(store.stats().tracked_keys, 1_000);
    // A second later every window has expired: new keys replace idle ones.
    for i in 10_000..11_000u64 {
        store.acquire(&Key::from(i), 1_000_000, 1, u64::MAX);
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
    let store = Store::new(
        FixedWindow::new(Quota::per_second(5)).unwrap(),
        16,
        1_600,
        0,
    );
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

/// A meter that notes, each time the table asks it to decide or to give
/// back, whether any shard of its table was held exclusively then.
#[derive(Debug)]
struct Spy<M: Meter> {
    inner: M,
    table: OnceLock<Weak<Store<Spy<M>>>>,
    calls: AtomicU64,
    exclusive: AtomicU64,
}

impl<M: Meter> Spy<M> {
    fn store(inner: M) -> Arc<Store<Self>> {
        let store = Arc::new(Store::new(
            Self {
                inner,
                table: OnceLock::new(),
                calls: AtomicU64::new(0),
                exclusive: AtomicU64::new(0),
            },
            16,
            1_600,
            0,
        ));
        let _ = store.meter().table.set(Arc::downgrade(&store));
        store
    }

    fn note(&self) {
        let store = self.table.get().and_then(Weak::upgrade);
        let exclusive = match store.as_deref() {
            Some(Store::Packed(t)) => any_exclusive(t),
            Some(Store::Locked(t)) => any_exclusive(t),
            None => false,
        };
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.exclusive
            .fetch_add(u64::from(exclusive), Ordering::Relaxed);
    }
}

fn any_exclusive<M: Meter, K>(t: &Table<M, K>) -> bool {
    t.shards.iter().any(|s| s.lock.is_locked_exclusive())
}

impl<M: Meter> Meter for Spy<M> {
    type State = M::State;
    const TAKES_A_LIMIT: bool = M::TAKES_A_LIMIT;

    fn capacity(&self) -> u64 {
        self.inner.capacity()
    }
    fn acquire(&self, state: &mut M::State, now_us: u64, cost: u64) -> Step {
        self.note();
        self.inner.acquire(state, now_us, cost)
    }
    fn acquire_under(&self, state: &mut M::State, now_us: u64, cost: u64, limit: u64) -> Step {
        self.note();
        self.inner.acquire_under(state, now_us, cost, limit)
    }
    fn refund(&self, state: &mut M::State, acquired_at_us: u64, cost: u64) {
        self.note();
        self.inner.refund(state, acquired_at_us, cost);
    }
    fn idle_at(&self, state: &M::State) -> u64 {
        self.inner.idle_at(state)
    }
    fn packs(&self) -> bool {
        self.inner.packs()
    }
    fn pack(&self, state: &M::State, origin_us: u64) -> u64 {
        self.inner.pack(state, origin_us)
    }
    fn unpack(&self, word: u64, origin_us: u64) -> M::State {
        self.inner.unpack(word, origin_us)
    }
}

/// `(calls made with a shard held exclusively, calls)` during `f`.
fn locking<M: Meter>(store: &Store<Spy<M>>, f: impl FnOnce()) -> (u64, u64) {
    let meter = store.meter();
    let before = (
        meter.exclusive.load(Ordering::Relaxed),
        meter.calls.load(Ordering::Relaxed),
    );
    f();
    (
        meter.exclusive.load(Ordering::Relaxed) - before.0,
        meter.calls.load(Ordering::Relaxed) - before.1,
    )
}

/// Checks of a key the table tracks, allowed and denied, and the slots
/// given back, never hold a shard exclusively: only the first check, which
/// inserts the key, does.
fn a_tracked_key_is_decided_under_the_shared_lock<M: Meter>(meter: M, packed: bool) {
    let store = Spy::store(meter);
    assert_eq!(matches!(*store, Store::Packed(_)), packed);
    let key = Key::new("k");
    let check = || store.acquire(&key, 0, 1, 2).allowed;
    assert_eq!(locking(&store, || assert!(check())), (1, 1));
    assert_eq!(locking(&store, || assert!(check())), (0, 1));
    assert_eq!(locking(&store, || assert!(!check())), (0, 1));
    assert_eq!(locking(&store, || store.refund(&key, 0, 1)), (0, 1));
    // Another key of the table is inserted under the exclusive lock.
    let other = Key::new("other");
    assert_eq!(
        locking(&store, || assert!(store.acquire(&other, 0, 1, 2).allowed)),
        (1, 1)
    );
}

#[test]
fn a_tracked_token_bucket_key_is_decided_by_compare_and_swap() {
    a_tracked_key_is_decided_under_the_shared_lock(
        Gcra::token_bucket(Quota::per_hour(2)).unwrap(),
        true,
    );
}

#[test]
fn a_tracked_concurrency_key_is_decided_by_compare_and_swap() {
    a_tracked_key_is_decided_under_the_shared_lock(
        Concurrency::new(Quota::in_flight(5)).unwrap(),
        true,
    );
}

#[test]
fn a_tracked_fixed_window_key_is_decided_under_its_own_lock() {
    a_tracked_key_is_decided_under_the_shared_lock(
        FixedWindow::new(Quota::per_hour(2)).unwrap(),
        false,
    );
}

/// Two threads (or as many as there are cores) check one key at one
/// instant as fast as they can: exactly the quota is admitted, so no
/// update was lost between them.
fn no_update_is_lost<M: Meter>(meter: M, quota: u64) {
    let store = Store::new(meter, 16, 1_600, 0);
    let key = Key::new("hot");
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    let per_thread = 2 * quota as usize / threads + 1;
    let admitted: usize = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    (0..per_thread)
                        .filter(|_| store.acquire(&key, 0, 1, u64::MAX).allowed)
                        .count()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(admitted as u64, quota);
}

#[test]
fn a_packed_key_checked_from_every_core_admits_exactly_its_quota() {
    no_update_is_lost(
        Gcra::token_bucket(Quota::per_hour(200_000)).unwrap(),
        200_000,
    );
}

#[test]
fn a_locked_key_checked_from_every_core_admits_exactly_its_quota() {
    no_update_is_lost(FixedWindow::new(Quota::per_hour(200_000)).unwrap(), 200_000);
}

#[test]
fn a_slot_is_small() {
    assert_eq!(std::mem::size_of::<StoredKey>(), 24);
    assert_eq!(std::mem::size_of::<Slot<Packed>>(), 32);
    assert_eq!(
        std::mem::size_of::<Slot<parking_lot::Mutex<GcraState>>>(),
        48
    );
}

#[test]
fn a_reload_keeps_a_packed_buckets_counts_unless_the_new_quota_does_not_pack() {
    let store = Store::new(
        Gcra::token_bucket(Quota::per_second(3)).unwrap(),
        16,
        1_600,
        0,
    );
    let key = Key::new("k");
    for _ in 0..3 {
        assert!(store.acquire(&key, 0, 1, u64::MAX).allowed);
    }
    // 6 a second: the second the three took is all its burst.
    let six = store
        .with_meter(Gcra::token_bucket(Quota::per_second(6)).unwrap())
        .expect("both pack");
    assert!(!six.acquire(&key, 0, 1, u64::MAX).allowed);
    assert!(six.acquire(&key, 1_000_000, 6, u64::MAX).allowed);
    // 4,097 a second does not pack: its table starts afresh.
    let odd = Gcra::token_bucket(Quota::per_second(4_097)).unwrap();
    assert!(store.with_meter(odd).is_none());
}
