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
//! - What one client may make the service hold is bounded
//!   ([`RlqsOptions`]): streams in all, buckets and their bytes per
//!   stream, the bytes of one bucket id. A bucket past a bound gets no
//!   assignment (Envoy stays on its `no_assignment_behavior`) and is
//!   counted; a stream past the bound is refused `RESOURCE_EXHAUSTED`.

mod assign;
mod redis;
mod shares;

use std::collections::BTreeMap;
use std::ops::Bound;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::envoy::r#type::v3::RateLimitStrategy;
use envoy_types::pb::google::protobuf as pb;
use futures_util::Stream;
use throttle_fleet_config::{ConfigFileError, RlsConfig};
use throttle_fleet_core::{ConfigError, Key};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use crate::catalog::UnknownDomain;
use crate::metrics;
use crate::quote::quoted;
use crate::rules::{EnvoyRules, Loaded};

use shares::{MemoryShares, Report};

/// How many reporting intervals an assignment lives, and a bucket may go
/// unreported before it is abandoned.
pub const LIFETIME_INTERVALS: u32 = 3;

/// The most buckets of one stream reviewed each quarter interval (one
/// share call each: a Redis script with a Redis backend).
pub const REVIEW_PER_TICK: usize = 64;

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
/// `throttle_envoy_rlqs_refused_total`. A bucket held costs the service
/// about 1.2 KiB (200 streams of 1,000 buckets: 242 MiB), so the default
/// `max_buckets` holds the quota streams to about 1.2 GiB; size it to the
/// service's memory.
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
    report_interval: Duration,
    redis: Option<String>,
    key_prefix: String,
    max_streams: usize,
    max_buckets: usize,
    max_buckets_per_stream: usize,
    max_stream_bytes: usize,
    max_bucket_id_bytes: usize,
}

impl RlqsOptions {
    /// Envoys report every `report_interval` (their filter's
    /// `reporting_interval`); shares are kept in this process.
    pub fn new(report_interval: Duration) -> Self {
        Self {
            report_interval: report_interval.max(Duration::from_secs(1)),
            redis: None,
            key_prefix: "throttle:".to_owned(),
            max_streams: 1_024,
            max_buckets: 1_000_000,
            max_buckets_per_stream: 10_000,
            max_stream_bytes: 1 << 20,
            max_bucket_id_bytes: 1 << 10,
        }
    }

    /// The interval and the bounds of the file's `[rls]` table (the
    /// shares in this process: add [`redis`](Self::redis) for Redis).
    pub fn from_config(rls: &RlsConfig) -> Self {
        Self::new(rls.report_interval)
            .max_streams(rls.max_streams)
            .max_buckets(rls.max_buckets)
            .max_buckets_per_stream(rls.max_buckets_per_stream)
            .max_stream_bytes(rls.max_stream_bytes)
            .max_bucket_id_bytes(rls.max_bucket_id_bytes)
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

    fn lifetime(&self) -> Duration {
        self.report_interval * LIFETIME_INTERVALS
    }
}

/// Where the shares are kept.
#[derive(Debug)]
enum Shares {
    Memory(MemoryShares),
    Redis(redis::RedisShares),
}

/// The clock the service reads, in milliseconds (the Unix epoch's, so
/// replicas on several machines agree on expiries).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The RLQS service over [`EnvoyRules`].
#[derive(Clone)]
pub struct Rlqs {
    inner: Arc<Inner>,
}

struct Inner {
    rules: EnvoyRules,
    shares: Shares,
    options: RlqsOptions,
    clock: Clock,
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

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Rlqs {
    /// The service answering from `rules`; connects to Redis when the
    /// options say so (an error names `backend.url`).
    pub async fn new(rules: EnvoyRules, options: RlqsOptions) -> Result<Self, ConfigFileError> {
        Self::with_clock(rules, options, Arc::new(wall_ms)).await
    }

    /// Like [`new`](Self::new), reading `clock` (for tests).
    pub async fn with_clock(
        rules: EnvoyRules,
        options: RlqsOptions,
        clock: Clock,
    ) -> Result<Self, ConfigFileError> {
        metrics::describe();
        options
            .validate()
            .map_err(|e| ConfigFileError::in_file("rlqs", None, e.field(), e.reason()))?;
        let shares = match &options.redis {
            None => Shares::Memory(MemoryShares::default()),
            Some(url) => Shares::Redis(
                redis::RedisShares::connect(url, &options.key_prefix)
                    .await
                    .map_err(|e| {
                        ConfigFileError::in_file(
                            "rlqs",
                            None,
                            "backend.url",
                            format!("cannot reach Redis: {e}"),
                        )
                    })?,
            ),
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
            let mut stream = EnvoyStream {
                inner,
                envoy,
                domain: None,
                buckets: BTreeMap::new(),
                bytes: 0,
                review_after: None,
            };
            stream.run(Box::pin(reports), tx).await;
        });
        rx
    }
}

/// How many buckets of a report one stream answers before another
/// stream's report may go on (memory store).
const TURN: usize = 64;

impl Inner {
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

