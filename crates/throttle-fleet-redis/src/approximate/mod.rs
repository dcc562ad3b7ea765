//! Approximate mode: decided locally, flushed to Redis at every span end
//! (after the design in "Decentralized Request Throttling"), with each
//! instance spending only a *claim* on what the fleet has left.
//!
//! Each rule's quota `MAX` per `INTERVAL` is split into `N` spans. Requests
//! are counted per key in this process's memory and decided there, with no
//! Redis call on the request path. At each span end (and early, at most once
//! per early-flush gap, when a key runs out of claim) one flush writes, for
//! every key seen since the last flush, this instance's *cumulative* count
//! for the interval and its demand, and gets back a claim: the most it may
//! have admitted by its next flush (`claims.rs` has the formula, the bound
//! and the fields). Keys share a rule's bucket hashes per interval (8 on a
//! standalone Redis, 64 on a Cluster: `buckets.rs`; per key, one field with
//! the fleet's sums and one per instance), one script call per hash and
//! 1,000 keys: a flush costs a few commands per bucket, whatever the number
//! of keys.
//! Writing absolute counts makes a flush idempotent, and a sequence number
//! keeps a late flush from overwriting a newer one.
//!
//! The local decision feeds what the fleet has counted (the last reply plus
//! what this instance admitted since) to the same window code the memory
//! backend uses (`FixedWindow` or `SlidingWindowCounter`), for the answer's
//! remaining count, reset and retry-after, and admits only within its claim.
//! A request past the claim while the window has room as last heard is not
//! denied for it: it waits for the early flush it asks for (at most the
//! command timeout; `Answer::Pending`), and is decided on the claim that
//! answer grants. Before a key has an entry in an interval an instance may
//! admit a small credit on its own (`claims.rs`: none below eight requests
//! per instance and span). A reply showing the fleet at the limit
//! denies the key locally (fixed window: until the interval ends or the
//! cooldown lifts; sliding counter: until the window has room again).
//! While Redis cannot be reached a valid claim is still spent; past it, the
//! rule's failure policy decides: `fail_closed()` refuses, `fail_open()`
//! decides on the last reply with the other instances brought forward at
//! the demand they reported, and `local_fallback()` also keeps each key to
//! its share of a span.

mod backend;
mod buckets;
mod claims;
mod flush;
mod limiter;
mod meter;
mod options;
mod plan;
mod schedule;
mod shared;
mod stats;
mod view;

pub use backend::ApproximateBackend;
pub use options::ApproximateOptions;
pub use stats::ApproximateStats;

/// The oldest Redis the flush script runs on (multi-field `HSET`, `HMGET`,
/// Lua 5.1); checked when the backend starts and Redis answers.
pub(crate) const MIN_REDIS: (u32, u32) = (6, 0);

/// Refuses a Redis older than [`MIN_REDIS`], naming the versions.
pub(crate) fn check_version(version: (u32, u32)) -> Result<(), throttle_fleet_core::ConfigError> {
    if version < MIN_REDIS {
        return Err(throttle_fleet_core::ConfigError::new(
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
