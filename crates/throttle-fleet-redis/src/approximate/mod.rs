//! Approximate mode: decided locally, flushed to Redis at every span end
//! (after the design in "Decentralized Request Throttling"), with each
//! instance spending only a *claim* on what the fleet has left.
//!
//! Each rule's quota `MAX` per `INTERVAL` is split into `N` spans. Requests
//! are counted per key in this process's memory and decided there, with no
//! Redis call on the request path. At each span end (and early, at most once
//! per early-flush gap, when a key runs out of claim) one flush writes, for
//! every key seen since the last flush, this instance's *cumulative* count
//! for the interval and its demand, and gets back a claim: the most it may
//! have admitted by its next flush (`claims.rs` has the formula, the bound
//! and the fields). Keys share a rule's bucket hashes per interval (8 on a
//! standalone Redis, 64 on a Cluster: `buckets.rs`; per key, one field with
//! the fleet's sums and one per instance), one script call per hash and
//! 1,000 keys: a flush costs a few commands per bucket, whatever the number
//! of keys.
//! Writing absolute counts makes a flush idempotent, and a sequence number
//! keeps a late flush from overwriting a newer one.
//!
//! The local decision feeds what the fleet has counted (the last reply plus
//! what this instance admitted since) to the same window code the memory
//! backend uses (`FixedWindow` or `SlidingWindowCounter`), for the answer's
//! remaining count, reset and retry-after, and admits only within its claim.
//! A request past the claim while the window has room as last heard is not
//! denied for it: it waits for the early flush it asks for (at most the
//! command timeout; `Answer::Pending`), and is decided on the claim that
//! answer grants. Before a key has an entry in an interval an instance may
//! admit a small credit on its own (`claims.rs`: none below eight requests
//! per instance and span). A reply showing the fleet at the limit
//! denies the key locally (fixed window: until the interval ends or the
//! cooldown lifts; sliding counter: until the window has room again).
//! While Redis cannot be reached a valid claim is still spent; past it, the
//! rule's failure policy decides: `fail_closed()` refuses, `fail_open()`
//! decides on the last reply with the other instances brought forward at
//! the demand they reported, and `local_fallback()` also keeps each key to
//! its share of a span.

mod backend;
mod buckets;
mod claims;
mod flush;
mod flush_job;
mod limiter;
mod meter;
mod options;
mod plan;
mod shared;
mod stats;
mod turns;
mod view;

#[cfg(test)]
mod tests;

pub use backend::ApproximateBackend;
pub use options::ApproximateOptions;
pub use stats::ApproximateStats;
