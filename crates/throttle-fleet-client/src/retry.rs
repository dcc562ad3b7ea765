//! Whether an answer (or a failure to get one) is worth repeating, and
//! how long to wait first when the server did not say. Pure: the budget,
//! the deadline and the body are checked around it, in the service.
//!
//! A refusal a limiter made before the handler ran ([`Told::refused`]) is
//! repeated whatever the method. Anything else only where repeating it
//! cannot do a thing twice that the caller meant once: an idempotent
//! HTTP method (RFC 9110: `GET`, `HEAD`, `OPTIONS`, `TRACE`, `PUT`,
//! `DELETE`) answered `408`, `502`, `503` or `504`, or not answered at
//! all; a gRPC call whose status is one the caller listed. Never after a
//! negative pushback.

use std::time::Duration;

use http::{Method, StatusCode};

use crate::told::Told;

/// The retry settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retries {
    /// At most this many retries of one call.
    pub(crate) max: u32,
    /// gRPC codes (0 to 16) to retry for any call, as bits.
    pub(crate) grpc_codes: u32,
    /// The full-jitter backoff's first ceiling and its cap.
    pub(crate) base: Duration,
    pub(crate) cap: Duration,
}

/// What came back from one attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attempt<'a> {
    Answered(StatusCode, &'a Told),
    /// The inner service failed (no answer).
    Failed,
}

impl Retries {
    /// Whether to repeat the call after `retries` retries, and the wait
    /// the server gave, if any (`Some(None)`: repeat after a backoff).
    pub(crate) fn verdict(
        &self,
        attempt: Attempt<'_>,
        method: &Method,
        grpc: bool,
        retries: u32,
    ) -> Option<Option<Duration>> {
        if retries >= self.max {
            return None;
        }
        let idempotent = !grpc && is_idempotent(method);
        match attempt {
            Attempt::Failed => idempotent.then_some(None),
            Attempt::Answered(_, told) if told.never_retry => None,
            Attempt::Answered(_, told) if told.refused => Some(told.wait),
            Attempt::Answered(status, told) => {
                let repeat = match told.grpc_status {
                    Some(code) => code != 0 && code < 32 && self.grpc_codes & (1 << code) != 0,
                    None => {
                        idempotent
                            && matches!(
                                status,
                                StatusCode::REQUEST_TIMEOUT
                                    | StatusCode::BAD_GATEWAY
                                    | StatusCode::SERVICE_UNAVAILABLE
                                    | StatusCode::GATEWAY_TIMEOUT
                            )
                    }
                };
                repeat.then_some(told.wait)
            }
        }
    }

    /// Full jitter: a uniform wait from zero to `min(cap, base * 2^retry)`.
    pub(crate) fn backoff(&self, retry: u32) -> Duration {
        let ceiling = self
            .base
            .checked_mul(1 << retry.min(30))
            .unwrap_or(self.cap)
            .min(self.cap);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(fastrand::u64(0..=nanos))
    }
}

/// RFC 9110's idempotent methods.
fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

#[cfg(test)]
mod tests;
