//! Property tests: random request timelines (increasing timestamps with gaps
//! that include 0, costs 1 to 3) against random small quotas, checked
//! against each algorithm's guarantee and, where one exists, against a naive
//! reference model written independently here.

use std::collections::BTreeMap;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use throttle_fleet_core::Quota;
use throttle_fleet_core::algorithm::{FixedWindow, Gcra, SlidingWindowCounter, SlidingWindowLog};
use throttle_fleet_core::algorithm::{Meter, Step};
use throttle_fleet_test_support::sim::{self, Event, Run};

/// 2023-11-14T22:00:00Z in microseconds; timelines start a random offset
/// after it, so windows are not aligned with the first request.
const BASE: u64 = 1_699_999_200_000_000;

/// A quota for the window algorithms: `limit` per `period_us`.
#[derive(Debug, Clone, Copy)]
struct Window {
    limit: u64,
    period_us: u64,
}

impl Window {
    fn quota(self) -> Quota {
        Quota::new(self.limit, Duration::from_micros(self.period_us))
    }
}

/// A quota for the buckets: `limit` per `period_us`, holding `burst`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    limit: u64,
    period_us: u64,
    burst: u64,
}

impl Bucket {
    fn quota(self) -> Quota {
        Quota::new(self.limit, Duration::from_micros(self.period_us)).with_burst(self.burst)
    }
}

/// One request of a generated client: how long after the previous one it
/// comes, its cost, and whether after a denial it comes back exactly when
/// told to instead (which puts requests right on the boundaries).
#[derive(Debug, Clone, Copy)]
struct Planned {
    gap: u64,
    cost: u64,
    follow: bool,
}

/// A client's requests, from `start`.
#[derive(Debug, Clone)]
struct Plan {
    start: u64,
    requests: Vec<Planned>,
}

/// Increasing timestamps: runs of simultaneous requests, microsecond gaps,
/// gaps of a fraction of the period, of exactly a period (give or take a
/// microsecond) and idle gaps of up to two periods.
fn plan(period_us: u64) -> impl Strategy<Value = Plan> {
    let gap = prop_oneof![
        3 => Just(0u64),
        2 => 1u64..=5,
        3 => 0..=period_us / 2,
        1 => prop::sample::select(vec![period_us - 1, period_us, period_us + 1]),
        1 => 0..=2 * period_us,
    ];
    let request = (gap, 1u64..=3, prop::bool::weighted(0.3))
        .prop_map(|(gap, cost, follow)| Planned { gap, cost, follow });
    (0..2 * period_us, prop::collection::vec(request, 1..=60)).prop_map(|(offset, requests)| Plan {
        start: BASE + offset,
        requests,
    })
}

fn window_case() -> impl Strategy<Value = (Window, Plan)> {
    (1u64..=6, 1_000u64..=20_000)
        .prop_flat_map(|(limit, period_us)| (Just(Window { limit, period_us }), plan(period_us)))
}

fn bucket_case() -> impl Strategy<Value = (Bucket, Plan)> {
    (1u64..=6, 1_000u64..=20_000, prop::option::of(1u64..=8)).prop_flat_map(
        |(limit, period_us, burst)| {
            let burst = burst.unwrap_or(limit);
            (
                Just(Bucket {
                    limit,
                    period_us,
                    burst,
                }),
                plan(period_us),
            )
        },
    )
}

