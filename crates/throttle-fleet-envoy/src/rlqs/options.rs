//! How the quota service runs: the Envoys' reporting interval, where the
//! shares live, and what one client may make the service hold.

use std::time::Duration;

use throttle_fleet_config::RlsConfig;
use throttle_fleet_core::ConfigError;
use throttle_fleet_redis::RedisConfig;

/// How long one share call waits for Redis by default (the command and
/// the connect timeout): `RlqsOptions::redis_timeout`.
const REDIS_TIMEOUT: Duration = Duration::from_millis(250);

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
/// service's memory: the guide's Envoy chapter gives what a bucket held was measured to
/// cost.
///
/// # Redis, and when it cannot answer
///
/// With [`redis`](Self::redis) (one URL) or
/// [`redis_cluster`](Self::redis_cluster) (a Cluster's nodes) the shares
/// live in Redis, through `throttle_fleet_redis::connection`: each call
/// bounded by [`redis_timeout`](Self::redis_timeout) (default 250 ms, not
/// the backends' 50 ms: no request of Envoy's waits for a report's answer,
/// and a report of many buckets on a busy Redis should not end streams),
/// each node behind its circuit breaker (3 failures in a row open it; a
/// probe closes it). When Redis gives no share for a bucket (timed out,
/// node down, an error), what happens follows the failure policy of the
/// rule the bucket matches (`failure` in the file):
///
/// | rule's policy | the bucket | the stream |
/// |---|---|---|
/// | `fail_open` (`open`, the default) | `ALLOW_ALL`, for one assignment lifetime, renewed at each report while Redis cannot answer; the next answered report sends its share again | goes on |
/// | `fail_closed` (`closed`) | nothing new: the stream ends `UNAVAILABLE`, and Envoy keeps the assignments it holds (shares Redis still counts) until they expire, then its `expired_assignment_behavior`; it opens a new stream | ends |
/// | `local_fallback` (`local`) | a share from this process's memory shares, of the rule's rate divided by [`replicas`](Self::replicas) | goes on |
///
/// A bucket matching several rules gets the tightest of their answers; a
/// fail-open rule that got no share adds no limit of its own. Buckets on
/// other nodes of a Cluster are answered as usual.
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
    pub(super) redis: Option<RedisConfig>,
    pub(super) redis_timeout: Duration,
    pub(super) replicas: u32,
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
            redis_timeout: REDIS_TIMEOUT,
            replicas: 1,
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
    #[must_use]
    pub fn redis(mut self, url: impl Into<String>) -> Self {
        self.redis = Some(RedisConfig::standalone(url));
        self
    }

    /// Keeps the shares in the Redis Cluster of which `nodes` are some
    /// (URLs); a bucket's hash is in the slot of its hash tag.
    #[must_use]
    pub fn redis_cluster<I, S>(mut self, nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.redis = Some(RedisConfig::cluster(nodes));
        self
    }

    /// How long one share call waits for Redis, and a connection for
    /// its dial (default 250 ms, what the service had before it was
    /// configurable). Past it the call
    /// counts toward the node's breaker and the bucket's rule's failure
    /// policy decides.
    #[must_use]
    pub fn redis_timeout(mut self, timeout: Duration) -> Self {
        self.redis_timeout = timeout;
        self
    }

    /// How many replicas of the service share the Redis (default 1): a
    /// rule whose failure policy is `local_fallback` gives, while Redis
    /// cannot answer, this process's Envoys its rate divided by this.
    #[must_use]
    pub fn replicas(mut self, n: u32) -> Self {
        self.replicas = n;
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
            ("rls.replicas", self.replicas as usize),
        ] {
            if n == 0 {
                return Err(ConfigError::new(field, "must be at least 1"));
            }
        }
        Ok(())
    }

    /// The Redis of the shares, with the timeouts of these options.
    pub(super) fn redis_config(&self) -> Option<RedisConfig> {
        let config = self.redis.clone()?;
        Some(
            config
                .command_timeout(self.redis_timeout)
                .connect_timeout(self.redis_timeout),
        )
    }

    pub(super) fn lifetime(&self) -> Duration {
        self.report_interval * LIFETIME_INTERVALS
    }
}
