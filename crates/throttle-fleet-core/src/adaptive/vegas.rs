//! The adaptive limit's algorithm: TCP Vegas as Netflix's concurrency-limits
//! applies it to requests, decided once per window of samples, with BBR's
//! probe of the round trip without load.

use std::time::Duration;

use crate::ConfigError;

/// The parameters of an adaptive concurrency limit ([`InFlightLimit::adaptive`](crate::InFlightLimit::adaptive)):
/// the limit moves with the latency of the requests it admits, between
/// [`min`](Self::min) and the rule's own limit `n`.
///
/// The algorithm is TCP Vegas as Netflix's `concurrency-limits` applies it
/// to requests (`VegasLimit`, <https://github.com/Netflix/concurrency-limits>),
/// with two changes, both from well-known designs, that the flash-crowd
/// bench and the convergence test showed it needs:
///
/// - **Windows.** The limit is decided once per [`window`](Self::window)
///   (100 ms, and at least 5 requests ended in it) from the shortest
///   latency in the window, as Netflix's `WindowedLimit` does; decided on
///   every request, the limit swung between half and twice the backend's
///   capacity.
/// - **Probing the latency without load.** Vegas compares each window's
///   latency with the shortest ever seen (`no_load`):
///   `queue = limit × (1 − no_load / latency)` is how many requests wait.
///   Every [`probe_every`](Self::probe_every) windows (jittered down to
///   half), for one window, the limit is halved so that the backend's
///   queue drains, and `no_load` is what that window measures: BBR's
///   `ProbeRTT` (Cardwell et al., "BBR: Congestion-Based Congestion
///   Control", 2016). Netflix's Vegas instead takes one request's latency,
///   queue included, as the new `no_load`, and the limit then rose by a
///   step at each probe and never came back down. Without any probe, a
///   backend that became slower for good would hold the limit low forever.
///
/// Each window, with `log = max(1, ⌊log10 limit⌋)` and `inflight` the most
/// requests in flight during the window:
///
/// | condition | new limit |
/// |---|---|
/// | `inflight < limit / 2` (the backend is not the bottleneck) | unchanged |
/// | `queue ≤ log` | `limit + 6·log` |
/// | `queue < 3·log` | `limit + log` |
/// | `queue > 6·log` | `limit − log` |
/// | otherwise | unchanged |
///
/// bounded by [`min`](Self::min) and the rule's `n`. In a simulation a
/// backend with a pool of `p` connections settles near `p + 3·log` to
/// `p + 6·log` in flight; against a real server under overload it settled
/// near `2p` (a probe drains the backend's queue only while the limit is
/// at most twice the pool). The rule's `n` is the hard bound: twice the
/// pool keeps the queue under the pool whatever the algorithm does.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_core::{InFlightLimit, Rule};
/// use throttle_fleet_core::adaptive::Vegas;
///
/// let adaptive = |vegas| Rule::concurrency("backend", InFlightLimit { adaptive: Some(vegas), ..InFlightLimit::new(64) });
/// assert!(adaptive(Vegas::new().initial(20).min(4)).validate().is_ok());
/// let bad = adaptive(Vegas::new().initial(100));
/// assert_eq!(bad.validate().unwrap_err().field(), "adaptive.initial");
/// let bad = adaptive(Vegas::new().window(Duration::ZERO));
/// assert_eq!(bad.validate().unwrap_err().field(), "adaptive.window");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Vegas {
    initial: u64,
    min: u64,
    window: Duration,
    min_samples: u32,
    probe_every: u32,
}

impl Default for Vegas {
    fn default() -> Self {
        Self::new()
    }
}

impl Vegas {
    /// The defaults: an initial limit of 20, at least 1, windows of 100 ms
    /// and 5 requests, a probe every 50 windows (25 to 50 with jitter: 2.5
    /// to 5 s while requests flow).
    pub const fn new() -> Self {
        Self {
            initial: 20,
            min: 1,
            window: Duration::from_millis(100),
            min_samples: 5,
            probe_every: 50,
        }
    }

    /// The limit before any request has ended (default 20; at most the
    /// rule's `n`, which it is lowered to when `n` is smaller).
    #[must_use]
    pub const fn initial(mut self, limit: u64) -> Self {
        self.initial = limit;
        self
    }

    /// The limit never goes below this (default 1).
    #[must_use]
    pub const fn min(mut self, limit: u64) -> Self {
        self.min = limit;
        self
    }

    /// How long a window of samples lasts at least (default 100 ms; 1 ms
    /// to 60 s). A window also waits for 5 requests to end.
    #[must_use]
    pub const fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How many windows pass between probes of the latency without load
    /// (default 50; at least 2), jittered down to half.
    #[must_use]
    pub const fn probe_every(mut self, windows: u32) -> Self {
        self.probe_every = windows;
        self
    }

    /// The limit before any request has ended, for a rule of `max` slots.
    pub const fn initial_limit(&self, max: u64) -> u64 {
        if self.initial < max {
            self.initial
        } else {
            max
        }
    }