/// Runs `m` for the client of `plan` from a fresh state, like `sim::run`,
/// and checks every step against the state it started from:
///
/// - a denial's `retry_after_us` is exact: the same request is allowed at
///   `now + retry` and still denied at `now + retry - 1` (a cost above the
///   capacity can never fit and is told to wait one period);
/// - `remaining` is exact: that much more fits right after the step, one
///   more does not;
/// - at `now + reset_us` the key is back to its full allowance, and, when
///   `exact_reset`, not a microsecond earlier;
/// - from `idle_at` on, the state behaves like a fresh key.
fn checked_run<M: Meter>(
    m: &M,
    plan: &Plan,
    period_us: u64,
    exact_reset: bool,
) -> Result<Run, TestCaseError>
where
    M::State: Clone,
{
    let mut st = M::State::default();
    // The same run as the memory backend makes it for a meter that packs
    // its states: every step decided on the state unpacked from one word,
    // and packed again.
    let origin = plan.start;
    let mut word = m.pack(&M::State::default(), origin);
    let mut run = Run::default();
    for req in &plan.requests {
        let at_us = match run.steps.last() {
            None => plan.start,
            Some((last, s)) if req.follow && !s.allowed => last.at_us + s.retry_after_us,
            Some((last, _)) => last.at_us + req.gap,
        };
        let e = Event {
            at_us,
            cost: req.cost,
        };
        let before = st.clone();
        let s = m.acquire(&mut st, e.at_us, e.cost);
        let now = e.at_us;
        if m.packs() {
            let mut unpacked = m.unpack(word, origin);
            let told = m.acquire(&mut unpacked, now, e.cost);
            word = m.pack(&unpacked, origin);
            prop_assert_eq!(told, s, "{:?}: the packed state disagrees", e);
        }
        if s.allowed {
            prop_assert_eq!(s.retry_after_us, 0);
        } else if e.cost > m.capacity() {
            prop_assert_eq!(s.retry_after_us, period_us, "{:?}", e);
        } else {
            let r = s.retry_after_us;
            prop_assert!(r > 0, "denied without a wait: {:?} {:?}", e, s);
            let early = m.acquire(&mut before.clone(), now + r - 1, e.cost);
            prop_assert!(!early.allowed, "{:?} {:?}: allowed before the retry", e, s);
            let on_time = m.acquire(&mut before.clone(), now + r, e.cost);
            prop_assert!(on_time.allowed, "{:?} {:?}: denied at the retry", e, s);
        }

        prop_assert!(s.remaining <= m.capacity());
        if s.remaining > 0 {
            let fits = m.acquire(&mut st.clone(), now, s.remaining);
            prop_assert!(fits.allowed, "{:?} {:?}: `remaining` does not fit", e, s);
        }
        let more = m.acquire(&mut st.clone(), now, s.remaining + 1);
        prop_assert!(!more.allowed, "{:?} {:?}: more than `remaining` fits", e, s);

        let full = m.acquire(&mut st.clone(), now + s.reset_us, m.capacity());
        prop_assert!(full.allowed, "{:?} {:?}: not full at the reset", e, s);
        if exact_reset && s.reset_us > 0 {
            let early = m.acquire(&mut st.clone(), now + s.reset_us - 1, m.capacity());
            prop_assert!(!early.allowed, "{:?} {:?}: full before the reset", e, s);
        }
        // The store forgets a key at `idle_at`: from then on the state must
        // behave exactly like a fresh one, and that is when `reset` ends.
        let idle = m.idle_at(&st);
        if s.reset_us > 0 {
            prop_assert_eq!(idle, now + s.reset_us, "{:?} {:?}", e, s);
        } else {
            prop_assert!(idle <= now, "{:?} {:?}: idle at {}", e, s, idle);
        }
        for (dt, cost) in [(0, e.cost), (0, m.capacity()), (1, 1), (period_us, e.cost)] {
            let t = idle.max(now) + dt;
            let old = m.acquire(&mut st.clone(), t, cost);
            let new = m.acquire(&mut M::State::default(), t, cost);
            prop_assert_eq!(old, new, "{:?} {:?}: not like a fresh key at {}", e, s, t);
        }
        run.steps.push((e, s));
    }
    Ok(run)
}

/// Admitted events in arrival order (for leaky buckets, `Run::admitted`
/// gives departure times instead).
fn arrivals(run: &Run) -> Vec<Event> {
    run.steps
        .iter()
        .filter(|(_, s)| s.allowed)
        .map(|&(e, _)| e)
        .collect()
}

// ---------------------------------------------------------------------------
// Naive reference models
// ---------------------------------------------------------------------------

/// The sliding window log as its definition: an admitted `(at, cost)` counts
/// while `now < at + period`.
struct NaiveLog {
    w: Window,
    admitted: Vec<(u64, u64)>,
}

impl NaiveLog {
    fn in_window(&self, now: u64) -> u64 {
        self.admitted
            .iter()
            .filter(|&&(at, _)| at <= now && now < at + self.w.period_us)
            .map(|&(_, c)| c)
            .sum()
    }

    fn step(&mut self, now: u64, cost: u64) -> Step {
        let (limit, period) = (self.w.limit, self.w.period_us);
        let allowed = self.in_window(now) + cost <= limit;
        let retry_after_us = if allowed {
            self.admitted.push((now, cost));
            0
        } else if cost > limit {
            period
        } else {
            // Only an entry leaving can make room: try each departure.
            let mut leaves: Vec<u64> = self
                .admitted
                .iter()
                .map(|&(at, _)| at + period)
                .filter(|&t| t > now)
                .collect();
            leaves.sort_unstable();
            let t = leaves
                .into_iter()
                .find(|&t| self.in_window(t) + cost <= limit)
                .expect("every entry leaves eventually");
            t - now
        };
        let last = self
            .admitted
            .iter()
            .map(|&(at, _)| at + period)
            .filter(|&t| t > now)
            .max();
        Step {
            allowed,
            remaining: limit - self.in_window(now),
            reset_us: last.map_or(0, |t| t - now),
            retry_after_us,
            delay_us: 0,
        }
    }
}