    /// With the memory store, the turn to answer the next [`TURN`]
    /// buckets of a report: share calls take no time waiting, so without
    /// turns every stream reporting at once would be runnable together,
    /// and an RLS call would wait for each of them. With Redis a share
    /// call waits for Redis, which lets the others run.
    async fn turn(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        match self.shares {
            Shares::Memory(_) => self.turns.acquire().await.ok(),
            Shares::Redis(_) => None,
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

/// A bucket id as sorted pairs (a map has no order of its own).
type BucketName = Vec<(String, String)>;

/// One Envoy's stream: the buckets it reported and when last.
struct EnvoyStream {
    inner: Arc<Inner>,
    envoy: String,
    /// The domain of the stream's first report.
    domain: Option<String>,
    /// What this Envoy was told of each bucket, in the ids' order (the
    /// reviews' turn goes through it).
    buckets: BTreeMap<BucketName, Tracked>,
    /// The bytes of the ids in `buckets`.
    bytes: usize,
    /// The last bucket reviewed: the next tick's review starts after it.
    review_after: Option<BucketName>,
}

impl Drop for EnvoyStream {
    fn drop(&mut self) {
        self.inner.let_go_buckets(self.buckets.len());
    }
}

/// One bucket of one Envoy.
struct Tracked {
    /// The demand it last reported (requests a second).
    demand: f64,
    /// When it was last reported (ms).
    last_report: u64,
    /// The strategy last sent.
    sent: Option<RateLimitStrategy>,
    /// When a review last changed it (ms).
    reviewed: u64,
}

impl EnvoyStream {
    async fn run(
        &mut self,
        mut reports: Pin<Box<dyn Stream<Item = Result<RateLimitQuotaUsageReports, Status>> + Send>>,
        tx: mpsc::Sender<Result<RateLimitQuotaResponse, Status>>,
    ) {
        use futures_util::StreamExt;
        // The first review a quarter interval after the stream opens.
        let quarter = self.inner.options.report_interval / 4;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + quarter, quarter);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let response = tokio::select! {
                report = reports.next() => match report {
                    Some(Ok(report)) => self.report(report).await,
                    // The Envoy went away: its shares stay held until
                    // their assignments expire.
                    Some(Err(_)) | None => return,
                },
                _ = tick.tick() => self.tick().await,
            };
            let end = response.is_err();
            let empty = matches!(&response, Ok(r) if r.bucket_action.is_empty());
            if !empty && tx.send(response).await.is_err() {
                return;
            }
            if end {
                return;
            }
        }
    }

    /// The stream's domain after `report`: the first report's, which a
    /// later one may leave out or repeat, never change.
    fn domain_of(&mut self, report: &RateLimitQuotaUsageReports) -> Result<String, Status> {
        match &self.domain {
            None if report.domain.is_empty() => Err(Status::invalid_argument(
                "the first report of a stream must name its domain",
            )),
            None => {
                self.domain = Some(report.domain.clone());
                Ok(report.domain.clone())
            }
            Some(d) if report.domain.is_empty() || report.domain == *d => Ok(d.clone()),
            Some(d) => Err(Status::invalid_argument(format!(
                "a stream's reports are all in its first report's domain {} (this one names {})",
                quoted(d),
                quoted(&report.domain)
            ))),
        }
    }

    /// The actions answering one report.
    async fn report(
        &mut self,
        report: RateLimitQuotaUsageReports,
    ) -> Result<RateLimitQuotaResponse, Status> {
        let domain = self.domain_of(&report)?;
        let loaded = self.inner.rules.current_full();
        if !loaded.catalog.knows(&domain) {
            return Err(Status::invalid_argument(format!(
                "no rule has the domain {}",
                quoted(&domain)
            )));
        }
        metrics::rlqs_reports(report.bucket_quota_usages.len() as u64);
        let now = (self.inner.clock)();
        let lifetime = self.inner.options.lifetime().as_millis() as u64;
        let mut actions = Vec::with_capacity(report.bucket_quota_usages.len());
        let mut turn = None;
        for (i, usage) in report.bucket_quota_usages.into_iter().enumerate() {
            // A report of thousands of buckets gives the runtime's thread
            // back now and then, and in memory the streams' reports take
            // turns, [`TURN`] buckets at a time: an RLS call waits behind
            // one stream's turn, not behind every stream reporting.
            if i % TURN == 0 {
                drop(turn.take());
                turn = self.inner.turn().await;
            }
            tokio::task::coop::consume_budget().await;
            let Some(id) = usage.bucket_id.filter(|b| !b.bucket.is_empty()) else {
                // A usage without a bucket id names nothing to answer.
                continue;
            };
            let size = id_bytes(&id);
            if size > self.inner.options.max_bucket_id_bytes {
                metrics::rlqs_refused("bucket_id_bytes");
                continue;
            }
            let name = bucket_name(&id);
            let known = self.buckets.get(&name).map(|t| t.reviewed);
            if known.is_none() {
                if self.buckets.len() >= self.inner.options.max_buckets_per_stream {
                    metrics::rlqs_refused("buckets");
                    continue;
                }
                if self.bytes + size > self.inner.options.max_stream_bytes {
                    metrics::rlqs_refused("stream_bytes");
                    continue;
                }
                if !self.inner.hold_bucket() {
                    metrics::rlqs_refused("buckets_in_all");
                    continue;
                }
            }
            let elapsed = usage
                .time_elapsed
                .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9)
                .max(1.0);
            let demand = (usage
                .num_requests_allowed
                .saturating_add(usage.num_requests_denied)) as f64
                / elapsed;
            let expires = now + lifetime;
            let assigned = match self
                .assign(&loaded, &domain, &id, demand, now, expires)
                .await
            {
                Ok(assigned) => assigned,
                Err(status) => {
                    if known.is_none() {
                        // Not held after all: the stream ends.
                        self.inner.let_go_buckets(1);
                    }
                    return Err(status);
                }
            };
            if let Some(strategy) = &assigned {
                // Sent at every report, changed or not: it renews the
                // assignment's lifetime.
                actions.push(self.assignment(id, *strategy, expires - now));
            }
            if known.is_none() {
                self.bytes += size;
            }
            self.buckets.insert(
                name,
                Tracked {
                    demand,
                    last_report: now,
                    sent: assigned,
                    reviewed: known.unwrap_or(0),
                },
            );
        }
        Ok(RateLimitQuotaResponse {
            bucket_action: actions,
        })
    }

