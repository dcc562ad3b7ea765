//! The adaptive limit's algorithm: TCP Vegas as Netflix's concurrency-limits
//! applies it to requests, decided once per window of samples, with
//! Envoy's probe of the latency without load (the limit held at a minimum
//! until the backend's queue has drained).

use std::time::Duration;

use crate::ConfigError;

/// The parameters of an adaptive concurrency limit ([`InFlightLimit::adaptive`](crate::InFlightLimit::adaptive)):
/// the limit moves with the latency of the requests it admits, between
/// [`min`](Self::min) and the rule's own limit `n`, and finds the
/// backend's capacity without being told it.
///
/// The algorithm is TCP Vegas as Netflix's `concurrency-limits` applies it
/// to requests (`VegasLimit`, <https://github.com/Netflix/concurrency-limits>),
/// with two changes that the flash-crowd bench and the simulation showed
/// it needs:
///
/// - **Windows.** The limit is decided once per [`window`](Self::window)
///   (100 ms, and at least 5 requests ended in it) from the mean latency
///   of the requests that ended in it, as Netflix's `WindowedLimit` does
///   with its sample windows; decided on every request, the limit swung
///   between half and twice the backend's capacity, and the shortest
///   latency of a window (our first choice) read a queue as gone whenever
///   one request slipped through.
/// - **Probing the latency without load** (`no_load`). Vegas compares each
///   window's latency with it: `queue = limit × (1 − no_load / latency)`
///   is how many requests wait. A probe holds the limit at
///   [`min`](Self::min) (default 3) until 5 requests admitted under it
///   have ended, and their mean latency is `no_load`: a request admitted
///   under the probe has at most `min − 1` others in flight, so it finds
///   the backend's queue empty, whatever the limit was before. This is
///   Envoy's adaptive concurrency filter (`min_concurrency`, the
///   `minRTT` window; <https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/adaptive_concurrency_filter>).
///   Our first probe halved the limit for one window instead (BBR's
///   `ProbeRTT`), which drains the queue only while the limit is at most
///   twice the backend's capacity; Netflix's Vegas takes one request's
///   latency, queue included. Requests admitted before the probe are not
///   its samples.
///
/// A probe comes every [`probe_every`](Self::probe_every) windows (300,
/// jittered down to half: 15 to 30 s), and sooner when the latency says
/// one is needed: after the first busy window (`no_load` not measured
/// yet), after a window whose latency is a tenth below `no_load` (the
/// backend became faster), and once the limit has fallen to half what it
/// was after the last probe (a backend slower for good reads as a queue
/// that no limit drains: the probe tells which). It waits for a busy
/// window: while fewer than half the limit's slots are in use, a probe
/// would only shed requests.
///
/// Each window, with `log = max(1, ⌊log10 limit⌋)`, `inflight` the most
/// requests in flight during the window, and `denied` whether the limit
/// (or a class's share of it, [`InFlightLimit::reserve`](crate::InFlightLimit::reserve))
/// denied a request in it:
///
/// | condition | new limit |
/// |---|---|
/// | not `denied` and `inflight < limit / 2` (the backend is not the bottleneck) | unchanged |
/// | `queue ≤ log` and `denied` | `limit + 6·log` |
/// | `queue < 3·log` and `denied` | `limit + log` |
/// | `queue > 6·log` | `limit − log` |
/// | otherwise | unchanged |
///
/// The limit grows only while it limits (TCP's rule for a congestion
/// window that limits the sender): with Netflix's `inflight ≥ limit / 2`
/// alone, a crowd that ramped up grew the limit to twice the pool while
/// the pool still kept up, and then met a queue of the pool's size; and a
/// reserve that kept sheddable requests to a quarter of the limit held it
/// where the pool was two-thirds used.
///
/// bounded by [`min`](Self::min) and the rule's `n`. A backend with a pool
/// of `p` connections settles at `p + 3·log` to `p + 6·log` in flight (a
/// queue of 3 to 6), within `[p, 1.5p]` for a pool of 12 or more: in the
/// simulation (`core/tests/adaptive.rs`, the flash-crowd bench's overload)
/// and against the bench's real server (BENCHMARKS.md, "Flash crowd").
/// `n` need not be near the pool: it is the most the limit may reach.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_core::{InFlightLimit, Rule};
/// use throttle_fleet_core::adaptive::Vegas;
///
/// let adaptive = |n, vegas| Rule::concurrency("backend", InFlightLimit { adaptive: Some(vegas), ..InFlightLimit::new(n) });
/// assert!(adaptive(64, Vegas::new().initial(20).min(4)).validate().is_ok());
/// // The defaults fit any `n`: they are lowered to it.
/// assert!(adaptive(2, Vegas::new()).validate().is_ok());
/// let bad = adaptive(64, Vegas::new().initial(100));
/// assert_eq!(bad.validate().unwrap_err().field(), "adaptive.initial");
/// let bad = adaptive(64, Vegas::new().window(Duration::ZERO));
/// assert_eq!(bad.validate().unwrap_err().field(), "adaptive.window");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Vegas {
    /// `None`: the default, lowered to the rule's `n` when `n` is smaller.
    initial: Option<u64>,
    min: Option<u64>,
    window: Duration,
    min_samples: u32,
    probe_every: u32,
}