/// A token bucket as a level of tokens refilled continuously, in exact
/// integers: tokens are kept multiplied by `period` (so one microsecond adds
/// exactly `limit`), which is GCRA's time scaled by `limit`.
struct NaiveBucket {
    b: Bucket,
    shaping: bool,
    /// Tokens times `period`.
    level: u128,
    last: Option<u64>,
}

impl NaiveBucket {
    fn new(b: Bucket, shaping: bool) -> Self {
        Self {
            b,
            shaping,
            level: 0,
            last: None,
        }
    }

    fn step(&mut self, now: u64, cost: u64) -> Step {
        let (limit, period) = (u128::from(self.b.limit), u128::from(self.b.period_us));
        let full = u128::from(self.b.burst) * period;
        self.level = match self.last {
            None => full,
            Some(last) => full.min(self.level + u128::from(now - last) * limit),
        };
        self.last = Some(now);
        let before = self.level;
        let need = u128::from(cost) * period;
        let allowed = cost <= self.b.burst && self.level >= need;
        if allowed {
            self.level -= need;
        }
        let retry_after_us = if allowed {
            0
        } else if cost > self.b.burst {
            self.b.period_us
        } else {
            (need - self.level).div_ceil(limit) as u64
        };
        Step {
            allowed,
            remaining: (self.level / period) as u64,
            reset_us: (full - self.level).div_ceil(limit) as u64,
            retry_after_us,
            // A leaky bucket's request waits for the queue ahead of it: what
            // was missing from a full bucket before it came.
            delay_us: if allowed && self.shaping {
                (full - before).div_ceil(limit) as u64
            } else {
                0
            },
        }
    }
}

/// `floor(prev * (period - elapsed) / period)` in doubles, in the order the
/// sliding window counter's documentation fixes.
fn doc_weight(prev: u64, period: u64, elapsed: u64) -> u64 {
    ((prev as f64) * ((period - elapsed) as f64) / (period as f64)).floor() as u64
}

// ---------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------

