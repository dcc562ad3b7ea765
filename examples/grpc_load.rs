//! The load client of the gRPC benchmark (`benches/grpc/run.sh`): unary
//! `helloworld.Greeter/SayHello` calls from tonic clients, `STREAMS`
//! concurrent calls on each of `CONNECTIONS` HTTP/2 connections.
//!
//! Settings (environment variables):
//!
//! - `BENCH_TARGET`: the server (default `http://127.0.0.1:50151`);
//! - `CONNECTIONS`: HTTP/2 connections (default 4);
//! - `STREAMS`: calls in flight on each connection (default 32);
//! - `WARMUP`, `DURATION`: seconds of calls not counted, then counted
//!   (default 2 and 10);
//! - `REQUESTS`: if set, exactly this many calls in all, every one counted,
//!   then exit (no warm-up, no time limit; for instruction counts);
//! - `CLIENT_THREADS`: the client runtime's worker threads (default 1).
//!
//! Prints one line: `calls=N ok=N exhausted=N other=N secs=S rps=R
//! p50_us=N p99_us=N all_calls=N`, where `exhausted` counts
//! `RESOURCE_EXHAUSTED` answers, `other` every other failure, and
//! `all_calls` the warm-up's calls too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tonic::Code;
use tonic::transport::{Channel, Endpoint};

/// Generated from `crates/throttle-fleet-tonic/proto/helloworld.proto`.
#[allow(unreachable_pub, missing_docs, clippy::all)]
mod helloworld {
    include!("../crates/throttle-fleet-tonic/proto/gen/helloworld.rs");
}

use helloworld::HelloRequest;
use helloworld::greeter_client::GreeterClient;

/// Whether a failure was printed already.
static REPORTED: AtomicBool = AtomicBool::new(false);

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one caller saw while counted.
#[derive(Default)]
struct Tally {
    /// Every call made, counted or not.
    all: u64,
    ok: u64,
    exhausted: u64,
    other: u64,
    /// Microseconds per counted call.
    latencies: Vec<u32>,
}

/// When calls are counted.
enum Plan {
    /// From `from` to `until`; calls start until `until`.
    Timed { from: Instant, until: Instant },
    /// Calls until the budget is spent, all counted.
    Count(Arc<AtomicU64>),
}

async fn caller(channel: Channel, plan: Arc<Plan>) -> Tally {
    let mut client = GreeterClient::new(channel);
    let mut tally = Tally::default();
    loop {
        let start = Instant::now();
        let counted = match &*plan {
            Plan::Timed { from, until } => {
                if start >= *until {
                    break;
                }
                start >= *from
            }
            Plan::Count(left) => {
                if left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_err()
                {
                    break;
                }
                true
            }
        };
        let request = HelloRequest {
            name: "throttle".to_owned(),
        };
        let result = client.say_hello(request).await;
        tally.all += 1;
        if !counted {
            continue;
        }
        tally
            .latencies
            .push(u32::try_from(start.elapsed().as_micros()).unwrap_or(u32::MAX));
        match result {
            Ok(_) => tally.ok += 1,
            Err(status) if status.code() == Code::ResourceExhausted => tally.exhausted += 1,
            Err(status) => {
                if !REPORTED.swap(true, Ordering::Relaxed) {
                    eprintln!("a call failed (the first failure; all are counted): {status:?}");
                }
                tally.other += 1
            }
        }
    }
    tally
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let target: String = env("BENCH_TARGET", "http://127.0.0.1:50151".to_owned());
    let connections: usize = env("CONNECTIONS", 4);
    let streams: usize = env("STREAMS", 32);
    let requests: Option<u64> = std::env::var("REQUESTS").ok().and_then(|v| v.parse().ok());
    let warmup = Duration::from_secs_f64(env("WARMUP", 2.0));
    let duration = Duration::from_secs_f64(env("DURATION", 10.0));

    let mut channels = Vec::with_capacity(connections);
    for _ in 0..connections {
        // One `Channel` per endpoint connect is one HTTP/2 connection.
        let endpoint = Endpoint::from_shared(target.clone())?
            .http2_adaptive_window(false)
            .tcp_nodelay(true);
        channels.push(endpoint.connect().await?);
    }
    let started = Instant::now();
    let plan = Arc::new(match requests {
        Some(n) => Plan::Count(Arc::new(AtomicU64::new(n))),
        None => Plan::Timed {
            from: started + warmup,
            until: started + warmup + duration,
        },
    });
    let mut tasks = Vec::new();
    for channel in &channels {
        for _ in 0..streams {
            tasks.push(tokio::spawn(caller(channel.clone(), plan.clone())));
        }
    }
    let mut all = Tally::default();
    for task in tasks {
        let t = task.await?;
        all.all += t.all;
        all.ok += t.ok;
        all.exhausted += t.exhausted;
        all.other += t.other;
        all.latencies.extend(t.latencies);
    }
    let secs = match requests {
        Some(_) => started.elapsed().as_secs_f64(),
        None => duration.as_secs_f64(),
    };
    all.latencies.sort_unstable();
    let calls = all.latencies.len();
    println!(
        "calls={calls} ok={} exhausted={} other={} secs={secs:.3} rps={:.0} p50_us={} p99_us={} all_calls={}",
        all.ok,
        all.exhausted,
        all.other,
        calls as f64 / secs,
        percentile(&all.latencies, 0.50),
        percentile(&all.latencies, 0.99),
        all.all,
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env("CLIENT_THREADS", 1))
        .enable_all()
        .build()?
        .block_on(run())
}
