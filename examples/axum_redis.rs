//! A hello-world axum server limited per client IP across a fleet, through
//! Redis.
//!
//! Run with `cargo run --example axum_redis` (Redis from `REDIS_URL`,
//! default `redis://127.0.0.1:6379`; address from `THROTTLE_LISTEN`, default
//! `127.0.0.1:3000`). Start several copies on different ports against the
//! same Redis and they share one count: 10 requests per 60 seconds per
//! client IP across all of them. `THROTTLE_MODE` picks the Redis mode
//! (`exact`, the default). The rule fails open: with Redis stopped, requests
//! are still served, each waiting at most the 50 ms command timeout until the
//! circuit breaker opens.

use std::net::SocketAddr;
use std::time::Duration;

use axum::{Router, routing::get};
use throttle_axum::{ClientIp, Policy, Quota, Rule, ThrottleLayer};
use throttle_redis::{ApproximateOptions, LeaseOptions, RedisBackend, RedisConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("THROTTLE_LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let mode = std::env::var("THROTTLE_MODE").unwrap_or_else(|_| "exact".to_owned());

    let config = RedisConfig::standalone(url);
    let quota = Quota::new(10, Duration::from_secs(60));
    let (backend, rule) = match mode.as_str() {
        "exact" => (
            RedisBackend::exact(config).await?,
            Rule::new("ip", quota.with_burst(10)).token_bucket(),
        ),
        "approximate" => (
            RedisBackend::approximate(config, ApproximateOptions::default()).await?,
            Rule::new("ip", quota).fixed_window(),
        ),
        "leased" => (
            RedisBackend::leased(config, LeaseOptions::default().batch(5).low_water(1)).await?,
            Rule::new("ip", quota.with_burst(10)).token_bucket(),
        ),
        other => {
            return Err(format!(
                "THROTTLE_MODE={other:?} is not a mode: use exact, approximate or leased"
            )
            .into());
        }
    };
    let policy = Policy::new().rule(rule.fail_open(), ClientIp::default());

    let app = Router::new()
        .route("/", get(|| async { "Hello, world!\n" }))
        .layer(ThrottleLayer::new(policy, backend.clone())?);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!(
        "listening on http://{} ({mode} mode)",
        listener.local_addr()?
    );
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
