//! The approximate mode next to limitador's Redis-cached storage, on the
//! same traffic, real time and one real Redis: how far over the quota each
//! lets a key go, and how many Redis commands each spends per check.
//!
//! ```text
//! limitador_fleet <redis-url> [seconds]    # run.sh starts a private redis-server
//! ```
//!
//! Four instances of each limiter in one process (as the design measured
//! limitador: its cache is per process, so four instances are four
//! caches), each with its own connections and its own background flush,
//! one key, quota 1,000 per 10 s, fixed window for both (limitador has no
//! other algorithm). Traffic models, each for `seconds` (default 30, three
//! intervals):
//!
//! - `uniform 3x`: 300 checks per second, evenly spaced, round-robin over
//!   the instances;
//! - `skewed 2x`: 200 per second, each check on an instance drawn by a
//!   Zipf law (s = 1: 48%, 24%, 16%, 12%);
//! - `burst`: 0.5x for one interval, then 3,000 checks within one second
//!   round-robin, then 0.5x again.
//!
//! Beside the modelled client (`heavy`), a second one (`polite`) keeps to
//! half its quota, evenly over the instances, in every model.
//!
//! Figures per subject and model: of the heavy client, the most admitted in any aligned
//! interval (ours: the Unix clock's 10 s windows; limitador: its counter's
//! windows, which start at the first check after the last one expired)
//! and in any sliding window of one interval, as multiples of the quota,
//! and its false denials (checks a perfect fixed-window limiter on the Unix
//! clock admits that the subject denied, as a share of what that limiter
//! admits); how many of the polite client's checks were denied (a perfect
//! limiter denies none);
//! Redis commands per check (`INFO commandstats` totals, reset before each
//! run, those run inside scripts included), and of those the heartbeat
//! `PING`s of our node watch (limitador sends none).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use limitador::AsyncRateLimiter;
use limitador::limit::{Context, Limit, Namespace};
use limitador::storage::redis::CachedRedisStorageBuilder;
use throttle_fleet_core::{Answer, decision::Demand, Key, Quota, Rule, rule_set::RuleSet};
use throttle_fleet_limitador_bench::{Commands, redis_commands};
use throttle_fleet_redis::{ApproximateBackend, ApproximateOptions, RedisBackend, RedisConfig};

const INSTANCES: usize = 4;
const QUOTA: u64 = 1_000;
const PERIOD: Duration = Duration::from_secs(10);

/// One instance of a limiter under test.
enum Instance {
    Ours {
        rules: RuleSet,
        rule: usize,
        _backend: ApproximateBackend,
    },
    Limitador {
        limiter: AsyncRateLimiter,
        namespace: Namespace,
    },
}

impl Instance {
    async fn check(&self, client: &'static str) -> bool {
        match self {
            Self::Ours { rules, rule, .. } => {
                let demand = [Demand::new(*rule, Key::new(client), 1)];
                match rules.check(&demand) {
                    Answer::Ready(c) => c.decision().is_allowed(),
                    Answer::Pending(p) => p.await.decision().is_allowed(),
                }
            }
            Self::Limitador { limiter, namespace } => {
                let ctx = Context::from(HashMap::from([("client".to_owned(), client.to_owned())]));
                match limiter
                    .check_rate_limited_and_update(namespace, &ctx, 1)
                    .await
                {
                    Ok(result) => !result.limited,
                    Err(_) => false,
                }
            }
        }
    }
}

async fn ours(url: &str) -> Vec<Instance> {
    let mut fleet = Vec::new();
    for _ in 0..INSTANCES {
        let backend = RedisBackend::approximate(
            RedisConfig::standalone(url.to_owned()),
            ApproximateOptions::default(),
        )
        .await
        .expect("the approximate backend connects");
        let mut rules = RuleSet::new();
        let rule = rules
            .bind(
                Rule::new("client", Quota::new(QUOTA, PERIOD)).fixed_window(),
                &backend,
            )
            .expect("a valid rule");
        fleet.push(Instance::Ours {
            rules,
            rule,
            _backend: backend,
        });
    }
    fleet
}