proptest! {
    // Failing cases are kept in the crate's `proptest-regressions/` and
    // replayed first on every run.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/proptest-regressions/proptests.txt"
        )))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn fixed_window_admits_at_most_limit_per_aligned_window((w, plan) in window_case()) {
        let fw = FixedWindow::new(w.quota()).unwrap();
        let run = checked_run(&fw, &plan, w.period_us, true)?;
        prop_assert!(run.max_in_aligned_window(w.period_us) <= w.limit);
        // Exactly the naive per-window count: nothing denied that fits.
        let mut count: BTreeMap<u64, u64> = BTreeMap::new();
        for (e, s) in &run.steps {
            let c = count.entry(e.at_us / w.period_us).or_default();
            prop_assert_eq!(s.allowed, *c + e.cost <= w.limit, "{:?}", e);
            if s.allowed {
                *c += e.cost;
            }
        }
        // The boundary burst is the worst a fixed window does.
        prop_assert!(run.max_in_any_window(w.period_us) <= 2 * w.limit);
    }

    #[test]
    fn sliding_log_is_exact((w, plan) in window_case()) {
        let log = SlidingWindowLog::new(w.quota()).unwrap();
        let run = checked_run(&log, &plan, w.period_us, true)?;
        prop_assert!(run.max_in_any_window(w.period_us) <= w.limit);
        // Every decision and every figure is that of the definition.
        let mut naive = NaiveLog { w, admitted: Vec::new() };
        for (e, s) in &run.steps {
            prop_assert_eq!(*s, naive.step(e.at_us, e.cost), "{:?}", e);
        }
    }

    #[test]
    fn sliding_counter_admits_at_most_limit_per_aligned_window((w, plan) in window_case()) {
        let swc = SlidingWindowCounter::new(w.quota()).unwrap();
        // Its reset is the end of the window after the last count: safe,
        // but the estimate may reach zero earlier, so not exact.
        let run = checked_run(&swc, &plan, w.period_us, false)?;
        prop_assert!(run.max_in_aligned_window(w.period_us) <= w.limit);

        let p = w.period_us;
        let mut per: BTreeMap<u64, u64> = BTreeMap::new();
        for (j, (e, s)) in run.steps.iter().enumerate() {
            let win = e.at_us / p;
            let elapsed = e.at_us - win * p;
            let prev = per.get(&(win - 1)).copied().unwrap_or(0);
            let cur = per.get(&win).copied().unwrap_or(0);
            // The documented estimate, recomputed from the admitted history.
            let estimate = doc_weight(prev, p, elapsed) + cur;
            prop_assert_eq!(s.allowed, estimate + e.cost <= w.limit, "{:?}", e);
            if !s.allowed {
                continue;
            }
            *per.entry(win).or_default() += e.cost;
            // The sliding window ending here holds at most `limit` plus
            // the part of the previous window's count that the estimate
            // lets through: prev - floor(prev * (p - e) / p), which is
            // ceil(prev * e / p), not the documented prev * e / p.
            let held: u64 = run.steps[..=j]
                .iter()
                .filter(|(x, t)| t.allowed && x.at_us + p > e.at_us)
                .map(|(x, _)| x.cost)
                .sum();
            let slack = (prev * elapsed).div_ceil(p);
            prop_assert!(
                held <= w.limit + slack,
                "{} in a sliding window at {:?}: limit {} + {}", held, e, w.limit, slack
            );
        }
    }

    #[test]
    fn token_bucket_never_exceeds_burst_plus_refill((b, plan) in bucket_case()) {
        let tb = Gcra::token_bucket(b.quota()).unwrap();
        let run = checked_run(&tb, &plan, b.period_us, true)?;
        // For any interval [x, y), the admitted requests in it run from some
        // i to some j with t_j - t_i < y - x, so checking every pair is the
        // bound in its strongest form: cost(i..=j) <= burst + (t_j - t_i) *
        // limit / period, in exact integers.
        let adm = arrivals(&run);
        for i in 0..adm.len() {
            let mut cost = 0u128;
            for j in i..adm.len() {
                cost += u128::from(adm[j].cost);
                let span = u128::from(adm[j].at_us - adm[i].at_us);
                prop_assert!(
                    cost * u128::from(b.period_us)
                        <= u128::from(b.burst) * u128::from(b.period_us) + span * u128::from(b.limit),
                    "{} admitted within {}us", cost, span
                );
            }
        }
    }

    #[test]
    fn gcra_matches_a_naive_token_level((b, plan) in bucket_case()) {
        for shaping in [false, true] {
            let gcra = if shaping {
                Gcra::leaky_bucket(b.quota()).unwrap()
            } else {
                Gcra::token_bucket(b.quota()).unwrap()
            };
            let run = checked_run(&gcra, &plan, b.period_us, true)?;
            let mut naive = NaiveBucket::new(b, shaping);
            for (e, s) in &run.steps {
                prop_assert_eq!(*s, naive.step(e.at_us, e.cost), "{:?} shaping={}", e, shaping);
            }
        }
    }

    #[test]
    fn leaky_bucket_releases_at_the_drain_rate_and_queues_at_most_burst((b, plan) in bucket_case()) {
        let lb = Gcra::leaky_bucket(b.quota()).unwrap();
        let run = checked_run(&lb, &plan, b.period_us, true)?;
        // It admits exactly what the token bucket admits; only the timing differs.
        let events: Vec<Event> = run.steps.iter().map(|&(e, _)| e).collect();
        let tb = sim::run(&Gcra::token_bucket(b.quota()).unwrap(), &events);
        for ((_, l), (_, t)) in run.steps.iter().zip(&tb.steps) {
            prop_assert_eq!(l.allowed, t.allowed);
        }
        let (limit, period) = (u128::from(b.limit), u128::from(b.period_us));
        let adm: Vec<(Event, u64)> = run
            .steps
            .iter()
            .filter(|(_, s)| s.allowed)
            .map(|&(e, s)| (e, e.at_us + s.delay_us))
            .collect();
        for (i, &(e, leaves)) in adm.iter().enumerate() {
            // Nobody waits longer than the queue ahead of it can take.
            let wait = u128::from(leaves - e.at_us);
            prop_assert!(
                wait * limit < u128::from(b.burst - e.cost) * period + limit,
                "{:?} waits {}us", e, wait
            );
            // Departures keep the emission interval: whatever left between
            // two requests needed its cost's worth of time (rounded to whole
            // microseconds, hence the one microsecond of slack).
            let mut ahead = u128::from(e.cost);
            for &(f, later) in &adm[i + 1..] {
                prop_assert!(later >= leaves, "departures out of order");
                prop_assert!(
                    (u128::from(later - leaves) + 1) * limit > ahead * period,
                    "{:?} leaves {}us after {:?} with {} units between", f, later - leaves, e, ahead
                );
                ahead += u128::from(f.cost);
            }
            // At its arrival, what is queued (arrived and not yet left, one
            // leaving right now included) is at most the burst. (Exact for
            // emission intervals of a microsecond or more, as here.)
            let queued: u64 = adm[..=i]
                .iter()
                .filter(|&&(_, l)| l >= e.at_us)
                .map(|(x, _)| x.cost)
                .sum();
            prop_assert!(queued <= b.burst, "{} queued at {:?}", queued, e);
        }
    }
}