    /// What one bucket of this Envoy gets now, held until `expires` (ms):
    /// `None` while it gets no share.
    async fn assign(
        &self,
        loaded: &Loaded,
        domain: &str,
        id: &BucketId,
        demand: f64,
        now: u64,
        expires: u64,
    ) -> Result<Option<RateLimitStrategy>, Status> {
        let mut matched: Vec<(usize, Key)> = Vec::new();
        loaded
            .catalog
            .matches_bucket(domain, &id.bucket, |rule, key| matched.push((rule, key)))
            .map_err(|UnknownDomain| Status::invalid_argument("unknown domain"))?;
        let mut tightest: Option<RateLimitStrategy> = None;
        let mut any = false;
        for (index, key) in matched {
            let rule = loaded.rules.rule(index);
            if rule.is_shadow() {
                continue;
            }
            any = true;
            let quota = rule.quota_for(&key);
            let report = Report {
                envoy: &self.envoy,
                demand,
                capacity: quota.limit() as f64 / quota.period().as_secs_f64(),
                now_ms: now,
                expires_ms: expires,
            };
            let bucket = share_key(rule.name(), &key);
            let steps = match &self.inner.shares {
                Shares::Memory(m) => m.report(&bucket, report),
                Shares::Redis(r) => r.report(&bucket, report).await.map_err(|e| {
                    Status::unavailable(format!("the quota service cannot reach Redis: {e}"))
                })?,
            };
            let Some(s) = assign::token_bucket(rule, quota, steps) else {
                // No share yet: nothing is sent for this bucket.
                return Ok(None);
            };
            if tightest
                .as_ref()
                .is_none_or(|t| assign::rate(&s) < assign::rate(t))
            {
                tightest = Some(s);
            }
        }
        Ok(if any {
            tightest
        } else {
            Some(assign::allow_all())
        })
    }