async fn limitador(url: &str) -> Vec<Instance> {
    let mut fleet = Vec::new();
    for _ in 0..INSTANCES {
        let storage = CachedRedisStorageBuilder::new(url)
            .build()
            .await
            .expect("limitador's cached storage connects");
        let limiter = AsyncRateLimiter::new_with_storage(Box::new(storage));
        let client = "client".try_into().expect("a valid variable");
        limiter.add_limit(Limit::new("bench", QUOTA, PERIOD.as_secs(), [], [client]));
        fleet.push(Instance::Limitador {
            limiter,
            namespace: Namespace::from("bench"),
        });
    }
    fleet
}

/// When each check is sent (from the start) and on which instance.
fn schedule(model: &str, seconds: u64) -> Vec<(Duration, usize)> {
    let even = |rate: u64, from: Duration, until: Duration, out: &mut Vec<(Duration, usize)>| {
        let step = Duration::from_secs(1) / rate as u32;
        let mut t = from;
        while t < until {
            let i = out.len() % INSTANCES;
            out.push((t, i));
            t += step;
        }
    };
    let total = Duration::from_secs(seconds);
    let mut out = Vec::new();
    match model {
        "uniform 3x" => even(
            3 * QUOTA / PERIOD.as_secs(),
            Duration::ZERO,
            total,
            &mut out,
        ),
        "skewed 2x" => {
            even(
                2 * QUOTA / PERIOD.as_secs(),
                Duration::ZERO,
                total,
                &mut out,
            );
            // Zipf(s = 1) over 4: weights 1, 1/2, 1/3, 1/4 (of 25/12).
            let mut state = 0x5EED_u64;
            for (_, i) in &mut out {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1);
                let u = (state >> 11) as f64 / (1u64 << 53) as f64 * 25.0 / 12.0;
                *i = if u < 1.0 {
                    0
                } else if u < 1.5 {
                    1
                } else if u < 1.5 + 1.0 / 3.0 {
                    2
                } else {
                    3
                };
            }
        }
        "burst" => {
            let half = QUOTA / PERIOD.as_secs() / 2;
            even(half, Duration::ZERO, PERIOD, &mut out);
            even(3 * QUOTA, PERIOD, PERIOD + Duration::from_secs(1), &mut out);
            even(half, PERIOD + Duration::from_secs(1), total, &mut out);
        }
        other => panic!("unknown model {other}"),
    }
    out
}

/// The two clients: the one the traffic model drives, and one that keeps
/// to half its quota, evenly over the instances.
const CLIENTS: [&str; 2] = ["heavy", "polite"];

/// One check as played: when it was sent (Unix µs), by which client, and
/// whether it was admitted.
struct Played {
    at_us: u64,
    client: usize,
    allowed: bool,
}

/// Plays `plan` (when, on which instance, for which client) against
/// `fleet`, in time order.
async fn play(fleet: Arc<Vec<Instance>>, plan: &[(Duration, usize, usize)]) -> Vec<Played> {
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(plan.len());
    for &(at, i, client) in plan {
        tokio::time::sleep_until(start + at).await;
        let fleet = fleet.clone();
        tasks.push(tokio::spawn(async move {
            let at_us = unix_us();
            let allowed = fleet[i].check(CLIENTS[client]).await;
            Played {
                at_us,
                client,
                allowed,
            }
        }));
    }
    let mut played = Vec::with_capacity(tasks.len());
    for t in tasks {
        played.push(t.await.expect("a check task"));
    }
    played
}

