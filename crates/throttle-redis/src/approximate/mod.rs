//! Approximate mode: local counting, decided locally, flushed to Redis at
//! every span end (after the design in "Decentralized Request Throttling").
//!
//! Each rule's quota `MAX` per `INTERVAL` is split into `N` spans. Requests
//! are counted per key in this process's memory and decided there, with no
//! Redis call on the request path. At each span end one flush writes, for
//! every key active since the last flush, this instance's *cumulative* count
//! for the interval, and reads back the other instances' counts. Keys share
//! [`BUCKETS`] hashes per rule and interval (field: the key; value:
//! `instance=count:span` entries), one script call per hash: a flush costs a
//! few commands per bucket, whatever the number of keys. Writing the
//! cumulative count rather than a delta makes a flush idempotent: a flush
//! that timed out and ran late, or one sent twice, writes the same number
//! again, and the next flush corrects anything lost, so nothing is counted
//! twice and no delta is dropped while its interval lasts.
//!
//! The local decision feeds the fleet estimate to the same window code the
//! memory backend uses ([`FixedWindow`] or [`SlidingWindowCounter`]):
//!
//! ```text
//! fleet = max(mine + others, each brought forward by how much mine grew
//!             since they were taken;  mine * nodes)
//! ```
//!
//! where `nodes = fleet total / my total` from the last flush reply. A fleet
//! total above `MAX` in a reply blocks the key locally for the cooldown.
//! While Redis cannot be reached, a `LocalFallback` rule also blocks a key
//! when `mine in this span * nodes > MAX / N`.

mod flush;
mod limiter;
mod meter;
mod options;
mod shared;
mod stats;

pub(crate) use limiter::ApproxLimiter;
pub use options::ApproximateOptions;
pub(crate) use shared::Shared;
pub use stats::ApproximateStats;
