//! The claims: what one flush grants an instance, stated once. `grant` is
//! the Rust mirror of `flush.lua`, line for line, over the same field
//! strings; a test runs both on the same random inputs (the mirror is
//! built for the tests: in production the script runs in Redis).
//!
//! At every span end an instance writes, for each key it saw since its last
//! span-end write (and each key still holding a claim), its cumulative
//! count for the interval, the most it may admit before the reply arrives
//! (its *hold*), its demand (requests per span, denied ones included) and
//! its *need*: the cost of the requests waiting for this answer. An early
//! flush (a request found no claim while the fleet had room) writes the
//! keys that asked. For each key the script computes, from the sums of
//! every other instance's entry:
//!
//! ```text
//! limit  = MAX - previous interval's total x its remaining weight (sliding; 0 for fixed)
//! pool   = limit - sum of all counts
//! free   = limit - what the other instances may have admitted - my count - reserve
//!          (each: the larger of its count and its claim; their sum is the
//!          `holds` of the fields below)
//! share  = pool x my demand / (my demand + the live demands of the others)
//! likely = free - unwritten x the previous interval's remaining weight (sliding; free for fixed)
//! unwritten = per entry of the previous interval, min(its demand, its claim - its count)
//! spare  = min(likely - min(pool, others known + 1), likely / 2)   while demand <= 2 x pool
//!          and another instance is known; likely otherwise
//! grant  = min(free, max(need, min(spare, share, 3 x my demand)))
//!          + overdraft, if need > grant and pool > grant:
//!            up to max(1, MAX / (8 x N)) per key and interval, fleet-wide
//! claim  = max(hold, my count + grant)
//! reserve = (fleet size known - 1 - others written) x credit, during the key's
//!           first two spans of the interval
//! credit = MAX / (8 x fleet size known x N), rounded down
//! ```
//!
//! (`pool` and `free` never count the fleet below the count this instance
//! last heard: should Redis have lost data, that is the better floor.)
//!
//! and stores `claim` with this instance's entry. An instance admits a key
//! only up to its claim, which holds for the span it was granted in and the
//! next. An entry's demand is *live* (it weighs in the shares) while its
//! writer's span is at most two behind the reader's (one span of clock
//! skew tolerated); its hold counts as taken whatever its age (its owner
//! may have spent the claim without a write that arrived). A request past
//! its instance's claim while the window has room waits for the early flush
//! it asks for (bounded by the command timeout, then the failure policy
//! decides); the `spare` rule keeps part of what is free for such
//! requests, so that claims sized to one instance's demand never leave a
//! request elsewhere without room while the fleet has it. What is still
//! claimed elsewhere (a client whose traffic just moved away from an
//! instance that holds a claim) is covered by the small **overdraft**. So
//! at every script run the claims of the fleet fit in `limit` plus the
//! overdraft, and the fleet admits no more than that except for
//! **credits**: before an instance has an entry for a key in an interval it
//! may admit a credit on its own (none below eight requests per instance
//! and span, where a key's first request waits). During a key's first two
//! spans the script reserves a credit for every instance it knows of that
//! has not written the key yet; after that, an instance that sees the key
//! for the first time spends a credit no claim covered.
//!
//! `unwritten` is what the previous interval's total probably lacks early
//! in an interval: each instance writes its last count of an interval at
//! its first span-end flush of the next, a fraction of a span after the
//! boundary (its timers' phase), so the first instances to write in the
//! new interval read a total without the others' last span. Sized on that
//! total alone, their claims took room the others' last span had used: a
//! client riding a sliding window near its quota then found every other
//! instance with nothing free, and was denied for the rest of the span
//! (BENCHMARKS.md, the under-quota matrix). Only the claim beyond the
//! requests waiting is sized on `likely`: a waiting request is granted on
//! the counts, as before (for a small quota a recently seen key's demand
//! stays at one request per span, and an estimate made of such demands
//! would deny it). An entry written with the interval's last count has
//! demand 0 and adds nothing, so the estimate is gone once every instance
//! has written; its claim bounds it (an instance admits no more than its
//! claim), so a client over its quota, whose demand counts its denied
//! requests, does not inflate it.
//!
//! Worst case per interval (fixed window, clocks within one span of each
//! other, Redis keeping its data):
//! `MAX + max(1, MAX / (8 x N)) + (I - 1) x MAX / (8 x N)`, where `I` is
//! the number of instances serving the key (the credit at its largest: an
//! instance that has not learnt the fleet's size yet counts a fleet of
//! one). The demand-weighted share moves the unspent quota towards where
//! the traffic is at every flush; the cap of three spans of demand leaves
//! the rest free for instances that start seeing the key.
//!
//! A flush is idempotent (absolute counts), and each carries a sequence
//! number: the script refuses a write older than the entry it would
//! replace, so a flush that timed out and runs late never overwrites a
//! newer count.
//!
//! # The fields, and what a write costs
//!
//! A key `K` of a bucket's hash has a field `K` holding
//! `@<first span>:<overdrawn>`, the sums of every instance's entry as one
//! pseudo-entry `~<instances>;<demand x span>;<span>.<demand>;...=0:<counts>:<holds>:<last span>:<demands>`
//! (spans relative to the interval's first, demands per span kept for the
//! spans still live), and a field `K.<id>` per instance with its own
//! `<seq>:<count>:<claim>:<span>:<demand>`. A write reads its own entry,
//! takes it out of the sums and puts the new one in: two fields read and
//! written, whatever the number of instances (the fleet's sums replace the
//! per-instance list that every write used to parse and rebuild, O(I) per
//! write and O(I²) per span for a key every instance serves).

