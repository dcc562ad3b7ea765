//! A concurrency rule across a fleet: four copies of an axum server (each
//! its own Redis backend, connections and instance id) on one real
//! `redis-server`, one key, forty clients over real HTTP holding slow
//! requests open and retrying after `Retry-After` (plus up to a quarter
//! second of jitter, as clients that avoid herds do) when refused. The
//! handlers count what runs at once; a refusal is counted as false when
//! fewer than `n` ran both when the request arrived and a moment (2 ms)
//! after it was answered: the moment lets the requests admitted just
//! before it reach their handler, so what is left is the time a slot
//! stays taken in Redis after its request ended (the release's trip).
//!
//! `FLEET_RUNS=20 cargo test --release -p throttle-fleet-suite --test concurrency_fleet -- --nocapture`
//! gives the published figures (twenty runs); CI runs one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use throttle_fleet_axum::key::Global;
use throttle_fleet_axum::{Policy, Rule, ThrottleLayer};
use throttle_fleet_redis::{ExactBackend, RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;
use throttle_fleet_test_support::http::client;

const N: u64 = 5;
const COPIES: usize = 4;
const CLIENTS: usize = 40;
/// Requests each client gets served.
const SERVED_PER_CLIENT: usize = 2;
const HOLD: Duration = Duration::from_millis(500);

/// What the handlers of every copy saw.
#[derive(Default)]
struct Counts {
    running: AtomicU64,
    most: AtomicU64,
    served: AtomicU64,
    refused: AtomicU64,
    false_refusals: AtomicU64,
}

async fn slow(State(counts): State<Arc<Counts>>) -> &'static str {
    let now = counts.running.fetch_add(1, Ordering::SeqCst) + 1;
    counts.most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(HOLD).await;
    counts.running.fetch_sub(1, Ordering::SeqCst);
    counts.served.fetch_add(1, Ordering::SeqCst);
    "done"
}

/// Outside the limiter: a refusal made while fewer than `n` ran, both when
/// the request came in and when its answer went out, is a false one.
async fn watch(State(counts): State<Arc<Counts>>, req: Request, next: Next) -> Response {
    let before = counts.running.load(Ordering::SeqCst);
    let res = next.run(req).await;
    if res.status() == http::StatusCode::TOO_MANY_REQUESTS {
        counts.refused.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2)).await;
        let after = counts.running.load(Ordering::SeqCst);
        if before < N && after < N {
            counts.false_refusals.fetch_add(1, Ordering::SeqCst);
        }
    }
    res
}

async fn copy(server: &RedisServer, counts: &Arc<Counts>) -> (std::net::SocketAddr, ExactBackend) {
    let backend = RedisBackend::exact(RedisConfig::standalone(server.url()))
        .await
        .unwrap();
    let policy = Policy::new().rule(
        Rule::concurrency("inflight", N).slot_ttl(Duration::from_secs(2)),
        Global,
    );
    let app = Router::new()
        .route("/slow", get(slow))
        .layer(ThrottleLayer::new(policy, backend.clone()).unwrap())
        .layer(axum::middleware::from_fn_with_state(counts.clone(), watch))
        .with_state(counts.clone());
    (
        throttle_fleet_test_support::http::serve(app, true).await,
        backend,
    )
}

async fn one_run(run: usize) -> (u64, u64, u64, u64) {
    let server = RedisServer::start();
    let counts = Arc::new(Counts::default());
    let mut copies = Vec::new();
    for _ in 0..COPIES {
        copies.push(copy(&server, &counts).await);
    }
    let addrs: Vec<_> = copies.iter().map(|(a, _)| *a).collect();
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let addrs = addrs.clone();
        clients.push(tokio::spawn(async move {
            let http = client();
            let (mut served, mut attempt) = (0, c);
            while served < SERVED_PER_CLIENT {
                let reply = http.get(addrs[attempt % COPIES], "/slow", &[]).await;
                attempt += 1;
                match reply.status.as_u16() {
                    200 => served += 1,
                    429 => {
                        let wait = reply.header_u64("retry-after");
                        assert_eq!(wait, 1);
                        assert_eq!(reply.json()["dimension"], "inflight");
                        let jitter = (c as u64 * 7_919 + attempt as u64 * 104_729) % 250;
                        tokio::time::sleep(
                            Duration::from_secs(wait) + Duration::from_millis(jitter),
                        )
                        .await;
                    }
                    other => panic!("unexpected {other}: {reply:?}"),
                }
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    // Every request has ended: once the releases have landed, Redis holds
    // no slot (bounded wait for the background releases).
    let mut keys = String::new();
    for _ in 0..400 {
        keys = server.cli(&["DBSIZE"]).trim().to_owned();
        if keys == "0" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        keys, "0",
        "run {run}: slots left in Redis after every request ended"
    );
    for (_, backend) in &copies {
        assert_eq!(backend.slot_stats().held, 0);
    }
    let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
    let served = get(&counts.served);
    assert_eq!(served, (CLIENTS * SERVED_PER_CLIENT) as u64);
    (
        get(&counts.most),
        served,
        get(&counts.refused),
        get(&counts.false_refusals),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_copies_never_run_more_than_n_and_refuse_almost_never_below_it() {
    let runs: usize = std::env::var("FLEET_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let (mut refused, mut false_refusals, mut violations) = (0, 0, 0);
    for run in 0..runs {
        let (most, served, r, f) = one_run(run).await;
        println!(
            "run {run}: most running {most} of {N}, served {served}, refused {r}, refused below n {f}"
        );
        violations += u64::from(most > N);
        refused += r;
        false_refusals += f;
    }
    let share = false_refusals as f64 / refused.max(1) as f64;
    println!(
        "{runs} runs: {violations} with more than {N} running; {false_refusals} of {refused} refusals ({:.2}%) made while fewer than {N} ran",
        100.0 * share
    );
    assert_eq!(violations, 0, "more than {N} requests ran at once");
    assert!(refused > 0, "the load never reached the limit");
    // The goal is 1%; measured 0.07% over twenty runs (release build) and
    // 0.23% over three (debug). Before a release was queued in place and
    // sent with the acquire's script (a first release answered NOSCRIPT
    // went out again behind the next acquire), twenty runs gave 2.6%
    // (release) to 3.2% (debug): 2% tells the two apart in one run.
    assert!(
        share <= 0.02,
        "{false_refusals} of {refused} refusals below the limit"
    );
}

/// A client that sends its requests one after another to the same copy
/// (a keep-alive connection behind a sticky balancer) is never refused by
/// a limit of one: the release of its last request is queued on the
/// copy's Redis connection before the last byte of the answer goes out,
/// so it runs in Redis before the next request's acquire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_one_request_after_another_is_never_refused_by_a_limit_of_one() {
    let server = RedisServer::start();
    let backend = RedisBackend::exact(RedisConfig::standalone(server.url()))
        .await
        .unwrap();
    let policy = Policy::new().rule(Rule::concurrency("inflight", 1), Global);
    let app = Router::new()
        .route("/", get(|| async { "done" }))
        .layer(ThrottleLayer::new(policy, backend).unwrap());
    let addr = throttle_fleet_test_support::http::serve(app, true).await;
    let http = client();
    let mut refused = 0;
    for _ in 0..500 {
        let reply = http.get(addr, "/", &[]).await;
        refused += u32::from(reply.status == http::StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(refused, 0, "requests refused while none other ran");
}
