//! RLQS: `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`. Each
//! Envoy keeps one stream open and reports, every reporting interval, how
//! many requests each bucket saw; the service answers each report with a
//! token bucket per bucket: that Envoy's share of the matching rule's
//! quota, in proportion to the demand it reports (`shares.rs`), never more
//! than the others leave. Envoy enforces it locally: no request waits for
//! the service.
//!
//! - A bucket no rule matches, or only a shadow rule, is `ALLOW_ALL`.
//! - A bucket matching several rules gets the tightest one's bucket.
//! - An Envoy that gets no share yet (the others hold it all until their
//!   next report) is sent nothing for that bucket and stays on its
//!   `no_assignment_behavior`. One that gets less than its share (the
//!   others have not let go yet) gets what is free. Every quarter of a
//!   reporting interval the service reviews each stream's buckets with the
//!   demand last reported, and sends what moved: the larger assignment
//!   as soon as the others let go, the smaller one as soon as another
//!   Envoy's demand cut the share.
//! - Assignments live three reporting intervals; every report renews
//!   them (an unchanged token bucket is kept by Envoy, not refilled).
//! - A review never makes an assignment outlive its Envoy's last report
//!   by more than the lifetime, and leaves alone a bucket whose report is
//!   overdue (by a quarter interval): an Envoy that stops reporting, its
//!   stream open or not, holds its share as last told until the abandon,
//!   and no longer.
//! - A bucket an Envoy has not reported for three intervals is sent
//!   `abandon_action` and its share is given up; when a stream ends, its
//!   shares stay held until their assignments expire, since that Envoy
//!   may still enforce them.
//! - A stream's domain is its first report's (the proto: later reports
//!   may leave it out); a later report naming another is refused.
//! - With the shares in Redis, a bucket Redis gives no share for (timed
//!   out, node down) is answered as its rule's failure policy says:
//!   `ALLOW_ALL` (fail open), the stream ended `UNAVAILABLE` (fail closed),
//!   the memory shares (local fallback); see [`RlqsOptions`].
//! - What one client may make the service hold is bounded
//!   ([`RlqsOptions`]): streams in all, buckets and their bytes per
//!   stream, the bytes of one bucket id. A bucket past a bound gets no
//!   assignment (Envoy stays on its `no_assignment_behavior`) and is
//!   counted; a stream past the bound is refused `RESOURCE_EXHAUSTED`.

mod assign;
mod options;
mod redis;
mod shares;
mod stream;

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use futures_util::Stream;
use throttle_fleet_config::ConfigFileError;
use throttle_fleet_core::clock::Clock;
use throttle_fleet_core::clock::WallClock;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use crate::metrics;
use crate::rules::EnvoyRules;

use shares::MemoryShares;
use stream::EnvoyStream;

pub use options::{LIFETIME_INTERVALS, RlqsOptions};
pub use stream::REVIEW_PER_TICK;

/// Where the shares are kept.
#[derive(Debug)]
enum Shares {
    Memory(MemoryShares),
    /// In Redis, and in memory for the rules whose failure policy is
    /// `local_fallback` while Redis cannot answer.
    Redis {
        store: redis::RedisShares,
        fallback: MemoryShares,
    },
}

/// The RLQS service over [`EnvoyRules`].
///
/// # The bound
///
/// Over any window of one period `P`, `N` Envoys on a bucket of `L` per
/// `P` admit at most
///
/// ```text
/// L + N + (Bf + N) × (1 + c) + D
/// ```
///
/// where `Bf` is the fleet's burst, `c` the assignment changes per Envoy
/// in the window (each starts a bucket full; at most one per quarter
/// reporting interval `R`, so `c ≤ 4P/R + 1`), `N` the tokens the
/// one-a-period floor adds, and `D` what Envoy's own defaults admit while
/// an Envoy has no assignment. `D` is the filter's setting, not the
/// service's: with `no_assignment_behavior` `ALLOW_ALL` a new bucket admits
/// everything until its first assignment, and with
/// `expired_assignment_behavior` `ALLOW_ALL` everything once the service
/// has been away for the assignment's lifetime (three reporting
/// intervals). With both set to a limiting `fallback_rate_limit` token
/// bucket of `max_tokens` `m` and `r` a second, `D ≤ N × (m + r × t)`
/// where `t` is how long an Envoy waits for its assignment (one round
/// trip, or one reporting interval when the others hold the whole quota).
/// `tests/rlqs_fleet.rs` asserts it, with what was measured (the guide's
/// Envoy chapter).
#[derive(Clone)]
pub struct Rlqs {
    inner: Arc<Inner>,
}

