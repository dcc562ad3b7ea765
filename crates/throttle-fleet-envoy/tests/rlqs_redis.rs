//! RLQS with several service replicas on one real Redis: the Envoys of
//! both split one quota; the shares the same sequence of reports gets in
//! memory and in Redis are the same (one arithmetic, written twice); a
//! replica that goes away leaves its Envoys' shares held until their
//! assignments expire; a Redis that stops ends the stream with
//! `UNAVAILABLE` (Envoy keeps its assignment until it expires, then its
//! `expired_assignment_behavior`).

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::Strategy;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf as pb;
use throttle_fleet_config::GatewayConfig;
use throttle_fleet_core::{Clock, ManualClock, MemoryBackend};
use throttle_fleet_envoy::{EnvoyRules, Rlqs, RlqsOptions};
use throttle_fleet_test_support::RedisServer;
use tokio::sync::mpsc;
use tonic::Status;

const RULES: &str = r#"
[[rules]]
name = "per-user"
domain = "api"
descriptor = ["user_id"]
limit = 600
period_secs = 60
"#;

/// A clock the test moves, starting 1000 s after the epoch.
fn start_clock() -> ManualClock {
    ManualClock::new(1_000_000_000)
}

/// Tokio's clock (paused in the test that reads it), counted from 1000 s
/// after the epoch.
struct TokioClock(tokio::time::Instant);

impl Clock for TokioClock {
    fn now_us(&self) -> u64 {
        1_000_000_000 + self.0.elapsed().as_micros() as u64
    }
}

async fn replica(redis: Option<&str>, clock: &ManualClock) -> Rlqs {
    let config = GatewayConfig::parse("rls.toml", RULES, None).unwrap();
    let rules = EnvoyRules::new(&config, "rls.toml", MemoryBackend::default()).unwrap();
    // Envoys reporting every 60 s: the service's own reviews (every
    // quarter interval, on the real clock) stay out of these few seconds,
    // so each share comes from the reports the test sends.
    let mut options = RlqsOptions::new(Duration::from_secs(60));
    if let Some(url) = redis {
        options = options
            .redis(url)
            .key_prefix(format!("t{}:", std::process::id()));
    }
    Rlqs::with_clock(rules, options, Arc::new(clock.clone()))
        .await
        .unwrap()
}

/// One Envoy's stream.
struct Envoy {
    tx: mpsc::Sender<Result<RateLimitQuotaUsageReports, Status>>,
    rx: mpsc::Receiver<Result<RateLimitQuotaResponse, Status>>,
}

impl Envoy {
    fn open(service: &Rlqs) -> Self {
        let (tx, rx_reports) = mpsc::channel(8);
        let rx = service.open(tokio_stream::wrappers::ReceiverStream::new(rx_reports));
        Self { tx, rx }
    }

    /// Reports `per_second` requests over 5 s; the tokens a minute the
    /// answer assigns (0 for none within half a second).
    async fn report(&mut self, per_second: u64) -> Result<u64, Status> {
        let usage = BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("user_id".to_owned(), "alice".to_owned())].into(),
            }),
            time_elapsed: Some(pb::Duration {
                seconds: 5,
                nanos: 0,
            }),
            num_requests_allowed: per_second * 5,
            num_requests_denied: 0,
        };
        let reports = RateLimitQuotaUsageReports {
            domain: "api".into(),
            bucket_quota_usages: vec![usage],
        };
        self.tx.send(Ok(reports)).await.unwrap();
        match tokio::time::timeout(Duration::from_millis(500), self.rx.recv()).await {
            Ok(Some(Ok(r))) => Ok(per_minute(&r)),
            Ok(Some(Err(status))) => Err(status),
            Ok(None) => Err(Status::cancelled("the stream ended")),
            Err(_) => Ok(0),
        }
    }
}

fn per_minute(r: &RateLimitQuotaResponse) -> u64 {
    r.bucket_action
        .iter()
        .filter_map(|a| match &a.bucket_action {
            Some(Action::QuotaAssignmentAction(q)) => {
                match q.rate_limit_strategy.as_ref()?.strategy.as_ref()? {
                    Strategy::TokenBucket(tb) => {
                        let per = u64::from(tb.tokens_per_fill?.value);
                        Some(per * 60 / tb.fill_interval?.seconds as u64)
                    }
                    _ => None,
                }
            }
            _ => None,
        })
        .sum()
}

