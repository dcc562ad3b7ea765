//! Driving a meter over a timeline and measuring what got through.

use throttle_fleet_core::algorithm::{
    Algorithm, Concurrency, FixedWindow, Gcra, Meter, SlidingWindowCounter, SlidingWindowLog, Step,
};
use throttle_fleet_core::clock::ManualClock;
use throttle_fleet_core::memory::MemoryBackend;
use throttle_fleet_core::{ConfigError, Key, Quota, Rule};

use super::{Event, Summary, period_us};

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
        self.worst_window(window_us).0
    }

    /// The most cost admitted within any half-open interval `[t, t +
    /// window)`, and the earliest `t` (an admitted event's time) where it
    /// happens; `(0, 0)` when nothing was admitted.
    pub fn worst_window(&self, window_us: u64) -> (u64, u64) {
        let mut admitted: Vec<Event> = self.admitted().collect();
        admitted.sort_by_key(|e| e.at_us);
        let (mut best, mut best_at, mut sum, mut lo) = (0, 0, 0, 0);
        for hi in 0..admitted.len() {
            sum += admitted[hi].cost;
            while admitted[hi].at_us - admitted[lo].at_us >= window_us {
                sum -= admitted[lo].cost;
                lo += 1;
            }
            if sum > best {
                (best, best_at) = (sum, admitted[lo].at_us);
            }
        }
        (best, best_at)
    }

    /// The run measured against `quota`: see [`Summary`].
    pub fn summary(&self, quota: Quota) -> Summary {
        let (worst_window, worst_window_start_us) = self.worst_window(period_us(quota));
        let admitted = self.admitted_cost();
        let offered: u64 = self.steps.iter().map(|(e, _)| e.cost).sum();
        Summary {
            requests: self.steps.len() as u64,
            admitted,
            denied: offered - admitted,
            limit: quota.limit(),
            period_us: period_us(quota),
            worst_window,
            worst_window_start_us,
            first_denial_us: self
                .steps
                .iter()
                .find(|(_, s)| !s.allowed)
                .map(|(e, _)| e.at_us),
        }
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

/// One algorithm's run over a timeline, decided by the memory backend on a
/// manual clock: see [`simulate`].
#[derive(Debug, Clone)]
pub struct Simulation {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The quota it ran with (without a burst, for the window algorithms).
    pub quota: Quota,
    /// The timeline: each request with its decision (allowed or denied,
    /// remaining, retry-after, and for a leaky bucket the delay).
    pub run: Run,
    /// The run measured against the quota.
    pub summary: Summary,
}

/// Runs `events` for one key against `algorithm` with `quota`, the way the
/// middleware decides: through a [`MemoryBackend`] whose [`ManualClock`] is
/// set to each request's arrival before the check. A request that arrives
/// before the one ahead of it is decided at the later time, as the clock
/// cannot go back (the timeline records the time used).
///
/// The window algorithms have no burst: a quota's burst applies to the
/// buckets only and is dropped for the others, so one quota can be run
/// against all five ([`Algorithm::ALL`]).
///
/// ```
/// use throttle_fleet_core::{algorithm::Algorithm, Quota};
/// use throttle_fleet_test_support::sim;
///
/// let q = Quota::per_minute(100);
/// let attack = sim::Pattern::EdgeBurst.events(q);
/// let fw = sim::simulate(Algorithm::FixedWindow, q, &attack)?;
/// assert_eq!(fw.summary.worst_window, 200); // twice the quota within a minute
/// let log = sim::simulate(Algorithm::SlidingWindowLog, q, &attack)?;
/// assert_eq!(log.summary.worst_window, 100);
/// assert_eq!(log.summary.first_denial_us, Some(60_000_000)); // the boundary
/// # Ok::<(), throttle_fleet_core::ConfigError>(())
/// ```
pub fn simulate(
    algorithm: Algorithm,
    quota: Quota,
    events: &[Event],
) -> Result<Simulation, ConfigError> {
    let quota = if algorithm.uses_burst() {
        quota
    } else {
        Quota::new(quota.limit(), quota.period())
    };
    // The rule checks the quota as a rule bound to a backend would, and
    // its errors name the field.
    if algorithm.is_concurrency() {
        Rule::concurrency("sim", quota.limit())
    } else {
        Rule::new("sim", quota).with_algorithm(algorithm)
    }
    .validate()?;
    let run = match algorithm {
        Algorithm::FixedWindow => drive(FixedWindow::new(quota)?, events),
        Algorithm::SlidingWindowLog => drive(SlidingWindowLog::new(quota)?, events),
        Algorithm::SlidingWindowCounter => drive(SlidingWindowCounter::new(quota)?, events),
        Algorithm::TokenBucket => drive(Gcra::token_bucket(quota)?, events),
        Algorithm::LeakyBucket => drive(Gcra::leaky_bucket(quota)?, events),
        Algorithm::Concurrency => drive(Concurrency::new(quota)?, events),
        _ => unreachable!("every algorithm is listed"),
    }?;
    Ok(Simulation {
        algorithm,
        quota,
        summary: run.summary(quota),
        run,
    })
}

/// Runs `events` through `meter` in a memory backend on a clock of its own.
fn drive<M: Meter>(meter: M, events: &[Event]) -> Result<Run, ConfigError> {
    let clock = ManualClock::new(0);
    // One key: the smallest table the backend accepts.
    let limiter = MemoryBackend::with_clock(clock.clone())
        .shards(16)
        .max_keys(16)
        .limiter_for(meter)?;
    let key = Key::new("sim");
    let steps = events
        .iter()
        .map(|e| {
            clock.set(e.at_us);
            let outcome = limiter.check(&key, e.cost);
            let event = Event {
                at_us: outcome.at_us,
                cost: e.cost,
            };
            (event, outcome.step)
        })
        .collect();
    Ok(Run { steps })
}
