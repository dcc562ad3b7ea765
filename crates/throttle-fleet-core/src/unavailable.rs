//! Why a backend could not decide: what a fail-closed rule answers, and
//! what an operation on a key reports.

use std::fmt;
use std::sync::Arc;

/// The backend could not decide and the rule's failure policy says to deny.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// Why, for logs and for the response.
    pub reason: Arc<str>,
}

impl Unavailable {
    /// An unavailability explained by `reason`.
    pub fn new(reason: impl Into<Arc<str>>) -> Self {
        Self {
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate limiter backend unavailable: {}", self.reason)
    }
}

impl std::error::Error for Unavailable {}
