//! What an answer tells its client: whether a limiter refused the request
//! before its handler ran, how long to wait, and what is left of the
//! quota. Pure: the head of a response and the time in, a [`Told`] out.
//!
//! Which field wins, how absolute times are read and what a value that
//! does not parse means: the crate's docs, "Which field wins" (stated
//! there once, for users; the constants below follow it).

use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};
use throttle_fleet_core::fields::names;
use throttle_fleet_core::fields::read::{policy_items, ratelimit_items};

use crate::grpc::{self, Pushback};

/// What one answer tells.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Told {
    /// A limiter refused the request before its handler ran (`429`, a
    /// `503` with `Retry-After`, gRPC `RESOURCE_EXHAUSTED` or
    /// `UNAVAILABLE` with a retry field): repeating it is safe whatever
    /// its method.
    pub(crate) refused: bool,
    /// How long to wait before the next request to this partition (and
    /// before repeating this one), cut to the ceiling.
    pub(crate) wait: Option<Duration>,
    /// The least `remaining` any quota field reports.
    pub(crate) remaining: Option<u64>,
    /// That quota's size, when a field gives it (`X-RateLimit-Limit`,
    /// `RateLimit-Policy`'s `q`).
    pub(crate) limit: Option<u64>,
    /// When that quota is whole again, as the field tells it, whatever is
    /// left.
    pub(crate) reset: Option<Reset>,
    /// The gRPC status of a Trailers-Only answer.
    pub(crate) grpc_status: Option<u32>,
    /// Pushback was negative or not a number: never repeat this request.
    pub(crate) never_retry: bool,
}

/// A quota's reset as told: two answers' resets compare exactly when both
/// are Unix times; relative ones count from each answer's own second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reset {
    /// `X-RateLimit-Reset` as a Unix time, in seconds.
    Unix(u64),
    /// Seconds from the answer (`t`, or a small `X-RateLimit-Reset`).
    After(u64),
}

/// Reads the head of an answer at `now`, every wait cut to `ceiling`.
pub(crate) fn read(
    status: StatusCode,
    headers: &HeaderMap,
    now: SystemTime,
    ceiling: Duration,
) -> Told {
    let reference = reference(headers, now);
    let grpc_status = grpc::status(headers);
    let pushback = grpc::pushback(headers);
    let retry_after = retry_after(headers, reference);
    let retry_info = grpc::retry_info(headers);
    let pushback_wait = match pushback {
        Some(Pushback::Wait(wait)) => Some(wait),
        _ => None,
    };
    let refused = match grpc_status {
        Some(code) => {
            matches!(code, grpc::RESOURCE_EXHAUSTED | grpc::UNAVAILABLE)
                && (retry_info.is_some() || pushback_wait.is_some() || retry_after.is_some())
        }
        None => {
            status == StatusCode::TOO_MANY_REQUESTS
                || (status == StatusCode::SERVICE_UNAVAILABLE && retry_after.is_some())
        }
    };
    let quota = ietf(headers).or_else(|| legacy(headers, reference));
    let retry = [retry_after, retry_info, pushback_wait]
        .into_iter()
        .flatten()
        .max();
    let wait = match retry {
        Some(wait) if refused || grpc_status.is_some_and(|code| code != 0) => Some(wait),
        _ => quota.and_then(|q| q.wait),
    };
    Told {
        refused,
        wait: wait.map(|w| w.min(ceiling)),
        remaining: quota.map(|q| q.remaining),
        limit: quota.and_then(|q| q.limit),
        reset: quota.and_then(|q| q.reset),
        grpc_status,
        never_retry: pushback == Some(Pushback::Never),
    }
}

/// A quota field's figures.
#[derive(Debug, Clone, Copy)]
struct Quota {
    remaining: u64,
    limit: Option<u64>,
    reset: Option<Reset>,
    /// Set when `remaining` is 0 and the field says until when.
    wait: Option<Duration>,
}

