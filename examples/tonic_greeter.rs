//! The `helloworld.Greeter` of the gRPC quick starts, limited per peer IP,
//! in memory: 5 calls per 60 seconds.
//!
//! Run with `cargo run --example tonic_greeter`, then call it with any gRPC
//! client, e.g. `grpcurl` with the quick starts' `helloworld.proto`
//! (`crates/throttle-tonic/proto/helloworld.proto`):
//!
//! ```text
//! for i in $(seq 6); do
//!   grpcurl -plaintext -import-path crates/throttle-tonic/proto -proto helloworld.proto \
//!     -d '{"name": "throttle"}' 127.0.0.1:50051 helloworld.Greeter/SayHello
//! done
//! ```
//!
//! Calls 1 to 5 succeed, with `x-ratelimit-remaining` counting down from 4
//! to 0 in their response metadata; call 6 fails with `RESOURCE_EXHAUSTED`
//! whose details are a `google.rpc.RetryInfo` (when to retry) and a
//! `google.rpc.QuotaFailure` (subject `ip:peer-ip`). The address is
//! `127.0.0.1:50051` unless `THROTTLE_LISTEN` says otherwise.
//! `.ci/tonic-example-contract` checks all of this with Python's `grpcio`.

use std::time::Duration;

use throttle_tonic::{MemoryBackend, PeerIp, Policy, Quota, Rule, ThrottleLayer};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

#[path = "support/greeter.rs"]
mod greeter;

use greeter::MyGreeter;
use greeter::helloworld::greeter_server::GreeterServer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("THROTTLE_LISTEN").unwrap_or_else(|_| "127.0.0.1:50051".to_owned());

    // 5 calls per 60 seconds per peer IP, all 5 available at once.
    let quota = Quota::new(5, Duration::from_secs(60)).with_burst(5);
    let policy = Policy::new().rule(Rule::new("ip", quota).token_bucket(), PeerIp::default());
    // QuotaFailure's subject reads "ip:peer-ip": PeerIp names its kind.
    let layer = ThrottleLayer::new(policy, MemoryBackend::default())?;

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on {} (gRPC)", listener.local_addr()?);
    Server::builder()
        .layer(layer)
        .add_service(GreeterServer::new(MyGreeter))
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
