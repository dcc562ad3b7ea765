//! What the layer costs per request: drives `N` requests through an inner
//! service shaped like axum's hello world, bare or behind the layer, for an
//! instruction count under callgrind.
//!
//! ```text
//! cargo run --release -p throttle-fleet-tower --example layer_cost -- <N> <mode> [recorder]
//! ```
//!
//! Modes:
//! - `bare`: the inner service alone.
//! - `allowed`: one rule keyed by the peer address (read from the request's
//!   extensions, as axum's `ConnectInfo` is), memory backend, token bucket,
//!   nothing denied, `X-RateLimit-*` headers on every answer.
//! - `no-headers`: the same with a responder that adds no success headers.
//! - `denied`: the same rule at 1 per hour: every request after the first
//!   of each client is answered 429.
//! - `header`: one rule keyed by an `x-api-key` header (64 keys).
//!
//! `recorder` installs a metrics recorder (counters on atomics, as
//! exporters keep them); build with `--no-default-features` for the layer
//! without the `metrics` feature. The cost per request is the difference
//! between two counts divided by the difference in `N`, which cancels the
//! setup; see BENCHMARKS.md for the callgrind commands.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};

use http::{HeaderValue, Request, Response, header::CONTENT_TYPE};
use throttle_fleet_tower::RequestHead;
use throttle_fleet_tower::key::{ClientAddr, Header};
use throttle_fleet_tower::{
    HttpResponder, KeyExtractor, MemoryBackend, Policy, Quota, Rule, ThrottleLayer,
};
use tower::{Layer, Service, ServiceExt, service_fn};

fn peer(req: &RequestHead<'_>) -> Option<SocketAddr> {
    req.extensions.get::<SocketAddr>().copied()
}

fn policy(quota: Quota, key: impl KeyExtractor) -> Policy {
    Policy::new().rule(Rule::new("ip", quota).token_bucket(), key)
}

/// Axum's hello world answer: a body and its content type.
async fn hello<B>(_req: Request<B>) -> Result<Response<&'static str>, Infallible> {
    let mut res = Response::new("Hello, World!");
    res.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Ok(res)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let mode = args.next().unwrap_or_else(|| "allowed".to_owned());
    if args.next().as_deref() == Some("recorder") {
        metrics_util::debugging::DebuggingRecorder::new()
            .install()
            .expect("no other recorder");
    }
    let plenty = Quota::per_second(1_000_000_000);
    let by_peer = || ClientAddr::new(peer as fn(&RequestHead<'_>) -> Option<SocketAddr>);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let statuses = match mode.as_str() {
        "bare" => rt.block_on(drive(service_fn(hello), n)),
        "allowed" => {
            let layer = ThrottleLayer::<HttpResponder>::new(
                policy(plenty, by_peer()),
                MemoryBackend::default(),
            )
            .unwrap();
            rt.block_on(drive(layer.layer(service_fn(hello)), n))
        }
        "no-headers" => {
            let layer = ThrottleLayer::<_>::with_responder(
                policy(plenty, by_peer()),
                MemoryBackend::default(),
                HttpResponder::new().success_headers(false),
            )
            .unwrap();
            rt.block_on(drive(layer.layer(service_fn(hello)), n))
        }
        "denied" => {
            let layer = ThrottleLayer::<HttpResponder>::new(
                policy(Quota::per_hour(1), by_peer()),
                MemoryBackend::default(),
            )
            .unwrap();
            rt.block_on(drive(layer.layer(service_fn(hello)), n))
        }
        "header" => {
            let layer = ThrottleLayer::<HttpResponder>::new(
                policy(plenty, Header::new("x-api-key")),
                MemoryBackend::default(),
            )
            .unwrap();
            rt.block_on(drive(layer.layer(service_fn(hello)), n))
        }
        other => {
            eprintln!("unknown mode {other:?}: bare, allowed, no-headers, denied or header");
            std::process::exit(2);
        }
    };
    println!("{mode}: {} of {n} answered 2xx", statuses);
}

/// Sends `n` requests from 64 clients in turn; returns how many got a 2xx.
async fn drive<S, B>(mut svc: S, n: u64) -> u64
where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible>,
{
    let keys: Vec<String> = (0..64).map(|i| format!("key-{i}")).collect();
    let mut ok = 0u64;
    for i in 0..n {
        let client = (i % 64) as usize;
        let mut req = Request::get("/")
            .header("x-api-key", &keys[client])
            .body(())
            .unwrap();
        let addr = SocketAddr::from((Ipv4Addr::new(127, 0, 0, 1 + client as u8), 40_000));
        req.extensions_mut().insert(addr);
        let res = svc.ready().await.unwrap().call(req).await.unwrap();
        ok += u64::from(res.status().is_success());
    }
    ok
}