/// The IETF fields: the item with the least `r`; the longest wait of the
/// items at `r=0`.
fn ietf(headers: &HeaderMap) -> Option<Quota> {
    let mut least: Option<(u64, &str, Option<u64>)> = None;
    let mut wait: Option<Duration> = None;
    let policies: Vec<_> = headers
        .get_all(names::RATELIMIT_POLICY)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(policy_items)
        .flatten()
        .collect();
    let policy = |name: &str| policies.iter().rev().find(|p| p.name == name);
    for value in headers.get_all(names::RATELIMIT) {
        let Some(items) = value.to_str().ok().and_then(ratelimit_items) else {
            continue;
        };
        for item in items {
            if least.is_none_or(|(r, _, _)| item.remaining < r) {
                least = Some((item.remaining, item.name, item.reset_secs));
            }
            if item.remaining == 0 {
                let secs = item
                    .reset_secs
                    .or_else(|| policy(item.name).and_then(|p| p.window_secs));
                if let Some(secs) = secs {
                    let this = Duration::from_secs(secs);
                    wait = Some(wait.map_or(this, |w| w.max(this)));
                }
            }
        }
    }
    let (remaining, name, reset) = least?;
    Some(Quota {
        remaining,
        limit: policy(name).map(|p| p.quota),
        reset: reset.map(Reset::After),
        wait,
    })
}

/// The `X-RateLimit-*` trio.
fn legacy(headers: &HeaderMap, reference: SystemTime) -> Option<Quota> {
    let remaining = number(headers.get(names::X_RATELIMIT_REMAINING)?)?;
    let limit = headers.get(names::X_RATELIMIT_LIMIT).and_then(number);
    let reset = headers.get(names::X_RATELIMIT_RESET).and_then(number);
    let wait = reset
        .filter(|_| remaining == 0)
        .map(|reset| reset_wait(reset, reference));
    Some(Quota {
        remaining,
        limit,
        reset: reset.map(|r| {
            if r < UNIX_RESET_FROM {
                Reset::After(r)
            } else {
                Reset::Unix(r)
            }
        }),
        wait,
    })
}

/// A reset of one billion or more is a Unix time (the module's rule 3).
const UNIX_RESET_FROM: u64 = 1_000_000_000;

fn reset_wait(reset: u64, reference: SystemTime) -> Duration {
    if reset < UNIX_RESET_FROM {
        return Duration::from_secs(reset);
    }
    let at = SystemTime::UNIX_EPOCH
        .checked_add(Duration::from_secs(reset))
        .unwrap_or(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(u32::MAX)));
    at.duration_since(reference).unwrap_or(Duration::ZERO)
}

/// `Retry-After` in every value given: delta seconds (digits only; too
/// many digits is only a long wait) or an HTTP-date. The longest.
fn retry_after(headers: &HeaderMap, reference: SystemTime) -> Option<Duration> {
    headers
        .get_all(http::header::RETRY_AFTER)
        .iter()
        .filter_map(|value| {
            let text = value.to_str().ok()?.trim();
            if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
                return Some(Duration::from_secs(text.parse().unwrap_or(u64::MAX)));
            }
            let at = httpdate::parse_http_date(text).ok()?;
            Some(at.duration_since(reference).unwrap_or(Duration::ZERO))
        })
        .max()
}

/// A non-negative decimal header (digits only; too many is the largest).
fn number(value: &http::HeaderValue) -> Option<u64> {
    let text = value.to_str().ok()?.trim();
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().unwrap_or(u64::MAX))
}

/// How far `Date` may be from this host's clock before it is the one
/// absolute times count from: its own resolution, and a second for the
/// trip.
const DATE_TRUSTED_BEYOND: Duration = Duration::from_secs(2);

/// The instant absolute times count from.
fn reference(headers: &HeaderMap, now: SystemTime) -> SystemTime {
    let date = headers
        .get(http::header::DATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|t| httpdate::parse_http_date(t).ok());
    match date {
        Some(date) => {
            let apart = date
                .duration_since(now)
                .or_else(|_| now.duration_since(date))
                .unwrap_or_default();
            if apart > DATE_TRUSTED_BEYOND {
                date
            } else {
                now
            }
        }
        None => now,
    }
}

#[cfg(test)]
mod tests;
