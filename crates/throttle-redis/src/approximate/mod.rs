//! Approximate mode: local counting, decided locally, flushed to Redis at
//! every span end (after the design in "Decentralized Request Throttling").
//!
//! Each rule's quota `MAX` per `INTERVAL` is split into `N` spans. Requests
//! are counted per key in this process's memory and decided there, with no
//! Redis call on the request path. At each span end one flush writes, for
//! every key active since the last flush, this instance's *cumulative* count
//! for the interval, and reads back the other instances' counts. Keys share
//! [`BUCKETS`] hashes per rule and interval (field: the key; value:
//! `instance=count:span` entries), one script call per hash: a flush costs a
//! few commands per bucket, whatever the number of keys. Writing the
//! cumulative count rather than a delta makes a flush idempotent: a flush
//! that timed out and ran late, or one sent twice, writes the same number
//! again, and the next flush corrects anything lost, so nothing is counted
//! twice and no delta is dropped while its interval lasts.
//!
//! The local decision feeds the fleet estimate to the same window code the
//! memory backend uses ([`FixedWindow`] or [`SlidingWindowCounter`]):
//!
//! ```text
//! fleet = max(mine + others, each brought forward by how much mine grew
//!             since they were taken;  mine * nodes)
//! ```
//!
//! where `nodes = fleet total / my total` from the last flush reply. A fleet
//! total above `MAX` in a reply blocks the key locally for the cooldown.
//! While Redis cannot be reached, a `LocalFallback` rule also blocks a key
//! when `mine in this span * nodes > MAX / N`.

mod flush;
mod limiter;
mod meter;
mod options;
mod shared;
mod stats;

pub(crate) use limiter::ApproxLimiter;
pub use options::ApproximateOptions;
pub(crate) use shared::Shared;
pub use stats::ApproximateStats;

/// The oldest Redis the flush script runs on (multi-field `HSET`, `HMGET`,
/// Lua 5.1); checked when the backend starts and Redis answers.
pub(crate) const MIN_REDIS: (u32, u32) = (6, 0);

/// Refuses a Redis older than [`MIN_REDIS`], naming the versions.
pub(crate) fn check_version(version: (u32, u32)) -> Result<(), throttle_core::ConfigError> {
    if version < MIN_REDIS {
        return Err(throttle_core::ConfigError::new(
            "redis.version",
            format!(
                "Redis {}.{} is older than {}.{}, the oldest the approximate mode's flush script runs on",
                version.0, version.1, MIN_REDIS.0, MIN_REDIS.1
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_old_redis_is_refused_by_name() {
        let err = super::check_version((5, 0)).unwrap_err();
        assert_eq!(err.field(), "redis.version");
        assert!(err.to_string().contains("5.0"), "{err}");
        assert!(super::check_version((6, 0)).is_ok());
        assert!(super::check_version((7, 2)).is_ok());
    }
}
