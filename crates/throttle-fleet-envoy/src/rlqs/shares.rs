//! How one bucket's quota is split between the Envoys that report it: each
//! gets a share (a weight, at most 1 in all) in proportion to the demand
//! it reports, taken only from what the others do not hold, so the
//! weights held never sum past 1. A share stays held until the assignment
//! made from it expires, even when its Envoy has gone: that Envoy may
//! still be admitting under it.
//!
//! The same arithmetic runs in this process ([`MemoryShares`]) and in
//! Redis (`redis.rs`, for several service replicas), on the caller's
//! clock.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Weights are whole 1/`STEPS` parts: an Envoy whose demand moves a
/// little keeps the same weight, so Envoy keeps the token bucket it has
/// (a changed bucket starts full).
pub(crate) const STEPS: u32 = 64;

/// A weight is kept while the target stays within this many steps of it,
/// or within a quarter of it when that is more (a report's count of a
/// few requests a second moves by a large part from one to the next).
pub(crate) const HYSTERESIS: u32 = 4;

/// One Envoy's holding on one bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Holding {
    /// Its weight, in steps of 1/[`STEPS`].
    pub(crate) steps: u32,
    /// Requests per second it reported (smoothed).
    pub(crate) demand: f64,
    /// When the assignment made from `steps` expires (ms, caller's clock).
    pub(crate) expires_ms: u64,
}

/// One report of an Envoy on one bucket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Report<'a> {
    pub(crate) envoy: &'a str,
    /// Requests per second it saw (allowed and denied) since its last
    /// report.
    pub(crate) demand: f64,
    /// The bucket's quota in requests per second.
    pub(crate) capacity: f64,
    pub(crate) now_ms: u64,
    /// When the assignment made now expires: a report's lifetime from
    /// now, a review's no later than its Envoy's last report's (ms).
    pub(crate) expires_ms: u64,
}

/// The weight (in steps) `report`'s Envoy holds from now, updating
/// `holdings` (expired ones dropped). The target is max-min fair: under
/// the quota, each Envoy's demand and an equal part of what nobody uses
/// (so demand that moves between Envoys finds room at once); over it, a
/// part in proportion to demand.
pub(crate) fn allocate(holdings: &mut HashMap<String, Holding>, report: Report<'_>) -> u32 {
    holdings.retain(|_, h| h.expires_ms > report.now_ms);
    let previous = holdings.get(report.envoy).copied();
    // Smoothed over two reports: one burst does not move the split alone.
    let demand = match previous {
        Some(p) => (p.demand + report.demand) / 2.0,
        None => report.demand,
    }
    .max(0.0);
    let others: u32 = holdings
        .iter()
        .filter(|(e, _)| e.as_str() != report.envoy)
        .map(|(_, h)| h.steps)
        .sum();
    let others_demand: f64 = holdings
        .iter()
        .filter(|(e, _)| e.as_str() != report.envoy)
        .map(|(_, h)| h.demand)
        .sum();
    let n = holdings.len() as u32 + u32::from(previous.is_none());
    let total = demand + others_demand;
    let capacity = report.capacity.max(f64::MIN_POSITIVE);
    let target_of = |d: f64| {
        let share = if total >= capacity {
            d / total
        } else {
            (d + (capacity - total) / f64::from(n.max(1))) / capacity
        };
        // Every Envoy keeps at least one step: an idle one still admits.
        ((share * f64::from(STEPS)).floor() as u32).clamp(1, STEPS)
    };
    let target = target_of(demand);
    // Another Envoy holds less than its own target: this one must not keep
    // more than its target, however small the difference.
    let others_want: u32 = holdings
        .iter()
        .filter(|(e, _)| e.as_str() != report.envoy)
        .map(|(_, h)| target_of(h.demand))
        .sum();
    let starving = others_want > others;
    let spare = STEPS.saturating_sub(others);
    let wanted = match previous {
        // Small moves keep the weight (and Envoy its bucket); not for an
        // Envoy with nothing yet (one step is worth sending), nor to keep
        // more than the target while another is short.
        Some(p)
            if p.steps > 0
                && p.steps.abs_diff(target) < HYSTERESIS.max(p.steps / 4)
                && !(p.steps > target && starving) =>
        {
            p.steps
        }
        _ => target,
    };
    let steps = wanted.min(spare);
    holdings.insert(
        report.envoy.to_owned(),
        Holding {
            steps,
            demand,
            expires_ms: report.expires_ms,
        },
    );
    steps
}

