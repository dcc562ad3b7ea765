//! What the metrics cost per request: drives `N` requests through the layer
//! (one rule, memory backend, nothing denied) with or without a recorder
//! installed, for an instruction count under callgrind.
//!
//! Run with `cargo run --release -p throttle-tower --example metrics_cost -- 100000 recorder`
//! (or `none`; build with `--no-default-features` for the layer without the
//! `metrics` feature). The cost per request is the difference between two
//! counts divided by the difference in `N`, which cancels the setup; see
//! BENCHMARKS.md for the callgrind command.

use std::convert::Infallible;

use http::{Request, Response};
use throttle_tower::{Header, HttpResponder, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
use tower::{Layer, Service, ServiceExt, service_fn};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    if args.next().as_deref() == Some("recorder") {
        // Counters and gauges on atomics, as exporters keep them.
        metrics_util::debugging::DebuggingRecorder::new()
            .install()
            .expect("no other recorder");
    }
    let policy = Policy::new().rule(
        Rule::new("tenant", Quota::per_second(1_000_000_000)),
        Header::new("x-api-key"),
    );
    let layer = ThrottleLayer::<HttpResponder>::new(policy, MemoryBackend::default()).unwrap();
    let mut svc = layer.layer(service_fn(|_req: Request<()>| async {
        Ok::<_, Infallible>(Response::new(()))
    }));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let keys: Vec<String> = (0..64).map(|i| format!("key-{i}")).collect();
    rt.block_on(async {
        let mut ok = 0u64;
        for i in 0..n {
            let req = Request::get("/")
                .header("x-api-key", &keys[(i % 64) as usize])
                .body(())
                .unwrap();
            let res = svc.ready().await.unwrap().call(req).await.unwrap();
            ok += u64::from(res.status().is_success());
        }
        assert_eq!(ok, n);
    });
}
