//! Settings of the leased mode.

use std::time::Duration;

use throttle_fleet_core::ConfigError;

/// The most tokens one lease may take.
pub const MAX_BATCH: u64 = 4_096;

/// What a request does when the local batch cannot pay for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenEmpty {
    /// Wait for Redis (one round trip) and take the tokens it needs plus the
    /// next batch. The default: the first request of a key waits once.
    #[default]
    Wait,
    /// Deny at once (retry in a millisecond) and fetch in the background.
    Deny,
}

/// Settings of the leased mode.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_redis::LeaseOptions;
///
/// let options = LeaseOptions::default()
///     .batch(100)
///     .low_water(20)
///     .return_after(Duration::from_secs(2))
///     .keep_surplus_for(Duration::from_secs(30));
/// # let _ = options;
/// ```
///
/// # How tokens move
///
/// A key's first lease takes only its request's cost. Each later batch of
/// a key that keeps spending doubles, from an eighth of [`batch`] up to it
/// (a hot key whose requests wait for a batch doubles further, up to
/// 1/64 of the bucket and at most [`MAX_BATCH`]); the next batch is fetched
/// in the background below the low-water mark, scaled with the batch.
/// Tokens an idle key gives back halve its next batch.
///
/// A key unused for [`return_after`], or for as long as the bucket takes
/// to refill the tokens it holds (`held x period / limit`) if that is
/// longer, gives them back while the bucket, as its last lease saw it,
/// still lacks them: then another instance may be waiting for them, and
/// gets them no later than the bucket would have refilled them. Tokens the
/// bucket has already refilled are surplus: a full bucket has no room for
/// them, so holding them deprives no other instance; they are kept for the
/// key's return and go back after [`keep_surplus_for`].
///
/// A drained key denies locally until it asks again: once its backoff has
/// passed (a second, doubling while its asks bring back less than its
/// requests here asked for since its last lease, up to a batch's refill
/// time; when a lease comes back whole, its exponent halves rather than
/// resets: 16 s becomes 4 s), never before its own cost has refilled.
///
/// While a key is drained (its last lease came back short), tokens go by
/// demand rather than by who asks first: each instance leases only what
/// its own demand for the key (cost requested here, admitted or denied,
/// decayed over 10 s) spends in a batch's refill time, at most a batch;
/// it fetches only once fewer tokens are left than a second of that
/// demand (at most the low-water mark); and an idle key keeps, past
/// [`return_after`], the tokens its demand spends within two more
/// requests' time (at most [`keep_surplus_for`]), rather than give them
/// back and lease them again.
///
/// # Bounds
///
/// Overshoot, for a bucket of `burst` tokens refilled at `rate`, on `N`
/// instances: in every window of every width `w`, the fleet admits at most
///
/// `burst + rate x w + N x (b + l)`
///
/// where `b` is the largest batch a key reaches (`batch`, or for a hot key
/// up to 1/64 of the bucket) and `l` the low-water mark scaled to it
/// (`ceil(low_water x b / batch)`): for the defaults (batch 50, low water
/// 10) and a bucket of at most 3,200, `N x 60`. Why: a token spent in the
/// window was either held by an instance (leased, not yet spent) when the
/// window began, at most `b + l` per instance, or leased during it, which
/// the bucket itself bounds by `burst + rate x w` (a token given back was
/// leased and not spent). How long tokens are kept does not enter: an
/// instance never holds more than `b + l` of a key, however long it keeps
/// them, so keeping tokens the bucket has refilled costs the fleet nothing
/// beyond this bound (it is where the bound's overshoot comes from). A
/// request of cost `c` whose own lease is on its way at the window's start
/// adds `c`. Measured (4 instances, batch 50, low water 10, a bucket of
/// 1,000 per 10 s; a trickle of 20 requests per second round-robin for
/// 20 s, then 3,000 concurrent requests at one instant; windows from 0 to
/// 3 periods): 168 over a perfect bucket in the worst window, bound 240.
///
/// Denials a perfect global bucket would not make: while one instance's
/// key finds the bucket drained, tokens other instances hold (at most
/// `(N - 1) x (b + l)`, and with the drained key's leases sized to each
/// instance's demand, far fewer) are not available to it; those the
/// bucket still lacks come back after the wait above, and surplus ones
/// deprive no one. Measured (6 instances, 60 per minute, four clients each
/// at twice the quota for 5 minutes, Poisson arrivals, spread over the
/// instances uniformly, by a Zipf law, or sticking to one and moving):
/// 0.962, 0.957 and 0.953 of what a perfect bucket admits (0.877, 0.856
/// and 0.955 with leases by batch), at 0.236 Redis calls per request
/// (0.243).
/// A drained key over its limit is admitted in clumps (one ask per
/// backoff) rather than token by token: the count matches a perfect
/// bucket's, the requests chosen differ. Measured with the traffic models
/// in `BENCHMARKS.md`: none for a key within its quota, a client pacing at
/// the rate through 4 copies admitted 110 where a perfect bucket admits
/// 110, a key over its quota 0.98x of a perfect bucket's count.
///
/// Redis calls: about one per batch. For a key at 1 request per second on
/// each of 4 instances (batch 50, 10 minutes): 0.027 to 0.038 per request
/// within its quota (300 per minute to 100 per second), 0.046 to 0.049
/// over it (100 per minute).
///
/// `X-RateLimit-Remaining` (the `remaining` of an allowed answer) is this
/// instance's estimate for the fleet: what the bucket had left at the
/// key's last lease, plus what it has refilled since, plus the tokens held
/// here (local spends since are taken from them), at most the bucket's
/// capacity. It does not count tokens other instances hold, nor see what
/// they took since that lease. Measured: exact within 1 for a key on one
/// instance; at most 24 off for one key round-robin over 4 instances
/// (batch 10, low water 2, 100 per minute, 4 requests per second).
///
/// [`batch`]: LeaseOptions::batch
/// [`return_after`]: LeaseOptions::return_after
/// [`keep_surplus_for`]: LeaseOptions::keep_surplus_for
#[derive(Debug, Clone)]
pub struct LeaseOptions {
    pub(crate) batch: u64,
    pub(crate) low_water: u64,
    pub(crate) return_after: Duration,
    pub(crate) keep_surplus_for: Duration,
    pub(crate) when_empty: WhenEmpty,
    pub(crate) max_keys: usize,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        Self {
            batch: 50,
            low_water: 10,
            return_after: Duration::from_secs(1),
            keep_surplus_for: Duration::from_secs(10),
            when_empty: WhenEmpty::Wait,
            max_keys: throttle_fleet_core::limits::DEFAULT_MAX_KEYS,
        }
    }
}

