//! Instructions per denied gRPC call in the layer (callgrind): the
//! layer's `Throttle` service called directly with a call from one peer
//! under `ip`, 1 per hour (the rule of `grpc_bench_server`'s `denied`
//! mode), from `call` to the finished `Response`, dropped as a server drops
//! it once written. What `benches/grpc/run.sh` counts around it (HTTP/2,
//! tonic's routing, the runtime) is left out, so a change to the denial's
//! answer shows in a few runs, undimmed by the connection's noise.
//!
//! Run with `cargo bench -p throttle-fleet-suite --bench grpc_denial_instructions`
//! (needs `valgrind` on the path; under a minute).
//!
//! The binary starts itself again under
//! `valgrind --tool=callgrind --toggle-collect=*measured*` once per subject
//! and run: the child builds the layer and the calls (outside the count),
//! warms up, then makes `CALLS` calls inside `measured`, the only function
//! whose instructions are collected, the clock moving by a microsecond
//! before each (so that every denial's wait, and its `RetryInfo`, is
//! another). `loop` is the same loop that drops each call unanswered, and
//! the figure subtracts it. Each figure is the least of three runs.

#[path = "../../crates/throttle-fleet-core/benches/support/callgrind.rs"]
mod callgrind;

use std::convert::Infallible;
use std::future::Future;
use std::hint::black_box;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::extract::ConnectInfo;
use http::{HeaderValue, Request, Response};
use throttle_fleet_core::clock::ManualClock;
use throttle_fleet_tonic::{Limit, MemoryBackend, PeerIp, Policy, Quota, Rule, ThrottleLayer};
use tower::{Layer, Service, service_fn};

/// Calls made inside the counted function.
const CALLS: usize = 2_000;
const WARM: usize = 200;
const RUNS: usize = 3;
const CHILD_VAR: &str = "THROTTLE_GRPC_DENIAL_INSTRUCTIONS_CHILD";

/// A unary call from 203.0.113.7, as a server hands it to the layer.
fn say_hello() -> Request<()> {
    let peer: SocketAddr = "203.0.113.7:50000".parse().expect("an address");
    let mut req = Request::post("/helloworld.Greeter/SayHello")
        .header("content-type", HeaderValue::from_static("application/grpc"))
        .header("te", HeaderValue::from_static("trailers"))
        .body(())
        .expect("a request");
    req.extensions_mut().insert(ConnectInfo(peer));
    req
}

/// One call through `svc`, answered at once (a memory backend decides in
/// `call`): whether it was denied (`grpc-status: 8`).
fn call<S, B>(svc: &mut S, req: Request<()>) -> bool
where
    S: Service<Request<()>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(svc.call(req)).poll(&mut cx) {
        Poll::Ready(res) => res
            .expect("an answer")
            .headers()
            .get("grpc-status")
            .is_some_and(|s| s == "8"),
        Poll::Pending => panic!("a memory backend decides in `call`"),
    }
}

/// The counted part: each of `calls` made (or, for `loop`, dropped).
#[inline(never)]
fn measured<S, B>(svc: &mut S, clock: &ManualClock, calls: Vec<Request<()>>, answer: bool) -> usize
where
    S: Service<Request<()>, Response = Response<B>>,
    S::Error: std::fmt::Debug,
{
    let mut denied = 0;
    for req in calls {
        clock.advance(Duration::from_micros(1));
        if answer {
            denied += usize::from(call(svc, req));
        } else {
            drop(black_box(req));
        }
    }
    denied
}

fn child(subject: &str) {
    let clock = ManualClock::new(1_796_025_675_000_000);
    let rule = Rule::new("ip", Quota::new(1, Duration::from_secs(3_600))).token_bucket();
    let limit =
        Limit::new(rule, PeerIp::default()).backend(MemoryBackend::with_clock(clock.clone()));
    let layer =
        ThrottleLayer::new(Policy::new().limit(limit), MemoryBackend::default()).expect("a layer");
    let mut svc = layer.layer(service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    // The first call is allowed; the next ones warm up what is made once
    // per thread.
    for _ in 0..WARM {
        clock.advance(Duration::from_micros(1));
        call(&mut svc, say_hello());
    }
    let calls: Vec<_> = (0..CALLS).map(|_| say_hello()).collect();
    let answer = match subject {
        "loop" => false,
        "denied" => true,
        other => panic!("unknown subject {other}"),
    };
    let denied = measured(&mut svc, &clock, calls, answer);
    assert_eq!(black_box(denied), if answer { CALLS } else { 0 });
}

fn main() {
    if let Ok(subject) = std::env::var(CHILD_VAR) {
        child(&subject);
        return;
    }
    let least = |subject: &str| {
        (0..RUNS)
            .map(|_| callgrind::collected(CHILD_VAR, subject))
            .min()
            .expect("at least one run")
    };
    let (empty, denied) = (least("loop"), least("denied"));
    println!(
        "instructions per denied gRPC call in the layer, least of {RUNS} callgrind runs of {CALLS} calls, loop subtracted: {:.1}",
        (denied - empty) as f64 / CALLS as f64
    );
}