/// The part of a share that credits and the overdraft are: an eighth.
const EIGHTH: u64 = 8;

/// What an instance may admit for a key before Redis has heard of it:
/// `MAX / (8 x fleet x N)`, rounded down, where `fleet` is the fleet's size
/// as this instance knows it. An eighth of its share of one span, small on
/// purpose: the one part of the fleet's admissions that no claim covers.
pub(super) fn credit(limit: u64, fleet: u64, spans: u64) -> u64 {
    limit / (EIGHTH * fleet.max(1) * spans)
}

/// The most a key's waiting requests may get per interval, fleet-wide,
/// beyond what no instance holds a claim on: `max(1, MAX / (8 x N))`, an
/// eighth of a span's share of the quota, at least one.
pub(super) fn overdraft(limit: u64, spans: u64) -> u64 {
    (limit / (EIGHTH * spans)).max(1)
}

/// A script's answer for one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Reply {
    pub(super) spent: i64,
    pub(super) claim: i64,
    pub(super) limit: i64,
    pub(super) instances: i64,
    pub(super) prev: i64,
    /// The other instances' counts brought forward by their demand, and
    /// their demand.
    pub(super) estimate: i64,
    pub(super) rate: i64,
    /// What no instance holds a claim on once this claim is granted.
    pub(super) free: i64,
}

impl Reply {
    /// `spent:claim:limit:instances:prev:estimate:rate:free`; `None` for `S`
    /// (a later flush of this instance is already there) or anything
    /// unexpected.
    pub(super) fn parse(s: &str) -> Option<Self> {
        let mut it = s.split(':').map(|v| v.parse::<i64>().ok());
        let mut next = || it.next().flatten();
        let reply = Self {
            spent: next()?,
            claim: next()?,
            limit: next()?,
            instances: next()?,
            prev: next()?,
            estimate: next()?,
            rate: next()?,
            free: next()?,
        };
        next().is_none().then_some(reply)
    }
}

impl Reply {
    /// The fields as the key's state holds them, in the reply's order
    /// (`spent, claim, limit, instances, prev, estimate, rate, free`): a
    /// limit pushed below zero by the previous interval reads as 0.
    pub(super) fn as_u32(&self) -> [u32; 8] {
        [
            self.spent,
            self.claim,
            self.limit,
            self.instances,
            self.prev,
            self.estimate,
            self.rate,
            self.free,
        ]
        .map(|x| u32::try_from(x.max(0)).unwrap_or(u32::MAX))
    }
}

#[cfg(test)]
mod tests;
