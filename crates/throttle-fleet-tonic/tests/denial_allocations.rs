//! What a denied gRPC call costs in heap allocations: the layer's
//! `Throttle` service called directly, from `call` to the finished
//! `Response`, counted by this binary's global allocator.
//!
//! The count includes everything the layer does for a denial: the policy's
//! key extraction and check, the responder's answer and the response
//! future. Of that answer, the `http::HeaderMap` takes 2 allocations (its
//! index table and its entries, which any non-empty header map needs); the
//! body is an empty `Bytes`, which takes none. So nothing else may
//! allocate: not the key, the check, the message, the details nor the
//! numbers. The request is made before the count starts, and the response
//! is dropped after it ends, as a server does once it has written the
//! answer. (Before the denial was made once per rule: 45 allocations.)

use std::alloc::System;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::extract::ConnectInfo;
use http::{HeaderValue, Request, Response};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use throttle_fleet_tonic::core::clock::ManualClock;
use throttle_fleet_tonic::{
    GrpcMethod, KeyExtractor, Limit, MemoryBackend, PeerIp, Policy, Quota, Rule, ThrottleLayer,
};
use tower::{Layer, Service, service_fn};

// Counts every allocation of the process (the workspace forbids the
// `unsafe` a counting allocator of its own needs). The binary has no test
// harness (`harness = false`): its `main` counts on the only thread there
// is. Under libtest the test ran on a thread of its own while the harness's
// main thread, late to block on its channel under load, once allocated
// inside a counted call (6 where 2 are made).
#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// The allocations (and reallocations) `f` makes.
fn allocations<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let region = Region::new(GLOBAL);
    let out = f();
    let change = region.change();
    (out, change.allocations + change.reallocations)
}

/// A call from 203.0.113.7. Its content type is a static value: a server's
/// request header values are slices of the connection's read buffer, which
/// a clone (the gRPC-web answer's content type) only counts a reference of,
/// like a static one; a value made from a `&str` here would be copied into
/// a buffer of its own on the first clone.
fn say_hello(content_type: &'static str) -> Request<()> {
    let peer: SocketAddr = "203.0.113.7:50000".parse().unwrap();
    let mut req = Request::post("/helloworld.Greeter/SayHello")
        .header("content-type", HeaderValue::from_static(content_type))
        .header("te", "trailers")
        .body(())
        .unwrap();
    req.extensions_mut().insert(ConnectInfo(peer));
    req
}

/// The allocations of each of `n` denied calls through a layer with one
/// rule, `rule` keyed by `key` and counted on `clock` (advanced by `step`
/// before each call), after a warm-up. Asserts that every denial's
/// `grpc-status-details-bin` is another when the clock moves.
fn denial_allocations(
    rule: Rule,
    key: impl KeyExtractor,
    content_type: &'static str,
    step: Duration,
    n: usize,
    keep_alive: bool,
) -> Vec<usize> {
    let clock = ManualClock::new(1_796_025_675_000_000);
    let limit = Limit::new(rule, key).backend(MemoryBackend::with_clock(clock.clone()));
    let layer = ThrottleLayer::new(Policy::new().limit(limit), MemoryBackend::default()).unwrap();
    let mut svc = layer.layer(service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let mut cx = Context::from_waker(Waker::noop());
    let mut details = std::collections::HashSet::new();
    let mut counts = Vec::new();
    let mut kept = Vec::new();
    // The first call is allowed; the next ones warm up what is made once
    // per thread (the number tables, the thread's buffers).
    for i in 0..n + 10 {
        clock.advance(step);
        let req = say_hello(content_type);
        let (res, count) = allocations(|| match pin!(svc.call(req)).poll(&mut cx) {
            Poll::Ready(res) => res.unwrap(),
            Poll::Pending => panic!("a memory backend decides in `call`"),
        });
        if i >= 10 {
            assert_eq!(res.headers()["grpc-status"], "8", "{:?}", res.headers());
            details.insert(res.headers()["grpc-status-details-bin"].as_bytes().to_vec());
            counts.push(count);
        }
        if keep_alive {
            kept.push(res);
        } else {
            // As a server does once it has written the answer.
            drop(res);
        }
    }
    let expected = if step.is_zero() { 1 } else { n };
    assert_eq!(details.len(), expected, "the details follow the wait");
    counts
}

fn main() {
    a_denied_grpc_call_allocates_at_most_twice();
    println!("test a_denied_grpc_call_allocates_at_most_twice ... ok");
}

fn a_denied_grpc_call_allocates_at_most_twice() {
    // The example's rule; a clock that stands still: every denial waits the
    // same, as many do under a flood.
    let counts = denial_allocations(
        Rule::new("ip", Quota::per_minute(1)).fixed_window(),
        PeerIp::default(),
        "application/grpc",
        Duration::ZERO,
        1_000,
        false,
    );
    println!(
        "a standing clock, allocations per denial: {:?}",
        &counts[..8]
    );
    assert!(counts.iter().all(|&n| n <= 2), "{counts:?}");

    // The wait changes from one denial to the next (the clock moves by a
    // microsecond per call; a 10-minute wait is one a decision keeps to the
    // microsecond, see `Decision`), a gRPC-web call: the message and details are made per
    // denial all the same.
    let counts = denial_allocations(
        Rule::new("method", Quota::new(1, Duration::from_secs(600))).token_bucket(),
        GrpcMethod::full(),
        "application/grpc-web+proto",
        Duration::from_micros(1),
        1_000,
        false,
    );
    println!("a moving clock, allocations per denial: {:?}", &counts[..8]);
    assert!(counts.iter().all(|&n| n <= 2), "{counts:?}");

    // Every answer still alive (none written yet, as under a flood of
    // concurrent calls): the thread's buffer cannot be reused, and a new
    // one (2 allocations) is taken once per 16 KiB, about every 30 denials.
    let counts = denial_allocations(
        Rule::new("ip", Quota::per_minute(1)).fixed_window(),
        PeerIp::default(),
        "application/grpc",
        Duration::from_micros(1),
        1_000,
        true,
    );
    let refills = counts.iter().filter(|&&n| n > 2).count();
    println!("answers kept alive: {refills} of 1000 denials took a new buffer");
    assert!(counts.iter().all(|&n| n <= 4), "{counts:?}");
    assert!(refills <= 1_000 / 25, "{refills}: {counts:?}");
}