/// Shards of [`MemoryShares`]: reports on different buckets rarely wait
/// for one another.
const SHARDS: usize = 16;

/// The shares of every bucket, in this process. A report costs the same
/// whatever the number of live buckets: each bucket has one entry in its
/// shard's expiry heap, at or before the latest expiry it holds, and a
/// report first drops the buckets of its shard whose entry is due (a
/// bucket still held is pushed again at its latest expiry), and those of
/// one other shard in turn, so each bucket is looked at about once per
/// assignment lifetime, not once per report.
#[derive(Debug)]
pub(crate) struct MemoryShares {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    /// The shard the next report also sweeps.
    turn: AtomicUsize,
}

impl Default for MemoryShares {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            turn: AtomicUsize::new(0),
        }
    }
}

#[derive(Debug, Default)]
struct Shard {
    buckets: HashMap<Arc<str>, Bucket>,
    /// (when, bucket): one entry per bucket, due at `Bucket::due`.
    expiries: BinaryHeap<Reverse<(u64, Arc<str>)>>,
}

#[derive(Debug)]
struct Bucket {
    holdings: HashMap<String, Holding>,
    /// When its heap entry is due.
    due: u64,
}

impl Shard {
    /// Drops the buckets every holding of which expired by `now`.
    fn sweep(&mut self, now: u64) {
        while let Some(Reverse((due, _))) = self.expiries.peek()
            && *due <= now
        {
            let Some(Reverse((due, name))) = self.expiries.pop() else {
                break;
            };
            let Some(bucket) = self.buckets.get_mut(&name) else {
                continue;
            };
            if bucket.due != due {
                // A stale entry: the bucket was released and made again.
                continue;
            }
            let latest = bucket.holdings.values().map(|h| h.expires_ms).max();
            match latest {
                Some(latest) if latest > now => {
                    bucket.due = latest;
                    self.expiries.push(Reverse((latest, name)));
                }
                _ => {
                    self.buckets.remove(&name);
                }
            }
        }
    }
}

impl MemoryShares {
    fn shard(&self, bucket: &str) -> &Mutex<Shard> {
        &self.shards[self.hasher.hash_one(bucket) as usize % self.shards.len()]
    }

    /// [`allocate`] on `bucket`'s holdings.
    pub(crate) fn report(&self, bucket: &str, report: Report<'_>) -> u32 {
        let other = self.turn.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        if let Some(mut shard) = self.shards[other].try_lock() {
            shard.sweep(report.now_ms);
        }
        let mut shard = self.shard(bucket).lock();
        shard.sweep(report.now_ms);
        if let Some(b) = shard.buckets.get_mut(bucket) {
            return allocate(&mut b.holdings, report);
        }
        let name: Arc<str> = Arc::from(bucket);
        let mut holdings = HashMap::new();
        let steps = allocate(&mut holdings, report);
        let due = report.expires_ms;
        shard.expiries.push(Reverse((due, Arc::clone(&name))));
        shard.buckets.insert(name, Bucket { holdings, due });
        steps
    }

    /// Gives up `envoy`'s share of `bucket` (its bucket was abandoned).
    pub(crate) fn release(&self, bucket: &str, envoy: &str) {
        let mut shard = self.shard(bucket).lock();
        if let Some(b) = shard.buckets.get_mut(bucket) {
            b.holdings.remove(envoy);
            if b.holdings.is_empty() {
                shard.buckets.remove(bucket);
            }
        }
    }
}

#[cfg(test)]
mod tests;
