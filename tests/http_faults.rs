//! Redis failing under the layer, seen from HTTP clients over TCP: for each
//! Redis mode and failure policy, Redis hung (SIGSTOP) under concurrent load
//! and resumed, then killed and restarted. Each phase asserts no 5xx the
//! policy did not promise, no request held past twice the command timeout,
//! the policy's promise (open allows, closed refuses with 503, local limits
//! without refusing), and recovery within 2 s of Redis answering.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use throttle_fleet_redis::RedisConfig;
use throttle_fleet_test_support::RedisServer;
use throttle_fleet_test_support::http::{HttpClient, client_from};
use throttle_fleet_test_support::http_faults::{Fail, Mode, app, away, burst, promise, recovery};

/// Approximate mode: a span of 1 s, so a claim holds for 2 s.
const SPANS: u32 = 60;
const CLAIM: Duration = Duration::from_millis(2_500);

/// One suite at a time: each runs eight clients and a Redis, and a request's
/// time is asserted, so they do not share two cores with each other.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn suite(mode: Mode) {
    let _one = SERIAL.lock().await;
    for (n, fail) in [Fail::Open, Fail::Closed, Fail::Local]
        .into_iter()
        .enumerate()
    {
        let server = RedisServer::start();
        let (addr, _backend) = app(RedisConfig::standalone(server.url()), mode, fail, SPANS).await;
        let base = 2 + 10 * n as u8;
        let clients: Vec<Arc<HttpClient>> = (0..8)
            .map(|i| Arc::new(client_from(Ipv4Addr::new(127, 0, 1, base + i))))
            .collect();
        let up = burst(addr, &clients, 20).await;
        assert_eq!(up.ok, 160, "{mode:?}/{fail:?}, Redis up: {up:?}");

        // Hung: the first requests wait at most a timeout, then the breaker
        // (or the failed flush) answers at once.
        server.stop();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let during = away(addr, &clients, mode, CLAIM).await;
        promise(mode, fail, &during, "hung");
        server.resume();
        let back = recovery(addr, &clients[0]).await;
        println!(
            "{mode:?}/{fail:?}: hung {during:?}; decided by Redis again {back:?} after SIGCONT"
        );
        assert!(
            back <= Duration::from_secs(2),
            "{mode:?}/{fail:?}: {back:?}"
        );

        // Killed, then restarted (empty).
        server.kill();
        let during = away(addr, &clients, mode, CLAIM).await;
        promise(mode, fail, &during, "killed");
        server.restart();
        let back = recovery(addr, &clients[1]).await;
        println!(
            "{mode:?}/{fail:?}: killed {during:?}; decided by Redis again {back:?} after restart"
        );
        assert!(
            back <= Duration::from_secs(2),
            "{mode:?}/{fail:?}: {back:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_mode_through_redis_hung_and_killed() {
    suite(Mode::Exact).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approximate_mode_through_redis_hung_and_killed() {
    suite(Mode::Approximate).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_mode_through_redis_hung_and_killed() {
    suite(Mode::Leased).await;
}
