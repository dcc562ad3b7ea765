//! What a run did, measured against its quota.

/// A run measured against its quota, in units of cost (requests, when each
/// costs 1, as in every [`Pattern`](super::Pattern)).
///
/// `worst_window` is the figure that tells the algorithms apart: the most
/// admitted within any sliding window of the quota's period, wherever it
/// starts (not only the aligned windows a fixed window counts in). Above
/// `limit`, the algorithm let more through in one period than the quota
/// says; for a leaky bucket, admitted requests count when they leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Requests offered.
    pub requests: u64,
    /// Cost admitted.
    pub admitted: u64,
    /// Cost denied.
    pub denied: u64,
    /// The quota's limit per period.
    pub limit: u64,
    /// The quota's period.
    pub period_us: u64,
    /// The most cost admitted within any `[t, t + period)`.
    pub worst_window: u64,
    /// Where the first such window starts (an admitted request's time).
    pub worst_window_start_us: u64,
    /// When the first request was denied, if any was.
    pub first_denial_us: Option<u64>,
}

impl Summary {
    /// How far the worst window went over the limit (0 when it did not).
    pub fn excess(&self) -> u64 {
        self.worst_window.saturating_sub(self.limit)
    }
}
