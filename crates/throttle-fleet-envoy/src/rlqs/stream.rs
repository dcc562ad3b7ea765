//! One Envoy's quota stream: its reports answered, its buckets reviewed
//! every quarter interval and abandoned once unreported.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::RateLimitStrategy;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::BucketAction;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::{
    AbandonAction, BucketAction as Action, QuotaAssignmentAction,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf as pb;
use futures_util::Stream;
use throttle_fleet_core::{FailurePolicy, Key};
use tokio::sync::mpsc;
use tonic::Status;

use crate::catalog::UnknownDomain;
use crate::metrics;
use crate::quote::quoted;
use crate::rules::Loaded;

use super::shares::Report;
use super::{Inner, Shares, assign};

/// The most buckets of one stream reviewed each quarter interval (one
/// share call each: a Redis script with a Redis backend).
pub const REVIEW_PER_TICK: usize = 64;

/// How many buckets of a report one stream answers before another
/// stream's report may go on (memory store).
pub(super) const TURN: usize = 64;

/// A bucket id as sorted pairs (a map has no order of its own).
pub(super) type BucketName = Vec<(String, String)>;

/// One Envoy's stream: the buckets it reported and when last.
pub(super) struct EnvoyStream {
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
    /// The stream of the Envoy named `envoy`, with nothing reported yet.
    pub(super) fn new(inner: Arc<Inner>, envoy: String) -> Self {
        Self {
            inner,
            envoy,
            domain: None,
            buckets: BTreeMap::new(),
            bytes: 0,
            review_after: None,
        }
    }

    /// Answers `reports` on `tx` until either side ends.
    pub(super) async fn run(
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
        let now = self.inner.now_ms();
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
                Shares::Redis { store, fallback } => match store.report(&bucket, report).await {
                    Ok(steps) => steps,
                    Err(e) => match rule.failure_policy() {
                        FailurePolicy::FailClosed => {
                            metrics::rlqs_degraded("closed");
                            return Err(Status::unavailable(format!(
                                "the quota service cannot reach Redis: {e}"
                            )));
                        }
                        FailurePolicy::LocalFallback => {
                            // This replica's Envoys split the rate among
                            // them, each share cut to this replica's part.
                            metrics::rlqs_degraded("local");
                            let steps = fallback.report(&bucket, report);
                            match steps {
                                0 => 0,
                                n => (n / self.inner.options.replicas).max(1),
                            }
                        }
                        // Fail open: this rule sets no limit while Redis
                        // cannot answer (`ALLOW_ALL` if no other does).
                        _ => {
                            metrics::rlqs_degraded("open");
                            tracing::debug!(error = %e, rule = rule.name(), "RLQS: Redis gave no share; the rule fails open");
                            continue;
                        }
                    },
                },
            };
            any = true;
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
        let now = self.inner.now_ms();
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
        let now = self.inner.now_ms();
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
                Shares::Redis { store, fallback } => {
                    fallback.release(&bucket, &self.envoy);
                    if let Err(e) = store.release(&bucket, &self.envoy).await {
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
