//! The times every answer states in whole seconds, computed once for every
//! protocol: `Retry-After` (HTTP, gRPC metadata, Envoy's
//! `response_headers_to_add`, the seconds of a message) and
//! `X-RateLimit-Reset` (HTTP headers, gRPC metadata). Text both protocols
//! share lives here, below the HTTP layer, so that no answer rounds or
//! dates a figure its own way.

use std::time::Duration;

use crate::Decision;

/// Whole seconds of `wait`, rounded up, and never 0 for a positive wait
/// (a `Retry-After: 0` invites an immediate retry storm; one truncated by
/// `as_secs` invites a retry before the wait is over): `Retry-After`, the
/// seconds a denial's message and body state, and the IETF fields' `t`
/// and `w`.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_core::fields::retry_after_secs;
///
/// assert_eq!(retry_after_secs(Duration::from_millis(13_200)), 14);
/// assert_eq!(retry_after_secs(Duration::from_micros(1)), 1);
/// assert_eq!(retry_after_secs(Duration::ZERO), 0);
/// ```
#[inline]
pub fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0))
}

/// `X-RateLimit-Reset` of `decision`: the Unix epoch second (rounded up)
/// at which its rule is back to its full allowance, counted from the
/// decision's own time ([`Decision::at_us`]), never from a clock read
/// when the answer is written.
///
/// The decision's time is the instant its figures are true of: the
/// backend's "now" when it decided (Redis' `TIME` in the exact mode, the
/// process's clock in memory), the instant [`Decision::reset`] and
/// [`Decision::retry_after`] both count from. From it, the reset of a
/// fixed window is the window's end, the same second on every instance of
/// a fleet, and `Retry-After` and `X-RateLimit-Reset` of one answer agree
/// (a wait that lasts to the reset ends at the reset). A clock read later
/// would add the round trip and the gap between this host's clock and
/// Redis', and date the same reset differently on each instance and on
/// each path of one. No clock is read here, either.
///
/// ```
/// use throttle_fleet_core::algorithm::Step;
/// use throttle_fleet_core::backend::Outcome;
/// use throttle_fleet_core::fields::reset_epoch_secs;
/// use throttle_fleet_core::Decision;
///
/// // Decided at 1,700,000,000.25 s (Unix), back to full 59.5 s later.
/// let step = Step { allowed: true, remaining: 3, reset_us: 59_500_000, retry_after_us: 0, delay_us: 0 };
/// let decision = Decision::from_outcome(0, &Outcome::new(step, 1_700_000_000_250_000));
/// assert_eq!(reset_epoch_secs(&decision), 1_700_000_060);
/// ```
#[inline]
pub fn reset_epoch_secs(decision: &Decision) -> u64 {
    let reset_us = u64::try_from(decision.reset().as_micros()).unwrap_or(u64::MAX);
    decision
        .at_us()
        .saturating_add(reset_us)
        .div_ceil(1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Step;
    use crate::backend::Outcome;

    #[test]
    fn retry_after_rounds_up_and_is_never_zero_for_a_wait() {
        assert_eq!(retry_after_secs(Duration::ZERO), 0);
        assert_eq!(retry_after_secs(Duration::from_nanos(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_micros(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(999)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(14)), 14);
        assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
    }

    fn decided(at_us: u64, reset_us: u64) -> Decision {
        let step = Step {
            allowed: false,
            remaining: 0,
            reset_us,
            retry_after_us: reset_us,
            delay_us: 0,
        };
        Decision::from_outcome(0, &Outcome::new(step, at_us))
    }

    #[test]
    fn the_reset_counts_from_the_decision_and_rounds_up() {
        // On a second, and a microsecond past it.
        assert_eq!(
            reset_epoch_secs(&decided(1_700_000_000_000_000, 60_000_000)),
            1_700_000_060
        );
        assert_eq!(
            reset_epoch_secs(&decided(1_700_000_000_000_001, 60_000_000)),
            1_700_000_061
        );
        // Nothing to wait for: the decision's own second, rounded up.
        assert_eq!(
            reset_epoch_secs(&decided(1_700_000_000_500_000, 0)),
            1_700_000_001
        );
        // Far in the future: saturates rather than wraps.
        assert_eq!(
            reset_epoch_secs(&decided(u64::MAX - 1, 60_000_000)),
            u64::MAX.div_ceil(1_000_000)
        );
    }
}
