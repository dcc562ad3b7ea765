//! Every key kind a configuration file can give a rule derives, from an
//! operator's inputs, the very key the rule gives a real request through
//! the axum router: one request is sent, then the derived key's count shows
//! it spent (and a neighbour's key does not).

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use jsonwebtoken::{Algorithm, EncodingKey};
use throttle_fleet_axum::key::KeyInputs;
use throttle_fleet_axum::{Key, MemoryBackend, from_config};
use throttle_fleet_config::GatewayConfig;
use throttle_fleet_tls::{Fingerprint, Ja4};
use tower::ServiceExt;

const JA4: &str = "t13d1516h2_8daaf6152771_e5627efa2ab1";

/// Every key kind, 100 an hour each. The jwt secret is the value of
/// CARGO_PKG_DESCRIPTION, which Cargo sets for the tests it runs.
const FILE: &str = r#"
[tls]
self_signed = true

[jwt]
algorithm = "HS256"
secret_env = "CARGO_PKG_DESCRIPTION"

[[rules]]
name = "ip"
key = "ip"
ipv4_prefix = 24
limit = 100
period_secs = 3600

[[rules]]
name = "tenant"
key = "header:x-api-key"
limit = 100
period_secs = 3600

[[rules]]
name = "route"
key = "route"
limit = 100
period_secs = 3600

[[rules]]
name = "user"
key = "jwt:tenant"
limit = 100
period_secs = 3600

[[rules]]
name = "ua"
key = "user-agent"
limit = 100
period_secs = 3600

[[rules]]
name = "stack"
key = "tls-fingerprint"
limit = 100
period_secs = 3600

[[rules]]
name = "everyone"
key = "global"
limit = 100
period_secs = 3600

[[rules]]
name = "unauthenticated"
key = "composite"
parts = ["ip", "tls-fingerprint", "user-agent"]
ipv4_prefix = 24
limit = 100
period_secs = 3600

[[rules]]
name = "items"
key = "composite"
parts = ["ip", "route"]
ipv4_prefix = 24
routes = ["/items/{id}"]
limit = 100
period_secs = 3600
"#;

fn token() -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(Algorithm::HS256),
        &serde_json::json!({ "tenant": "acme", "exp": exp }),
        &EncodingKey::from_secret(env!("CARGO_PKG_DESCRIPTION").as_bytes()).unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn every_key_kind_of_the_file_derives_the_key_its_requests_get() {
    let config = GatewayConfig::parse("g.toml", FILE, None).unwrap_or_else(|e| panic!("{e}"));
    let layer = from_config::layer(&config, "g.toml", MemoryBackend::default()).unwrap();
    let app = Router::new()
        .route("/items/{id}", get(|| async { "item" }))
        .layer(layer.clone());

    let mut req = http::Request::get("/items/42")
        .header("x-api-key", "tenant-key-1")
        .header("user-agent", "bot/1.0")
        .header("authorization", format!("Bearer {}", token()))
        .body(axum::body::Body::empty())
        .unwrap();
    let peer: SocketAddr = "203.0.113.9:50000".parse().unwrap();
    req.extensions_mut().insert(ConnectInfo(peer));
    req.extensions_mut()
        .insert(Fingerprint::new(Ja4::parse(JA4).unwrap()));
    let resp = app.oneshot(req).await.unwrap();
    assert_eq!(resp.status(), 200);

    let the_client = KeyInputs::new()
        .ip("203.0.113.200".parse().unwrap()) // same /24
        .header("X-Api-Key", "tenant-key-1")
        .claim("acme")
        .route("/items/{id}")
        .user_agent("bot/1.0")
        .tls_fingerprint(JA4);
    let a_neighbour = KeyInputs::new()
        .ip("198.51.100.1".parse().unwrap())
        .header("x-api-key", "tenant-key-2")
        .claim("globex")
        .route("/items")
        .user_agent("bot/2.0")
        .tls_fingerprint("t13d1516h2_000000000000_000000000000");
    let rules = layer.rules();
    for name in [
        "ip",
        "tenant",
        "route",
        "user",
        "ua",
        "stack",
        "everyone",
        "unauthenticated",
        "items",
    ] {
        let index = rules.index_of(name).unwrap();
        let remaining = |key: Key| {
            let rules = rules.clone();
            async move {
                rules
                    .operate()
                    .inspect(index, &key)
                    .wait()
                    .await
                    .unwrap()
                    .remaining
            }
        };
        let key = layer.key_for(name, &the_client).unwrap().unwrap();
        assert_eq!(
            remaining(key).await,
            99,
            "rule {name}: the derived key is not the request's"
        );
        match layer.key_for(name, &a_neighbour) {
            Some(Ok(other)) if name != "everyone" => {
                assert_eq!(remaining(other).await, 100, "rule {name}")
            }
            Some(Ok(_)) => {}
            // The neighbour's route is not one the rule applies to.
            Some(Err(e)) => assert_eq!(name, "items", "{e}"),
            None => panic!("rule {name} cannot derive keys"),
        }
        // Nothing given: an error naming what is missing, never a key.
        if name != "everyone" {
            let e = layer.key_for(name, &KeyInputs::new()).unwrap().unwrap_err();
            assert!(e.starts_with("needs"), "rule {name}: {e}");
        }
    }
}
