//! How the quota service runs: the Envoys' reporting interval, where the
//! shares live, and what one client may make the service hold.

use std::time::Duration;

use throttle_fleet_config::RlsConfig;
use throttle_fleet_core::ConfigError;

/// How many reporting intervals an assignment lives, and a bucket may go
/// unreported before it is abandoned.
pub const LIFETIME_INTERVALS: u32 = 3;

/// How the quota service runs, and what one client may make it hold.
///
/// | setting | default | file (`[rls]`) | past it |
/// |---|---:|---|---|
/// | [`max_streams`](Self::max_streams) | 1,024 | `max_streams` | a new stream is refused `RESOURCE_EXHAUSTED` |
/// | [`max_buckets`](Self::max_buckets) | 1,000,000 | `max_buckets` | all streams' buckets together: a new bucket gets no assignment |
/// | [`max_buckets_per_stream`](Self::max_buckets_per_stream) | 10,000 | `max_buckets_per_stream` | a new bucket gets no assignment |
/// | [`max_stream_bytes`](Self::max_stream_bytes) | 1 MiB | `max_stream_bytes` | a new bucket gets no assignment |
/// | [`max_bucket_id_bytes`](Self::max_bucket_id_bytes) | 1 KiB | `max_bucket_id_bytes` | that bucket gets no assignment |
///
/// A bucket id's bytes are its keys' and values' lengths added up; a
/// stream's, those of the buckets it holds (an abandoned bucket's are
/// given back). A bucket that gets no assignment stays on its Envoy's
/// `no_assignment_behavior`, and is counted in
/// `throttle_envoy_rlqs_refused_total`. Size `max_buckets` to the
/// service's memory: the README gives what a bucket held was measured to
/// cost.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_envoy::RlqsOptions;
///
/// let options = RlqsOptions::new(Duration::from_secs(5)).max_buckets_per_stream(1_000);
/// assert!(options.validate().is_ok());
/// let none = RlqsOptions::new(Duration::from_secs(5)).max_streams(0);
/// assert_eq!(none.validate().unwrap_err().field(), "rls.max_streams");
/// ```
#[derive(Debug, Clone)]
pub struct RlqsOptions {
    pub(super) report_interval: Duration,
    pub(super) redis: Option<String>,
    pub(super) key_prefix: String,
    pub(super) max_streams: usize,
    pub(super) max_buckets: usize,
    pub(super) max_buckets_per_stream: usize,
    pub(super) max_stream_bytes: usize,
    pub(super) max_bucket_id_bytes: usize,
}

impl RlqsOptions {
    /// Envoys report every `report_interval` (their filter's
    /// `reporting_interval`); shares are kept in this process; the bounds
    /// are the file's defaults ([`RlsConfig::default`]).
    pub fn new(report_interval: Duration) -> Self {
        Self::from_config(&RlsConfig {
            report_interval,
            ..RlsConfig::default()
        })
    }

    /// The interval and the bounds of the file's `[rls]` table (the
    /// shares in this process: add [`redis`](Self::redis) for Redis).
    pub fn from_config(rls: &RlsConfig) -> Self {
        Self {
            report_interval: rls.report_interval.max(Duration::from_secs(1)),
            redis: None,
            key_prefix: "throttle:".to_owned(),
            max_streams: rls.max_streams,
            max_buckets: rls.max_buckets,
            max_buckets_per_stream: rls.max_buckets_per_stream,
            max_stream_bytes: rls.max_stream_bytes,
            max_bucket_id_bytes: rls.max_bucket_id_bytes,
        }
    }

    /// Keeps the shares in the Redis at `url`, so that several replicas of
    /// the service split each bucket between all their Envoys.
    pub fn redis(mut self, url: impl Into<String>) -> Self {
        self.redis = Some(url.into());
        self
    }

    /// The prefix of the Redis keys (default `throttle:`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Quota streams open at once, from every client (default 1,024).
    pub fn max_streams(mut self, n: usize) -> Self {
        self.max_streams = n;
        self
    }

    /// Buckets all streams hold together (default 1,000,000).
    pub fn max_buckets(mut self, n: usize) -> Self {
        self.max_buckets = n;
        self
    }

    /// Buckets one stream holds at once (default 10,000).
    pub fn max_buckets_per_stream(mut self, n: usize) -> Self {
        self.max_buckets_per_stream = n;
        self
    }

    /// Bytes of bucket ids one stream holds at once (default 1 MiB).
    pub fn max_stream_bytes(mut self, n: usize) -> Self {
        self.max_stream_bytes = n;
        self
    }

    /// Bytes of one bucket id (default 1 KiB).
    pub fn max_bucket_id_bytes(mut self, n: usize) -> Self {
        self.max_bucket_id_bytes = n;
        self
    }

    /// Checks that every bound lets something through; the error names
    /// the file's field (`rls.max_streams`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, n) in [
            ("rls.max_streams", self.max_streams),
            ("rls.max_buckets", self.max_buckets),
            ("rls.max_buckets_per_stream", self.max_buckets_per_stream),
            ("rls.max_stream_bytes", self.max_stream_bytes),
            ("rls.max_bucket_id_bytes", self.max_bucket_id_bytes),
        ] {
            if n == 0 {
                return Err(ConfigError::new(field, "must be at least 1"));
            }
        }
        Ok(())
    }

    pub(super) fn lifetime(&self) -> Duration {
        self.report_interval * LIFETIME_INTERVALS
    }
}