/// The same reports, in the same order, at the same times.
async fn script(a: &mut Envoy, b: &mut Envoy, clock: &ManualClock) -> Vec<u64> {
    let mut got = Vec::new();
    for (demand_a, demand_b) in [(30, 10), (30, 10), (5, 20), (5, 20), (1, 1)] {
        got.push(a.report(demand_a).await.unwrap());
        got.push(b.report(demand_b).await.unwrap());
        clock.advance(Duration::from_secs(5));
    }
    got
}

#[tokio::test]
async fn two_replicas_split_one_quota_as_one_process_would() {
    let redis = RedisServer::start();
    let clock = start_clock();
    let (one, two) = (
        replica(Some(&redis.url()), &clock).await,
        replica(Some(&redis.url()), &clock).await,
    );
    let (mut a, mut b) = (Envoy::open(&one), Envoy::open(&two));
    let fleet = script(&mut a, &mut b, &clock).await;

    let memory_clock = start_clock();
    let alone = replica(None, &memory_clock).await;
    let (mut a, mut b) = (Envoy::open(&alone), Envoy::open(&alone));
    let memory = script(&mut a, &mut b, &memory_clock).await;
    println!("per minute, A then B, each round: Redis {fleet:?}, memory {memory:?}");
    assert_eq!(fleet, memory, "the script and the Rust arithmetic differ");
    // Every round: the two assignments fit in the quota; the first round A
    // holds it all, then the split follows demand.
    for pair in fleet.chunks(2) {
        assert!(pair[0] + pair[1] <= 600, "{pair:?}");
    }
    assert_eq!(fleet[0], 600);
    assert!(fleet[2] > fleet[3], "A asks more: {fleet:?}");
    assert!(fleet[6] < fleet[7], "then B does: {fleet:?}");
}

#[tokio::test]
async fn a_gone_replicas_shares_stay_held_until_they_expire() {
    let redis = RedisServer::start();
    let clock = start_clock();
    let one = replica(Some(&redis.url()), &clock).await;
    let mut a = Envoy::open(&one);
    assert_eq!(a.report(10).await.unwrap(), 600);
    // The replica goes away with its stream; Envoy A keeps enforcing its
    // assignment (three intervals, 180 s) and reconnects to the other
    // replica.
    drop(a);
    drop(one);
    let two = replica(Some(&redis.url()), &clock).await;
    let mut again = Envoy::open(&two);
    assert_eq!(
        again.report(10).await.unwrap(),
        0,
        "the old share is still held"
    );
    clock.advance(Duration::from_secs(180));
    assert_eq!(
        again.report(10).await.unwrap(),
        600,
        "and free once it expired"
    );
    // Redis stops: the stream ends UNAVAILABLE (a new one will be tried).
    redis.stop();
    let err = again.report(10).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    redis.resume();
}

#[tokio::test(start_paused = true)]
async fn an_unreported_bucket_is_abandoned_and_a_silent_stream_costs_nothing() {
    let config = GatewayConfig::parse("rls.toml", RULES, None).unwrap();
    let rules = EnvoyRules::new(&config, "rls.toml", MemoryBackend::default()).unwrap();
    let clock = Arc::new(TokioClock(tokio::time::Instant::now()));
    let service = Rlqs::with_clock(rules, RlqsOptions::new(Duration::from_secs(5)), clock)
        .await
        .unwrap();
    // A stream that never reports: nothing is sent on it, nothing breaks.
    let mut silent = Envoy::open(&service);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(silent.rx.try_recv().is_err());
    // A bucket reported once, then not for three intervals (15 s): it is
    // abandoned, once.
    let mut a = Envoy::open(&service);
    assert_eq!(a.report(10).await.unwrap(), 600);
    tokio::time::sleep(Duration::from_secs(14)).await;
    assert!(a.rx.try_recv().is_err(), "not yet");
    let abandoned = tokio::time::timeout(Duration::from_secs(5), a.rx.recv())
        .await
        .expect("abandoned within the next quarter interval")
        .unwrap()
        .unwrap();
    assert!(matches!(
        abandoned.bucket_action[0].bucket_action,
        Some(Action::AbandonAction(_))
    ));
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(a.rx.try_recv().is_err(), "abandoned once");
    drop(silent);
}
