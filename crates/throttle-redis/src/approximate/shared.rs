//! State shared by every approximate rule of one backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::limiter::ApproxRule;
use super::options::ApproximateOptions;
use super::stats::{ApproximateStats, Counters};
use crate::registry::Registry;

/// State shared by every approximate rule of one backend.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) options: ApproximateOptions,
    pub(super) instance: String,
    pub(super) redis_ok: AtomicBool,
    pub(super) counters: Counters,
    pub(super) rules: Registry<ApproxRule>,
}

impl Shared {
    pub(crate) fn new(options: ApproximateOptions) -> Arc<Self> {
        Arc::new(Self {
            options,
            instance: instance_id(),
            redis_ok: AtomicBool::new(true),
            counters: Counters::default(),
            rules: Registry::default(),
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
            max_overshoot: get(&c.max_overshoot),
            dropped: get(&c.dropped),
            redis_ok: self.redis_ok.load(Ordering::Relaxed),
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
