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
//! - A bucket an Envoy has not reported for three intervals is sent
//!   `abandon_action`; when a stream ends, its shares stay held until
//!   their assignments expire, since that Envoy may still enforce them.

mod assign;
mod redis;
mod shares;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
use throttle_fleet_config::ConfigFileError;
use throttle_fleet_core::Key;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use crate::catalog::UnknownDomain;
use crate::metrics;
use crate::rules::{EnvoyRules, Loaded};

use shares::{MemoryShares, Report};

/// How many reporting intervals an assignment lives, and a bucket may go
/// unreported before it is abandoned.
pub const LIFETIME_INTERVALS: u32 = 3;

/// The most buckets one stream may hold.
pub const MAX_BUCKETS_PER_STREAM: usize = 10_000;

/// The most buckets of one stream reviewed each quarter interval (one
/// share call each: a Redis script with a Redis backend).
pub const REVIEW_PER_TICK: usize = 64;

/// How the quota service runs.
#[derive(Debug, Clone)]
pub struct RlqsOptions {
    report_interval: Duration,
    redis: Option<String>,
    key_prefix: String,
}

impl RlqsOptions {
    /// Envoys report every `report_interval` (their filter's
    /// `reporting_interval`); shares are kept in this process.
    pub fn new(report_interval: Duration) -> Self {
        Self {
            report_interval: report_interval.max(Duration::from_secs(1)),
            redis: None,
            key_prefix: "throttle:".to_owned(),
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
    streams: AtomicU64,
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
            }),
        })
    }

    /// The tonic service, to add to a server.
    pub fn into_server(self) -> RateLimitQuotaServiceServer<Self> {
        RateLimitQuotaServiceServer::new(self)
    }

    /// A stream as one Envoy would see it: `reports` in, responses out
    /// (the transport aside; what the tonic service runs).
    pub fn open(
        &self,
        reports: impl Stream<Item = Result<RateLimitQuotaUsageReports, Status>> + Send + 'static,
    ) -> mpsc::Receiver<Result<RateLimitQuotaResponse, Status>> {
        let (tx, rx) = mpsc::channel(16);
        let n = self.inner.streams.fetch_add(1, Ordering::Relaxed);
        let envoy = format!("{}:{n}", self.inner.replica);
        let inner = self.inner.clone();
        tokio::spawn(async move {
            metrics::rlqs_streams(1.0);
            let mut stream = EnvoyStream {
                inner,
                envoy,
                buckets: HashMap::new(),
                review_from: 0,
            };
            stream.run(Box::pin(reports), tx).await;
            metrics::rlqs_streams(-1.0);
        });
        rx
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

/// One Envoy's stream: the buckets it reported and when last.
struct EnvoyStream {
    inner: Arc<Inner>,
    envoy: String,
    /// Bucket id (sorted pairs) -> what this Envoy was told of it.
    buckets: HashMap<Vec<(String, String)>, Tracked>,
    /// Where the next tick's review starts, in the buckets' sorted order.
    review_from: usize,
}

/// One bucket of one Envoy.
struct Tracked {
    id: BucketId,
    domain: String,
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

    /// The actions answering one report.
    async fn report(
        &mut self,
        report: RateLimitQuotaUsageReports,
    ) -> Result<RateLimitQuotaResponse, Status> {
        let loaded = self.inner.rules.current_full();
        if !loaded.catalog.knows(&report.domain) {
            return Err(Status::invalid_argument(format!(
                "no rule has the domain {:?} (rules name: {})",
                report.domain,
                loaded.catalog.domains().join(", ")
            )));
        }
        metrics::rlqs_reports(report.bucket_quota_usages.len() as u64);
        let now = (self.inner.clock)();
        let mut actions = Vec::with_capacity(report.bucket_quota_usages.len());
        for usage in report.bucket_quota_usages {
            let Some(id) = usage.bucket_id.filter(|b| !b.bucket.is_empty()) else {
                // A usage without a bucket id names nothing to answer.
                continue;
            };
            let name = bucket_name(&id);
            if !self.buckets.contains_key(&name) && self.buckets.len() >= MAX_BUCKETS_PER_STREAM {
                continue;
            }
            let elapsed = usage
                .time_elapsed
                .map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9)
                .max(1.0);
            let demand = (usage
                .num_requests_allowed
                .saturating_add(usage.num_requests_denied)) as f64
                / elapsed;
            let assigned = self
                .assign(&loaded, &report.domain, &id, demand, now)
                .await?;
            if let Some(strategy) = &assigned {
                // Sent at every report, changed or not: it renews the
                // assignment's lifetime.
                actions.push(self.assignment(id.clone(), *strategy));
            }
            let reviewed = self.buckets.get(&name).map_or(0, |t| t.reviewed);
            self.buckets.insert(
                name,
                Tracked {
                    id,
                    domain: report.domain.clone(),
                    demand,
                    last_report: now,
                    sent: assigned,
                    reviewed,
                },
            );
        }
        Ok(RateLimitQuotaResponse {
            bucket_action: actions,
        })
    }

    /// What one bucket of this Envoy gets now: `None` while it gets no
    /// share.
    async fn assign(
        &self,
        loaded: &Loaded,
        domain: &str,
        id: &BucketId,
        demand: f64,
        now: u64,
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
            let mut bucket = format!("{}:", rule.name());
            key.write_hex(&mut bucket);
            let report = Report {
                envoy: &self.envoy,
                demand,
                capacity: quota.limit() as f64 / quota.period().as_secs_f64(),
                now_ms: now,
                ttl_ms: self.inner.options.lifetime().as_millis() as u64,
            };
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

    fn assignment(&self, id: BucketId, strategy: RateLimitStrategy) -> BucketAction {
        metrics::rlqs_action(match &strategy.strategy {
            Some(
                envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy::TokenBucket(_),
            ) => "token_bucket",
            _ => "allow_all",
        });
        let ttl = self.inner.options.lifetime();
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
    /// its own next report.
    async fn tick(&mut self) -> Result<RateLimitQuotaResponse, Status> {
        let mut response = self.abandoned();
        if self.buckets.is_empty() {
            return Ok(response);
        }
        let loaded = self.inner.rules.current_full();
        let now = (self.inner.clock)();
        let mut names: Vec<&Vec<(String, String)>> = self.buckets.keys().collect();
        names.sort_unstable();
        let start = self.review_from % names.len();
        let turn: Vec<Vec<(String, String)>> = names
            .iter()
            .cycle()
            .skip(start)
            .take(names.len().min(REVIEW_PER_TICK))
            .map(|n| (*n).clone())
            .collect();
        self.review_from = start + turn.len();
        let every = self.inner.options.report_interval.as_millis() as u64;
        for name in turn {
            let Some(tracked) = self.buckets.get(&name) else {
                continue;
            };
            // A review changes a bucket at most once an interval: each
            // change starts Envoy's bucket full.
            if tracked.sent.is_some() && now.saturating_sub(tracked.reviewed) < every {
                continue;
            }
            let (id, domain, demand) = (tracked.id.clone(), tracked.domain.clone(), tracked.demand);
            if !loaded.catalog.knows(&domain) {
                continue;
            }
            let assigned = self.assign(&loaded, &domain, &id, demand, now).await?;
            if let Some(tracked) = self.buckets.get_mut(&name)
                && let Some(strategy) = assigned
                && tracked.sent.as_ref() != Some(&strategy)
            {
                tracked.sent = Some(strategy);
                tracked.reviewed = now;
                response.bucket_action.push(self.assignment(id, strategy));
            }
        }
        Ok(response)
    }

    /// `abandon_action` for every bucket not reported for the assignment
    /// lifetime (forgotten here once sent).
    fn abandoned(&mut self) -> RateLimitQuotaResponse {
        let now = (self.inner.clock)();
        let lifetime = self.inner.options.lifetime().as_millis() as u64;
        let mut actions = Vec::new();
        self.buckets.retain(|_, tracked| {
            let keep = now.saturating_sub(tracked.last_report) < lifetime;
            if !keep {
                metrics::rlqs_action("abandon");
                actions.push(BucketAction {
                    bucket_id: Some(tracked.id.clone()),
                    bucket_action: Some(Action::AbandonAction(AbandonAction {})),
                });
            }
            keep
        });
        RateLimitQuotaResponse {
            bucket_action: actions,
        }
    }
}

/// A bucket id as sorted pairs (a map has no order of its own).
fn bucket_name(id: &BucketId) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = id
        .bucket
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    pairs.sort_unstable();
    pairs
}