/// The defaults of [`Vegas::initial`] and [`Vegas::min`].
const DEFAULT_INITIAL: u64 = 20;
const DEFAULT_MIN: u64 = 3;

impl Default for Vegas {
    fn default() -> Self {
        Self::new()
    }
}

impl Vegas {
    /// The defaults: an initial limit of 20, at least 3, windows of 100 ms
    /// and 5 requests, a probe every 300 windows (150 to 300 with jitter:
    /// 15 to 30 s while requests flow), and sooner when the latency says
    /// one is needed.
    pub const fn new() -> Self {
        Self {
            initial: None,
            min: None,
            window: Duration::from_millis(100),
            min_samples: 5,
            probe_every: 300,
        }
    }

    /// The limit before any request has ended (default 20, lowered to the
    /// rule's `n` when `n` is smaller; set, it must be from
    /// [`min`](Self::min) to `n`).
    #[must_use]
    pub const fn initial(mut self, limit: u64) -> Self {
        self.initial = Some(limit);
        self
    }

    /// The limit never goes below this, and a probe of the latency without
    /// load holds the limit at it: Envoy's `min_concurrency`, whose default
    /// this is (default 3, lowered to the rule's `n` when `n` is smaller;
    /// set, it must be from 1 to `n`). It must be below the backend's
    /// capacity (its pool of connections, its threads), or a probe does
    /// not drain the backend's queue.
    #[must_use]
    pub const fn min(mut self, limit: u64) -> Self {
        self.min = Some(limit);
        self
    }

    /// How long a window of samples lasts at least (default 100 ms; 1 ms
    /// to 60 s). A window also waits for 5 requests to end.
    #[must_use]
    pub const fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How many windows pass at most between probes of the latency without
    /// load (default 300; at least 2), jittered down to half. A probe also
    /// comes sooner: after the first window that measured the latency
    /// under load, after a window whose latency fell below the latency
    /// without load, and after 10 windows in a row that lowered the limit.
    /// It waits while fewer than half the limit's slots are in use.
    #[must_use]
    pub const fn probe_every(mut self, windows: u32) -> Self {
        self.probe_every = windows;
        self
    }

    /// The limit before any request has ended, for a rule of `max` slots.
    pub const fn initial_limit(&self, max: u64) -> u64 {
        match self.initial {
            Some(limit) => limit,
            None if DEFAULT_INITIAL < max => DEFAULT_INITIAL,
            None => max,
        }
    }

    /// The lowest limit, and a probe's, for a rule of `max` slots.
    const fn min_limit(&self, max: u64) -> u64 {
        match self.min {
            Some(limit) => limit,
            None if DEFAULT_MIN < max => DEFAULT_MIN,
            None => max,
        }
    }

