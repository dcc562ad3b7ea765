//! What a rule knows of Redis and of the fleet, shared by its requests and
//! its flushes: which buckets' last flush failed, when the flushes out
//! began, and the fleet's size learnt from the replies.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::buckets::{AtomicBuckets, Buckets, each};

/// A rule's view of Redis and of the fleet.
#[derive(Debug)]
pub(super) struct View {
    /// The buckets (bit `b` for bucket `b`) whose last flush did not reach
    /// Redis: in a cluster a hung primary downs only the buckets it serves.
    pub(super) redis_down: AtomicBuckets,
    /// When (µs, the rule's clock) the flush out to each bucket began, or
    /// 0: a flush out longer than the command timeout counts as down, so
    /// a hung Redis hands keys whose claim ran out to the failure policy
    /// after one command timeout, not after the whole flush timeout.
    flight_since: Box<[AtomicU64]>,
    /// When (µs, the rule's clock) a bucket last went down.
    pub(super) down_at: AtomicU64,
    /// The command timeout, in µs.
    overdue_after_us: u64,
    pub(super) fleet: Fleet,
}

impl View {
    /// The view of a rule with `buckets` buckets, a flush overdue after
    /// `overdue_after_us`.
    pub(super) fn new(buckets: u64, overdue_after_us: u64) -> Self {
        Self {
            redis_down: AtomicBuckets::new(0),
            flight_since: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
            down_at: AtomicU64::new(0),
            overdue_after_us,
            fleet: Fleet::default(),
        }
    }

    /// Whether some bucket's last flush failed.
    pub(super) fn any_down(&self) -> bool {
        self.redis_down.load(Ordering::Relaxed) != 0
    }

    /// Whether the last flush of `bucket` reached Redis, and the one out
    /// now (if any) has not been waiting longer than the command timeout.
    #[inline]
    pub(super) fn bucket_ok(&self, bucket: u64, now_us: u64) -> bool {
        if self.redis_down.load(Ordering::Relaxed) & (1 << bucket) != 0 {
            return false;
        }
        let since = self.flight_since[bucket as usize].load(Ordering::Relaxed);
        since == 0 || now_us.saturating_sub(since) <= self.overdue_after_us
    }

    /// A flush to the buckets in `buckets` (bit `b`) leaves at `now_us`.
    pub(super) fn flights_started(&self, buckets: Buckets, now_us: u64) {
        for b in each(buckets) {
            self.flight_since[b as usize].store(now_us.max(1), Ordering::Relaxed);
        }
    }

    /// The flush to the buckets in `buckets` is back (or gave up).
    pub(super) fn flights_ended(&self, buckets: Buckets) {
        for b in each(buckets) {
            self.flight_since[b as usize].store(0, Ordering::Relaxed);
        }
    }
}

/// The fleet size a rule has learnt from flush replies: the most instances
/// seen writing one key, this interval or the one before.
#[derive(Debug, Default)]
pub(super) struct Fleet {
    interval: AtomicU64,
    now: AtomicU32,
    before: AtomicU32,
}

impl Fleet {
    pub(super) fn size(&self) -> u32 {
        self.now
            .load(Ordering::Relaxed)
            .max(self.before.load(Ordering::Relaxed))
            .max(1)
    }

    pub(super) fn saw(&self, interval: u64, instances: u32) {
        let at = self.interval.load(Ordering::Relaxed);
        if interval > at
            && self
                .interval
                .compare_exchange(at, interval, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let last = self.now.swap(0, Ordering::Relaxed);
            let before = if interval == at + 1 { last } else { 0 };
            self.before.store(before, Ordering::Relaxed);
        }
        let at = self.interval.load(Ordering::Relaxed);
        if interval >= at {
            self.now.fetch_max(instances, Ordering::Relaxed);
        } else if interval + 1 == at {
            self.before.fetch_max(instances, Ordering::Relaxed);
        }
    }
}
