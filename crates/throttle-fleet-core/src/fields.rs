//! What every answer states, computed once for every protocol: the times in
//! whole seconds, `Retry-After` (HTTP, gRPC metadata, Envoy's
//! `response_headers_to_add`, the seconds of a message) and
//! `X-RateLimit-Reset` (HTTP headers, gRPC metadata); and the text of the
//! IETF fields `RateLimit-Policy` and `RateLimit`
//! (draft-ietf-httpapi-ratelimit-headers), which the HTTP layer and
//! Envoy's RLS write alike. Text both protocols share lives here, below
//! them, so that no answer rounds, dates or spells a figure its own way.

use std::time::Duration;

use crate::Decision;

pub mod names;
pub mod read;

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
/// use throttle_fleet_core::clock::ManualClock;
/// use throttle_fleet_core::decision::Demand;
/// use throttle_fleet_core::fields::reset_epoch_secs;
/// use throttle_fleet_core::memory::MemoryBackend;
/// use throttle_fleet_core::rule_set::RuleSet;
/// use throttle_fleet_core::{Answer, Key, Quota, Rule};
///
/// // Decided at 1,700,000,000.25 s (Unix): one token a second, back to
/// // full 1 s later.
/// let backend = MemoryBackend::with_clock(ManualClock::new(1_700_000_000_250_000));
/// let mut rules = RuleSet::new();
/// let ip = rules.bind(Rule::new("ip", Quota::per_minute(60)), &backend)?;
/// let Answer::Ready(checked) = rules.check(&[Demand::new(ip, Key::new("10.0.0.1"), 1)]) else { unreachable!() };
/// assert_eq!(reset_epoch_secs(checked.decision()), 1_700_000_002);
/// # Ok::<(), throttle_fleet_core::ConfigError>(())
/// ```
#[inline]
pub fn reset_epoch_secs(decision: &Decision) -> u64 {
    let reset_us = u64::try_from(decision.reset().as_micros()).unwrap_or(u64::MAX);
    decision
        .at_us()
        .saturating_add(reset_us)
        .div_ceil(1_000_000)
}

/// The quota unit of a concurrency rule's `RateLimit-Policy` item: its
/// quota is requests in flight, not requests per window.
pub const IN_FLIGHT_UNIT: &str = ";qu=\"concurrent-requests\"";

/// `RateLimit-Policy`'s item for the rate rule named `name`:
/// `"name";q=limit;w=window`, the window in whole seconds, rounded up.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_core::fields::{policy_item, ratelimit_item};
///
/// assert_eq!(policy_item("per-user", 10, Duration::from_secs(60)), "\"per-user\";q=10;w=60");
/// assert_eq!(ratelimit_item("per-user", 3, 42), "\"per-user\";r=3;t=42");
/// ```
pub fn policy_item(name: &str, limit: u64, window: Duration) -> String {
    item(
        name,
        &[(";q=", limit), (";w=", retry_after_secs(window))],
        "",
    )
}

/// `RateLimit-Policy`'s item for the concurrency rule named `name`:
/// `"name";q=limit;qu="concurrent-requests"`, with no window (the rule
/// has none).
pub fn in_flight_policy_item(name: &str, limit: u64) -> String {
    item(name, &[(";q=", limit)], IN_FLIGHT_UNIT)
}

/// `RateLimit`'s item for the rate rule named `name`:
/// `"name";r=remaining;t=t`, `t` the seconds until the quota is whole
/// again.
pub fn ratelimit_item(name: &str, remaining: u64, t: u64) -> String {
    item(name, &[(";r=", remaining), (";t=", t)], "")
}

/// `RateLimit`'s item for the concurrency rule named `name`:
/// `"name";r=remaining`, with no `t`, since nothing resets with time (a
/// slot comes back when a request ends).
pub fn in_flight_ratelimit_item(name: &str, remaining: u64) -> String {
    item(name, &[(";r=", remaining)], "")
}

/// `"name"` followed by each `{key}{value}` of `params` and then `tail`,
/// in a `String` exactly its length (whose bytes become a header value's
/// without a second allocation). Rule names are restricted to
/// `[A-Za-z0-9_.-]`, so the text is always a valid header value.
fn item(name: &str, params: &[(&str, u64)], tail: &str) -> String {
    let mut numbers = [itoa::Buffer::new(), itoa::Buffer::new()];
    let params = &params[..params.len().min(2)];
    let mut rendered: [&str; 2] = [""; 2];
    for ((_, value), (buf, out)) in params.iter().zip(numbers.iter_mut().zip(&mut rendered)) {
        *out = buf.format(*value);
    }
    let len = name.len()
        + 2
        + params.iter().map(|(k, _)| k.len()).sum::<usize>()
        + rendered.iter().map(|r| r.len()).sum::<usize>()
        + tail.len();
    let mut text = String::with_capacity(len);
    text.push('"');
    text.push_str(name);
    text.push('"');
    for ((key, _), value) in params.iter().zip(rendered) {
        text.push_str(key);
        text.push_str(value);
    }
    text.push_str(tail);
    text
}

#[cfg(test)]
mod tests;
