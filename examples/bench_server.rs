//! The server of the HTTP load benchmark: axum's hello world, bare or behind
//! a rate limiter, so that `benches/http/run.sh` can compare them.
//!
//! Run with `BENCH_MODE=memory cargo run --release --example bench_server`
//! (the script does this for every mode). `BENCH_LISTEN` sets the address
//! (default `127.0.0.1:3000`). `BENCH_MODE` is one of:
//!
//! - `bare`: no rate limiter.
//! - `governor`: `tower_governor` per peer IP, a quota so large that nothing
//!   is denied (its default: no rate-limit headers on success).
//! - `governor-headers`: the same with `use_headers()`, so successes carry
//!   `x-ratelimit-*` headers like ours do.
//! - `governor-deny`: `tower_governor` per peer IP, 1 per hour: after the
//!   first request every request is answered 429.
//! - `memory`: our `ThrottleLayer` on the memory backend, a token bucket per
//!   client IP (`ClientIp`), a quota so large that nothing is denied.
//! - `memory-deny`: the same with 1 per hour: after the first request every
//!   request is answered 429 with our headers and JSON body.
//! - `memory-no-headers`: `memory` with a responder that adds no headers to
//!   allowed responses, to show what the `X-RateLimit-*` headers cost.
//!
//! Every mode serves with `into_make_service_with_connect_info::<SocketAddr>()`
//! so that they differ only by the layer. The server stops on Ctrl-C or
//! `SIGINT`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::{Router, routing::get};
use bytes::Bytes;
use http::Response;
use http::request::Parts;
use throttle_axum::{
    Allowed, ClientIp, HttpResponder, MemoryBackend, Policy, Quota, Rejection, Responder, Rule,
    SuccessHeaders, ThrottleLayer,
};
use tower_governor::GovernorLayer;
use tower_governor::governor::GovernorConfigBuilder;

/// A token bucket per client IP with `quota`, on the memory backend.
fn ours(quota: Quota) -> Result<ThrottleLayer, Box<dyn std::error::Error>> {
    let policy = Policy::new().rule(Rule::new("ip", quota).token_bucket(), ClientIp::default());
    Ok(ThrottleLayer::new(policy, MemoryBackend::default())?)
}

/// The HTTP responder without success headers.
struct NoSuccessHeaders(HttpResponder);

impl Responder for NoSuccessHeaders {
    fn reject(&self, req: &Parts, rejection: Rejection<'_>) -> Response<Bytes> {
        self.0.reject(req, rejection)
    }

    fn allowed(&self, _req: &Parts, _allowed: &Allowed, _rule: &Rule) -> SuccessHeaders {
        SuccessHeaders::none()
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mode = std::env::var("BENCH_MODE").unwrap_or_else(|_| "bare".to_owned());
    let addr = std::env::var("BENCH_LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());

    // One token per nanosecond, a burst of a billion: nothing is denied.
    let (huge_period, huge_burst) = (Duration::from_nanos(1), 1_000_000_000);
    let app = Router::new().route("/", get(|| async { "Hello, world!" }));
    let app = match mode.as_str() {
        "bare" => app,
        "governor" => {
            let config = GovernorConfigBuilder::default()
                .period(huge_period)
                .burst_size(huge_burst)
                .finish()
                .ok_or("invalid governor config")?;
            app.layer(GovernorLayer::new(config))
        }
        "governor-headers" => {
            let config = GovernorConfigBuilder::default()
                .period(huge_period)
                .burst_size(huge_burst)
                .use_headers()
                .finish()
                .ok_or("invalid governor config")?;
            app.layer(GovernorLayer::new(config))
        }
        "governor-deny" => {
            let config = GovernorConfigBuilder::default()
                .period(Duration::from_secs(3600))
                .burst_size(1)
                .finish()
                .ok_or("invalid governor config")?;
            app.layer(GovernorLayer::new(config))
        }
        "memory" => app.layer(ours(Quota::per_second(1_000_000_000))?),
        "memory-deny" => app.layer(ours(Quota::per_hour(1))?),
        "memory-no-headers" => {
            let policy = Policy::new().rule(
                Rule::new("ip", Quota::per_second(1_000_000_000)).token_bucket(),
                ClientIp::default(),
            );
            app.layer(throttle_tower::ThrottleLayer::with_responder(
                policy,
                MemoryBackend::default(),
                NoSuccessHeaders(HttpResponder::new()),
            )?)
        }
        other => {
            return Err(format!(
                "unknown BENCH_MODE {other:?}: use bare, governor, governor-headers, \
                 governor-deny, memory, memory-deny or memory-no-headers"
            )
            .into());
        }
    };

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("{mode}: listening on http://{}", listener.local_addr()?);
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
