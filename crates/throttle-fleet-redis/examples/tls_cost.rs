//! What TLS to Redis costs the exact mode, in one run against servers it
//! starts itself (test support: real `redis-server`s on free ports, a CA
//! made for the run):
//!
//! 1. Redis round trips per check and latency per check: one backend on a
//!    plain `redis-server` and one on a TLS-only one (`--port 0
//!    --tls-port`), one key under a quota never reached, `CHECKS` checks
//!    one after another (default 20,000), in alternating rounds of 1,000
//!    so that both see the same machine; the round trips are Redis'
//!    `EVALSHA` calls counted by the server, per check.
//! 2. A Cluster's failover: three primaries with a replica each,
//!    `cluster-node-timeout` `NODE_TIMEOUT_MS` (default 500), plain and
//!    TLS-only (`tls-cluster yes`, `tls-replication yes`), `FAILOVERS`
//!    times each (default 3): one key of one primary checked every
//!    millisecond, the primary killed; the time from the kill to the first
//!    check Redis (the promoted replica) decided.
//!
//! Prints one line of JSON per figure.
//!
//! ```sh
//! cargo run --release -p throttle-fleet-redis --features tls --example tls_cost
//! ```

use std::time::{Duration, Instant};

use throttle_fleet_core::backend::{Backend, Limiter};
use throttle_fleet_core::{Answer, Key, Quota, Rule};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::{RedisCluster, RedisServer, ServerTls, TlsFiles};

fn var(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rule() -> Rule {
    Rule::new("t", Quota::new(1_000_000_000, Duration::from_secs(3600)))
        .fixed_window()
        .fail_open()
}

/// One check: whether Redis decided it.
async fn exact(limiter: &dyn Limiter, key: &Key) -> bool {
    let result = match limiter.acquire(key, 1, u64::MAX) {
        Answer::Ready(r) => r,
        Answer::Pending(f) => f.await,
    };
    matches!(result, Ok(o) if !o.degraded)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

async fn latency(files: &std::sync::Arc<TlsFiles>, checks: u64) {
    let plain = RedisServer::start();
    let tls = RedisServer::start_tls(ServerTls::new(files), &[]);
    let timeouts = |c: RedisConfig| {
        c.command_timeout(Duration::from_secs(1))
            .connect_timeout(Duration::from_secs(1))
    };
    let plain_backend = RedisBackend::exact(timeouts(RedisConfig::standalone(plain.url())))
        .await
        .unwrap();
    let tls_backend = RedisBackend::exact(timeouts(
        RedisConfig::standalone(tls.url()).tls_ca_file(&files.ca),
    ))
    .await
    .unwrap();
    let limiters = [
        ("plain", plain_backend.limiter(&rule()).unwrap(), &plain),
        ("tls", tls_backend.limiter(&rule()).unwrap(), &tls),
    ];
    let key = Key::new("acme");
    // Warm-up (connections, the script cache), then counted from zero.
    for (_, limiter, server) in &limiters {
        for _ in 0..1_000 {
            assert!(exact(limiter.as_ref(), &key).await);
        }
        server.query(&["CONFIG", "RESETSTAT"]).unwrap();
    }
    let mut samples: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let rounds = checks.div_ceil(1_000);
    for _ in 0..rounds {
        for (i, (_, limiter, _)) in limiters.iter().enumerate() {
            for _ in 0..1_000 {
                let start = Instant::now();
                assert!(exact(limiter.as_ref(), &key).await);
                samples[i].push(start.elapsed());
            }
        }
    }
    for (i, (name, _, server)) in limiters.iter().enumerate() {
        let sorted = {
            let mut s = samples[i].clone();
            s.sort_unstable();
            s
        };
        let n = sorted.len() as f64;
        let mean = sorted.iter().map(Duration::as_secs_f64).sum::<f64>() / n * 1e6;
        let calls = server.command_count("evalsha") as f64;
        println!(
            "{{\"figure\":\"check\",\"redis\":\"{name}\",\"checks\":{n},\"evalsha_per_check\":{:.3},\
             \"commands_per_check\":{:.3},\"mean_us\":{mean:.1},\"p50_us\":{:.1},\"p99_us\":{:.1}}}",
            calls / n,
            server.commands() as f64 / n,
            percentile(&sorted, 0.5),
            percentile(&sorted, 0.99),
        );
    }
}

/// The Redis key of rule `t`'s key (a fixed window).
fn redis_key(key: &Key) -> String {
    let mut hex = String::new();
    key.write_hex(&mut hex);
    format!("rl:{{t:{hex}}}:fw")
}

async fn failover(files: &std::sync::Arc<TlsFiles>, tls: bool, node_timeout: Duration) -> Duration {
    let cluster = {
        let files = files.clone();
        tokio::task::spawn_blocking(move || {
            if tls {
                RedisCluster::start_tls(3, 1, node_timeout, ServerTls::new(&files))
            } else {
                RedisCluster::start_with_node_timeout(3, 1, node_timeout)
            }
        })
        .await
        .unwrap()
    };
    let mut config = RedisConfig::cluster([cluster.nodes()[0].clone()])
        .command_timeout(Duration::from_millis(250))
        .connect_timeout(Duration::from_millis(250))
        .probe_interval(Duration::from_millis(100));
    if tls {
        config = config.tls_ca_file(&files.ca);
    }
    let backend = RedisBackend::exact(config).await.unwrap();
    let limiter = backend.limiter(&rule()).unwrap();
    let key = Key::new("acme");
    let victim = cluster.primary_for_key(&redis_key(&key)).port();
    for _ in 0..100 {
        assert!(exact(limiter.as_ref(), &key).await);
    }
    cluster.node_by_port(victim).kill();
    let killed = Instant::now();
    loop {
        assert!(killed.elapsed() < Duration::from_secs(30), "no failover");
        if exact(limiter.as_ref(), &key).await {
            break killed.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let files = TlsFiles::generate();
    latency(&files, var("CHECKS", 20_000)).await;
    let node_timeout = Duration::from_millis(var("NODE_TIMEOUT_MS", 500));
    for tls in [false, true] {
        let mut times = Vec::new();
        for _ in 0..var("FAILOVERS", 3) {
            times.push(failover(&files, tls, node_timeout).await.as_millis());
        }
        println!(
            "{{\"figure\":\"failover\",\"redis\":\"{}\",\"cluster_node_timeout_ms\":{},\
             \"kill_to_first_exact_ms\":{times:?}}}",
            if tls { "tls" } else { "plain" },
            node_timeout.as_millis()
        );
    }
}
