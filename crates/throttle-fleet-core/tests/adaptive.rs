//! The adaptive limit against a backend with a pool of connections: a
//! simulation on a scripted clock (no sleeps).
//!
//! The backend: `POOL` connections; a request admitted under the limit
//! takes a free connection, or waits in line for one (the queue, without
//! bound), and holds it for the service time (±10%). The queue drains only
//! while admissions fall below what the pool serves. The rule's ceiling is
//! four times the pool, so that the algorithm, not the ceiling, keeps the
//! queue short.
//!
//! The traffic is the flash-crowd bench's overload
//! (`benches/flash-crowd`): arrivals at 3,000 a second, 4.7 times what
//! the pool serves at 25 ms, 14 times at 75 ms. Under it the limit must
//! settle between the pool's size (below it the pool idles) and one and a
//! half times the pool, within 10 s of a step in service time, keep the
//! backend busy and its queue under the pool. With a reserve for
//! critical requests (8% of the crowd, the bench's `/book`), the limit
//! rides higher (the reserve keeps slots that sheddable requests may not
//! fill), the queue stays under the pool, and the probes, which hold
//! every class to the minimum, cost critical requests less than 0.5%.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use throttle_fleet_core::adaptive::{Vegas, VegasState};
use throttle_fleet_core::{Class, InFlightLimit};

const POOL: u64 = 16;
const CEILING: u64 = 4 * POOL;
const FAST_US: u64 = 25_000;
const SLOW_US: u64 = 75_000;
/// The flash-crowd bench's peak: 900 genuine and 2,100 bot requests a
/// second.
const CROWD_PER_S: u64 = 3_000;
/// The band the limit settles in: the pool to one and a half times it.
const BAND: std::ops::RangeInclusive<u64> = POOL..=POOL * 3 / 2;
/// The goals are a queue of at most the pool, the pool 90% busy
/// and 10 s to settle; the guide claims what the simulation measured, and
/// the tests hold it to that, so that a regression short of the goals
/// (the ramp's queue at 16 with the first fix, settling in 9 s) still
/// shows: the longest queue, the least busy share and the longest
/// settling.
const QUEUE_CLAIMED: u64 = 10;
const BUSY_CLAIMED: f64 = 0.99;
const SETTLED_CLAIMED_US: u64 = 3_000_000;

/// A small deterministic generator: the same run every time.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// `us` give or take 10%.
    fn jitter(&mut self, us: u64) -> u64 {
        us * (900 + self.next() % 201) / 1_000
    }
}

/// What the run looked like at the end of each 100 ms.
#[derive(Debug, Clone, Copy)]
struct Report {
    t_us: u64,
    /// The limit admissions used.
    limit: u64,
    /// The algorithm's estimate (the limit outside probes).
    estimate: u64,
    probing: bool,
    /// Requests waiting for a connection.
    queue: usize,
    /// Connections in use.
    busy: usize,
    /// Critical requests so far: arrived, admitted.
    critical: (u64, u64),
}

/// Who asks: a share of critical requests, the rest sheddable, under a
/// rule with `reserve` slots kept per class step (0: no reserve, classes
/// alike).
#[derive(Clone, Copy)]
struct Classes {
    critical_percent: u64,
    reserve: u64,
}

const ALIKE: Classes = Classes {
    critical_percent: 0,
    reserve: 0,
};

