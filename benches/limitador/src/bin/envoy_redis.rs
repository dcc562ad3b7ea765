//! Envoy rate limit decisions on one Redis: our `Rls::decide` with the
//! `redis-exact` backend next to limitador's `AsyncRateLimiter` on its
//! (uncached) `AsyncRedisStorage`, the same descriptors, the transport
//! aside.
//!
//! ```text
//! envoy_redis <redis-url> [decisions]    # run.sh starts a private redis-server
//! ```
//!
//! Each subject decides on `[("user_id", "client-0")]` in the domain
//! (limitador: namespace) `api`, one fixed window, in two scenarios: the
//! key within its limit (a huge quota per minute: all allowed) and the key
//! over it (1 per hour, used up before the count: all denied).
//!
//! - `throttle redis-exact`: `Rls::decide`, the rule and `[backend] kind =
//!   "redis-exact"` read from TOML, the backend built by
//!   `BackendConfig::build` (one atomic script per check; checks of one
//!   rule in flight together go out as one script call; a key Redis showed
//!   over its limit is denied here until its wait is over, asking Redis
//!   nothing).
//! - `limitador redis`: `AsyncRateLimiter::check_rate_limited_and_update`
//!   on `AsyncRedisStorage` (not the cached storage), the `Context` built
//!   the way limitador's own Envoy server builds it (the descriptors as the
//!   CEL list `descriptors`, the `Limit`'s variable
//!   `descriptors[0].user_id`). It reads the counters with one script and,
//!   when allowed, updates them with a second (two round trips, not
//!   atomic).
//!
//! Figures, for 1 and 4 concurrent tasks on a tokio multi-thread runtime
//! with 2 workers, `decisions` (default 20,000) split between the tasks:
//! decisions per second (wall clock: noisy on a shared machine), and the
//! Redis commands per decision from `INFO commandstats` (reset before each
//! run; commands run inside scripts counted too; our node watch's
//! heartbeat `PING`s left out and counted apart: they cost per second, not
//! per decision, and limitador sends none), and of those the script calls
//! (`EVALSHA`, `EVAL`: one per round trip here).
//!
//! Then instructions per decision on the client side (callgrind, least of
//! 3): the binary starts itself again under `valgrind --tool=callgrind
//! --toggle-collect=*measured*`; `measured` runs `CALLGRIND_DECISIONS`
//! decisions from 4 tasks on a current-thread runtime, so the Redis
//! client's connection tasks and the runtime itself are counted, the
//! setup and Redis' own work are not.

// The core's instruction-count runner, so all count the same way.
#[path = "../../../../crates/throttle-fleet-core/benches/support/callgrind.rs"]
mod callgrind;

use std::sync::Arc;
use std::time::Instant;
use throttle_fleet_limitador_bench::{
    Commands, config, limit, limitador_context, limitador_response, redis_commands, request,
};

use limitador::AsyncRateLimiter;
use limitador::limit::{Limit, Namespace};
use limitador::storage::redis::AsyncRedisStorage;
use throttle_fleet_config::BuiltBackend;
use throttle_fleet_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, rate_limit_response::Code,
};
use throttle_fleet_envoy::{EnvoyRules, Rls};

const CHILD_VAR: &str = "THROTTLE_ENVOY_REDIS_CHILD";
const CALLGRIND_DECISIONS: usize = 4_000;
const CALLGRIND_TASKS: usize = 4;
const RUNS: usize = 3;
const SUBJECTS: [&str; 2] = ["throttle redis-exact", "limitador redis"];
/// Scenario, and whether the key is over its limit.
const SCENARIOS: [(&str, bool); 2] = [("allowed", false), ("denied", true)];

enum Subject {
    Ours { rls: Rls, _backend: BuiltBackend },
    Limitador(AsyncRateLimiter),
}

impl Subject {
    async fn new(name: &str, url: &str, denied: bool) -> Self {
        let (max, seconds) = limit(denied);
        match name {
            "throttle redis-exact" => {
                let config = config(
                    &format!("[backend]\nkind = \"redis-exact\"\nurl = \"{url}\""),
                    max,
                    seconds,
                );
                let backend = config
                    .backend
                    .build("bench.toml")
                    .await
                    .expect("the redis-exact backend connects");
                let rules = EnvoyRules::new(&config, "bench.toml", backend.as_backend())
                    .expect("valid rules");
                Self::Ours {
                    rls: Rls::new(rules),
                    _backend: backend,
                }
            }
            "limitador redis" => {
                let storage = AsyncRedisStorage::new(url)
                    .await
                    .expect("limitador's Redis storage connects");
                let limiter = AsyncRateLimiter::new_with_storage(Box::new(storage));
                let variable = "descriptors[0].user_id"
                    .try_into()
                    .expect("a valid variable");
                limiter.add_limit(Limit::new("api", max, seconds, [], [variable]));
                Self::Limitador(limiter)
            }
            other => panic!("unknown subject {other}"),
        }
    }

    /// One decision on `request`: allowed or not.
    async fn decide(&self, request: &RateLimitRequest) -> bool {
        match self {
            Self::Ours { rls, .. } => {
                let response = rls.decide(request).await.expect("a valid request");
                response.overall_code == Code::Ok as i32
            }
            Self::Limitador(limiter) => {
                // limitador-server's `ShouldRateLimit` body, the transport
                // aside.
                let namespace = Namespace::from(request.domain.clone());
                let ctx = limitador_context(request);
                let hits = u64::from(request.hits_addend.max(1));
                let result = limiter
                    .check_rate_limited_and_update(&namespace, &ctx, hits)
                    .await
                    .expect("Redis answers");
                limitador_response(result.limited).overall_code == Code::Ok as i32
            }
        }
    }
}

