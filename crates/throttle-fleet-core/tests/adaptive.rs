//! The adaptive limit against a backend with a pool of connections: a
//! simulation on a scripted clock (no sleeps), where the backend's service
//! time steps up threefold and back down, and the limit must settle within
//! 10 s of each step between the pool's size (below it the pool idles) and
//! twice the pool (above it the queue outgrows the pool).
//!
//! The backend: `POOL` connections; a request admitted under the limit
//! takes a free connection, or waits in line for one, and holds it for the
//! service time (±10%). Requests arrive at 1.5 times what the pool can
//! serve at the slower service time, so the limit, not the demand, decides
//! how many run.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use throttle_fleet_core::adaptive::{Vegas, VegasState};

const POOL: u64 = 16;
const FAST_US: u64 = 25_000;
const SLOW_US: u64 = 75_000;

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

/// Each 100 ms from 0 to `end_us`: (time, estimate, probing, queue).
fn run(
    service_us: impl Fn(u64) -> u64,
    arrivals_per_s: u64,
    end_us: u64,
    seed: u64,
) -> Vec<(u64, u64, bool, usize)> {
    let mut vegas = VegasState::new(Vegas::new(), 4 * POOL);
    let mut rng = Lcg(seed);
    // (end time, admitted at): requests holding a connection.
    let mut running: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut waiting: VecDeque<u64> = VecDeque::new();
    let mut in_flight = 0u64;
    let gap = 1_000_000 / arrivals_per_s;
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
                next_arrival += rng.jitter(gap);
                if in_flight < vegas.limit() {
                    in_flight += 1;
                    if (running.len() as u64) < POOL {
                        running.push(Reverse((t + rng.jitter(service_us(t)), t)));
                    } else {
                        waiting.push_back(t);
                    }
                }
                t
            }
        };
        while next_report <= now {
            report.push((
                next_report,
                vegas.estimate(),
                vegas.probing(),
                waiting.len(),
            ));
            next_report += 100_000;
        }
        if now >= end_us {
            return report;
        }
    }
}

fn service(t: u64) -> u64 {
    if (30_000_000..60_000_000).contains(&t) {
        SLOW_US
    } else {
        FAST_US
    }
}

/// The first time from `from_us` on after which every report up to
/// `to_us` (probe windows aside) has the estimate within the band.
fn settled_at(report: &[(u64, u64, bool, usize)], from_us: u64, to_us: u64) -> Option<u64> {
    let in_band = |e: u64| (POOL..=2 * POOL).contains(&e);
    let mut settled = None;
    for &(t, estimate, probing, _) in report.iter().filter(|r| r.0 >= from_us && r.0 < to_us) {
        if probing {
            continue;
        }
        match (in_band(estimate), settled) {
            (true, None) => settled = Some(t),
            (false, _) => settled = None,
            _ => {}
        }
    }
    settled
}

#[test]
fn the_limit_settles_within_ten_seconds_of_each_step_in_service_time() {
    // 1.5 times the pool's capacity at the slow service time.
    let rate = POOL * 1_000_000 / SLOW_US * 3 / 2;
    for seed in 1..=5 {
        let report = run(service, rate, 90_000_000, seed);
        for (step, next) in [
            (0, 30_000_000),
            (30_000_000, 60_000_000),
            (60_000_000, 90_000_000),
        ] {
            let at = settled_at(&report, step, next).unwrap_or_else(|| {
                panic!(
                    "seed {seed}: never settled after the step at {} s: {:?}",
                    step / 1_000_000,
                    &report[(step / 100_000) as usize..(next / 100_000) as usize]
                )
            });
            assert!(
                at - step <= 10_000_000,
                "seed {seed}: settled {} ms after the step at {} s",
                (at - step) / 1_000,
                step / 1_000_000
            );
        }
        // Once settled, the backend's queue stays under its pool.
        let worst = report
            .iter()
            .filter(|r| r.0 % 30_000_000 >= 10_000_000)
            .map(|r| r.3)
            .max()
            .unwrap();
        assert!(worst as u64 <= POOL, "seed {seed}: a queue of {worst}");
    }
}

#[test]
fn a_backend_that_is_not_the_bottleneck_does_not_grow_the_limit() {
    // A tenth of the pool's capacity: in flight stays far under the limit.
    let rate = POOL * 1_000_000 / FAST_US / 10;
    let report = run(|_| FAST_US, rate, 20_000_000, 1);
    let last = report.last().unwrap();
    assert_eq!(last.1, Vegas::new().initial_limit(4 * POOL), "{report:?}");
}