struct Inner {
    rules: EnvoyRules,
    shares: Shares,
    options: RlqsOptions,
    /// The Unix epoch's time, so replicas on several machines agree on
    /// expiries; the service counts in milliseconds ([`Inner::now_ms`]).
    clock: Arc<dyn Clock>,
    /// This replica's name, so that Envoys of several replicas are apart.
    replica: String,
    /// Streams opened so far (each Envoy's name).
    streams: AtomicU64,
    /// Streams open now.
    open: AtomicUsize,
    /// Buckets all streams hold now.
    buckets: AtomicUsize,
    /// One stream's report at a time in memory ([`Inner::turn`]).
    turns: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Rlqs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rlqs")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl Rlqs {
    /// The service answering from `rules`; connects to Redis when the
    /// options say so (an error names the field of a bad Redis setting,
    /// `redis.url`; a Redis that does not answer is no error: the rules'
    /// failure policies decide until it does).
    pub async fn new(rules: EnvoyRules, options: RlqsOptions) -> Result<Self, ConfigFileError> {
        Self::with_clock(rules, options, Arc::new(WallClock)).await
    }

    /// Like [`new`](Self::new), reading `clock` instead of the wall clock
    /// (which replicas agree on through NTP): a deterministic run of the
    /// service, its shares' expiries included.
    pub async fn with_clock(
        rules: EnvoyRules,
        options: RlqsOptions,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ConfigFileError> {
        metrics::describe();
        options
            .validate()
            .map_err(|e| ConfigFileError::in_file("rlqs", None, e.field(), e.reason()))?;
        let shares = match options.redis_config() {
            None => Shares::Memory(MemoryShares::default()),
            Some(config) => Shares::Redis {
                store: redis::RedisShares::connect(config, &options.key_prefix)
                    .await
                    .map_err(|e| ConfigFileError::in_file("rlqs", None, e.field(), e.reason()))?,
                fallback: MemoryShares::default(),
            },
        };
        let replica = {
            use std::hash::{BuildHasher, RandomState};
            format!("{:016x}", RandomState::new().hash_one(std::process::id()))
        };
        Ok(Self {
            inner: Arc::new(Inner {
                rules,
                shares,
                options,
                clock,
                replica,
                streams: AtomicU64::new(0),
                open: AtomicUsize::new(0),
                buckets: AtomicUsize::new(0),
                turns: tokio::sync::Semaphore::new(1),
            }),
        })
    }

    /// The tonic service, to add to a server.
    pub fn into_server(self) -> RateLimitQuotaServiceServer<Self> {
        RateLimitQuotaServiceServer::new(self)
    }

    /// A stream as one Envoy would see it: `reports` in, responses out
    /// (the transport aside; what the tonic service runs). Past
    /// [`RlqsOptions::max_streams`] streams open, the only answer is
    /// `RESOURCE_EXHAUSTED`.
    pub fn open(
        &self,
        reports: impl Stream<Item = Result<RateLimitQuotaUsageReports, Status>> + Send + 'static,
    ) -> mpsc::Receiver<Result<RateLimitQuotaResponse, Status>> {
        let (tx, rx) = mpsc::channel(16);
        let Some(open) = StreamPlace::take(&self.inner) else {
            metrics::rlqs_refused("streams");
            let _ = tx.try_send(Err(Status::resource_exhausted(format!(
                "this quota service serves at most {} streams at once",
                self.inner.options.max_streams
            ))));
            return rx;
        };
        let n = self.inner.streams.fetch_add(1, Ordering::Relaxed);
        let envoy = format!("{}:{n}", self.inner.replica);
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let _open = open;
            EnvoyStream::new(inner, envoy)
                .run(Box::pin(reports), tx)
                .await;
        });
        rx
    }
}

impl Inner {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64 {
        self.clock.now_us() / 1_000
    }

    /// A place for one more bucket under [`RlqsOptions::max_buckets`].
    fn hold_bucket(&self) -> bool {
        let max = self.options.max_buckets;
        self.buckets
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back `n` buckets' places.
    fn let_go_buckets(&self, n: usize) {
        self.buckets.fetch_sub(n, Ordering::AcqRel);
    }

    /// With the memory store, the turn to answer the next [`TURN`](stream::TURN)
    /// buckets of a report: share calls take no time waiting, so without
    /// turns every stream reporting at once would be runnable together,
    /// and an RLS call would wait for each of them. With Redis a share
    /// call waits for Redis, which lets the others run.
    async fn turn(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        match self.shares {
            Shares::Memory(_) => self.turns.acquire().await.ok(),
            Shares::Redis { .. } => None,
        }
    }
}

/// A stream's place under [`RlqsOptions::max_streams`], given back when
/// dropped.
struct StreamPlace(Arc<Inner>);

impl StreamPlace {
    fn take(inner: &Arc<Inner>) -> Option<Self> {
        let max = inner.options.max_streams;
        inner
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()?;
        metrics::rlqs_streams(1.0);
        Some(Self(Arc::clone(inner)))
    }
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        metrics::rlqs_streams(-1.0);
    }
}

type Outbound = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl RateLimitQuotaService for Rlqs {
    type StreamRateLimitQuotasStream = Outbound;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        let rx = self.open(request.into_inner());
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}
