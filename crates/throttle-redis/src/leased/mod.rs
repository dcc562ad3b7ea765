//! Leased mode: token batching (after "Local token batching" in the API
//! gateway design).
//!
//! An instance takes a batch of tokens from the rule's token bucket in Redis
//! with one atomic script call (the exact mode's GCRA, taking up to `batch`
//! tokens at once), spends them from local memory, and fetches the next
//! batch in the background when fewer than the low-water mark remain. A
//! request waits for Redis only when the local batch is empty (and the rule
//! waits rather than denies). An exhausted bucket is remembered until its
//! next token is due, so denied traffic does not reach Redis either. Tokens
//! left unused by an idle key are returned to the bucket.
//!
//! Redis sees about one call per `batch` requests. Worst-case overshoot is
//! one batch per instance: tokens leased earlier and spent later can add to
//! what the bucket lets through at that moment.

mod limiter;
mod options;
mod shared;
mod state;
mod stats;

pub(crate) use limiter::LeaseLimiter;
pub use options::{LeaseOptions, MAX_BATCH, WhenEmpty};
pub(crate) use shared::Shared;
pub use stats::LeaseStats;
