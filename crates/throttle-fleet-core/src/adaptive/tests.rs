use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::{Adaptive, COUNT_SHIFT, RTT_MAX_US, SUM_MASK, Vegas, VegasState};

/// A small deterministic generator.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

/// The same requests, one at a time, through the rule's `Adaptive` (its
/// samples added up in atomics, folded once per window) and through a
/// `VegasState` fed every sample: they decide the same limit after every
/// admission, denial and end. A backend of 16 connections whose latency
/// grows with its queue, a crowd well above what it serves, and a few
/// latencies too long for the atomics (the locked path).
fn same_limits(seed: u64, params: Vegas, long_every: u64) {
    const POOL: u64 = 16;
    const CEILING: u64 = 64;
    let adaptive = Adaptive::new(params, CEILING);
    let mut reference = VegasState::new(params, CEILING);
    let mut rng = Lcg(seed);
    // (end, admitted at)
    let mut running: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut in_flight = 0;
    let start = 1_000_000_000_000;
    let mut next_arrival = start;
    let (mut probes, mut moves) = (0, 0);
    let mut last = (reference.limit(), reference.probing());
    while next_arrival < start + 40_000_000 {
        match running.peek() {
            Some(Reverse((end, _))) if *end <= next_arrival => {
                let Reverse((end, mut since)) = running.pop().unwrap();
                if long_every > 0 && rng.next().is_multiple_of(long_every) {
                    since = end - RTT_MAX_US - 1 - rng.next() % 1_000;
                }
                reference.sample(end, end - since, in_flight);
                adaptive.ended(1, since, end);
                in_flight -= 1;
            }
            _ => {
                let t = next_arrival;
                next_arrival += 100 + rng.next() % 500;
                if in_flight < reference.limit() {
                    in_flight += 1;
                    adaptive.admitted(1);
                    let queue = in_flight.saturating_sub(POOL);
                    // 25 ms (±20%), 75 ms from 15 s to 30 s, and
                    // 1.5 ms more per request waiting.
                    let base = if (15_000_000..30_000_000).contains(&(t - start)) {
                        75_000
                    } else {
                        25_000
                    };
                    let service = base * 4 / 5 + rng.next() % (base * 2 / 5) + queue * 1_500;
                    running.push(Reverse((t + service, t)));
                } else {
                    reference.denied();
                    adaptive.denied();
                }
            }
        }
        assert_eq!(
            (adaptive.limit(), adaptive.probing.load(Relaxed)),
            (reference.limit(), reference.probing()),
            "seed {seed}"
        );
        let now = (reference.limit(), reference.probing());
        if now != last {
            moves += 1;
            probes += usize::from(now.1 && !last.1);
            last = now;
        }
    }
    // The run moved the limit, and probed, or it proved little.
    assert!(moves > 20 && probes >= 2, "{moves} moves, {probes} probes");
}

#[test]
fn the_atomics_decide_as_every_sample_does() {
    for seed in 1..=5 {
        same_limits(seed, Vegas::new(), 0);
        same_limits(
            seed,
            Vegas::new()
                .probe_every(20)
                .window(Duration::from_millis(20)),
            0,
        );
    }
}

#[test]
fn latencies_too_long_for_the_atomics_decide_as_every_sample_does() {
    for seed in 1..=3 {
        same_limits(seed, Vegas::new(), 50);
    }
}

/// A window that lasts longer than the test: every sample stays pending.
fn unfolded() -> Adaptive {
    Adaptive::new(Vegas::new().window(Duration::from_secs(60)), 64)
}

#[test]
fn concurrent_ends_lose_no_sample() {
    const THREADS: u64 = 4;
    const ENDS: u64 = 200_000;
    let adaptive = unfolded();
    adaptive.admitted(THREADS * ENDS);
    let ready = std::sync::Barrier::new(THREADS as usize);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (adaptive, ready) = (&adaptive, &ready);
            s.spawn(move || {
                ready.wait();
                for i in 0..ENDS {
                    // Latencies of 1 to 7 µs, ended within the window.
                    adaptive.ended(1, 1_000, 1_001 + (t + i) % 7 + 1);
                }
            });
        }
    });
    let sums = adaptive.pending.sums.load(Relaxed);
    let expected: u64 = (0..THREADS)
        .map(|t| (0..ENDS).map(|i| (t + i) % 7 + 2).sum::<u64>())
        .sum();
    assert_eq!(sums >> COUNT_SHIFT, THREADS * ENDS);
    assert_eq!(sums & SUM_MASK, expected);
    assert_eq!(adaptive.in_flight.load(Relaxed), 0);
    assert_eq!(adaptive.pending.in_flight.load(Relaxed), THREADS * ENDS);
}

#[test]
fn a_window_too_full_for_the_atomics_is_folded_under_the_lock() {
    let adaptive = unfolded();
    adaptive.admitted(5_000);
    // 4,100 latencies of 2^32 µs: more than the word's 2^44.
    for _ in 0..4_100 {
        adaptive.ended(1, 0, RTT_MAX_US);
    }
    let sums = adaptive.pending.sums.load(Relaxed);
    let folded = adaptive.pending.folded.load(Relaxed);
    assert!(folded > 0, "folded under the lock");
    assert_eq!((sums >> COUNT_SHIFT) + folded, 4_100);
    assert_eq!(adaptive.state.lock().window().1 as u64, folded);
}
