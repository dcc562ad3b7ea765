//! The layer's errors: a call it ends before or instead of the inner
//! service's answer. (A setting it refuses is core's `ConfigError`, which
//! names the setting.)

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

/// A call the layer did not send because its partition was told to wait:
/// longer than the call's deadline allows, or at all when the layer fails
/// fast. Says until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Throttled {
    pub(crate) until: Instant,
    pub(crate) wait: Duration,
    pub(crate) group: &'static str,
}

impl Throttled {
    /// When the partition may send again, as the server said.
    pub fn until(&self) -> Instant {
        self.until
    }

    /// How long that was from the moment the call was refused.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The partition's group.
    pub fn group(&self) -> &'static str {
        self.group
    }
}

impl fmt::Display for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not sent: the server asked partition group {:?} to wait {:.3} s, past what this call may wait",
            self.group,
            self.wait.as_secs_f64()
        )
    }
}

impl std::error::Error for Throttled {}

/// Why a call through the layer failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error<E> {
    /// The inner service's error, after the retries it was worth.
    Inner(E),
    /// Not sent: its partition must wait longer than the call may.
    Throttled(Throttled),
    /// Not sent: the call's deadline came while it waited for its turn
    /// behind answers in flight, or was closer than its partition's
    /// answers take (smoothed), so the server would have counted a
    /// request nobody waited for.
    TooLate,
    /// The request body failed while it was read for buffering.
    Body(Box<dyn std::error::Error + Send + Sync>),
}

impl<E: fmt::Display> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inner(e) => e.fmt(f),
            Self::Throttled(t) => t.fmt(f),
            Self::TooLate => {
                f.write_str("not sent: the call's deadline is closer than an answer takes")
            }
            Self::Body(e) => write!(f, "request body: {e}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for Error<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Inner(e) => Some(e),
            Self::Throttled(t) => Some(t),
            Self::TooLate => None,
            Self::Body(e) => Some(e.as_ref()),
        }
    }
}
