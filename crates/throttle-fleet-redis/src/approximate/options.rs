//! Settings of the approximate mode.

use std::time::Duration;

use throttle_fleet_core::ConfigError;

/// Settings of the approximate mode.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_redis::ApproximateOptions;
///
/// let options = ApproximateOptions::default().spans(20).cooldown(Duration::from_secs(5));
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct ApproximateOptions {
    pub(crate) spans: u32,
    pub(crate) cooldown: Option<Duration>,
    pub(crate) flush_timeout: Duration,
    pub(crate) max_keys: usize,
    pub(crate) early_flush_gap: Duration,
}

impl Default for ApproximateOptions {
    fn default() -> Self {
        Self {
            spans: 10,
            cooldown: None,
            flush_timeout: Duration::from_secs(1),
            max_keys: throttle_fleet_core::limits::DEFAULT_MAX_KEYS,
            early_flush_gap: Duration::from_millis(5),
        }
    }
}

impl ApproximateOptions {
    /// Spans per interval (`N`, default 10, at least 2): flushes happen at
    /// every span end. More spans: less overshoot, more Redis commands.
    #[must_use]
    pub fn spans(mut self, spans: u32) -> Self {
        self.spans = spans;
        self
    }

    /// How long a key stays blocked once a flush shows the fleet over the
    /// quota (default: until its interval ends, when the count starts over).
    #[must_use]
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = Some(cooldown);
        self
    }

    /// How long one flush may take before it counts as failed (default 1 s;
    /// flushes are off the request path).
    #[must_use]
    pub fn flush_timeout(mut self, timeout: Duration) -> Self {
        self.flush_timeout = timeout;
        self
    }

    /// Keys tracked locally per rule (default 1,000,000). A key with counts
    /// not yet flushed is never evicted as idle.
    #[must_use]
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// The shortest time between two early flushes (default 5 ms). A key
    /// that runs out of its claim before the span ends while the fleet has
    /// room asks for one, and the requests it gets meanwhile wait for its
    /// answer (at most the command timeout), so a shorter gap means shorter
    /// waits, a longer one fewer Redis calls when many keys start at once.
    #[must_use]
    pub fn early_flush_gap(mut self, gap: Duration) -> Self {
        self.early_flush_gap = gap;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(2..=1_000).contains(&self.spans) {
            return Err(ConfigError::new(
                "approximate.spans",
                format!("must be from 2 to 1000 (got {})", self.spans),
            ));
        }
        if self.cooldown.is_some_and(|c| c.is_zero()) {
            return Err(ConfigError::new("approximate.cooldown", "must be positive"));
        }
        if self.flush_timeout.is_zero() {
            return Err(ConfigError::new(
                "approximate.flush_timeout",
                "must be positive",
            ));
        }
        if self.early_flush_gap > Duration::from_secs(1) {
            return Err(ConfigError::new(
                "approximate.early_flush_gap",
                format!("must be at most 1 s (got {:?})", self.early_flush_gap),
            ));
        }
        Ok(())
    }
}
