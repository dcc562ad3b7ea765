//! RLQS with several service replicas on one real Redis (standalone, and a
//! 3-primary Cluster): the Envoys of both split one quota; the shares the
//! same sequence of reports gets in memory and in Redis are the same (one
//! arithmetic, written twice); a replica that goes away leaves its Envoys'
//! shares held until their assignments expire; a Redis that stops ends a
//! fail-closed rule's stream with `UNAVAILABLE` (Envoy keeps its assignment
//! until it expires, then its `expired_assignment_behavior`); on a Cluster
//! with a hung primary, the buckets on it are answered as their rule's
//! failure policy says and the buckets on the other primaries as usual.

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
use throttle_fleet_core::{clock::ManualClock, memory::MemoryBackend};
use throttle_fleet_envoy::{EnvoyRules, Rlqs, RlqsOptions};
use throttle_fleet_test_support::tokio_clock::TokioClock;
use throttle_fleet_test_support::{RedisCluster, RedisServer};
use tokio::sync::mpsc;
use tonic::Status;

const RULES: &str = r#"
[[rules]]
name = "per-user"
domain = "api"
descriptor = ["user_id"]
limit = 600
period_secs = 60
failure = "closed"
"#;

/// Where a replica keeps its shares.
#[derive(Clone)]
enum Store {
    Memory,
    Redis(String),
    Cluster(Vec<String>),
}

/// A clock the test moves, starting 1000 s after the epoch.
fn start_clock() -> ManualClock {
    ManualClock::new(1_000_000_000)
}

async fn replica(store: &Store, clock: &ManualClock) -> Rlqs {
    replica_of(RULES, store, clock, |o| o).await
}

/// A replica answering from `rules`, its options changed by `more`.
async fn replica_of(
    rules: &str,
    store: &Store,
    clock: &ManualClock,
    more: impl FnOnce(RlqsOptions) -> RlqsOptions,
) -> Rlqs {
    let config = GatewayConfig::parse("rls.toml", rules, None).unwrap();
    let rules = EnvoyRules::new(&config, "rls.toml", MemoryBackend::default()).unwrap();
    // Envoys reporting every 60 s: the service's own reviews (every
    // quarter interval, on the real clock) stay out of these few seconds,
    // so each share comes from the reports the test sends.
    let options = RlqsOptions::new(Duration::from_secs(60)).key_prefix(prefix());
    let options = match store {
        Store::Memory => options,
        Store::Redis(url) => options.redis(url),
        Store::Cluster(nodes) => options.redis_cluster(nodes.clone()),
    };
    Rlqs::with_clock(rules, more(options), Arc::new(clock.clone()))
        .await
        .unwrap()
}

/// The replicas' key prefix.
fn prefix() -> String {
    format!("t{}:", std::process::id())
}

/// One Envoy's stream, reporting one bucket (`user_id`) of one domain.
struct Envoy {
    tx: mpsc::Sender<Result<RateLimitQuotaUsageReports, Status>>,
    rx: mpsc::Receiver<Result<RateLimitQuotaResponse, Status>>,
    domain: String,
    user: String,
}

impl Envoy {
    fn open(service: &Rlqs) -> Self {
        Self::open_for(service, "api", "alice")
    }

    fn open_for(service: &Rlqs, domain: &str, user: &str) -> Self {
        let (tx, rx_reports) = mpsc::channel(8);
        let rx = service.open(tokio_stream::wrappers::ReceiverStream::new(rx_reports));
        Self {
            tx,
            rx,
            domain: domain.to_owned(),
            user: user.to_owned(),
        }
    }

    /// Reports `per_second` requests over 5 s; the tokens a minute the
    /// answer assigns (0 for none within half a second).
    async fn report(&mut self, per_second: u64) -> Result<u64, Status> {
        self.send(per_second).await;
        match tokio::time::timeout(Duration::from_millis(500), self.rx.recv()).await {
            Ok(Some(Ok(r))) => Ok(per_minute(&r)),
            Ok(Some(Err(status))) => Err(status),
            Ok(None) => Err(Status::cancelled("the stream ended")),
            Err(_) => Ok(0),
        }
    }