    fn assignment(&self, id: BucketId, strategy: RateLimitStrategy, ttl_ms: u64) -> BucketAction {
        metrics::rlqs_action(match &strategy.strategy {
            Some(
                envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy::TokenBucket(_),
            ) => "token_bucket",
            _ => "allow_all",
        });
        let ttl = Duration::from_millis(ttl_ms);
        BucketAction {
            bucket_id: Some(id),
            bucket_action: Some(Action::QuotaAssignmentAction(QuotaAssignmentAction {
                assignment_time_to_live: Some(pb::Duration {
                    seconds: ttl.as_secs() as i64,
                    nanos: ttl.subsec_nanos() as i32,
                }),
                rate_limit_strategy: Some(strategy),
            })),
        }
    }

    /// What a tick sends: the abandoned buckets, and the buckets whose
    /// share moved since they were last told, reviewed with the demand
    /// they last reported (at most [`REVIEW_PER_TICK`] a tick, in turn): an
    /// Envoy that got less than it wants grows as soon as the others let
    /// go, and one whose share another Envoy's demand cut lets go before
    /// its own next report. A review's assignment expires when its last
    /// report's would, and a bucket whose report is overdue (an interval
    /// and a quarter) is not reviewed: reviews never keep a silent
    /// Envoy's share, nor cut what it may still enforce.
    async fn tick(&mut self) -> Result<RateLimitQuotaResponse, Status> {
        let mut response = self.abandoned().await;
        let Some(domain) = self.domain.clone() else {
            return Ok(response);
        };
        let loaded = self.inner.rules.current_full();
        if self.buckets.is_empty() || !loaded.catalog.knows(&domain) {
            return Ok(response);
        }
        let now = (self.inner.clock)();
        let lifetime = self.inner.options.lifetime().as_millis() as u64;
        let every = self.inner.options.report_interval.as_millis() as u64;
        let after = match self.review_after.take() {
            Some(name) => Bound::Excluded(name),
            None => Bound::Unbounded,
        };
        let turn: Vec<BucketName> = self
            .buckets
            .range((after, Bound::Unbounded))
            .chain(self.buckets.iter())
            .take(self.buckets.len().min(REVIEW_PER_TICK))
            .map(|(name, _)| name.clone())
            .collect();
        self.review_after = turn.last().cloned();
        for name in turn {
            let Some(tracked) = self.buckets.get(&name) else {
                continue;
            };
            // A review changes a bucket at most once an interval: each
            // change starts Envoy's bucket full.
            if tracked.sent.is_some() && now.saturating_sub(tracked.reviewed) < every {
                continue;
            }
            // An Envoy overdue with its report may not hear what is sent:
            // its share stays as it was told until the abandon, so that
            // what it may still enforce stays counted.
            if now.saturating_sub(tracked.last_report) > every + every / 4 {
                continue;
            }
            let expires = tracked.last_report + lifetime;
            let demand = tracked.demand;
            let id = bucket_id(&name);
            let assigned = self
                .assign(&loaded, &domain, &id, demand, now, expires)
                .await?;
            if let Some(tracked) = self.buckets.get_mut(&name)
                && let Some(strategy) = assigned
                && tracked.sent.as_ref() != Some(&strategy)
            {
                tracked.sent = Some(strategy);
                tracked.reviewed = now;
                response
                    .bucket_action
                    .push(self.assignment(id, strategy, expires - now));
            }
        }
        Ok(response)
    }