    pub(crate) fn validate(&self, max: u64) -> Result<(), ConfigError> {
        if self.min == 0 || self.min > max {
            return Err(ConfigError::new(
                "adaptive.min",
                format!(
                    "must be from 1 to the rule's limit {max} (got {})",
                    self.min
                ),
            ));
        }
        if self.initial < self.min || self.initial > max {
            return Err(ConfigError::new(
                "adaptive.initial",
                format!(
                    "must be from adaptive.min ({}) to the rule's limit {max} (got {})",
                    self.min, self.initial
                ),
            ));
        }
        if self.window < Duration::from_millis(1) || self.window > Duration::from_secs(60) {
            return Err(ConfigError::new(
                "adaptive.window",
                format!("must be from 1 ms to 60 s (got {:?})", self.window),
            ));
        }
        if self.probe_every < 2 {
            return Err(ConfigError::new(
                "adaptive.probe_every",
                format!("must be at least 2 windows (got {})", self.probe_every),
            ));
        }
        Ok(())
    }
}

/// The state of one adaptive limit: fed the latency of every request that
/// ends, with the time it ended ([`sample`](Self::sample)); pure, so a
/// test scripts the latencies and the clock.
///
/// ```
/// use throttle_fleet_core::adaptive::{Vegas, VegasState};
///
/// let mut v = VegasState::new(Vegas::new().initial(10), 100);
/// let mut now = 0;
/// // A backend that answers in 10 ms whatever the load: the limit grows.
/// for _ in 0..1_000 {
///     now += 2_000;
///     v.sample(now, 10_000, v.limit());
/// }
/// assert!(v.limit() > 50, "{}", v.limit());
/// ```
#[derive(Debug, Clone)]
pub struct VegasState {
    params: Vegas,
    max: u64,
    limit: u64,
    no_load_us: u64,
    window: Window,
    windows: u32,
    next_probe: u32,
    probing: bool,
    /// Jitter, from the latencies themselves: instances that see other
    /// requests probe at other times.
    seed: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Window {
    start_us: Option<u64>,
    min_rtt_us: u64,
    samples: u32,
    in_flight: u64,
}

impl VegasState {
    /// A limit of at most `max` (the rule's `n`) with `params`.
    pub fn new(params: Vegas, max: u64) -> Self {
        let mut state = Self {
            params,
            max,
            limit: params.initial_limit(max).max(1),
            no_load_us: 0,
            window: Window::default(),
            windows: 0,
            next_probe: 0,
            probing: false,
            seed: 0x9E37_79B9_7F4A_7C15,
        };
        state.next_probe = state.jittered_probe();
        state
    }

    /// The limit admissions use now: the estimate, halved while a probe
    /// runs.
    pub fn limit(&self) -> u64 {
        if self.probing {
            (self.limit / 2).max(1)
        } else {
            self.limit
        }
    }

    /// The estimate itself (not halved by a probe).
    pub fn estimate(&self) -> u64 {
        self.limit
    }

    /// Whether a probe of the latency without load runs now.
    pub fn probing(&self) -> bool {
        self.probing
    }

    /// A request ended at `now_us` after `rtt_us`, with `in_flight`
    /// requests in flight (itself included) when it ended. Returns the
    /// limit admissions use from now on.
    pub fn sample(&mut self, now_us: u64, rtt_us: u64, in_flight: u64) -> u64 {
        let rtt_us = rtt_us.max(1);
        let w = &mut self.window;
        let start = *w.start_us.get_or_insert(now_us);
        w.min_rtt_us = if w.samples == 0 {
            rtt_us
        } else {
            w.min_rtt_us.min(rtt_us)
        };
        w.samples += 1;
        w.in_flight = w.in_flight.max(in_flight);
        let window_us = u64::try_from(self.params.window.as_micros()).unwrap_or(u64::MAX);
        if now_us.saturating_sub(start) < window_us || w.samples < self.params.min_samples {
            return self.limit();
        }
        let done = std::mem::take(&mut self.window);
        self.seed = self
            .seed
            .rotate_left(17)
            .wrapping_add(done.min_rtt_us)
            .wrapping_mul(0x2545_F491_4F6C_DD1D);
        self.end_window(done.min_rtt_us, done.in_flight);
        self.limit()
    }

    fn end_window(&mut self, rtt_us: u64, in_flight: u64) {
        if self.probing {
            self.probing = false;
            self.no_load_us = rtt_us;
            return;
        }
        self.windows += 1;
        if self.windows >= self.next_probe {
            self.windows = 0;
            self.next_probe = self.jittered_probe();
            self.probing = true;
            return;
        }
        if self.no_load_us == 0 || rtt_us < self.no_load_us {
            self.no_load_us = rtt_us;
            return;
        }
        if in_flight.saturating_mul(2) < self.limit {
            return;
        }
        let limit = self.limit;
        // queue = ⌈limit × (1 − no_load / rtt)⌉, in integers.
        let queue = (u128::from(limit) * u128::from(rtt_us - self.no_load_us))
            .div_ceil(u128::from(rtt_us)) as u64;
        let log = (limit.ilog10() as u64).max(1);
        let next = if queue <= log {
            limit + 6 * log
        } else if queue < 3 * log {
            limit + log
        } else if queue > 6 * log {
            limit.saturating_sub(log)
        } else {
            return;
        };
        self.limit = next.clamp(self.params.min, self.max);
    }

    /// Windows until the next probe: `probe_every`, jittered down to half.
    fn jittered_probe(&self) -> u32 {
        let every = self.params.probe_every;
        let half = every / 2;
        half + (self.seed % u64::from(every - half + 1)) as u32
    }
}