/// The simulation from 0 to `end_us`: arrivals every `1 / rate(t)` s
/// (±10%), each served for `service(t)` µs (±10%) under `params`.
fn run(
    params: Vegas,
    classes: Classes,
    service_us: impl Fn(u64) -> u64,
    rate_per_s: impl Fn(u64) -> u64,
    end_us: u64,
    seed: u64,
) -> Vec<Report> {
    let mut vegas = VegasState::new(params, CEILING);
    let rule = InFlightLimit {
        reserve: classes.reserve,
        adaptive: Some(params),
        ..InFlightLimit::new(CEILING)
    };
    let mut critical = (0, 0);
    let mut rng = Lcg(seed);
    // (end time, admitted at): requests holding a connection.
    let mut running: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut waiting: VecDeque<u64> = VecDeque::new();
    let mut in_flight = 0u64;
    let mut next_arrival = 0;
    let mut next_report = 0;
    let mut report = Vec::new();
    loop {
        let end = running.peek().map(|Reverse((t, _))| *t);
        let now = match end {
            Some(t) if t <= next_arrival => {
                let Reverse((t, since)) = running.pop().unwrap();
                vegas.sample(t, t - since, in_flight);
                in_flight -= 1;
                if let Some(admitted) = waiting.pop_front() {
                    running.push(Reverse((t + rng.jitter(service_us(t)), admitted)));
                }
                t
            }
            _ => {
                let t = next_arrival;
                next_arrival += rng.jitter(1_000_000 / rate_per_s(t).max(1));
                let class = if rng.next() % 100 < classes.critical_percent {
                    critical.0 += 1;
                    Class::Critical
                } else {
                    Class::Sheddable
                };
                if in_flight < rule.limit_for(class, vegas.limit()) {
                    in_flight += 1;
                    if class == Class::Critical {
                        critical.1 += 1;
                    }
                    if (running.len() as u64) < POOL {
                        running.push(Reverse((t + rng.jitter(service_us(t)), t)));
                    } else {
                        waiting.push_back(t);
                    }
                } else {
                    vegas.denied();
                }
                t
            }
        };
        while next_report <= now {
            report.push(Report {
                t_us: next_report,
                limit: vegas.limit(),
                estimate: vegas.estimate(),
                probing: vegas.probing(),
                queue: waiting.len(),
                busy: running.len(),
                critical,
            });
            next_report += 100_000;
        }
        if now >= end_us {
            return report;
        }
    }
}

/// 25 ms, 75 ms from 30 s, 25 ms again from 60 s.
fn stepped(t: u64) -> u64 {
    if (30_000_000..60_000_000).contains(&t) {
        SLOW_US
    } else {
        FAST_US
    }
}

