//! State shared by every approximate rule of one backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::limiter::ApproxRule;
use super::options::ApproximateOptions;
use super::stats::{ApproximateStats, Counters};
use crate::registry::Registry;

/// State shared by every approximate rule of one backend.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) options: ApproximateOptions,
    pub(super) instance: String,
    /// Numbers the rules built on this backend (part of each rule's id).
    pub(super) next_rule: AtomicU64,
    /// The backend is shutting down: flushes give claims back.
    pub(crate) closing: AtomicBool,
    pub(super) counters: Counters,
    pub(super) rules: Registry<ApproxRule>,
    /// Rules whose limiter was dropped (the router went away) while they
    /// still had counts to write: kept, and flushed, until those are in
    /// Redis.
    pub(super) retired: Retired,
}

/// The retired rules (see [`Shared::retire`]).
#[derive(Default)]
pub(super) struct Retired(Mutex<Vec<Arc<ApproxRule>>>);

impl std::fmt::Debug for Retired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Retired({} rules)", self.0.lock().len())
    }
}

impl Shared {
    pub(crate) fn new(options: ApproximateOptions) -> Arc<Self> {
        Arc::new(Self {
            options,
            instance: instance_id(),
            closing: AtomicBool::new(false),
            next_rule: AtomicU64::new(0),
            counters: Counters::default(),
            rules: Registry::default(),
            retired: Retired::default(),
        })
    }

    pub(crate) fn stats(&self) -> ApproximateStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ApproximateStats {
            flushes: get(&c.flushes),
            failed_flushes: get(&c.failed_flushes),
            last_flush_us: get(&c.last_flush_us),
            max_flush_us: get(&c.max_flush_us),
            pending_keys: get(&c.pending_keys),
            nodes_estimate_milli: get(&c.nodes_estimate_milli),
            local_denials: get(&c.local_denials),
            early_flushes_asked: get(&c.early_flushes_asked),
            waited: get(&c.waited),
            max_overshoot: get(&c.max_overshoot),
            dropped: get(&c.dropped),
            redis_ok: self
                .rules
                .live()
                .iter()
                .all(|r| r.store.meter().redis_down.load(Ordering::Relaxed) == 0),
        }
    }

    /// Flushes every rule now (tests, and graceful shutdown); returns
    /// whether everything reached Redis.
    pub(crate) async fn flush_all(&self) -> bool {
        let mut ok = true;
        for rule in self.rules.live() {
            ok &= rule.flush().await;
        }
        ok
    }

    /// Counts admitted but not yet in Redis, over every rule (retired ones
    /// included).
    pub(crate) fn unwritten(&self) -> u64 {
        self.rules.live().iter().map(|r| r.unwritten()).sum()
    }

    /// Keeps a rule whose limiter was dropped until its counts are written.
    pub(super) fn retire(&self, rule: Arc<ApproxRule>) {
        self.retired.0.lock().push(rule);
    }

    /// Forgets a retired rule with nothing left to write.
    pub(super) fn forget(&self, rule: &ApproxRule) {
        self.retired
            .0
            .lock()
            .retain(|r| !std::ptr::eq(Arc::as_ptr(r), rule));
    }

    /// Flushes the keys that asked for an early flush, in every rule.
    pub(crate) async fn flush_asked(&self) -> bool {
        let mut ok = true;
        for rule in self.rules.live() {
            ok &= rule.flush_asked().await;
        }
        ok
    }
}

/// A random id for this process's field in the shared hashes.
pub(crate) fn instance_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}