    /// Reports 10 requests a second; what the answer assigns, waited for
    /// up to 10 s (a report on a hung node waits for the timeout first).
    async fn strategy(&mut self) -> Result<Strategy, Status> {
        self.send(10).await;
        let answer = tokio::time::timeout(Duration::from_secs(10), self.rx.recv()).await;
        match answer.expect("an answer within 10 s") {
            Some(Ok(r)) => match &r.bucket_action[0].bucket_action {
                Some(Action::QuotaAssignmentAction(q)) => Ok(q
                    .rate_limit_strategy
                    .and_then(|s| s.strategy)
                    .expect("a strategy")),
                other => panic!("not an assignment: {other:?}"),
            },
            Some(Err(status)) => Err(status),
            None => Err(Status::cancelled("the stream ended")),
        }
    }

    async fn send(&mut self, per_second: u64) {
        let usage = BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("user_id".to_owned(), self.user.clone())].into(),
            }),
            time_elapsed: Some(pb::Duration {
                seconds: 5,
                nanos: 0,
            }),
            num_requests_allowed: per_second * 5,
            num_requests_denied: 0,
        };
        let reports = RateLimitQuotaUsageReports {
            domain: self.domain.clone(),
            bucket_quota_usages: vec![usage],
        };
        self.tx.send(Ok(reports)).await.unwrap();
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
    two_replicas_split_one_quota_on(Store::Redis(redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_split_one_quota_as_one_process_would_on_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    two_replicas_split_one_quota_on(Store::Cluster(cluster.nodes())).await;
}

async fn two_replicas_split_one_quota_on(store: Store) {
    let clock = start_clock();
    let (one, two) = (replica(&store, &clock).await, replica(&store, &clock).await);
    let (mut a, mut b) = (Envoy::open(&one), Envoy::open(&two));
    let fleet = script(&mut a, &mut b, &clock).await;

    let memory_clock = start_clock();
    let alone = replica(&Store::Memory, &memory_clock).await;
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
    let store = Store::Redis(redis.url());
    let one = replica(&store, &clock).await;
    let mut a = Envoy::open(&one);
    assert_eq!(a.report(10).await.unwrap(), 600);
    // The replica goes away with its stream; Envoy A keeps enforcing its
    // assignment (three intervals, 180 s) and reconnects to the other
    // replica.
    drop(a);
    drop(one);
    let two = replica(&store, &clock).await;
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
    // Redis stops: the fail-closed rule's stream ends UNAVAILABLE (a new
    // one will be tried).
    redis.stop();
    let err = again.report(10).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable, "{err:?}");
    redis.resume();
}

