//! The layer's metrics, through the `metrics` facade, labelled by the
//! partition's group and never by its key:
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `throttle_client_waits_total` | counter | `group` | calls that waited for their partition before going |
//! | `throttle_client_wait_seconds` | histogram | `group` | how long each of those waited |
//! | `throttle_client_unsent_total` | counter | `group`, `reason` | calls failed without being sent; `reason` is `told` (a server's wait past the deadline, [`Throttled`](crate::Throttled)) or `late` (the deadline too close, [`Error::TooLate`](crate::Error::TooLate)) |
//! | `throttle_client_retries_total` | counter | `group`, `reason` | retries; `reason` is `refused` (a limiter's refusal) or `failed` (another failure) |
//! | `throttle_client_budget_exhausted_total` | counter | `group` | retries the budget did not allow |

/// Calls that waited.
pub const WAITS: &str = "throttle_client_waits_total";
/// Their waits.
pub const WAIT_SECONDS: &str = "throttle_client_wait_seconds";
/// Calls failed unsent.
pub const UNSENT: &str = "throttle_client_unsent_total";
/// Retries.
pub const RETRIES: &str = "throttle_client_retries_total";
/// Retries the budget refused.
pub const BUDGET_EXHAUSTED: &str = "throttle_client_budget_exhausted_total";

#[cfg(feature = "metrics")]
pub(crate) fn waited(group: &'static str, wait: std::time::Duration) {
    metrics::counter!(WAITS, "group" => group).increment(1);
    metrics::histogram!(WAIT_SECONDS, "group" => group).record(wait.as_secs_f64());
}

#[cfg(feature = "metrics")]
pub(crate) fn unsent(group: &'static str, told: bool) {
    let reason = if told { "told" } else { "late" };
    metrics::counter!(UNSENT, "group" => group, "reason" => reason).increment(1);
}

#[cfg(feature = "metrics")]
pub(crate) fn retried(group: &'static str, refused: bool) {
    let reason = if refused { "refused" } else { "failed" };
    metrics::counter!(RETRIES, "group" => group, "reason" => reason).increment(1);
}

#[cfg(feature = "metrics")]
pub(crate) fn budget_exhausted(group: &'static str) {
    metrics::counter!(BUDGET_EXHAUSTED, "group" => group).increment(1);
}

#[cfg(not(feature = "metrics"))]
pub(crate) fn waited(_: &'static str, _: std::time::Duration) {}
#[cfg(not(feature = "metrics"))]
pub(crate) fn unsent(_: &'static str, _: bool) {}
#[cfg(not(feature = "metrics"))]
pub(crate) fn retried(_: &'static str, _: bool) {}
#[cfg(not(feature = "metrics"))]
pub(crate) fn budget_exhausted(_: &'static str) {}
