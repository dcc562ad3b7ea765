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
//! The address is `127.0.0.1:3000` unless `THROTTLE_LISTEN` says otherwise;
//! logs go to standard error at the level `RUST_LOG` gives (`info`).
//!
//! It is served with the library's connection limits (`serve`): a client
//! whose request headers take over 10 s, or whose keep-alive connection
//! idles for 60 s, is closed, and one client address (an IPv6 /64) holds
//! at most 256 connections. Copy this into a service, not `axum::serve`.

use std::time::Duration;

use axum::{Router, routing::get};
use throttle_fleet::axum::prelude::*;
use throttle_fleet::axum::serve::{ServeLimits, serve};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let addr = std::env::var("THROTTLE_LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());

    // 10 requests per 60 seconds per client IP, all 10 available at once.
    let client = ClientIp::default();
    let quota = Quota::new(10, Duration::from_secs(60)).with_burst(10);
    let policy = Policy::new().rule(Rule::new("ip", quota).token_bucket(), client.clone());

    let app = Router::new()
        .route("/", get(|| async { "Hello, world!\n" }))
        .layer(ThrottleLayer::new(policy, MemoryBackend::default())?);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The connection limits, with the rate limit's idea of a client.
    serve(listener, app)
        .limits(ServeLimits::default())
        .client_ip(client)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
