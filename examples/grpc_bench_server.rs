//! The server of the gRPC load benchmark: the quick starts'
//! `helloworld.Greeter` on `tonic::transport::Server`, bare or behind
//! throttle-fleet-tonic's layer, so that `benches/grpc/run.sh` can compare them.
//!
//! Run with `BENCH_MODE=denied cargo run --release -p throttle-fleet-suite --example grpc_bench_server`
//! (the script does this for every mode). `BENCH_LISTEN` sets the address
//! (default `127.0.0.1:50151`), `BENCH_WORKERS` the runtime's worker threads
//! (default 1). `BENCH_MODE` is one of:
//!
//! - `bare`: no rate limiter.
//! - `allowed`: `ThrottleLayer` on the memory backend, a token bucket per
//!   peer IP (`PeerIp`), a quota so large that nothing is denied; allowed
//!   calls carry the `x-ratelimit-*` metadata.
//! - `denied`: the same rule at 1 per hour: after the first call every call
//!   is answered `RESOURCE_EXHAUSTED` (Trailers-Only, with `RetryInfo`,
//!   `QuotaFailure` and `ErrorInfo`).
//!
//! The server stops on Ctrl-C or `SIGINT`.

use std::time::Duration;

use throttle_fleet_tonic::{MemoryBackend, PeerIp, Policy, Quota, Rule, ThrottleLayer};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

#[path = "support/greeter.rs"]
mod greeter;

use greeter::MyGreeter;
use greeter::helloworld::greeter_server::GreeterServer;

fn per_peer(quota: Quota) -> Result<ThrottleLayer, throttle_fleet_tonic::ConfigError> {
    let policy = Policy::new().rule(Rule::new("ip", quota).token_bucket(), PeerIp::default());
    ThrottleLayer::new(policy, MemoryBackend::default())
}

async fn serve(
    mode: &str,
    listener: tokio::net::TcpListener,
) -> Result<(), Box<dyn std::error::Error>> {
    // Without TCP_NODELAY, Nagle holds a response's second write until
    // the client's delayed ACK (about 40 ms).
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let greeter = GreeterServer::new(MyGreeter);
    match mode {
        "bare" => {
            Server::builder()
                .add_service(greeter)
                .serve_with_incoming_shutdown(incoming, stop)
                .await?
        }
        "allowed" | "denied" => {
            let quota = if mode == "allowed" {
                Quota::new(1_000_000_000, Duration::from_secs(1))
            } else {
                Quota::new(1, Duration::from_secs(3_600))
            };
            Server::builder()
                .layer(per_peer(quota)?)
                .add_service(greeter)
                .serve_with_incoming_shutdown(incoming, stop)
                .await?
        }
        other => {
            return Err(format!("unknown BENCH_MODE {other:?} (bare, allowed, denied)").into());
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mode = std::env::var("BENCH_MODE").unwrap_or_else(|_| "bare".to_owned());
    let addr = std::env::var("BENCH_LISTEN").unwrap_or_else(|_| "127.0.0.1:50151".to_owned());
    let workers = std::env::var("BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
        .unwrap_or(1);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?
        .block_on(async {
            let listener = tokio::net::TcpListener::bind(&addr).await?;
            println!(
                "listening on {} (gRPC, mode {mode})",
                listener.local_addr()?
            );
            serve(&mode, listener).await
        })
}