/// `decisions` decisions from `tasks` concurrent tasks; how many were
/// allowed.
async fn drive(subject: Arc<Subject>, tasks: usize, decisions: usize) -> usize {
    let request = Arc::new(request("client-0"));
    let mut handles = Vec::with_capacity(tasks);
    for t in 0..tasks {
        let share = decisions / tasks + usize::from(t < decisions % tasks);
        let (subject, request) = (subject.clone(), request.clone());
        handles.push(tokio::spawn(async move {
            let mut allowed = 0;
            for _ in 0..share {
                allowed += usize::from(subject.decide(&request).await);
            }
            allowed
        }));
    }
    let mut allowed = 0;
    for h in handles {
        allowed += h.await.expect("a decision task");
    }
    allowed
}

/// The subject, fresh on an empty Redis, its key used up when `denied`,
/// and a few decisions made (connections and scripts warm).
async fn ready(name: &str, url: &str, denied: bool) -> Arc<Subject> {
    let client = redis::Client::open(url).expect("a Redis URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis answers");
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .expect("FLUSHALL");
    let subject = Arc::new(Subject::new(name, url, denied).await);
    assert!(
        subject.decide(&request("client-0")).await,
        "{name}: the first decision was denied"
    );
    for _ in 0..100 {
        assert_eq!(
            subject.decide(&request("client-0")).await,
            !denied,
            "{name}"
        );
    }
    subject
}

/// The counted part (callgrind).
#[inline(never)]
fn measured(rt: &tokio::runtime::Runtime, subject: Arc<Subject>) -> usize {
    rt.block_on(drive(subject, CALLGRIND_TASKS, CALLGRIND_DECISIONS))
}

fn child(spec: &str) {
    let mut parts = spec.splitn(3, '|');
    let (Some(scenario), Some(name), Some(url)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("`<scenario>|<subject>|<url>`");
    };
    let denied = SCENARIOS
        .iter()
        .find(|(s, _)| *s == scenario)
        .expect("a known scenario")
        .1;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let subject = rt.block_on(ready(name, url, denied));
    let allowed = measured(&rt, subject.clone());
    let expected = if denied { 0 } else { CALLGRIND_DECISIONS };
    assert_eq!(allowed, expected, "{spec}");
    drop(subject);
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_VAR) {
        child(&spec);
        return;
    }
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .expect("usage: envoy_redis <redis-url> [decisions]");
    let decisions: usize = args
        .next()
        .map_or(20_000, |s| s.parse().expect("decisions"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let client = redis::Client::open(url.as_str()).expect("a Redis URL");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("Redis answers");
        println!(
            "{decisions} decisions per run, one key, fixed window, 2 runtime workers; one run each (wall clock: noisy)"
        );
        println!();
        println!(
            "| scenario | subject | tasks | decisions per second | Redis commands per decision (heartbeats aside) | of which script calls | heartbeat PINGs in the run |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|");
        let mut by_name = Vec::new();
        for (scenario, denied) in SCENARIOS {
            for name in SUBJECTS {
                for tasks in [1, 4] {
                    let subject = ready(name, &url, denied).await;
                    let _: () = redis::cmd("CONFIG")
                        .arg("RESETSTAT")
                        .query_async(&mut conn)
                        .await
                        .expect("CONFIG RESETSTAT");
                    let start = Instant::now();
                    let allowed = drive(subject.clone(), tasks, decisions).await;
                    let elapsed = start.elapsed();
                    let Commands {
                        total,
                        scripts,
                        pings,
                        named,
                    } = redis_commands(&mut conn).await;
                    if tasks == 1 {
                        let named: Vec<String> = named
                            .iter()
                            .filter(|(n, _)| n != "ping")
                            .map(|(n, c)| format!("{n} {:.3}", *c as f64 / decisions as f64))
                            .collect();
                        by_name.push(format!("{scenario}, {name}: {}", named.join(", ")));
                    }
                    assert_eq!(allowed, if denied { 0 } else { decisions }, "{name}");
                    drop(subject);
                    println!(
                        "| {scenario} | {name} | {tasks} | {:.0} | {:.3} | {:.3} | {pings} |",
                        decisions as f64 / elapsed.as_secs_f64(),
                        total.saturating_sub(pings) as f64 / decisions as f64,
                        scripts as f64 / decisions as f64,
                    );
                }
            }
        }
        println!();
        println!("Redis commands per decision by name, 1 task:");
        for line in by_name {
            println!("- {line}");
        }
    });
    drop(rt);
    if std::env::var("ENVOY_REDIS_CALLGRIND").as_deref() == Ok("0") {
        return;
    }
    println!();
    println!(
        "client-side instructions per decision, least of {RUNS} callgrind runs of {CALLGRIND_DECISIONS} decisions from {CALLGRIND_TASKS} tasks on a current-thread runtime (runtime and Redis client included)"
    );
    println!();
    println!("| scenario | throttle redis-exact | limitador redis | limitador / throttle |");
    println!("|---|---:|---:|---:|");
    for (scenario, _) in SCENARIOS {
        let per: Vec<f64> = SUBJECTS
            .iter()
            .map(|name| {
                let spec = format!("{scenario}|{name}|{url}");
                let least = (0..RUNS)
                    .map(|_| callgrind::collected(CHILD_VAR, &spec))
                    .min()
                    .unwrap_or(0);
                least as f64 / CALLGRIND_DECISIONS as f64
            })
            .collect();
        println!(
            "| {scenario} | {:.0} | {:.0} | {:.1} |",
            per[0],
            per[1],
            per[1] / per[0]
        );
    }
}
