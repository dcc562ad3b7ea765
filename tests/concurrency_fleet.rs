//! A concurrency rule across a fleet (the harness and its model are in
//! `slots_fleet`): four copies on one Redis, one key, `n` = 5, forty
//! clients holding slow requests (500 ms) open, each sending its next
//! request to the next copy, and retrying after `Retry-After` (plus up to
//! a quarter second of jitter) when refused.
//!
//! Held exactly: no request admitted while `n` others held their slot, and
//! never more than `n` running at once; every refusal a 429 naming the
//! rule; no slot left in Redis. And the rule refuses almost never below
//! `n`: at most 1% of refusals (2% in one run) are made while fewer than
//! `n` requests held a slot or were on their way to one.
//!
//! `FLEET_RUNS=20 cargo test --release -p throttle-fleet-suite --test concurrency_fleet four_copies -- --nocapture`
//! gives the published figures (twenty runs); CI runs one.

mod slots_fleet;

use axum::Router;
use axum::routing::get;
use slots_fleet::{Setup, runs};
use throttle_fleet_axum::key::Global;
use throttle_fleet_axum::{Policy, Rule, ThrottleLayer};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;
use throttle_fleet_test_support::http::client;

static SETUP: Setup = Setup {
    rule: "inflight",
    n: 5,
    reserve: 0,
    clients: [0, 40, 0],
    served_per_client: 2,
    hold_ms: 500,
    hold_spread_ms: 0,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_copies_never_run_more_than_n_and_refuse_almost_never_below_it() {
    let t = runs(&SETUP).await;
    assert!(t.violations.is_empty(), "{:#?}", t.violations);
    assert!(t.refused_at_n > 0, "the load never reached the limit");
    // The goal is 1%; one run's 140 refusals cannot resolve it (one
    // release outrun by an acquire is 0.7%), so one run is held to 2% and
    // five runs or more to the goal. Before a release was queued in place
    // and sent with the acquire's script (a first release answered
    // NOSCRIPT went out again behind the next acquire), twenty runs gave
    // 2.6% (release) to 3.2% (debug) by the first measure.
    let bound = if t.refused_at_n >= 500 { 0.01 } else { 0.02 };
    assert!(
        t.false_share() <= bound,
        "{} of {} refusals made while fewer than {} held a slot",
        t.refused_below_held,
        t.refused_at_n,
        SETUP.n
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
