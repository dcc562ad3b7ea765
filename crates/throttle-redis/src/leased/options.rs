//! Settings of the leased mode.

use std::time::Duration;

use throttle_core::ConfigError;

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
/// use throttle_redis::LeaseOptions;
///
/// let options = LeaseOptions::default().batch(100).low_water(20).return_after(Duration::from_secs(2));
/// # let _ = options;
/// ```
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
            max_keys: throttle_core::DEFAULT_MAX_KEYS,
        }
    }
}

impl LeaseOptions {
    /// Tokens taken per lease (default 50). Redis load falls by about this
    /// factor. A hot key whose requests outrun its batches doubles its batch
    /// up to 1/64 of the bucket (at most 4,096 tokens), back to this when it
    /// goes idle: the worst-case overshoot is one batch per instance, the
    /// larger of this and 1/64 of the bucket.
    #[must_use]
    pub fn batch(mut self, batch: u64) -> Self {
        self.batch = batch;
        self
    }

    /// The next batch is fetched in the background once fewer than this
    /// many tokens are left (default 10).
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