#[tokio::test(start_paused = true)]
async fn an_unreported_bucket_is_abandoned_and_a_silent_stream_costs_nothing() {
    let config = GatewayConfig::parse("rls.toml", RULES, None).unwrap();
    let rules = EnvoyRules::new(&config, "rls.toml", MemoryBackend::default()).unwrap();
    let clock = Arc::new(TokioClock::starting_at(1_000_000_000));
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

/// One rule per failure policy, each in a domain of its own.
const POLICIES: &str = r#"
[[rules]]
name = "closed"
domain = "closed"
descriptor = ["user_id"]
limit = 600
period_secs = 60
failure = "closed"

[[rules]]
name = "open"
domain = "open"
descriptor = ["user_id"]
limit = 600
period_secs = 60
failure = "open"

[[rules]]
name = "local"
domain = "local"
descriptor = ["user_id"]
limit = 600
period_secs = 60
failure = "local"
"#;

/// The tokens a minute of a token bucket (`None` for another strategy).
fn tokens_per_minute(strategy: &Strategy) -> Option<u64> {
    match strategy {
        Strategy::TokenBucket(tb) => {
            Some(u64::from(tb.tokens_per_fill?.value) * 60 / tb.fill_interval?.seconds as u64)
        }
        _ => None,
    }
}

fn is_allow_all(strategy: &Strategy) -> bool {
    matches!(strategy, Strategy::BlanketRule(r) if *r == 0)
}

/// A hung primary of a 3-primary Cluster: the buckets whose hash is on it
/// are answered as their rule's failure policy says (fail closed: the
/// stream ends `UNAVAILABLE`; fail open: `ALLOW_ALL`; local: the memory
/// shares, the rate split between the 2 replicas), while the buckets on
/// the other primaries keep their Redis share; once the primary answers
/// again the fail-open bucket gets its share back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_primary_ends_or_degrades_its_buckets_by_policy_and_only_those() {
    // A long node timeout: the other primaries never take the hung one for
    // failed (and the Cluster for down) while the test runs.
    let cluster = RedisCluster::start_with_node_timeout(3, 0, Duration::from_secs(60));
    let clock = start_clock();
    let service = replica_of(POLICIES, &Store::Cluster(cluster.nodes()), &clock, |o| {
        o.redis_timeout(Duration::from_millis(200)).replicas(2)
    })
    .await;
    // The bucket's hash: `<prefix>rlqs:{<rule>:r<hex of the user>}`.
    let key = |rule: &str, user: &str| {
        let hex: String = user.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{}rlqs:{{{rule}:r{hex}}}", prefix())
    };
    let hung = cluster.primaries()[0];
    let hung_port = hung.port();
    let on_hung =
        |rule: &str, user: &str| cluster.primary_for_key(&key(rule, user)).port() == hung_port;
    // Per policy, one user whose bucket is on the hung primary and one
    // whose bucket is not; one stream each.
    let mut on = Vec::new();
    let mut off = Vec::new();
    for rule in ["closed", "open", "local"] {
        let users: Vec<String> = (0..200).map(|n| format!("u{n}")).collect();
        let there = users.iter().find(|u| on_hung(rule, u)).unwrap();
        let elsewhere = users.iter().find(|u| !on_hung(rule, u)).unwrap();
        on.push(Envoy::open_for(&service, rule, there));
        off.push(Envoy::open_for(&service, rule, elsewhere));
    }
    for envoy in on.iter_mut().chain(off.iter_mut()) {
        let got = envoy.strategy().await.unwrap();
        assert_eq!(
            tokens_per_minute(&got),
            Some(600),
            "{}: {got:?}",
            envoy.domain
        );
    }

    hung.stop();
    // Twice: the first reports time out, the later ones find the breaker
    // open (three failures in a row); both are answered the same.
    for round in 0..4 {
        // The fail-closed stream ends; Envoy opens another, which ends too.
        if round > 0 {
            on[0] = Envoy::open_for(&service, "closed", &on[0].user.clone());
        }
        let status = on[0].strategy().await.unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::Unavailable,
            "round {round}: {status:?}"
        );
        let open = on[1].strategy().await.unwrap();
        assert!(is_allow_all(&open), "fail open, round {round}: {open:?}");
        let local = on[2].strategy().await.unwrap();
        assert_eq!(
            tokens_per_minute(&local),
            Some(300),
            "local fallback, round {round}: {local:?}"
        );
        for envoy in &mut off {
            let got = envoy.strategy().await.unwrap();
            assert_eq!(
                tokens_per_minute(&got),
                Some(600),
                "{} on another primary, round {round}: {got:?}",
                envoy.domain
            );
        }
    }

    hung.resume();
    // The breaker's probe closes within a probe interval or so of the
    // resume; a loaded machine gets 10 s.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let open = on[1].strategy().await.unwrap();
        if tokens_per_minute(&open) == Some(600) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the fail-open bucket never got its share back: {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
