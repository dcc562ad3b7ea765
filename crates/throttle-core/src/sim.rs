//! A small traffic simulator: drives any [`Meter`] with a synthetic timeline
//! for one key and measures what got through. Used by the property tests and
//! to produce the figures quoted in the documentation.
//!
//! ```
//! use throttle_core::{Quota, algorithm::FixedWindow, sim};
//!
//! // 100 requests in the last 10 ms of a window, 100 in the first 10 ms of the next.
//! let fw = FixedWindow::new(Quota::per_minute(100)).unwrap();
//! let timeline = sim::edge_burst(60_000_000, 100, 10_000);
//! let run = sim::run(&fw, &timeline);
//! assert_eq!(run.admitted_cost(), 200);
//! assert_eq!(run.max_in_any_window(60_000_000), 200); // the fixed-window boundary burst
//! ```

use crate::algorithm::{Meter, Step};

/// One request: when (microseconds since the epoch) and its cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// When the request arrives.
    pub at_us: u64,
    /// Its cost.
    pub cost: u64,
}

/// What a run decided for each event.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// Each event with the step it got, in order.
    pub steps: Vec<(Event, Step)>,
}

impl Run {
    /// Total cost admitted.
    pub fn admitted_cost(&self) -> u64 {
        self.admitted().map(|e| e.cost).sum()
    }

    /// The admitted events. For shaping meters (leaky bucket) an event's
    /// time is when it leaves, after its delay.
    pub fn admitted(&self) -> impl Iterator<Item = Event> + '_ {
        self.steps
            .iter()
            .filter(|(_, s)| s.allowed)
            .map(|(e, s)| Event {
                at_us: e.at_us + s.delay_us,
                cost: e.cost,
            })
    }

    /// The most cost admitted within any half-open interval `[t, t + window)`.
    pub fn max_in_any_window(&self, window_us: u64) -> u64 {
        let mut admitted: Vec<Event> = self.admitted().collect();
        admitted.sort_by_key(|e| e.at_us);
        let (mut best, mut sum, mut lo) = (0, 0, 0);
        for hi in 0..admitted.len() {
            sum += admitted[hi].cost;
            while admitted[hi].at_us - admitted[lo].at_us >= window_us {
                sum -= admitted[lo].cost;
                lo += 1;
            }
            best = best.max(sum);
        }
        best
    }

    /// The most cost admitted within one aligned window `[k * w, (k + 1) * w)`.
    pub fn max_in_aligned_window(&self, window_us: u64) -> u64 {
        let mut per: std::collections::BTreeMap<u64, u64> = Default::default();
        for e in self.admitted() {
            *per.entry(e.at_us / window_us).or_default() += e.cost;
        }
        per.values().copied().max().unwrap_or(0)
    }
}

/// Runs `meter` over `events` for a single key, from a fresh state.
pub fn run<M: Meter>(meter: &M, events: &[Event]) -> Run {
    let mut state = M::State::default();
    Run {
        steps: events
            .iter()
            .map(|&e| (e, meter.acquire(&mut state, e.at_us, e.cost)))
            .collect(),
    }
}

/// `count` requests of cost 1, evenly spaced over `duration_us`, from `start_us`.
pub fn steady(start_us: u64, count: u64, duration_us: u64) -> Vec<Event> {
    (0..count)
        .map(|i| Event {
            at_us: start_us + i * duration_us / count.max(1),
            cost: 1,
        })
        .collect()
}

/// `per_side` requests spread over the last `spread_us` before the boundary
/// `boundary_us`, then `per_side` more over the first `spread_us` after it:
/// the fixed-window boundary attack.
pub fn edge_burst(boundary_us: u64, per_side: u64, spread_us: u64) -> Vec<Event> {
    let mut events = steady(boundary_us - spread_us, per_side, spread_us);
    events.extend(steady(boundary_us, per_side, spread_us));
    events
}
