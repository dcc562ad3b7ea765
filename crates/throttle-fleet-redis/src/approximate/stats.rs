//! Counters of the approximate mode.

use std::sync::atomic::{AtomicU64, Ordering};

/// What the approximate mode has done, for dashboards and for trusting it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApproximateStats {
    /// Flushes that reached Redis.
    pub flushes: u64,
    /// Flushes that failed or timed out (their counts are sent again).
    pub failed_flushes: u64,
    /// Duration of the last successful flush, in microseconds.
    pub last_flush_us: u64,
    /// Longest successful flush so far, in microseconds.
    pub max_flush_us: u64,
    /// Keys whose counts were not yet in Redis at the last flush.
    pub pending_keys: u64,
    /// Instances sharing the busiest key, as last estimated (x1000).
    pub nodes_estimate_milli: u64,
    /// Requests denied by a local decision.
    pub local_denials: u64,
    /// Early flushes asked for: a key ran out of its claim before its span
    /// ended.
    pub early_flushes_asked: u64,
    /// Requests that waited for a flush's answer: the fleet had room, this
    /// instance had no claim for them.
    pub waited: u64,
    /// Most a fleet total exceeded the quota in a flush reply.
    pub max_overshoot: u64,
    /// Counts of an interval that ended while Redis was unreachable, given up.
    pub dropped: u64,
    /// Whether the last flush reached Redis.
    pub redis_ok: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(super) flushes: AtomicU64,
    pub(super) failed_flushes: AtomicU64,
    pub(super) last_flush_us: AtomicU64,
    pub(super) max_flush_us: AtomicU64,
    pub(super) pending_keys: AtomicU64,
    pub(super) nodes_estimate_milli: AtomicU64,
    pub(super) local_denials: AtomicU64,
    pub(super) early_flushes_asked: AtomicU64,
    pub(super) waited: AtomicU64,
    pub(super) max_overshoot: AtomicU64,
    pub(super) dropped: AtomicU64,
}

impl Counters {
    /// The counters now; `redis_ok`: whether every rule's last flush
    /// reached Redis.
    pub(super) fn snapshot(&self, redis_ok: bool) -> ApproximateStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ApproximateStats {
            flushes: get(&self.flushes),
            failed_flushes: get(&self.failed_flushes),
            last_flush_us: get(&self.last_flush_us),
            max_flush_us: get(&self.max_flush_us),
            pending_keys: get(&self.pending_keys),
            nodes_estimate_milli: get(&self.nodes_estimate_milli),
            local_denials: get(&self.local_denials),
            early_flushes_asked: get(&self.early_flushes_asked),
            waited: get(&self.waited),
            max_overshoot: get(&self.max_overshoot),
            dropped: get(&self.dropped),
            redis_ok,
        }
    }
}
