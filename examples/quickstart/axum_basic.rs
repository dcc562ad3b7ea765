//! A hello-world axum server limited per client IP, in memory.
//!
//! Run with `cargo run --example axum_basic`, then:
//!
//! ```text
//! for i in $(seq 11); do curl -si http://127.0.0.1:3000/ | head -n 1; done
//! ```
//!
//! Requests 1 to 10 get `200 OK` with `X-RateLimit-Remaining` counting down
//! from 9 to 0; request 11 gets `429 Too Many Requests` with `Retry-After`.
//! The address is `127.0.0.1:3000` unless `THROTTLE_LISTEN` says otherwise.

use std::net::SocketAddr;
use std::time::Duration;

use axum::{Router, routing::get};
use throttle_fleet_axum::{ClientIp, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("THROTTLE_LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());

    // 10 requests per 60 seconds per client IP, all 10 available at once.
    let quota = Quota::new(10, Duration::from_secs(60)).with_burst(10);
    let policy = Policy::new().rule(Rule::new("ip", quota).token_bucket(), ClientIp::default());

    let app = Router::new()
        .route("/", get(|| async { "Hello, world!\n" }))
        .layer(ThrottleLayer::new(policy, MemoryBackend::default())?);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
