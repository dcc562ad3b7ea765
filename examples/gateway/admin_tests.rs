//! The admin API over real HTTP (TCP), on the memory backend, beside the
//! public listener it must never show on: hostile requests change nothing
//! and never get a 5xx (a field named twice included); every path that
//! names the admin API, however written, is a 404 on the public listener;
//! one client holds at most 8 connections to the admin listener;
//! a block made through it is what a real client meets (429 with
//! `Retry-After`), and unblock, inspect, reset, penalize, reward and the
//! listing (with its redacted label) do what they say.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use throttle_fleet_config::{AdminToken, GatewayConfig};
use throttle_fleet_test_support::http::{HttpClient, Reply, client_from};
use tokio::sync::watch;

/// 32 bytes: the shortest token the file accepts.
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

const FILE: &str = r#"
[[rules]]
name = "ip"
key = "ip"
algorithm = "fixed_window"
limit = 1000
period_secs = 3600

[[rules]]
name = "tenant"
key = "header:x-api-key"
routes = ["/items/{id}"]
algorithm = "fixed_window"
limit = 100
period_secs = 3600

[[rules]]
name = "slow"
key = "ip"
routes = ["/slow"]
algorithm = "concurrency"
limit = 2

[[rules]]
name = "login"
key = "ip"
routes = ["/login"]
algorithm = "fixed_window"
limit = 5
period_secs = 3600
penalty = { after = 3, within_secs = 60, block_secs = 30 }
"#;

struct Gateway {
    public: SocketAddr,
    admin: SocketAddr,
    _stop: watch::Sender<bool>,
}

/// The gateway on free ports: its public listener and its admin API, both
/// on the example's accept loop, over one layer.
async fn start() -> Gateway {
    let config = GatewayConfig::parse("gateway.toml", FILE, None).unwrap_or_else(|e| panic!("{e}"));
    let layer = throttle_fleet_axum::from_config::layer(
        &config,
        "gateway.toml",
        throttle_fleet_axum::MemoryBackend::default(),
    )
    .unwrap();
    let (stop_tx, stop) = watch::channel(false);
    let mut addrs = Vec::new();
    for (router, connections) in [
        (
            crate::app(layer.clone()),
            throttle_fleet_axum::from_config::connections(&config).unwrap(),
        ),
        (
            crate::admin::router(layer, &AdminToken::new(TOKEN).unwrap()),
            crate::admin::connections(),
        ),
    ] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(listener.local_addr().unwrap());
        tokio::spawn(crate::server::serve(
            listener,
            router,
            connections,
            None,
            stop.clone(),
            Duration::from_secs(1),
        ));
    }
    Gateway {
        public: addrs[0],
        admin: addrs[1],
        _stop: stop_tx,
    }
}

fn client() -> HttpClient {
    client_from(Ipv4Addr::LOCALHOST)
}

const AUTH: (&str, &str) = ("authorization", "Bearer 0123456789abcdef0123456789abcdef");

/// An authorized admin request.
async fn admin(gw: &Gateway, method: &str, path: &str, body: Value) -> Reply {
    let body = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    client()
        .send(
            gw.admin,
            method,
            path,
            &[AUTH, ("content-type", "application/json")],
            body,
        )
        .await
}

/// The whole state the hostile requests must leave alone: every rule's
/// blocks (listed and counted) and the counts of the keys they aim at.
async fn state(gw: &Gateway) -> Value {
    let rules = admin(gw, "GET", "/admin/rules", Value::Null).await;
    assert_eq!(rules.status, 200, "{:?}", rules.body);
    let mut seen = vec![rules.json()];
    for rule in ["ip", "tenant", "slow", "login"] {
        let listed = admin(
            gw,
            "GET",
            &format!("/admin/rules/{rule}/blocked"),
            Value::Null,
        )
        .await;
        seen.push(listed.json());
    }
    for (rule, key) in [
        ("ip", json!({ "ip": "127.0.0.1" })),
        ("ip", json!({ "ip": "127.0.0.9" })),
        ("login", json!({ "ip": "127.0.0.1" })),
        ("tenant", json!({ "header": { "x-api-key": "victim-key" } })),
    ] {
        let r = admin(
            gw,
            "POST",
            "/admin/inspect",
            json!({ "rule": rule, "key": key }),
        )
        .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        seen.push(r.json());
    }
    Value::Array(seen)
}