/// What a perfect fixed-window limiter on the Unix clock admits of
/// `played`: the first `QUOTA` of each client in each window.
fn perfect(played: &[Played]) -> Vec<bool> {
    let period = PERIOD.as_micros() as u64;
    let mut used: HashMap<(usize, u64), u64> = HashMap::new();
    played
        .iter()
        .map(|p| {
            let n = used.entry((p.client, p.at_us / period)).or_default();
            *n += 1;
            *n <= QUOTA
        })
        .collect()
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The most admitted in any window of one period starting at an admission.
fn worst_sliding(admitted: &[u64]) -> usize {
    let period = PERIOD.as_micros() as u64;
    let mut worst = 0;
    let mut j = 0;
    for i in 0..admitted.len() {
        while j < admitted.len() && admitted[j] < admitted[i] + period {
            j += 1;
        }
        worst = worst.max(j - i);
    }
    worst
}

/// The most admitted in an aligned window: the Unix clock's, or (anchored)
/// windows that open at the first admission after the last one closed.
fn worst_aligned(admitted: &[u64], anchored: bool) -> usize {
    let period = PERIOD.as_micros() as u64;
    let mut counts: HashMap<u64, usize> = HashMap::new();
    let mut open: Option<u64> = None;
    for &t in admitted {
        let window = if anchored {
            match open {
                Some(o) if t < o + period => o,
                _ => {
                    open = Some(t);
                    t
                }
            }
        } else {
            t / period
        };
        *counts.entry(window).or_default() += 1;
    }
    counts.values().copied().max().unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .expect("usage: limitador_fleet <redis-url> [seconds]");
    let seconds: u64 = args.next().map_or(30, |s| s.parse().expect("seconds"));
    let client = redis::Client::open(url.as_str()).expect("a Redis URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("Redis answers");
    println!(
        "{INSTANCES} instances in one process, one key, quota {QUOTA} per {}s, fixed window, {seconds} s per model",
        PERIOD.as_secs()
    );
    println!();
    println!(
        "| traffic | subject | checks | heavy client admitted | worst aligned interval | worst sliding interval | false denials | polite client denied | Redis commands per check | of which heartbeats |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    // `FLEET_ONLY=<text>`: only the models and subjects whose name holds it.
    let only = std::env::var("FLEET_ONLY").unwrap_or_default();
    for model in ["uniform 3x", "skewed 2x", "burst"] {
        let mut plan: Vec<(Duration, usize, usize)> = schedule(model, seconds)
            .into_iter()
            .map(|(at, i)| (at, i, 0))
            .collect();
        let polite = QUOTA / PERIOD.as_secs() / 2;
        let step = Duration::from_secs(1) / polite as u32;
        let mut at = step / 2;
        while at < Duration::from_secs(seconds) {
            plan.push((at, plan.len() % INSTANCES, 1));
            at += step;
        }
        plan.sort_by_key(|&(at, ..)| at);
        for subject in ["throttle approximate", "limitador cached"] {
            if !format!("{model} {subject}").contains(&only) {
                continue;
            }
            let _: () = redis::cmd("FLUSHALL")
                .query_async(&mut conn)
                .await
                .expect("FLUSHALL");
            // Start each run at the same place in an aligned interval.
            let period = PERIOD.as_micros() as u64;
            let wait = period - unix_us() % period + 200_000;
            tokio::time::sleep(Duration::from_micros(wait)).await;
            let fleet = Arc::new(match subject {
                "throttle approximate" => ours(&url).await,
                _ => limitador(&url).await,
            });
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(&mut conn)
                .await
                .expect("CONFIG RESETSTAT");
            let played = play(fleet.clone(), &plan).await;
            // The last flushes of what was admitted.
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            let Commands {
                total: commands,
                pings,
                ..
            } = redis_commands(&mut conn).await;
            drop(fleet);
            let mut admitted: Vec<u64> = played
                .iter()
                .filter(|p| p.client == 0 && p.allowed)
                .map(|p| p.at_us)
                .collect();
            admitted.sort_unstable();
            let perfect = perfect(&played);
            let heavy_perfect = played
                .iter()
                .zip(&perfect)
                .filter(|(p, ok)| p.client == 0 && **ok);
            let (given, false_denials) = heavy_perfect.fold((0, 0), |(n, f), (p, _)| {
                (n + 1, f + usize::from(!p.allowed))
            });
            let polite: Vec<_> = played.iter().filter(|p| p.client == 1).collect();
            let polite_denied = polite.iter().filter(|p| !p.allowed).count();
            let aligned = worst_aligned(&admitted, subject.starts_with("limitador"));
            println!(
                "| {model} | {subject} | {} | {} | {:.3}x | {:.3}x | {:.2}% | {polite_denied} of {} | {:.4} | {:.4} |",
                plan.len(),
                admitted.len(),
                aligned as f64 / QUOTA as f64,
                worst_sliding(&admitted) as f64 / QUOTA as f64,
                100.0 * false_denials as f64 / given.max(1) as f64,
                polite.len(),
                commands as f64 / plan.len() as f64,
                pings as f64 / plan.len() as f64,
            );
        }
    }
}
