//! Exactness across instances: four layers, each with its own Redis
//! connections, hammered by 64 concurrent clients for ten windows, admit
//! exactly the quota in every window.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Empty;
use throttle_fleet_core::{Quota, Rule};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;
use throttle_fleet_tower::key::Global;
use throttle_fleet_tower::{HttpResponder, Policy, ThrottleLayer};
use tower::{Layer, ServiceExt};

const INSTANCES: usize = 4;
const CLIENTS: usize = 64;
const WINDOWS: u64 = 10;
const QUOTA: u64 = 150;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_admit_exactly_the_quota_in_every_window() {
    let server = RedisServer::start();
    let mut layers = Vec::new();
    for _ in 0..INSTANCES {
        // Separate backends: separate connections, breakers and scripts
        // caches, like separate gateway processes.
        let config = RedisConfig::standalone(server.url()).command_timeout(Duration::from_secs(2));
        let backend = RedisBackend::exact(config).await.unwrap();
        let policy = Policy::new().rule(
            Rule::new("global", Quota::per_second(QUOTA))
                .fixed_window()
                .fail_closed(),
            Global,
        );
        layers.push(ThrottleLayer::<HttpResponder>::new(policy, backend).unwrap());
    }
    let layers = Arc::new(layers);

    // Run from the next whole second for WINDOWS full one-second windows
    // (plus the partial ones at either end, which are not judged).
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let deadline = Instant::now()
        + Duration::from_secs(WINDOWS + 1)
        + (Duration::from_secs(1) - Duration::from_nanos(u64::from(now.subsec_nanos())));
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let layers = layers.clone();
        clients.push(tokio::spawn(async move {
            let svc = layers[c % INSTANCES].clone().layer(tower::service_fn(
                |_req: Request<Empty<Bytes>>| async {
                    Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
                },
            ));
            let mut seen: Vec<(u64, bool)> = Vec::new();
            while Instant::now() < deadline {
                let res = svc
                    .clone()
                    .oneshot(Request::new(Empty::new()))
                    .await
                    .unwrap();
                let status = res.status();
                assert!(
                    status == StatusCode::OK || status == StatusCode::TOO_MANY_REQUESTS,
                    "{status}"
                );
                // A fixed one-second window resets at its end, so the reset
                // (whole epoch seconds) names the window.
                let reset: u64 = res.headers()["x-ratelimit-reset"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                seen.push((reset, status == StatusCode::OK));
            }
            seen
        }));
    }
    let mut admitted: BTreeMap<u64, u64> = BTreeMap::new();
    let mut checks = 0;
    for c in clients {
        for (window, ok) in c.await.unwrap() {
            checks += 1;
            *admitted.entry(window).or_default() += u64::from(ok);
        }
    }
    let windows: Vec<(u64, u64)> = admitted.into_iter().collect();
    assert!(windows.len() as u64 >= WINDOWS, "{windows:?}");
    // Every window but the partial first and last admitted exactly QUOTA.
    let full = &windows[1..windows.len() - 1];
    assert!(full.len() as u64 >= WINDOWS - 1, "{windows:?}");
    for &(window, n) in full {
        assert_eq!(n, QUOTA, "window ending {window}: {windows:?}");
    }
    for &(_, n) in [windows[0], windows[windows.len() - 1]].iter() {
        assert!(n <= QUOTA, "{windows:?}");
    }
    assert!(
        checks > WINDOWS * QUOTA * 3,
        "the load must exceed the quota: {checks} checks"
    );
}
