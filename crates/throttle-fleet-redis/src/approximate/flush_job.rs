//! When a rule flushes, as a job of the backend's scheduler
//! (`crate::schedule`):
//!
//! - at every span end (the meter's `next_boundary`), whether or not early
//!   flushes happen meanwhile (a steady stream of asks must not starve it);
//! - when a key ran out of claim and asked: at once, but at most once per
//!   early-flush gap, so that a burst of new keys costs Redis a few calls
//!   per gap, not one per key;
//! - while a bucket is down: every probe interval (counted from when it
//!   went down or from the last try), so that a rule that refuses
//!   meanwhile (fail closed) serves again soon after Redis does; and at
//!   once when a breaker closes.
//!
//! Every flush runs detached: a bucket whose node hangs holds up no early
//! flush of another. The flushes of one bucket tried while its node hangs
//! (a retry every probe interval) do not queue up: one waits for the flush
//! out and writes for all of them (`flush.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use tokio::sync::Notify;

use super::limiter::ApproxRule;
use crate::schedule::{Job, Run, Wake, Work, micros};

/// A rule's flush schedule, as a job of the backend's scheduler.
pub(super) struct FlushJob {
    rule: Weak<ApproxRule>,
    /// The next span-end flush (µs, the rule's clock).
    boundary: AtomicU64,
    /// When the last early flush started.
    last_early: AtomicU64,
    /// When the last flush started.
    last_try: AtomicU64,
    /// The last breaker closing acted on (µs).
    recovery_seen: AtomicU64,
    gap_us: u64,
    probe_us: u64,
    /// A key asked, or a bucket went down.
    wake: Arc<Notify>,
    /// A breaker closed.
    recovered: Arc<Notify>,
}

impl FlushJob {
    pub(super) fn new(rule: &Arc<ApproxRule>) -> Self {
        let now = rule.redis.local_now();
        Self {
            rule: Arc::downgrade(rule),
            boundary: AtomicU64::new(rule.store.meter().next_boundary(now)),
            last_early: AtomicU64::new(0),
            last_try: AtomicU64::new(0),
            recovery_seen: AtomicU64::new(rule.redis.last_recovery()),
            gap_us: micros(rule.shared.options.early_flush_gap),
            probe_us: micros(rule.redis.config.probe_interval),
            wake: rule.wake.clone(),
            recovered: rule.redis.recovered.clone(),
        }
    }

    /// When the rule's asked buckets may be flushed: once a gap after the
    /// last early flush. (Asked buckets with no time of asking are those a
    /// flush that left already will take.)
    fn early_at(&self, rule: &ApproxRule) -> Option<u64> {
        let asked_at = rule.asked_at.load(Ordering::Relaxed);
        (asked_at != 0 && rule.asked.load(Ordering::Relaxed) != 0).then(|| {
            let gap_over = self.last_early.load(Ordering::Relaxed) + self.gap_us;
            asked_at.max(gap_over)
        })
    }

    /// When a rule with a bucket down tries again.
    fn retry_at(&self, rule: &ApproxRule) -> u64 {
        let since = rule
            .view
            .down_at
            .load(Ordering::Relaxed)
            .max(self.last_try.load(Ordering::Relaxed));
        since + self.probe_us
    }

    /// A breaker closing not acted on yet, if a bucket is down.
    fn recovery(&self, rule: &ApproxRule) -> Option<u64> {
        let at = rule.redis.last_recovery();
        (rule.view.any_down() && at > self.recovery_seen.load(Ordering::Relaxed)).then_some(at)
    }
}

impl Job for FlushJob {
    fn next(&self, _now: u64) -> Option<Wake> {
        let rule = self.rule.upgrade()?;
        let mut wake = Wake::timer(self.boundary.load(Ordering::Relaxed));
        if let Some(at) = self.early_at(&rule) {
            wake = wake.min(Wake::signal(at));
        }
        if let Some(at) = self.recovery(&rule) {
            wake = wake.min(Wake::signal(at));
        } else if rule.view.any_down() {
            wake = wake.min(Wake::timer(self.retry_at(&rule)));
        }
        Some(wake)
    }

    fn due(&self, now: u64) -> Option<Run> {
        let rule = self.rule.upgrade()?;
        let boundary = self.boundary.load(Ordering::Relaxed);
        if now >= boundary {
            let next = rule.store.meter().next_boundary(now.max(boundary));
            self.boundary.store(next, Ordering::Relaxed);
            self.last_try.store(now, Ordering::Relaxed);
            return Some(Run::Detach(Box::pin(async move {
                rule.flush().await;
            })));
        }
        if self.early_at(&rule).is_some_and(|at| now >= at) {
            self.last_early.store(now, Ordering::Relaxed);
            rule.asked_at.store(0, Ordering::Relaxed);
            return Some(Run::Detach(Box::pin(async move {
                rule.flush_asked().await;
            })));
        }
        let recovery = self.recovery(&rule);
        if recovery.is_some() || (rule.view.any_down() && now >= self.retry_at(&rule)) {
            if let Some(at) = recovery {
                self.recovery_seen.store(at, Ordering::Relaxed);
            }
            self.last_try.store(now, Ordering::Relaxed);
            return Some(Run::Detach(Box::pin(async move {
                rule.flush().await;
            })));
        }
        None
    }

    fn changed(&self) -> Work {
        let (wake, recovered) = (self.wake.clone(), self.recovered.clone());
        Box::pin(async move {
            tokio::select! {
                () = wake.notified() => {}
                () = recovered.notified() => {}
            }
        })
    }
}