    /// `abandon_action` for every bucket not reported for the assignment
    /// lifetime; its share is given up and it is forgotten here.
    async fn abandoned(&mut self) -> RateLimitQuotaResponse {
        let now = (self.inner.clock)();
        let lifetime = self.inner.options.lifetime().as_millis() as u64;
        let gone: Vec<BucketName> = self
            .buckets
            .iter()
            .filter(|(_, t)| now.saturating_sub(t.last_report) >= lifetime)
            .map(|(name, _)| name.clone())
            .collect();
        let mut actions = Vec::with_capacity(gone.len());
        let loaded = (!gone.is_empty()).then(|| self.inner.rules.current_full());
        self.inner.let_go_buckets(gone.len());
        for name in gone {
            self.buckets.remove(&name);
            let id = bucket_id(&name);
            self.bytes -= id_bytes(&id);
            if let (Some(loaded), Some(domain)) = (&loaded, &self.domain) {
                self.release(loaded, domain, &id).await;
            }
            metrics::rlqs_action("abandon");
            actions.push(BucketAction {
                bucket_id: Some(id),
                bucket_action: Some(Action::AbandonAction(AbandonAction {})),
            });
        }
        RateLimitQuotaResponse {
            bucket_action: actions,
        }
    }

    /// Gives up this Envoy's shares of `id`'s rules. It expires at the same
    /// time anyway: a Redis that does not answer changes nothing.
    async fn release(&self, loaded: &Loaded, domain: &str, id: &BucketId) {
        let mut matched: Vec<(usize, Key)> = Vec::new();
        let _ = loaded
            .catalog
            .matches_bucket(domain, &id.bucket, |rule, key| matched.push((rule, key)));
        for (index, key) in matched {
            let bucket = share_key(loaded.rules.rule(index).name(), &key);
            match &self.inner.shares {
                Shares::Memory(m) => m.release(&bucket, &self.envoy),
                Shares::Redis(r) => {
                    if let Err(e) = r.release(&bucket, &self.envoy).await {
                        tracing::debug!(error = %e, "an abandoned share was not released in Redis; it expires");
                    }
                }
            }
        }
    }
}

/// The shares' name for `rule`'s `key`.
fn share_key(rule: &str, key: &Key) -> String {
    let mut bucket = format!("{rule}:");
    key.write_hex(&mut bucket);
    bucket
}

/// A bucket id as sorted pairs.
fn bucket_name(id: &BucketId) -> BucketName {
    let mut pairs: BucketName = id
        .bucket
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    pairs.sort_unstable();
    pairs
}

/// The bucket id of `name`.
fn bucket_id(name: &BucketName) -> BucketId {
    BucketId {
        bucket: name.iter().cloned().collect(),
    }
}

/// The bytes of a bucket id: its keys and values.
fn id_bytes(id: &BucketId) -> usize {
    id.bucket.iter().map(|(k, v)| k.len() + v.len()).sum()
}
