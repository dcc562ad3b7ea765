//! A hello-world axum server limited per client IP across a fleet, through
//! Redis.
//!
//! Run with `cargo run --example axum_redis` (Redis from `REDIS_URL`,
//! default `redis://127.0.0.1:6379`, or a Redis Cluster from `REDIS_CLUSTER`,
//! comma-separated node URLs; address from `THROTTLE_LISTEN`, default
//! `127.0.0.1:3000`). Start several copies on different ports against the
//! same Redis and they share one count: 10 requests per 60 seconds per
//! client IP across all of them. `THROTTLE_MODE` picks the Redis mode
//! (`exact`, the default, `approximate` or `leased`), `THROTTLE_FAILURE`
//! what happens while Redis is away (`open`, the default: requests are still
//! served, each waiting at most the 50 ms command timeout until the circuit
//! breaker opens; `closed`: refused with 503; `local`: a local limit).
//!
//! On SIGINT or SIGTERM it stops accepting, drains the requests in flight,
//! and calls the backend's shutdown, so what an approximate copy counted
//! reaches Redis before it exits; anything that could not be written is
//! logged.

use std::time::Duration;

use axum::{Router, routing::get};
use throttle_fleet_axum::serve::serve;
use throttle_fleet_axum::{ClientIp, Policy, Quota, Rule, ThrottleLayer};
use throttle_fleet_redis::{ApproximateOptions, LeaseOptions, RedisBackend, RedisConfig};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Logs (a Redis outage, a breaker opening, a refused connection) at
    // the level RUST_LOG gives, `info` by default.
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let var =
        |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
    let addr = var("THROTTLE_LISTEN", "127.0.0.1:3000");
    let mode = var("THROTTLE_MODE", "exact");
    let failure = var("THROTTLE_FAILURE", "open");

    let config = match std::env::var("REDIS_CLUSTER") {
        Ok(nodes) => {
            RedisConfig::cluster(nodes.split(',').map(str::trim).filter(|n| !n.is_empty()))
        }
        Err(_) => RedisConfig::standalone(var("REDIS_URL", "redis://127.0.0.1:6379")),
    };
    let quota = Quota::new(10, Duration::from_secs(60));
    // Each mode is a type of its own; `RedisBackend` holds any of them.
    let (backend, rule): (RedisBackend, Rule) = match mode.as_str() {
        "exact" => (
            RedisBackend::exact(config).await?.into(),
            Rule::new("ip", quota.with_burst(10)).token_bucket(),
        ),
        "approximate" => (
            RedisBackend::approximate(config, ApproximateOptions::default())
                .await?
                .into(),
            Rule::new("ip", quota).fixed_window(),
        ),
        "leased" => (
            RedisBackend::leased(config, LeaseOptions::default().batch(5).low_water(1))
                .await?
                .into(),
            Rule::new("ip", quota.with_burst(10)).token_bucket(),
        ),
        other => {
            return Err(format!(
                "THROTTLE_MODE={other:?} is not a mode: use exact, approximate or leased"
            )
            .into());
        }
    };
    let rule = match failure.as_str() {
        "open" => rule.fail_open(),
        "closed" => rule.fail_closed(),
        "local" => rule.local_fallback(),
        other => {
            return Err(format!(
                "THROTTLE_FAILURE={other:?} is not a failure policy: use open, closed or local"
            )
            .into());
        }
    };
    let client = ClientIp::default();
    let policy = Policy::new().rule(rule, client.clone());

    let app = Router::new()
        .route("/", get(|| async { "Hello, world!\n" }))
        .layer(ThrottleLayer::new(policy, backend.clone())?);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!(
        "listening on http://{} ({mode} mode, fail {failure})",
        listener.local_addr()?
    );
    // Connection limits before the rate limit (`serve`'s documentation).
    serve(listener, app)
        .client_ip(client)
        .with_graceful_shutdown(stop_signal())
        .await?;
    // The router is gone; the backend still holds what it must write.
    match backend.shutdown().await {
        Ok(()) => println!("stopped; every count is in Redis"),
        Err(unflushed) => eprintln!("stopped; {unflushed}"),
    }
    Ok(())
}

/// SIGINT (Ctrl-C) or SIGTERM.
async fn stop_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}
