//! [`Deadline`]: a call's deadline, as a request extension.

use std::time::Duration;

use tokio::time::Instant;

/// A call's deadline, as a request extension: waits and retries end by
/// then (a sooner one of the layer's, or the request's `grpc-timeout`,
/// counts instead).
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_client::Deadline;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(Deadline::after(Duration::from_secs(2)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(pub(crate) Instant);

impl Deadline {
    /// At `at`.
    pub fn at(at: Instant) -> Self {
        Self(at)
    }

    /// `after` from now.
    pub fn after(after: Duration) -> Self {
        Self(Instant::now() + after)
    }
}
