//! What our RLS v3 gRPC service costs per call apart from the decision:
//! a tonic server (`Rls::into_server()`) and a tonic client in one
//! process, `ShouldRateLimit` over real loopback TCP.
//!
//! ```text
//! cargo run --release --bin rls_grpc_cost    # needs valgrind
//! ```
//!
//! One rule (`domain = "api"`, `descriptor = ["user_id"]`, fixed window, a
//! huge quota per minute: allowed; or 1 per hour used up first: denied),
//! the memory backend, one descriptor `[("user_id", "client-0")]`, one
//! HTTP/2 connection, one call at a time, on a current-thread runtime.
//!
//! - `grpc`: instructions of the whole process per call (client and
//!   server, encoding, HTTP/2, the runtime, the system calls' user-space
//!   side; the kernel's loopback is not counted), callgrind with
//!   `--toggle-collect=*measured*` around `CALLS` calls after `WARM`;
//! - `decide`: `Rls::decide` alone on the same request (polled once, no
//!   runtime), so `grpc - decide` is the transport's share of a call;
//! - calls per second (wall clock, `WALL_CALLS` calls after `WARM`, not
//!   under valgrind; noisy on a shared machine).
//!
//! Least of three callgrind runs.

// The core's instruction-count runner, so all count the same way.
#[path = "../../../../crates/throttle-fleet-core/benches/support/callgrind.rs"]
mod callgrind;

use std::time::Instant;
use throttle_fleet_limitador_bench::{config, limit, poll_once, request};

use throttle_fleet_core::memory::MemoryBackend;
use throttle_fleet_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use throttle_fleet_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, rate_limit_response::Code,
};
use throttle_fleet_envoy::{EnvoyRules, Rls};
use tonic::transport::{Channel, Server, server::TcpIncoming};

const CALLS: usize = 2_000;
const WARM: usize = 300;
const WALL_CALLS: usize = 20_000;
const RUNS: usize = 3;
const CHILD_VAR: &str = "THROTTLE_RLS_GRPC_COST_CHILD";
const SCENARIOS: [(&str, bool); 2] = [("allowed", false), ("denied", true)];

fn rls(denied: bool) -> Rls {
    let (max, seconds) = limit(denied);
    let config = config("", max, seconds);
    Rls::new(EnvoyRules::new(&config, "bench.toml", MemoryBackend::default()).expect("valid rules"))
}

/// A server on a free loopback port, and a client connected to it; the
/// key used up when `denied`.
async fn pair(denied: bool) -> RateLimitServiceClient<Channel> {
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().expect("an address"))
        .expect("a loopback port")
        .with_nodelay(Some(true));
    let addr = incoming.local_addr().expect("its address");
    let service = rls(denied).into_server();
    tokio::spawn(async move {
        Server::builder()
            .add_service(service)
            .serve_with_incoming(incoming)
            .await
            .expect("the server runs");
    });
    let mut client = RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("the client connects");
    let first = client
        .should_rate_limit(request("client-0"))
        .await
        .expect("an answer")
        .into_inner();
    assert_eq!(first.overall_code, Code::Ok as i32);
    client
}

/// `calls` calls, one at a time; how many were allowed.
async fn calls(client: &mut RateLimitServiceClient<Channel>, calls: usize) -> usize {
    let request = request("client-0");
    let mut allowed = 0;
    for _ in 0..calls {
        let answer = client
            .should_rate_limit(request.clone())
            .await
            .expect("an answer")
            .into_inner();
        allowed += usize::from(answer.overall_code == Code::Ok as i32);
    }
    allowed
}

/// The counted part: `CALLS` calls through the loopback.
#[inline(never)]
fn measured_grpc(
    rt: &tokio::runtime::Runtime,
    client: &mut RateLimitServiceClient<Channel>,
) -> usize {
    rt.block_on(calls(client, CALLS))
}

/// The counted part: `CALLS` decisions, no transport.
#[inline(never)]
fn measured_decide(rls: &Rls, request: &RateLimitRequest) -> usize {
    (0..CALLS)
        .map(|_| {
            let answer = poll_once(rls.decide(request))
                .expect("the memory backend answers at once")
                .expect("a valid request");
            usize::from(answer.overall_code == Code::Ok as i32)
        })
        .sum()
}

fn child(spec: &str) {
    let (scenario, subject) = spec.split_once(' ').expect("`<scenario> <subject>`");
    let denied = SCENARIOS
        .iter()
        .find(|(s, _)| *s == scenario)
        .expect("a known scenario")
        .1;
    let expected = if denied { 0 } else { CALLS };
    match subject {
        "grpc" => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let mut client = rt.block_on(pair(denied));
            rt.block_on(calls(&mut client, WARM));
            assert_eq!(measured_grpc(&rt, &mut client), expected, "{spec}");
        }
        "decide" => {
            let rls = rls(denied);
            let request = request("client-0");
            let first = poll_once(rls.decide(&request))
                .expect("ready")
                .expect("valid");
            assert_eq!(first.overall_code, Code::Ok as i32);
            for _ in 0..WARM {
                let _ = poll_once(rls.decide(&request));
            }
            assert_eq!(measured_decide(&rls, &request), expected, "{spec}");
        }
        other => panic!("unknown subject {other}"),
    }
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_VAR) {
        child(&spec);
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    println!(
        "ShouldRateLimit over loopback TCP, one connection, one call at a time, current-thread runtime; instructions: least of {RUNS} callgrind runs of {CALLS} calls after {WARM}; calls per second: {WALL_CALLS} calls, one run (noisy)"
    );
    println!();
    println!(
        "| scenario | whole process per call (client + server) | Rls::decide alone | transport's share | calls per second |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (scenario, denied) in SCENARIOS {
        let per = |subject: &str| {
            let spec = format!("{scenario} {subject}");
            let least = (0..RUNS)
                .map(|_| callgrind::collected(CHILD_VAR, &spec))
                .min()
                .unwrap_or(0);
            least as f64 / CALLS as f64
        };
        let (grpc, decide) = (per("grpc"), per("decide"));
        let rate = rt.block_on(async {
            let mut client = pair(denied).await;
            calls(&mut client, WARM).await;
            let start = Instant::now();
            let allowed = calls(&mut client, WALL_CALLS).await;
            assert_eq!(allowed, if denied { 0 } else { WALL_CALLS });
            WALL_CALLS as f64 / start.elapsed().as_secs_f64()
        });
        println!(
            "| {scenario} | {grpc:.0} | {decide:.0} | {:.0} | {rate:.0} |",
            grpc - decide
        );
    }
}