impl LeaseOptions {
    /// Tokens taken per lease once a key has shown it keeps spending
    /// (default 50); a new key starts with its request's cost, then an
    /// eighth of this, doubling. Redis load falls by about this factor. A
    /// hot key whose requests outrun its batches doubles its batch up to
    /// 1/64 of the bucket (at most 4,096 tokens). The worst-case overshoot
    /// is one batch plus the low-water mark per instance (see the type's
    /// docs).
    #[must_use]
    pub fn batch(mut self, batch: u64) -> Self {
        self.batch = batch;
        self
    }

    /// The next batch is fetched in the background once fewer than this
    /// many tokens are left (default 10), scaled with the key's batch.
    #[must_use]
    pub fn low_water(mut self, low_water: u64) -> Self {
        self.low_water = low_water;
        self
    }

    /// A key unused for this long (default 1 s), or for as long as the
    /// bucket takes to refill the tokens it holds if that is longer, gives
    /// them back while the bucket, as its last lease saw it, still lacks
    /// them.
    #[must_use]
    pub fn return_after(mut self, idle: Duration) -> Self {
        self.return_after = idle;
        self
    }

    /// Tokens the bucket would already have refilled (it was full, as the
    /// key's last lease saw it) are surplus: giving them back helps no one,
    /// so an idle key keeps them for this long (default 10 s) before they
    /// go back.
    #[must_use]
    pub fn keep_surplus_for(mut self, idle: Duration) -> Self {
        self.keep_surplus_for = idle;
        self
    }

    /// What a request does when the local batch is empty (default: wait).
    #[must_use]
    pub fn when_empty(mut self, when_empty: WhenEmpty) -> Self {
        self.when_empty = when_empty;
        self
    }

    /// Keys tracked locally per rule (default 1,000,000).
    #[must_use]
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=MAX_BATCH).contains(&self.batch) {
            return Err(ConfigError::new(
                "leased.batch",
                format!("must be from 1 to {MAX_BATCH} (got {})", self.batch),
            ));
        }
        if self.low_water >= self.batch {
            return Err(ConfigError::new(
                "leased.low_water",
                format!(
                    "must be below the batch of {} (got {})",
                    self.batch, self.low_water
                ),
            ));
        }
        if self.return_after.is_zero() {
            return Err(ConfigError::new("leased.return_after", "must be positive"));
        }
        Ok(())
    }
}
