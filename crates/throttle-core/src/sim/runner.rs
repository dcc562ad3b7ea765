//! Driving a meter over a timeline and measuring what got through.

use crate::algorithm::{Meter, Step};

use super::Event;

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
