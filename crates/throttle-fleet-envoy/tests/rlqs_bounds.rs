//! What a client that is not a well-behaved Envoy may make the quota
//! service (and RLS) hold or send back: a stream's domain from its first
//! report, the bounds of `RlqsOptions`, and errors that quote client
//! input short.

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use throttle_fleet_config::GatewayConfig;
use throttle_fleet_core::memory::MemoryBackend;
use throttle_fleet_envoy::{EnvoyRules, Rlqs, RlqsOptions, Rls};
use tokio::sync::mpsc;
use tonic::{Code, Status};

const RULES: &str = r#"
[[rules]]
name = "per-user"
domain = "api"
descriptor = ["user_id"]
limit = 600
period_secs = 60

[[rules]]
name = "secret-tenant-rule"
domain = "secret-internal-domain"
descriptor = ["tenant"]
limit = 1
period_secs = 60
"#;

fn rules() -> EnvoyRules {
    let config = GatewayConfig::parse("rls.toml", RULES, None).unwrap();
    EnvoyRules::new(&config, "rls.toml", MemoryBackend::default()).unwrap()
}

async fn start(options: RlqsOptions) -> Rlqs {
    Rlqs::new(rules(), options).await.unwrap()
}

fn options() -> RlqsOptions {
    RlqsOptions::new(Duration::from_secs(60))
}

struct Stream {
    tx: mpsc::Sender<Result<RateLimitQuotaUsageReports, Status>>,
    rx: mpsc::Receiver<Result<RateLimitQuotaResponse, Status>>,
}

impl Stream {
    fn open(service: &Rlqs) -> Self {
        let (tx, reports) = mpsc::channel(8);
        let rx = service.open(tokio_stream::wrappers::ReceiverStream::new(reports));
        Self { tx, rx }
    }

    /// Reports `users` in `domain`; the answer.
    async fn report(
        &mut self,
        domain: &str,
        users: &[&str],
    ) -> Result<RateLimitQuotaResponse, Status> {
        let usages = users
            .iter()
            .map(|u| BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: [("user_id".to_owned(), (*u).to_owned())].into(),
                }),
                num_requests_allowed: 5,
                ..Default::default()
            })
            .collect();
        let reports = RateLimitQuotaUsageReports {
            domain: domain.into(),
            bucket_quota_usages: usages,
        };
        self.tx.send(Ok(reports)).await.unwrap();
        self.next().await
    }

    async fn next(&mut self) -> Result<RateLimitQuotaResponse, Status> {
        tokio::time::timeout(Duration::from_secs(5), self.rx.recv())
            .await
            .expect("an answer")
            .expect("the stream is open")
    }
}

#[tokio::test]
async fn a_streams_domain_is_its_first_reports() {
    let service = start(options()).await;
    let mut first_without = Stream::open(&service);
    let err = first_without.report("", &["alice"]).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("first report"), "{err:?}");

    let mut s = Stream::open(&service);
    assert_eq!(
        s.report("api", &["alice"])
            .await
            .unwrap()
            .bucket_action
            .len(),
        1
    );
    // Later reports may leave the domain out (the proto says so) or repeat it.
    assert_eq!(s.report("", &["bob"]).await.unwrap().bucket_action.len(), 1);
    assert_eq!(
        s.report("api", &["carol"])
            .await
            .unwrap()
            .bucket_action
            .len(),
        1
    );
    // Not change it.
    let err = s.report("other", &["dave"]).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("\"api\""), "{err:?}");
}

#[tokio::test]
async fn buckets_past_a_bound_get_no_assignment() {
    // Each id here is 7 bytes of key and a 1-byte value: 8 bytes.
    let service = start(
        options()
            .max_buckets_per_stream(3)
            .max_stream_bytes(1 << 20),
    )
    .await;
    let mut s = Stream::open(&service);
    let answer = s.report("api", &["a", "b", "c", "d"]).await.unwrap();
    assert_eq!(answer.bucket_action.len(), 3, "three buckets at most");
    // A bucket it holds is still answered; a new one is not.
    let answer = s.report("", &["a", "e"]).await.unwrap();
    assert_eq!(answer.bucket_action.len(), 1);

    let service = start(options().max_stream_bytes(20)).await;
    let mut s = Stream::open(&service);
    let answer = s.report("api", &["a", "b", "c"]).await.unwrap();
    assert_eq!(
        answer.bucket_action.len(),
        2,
        "two ids of 8 bytes fit in 20"
    );

    let service = start(options().max_bucket_id_bytes(16)).await;
    let mut s = Stream::open(&service);
    let huge = "x".repeat(2 << 20);
    let answer = s.report("api", &["ok", &huge, "fine"]).await.unwrap();
    assert_eq!(answer.bucket_action.len(), 2);
    // The huge id is not echoed back.
    let echoed: usize = answer
        .bucket_action
        .iter()
        .map(|a| {
            a.bucket_id
                .as_ref()
                .map_or(0, |b| b.bucket.values().map(String::len).sum())
        })
        .sum();
    assert!(echoed < 16, "{echoed} bytes of ids sent back");
}

#[tokio::test]
async fn buckets_past_the_bound_for_all_streams_get_none_until_a_stream_lets_go() {
    let service = start(options().max_buckets(3)).await;
    let mut a = Stream::open(&service);
    let mut b = Stream::open(&service);
    assert_eq!(
        a.report("api", &["a1", "a2"])
            .await
            .unwrap()
            .bucket_action
            .len(),
        2
    );
    let answer = b.report("api", &["b1", "b2"]).await.unwrap();
    assert_eq!(answer.bucket_action.len(), 1, "three buckets in all");
    // `a` ends: its buckets' places are given back (its task notices the
    // end first).
    drop(a);
    let mut answered = 0;
    for _ in 0..100 {
        tokio::task::yield_now().await;
        // `b1`, held, is answered whatever happens to the others.
        let answer = b.report("", &["b1", "b2", "b3"]).await.unwrap();
        answered = answer.bucket_action.len();
        if answered == 3 {
            break;
        }
    }
    assert_eq!(answered, 3, "the ended stream's places were not given back");
}

#[tokio::test]
async fn streams_past_the_bound_are_refused_until_one_ends() {
    let service = start(options().max_streams(2)).await;
    let mut a = Stream::open(&service);
    let b = Stream::open(&service);
    let mut c = Stream::open(&service);
    let err = c.next().await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(a.report("api", &["alice"]).await.is_ok());
    // One ends: a place is free again (its task notices the end first).
    drop(b);
    let mut d = loop {
        let mut d = Stream::open(&service);
        match tokio::time::timeout(Duration::from_millis(50), d.rx.recv()).await {
            Err(_) => break d,
            Ok(answer) => {
                let err = answer.unwrap().unwrap_err();
                assert_eq!(err.code(), Code::ResourceExhausted);
                tokio::task::yield_now().await;
            }
        }
    };
    assert!(d.report("api", &["bob"]).await.is_ok());
}

#[tokio::test]
async fn errors_quote_client_input_short_and_name_no_other_domain() {
    let domain = "d".repeat(1 << 20);
    let service = start(options()).await;
    let mut s = Stream::open(&service);
    let err = s.report(&domain, &["alice"]).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().len() < 200, "{} bytes", err.message().len());
    assert!(!err.message().contains("secret"), "{err:?}");

    let rls = Rls::new(rules());
    let request = RateLimitRequest {
        domain,
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user_id".into(),
                value: "alice".into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let err = rls.decide(&request).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().len() < 200, "{} bytes", err.message().len());
    assert!(!err.message().contains("secret"), "{err:?}");
}
