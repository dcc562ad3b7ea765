//! The leased mode over six instances: clients at twice their quota, their
//! requests spread over the instances uniformly, by a Zipf law, or sticking
//! to one instance and moving, next to a perfect global token bucket fed
//! the same requests at the same instants. What it measures: admitted over
//! what the perfect bucket admits, per traffic class; Redis script calls
//! per request (counted by the server); and the worst window over what a
//! perfect bucket allows there. Clients at twice their quota cannot come
//! near the bound of one batch plus the low-water mark per instance (they
//! send about `rate x width` more than a window allows; the trickle-then-
//! burst test in `leased.rs` shows the bound): here, a window over a
//! perfect bucket's allowance means tokens counted twice.

mod support;

use std::time::Duration;

use support::leased::{T0, leased_fleet, perfect, worst_excess};
use throttle_fleet_core::{Key, Quota, Rule};
use throttle_fleet_redis::LeaseOptions;
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_test_support::{RedisServer, allowed};

const INSTANCES: usize = 6;

/// A xorshift generator: the same timeline on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// An exponential gap of mean `mean_us`.
    fn gap(&mut self, mean_us: f64) -> u64 {
        (-self.unit().ln() * mean_us) as u64 + 1
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// How a client's requests spread over the instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spread {
    /// Each request to any instance, uniformly.
    Uniform,
    /// Instance of rank `r` (a permutation per client) with probability
    /// proportional to `1 / (r + 1)`.
    Zipf,
    /// All requests to one instance; the client moves to another one after
    /// an exponential time of mean 20 s.
    Sticky,
}

const SPREADS: [Spread; 3] = [Spread::Uniform, Spread::Zipf, Spread::Sticky];

/// What one traffic class got.
#[derive(Debug, Default, Clone, Copy)]
struct Class {
    requests: u64,
    admitted: u64,
    /// Admitted by the perfect bucket.
    ideal: u64,
    /// Worst sliding window over a perfect bucket, over the class's keys
    /// (negative: every window admitted less than it allows).
    excess: i64,
}

impl Class {
    fn ratio(&self) -> f64 {
        self.admitted as f64 / self.ideal as f64
    }
}

/// What a run measured.
#[derive(Debug)]
struct Run {
    classes: [Class; 3],
    /// Script calls Redis received (leases and returns).
    calls: u64,
    requests: u64,
    /// Tokens leased, given back, and held by the instances at the end.
    leased: u64,
    returned: u64,
    /// Lease calls (the other calls give tokens back).
    fetches: u64,
    held: u64,
}

impl Run {
    fn calls_per_request(&self) -> f64 {
        self.calls as f64 / self.requests as f64
    }

    fn print(&self, what: &str) {
        for (spread, c) in SPREADS.iter().zip(&self.classes) {
            println!(
                "{what}, {spread:?}: admitted {} of {} requests, a perfect bucket {} ({:.3}); \
                 worst window {:+}",
                c.admitted,
                c.requests,
                c.ideal,
                c.ratio(),
                c.excess
            );
        }
        println!(
            "{what}: {:.4} Redis calls per request ({} calls: {} leases, {} returns; {} requests)",
            self.calls_per_request(),
            self.calls,
            self.fetches,
            self.calls - self.fetches,
            self.requests
        );
        println!(
            "{what}: {} tokens leased, {} given back, {} held by the instances at the end",
            self.leased, self.returned, self.held
        );
    }
}

