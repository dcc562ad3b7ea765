//! Leased mode: token batching (after "Local token batching" in the API
//! gateway design).
//!
//! An instance takes a batch of tokens from the rule's token bucket in Redis
//! with one atomic script call (the exact mode's GCRA, taking up to `batch`
//! tokens at once), spends them from local memory, and fetches the next
//! batch in the background when fewer than the low-water mark remain. A
//! request waits for Redis only when the local batch is empty (and the rule
//! waits rather than denies). An exhausted bucket is remembered until the
//! key's backoff has passed, so denied traffic does not reach Redis either.
//!
//! Batches fit the key: a new key leases only its request's cost, a key
//! that keeps spending doubles its batch up to `batch`, a key that goes
//! idle with tokens left halves it. Idle tokens go back while the bucket
//! still lacks them; tokens the bucket has already refilled are kept a
//! while for the key's return. `remaining` is the fleet's estimate (the
//! bucket at the last lease, refilled since, plus what is held here).
//!
//! A drained key (its last lease came back short: the bucket is empty and
//! every instance wants more) is shared by demand instead: each instance
//! estimates what it is asked for the key (cost requested, admitted or
//! denied, decayed over 10 s), leases only what that demand spends in a
//! batch's refill time, fetches only once it is about to run out, and
//! keeps what its demand will spend soon rather than give it back and
//! lease it again. What one instance would have held beyond its own
//! demand stays in the bucket for the instance that lacks it.
//!
//! Redis sees about one call per batch (a key at 1 request per second on
//! each of 4 instances: under 0.1 per request). Worst-case overshoot in any
//! window is one batch plus the low-water mark per instance: tokens leased
//! earlier and spent later can add to what the bucket lets through at that
//! moment. [`LeaseOptions`] states the bounds and what was measured.

mod backend;
mod fetch;
mod give_back;
mod limiter;
mod options;
mod shared;
mod state;
mod stats;

pub use backend::LeasedBackend;
pub use options::{LeaseOptions, MAX_BATCH, WhenEmpty};
pub use stats::LeaseStats;
