//! Instructions per bucket of an RLQS usage report (callgrind): what our
//! quota service spends on each bucket an Envoy reports, shares kept in
//! this process.
//!
//! ```text
//! cargo run --release --bin rlqs_report_cost    # needs valgrind
//! ```
//!
//! One rule (`domain = "api"`, `descriptor = ["user_id"]`, 1,000 per
//! minute), `Rlqs::new` with a 60 s reporting interval and memory shares.
//! One stream (`Rlqs::open`) is fed `K` reports of `B` buckets each
//! (`{"user_id": "client-<j>"}`, the same `B` buckets in every report, as
//! an Envoy reports its buckets every interval, 10 requests allowed in
//! 1 s each); every report is answered with one token bucket per bucket.
//! Before the count, one report of the same buckets (the buckets known,
//! shares held). `measured` sends the reports one at a time and waits for
//! each answer, on a current-thread runtime, so the stream's task, the
//! channels and the runtime are counted with the service's own work; the
//! reports are built before it, the answers dropped in it.
//!
//! `echo` is the same exchange with a task that answers every report with
//! an empty response: the channels and runtime alone. Figures per bucket,
//! least of three runs: the whole exchange, and the exchange minus `echo`.

// The core's instruction-count runner, so all count the same way.
#[path = "../../../../crates/throttle-fleet-core/benches/support/callgrind.rs"]
mod callgrind;

use std::collections::HashMap;
use std::time::Duration;

use throttle_fleet_config::GatewayConfig;
use throttle_fleet_core::memory::MemoryBackend;
use throttle_fleet_envoy::envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use throttle_fleet_envoy::envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use throttle_fleet_envoy::envoy_types::pb::google::protobuf as pb;
use throttle_fleet_envoy::{EnvoyRules, Rlqs, RlqsOptions};
use tokio::sync::mpsc;
use tonic::Status;

const RUNS: usize = 3;
const CHILD_VAR: &str = "THROTTLE_RLQS_REPORT_COST_CHILD";
/// Buckets per report, and reports.
const SHAPES: [(usize, usize); 2] = [(1, 2_000), (100, 40)];
const SUBJECTS: [&str; 2] = ["echo", "rlqs"];

type Responses = mpsc::Receiver<Result<RateLimitQuotaResponse, Status>>;

fn report(buckets: usize) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: "api".to_owned(),
        bucket_quota_usages: (0..buckets)
            .map(|j| BucketQuotaUsage {
                bucket_id: Some(BucketId {
                    bucket: HashMap::from([("user_id".to_owned(), format!("client-{j}"))]),
                }),
                time_elapsed: Some(pb::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
                num_requests_allowed: 10,
                num_requests_denied: 0,
            })
            .collect(),
    }
}

/// A stream of reports fed from `rx`, and its answers.
async fn open(subject: &str, rx: mpsc::Receiver<RateLimitQuotaUsageReports>) -> Responses {
    let mut rx = rx;
    let reports =
        futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx).map(|r| r.map(Ok::<_, Status>)));
    match subject {
        "rlqs" => {
            let config = GatewayConfig::parse(
                "bench.toml",
                r#"
                [[rules]]
                name = "per-user"
                domain = "api"
                descriptor = ["user_id"]
                limit = 1000
                period_secs = 60
                "#,
                None,
            )
            .expect("a valid file");
            let rules = EnvoyRules::new(&config, "bench.toml", MemoryBackend::default())
                .expect("valid rules");
            let rlqs = Rlqs::new(rules, RlqsOptions::new(Duration::from_secs(60)))
                .await
                .expect("memory shares");
            rlqs.open(reports)
        }
        "echo" => {
            use futures_util::StreamExt;
            let (tx, out) = mpsc::channel(16);
            tokio::spawn(async move {
                let mut reports = Box::pin(reports);
                while let Some(Ok(_)) = reports.next().await {
                    if tx
                        .send(Ok(RateLimitQuotaResponse::default()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            });
            out
        }
        other => panic!("unknown subject {other}"),
    }
}

/// Each report sent, its answer awaited; the actions answered.
fn exchange(
    rt: &tokio::runtime::Runtime,
    tx: &mpsc::Sender<RateLimitQuotaUsageReports>,
    responses: &mut Responses,
    reports: Vec<RateLimitQuotaUsageReports>,
) -> usize {
    rt.block_on(async {
        let mut actions = 0;
        for r in reports {
            tx.send(r).await.expect("the stream is open");
            let answer = responses
                .recv()
                .await
                .expect("an answer")
                .expect("not an error");
            actions += answer.bucket_action.len();
        }
        actions
    })
}

/// The counted part.
#[inline(never)]
fn measured(
    rt: &tokio::runtime::Runtime,
    tx: &mpsc::Sender<RateLimitQuotaUsageReports>,
    responses: &mut Responses,
    reports: Vec<RateLimitQuotaUsageReports>,
) -> usize {
    exchange(rt, tx, responses, reports)
}

fn child(spec: &str) {
    let (shape, subject) = spec
        .split_once(' ')
        .expect("`<buckets>x<reports> <subject>`");
    let (buckets, reports) = shape.split_once('x').expect("`<buckets>x<reports>`");
    let (buckets, k): (usize, usize) = (
        buckets.parse().expect("buckets"),
        reports.parse().expect("reports"),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let (tx, rx) = mpsc::channel(1);
    let mut responses = rt.block_on(open(subject, rx));
    // The buckets known and their shares held before the count.
    let warm = exchange(&rt, &tx, &mut responses, vec![report(buckets)]);
    let expected = if subject == "echo" { 0 } else { buckets };
    assert_eq!(warm, expected, "{spec}: the first report");
    let all: Vec<_> = (0..k).map(|_| report(buckets)).collect();
    let actions = measured(&rt, &tx, &mut responses, all);
    assert_eq!(actions, expected * k, "{spec}");
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_VAR) {
        child(&spec);
        return;
    }
    println!(
        "instructions per bucket reported, least of {RUNS} callgrind runs, one stream, memory shares"
    );
    println!();
    println!(
        "| buckets per report | reports | echo (channels, runtime) | Rlqs, whole exchange | Rlqs minus echo |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for (buckets, k) in SHAPES {
        let per: Vec<f64> = SUBJECTS
            .iter()
            .map(|s| {
                let spec = format!("{buckets}x{k} {s}");
                let least = (0..RUNS)
                    .map(|_| callgrind::collected(CHILD_VAR, &spec))
                    .min()
                    .unwrap_or(0);
                least as f64 / (k * buckets) as f64
            })
            .collect();
        println!(
            "| {buckets} | {k} | {:.0} | {:.0} | {:.0} |",
            per[0],
            per[1],
            per[1] - per[0]
        );
    }
}
