//! A password guesser over HTTP: failed logins (401) are what a `login`
//! rule counts (`charge_when`), its key is the JWT subject, and its
//! penalty blocks a subject that keeps being denied, for the whole fleet,
//! longer each time. Two gateway instances on one Redis, one test time
//! that the scripts and the instances' background work run on.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use jsonwebtoken::{Algorithm, EncodingKey};
use throttle_fleet_axum::key::Jwt;
use throttle_fleet_axum::{Limit, Policy, Quota, Rule, ThrottleLayer};
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;
use throttle_fleet_test_support::http::client_from;

const T0: u64 = 1_800_000_000_000_000;
const SECRET: &[u8] = b"a test secret of thirty-two bytes!";

fn token(subject: &str) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let header = jsonwebtoken::Header::new(Algorithm::HS256);
    jsonwebtoken::encode(
        &header,
        &serde_json::json!({ "sub": subject, "exp": exp }),
        &EncodingKey::from_secret(SECRET).unwrap(),
    )
    .unwrap()
}

/// 401 unless the password is right.
async fn login(headers: HeaderMap) -> StatusCode {
    match headers.get("x-password").map(|v| v.as_bytes()) {
        Some(b"right") => StatusCode::OK,
        _ => StatusCode::UNAUTHORIZED,
    }
}

/// One gateway instance: 5 failed logins a minute per subject; 5 denials
/// within a minute block the subject for 10 s, then 20 s, 40 s at most.
async fn instance(server: &RedisServer, time: &TestTime) -> (SocketAddr, ThrottleLayer) {
    let config = RedisConfig::standalone(server.url())
        .scheduler(time.scheduler())
        .command_timeout(Duration::from_secs(2));
    let backend = RedisBackend::exact(config).await.unwrap();
    let penalty = throttle_fleet_axum::core::operate::Penalty::new(
        5,
        Duration::from_secs(60),
        Duration::from_secs(10),
    )
    .with_max_block(Duration::from_secs(40));
    let rule = Rule::new("login", Quota::per_minute(5)).with_penalty(penalty);
    let limit = Limit::new(rule, Jwt::hs256(SECRET).claim("sub"))
        .charge_when(|s| s == StatusCode::UNAUTHORIZED);
    let layer = ThrottleLayer::new(Policy::new().limit(limit), backend).unwrap();
    let app = Router::new()
        .route("/login", post(login))
        .layer(layer.clone());
    (
        throttle_fleet_test_support::http::serve(app, false).await,
        layer,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guesser_is_blocked_longer_each_time_and_its_neighbour_never_is() {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let gateways = [
        instance(&server, &time).await,
        instance(&server, &time).await,
    ];
    // Both behind one address block: 127.0.0.0/24 is one NAT's worth.
    let (bot, neighbour) = (
        client_from(Ipv4Addr::new(127, 0, 0, 5)),
        client_from(Ipv4Addr::new(127, 0, 0, 6)),
    );
    let (mallory, alice) = (
        format!("Bearer {}", token("mallory")),
        format!("Bearer {}", token("alice")),
    );
    let mut lengths = Vec::new();
    let mut was_blocked = false;
    let (mut bot_denied, mut neighbour_denied, mut neighbour_sent) = (0, 0, 0);
    // 20 wrong passwords a second for 200 s, alternating between the two
    // instances; the neighbour logs in every 15 s, wrongly every other time.
    for tick in 0..4_000u64 {
        let addr = &gateways[(tick % 2) as usize].0;
        let r = bot
            .send(
                *addr,
                "POST",
                "/login",
                &[("authorization", &mallory), ("x-password", "guess")],
                Bytes::new(),
            )
            .await;
        if r.status == StatusCode::TOO_MANY_REQUESTS {
            bot_denied += 1;
        }
        // The penalty's script runs in the background: let it land.
        tokio::time::sleep(Duration::from_millis(1)).await;
        // Seen from the first instance (it learns of a block the other
        // started within one read of the log: 250 ms of a 10 s block).
        let listed = gateways[0].1.rules().operate().blocked(0);
        if let Some((_, _, left)) = listed.first()
            && !was_blocked
        {
            lengths.push(left.as_secs_f64().round() as u64);
        }
        was_blocked = !listed.is_empty();
        if tick % 300 == 0 {
            let password = if tick % 600 == 0 { "right" } else { "wrong" };
            let r = neighbour
                .send(
                    *addr,
                    "POST",
                    "/login",
                    &[("authorization", &alice), ("x-password", password)],
                    Bytes::new(),
                )
                .await;
            neighbour_sent += 1;
            if r.status == StatusCode::TOO_MANY_REQUESTS {
                neighbour_denied += 1;
            }
        }
        time.advance(Duration::from_millis(50)).await;
    }
    assert!(lengths.len() >= 4, "{lengths:?}");
    assert_eq!(&lengths[..4], [10, 20, 40, 40]);
    assert!(bot_denied > 3_500, "{bot_denied}");
    assert_eq!((neighbour_denied, neighbour_sent), (0, 14));
}