/// The first time from `from_us` on after which every report up to
/// `to_us` (probes aside) has the estimate within [`BAND`].
fn settled_at(report: &[Report], from_us: u64, to_us: u64) -> Option<u64> {
    let mut settled = None;
    for r in report
        .iter()
        .filter(|r| r.t_us >= from_us && r.t_us < to_us)
    {
        if r.probing {
            continue;
        }
        match (BAND.contains(&r.estimate), settled) {
            (true, None) => settled = Some(r.t_us),
            (false, _) => settled = None,
            _ => {}
        }
    }
    settled
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// The reports as `time s: limit/queue`, probes marked `p`: short enough
/// for a failure's message.
fn sketch(report: &[Report]) -> String {
    report
        .iter()
        .map(|r| {
            format!(
                "{:.1}:{}{}/{}",
                r.t_us as f64 / 1e6,
                r.limit,
                if r.probing { "p" } else { "" },
                r.queue
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn window(report: &[Report], from_us: u64, to_us: u64) -> &[Report] {
    &report[(from_us / 100_000) as usize..(to_us / 100_000) as usize]
}

#[test]
fn under_the_crowd_the_limit_settles_between_the_pool_and_half_again() {
    // The bench's crowd: 150 a second for 3 s, a 3 s ramp to 3,000 a
    // second, held for 24 s.
    let crowd = |t: u64| match t {
        0..3_000_000 => 150,
        3_000_000..6_000_000 => 150 + (CROWD_PER_S - 150) * (t - 3_000_000) / 3_000_000,
        _ => CROWD_PER_S,
    };
    for seed in 1..=5 {
        let report = run(Vegas::new(), ALIKE, |_| FAST_US, crowd, 30_000_000, seed);
        // From 10 s on: the crowd at its peak, the limit found.
        let peak = window(&report, 10_000_000, 30_000_000);
        let limit = median(peak.iter().map(|r| r.limit).collect());
        assert!(
            BAND.contains(&limit),
            "seed {seed}: the limit's median {limit}: {}",
            sketch(peak)
        );
        // The queue under the pool from the first request on: the ramp
        // too, where a limit that grew while the pool kept up meets the
        // crowd.
        let queue = report.iter().map(|r| r.queue).max().unwrap() as u64;
        assert!(
            queue <= QUEUE_CLAIMED,
            "seed {seed}: a queue of {queue}: {}",
            sketch(&report)
        );
        // Busy: the pool's use, probes included.
        let busy: usize = peak.iter().map(|r| r.busy).sum();
        let share = busy as f64 / (peak.len() as u64 * POOL) as f64;
        assert!(
            share >= BUSY_CLAIMED,
            "seed {seed}: the pool {share:.3} busy"
        );
    }
}

#[test]
fn under_the_crowd_a_reserve_serves_the_critical_requests() {
    // Critical requests are 8% of the crowd (250 a second of 3,000, the
    // bench's `/book`). A reserve of 8 is the bench's recommended policy;
    // one of 24 leaves sheddable requests a quarter of the limit, so the
    // limit must rise well above the pool for the pool to be used.
    for reserve in [8, 24] {
        let classes = Classes {
            critical_percent: 8,
            reserve,
        };
        for seed in 1..=5 {
            let report = run(
                Vegas::new(),
                classes,
                |_| FAST_US,
                |_| CROWD_PER_S,
                30_000_000,
                seed,
            );
            let last = report.last().unwrap();
            let (arrived, admitted) = last.critical;
            assert!(
                admitted * 1_000 >= arrived * 995,
                "reserve {reserve}, seed {seed}: {admitted} of {arrived} critical requests admitted"
            );
            let queue = report.iter().map(|r| r.queue).max().unwrap() as u64;
            assert!(
                queue <= QUEUE_CLAIMED,
                "reserve {reserve}, seed {seed}: a queue of {queue}: {}",
                sketch(&report)
            );
            let peak = window(&report, 10_000_000, 30_000_000);
            let busy: usize = peak.iter().map(|r| r.busy).sum();
            let share = busy as f64 / (peak.len() as u64 * POOL) as f64;
            assert!(
                share >= 0.9,
                "reserve {reserve}, seed {seed}: the pool {share:.3} busy"
            );
        }
    }
}

#[test]
fn the_limit_settles_within_seconds_of_each_step_in_service_time() {
    for seed in 1..=5 {
        let report = run(
            Vegas::new(),
            ALIKE,
            stepped,
            |_| CROWD_PER_S,
            90_000_000,
            seed,
        );
        for (step, next) in [
            (0, 30_000_000),
            (30_000_000, 60_000_000),
            (60_000_000, 90_000_000),
        ] {
            let at = settled_at(&report, step, next).unwrap_or_else(|| {
                panic!(
                    "seed {seed}: never settled after the step at {} s: {}",
                    step / 1_000_000,
                    sketch(window(&report, step, next))
                )
            });
            assert!(
                at - step <= SETTLED_CLAIMED_US,
                "seed {seed}: settled {} ms after the step at {} s: {}",
                (at - step) / 1_000,
                step / 1_000_000,
                sketch(window(&report, step, next))
            );
        }
        // Once settled, the backend's queue stays short.
        let worst = report
            .iter()
            .filter(|r| r.t_us % 30_000_000 >= 10_000_000)
            .map(|r| r.queue)
            .max()
            .unwrap();
        assert!(
            worst as u64 <= QUEUE_CLAIMED,
            "seed {seed}: a queue of {worst}"
        );
    }
}

#[test]
fn a_backend_that_is_not_the_bottleneck_does_not_grow_the_limit() {
    // A tenth of the pool's capacity: in flight stays far under the limit.
    let rate = POOL * 1_000_000 / FAST_US / 10;
    let report = run(Vegas::new(), ALIKE, |_| FAST_US, |_| rate, 20_000_000, 1);
    let last = report.last().unwrap();
    assert_eq!(
        last.estimate,
        Vegas::new().initial_limit(CEILING),
        "{report:?}"
    );
}

/// Feeds `n` requests that each ended `gap_us` after the last, after
/// `rtt_us`, with `in_flight` in flight; returns the clock.
fn feed(
    v: &mut VegasState,
    mut now_us: u64,
    n: u32,
    gap_us: u64,
    rtt_us: u64,
    in_flight: u64,
) -> u64 {
    for _ in 0..n {
        now_us += gap_us;
        v.sample(now_us, rtt_us, in_flight);
    }
    now_us
}

#[test]
fn a_probe_holds_the_limit_at_the_minimum_and_measures_only_what_it_admitted() {
    let mut v = VegasState::new(Vegas::new(), CEILING);
    // A first busy window: measured under load, so a probe follows.
    let now = feed(&mut v, 0, 20, 5_500, 30_000, 20);
    assert!(v.probing());
    assert_eq!((v.limit(), v.estimate()), (3, 20));
    // Requests admitted before the probe, that waited in the queue, end
    // with long latencies: not samples of the probe.
    let now = feed(&mut v, now, 10, 1_000, 60_000, 20);
    assert!(v.probing());
    // Requests the probe admitted: 20 ms, the latency without load.
    let now = feed(&mut v, now, 5, 20_000, 20_000, 3);
    assert!(!v.probing());
    assert_eq!(v.limit(), 20);
    // A window at 30 ms with 20 in flight: a queue of ⌈20 × (1 − 20/30)⌉
    // = 7 by a latency without load of 20 ms (the probe's), more than 6:
    // the limit comes down by one. (By 25 ms, the first window's, the
    // queue would be 4, and the limit would stay; by 60 ms, the queued
    // requests', the latency would be below the one without load, and a
    // probe would follow.)
    feed(&mut v, now, 30, 5_500, 30_000, 20);
    assert!(!v.probing());
    assert_eq!(v.limit(), 19);
}

#[test]
fn a_probe_waits_for_a_busy_window_and_gives_up_when_nothing_is_admitted() {
    let mut v = VegasState::new(Vegas::new().probe_every(2), CEILING);
    // Fewer than half the limit in flight: no probe, however many windows.
    let now = feed(&mut v, 0, 200, 5_500, 25_000, 5);
    assert!(!v.probing());
    // Busy: the first busy window probes (the due one).
    let now = feed(&mut v, now, 20, 5_500, 25_000, 20);
    assert!(v.probing());
    // Requests that hold their slots for longer than the probe lasts: it
    // gives up after 10 windows (1 s) and the limit comes back.
    let now = feed(&mut v, now, 9, 100_000, 5_000_000, 20);
    assert!(v.probing());
    feed(&mut v, now, 2, 100_000, 5_000_000, 20);
    assert!(!v.probing());
    assert_eq!(v.limit(), 20);
}

#[test]
fn a_probe_that_gives_up_before_any_latency_is_known_is_not_repeated_at_once() {
    let mut v = VegasState::new(Vegas::new(), CEILING);
    // Requests of 5 s, the first window busy: a probe, which nothing
    // admitted under it outlasts; it gives up after 1 s.
    let now = feed(&mut v, 0, 20, 5_500, 5_000_000, 20);
    assert!(v.probing());
    let now = feed(&mut v, now, 11, 100_000, 5_000_000, 20);
    assert!(!v.probing());
    // The busy windows after it (of requests admitted since) keep the
    // latency measured under load rather than probing again, and holding
    // the limit at its minimum, for ever.
    let mut now = now;
    for _ in 0..120 {
        now = feed(&mut v, now, 1, 55_000, 5_000_000, 20);
        assert!(!v.probing(), "a probe again at {now} µs");
    }
    assert_eq!(v.limit(), 20);
}