    pub(crate) fn validate(&self, max: u64) -> Result<(), ConfigError> {
        let min = self.min_limit(max);
        if min == 0 || min > max {
            return Err(ConfigError::new(
                "adaptive.min",
                format!("must be from 1 to the rule's limit {max} (got {min})"),
            ));
        }
        let initial = self.initial_limit(max);
        if initial < min || initial > max {
            return Err(ConfigError::new(
                "adaptive.initial",
                format!(
                    "must be from adaptive.min ({min}) to the rule's limit {max} (got {initial})"
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
/// // A backend that answers in 10 ms whatever the load, and more requests
/// // than the limit admits: the limit grows.
/// for _ in 0..1_000 {
///     now += 2_000;
///     v.denied();
///     v.sample(now, 10_000, v.limit());
/// }
/// assert!(v.limit() > 50, "{}", v.limit());
/// ```
#[derive(Debug, Clone)]
pub struct VegasState {
    params: Vegas,
    /// `params.window` in µs, worked out once (every sample reads it).
    window_us: u64,
    max: u64,
    min: u64,
    limit: u64,
    no_load_us: u64,
    window: Window,
    /// Windows since the last probe, and how many until the next one.
    windows: u32,
    next_probe: u32,
    /// The limit when the last probe ended (at first, the initial one).
    probed_limit: u64,
    probe: Option<Probe>,
    /// Jitter, from the latencies themselves: instances that see other
    /// requests probe at other times.
    seed: u64,
}

/// The latencies of one window: their sum and count, the most requests
/// in flight, and whether the limit denied a request.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    start_us: Option<u64>,
    rtt_sum_us: u64,
    samples: u32,
    in_flight: u64,
    denied: bool,
}

impl Window {
    fn add(&mut self, rtt_us: u64) {
        self.rtt_sum_us = self.rtt_sum_us.saturating_add(rtt_us);
        self.samples += 1;
    }

    /// `samples` latencies summing to `rtt_sum_us`, the first of them
    /// ended at `start_us`, with at most `in_flight` in flight: what as
    /// many [`add`](Self::add)s (and the window's start and most in
    /// flight) record.
    fn merge(&mut self, start_us: u64, rtt_sum_us: u64, samples: u32, in_flight: u64) {
        self.start_us.get_or_insert(start_us);
        self.rtt_sum_us = self.rtt_sum_us.saturating_add(rtt_sum_us);
        self.samples = self.samples.saturating_add(samples);
        self.in_flight = self.in_flight.max(in_flight);
    }

    /// The mean latency.
    fn rtt_us(&self) -> u64 {
        self.rtt_sum_us / u64::from(self.samples.max(1))
    }
}

/// A probe of the latency without load: the limit held at `min` from
/// `started_us`, the latencies of the requests admitted since.
#[derive(Debug, Clone, Copy)]
struct Probe {
    started_us: u64,
    admitted: Window,
}

/// A probe ends after this many windows even if too few requests were
/// admitted under it to measure (requests that hold their slots for
/// longer than that keep it from draining).
const PROBE_GIVES_UP_WINDOWS: u64 = 10;

impl VegasState {
    /// A limit of at most `max` (the rule's `n`) with `params`.
    pub fn new(params: Vegas, max: u64) -> Self {
        let max = max.max(1);
        let mut state = Self {
            params,
            window_us: u64::try_from(params.window.as_micros()).unwrap_or(u64::MAX),
            max,
            min: params.min_limit(max),
            limit: params.initial_limit(max),
            no_load_us: 0,
            window: Window::default(),
            windows: 0,
            next_probe: 0,
            probed_limit: 0,
            probe: None,
            seed: 0x9E37_79B9_7F4A_7C15,
        };
        state.next_probe = state.jittered_probe();
        state.probed_limit = state.limit;
        state
    }

    /// The limit admissions use now: the estimate, or the minimum while a
    /// probe runs.
    pub fn limit(&self) -> u64 {
        if self.probe.is_some() {
            self.min
        } else {
            self.limit
        }
    }

    /// The estimate itself (not lowered by a probe).
    pub fn estimate(&self) -> u64 {
        self.limit
    }

    /// Whether a probe of the latency without load runs now.
    pub fn probing(&self) -> bool {
        self.probe.is_some()
    }

    /// The limit denied a request (it, or its class's share of it, was
    /// full): the limit is what limits, and it may grow if the latency
    /// shows no queue. Without denials it does not grow, whatever the
    /// latency: with fewer in flight than the limit allows, no queue says
    /// nothing of what more would do.
    pub fn denied(&mut self) {
        self.window.denied = true;
    }

    /// A request ended at `now_us` after `rtt_us`, with `in_flight`
    /// requests in flight (itself included) when it ended. Returns the
    /// limit admissions use from now on.
    pub fn sample(&mut self, now_us: u64, rtt_us: u64, in_flight: u64) -> u64 {
        let rtt_us = rtt_us.max(1);
        let admitted_us = now_us.saturating_sub(rtt_us);
        let window_us = self.window_us;
        if let Some(probe) = &mut self.probe {
            // Only a request admitted under the probe's limit found the
            // backend without a queue (at most `min` ahead of it).
            if admitted_us >= probe.started_us {
                probe.admitted.add(rtt_us);
            }
            let probe = *probe;
            let gave_up = now_us.saturating_sub(probe.started_us)
                >= PROBE_GIVES_UP_WINDOWS.saturating_mul(window_us);
            if probe.admitted.samples >= self.params.min_samples || gave_up {
                self.end_probe(probe);
            }
            return self.limit();
        }
        self.window.merge(now_us, rtt_us, 1, in_flight);
        self.close_if_due(now_us)
    }

    /// Samples taken outside the state (the rule's requests add them up
    /// without a lock, [`Adaptive`](super::Adaptive)): `samples` requests
    /// that ended from `start_us` on, outside a probe, after latencies
    /// (each at least 1 µs) summing to `rtt_sum_us`, at most `in_flight`
    /// in flight. As many calls of [`sample`](Self::sample) none of which
    /// ended the window; [`close_if_due`](Self::close_if_due) then does
    /// what the last one's would.
    pub(crate) fn merge(&mut self, start_us: u64, rtt_sum_us: u64, samples: u32, in_flight: u64) {
        debug_assert!(self.probe.is_none(), "a probe takes its samples one by one");
        self.window.merge(start_us, rtt_sum_us, samples, in_flight);
    }

    /// Ends the window if it is due at `now_us` (it lasted `window` and
    /// holds `min_samples`): what [`sample`](Self::sample) does after
    /// adding a sample. Returns the limit admissions use from now on.
    pub(crate) fn close_if_due(&mut self, now_us: u64) -> u64 {
        let w = &self.window;
        let Some(start) = w.start_us else {
            return self.limit();
        };
        if now_us.saturating_sub(start) < self.window_us || w.samples < self.params.min_samples {
            return self.limit();
        }
        let done = std::mem::take(&mut self.window);
        self.seed = self
            .seed
            .rotate_left(17)
            .wrapping_add(done.rtt_sum_us)
            .wrapping_mul(0x2545_F491_4F6C_DD1D);
        self.end_window(now_us, done);
        self.limit()
    }

    /// The window being filled: its start and how many samples it holds.
    pub(crate) fn window(&self) -> (Option<u64>, u32) {
        (self.window.start_us, self.window.samples)
    }

    /// How long a window lasts at least, in µs, and how many samples it
    /// needs.
    pub(crate) fn window_needs(&self) -> (u64, u32) {
        (self.window_us, self.params.min_samples)
    }

    /// The probe ends: what it measured is the latency without load.
    fn end_probe(&mut self, probe: Probe) {
        self.probe = None;
        if probe.admitted.samples > 0 {
            self.no_load_us = probe.admitted.rtt_us();
        }
        self.window = Window::default();
        self.windows = 0;
        self.probed_limit = self.limit;
        self.next_probe = self.jittered_probe();
    }

    fn start_probe(&mut self, now_us: u64) {
        self.probe = Some(Probe {
            started_us: now_us,
            admitted: Window::default(),
        });
    }

    fn end_window(&mut self, now_us: u64, window: Window) {
        let (rtt_us, in_flight) = (window.rtt_us(), window.in_flight);
        self.windows = self.windows.saturating_add(1);
        // A window in which the limit denied no request and fewer than
        // half of it were in flight: the backend is not the bottleneck, the
        // limit stays, and a probe would only shed requests for nothing; it
        // waits for a busy window.
        let limited = window.denied;
        let busy = limited || in_flight.saturating_mul(2) >= self.limit;
        if !busy {
            if self.no_load_us == 0 {
                self.no_load_us = rtt_us;
            }
            return;
        }
        // A probe is due, or the latency says one is needed: none measured
        // yet, or a latency a tenth below the one without load (the
        // backend became faster), or a limit that fell to half what it was
        // after the last probe (a backend slower for good reads as a
        // queue that the limit cannot drain).
        if self.windows >= self.next_probe
            || self.limit.saturating_mul(2) <= self.probed_limit
            || self.no_load_us == 0
            || rtt_us.saturating_mul(10) < self.no_load_us.saturating_mul(9)
        {
            if self.no_load_us == 0 {
                // Measured under load, but something to go on should the
                // probe give up (requests that outlast it).
                self.no_load_us = rtt_us;
            }
            self.start_probe(now_us);
            return;
        }
        let limit = self.limit;
        // queue = ⌈limit × (1 − no_load / rtt)⌉, in integers. (With the
        // requests in flight for `limit` it would be the queue exactly, by
        // Little's law; with the limit, slack it leaves unused reads as
        // queue too, and the limit stays close to what runs.)
        let queue = (u128::from(limit) * u128::from(rtt_us.saturating_sub(self.no_load_us)))
            .div_ceil(u128::from(rtt_us)) as u64;
        let log = (limit.ilog10() as u64).max(1);
        // Grows only while the limit limits (TCP's rule for a congestion
        // window): see `denied`.
        let next = if queue <= log && limited {
            limit + 6 * log
        } else if queue < 3 * log && limited {
            limit + log
        } else if queue > 6 * log {
            limit.saturating_sub(log)
        } else {
            limit
        };
        self.limit = next.clamp(self.min, self.max);
    }

    /// Windows until the next probe: `probe_every`, jittered down to half.
    fn jittered_probe(&self) -> u32 {
        let every = self.params.probe_every;
        let half = every / 2;
        half + (self.seed % u64::from(every - half + 1)) as u32
    }
}