/// `per_class` clients of each spread, each sending Poisson requests at
/// twice `quota` for `secs` simulated seconds over six leased instances
/// (each its own backend on one redis-server), next to a perfect bucket.
/// Each instance's give-back timer fires every second at its own phase, as
/// the background task does; background leases are awaited after each
/// request (a round trip is far shorter than the gap to the next). They
/// are awaited with `flush()`, which also gives back the instance's due
/// tokens: an instance that serves a request gives back more often than
/// its timer alone would (see BENCHMARKS.md for what that changes).
async fn six_instances(quota: Quota, options: LeaseOptions, per_class: usize, secs: u64) -> Run {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let clock = time.clock();
    let rule = Rule::new("tenant", quota).token_bucket();
    let fleet = leased_fleet(
        &server,
        &time,
        &options,
        &rule,
        INSTANCES,
        Duration::from_millis(163),
    )
    .await;
    let ideal = perfect(&clock, &rule);
    let (limit, period) = (quota.limit(), quota.period().as_micros() as u64);
    let burst = quota.burst();
    let mean_gap = period as f64 / (2 * limit) as f64;
    // (time, client, instance)
    let mut reqs = Vec::new();
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut clients = Vec::new();
    for (class, &spread) in SPREADS.iter().enumerate() {
        for _ in 0..per_class {
            let client = clients.len();
            clients.push(class);
            let mut ranks: Vec<usize> = (0..INSTANCES).collect();
            for i in (1..INSTANCES).rev() {
                ranks.swap(i, rng.below(i + 1));
            }
            let zipf_total: f64 = (1..=INSTANCES).map(|r| 1.0 / r as f64).sum();
            let mut at = ranks[0];
            let mut move_at = rng.gap(20e6);
            let mut t = rng.gap(mean_gap);
            while t < secs * 1_000_000 {
                let instance = match spread {
                    Spread::Uniform => rng.below(INSTANCES),
                    Spread::Zipf => {
                        let mut u = rng.unit() * zipf_total;
                        let mut r = 0;
                        while r + 1 < INSTANCES && u > 1.0 / (r + 1) as f64 {
                            u -= 1.0 / (r + 1) as f64;
                            r += 1;
                        }
                        ranks[r]
                    }
                    Spread::Sticky => {
                        while t >= move_at {
                            at = (at + 1 + rng.below(INSTANCES - 1)) % INSTANCES;
                            move_at += rng.gap(20e6);
                        }
                        at
                    }
                };
                reqs.push((t, client, instance));
                t += rng.gap(mean_gap);
            }
        }
    }
    reqs.sort_unstable();
    let keys: Vec<Key> = (0..clients.len())
        .map(|c| Key::new(format!("client-{c}")))
        .collect();
    let mut times = vec![Vec::new(); clients.len()];
    let mut classes = [Class {
        excess: i64::MIN,
        ..Class::default()
    }; 3];
    let calls_before = server.command_count("evalsha") + server.command_count("eval");
    for &(t, client, instance) in &reqs {
        time.advance_to(T0 + t).await;
        let (backend, limiter) = &fleet[instance];
        let got = allowed(limiter.as_ref(), &keys[client]).await;
        let want = allowed(ideal.as_ref(), &keys[client]).await;
        backend.flush().await;
        let c = &mut classes[clients[client]];
        c.requests += 1;
        c.admitted += u64::from(got);
        c.ideal += u64::from(want);
        if got {
            times[client].push(t);
        }
    }
    let calls = server.command_count("evalsha") + server.command_count("eval") - calls_before;
    let (mut leased_n, mut returned, mut fetches) = (0, 0, 0);
    for (b, _) in &fleet {
        let st = b.lease_stats();
        fetches += st.fetches;
        leased_n += st.leased;
        returned += st.returned;
    }
    let admitted: u64 = classes.iter().map(|c| c.admitted).sum();
    let held = leased_n
        .checked_sub(returned)
        .and_then(|kept| kept.checked_sub(admitted))
        .expect("admitted or given back more than was leased: tokens counted twice");
    for (client, times) in times.iter().enumerate() {
        let c = &mut classes[clients[client]];
        c.excess = c.excess.max(worst_excess(times, burst, limit, period));
    }
    Run {
        classes,
        calls,
        requests: reqs.len() as u64,
        leased: leased_n,
        returned,
        fetches,
        held,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_instances_give_clients_at_twice_their_quota_what_a_perfect_bucket_gives() {
    // 60 a minute (a bucket of 60), the default batch of 50 and low water
    // of 10; four clients of each spread, each at 120 a minute for five
    // simulated minutes.
    let run = six_instances(Quota::per_minute(60), LeaseOptions::default(), 4, 300).await;
    run.print("leased, 6 instances, 60/min, clients at 2x for 5 min");
    // Before drained keys leased by their demand: 0.877 (uniform), 0.856
    // (Zipf) and 0.955 (sticky) of a perfect bucket, at 0.243 Redis calls
    // per request.
    for (spread, c) in SPREADS.iter().zip(&run.classes) {
        assert!(
            c.ratio() >= 0.95,
            "{spread:?}: {} admitted, a perfect bucket {}",
            c.admitted,
            c.ideal
        );
        // No window above a perfect bucket's allowance (see the module
        // docs: the overshoot bound, 6 x (50 + 10), is out of these
        // clients' reach, so it would not catch a regression).
        assert!(c.excess <= 0, "{spread:?}: {c:?}");
    }
    // At most half as many calls again as before (0.243 x 1.5).
    assert!(
        run.calls_per_request() <= 0.364,
        "{:.4} calls per request",
        run.calls_per_request()
    );
}

/// The same over other quotas and lengths: a longer run, with
/// `THROTTLE_FLEET_LONG=1` (as the fleet scenario suite's long runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_instances_over_other_quotas() {
    if !std::env::var("THROTTLE_FLEET_LONG").is_ok_and(|v| v == "1") {
        return;
    }
    for (name, quota, secs) in [
        ("100/min for 3 min", Quota::per_minute(100), 180),
        ("100/min for 5 min", Quota::per_minute(100), 300),
        ("100/min for 10 min", Quota::per_minute(100), 600),
        ("300/min for 2 min", Quota::per_minute(300), 120),
        (
            "100 per 10 s for 1 min",
            Quota::new(100, Duration::from_secs(10)),
            60,
        ),
        (
            "1,000 per 10 s for 1 min",
            Quota::new(1_000, Duration::from_secs(10)),
            60,
        ),
    ] {
        let run = six_instances(quota, LeaseOptions::default(), 4, secs).await;
        run.print(&format!("leased, 6 instances, {name}, clients at 2x"));
    }
}
