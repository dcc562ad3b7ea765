//! Resolving a check: a limiter answers [`Answer::Ready`] when it can
//! decide locally and [`Answer::Pending`] when it has to ask its backend;
//! these await the pending answer or take the ready one.
//!
//! ```ignore
//! let (result, asked) = check(&limiter, &key).await; // asked: it was pending
//! assert!(allowed(&limiter, &key).await);
//! ```

use throttle_fleet_core::backend::{Limiter, Outcome, Unavailable};
use throttle_fleet_core::{Answer, Key};

/// One request of cost 1 on `key`: the answer, and whether it was pending
/// (the limiter asked its backend rather than deciding locally).
pub async fn check(limiter: &dyn Limiter, key: &Key) -> (Result<Outcome, Unavailable>, bool) {
    check_cost(limiter, key, 1).await
}

/// Like [`check`] for a request of `cost`.
pub async fn check_cost(
    limiter: &dyn Limiter,
    key: &Key,
    cost: u64,
) -> (Result<Outcome, Unavailable>, bool) {
    match limiter.acquire(key, cost, u64::MAX) {
        Answer::Ready(r) => (r, false),
        Answer::Pending(f) => (f.await, true),
    }
}

/// The outcome of one request of cost 1 on `key`, ready or pending. Panics
/// if the limiter answers `Unavailable`.
pub async fn outcome(limiter: &dyn Limiter, key: &Key) -> Outcome {
    check(limiter, key).await.0.unwrap()
}

/// Whether one request of cost 1 on `key` is admitted, ready or pending.
/// Panics if the limiter answers `Unavailable`.
pub async fn allowed(limiter: &dyn Limiter, key: &Key) -> bool {
    outcome(limiter, key).await.step.allowed
}
