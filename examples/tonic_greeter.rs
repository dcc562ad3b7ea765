//! The `helloworld.Greeter` of the gRPC quick starts, limited per peer IP,
//! in memory: 5 calls per 60 seconds.
//!
//! Run with `cargo run -p throttle-fleet-suite --example tonic_greeter`, then call it with any gRPC
//! client, e.g. `grpcurl` with the quick starts' `helloworld.proto`
//! (`crates/throttle-fleet-tonic/proto/helloworld.proto`):
//!
//! ```text
//! for i in $(seq 6); do
//!   grpcurl -plaintext -import-path crates/throttle-fleet-tonic/proto -proto helloworld.proto \
//!     -d '{"name": "throttle"}' 127.0.0.1:50051 helloworld.Greeter/SayHello
//! done
//! ```
//!
//! Calls 1 to 5 succeed, with `x-ratelimit-remaining` counting down from 4
//! to 0 in their response metadata; call 6 fails with `RESOURCE_EXHAUSTED`
//! whose details are a `google.rpc.RetryInfo` (when to retry) and a
//! `google.rpc.QuotaFailure` (subject `ip:peer-ip`). The address is
//! `127.0.0.1:50051` unless `THROTTLE_LISTEN` says otherwise.
//!
//! With `--config FILE` the limits (and the address, its `listen`) come
//! from a configuration file in the gateway's format instead, through
//! `throttle_fleet_tonic::from_config`: `ip` keys are the peer's address, a
//! route is a full gRPC method (`routes = ["/helloworld.Greeter/SayHello"]`).
//! `examples/tonic_greeter.toml` is the same 5 calls a minute:
//!
//! ```text
//! cargo run -p throttle-fleet-suite --example tonic_greeter -- --config examples/tonic_greeter.toml
//! ```
//!
//! An invalid file makes it exit with status 2 and the error (file, line,
//! column, rule, field); `THROTTLE_LISTEN` still overrides `listen`.
//! `.ci/tonic-example-contract` checks all of this with Python's `grpcio`.
//!
//! A call that sends its headers and then no message, or trickles it, is
//! answered `DEADLINE_EXCEEDED` after 60 s (`BodyTimeoutLayer`; with a file,
//! its `[server]` table's `body_timeout_secs` and `body_min_bytes_per_sec`),
//! so such calls cannot hold what the limiter gave them (a concurrency
//! rule's slots) for as long as their connection lives.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use throttle_fleet_config::GatewayConfig;
use throttle_fleet_tonic::body_timeout::BodyTimeout;
use throttle_fleet_tonic::{
    BodyTimeoutLayer, MemoryBackend, PeerIp, Policy, Quota, Rule, ThrottleLayer, from_config,
};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

#[path = "support/greeter.rs"]
mod greeter;
#[path = "support/logs.rs"]
mod logs;

use greeter::MyGreeter;
use greeter::helloworld::greeter_server::GreeterServer;

/// `--config FILE`, if given.
fn config_arg() -> Result<Option<PathBuf>, String> {
    let mut it = std::env::args().skip(1);
    let mut config = None;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--config" => config = Some(it.next().ok_or("--config needs a value")?.into()),
            other => return Err(format!("unknown argument {other:?} (use --config FILE)")),
        }
    }
    Ok(config)
}

/// What the server is set up with: the throttle layer, the bound on how
/// long a call's request may keep it waiting, and the address.
struct Setup {
    layer: ThrottleLayer,
    timeouts: BodyTimeoutLayer,
    addr: String,
}

/// The bound on calls' requests. The greeter's one method is unary: every
/// call is timed to the end of its request. A service with
/// client-streaming methods would name its unary ones instead
/// (`whole_request`), leaving its streams' silences between messages
/// alone.
fn timeouts(bound: BodyTimeout) -> Result<BodyTimeoutLayer, Box<dyn std::error::Error>> {
    Ok(BodyTimeoutLayer::new(bound)?.whole_request_always())
}

/// The setup: from the file, or the built-in 5 calls a minute per peer IP
/// and the default bound.
async fn setup(config: Option<PathBuf>) -> Result<Setup, Box<dyn std::error::Error>> {
    let listen = std::env::var("THROTTLE_LISTEN").ok();
    let Some(path) = config else {
        // 5 calls per 60 seconds per peer IP, all 5 available at once.
        let quota = Quota::new(5, Duration::from_secs(60)).with_burst(5);
        let policy = Policy::new().rule(Rule::new("ip", quota).token_bucket(), PeerIp::default());
        // QuotaFailure's subject reads "ip:peer-ip": PeerIp names its kind.
        let layer = ThrottleLayer::new(policy, MemoryBackend::default())?;
        return Ok(Setup {
            layer,
            timeouts: timeouts(BodyTimeout::default())?,
            addr: listen.unwrap_or_else(|| "127.0.0.1:50051".to_owned()),
        });
    };
    let file = path.display().to_string();
    let config = GatewayConfig::load(&path)?;
    let backend = config.backend.build(&file).await?;
    let layer = from_config::layer(&config, &file, backend.as_backend())?;
    let addr = listen
        .or(config.listen.map(|l| l.to_string()))
        .unwrap_or_else(|| "127.0.0.1:50051".to_owned());
    let bound = BodyTimeout {
        timeout: config.server.body_timeout,
        min_bytes_per_sec: config.server.body_min_bytes_per_sec,
    };
    Ok(Setup {
        layer,
        timeouts: timeouts(bound)?,
        addr,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    logs::init();
    let setup = match config_arg() {
        Ok(config) => match setup(config).await {
            Ok(found) => found,
            Err(e) => {
                eprintln!("tonic_greeter: {e}");
                return ExitCode::from(2);
            }
        },
        Err(e) => {
            eprintln!("tonic_greeter: {e}");
            return ExitCode::from(2);
        }
    };
    match serve(setup).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tonic_greeter: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(setup: Setup) -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind(&setup.addr).await?;
    println!("listening on {} (gRPC)", listener.local_addr()?);
    // Without TCP_NODELAY, Nagle holds a response's second write until the
    // client's delayed ACK (about 40 ms).
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    Server::builder()
        .layer(setup.timeouts)
        .layer(setup.layer)
        .add_service(GreeterServer::new(MyGreeter))
        .serve_with_incoming_shutdown(incoming, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