/// Sends `bytes` on a fresh TCP connection and reads the status line's
/// code (or 0 if the server closed without answering).
async fn raw(addr: SocketAddr, bytes: &[u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = tcp.write_all(bytes).await;
    let mut answer = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut answer))
        .await
        .expect("an answer")
        .unwrap_or(0);
    let text = String::from_utf8_lossy(&answer[..n]);
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn hostile_admin_requests_change_nothing_and_never_get_a_5xx() {
    let gw = start().await;
    let before = state(&gw).await;
    let block = json!({ "rule": "ip", "key": { "ip": "127.0.0.9" }, "seconds": 60 }).to_string();
    let right_length = format!("Bearer {}", "x".repeat(TOKEN.len()));
    let longer = format!("Bearer {TOKEN}x");
    let shorter = format!("Bearer {}", &TOKEN[..TOKEN.len() - 1]);
    let basic = format!("Basic {TOKEN}");
    let two_spaces = format!("Bearer  {TOKEN}");
    let tab = format!("Bearer\t{TOKEN}");
    let glued = format!("Bearer{TOKEN}");
    let other_scheme = format!("Token {TOKEN}");
    let upper_token = format!("Bearer {}", TOKEN.to_uppercase());
    let quoted = format!("Bearer \"{TOKEN}\"");
    let trailing = format!("Bearer {TOKEN} x");

    // Without the token, every path and method is a 401, and nothing moves.
    let bad_auth: Vec<Vec<(&str, &str)>> = vec![
        vec![],
        vec![("authorization", "Bearer wrong")],
        vec![("authorization", &right_length)],
        vec![("authorization", &longer)],
        vec![("authorization", &shorter)],
        vec![("authorization", &basic)],
        vec![("authorization", &two_spaces)],
        vec![("authorization", &tab)],
        vec![("authorization", &glued)],
        vec![("authorization", &other_scheme)],
        vec![("authorization", TOKEN)],
        vec![("authorization", &upper_token)],
        vec![("authorization", &quoted)],
        vec![("authorization", &trailing)],
        vec![("authorization", "Bearer")],
        vec![("authorization", "")],
        vec![("x-authorization", AUTH.1)],
        // The right token and a wrong one: ambiguous, refused.
        vec![AUTH, ("authorization", "Bearer wrong")],
        vec![("authorization", "Bearer wrong"), AUTH],
    ];
    let paths = [
        ("POST", "/admin/block"),
        ("POST", "/admin/reset"),
        ("POST", "/admin/unblock"),
        ("POST", "/admin/penalize"),
        ("POST", "/admin/reward"),
        ("POST", "/admin/inspect"),
        ("GET", "/admin/rules"),
        ("GET", "/admin/rules/ip/blocked"),
        ("GET", "/admin/nope"),
        ("GET", "/"),
        ("DELETE", "/admin/block"),
        ("PUT", "/admin/rules"),
        ("POST", "/admin/../admin/block"),
    ];
    for headers in &bad_auth {
        for (method, path) in paths {
            let reply = client()
                .send(gw.admin, method, path, headers, Bytes::from(block.clone()))
                .await;
            assert_eq!(reply.status, 401, "{method} {path} with {headers:?}");
            assert!(!String::from_utf8_lossy(&reply.body).contains(TOKEN));
        }
    }
    // A body too large for the cap, without the token: still a 401.
    let huge = Bytes::from(vec![b'x'; 64 * 1024]);
    let r = client()
        .send(gw.admin, "POST", "/admin/block", &[], huge.clone())
        .await;
    assert_eq!(r.status, 401);

    // With the token: bad input is a 4xx naming what is wrong.
    let big_ip = "1".repeat(10_000);
    let big_value = "v".repeat(9_000);
    let bad_bodies: Vec<(&str, &str, String, u16, &str)> = vec![
        ("POST", "/admin/block", "{".into(), 400, "not JSON"),
        ("POST", "/admin/block", "[]".into(), 400, "JSON object"),
        ("POST", "/admin/block", "null".into(), 400, "JSON object"),
        ("POST", "/admin/block", "\"ip\"".into(), 400, "JSON object"),
        ("POST", "/admin/block", String::new(), 400, "not JSON"),
        (
            "POST",
            "/admin/block",
            json!({ "rule": "nope", "key": { "ip": "127.0.0.9" }, "seconds": 60 }).to_string(),
            404,
            "no rule named",
        ),
        (
            "POST",
            "/admin/block",
            json!({ "rule": 7, "key": { "ip": "127.0.0.9" }, "seconds": 60 }).to_string(),
            400,
            "rule:",
        ),
        (
            "POST",
            "/admin/block",
            json!({ "key": { "ip": "127.0.0.9" }, "seconds": 60 }).to_string(),
            400,
            "rule: is missing",
        ),
    ];
    let mut bad_bodies = bad_bodies;
    let bad_keys: Vec<(Value, &str)> = vec![
        (json!({ "ip": "999.1.1.1" }), "key.ip"),
        (json!({ "ip": "127.0.0.9/24" }), "key.ip"),
        (json!({ "ip": 5 }), "key.ip"),
        (json!({ "ip": "" }), "key.ip"),
        (json!({ "ip": big_ip }), "key.ip"),
        (json!({ "header": {} }), "key.header"),
        (json!({ "header": { "": "v" } }), "key.header"),
        (json!({ "header": { "bad name": "v" } }), "key.header"),
        (json!({ "header": "x-api-key" }), "key.header"),
        (
            json!({ "header": { "x-api-key": 5 } }),
            "key.header.x-api-key",
        ),
        (
            json!({ "header": { "x-api-key": big_value } }),
            "key.header.x-api-key",
        ),
        (json!({ "nope": "x" }), "unknown input"),
        (json!({}), "names no input"),
        (json!("127.0.0.9"), "key: must be an object"),
        (json!(null), "key: must be an object"),
        (json!({ "raw": "" }), "key.raw"),
        (json!({ "raw": "x", "ip": "127.0.0.9" }), "key.raw"),
        // Inputs the rule cannot use: the ip rule needs an address.
        (
            json!({ "header": { "x-api-key": "k" } }),
            "client's address",
        ),
    ];
    for (key, want) in bad_keys {
        let body = json!({ "rule": "ip", "key": key, "seconds": 60 }).to_string();
        bad_bodies.push(("POST", "/admin/block", body, 400, want));
    }
    let key = json!({ "ip": "127.0.0.9" });
    for seconds in [
        json!(-1),
        json!(0),
        json!(0.0001),
        json!(1e12),
        json!(2_592_001),
        json!("60"),
        json!(null),
        json!(true),
    ] {
        let body = json!({ "rule": "ip", "key": key, "seconds": seconds }).to_string();
        bad_bodies.push(("POST", "/admin/block", body, 400, "seconds"));
    }
    bad_bodies.push((
        "POST",
        "/admin/block",
        json!({ "rule": "ip", "key": key }).to_string(),
        400,
        "seconds: is missing",
    ));
    for units in [
        json!(0),
        json!(-5),
        json!(1.5),
        json!(1u64 << 40),
        json!("3"),
    ] {
        for path in ["/admin/penalize", "/admin/reward"] {
            let body = json!({ "rule": "ip", "key": key, "units": units }).to_string();
            bad_bodies.push(("POST", path, body, 400, "units"));
        }
    }
    for path in [
        "/admin/block",
        "/admin/reset",
        "/admin/unblock",
        "/admin/inspect",
    ] {
        let body = json!({ "rule": "ip", "key": key, "seconds": 60, "forever": true }).to_string();
        bad_bodies.push(("POST", path, body, 400, "unknown field \"forever\""));
    }
    // A field named twice, at any depth, however it is escaped: refused,
    // naming it (serde_json's `Value` would keep the last).
    let long = "f".repeat(7_000);
    for (path, body, want) in [
        (
            "/admin/block",
            r#"{"rule":"nope","rule":"ip","key":{"ip":"127.0.0.9"},"seconds":60}"#.to_owned(),
            r#"duplicate field "rule""#,
        ),
        (
            "/admin/block",
            r#"{"rule":"nope","r\u0075le":"ip","key":{"ip":"127.0.0.9"},"seconds":60}"#.to_owned(),
            r#"duplicate field "rule""#,
        ),
        (
            "/admin/block",
            r#"{"rule":"ip","key":{"ip":"127.0.0.1","ip":"127.0.0.9"},"seconds":60}"#.to_owned(),
            r#"duplicate field "key.ip""#,
        ),
        (
            "/admin/block",
            r#"{"rule":"ip","key":{"ip":"127.0.0.1"},"key":{"ip":"127.0.0.9"},"seconds":60}"#
                .to_owned(),
            r#"duplicate field "key""#,
        ),
        (
            "/admin/block",
            r#"{"rule":"ip","key":{"ip":"127.0.0.9"},"seconds":1,"seconds":60}"#.to_owned(),
            r#"duplicate field "seconds""#,
        ),
        (
            "/admin/block",
            r#"{"rule":"tenant","key":{"header":{"x-api-key":"k","x-api-key":"victim-key"}},"seconds":60}"#
                .to_owned(),
            r#"duplicate field "key.header.x-api-key""#,
        ),
        // One header under two spellings: header names have no case.
        (
            "/admin/block",
            r#"{"rule":"tenant","key":{"header":{"X-Api-Key":"victim-key","x-api-key":"k"}},"seconds":60}"#
                .to_owned(),
            r#"duplicate field "key.header.x-api-key" (header names have no case)"#,
        ),
        (
            "/admin/block",
            r#"{"rule":"ip","key":{"ip":"127.0.0.9"},"seconds":60,"x":[{"a":1,"a":2}]}"#
                .to_owned(),
            r#"duplicate field "x[].a""#,
        ),
        (
            "/admin/unblock",
            r#"{"rule":"ip","key":{"ip":"127.0.0.1"},"rule":"login"}"#.to_owned(),
            r#"duplicate field "rule""#,
        ),
        (
            "/admin/penalize",
            r#"{"rule":"ip","key":{"ip":"127.0.0.9"},"units":1,"units":500}"#.to_owned(),
            r#"duplicate field "units""#,
        ),
        // A long name is clipped in the answer.
        (
            "/admin/block",
            format!(r#"{{"rule":"ip","key":{{"ip":"127.0.0.9"}},"{long}":1,"{long}":2}}"#),
            r#"duplicate field "ffff"#,
        ),
    ] {
        bad_bodies.push(("POST", path, body, 400, want));
    }
    // Wrong methods and paths that only look like ours.
    for (method, path, status) in [
        ("GET", "/admin/block", 405),
        ("PUT", "/admin/block", 405),
        ("DELETE", "/admin/rules", 405),
        ("POST", "/admin/rules", 405),
        ("POST", "/admin/../admin/block", 404),
        ("POST", "/admin//block", 404),
        ("POST", "/admin/block/", 404),
        ("POST", "/ADMIN/block", 404),
        ("POST", "/admin/block%2F", 404),
        ("POST", "/admin/rules/ip/blocked/../../../block", 404),
        ("GET", "/admin/rules/..%2F..%2Fblock/blocked", 404),
        ("GET", "/admin/rules/nope/blocked", 404),
        ("GET", "/admin/rules/ip", 404),
        ("GET", "/", 404),
    ] {
        bad_bodies.push((method, path, block.clone(), status, ""));
    }
    for (method, path, body, status, want) in &bad_bodies {
        let r = client()
            .send(gw.admin, method, path, &[AUTH], Bytes::from(body.clone()))
            .await;
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(
            r.status.as_u16(),
            *status,
            "{method} {path} {body:.200}: {text}"
        );
        let message = r.json()["error"].as_str().unwrap_or_default().to_owned();
        assert!(
            message.contains(want),
            "{method} {path} {body:.200}: want {want:?} in {text}"
        );
        assert!(
            text.len() < 1024,
            "the answer echoes the input: {text:.200}"
        );
        assert_eq!(r.header("content-type"), Some("application/json"), "{path}");
    }
    // Too large, declared or not: 413, unread.
    let r = client()
        .send(gw.admin, "POST", "/admin/block", &[AUTH], huge)
        .await;
    assert_eq!(r.status, 413);
    let mut chunked = format!(
        "POST /admin/block HTTP/1.1\r\nhost: x\r\n{}: {}\r\ntransfer-encoding: chunked\r\n\r\n",
        AUTH.0, AUTH.1
    )
    .into_bytes();
    for _ in 0..5 {
        chunked.extend_from_slice(b"1000\r\n");
        chunked.extend_from_slice(&[b' '; 0x1000]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    assert_eq!(raw(gw.admin, &chunked).await, 413);

    assert_eq!(
        state(&gw).await,
        before,
        "a hostile request changed something"
    );
}

#[tokio::test]
async fn the_public_listener_answers_404_for_every_admin_path() {
    let gw = start().await;
    let public = client_from(Ipv4Addr::new(127, 0, 0, 3));
    for path in [
        "/admin",
        "/admin/",
        "/admin/rules",
        "/admin/rules/ip/blocked",
        "/admin/inspect",
        "/admin/reset",
        "/admin/block",
        "/admin/unblock",
        "/admin/penalize",
        "/admin/reward",
        "/admin/nope",
        "/Admin/rules",
        "//admin/block",
        "/admin%2Fblock",
    ] {
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"] {
            for headers in [vec![], vec![AUTH]] {
                let body = json!({ "rule": "ip", "key": { "ip": "127.0.0.3" }, "seconds": 60 });
                let r = public
                    .send(
                        gw.public,
                        method,
                        path,
                        &headers,
                        Bytes::from(body.to_string()),
                    )
                    .await;
                assert_eq!(r.status, 404, "{method} {path}");
            }
        }
    }
    // Written on the wire as they are here (a client library may
    // normalise a path before it sends it): what names `admin` once
    // decoded and its dot segments resolved is a 404 too, the route with
    // a parameter included (`/items/{id}`).
    for path in [
        "/%61dmin/rules",
        "/./admin/rules",
        "/x/../admin/rules",
        "//admin",
        "/ADMIN",
        "/%2e/admin",
        "/a/%2e%2e/admin",
        "/admin%2Frules",
        "/%2E%2E/admin/rules",
        "/../admin",
        "/admin/.",
        "/x//../admin",
        "/x/..%2Fadmin",
        "/admin\\rules",
        "/x/..\\admin",
        "/items/%2e%2e/admin/rules",
        "/items/..%2Fadmin%2Frules",
    ] {
        for method in ["GET", "POST"] {
            // The tenant rule of `/items/{id}` wants an API key (without
            // one, its 400 comes first: the limits see every request).
            let request = format!(
                "{method} {path} HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\ncontent-length: 0\r\n\r\n"
            );
            assert_eq!(
                raw(gw.public, request.as_bytes()).await,
                404,
                "{method} {path}"
            );
        }
    }
    // Paths that do not name it, odd ones included, are served as before.
    for path in [
        "/",
        "/search",
        "/items/admin",
        "/items/..",
        "/x/admin",
        "/administrator",
        "/admin.html",
        "/admin%20",
        "/a/b/../../..",
        "/.",
        "/%",
        "/%zz",
        "/admin%",
        "/%ff%fe/%c0%ae%c0%ae/admin",
        "/x/%2e%2e%2e/admin",
    ] {
        let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\n\r\n");
        assert_eq!(raw(gw.public, request.as_bytes()).await, 200, "GET {path}");
    }

    // Nothing was blocked through them.
    let listed = admin(&gw, "GET", "/admin/rules/ip/blocked", Value::Null).await;
    assert_eq!(listed.json()["blocked"], json!([]));
}

#[tokio::test]
async fn a_block_through_the_admin_api_is_what_a_client_meets_until_it_is_lifted() {
    let gw = start().await;
    let blocked_client = client_from(Ipv4Addr::new(127, 0, 0, 2));
    let other_client = client_from(Ipv4Addr::new(127, 0, 0, 4));
    assert_eq!(blocked_client.get(gw.public, "/", &[]).await.status, 200);

    let r = admin(
        &gw,
        "POST",
        "/admin/block",
        json!({ "rule": "ip", "key": { "ip": "127.0.0.2" }, "seconds": 120 }),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(r.json()["blocked_for_secs"], 120);

    let denied = blocked_client.get(gw.public, "/", &[]).await;
    assert_eq!(denied.status, 429);
    let retry = denied.header_u64("retry-after");
    assert!((118..=120).contains(&retry), "Retry-After {retry}");
    assert_eq!(other_client.get(gw.public, "/", &[]).await.status, 200);

    // The listing shows the label, what is left and why.
    let listed = admin(&gw, "GET", "/admin/rules/ip/blocked", Value::Null)
        .await
        .json();
    let entry = &listed["blocked"][0];
    assert_eq!(entry["label"], "ip=127.0.0.2", "{listed}");
    assert_eq!(entry["cause"], "operator");
    let left = entry["seconds_left"].as_u64().unwrap();
    assert!((118..=120).contains(&left), "{listed}");

    // Inspect shows the block and what is left of the allowance.
    let seen = admin(
        &gw,
        "POST",
        "/admin/inspect",
        json!({ "rule": "ip", "key": { "ip": "127.0.0.2" } }),
    )
    .await
    .json();
    assert_eq!(seen["remaining"], 0, "{seen}");
    let blocked_for = seen["blocked_for_secs"].as_u64().unwrap();
    assert!((118..=120).contains(&blocked_for), "{seen}");

    let r = admin(
        &gw,
        "POST",
        "/admin/unblock",
        json!({ "rule": "ip", "key": { "ip": "127.0.0.2" } }),
    )
    .await;
    assert_eq!(r.json()["was_blocked"], true);
    assert_eq!(blocked_client.get(gw.public, "/", &[]).await.status, 200);
    let listed = admin(&gw, "GET", "/admin/rules/ip/blocked", Value::Null)
        .await
        .json();
    assert_eq!(listed["blocked"], json!([]));

    // Two requests spent (one before, one after the block; the denied one
    // was turned away before the backend): inspect shows it, reset undoes it.
    let seen = admin(
        &gw,
        "POST",
        "/admin/inspect",
        json!({ "rule": "ip", "key": { "ip": "127.0.0.2" } }),
    )
    .await
    .json();
    assert_eq!(
        (seen["limit"].as_u64(), seen["remaining"].as_u64()),
        (Some(1000), Some(998)),
        "{seen}"
    );
    assert_eq!(seen["blocked_for_secs"], Value::Null);
    let r = admin(
        &gw,
        "POST",
        "/admin/reset",
        json!({ "rule": "ip", "key": { "ip": "127.0.0.2" } }),
    )
    .await;
    assert_eq!(r.status, 200);
    let seen = admin(
        &gw,
        "POST",
        "/admin/inspect",
        json!({ "rule": "ip", "key": { "ip": "127.0.0.2" } }),
    )
    .await
    .json();
    assert_eq!(seen["remaining"], 1000, "{seen}");

    // Penalize takes, reward gives back.
    let key = json!({ "rule": "ip", "key": { "ip": "127.0.0.2" }, "units": 400 });
    assert_eq!(
        admin(&gw, "POST", "/admin/penalize", key.clone())
            .await
            .json()["taken"],
        400
    );
    let inspect = json!({ "rule": "ip", "key": { "ip": "127.0.0.2" } });
    assert_eq!(
        admin(&gw, "POST", "/admin/inspect", inspect.clone())
            .await
            .json()["remaining"],
        600
    );
    assert_eq!(admin(&gw, "POST", "/admin/reward", key).await.status, 200);
    assert_eq!(
        admin(&gw, "POST", "/admin/inspect", inspect).await.json()["remaining"],
        1000
    );

    // "bearer" is the same scheme (RFC 9110: without case).
    let r = client()
        .send(
            gw.admin,
            "GET",
            "/admin/rules",
            &[("authorization", &format!("bearer {TOKEN}"))],
            Bytes::new(),
        )
        .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn a_blocked_api_key_is_listed_by_its_redacted_label() {
    let gw = start().await;
    let secret = "tenant-secret-0123456789";
    let r = admin(
        &gw,
        "POST",
        "/admin/block",
        json!({ "rule": "tenant", "key": { "header": { "X-Api-Key": secret } }, "seconds": 30 }),
    )
    .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert!(!String::from_utf8_lossy(&r.body).contains(secret));
    let denied = client()
        .get(gw.public, "/items/7", &[("x-api-key", secret)])
        .await;
    assert_eq!(denied.status, 429);
    assert!((29..=30).contains(&denied.header_u64("retry-after")));
    assert_eq!(
        client()
            .get(gw.public, "/items/7", &[("x-api-key", "another")])
            .await
            .status,
        200
    );
    let listed = admin(&gw, "GET", "/admin/rules/tenant/blocked", Value::Null).await;
    let text = String::from_utf8_lossy(&listed.body);
    assert!(!text.contains(secret), "{text}");
    assert_eq!(
        listed.json()["blocked"][0]["label"],
        "header:x-api-key=tena…(24)"
    );
    let rules = admin(&gw, "GET", "/admin/rules", Value::Null).await.json();
    let tenant = rules["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "tenant")
        .unwrap();
    assert_eq!(
        (
            tenant["blocked_now"].as_u64(),
            tenant["blocks_started"].as_u64()
        ),
        (Some(1), Some(1))
    );
}

#[tokio::test]
async fn what_a_rule_cannot_do_is_a_501_and_a_penalty_blocks_a_guesser() {
    let gw = start().await;
    // A concurrency rule's slots are held by running requests.
    let r = admin(
        &gw,
        "POST",
        "/admin/reset",
        json!({ "rule": "slow", "key": { "ip": "127.0.0.1" } }),
    )
    .await;
    assert_eq!(r.status, 501, "{:?}", r.body);
    assert!(String::from_utf8_lossy(&r.body).contains("reset is not supported"));

    // login: 5 an hour, and 3 denials within a minute block for 30 s.
    let guesser = client_from(Ipv4Addr::new(127, 0, 0, 5));
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(
            guesser
                .send(gw.public, "POST", "/login", &[], Bytes::new())
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(statuses[..5], [200; 5], "{statuses:?}");
    let listed = admin(&gw, "GET", "/admin/rules/login/blocked", Value::Null)
        .await
        .json();
    let entry = &listed["blocked"][0];
    assert_eq!(entry["cause"], "penalty", "{listed}");
    assert_eq!(entry["level"], 0, "{listed}");
    let last = guesser
        .send(gw.public, "POST", "/login", &[], Bytes::new())
        .await;
    assert_eq!(last.status, 429);
    assert!(
        (29..=30).contains(&last.header_u64("retry-after")),
        "{:?}",
        last.headers
    );
}

/// One client address holds at most 8 connections to the admin listener,
/// whatever the public listener's `[server]` allows (256): a ninth is
/// closed at accept while the eight, their headers unfinished, are still
/// open; and another address is answered meanwhile.
#[tokio::test]
async fn one_client_holds_at_most_eight_admin_connections() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gw = start().await;
    let connect = || async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(SocketAddr::from((Ipv4Addr::new(127, 0, 0, 5), 0)))
            .unwrap();
        let mut tcp = socket.connect(gw.admin).await.unwrap();
        // A slowloris client's start: a request line, no end of headers.
        let _ = tcp
            .write_all(b"GET /admin/rules HTTP/1.1\r\nhost: x\r\n")
            .await;
        tcp
    };
    let mut held = Vec::new();
    for _ in 0..8 {
        held.push(connect().await);
    }
    let mut ninth = connect().await;
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(30), ninth.read(&mut buf))
        .await
        .expect("the ninth connection is closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    for (i, tcp) in held.iter().enumerate() {
        let open =
            matches!(tcp.try_read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
        assert!(open, "connection {i} of the eight was closed");
    }
    let other = client_from(Ipv4Addr::new(127, 0, 0, 6))
        .send(gw.admin, "GET", "/admin/rules", &[AUTH], Bytes::new())
        .await;
    assert_eq!(other.status, 200);
}

#[test]
fn secrets_are_redacted_to_four_characters_and_a_length() {
    use crate::admin::redact;
    assert_eq!(redact("tenant-secret-0123456789"), "tena…(24)");
    assert_eq!(redact("short"), "…(5)");
    assert_eq!(redact("éééééééééé"), "éééé…(20)");
}

#[test]
fn admin_paths_are_recognised_however_they_are_written() {
    use crate::admin_path::is_admin_path;
    for path in [
        "/admin",
        "/admin/",
        "/admin/rules",
        "//admin/x",
        "/ADMIN/rules",
        "/admin%2Fblock",
        "/%41%44%4d%49%4E",
        "/x/y/../../admin",
        "/x/./../admin",
        "/./admin",
        "/../../admin",
        "/admin//",
        // RFC 3986 keeps the empty segment (`/admin/`), nginx merges it
        // first (`/`): either reading naming admin is enough.
        "/admin//..",
        "\\admin",
        "admin",
    ] {
        assert!(is_admin_path(path), "{path}");
    }
    for path in [
        "",
        "/",
        "/administrator",
        "/items/admin",
        "/search",
        "/x/admin/..",
        "/admin/..",
        "/..",
        "/%",
        "/%2",
        "/%%61dmin",
        "/%ZZadmin",
        "/%c3%a1dmin",
        "/%00admin",
        "/admin%00",
        "/\u{e1}dmin",
    ] {
        assert!(!is_admin_path(path), "{path}");
    }
}

/// A client sending refused requests as fast as it can gets at most one
/// log line a second: 10,000 refusals in a row, at most two lines (the loop
/// may straddle a second).
#[test]
fn refused_tokens_are_logged_at_most_once_a_second() {
    let refusals = crate::admin::Refusals::default();
    let logged = (0..10_000).filter(|_| refusals.log("127.0.0.1:1")).count();
    assert!((1..=2).contains(&logged), "{logged} lines");
}
