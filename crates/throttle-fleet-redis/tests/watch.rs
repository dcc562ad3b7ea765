//! The approximate mode's node watch, on a real redis-server under test
//! time: a node that loses its connection opens its breaker at once (the
//! watch's subscription ends), without a heartbeat; once the node is back,
//! the heartbeat (a job of the scheduler) subscribes again, so a second
//! loss is seen at once too. Test time moves only when the test moves it:
//! what happens between two moves is the subscription's doing.

use std::time::{Duration, Instant};

use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_redis::{ApproximateBackend, ApproximateOptions, RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;

const T0: u64 = 1_700_000_000_000_000;

/// The channel the watch subscribes to.
const WATCH: &str = "throttle:watch";

/// Whether `cond` holds within `bound` of real time (polled): for what
/// real I/O does, on a loaded machine too.
async fn within(bound: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < bound {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// How many subscribers the watch's channel has on `server`.
fn watchers(server: &RedisServer) -> u64 {
    let reply = server.cli(&["PUBSUB", "NUMSUB", WATCH]);
    reply
        .lines()
        .last()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

async fn backend(server: &RedisServer, time: &TestTime) -> ApproximateBackend {
    let config = RedisConfig::standalone(server.url())
        .scheduler(time.scheduler())
        .probe_interval(Duration::from_secs(1))
        .command_timeout(Duration::from_secs(2));
    RedisBackend::approximate(config, ApproximateOptions::default())
        .await
        .unwrap()
}

/// Moves test time a probe interval at a time (at most 30) until the
/// breaker is closed and the watch subscribed again.
async fn back_and_watched(server: &RedisServer, time: &TestTime, backend: &ApproximateBackend) {
    for _ in 0..30 {
        time.advance(Duration::from_secs(1)).await;
        let again = within(Duration::from_millis(500), || {
            !backend.stats().breaker_open && watchers(server) == 1
        })
        .await;
        if again {
            return;
        }
    }
    panic!(
        "after 30 probe intervals: {:?}, {} watchers",
        backend.stats(),
        watchers(server)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lost_twice_opens_its_breaker_at_once_each_time() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let backend = backend(&server, &time).await;
    // The first heartbeat subscribes.
    back_and_watched(&server, &time, &backend).await;
    for loss in 1..=2 {
        server.restart();
        // No test time moves: only the subscription's end can open it.
        let opened = within(Duration::from_secs(10), || {
            backend.stats().breaker_opened == loss
        })
        .await;
        assert!(opened, "loss {loss}: {:?}", backend.stats());
        back_and_watched(&server, &time, &backend).await;
    }
}
