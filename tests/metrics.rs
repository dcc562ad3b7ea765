//! The layer's metrics from outside: a real axum server over TCP, clients
//! from several loopback addresses, and a test recorder installed for the
//! whole process, so a metric recorded anywhere, however late, is seen.

use std::net::Ipv4Addr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use throttle_fleet_axum::core::clock::ManualClock;
use throttle_fleet_axum::key::Global;
use throttle_fleet_axum::metrics::{DECISIONS, LIMIT, NEAR_LIMIT};
use throttle_fleet_axum::{ClientIp, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
use throttle_fleet_test_support::http::{client_from, serve};

/// A memory backend on a clock that does not move: these tests count with
/// fixed windows, and a window aligned to the wall clock's minute could roll
/// over between two requests and refill.
fn frozen() -> MemoryBackend<ManualClock> {
    MemoryBackend::with_clock(ManualClock::new(1_000_000))
}

/// One metric of a snapshot: name, labels, value.
type Metric = (String, Vec<(String, String)>, DebugValue);

#[tokio::test]
async fn decisions_near_limit_and_limit_by_rule_with_no_client_ip_in_a_label() {
    // The only test of this binary: a snapshot drains the counters, and
    // the recorder is the process's.
    let recorder = DebuggingRecorder::new();
    let snapshots = recorder.snapshotter();
    recorder.install().unwrap();

    let policy = Policy::new()
        .rule(
            Rule::new("ip", Quota::new(10, Duration::from_secs(60))).fixed_window(),
            ClientIp::default(),
        )
        .rule(Rule::new("global", Quota::per_minute(1_000)), Global);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(ThrottleLayer::new(policy, frozen()).unwrap());
    let addr = serve(app, true).await;

    // 127.0.0.2 spends 7 of its 10 (under 80 % used); 127.0.0.3 spends
    // all 10 and is denied twice: its 8th, 9th and 10th are near the limit.
    let (calm, busy) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3));
    for _ in 0..7 {
        let r = client_from(calm).get(addr, "/", &[]).await;
        assert_eq!(r.status, StatusCode::OK);
    }
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(client_from(busy).get(addr, "/", &[]).await.status);
    }
    assert_eq!(
        statuses.iter().filter(|s| **s == StatusCode::OK).count(),
        10
    );

    let snap: Vec<Metric> = snapshots
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(ck, _, _, v)| {
            let k = ck.key();
            let labels = k
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (k.name().to_owned(), labels, v)
        })
        .collect();
    let find = |name: &str, labels: &[(&str, &str)]| {
        snap.iter()
            .find(|(n, l, _)| {
                n == name
                    && l.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| l.contains(&(k.to_string(), v.to_string())))
            })
            .map(|(_, _, v)| v)
    };
    let count = |name: &str, labels: &[(&str, &str)]| match find(name, labels) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        Some(other) => panic!("{name}: {other:?}"),
    };
    let decisions =
        |rule: &str, outcome: &str| count(DECISIONS, &[("rule", rule), ("outcome", outcome)]);

    assert_eq!(decisions("ip", "allowed"), 17);
    assert_eq!(decisions("ip", "denied"), 2);
    assert_eq!(decisions("global", "allowed"), 17);
    assert_eq!(count(NEAR_LIMIT, &[("rule", "ip")]), 3);
    assert_eq!(count(NEAR_LIMIT, &[("rule", "global")]), 0);
    assert_eq!(
        find(LIMIT, &[("rule", "ip")]),
        Some(&DebugValue::Gauge(10.0.into()))
    );
    assert_eq!(
        find(LIMIT, &[("rule", "global")]),
        Some(&DebugValue::Gauge(1_000.0.into()))
    );

    for (name, labels, _) in &snap {
        for (k, v) in labels {
            assert!(
                !v.contains("127.0.0") && !v.bytes().any(|b| b == 127),
                "{name}{{{k}=\"{v}\"}} carries a client address"
            );
        }
    }
}
