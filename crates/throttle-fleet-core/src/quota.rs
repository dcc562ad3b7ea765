//! How much: a limit per period, with an optional burst.

use std::time::Duration;

use crate::ConfigError;

/// The largest limit or burst a quota accepts.
///
/// Counts stay exact in every backend, including the Redis scripts, whose Lua
/// numbers are doubles (exact up to 2^53).
pub const MAX_LIMIT: u64 = 1 << 40;

/// The shortest period a quota accepts.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);

/// The longest period a quota accepts (366 days).
pub const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);

/// How much a key may use: `limit` units of cost per `period`, and for the
/// bucket algorithms an optional `burst` (the bucket's capacity).
///
/// The constructors are `const` and never fail; the values are checked when
/// the rule is built into a layer or backend, and a bad value comes back as a
/// [`ConfigError`] naming the field.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_core::Quota;
///
/// let q = Quota::per_minute(100);
/// assert_eq!(q.limit(), 100);
/// assert_eq!(q.period(), Duration::from_secs(60));
/// assert_eq!(q.burst(), 100); // a bucket holds one period's worth by default
///
/// let q = Quota::per_second(10).with_burst(50);
/// assert_eq!(q.burst(), 50);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    period: Duration,
    burst: Option<u64>,
}

impl Quota {
    /// `limit` per `period`.
    pub const fn new(limit: u64, period: Duration) -> Self {
        Self {
            limit,
            period,
            burst: None,
        }
    }

    /// `limit` per second.
    pub const fn per_second(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(1))
    }

    /// `limit` per minute.
    pub const fn per_minute(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(60))
    }

    /// `limit` per hour.
    pub const fn per_hour(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(3600))
    }

    /// `limit` per day.
    pub const fn per_day(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(86_400))
    }

    /// `limit` requests in flight at once, for a concurrency rule
    /// ([`Rule::concurrency`](crate::Rule::concurrency), and its tiers).
    /// Such a quota has no window: its period (one second) is never used.
    ///
    /// ```
    /// use throttle_fleet_core::Quota;
    ///
    /// assert_eq!(Quota::in_flight(20).limit(), 20);
    /// ```
    pub const fn in_flight(limit: u64) -> Self {
        Self::new(limit, Duration::from_secs(1))
    }

    /// The same rate with a bucket of `burst` units: how much a key may spend
    /// at once after being idle. Applies to the token and leaky buckets; the
    /// window algorithms reject it (their window *is* the burst).
    #[must_use]
    pub const fn with_burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Units of cost allowed per period.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The period over which `limit` applies.
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The bucket capacity: the explicit burst, or `limit` when none was set.
    pub const fn burst(&self) -> u64 {
        match self.burst {
            Some(b) => b,
            None => self.limit,
        }
    }

    /// The explicit burst, if one was set.
    pub const fn explicit_burst(&self) -> Option<u64> {
        self.burst
    }

    /// The period in whole microseconds (the unit every algorithm counts in).
    pub(crate) fn period_us(&self) -> u64 {
        // Bounded by MAX_PERIOD once validated, so this never truncates.
        u64::try_from(self.period.as_micros()).unwrap_or(u64::MAX)
    }

    /// Checks the quota; `burst_allowed` is false for the window algorithms.
    pub(crate) fn validate(&self, burst_allowed: bool) -> Result<(), ConfigError> {
        if self.limit == 0 {
            return Err(ConfigError::new(
                "quota.limit",
                "must be at least 1 (got 0)",
            ));
        }
        if self.limit > MAX_LIMIT {
            return Err(ConfigError::new(
                "quota.limit",
                format!("must be at most {MAX_LIMIT} (got {})", self.limit),
            ));
        }
        if self.period < MIN_PERIOD {
            return Err(ConfigError::new(
                "quota.period",
                format!("must be at least 1ms (got {:?})", self.period),
            ));
        }
        if self.period > MAX_PERIOD {
            return Err(ConfigError::new(
                "quota.period",
                format!("must be at most 366 days (got {:?})", self.period),
            ));
        }
        if !self.period.subsec_nanos().is_multiple_of(1_000) {
            return Err(ConfigError::new(
                "quota.period",
                format!(
                    "must be a whole number of microseconds (got {:?})",
                    self.period
                ),
            ));
        }
        match self.burst {
            Some(_) if !burst_allowed => Err(ConfigError::new(
                "quota.burst",
                "is only used by the token and leaky buckets; a window algorithm admits `limit` per window",
            )),
            Some(0) => Err(ConfigError::new(
                "quota.burst",
                "must be at least 1 (got 0)",
            )),
            Some(b) if b > MAX_LIMIT => Err(ConfigError::new(
                "quota.burst",
                format!("must be at most {MAX_LIMIT} (got {b})"),
            )),
            _ => Ok(()),
        }
    }
}
