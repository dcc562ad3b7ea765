//! The fleet scenario suite: N instances of the approximate mode (each its
//! own backend, its own clock with a skew, its own flush-timer phase) on one
//! real `redis-server`, driven through the `Limiter` API by a traffic model,
//! next to a perfect global limiter fed the same requests on the same
//! timeline.
//!
//! Time is simulated: one [`TestTime`] is the true time; each instance
//! reads it through its skew. The driver plays requests in time order and,
//! between them, lets the test time run every job the instances' backends
//! scheduled: the production flush schedule (every span end, an early
//! flush when a key ran out of claim, retries while Redis is down), the
//! heartbeat and the breaker's probe. Each instance's timers run late by a
//! phase of its own (unsynchronised timers), and its early flushes one
//! round trip after the ask. Redis is real, so faults are real too: the
//! server can be stopped, resumed, killed and restarted at a point of the
//! timeline.
//!
//! Per scenario, [`Report`] gives the worst admitted count in an aligned
//! interval and in any sliding window of the interval's length (both
//! against the quota, and the reference's next to them), false denials (the
//! requests the reference admitted and the fleet denied, per request, as a
//! share of the reference's admissions), Redis commands per check and per
//! second, and bytes sent to Redis per second. `FLEET_STATS=1` also prints
//! each instance's `ApproximateStats` and Redis' command statistics.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use throttle_fleet_test_support::Rng;

use futures_util::FutureExt;
use throttle_fleet_core::backend::{Limiter, Outcome, Pending, Unavailable};
use throttle_fleet_core::{
    Answer, Key, Quota, Rule, backend::Backend, clock::ManualClock, memory::MemoryBackend,
};
use throttle_fleet_redis::schedule::{Lateness, TestTime};
use throttle_fleet_redis::{ApproximateBackend, ApproximateOptions, RedisBackend, RedisConfig};

use throttle_fleet_test_support::RedisServer;

/// Where the shared clock starts: an aligned, realistic Unix time.
pub const T0: u64 = 1_800_000_000_000_000;

/// One request of a traffic model: when (true time, from the start), to
/// which instance, for which key.
#[derive(Debug, Clone, Copy)]
pub struct Req {
    /// Arrival, true time from the start (µs).
    pub at_us: u64,
    /// The instance it goes to.
    pub instance: usize,
    /// Its key.
    pub key: u64,
}

/// Something done to the fleet at a point of the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `SIGSTOP`: Redis hangs.
    Stop,
    /// `SIGCONT`.
    Resume,
    /// `SIGKILL`.
    Kill,
    /// Back on the same port, with empty data.
    Restart,
}

/// How a scenario's fleet is built.
#[derive(Clone)]
pub struct Setup {
    /// The scenario's name (first column of [`Report::row`]).
    pub name: &'static str,
    /// The traffic model's name (second column).
    pub traffic: &'static str,
    /// How many instances (default 4).
    pub instances: usize,
    /// The quota's limit per interval.
    pub limit: u64,
    /// The quota's interval.
    pub interval: Duration,
    /// Spans per interval of the approximate mode (default 10).
    pub spans: u32,
    /// A sliding-window counter rule instead of a fixed window.
    pub sliding: bool,
    /// Clock offsets of the instances (ms); empty: all exact.
    pub skews_ms: Vec<i64>,
    /// Seed of the flush-timer phases and anything random in the driver.
    pub seed: u64,
    /// Round trip of an early flush (how late it runs after the ask).
    pub early_latency_us: u64,
    /// The early-flush gap of every instance.
    pub early_gap_us: u64,
    /// The flush timeout of every instance.
    pub flush_timeout: Duration,
    /// Faults played on the timeline: (true time from the start in µs,
    /// what).
    pub events: Vec<(u64, Event)>,
}

impl Setup {
    /// A scenario of `limit` per `interval` with the defaults: 4 exact
    /// clocks, 10 spans, a fixed window, early flushes 1 ms away and at
    /// least 5 ms apart, no faults.
    pub fn new(name: &'static str, traffic: &'static str, limit: u64, interval: Duration) -> Self {
        Self {
            name,
            traffic,
            instances: 4,
            limit,
            interval,
            spans: 10,
            sliding: false,
            skews_ms: Vec::new(),
            seed: 7,
            early_latency_us: 1_000,
            early_gap_us: 5_000,
            flush_timeout: Duration::from_millis(200),
            events: Vec::new(),
        }
    }

    /// The interval in µs.
    pub fn interval_us(&self) -> u64 {
        self.interval.as_micros() as u64
    }

    fn rule(&self) -> Rule {
        let rule = Rule::new("fleet", Quota::new(self.limit, self.interval));
        if self.sliding {
            rule.sliding_window_counter()
        } else {
            rule.fixed_window()
        }
    }

    /// The published worst case of one interval: the quota, the overdraft
    /// waiting requests may get, and one credit per other instance (taken
    /// with a fleet of one, its largest), both an eighth of a span's share
    /// (the overdraft at least one).
    pub fn bound(&self) -> u64 {
        let eighth = self.limit / (8 * u64::from(self.spans));
        self.limit + eighth.max(1) + (self.instances as u64 - 1) * eighth
    }
}

struct Instance {
    backend: ApproximateBackend,
    limiter: Arc<dyn Limiter>,
    /// Requests waiting for a flush's answer (the instance had no claim
    /// for a key the fleet had room for).
    waiting: Vec<Waiting>,
}

/// A request whose decision waits for a flush.
struct Waiting {
    answer: Pending<Result<Outcome, Unavailable>>,
    key: u64,
    /// Arrival, from the start of the measurement (true time); `None` for
    /// a warm-up request, which is not counted.
    at_us: Option<u64>,
    /// The perfect limiter's answer, given at arrival.
    perfect: bool,
}

/// One key's figures in a scenario.
#[derive(Debug, Clone, Default)]
pub struct KeyReport {
    /// Requests measured (warm-up left out).
    pub requests: u64,
    /// Of those, admitted by the fleet.
    pub admitted: u64,
    /// Of those, admitted by the perfect reference.
    pub reference_admitted: u64,
    /// Requests the reference admitted and the fleet denied.
    pub false_denials: u64,
    /// Admitted per aligned interval, the fleet's (by when it decided) and
    /// the reference's.
    pub per_interval: Vec<u64>,
    /// See `per_interval`.
    pub reference_per_interval: Vec<u64>,
    /// How long each request that waited for a flush waited (µs).
    pub waits: Vec<u64>,
    times: Vec<u64>,
    reference_times: Vec<u64>,
}

/// A class of clients' figures in a scenario (see [`Report::class`]).
#[derive(Debug, Clone, Default)]
pub struct ClassReport {
    /// How many keys (clients) the class has.
    pub keys: usize,
    /// Their requests.
    pub requests: u64,
    /// Admitted by the fleet.
    pub admitted: u64,
    /// Admitted by the reference.
    pub reference_admitted: u64,
    /// Admitted by the reference and denied by the fleet.
    pub false_denials: u64,
    /// The least, over the intervals, of what the class got against the
    /// reference in that interval (intervals where the reference admitted
    /// anything).
    pub worst_interval_got: f64,
    /// Requests that waited for a flush.
    pub waited: u64,
    /// Median wait of those (µs).
    pub wait_p50_us: u64,
    /// 99th percentile wait of those (µs).
    pub wait_p99_us: u64,
}

impl ClassReport {
    /// Requests the reference admitted and the fleet denied, as a share of
    /// the reference's admissions.
    pub fn false_denial_share(&self) -> f64 {
        self.false_denials as f64 / self.reference_admitted.max(1) as f64
    }

    /// What the class got against the reference, over the whole run.
    pub fn got(&self) -> f64 {
        self.admitted as f64 / self.reference_admitted.max(1) as f64
    }

    /// The share of the class's requests that waited for a flush.
    pub fn waited_share(&self) -> f64 {
        self.waited as f64 / self.requests.max(1) as f64
    }
}

/// What a scenario measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// The scenario's name.
    pub name: &'static str,
    /// The traffic model's name.
    pub traffic: &'static str,
    /// Requests measured.
    pub requests: u64,
    /// The quota's limit per interval.
    pub limit: u64,
    /// [`Setup::bound`].
    pub bound: u64,
    /// Admitted by the fleet.
    pub admitted: u64,
    /// Admitted by the reference.
    pub reference_admitted: u64,
    /// Admitted per aligned interval (true time) for the key that got the
    /// most in it, and the reference's for that key.
    pub per_interval: Vec<u64>,
    /// See `per_interval`.
    pub reference_per_interval: Vec<u64>,
    /// The most one key got in any window of one interval's length.
    pub worst_sliding: u64,
    /// The reference's `worst_sliding`.
    pub reference_worst_sliding: u64,
    /// Requests the reference admitted and the fleet denied.
    pub false_denials: u64,
    /// Per key and interval, what the reference admitted beyond what the
    /// fleet did, summed: the quota a perfect limiter would have given that
    /// the fleet did not give at all (`false_denials` also counts requests
    /// denied early and made up for by later ones).
    pub shortfall: u64,
    /// Redis commands processed during the run.
    pub commands: u64,
    /// Bytes Redis received during the run.
    pub bytes_in: u64,
    /// The run's length, true time (s).
    pub seconds: f64,
    /// Per key.
    pub keys: HashMap<u64, KeyReport>,
}

impl Report {
    /// The figures of the keys `member` picks.
    pub fn class(&self, member: impl Fn(u64) -> bool) -> ClassReport {
        let mut c = ClassReport::default();
        let mut waits = Vec::new();
        let mut ours: Vec<u64> = Vec::new();
        let mut perfect: Vec<u64> = Vec::new();
        for (key, k) in &self.keys {
            if !member(*key) {
                continue;
            }
            c.keys += 1;
            c.requests += k.requests;
            c.admitted += k.admitted;
            c.reference_admitted += k.reference_admitted;
            c.false_denials += k.false_denials;
            waits.extend_from_slice(&k.waits);
            for (i, (&a, &b)) in k
                .per_interval
                .iter()
                .zip(&k.reference_per_interval)
                .enumerate()
            {
                if ours.len() <= i {
                    ours.resize(i + 1, 0);
                    perfect.resize(i + 1, 0);
                }
                ours[i] += a;
                perfect[i] += b;
            }
        }
        // The last interval is cut short by the end of the run (and holds
        // the decisions of requests that waited past it): left out.
        let n = perfect.len().saturating_sub(1).max(1).min(perfect.len());
        c.worst_interval_got = (0..n)
            .filter(|&i| perfect[i] > 0)
            .map(|i| ours[i] as f64 / perfect[i] as f64)
            .fold(f64::INFINITY, f64::min);
        if !c.worst_interval_got.is_finite() {
            c.worst_interval_got = 1.0;
        }
        waits.sort_unstable();
        c.waited = waits.len() as u64;
        let pct = |p: f64| {
            waits
                .get(((waits.len() as f64 * p) as usize).min(waits.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0)
        };
        c.wait_p50_us = pct(0.50);
        c.wait_p99_us = pct(0.99);
        c
    }

    /// The most the top key got in one aligned interval.
    pub fn worst_interval(&self) -> u64 {
        self.per_interval.iter().copied().max().unwrap_or(0)
    }

    /// [`worst_interval`](Self::worst_interval) over the limit.
    pub fn worst_ratio(&self) -> f64 {
        self.worst_interval() as f64 / self.limit as f64
    }

    /// `worst_sliding` over the limit.
    pub fn sliding_ratio(&self) -> f64 {
        self.worst_sliding as f64 / self.limit as f64
    }

    /// False denials as a share of the reference's admissions.
    pub fn false_denial_share(&self) -> f64 {
        self.false_denials as f64 / self.reference_admitted.max(1) as f64
    }

    /// `shortfall` as a share of the reference's admissions.
    pub fn shortfall_share(&self) -> f64 {
        self.shortfall as f64 / self.reference_admitted.max(1) as f64
    }

    /// Redis commands per request.
    pub fn commands_per_check(&self) -> f64 {
        self.commands as f64 / self.requests.max(1) as f64
    }

    /// Redis commands per second.
    pub fn commands_per_second(&self) -> f64 {
        self.commands as f64 / self.seconds
    }

    /// One markdown row: scenario, traffic, worst interval (and the
    /// bound), worst sliding window (the reference's), shortfall, false
    /// denials per request, Redis.
    pub fn row(&self) -> String {
        format!(
            "| {} | {} | {:.3}x (bound {:.3}x) | {:.3}x (ref {:.3}x) | {:.2}% | {:.2}% | {:.4} per check, {:.0}/s, {:.0} B/s |",
            self.name,
            self.traffic,
            self.worst_ratio(),
            self.bound as f64 / self.limit as f64,
            self.sliding_ratio(),
            self.reference_worst_sliding as f64 / self.limit as f64,
            100.0 * self.shortfall_share(),
            100.0 * self.false_denial_share(),
            self.commands_per_check(),
            self.commands_per_second(),
            self.bytes_in as f64 / self.seconds,
        )
    }
}

/// Whether the long versions run (`THROTTLE_FLEET_LONG=1`).
pub fn long() -> bool {
    std::env::var("THROTTLE_FLEET_LONG").is_ok_and(|v| v == "1")
}

fn bytes_in(server: &RedisServer) -> u64 {
    server
        .info("stats")
        .lines()
        .find_map(|l| l.strip_prefix("total_net_input_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// An instance's answer to a request: now, or after a flush.
enum Reply {
    Now(bool),
    Wait(Pending<Result<Outcome, Unavailable>>),
}

fn ask(limiter: &dyn Limiter, key: &Key) -> Reply {
    match limiter.acquire(key, 1, u64::MAX) {
        Answer::Ready(Ok(o)) => Reply::Now(o.step.allowed),
        Answer::Ready(Err(_)) => Reply::Now(false),
        Answer::Pending(answer) => Reply::Wait(answer),
    }
}

/// The reference's answer (a memory limiter: always at once).
fn allowed(limiter: &dyn Limiter, key: &Key) -> bool {
    match ask(limiter, key) {
        Reply::Now(allowed) => allowed,
        Reply::Wait(_) => panic!("the memory backend decides at once"),
    }
}

/// The most of `times` (sorted) inside any window of `width`.
fn worst_window(times: &[u64], width: u64) -> u64 {
    let (mut best, mut lo) = (0, 0);
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= width {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best as u64
}

/// Runs `requests` (sorted by time) through a fleet built from `setup`,
/// starting at an interval boundary, after `warmup` requests that are not
/// measured (they teach the fleet, as production traffic would have).
pub async fn run(setup: &Setup, warmup: &[Req], requests: &[Req]) -> Report {
    let server = RedisServer::start();
    let time = TestTime::new(T0);
    let interval_us = setup.interval_us();
    let span_us = interval_us / u64::from(setup.spans);
    let rule = setup.rule();
    let mut rng = Rng::new(setup.seed ^ 0x5eed);
    let mut fleet = Vec::new();
    for i in 0..setup.instances {
        let offset_us = setup.skews_ms.get(i).copied().unwrap_or(0) * 1_000;
        // Its timers' phase: span ends a fifth of a span late at most.
        let lateness = Lateness {
            timer: Duration::from_micros(rng.below(span_us / 5)),
            signal: Duration::from_micros(setup.early_latency_us),
        };
        let config = RedisConfig::standalone(server.url())
            .scheduler(time.instance(offset_us, lateness))
            .command_timeout(setup.flush_timeout);
        let options = ApproximateOptions::default()
            .spans(setup.spans)
            .flush_timeout(setup.flush_timeout)
            .early_flush_gap(Duration::from_micros(setup.early_gap_us));
        let backend = RedisBackend::approximate(config, options).await.unwrap();
        let limiter = backend.limiter(&rule).unwrap();
        fleet.push(Instance {
            backend,
            limiter,
            waiting: Vec::new(),
        });
    }
    let reference = MemoryBackend::with_clock(time.clock())
        .limiter(&rule)
        .unwrap();
    let intervals = requests.last().map_or(1, |r| r.at_us / interval_us + 1) as usize;
    let mut driver = Driver {
        time: &time,
        fleet,
        start: u64::MAX,
        interval_us,
        intervals,
        keys: HashMap::new(),
    };
    // Warm-up: the timeline starts at T0; measurement starts at the next
    // interval boundary after the warm-up's last request.
    for r in warmup {
        driver.advance(T0 + r.at_us).await;
        let key = Key::from(r.key);
        let answer = ask(driver.fleet[r.instance].limiter.as_ref(), &key);
        let perfect = allowed(reference.as_ref(), &key);
        driver.answered(r.instance, r.key, None, perfect, answer);
    }
    let last = warmup.last().map_or(T0, |r| T0 + r.at_us);
    let start = (last / interval_us + 1) * interval_us;
    driver.advance(start).await;
    for inst in &mut driver.fleet {
        inst.waiting.clear();
    }
    driver.start = start;
    server.cli(&["CONFIG", "RESETSTAT"]);
    let bytes_before = bytes_in(&server);
    let mut events = setup.events.clone();
    events.sort_by_key(|e| e.0);
    let mut events = events.into_iter().peekable();
    for r in requests {
        let now = start + r.at_us;
        while let Some(&(at, event)) = events.peek() {
            if start + at > now {
                break;
            }
            driver.advance(start + at).await;
            match event {
                Event::Stop => server.stop(),
                Event::Resume => server.resume(),
                Event::Kill => server.kill(),
                Event::Restart => server.restart(),
            }
            events.next();
        }
        driver.advance(now).await;
        let key = Key::from(r.key);
        let answer = ask(driver.fleet[r.instance].limiter.as_ref(), &key);
        let perfect = allowed(reference.as_ref(), &key);
        driver.answered(r.instance, r.key, Some(r.at_us), perfect, answer);
    }
    let end = start + requests.last().map_or(0, |r| r.at_us);
    // Requests still waiting get the flush they wait for.
    let mut settle = end;
    while driver.fleet.iter().any(|i| !i.waiting.is_empty()) && settle < end + 4 * span_us {
        settle += span_us / 10;
        driver.advance(settle).await;
    }
    assert!(
        driver.fleet.iter().all(|i| i.waiting.is_empty()),
        "a request waited for a flush that never answered it"
    );
    if std::env::var("FLEET_STATS").is_ok() {
        for inst in &driver.fleet {
            eprintln!("{:?}", inst.backend.approximate_stats());
            eprintln!("{:?}", inst.backend.stats());
        }
        eprintln!("{}", server.info("commandstats"));
    }
    let seconds = (end - start) as f64 / 1e6;
    let commands = server.commands();
    let bytes = bytes_in(&server).saturating_sub(bytes_before);
    if server.is_stopped() {
        server.resume();
    }
    let keys = driver.keys;
    // Per interval, the worst key's count (and the reference's for it).
    let mut per_interval = vec![0; intervals];
    let mut reference_per_interval = vec![0; intervals];
    let (mut worst_sliding, mut reference_worst_sliding, mut shortfall) = (0, 0, 0);
    let (mut admitted, mut reference_admitted, mut false_denials) = (0, 0, 0);
    for k in keys.values() {
        admitted += k.admitted;
        reference_admitted += k.reference_admitted;
        false_denials += k.false_denials;
        for i in 0..intervals {
            let (ours, perfect) = (k.per_interval[i], k.reference_per_interval[i]);
            shortfall += perfect.saturating_sub(ours);
            if ours > per_interval[i] {
                per_interval[i] = ours;
                reference_per_interval[i] = perfect;
            }
        }
        // (Recorded as decided: a request that waited is recorded late.)
        let mut times = k.times.clone();
        times.sort_unstable();
        let mut reference_times = k.reference_times.clone();
        reference_times.sort_unstable();
        worst_sliding = worst_sliding.max(worst_window(&times, interval_us));
        reference_worst_sliding =
            reference_worst_sliding.max(worst_window(&reference_times, interval_us));
    }
    Report {
        name: setup.name,
        traffic: setup.traffic,
        requests: requests.len() as u64,
        limit: setup.limit,
        bound: setup.bound(),
        admitted,
        reference_admitted,
        per_interval,
        reference_per_interval,
        worst_sliding,
        reference_worst_sliding,
        false_denials,
        shortfall,
        commands,
        bytes_in: bytes,
        seconds: seconds.max(1e-6),
        keys,
    }
}

struct Driver<'a> {
    time: &'a TestTime,
    fleet: Vec<Instance>,
    /// Where measurement starts (true time); `u64::MAX` during the warm-up.
    start: u64,
    interval_us: u64,
    intervals: usize,
    keys: HashMap<u64, KeyReport>,
}

impl Driver<'_> {
    /// Runs every job due by `until` (true time), in time order, deciding
    /// after each the requests it answered; then sets the time to `until`.
    async fn advance(&mut self, until: u64) {
        while self.time.run_next(until).await.is_some() {
            for i in 0..self.fleet.len() {
                self.settle(i);
            }
        }
        self.time.advance_to(until).await;
        for i in 0..self.fleet.len() {
            self.settle(i);
        }
    }

    /// Decides the requests of instance `i` that waited for the flush it
    /// just made.
    fn settle(&mut self, i: usize) {
        let waiting = std::mem::take(&mut self.fleet[i].waiting);
        for mut w in waiting {
            match (&mut w.answer).now_or_never() {
                Some(result) => {
                    let ours = matches!(result, Ok(o) if o.step.allowed);
                    self.record(w.key, w.at_us, ours, w.perfect, true);
                }
                None => self.fleet[i].waiting.push(w),
            }
        }
    }

    /// Records the answer to a request, or keeps it until it is decided.
    fn answered(&mut self, i: usize, key: u64, at_us: Option<u64>, perfect: bool, answer: Reply) {
        match answer {
            Reply::Now(ours) => self.record(key, at_us, ours, perfect, false),
            Reply::Wait(answer) => self.fleet[i].waiting.push(Waiting {
                answer,
                key,
                at_us,
                perfect,
            }),
        }
    }

    fn record(&mut self, key: u64, at_us: Option<u64>, ours: bool, perfect: bool, waited: bool) {
        let Some(at_us) = at_us else { return };
        // Decided now (true time, from the start).
        let decided = self.time.now_us().saturating_sub(self.start);
        let intervals = self.intervals;
        let k = self.keys.entry(key).or_insert_with(|| KeyReport {
            per_interval: vec![0; intervals],
            reference_per_interval: vec![0; intervals],
            ..KeyReport::default()
        });
        k.requests += 1;
        if waited {
            k.waits.push(decided - at_us);
        }
        if ours {
            k.admitted += 1;
            let i = ((decided / self.interval_us) as usize).min(intervals - 1);
            k.per_interval[i] += 1;
            k.times.push(decided);
        }
        if perfect {
            k.reference_admitted += 1;
            k.reference_per_interval[(at_us / self.interval_us) as usize] += 1;
            k.reference_times.push(at_us);
            if !ours {
                k.false_denials += 1;
            }
        }
    }
}

// ------------------------------------------------------- traffic models ----

/// `rate` requests per second for `secs`, evenly spaced, over the
/// instances in turn, all for `key`.
pub fn round_robin(rate: f64, secs: f64, instances: usize, key: u64) -> Vec<Req> {
    let n = (rate * secs) as u64;
    let step = 1e6 / rate;
    (0..n)
        .map(|i| Req {
            at_us: (i as f64 * step) as u64,
            instance: i as usize % instances,
            key,
        })
        .collect()
}

/// Poisson arrivals at `rate` for `secs`, each sent to an instance drawn
/// from a Zipf law (weight `1 / rank^s`), all for `key`.
pub fn zipf(rate: f64, secs: f64, instances: usize, s: f64, key: u64, rng: &mut Rng) -> Vec<Req> {
    let weights: Vec<f64> = (1..=instances).map(|r| 1.0 / (r as f64).powf(s)).collect();
    let mut out = Vec::new();
    let mut t = 0;
    let end = (secs * 1e6) as u64;
    loop {
        t += rng.exp(1e6 / rate).max(1);
        if t >= end {
            return out;
        }
        out.push(Req {
            at_us: t,
            instance: rng.weighted(&weights),
            key,
        });
    }
}

/// Poisson arrivals at `rate` for `secs`, all for `key`, that stick to one
/// instance for a random while (`stay_us` on average) and then move to
/// another (sticky sessions, connection reuse, HTTP/2).
pub fn sticky_moving(
    rate: f64,
    secs: f64,
    instances: usize,
    stay_us: f64,
    key: u64,
    rng: &mut Rng,
) -> Vec<Req> {
    let mut out = Vec::new();
    let (mut t, mut at) = (0, 0);
    let mut move_at = rng.exp(stay_us);
    let end = (secs * 1e6) as u64;
    loop {
        t += rng.exp(1e6 / rate).max(1);
        if t >= end {
            return out;
        }
        while t >= move_at {
            at = (at + 1 + rng.below(instances as u64 - 1) as usize) % instances;
            move_at += rng.exp(stay_us).max(1);
        }
        out.push(Req {
            at_us: t,
            instance: at,
            key,
        });
    }
}

/// Merges request streams into one, by time.
pub fn merge(mut streams: Vec<Vec<Req>>) -> Vec<Req> {
    let mut all: Vec<Req> = streams.drain(..).flatten().collect();
    all.sort_by_key(|r| r.at_us);
    all
}

/// `streams` shifted by `by_us`.
pub fn shifted(reqs: Vec<Req>, by_us: u64) -> Vec<Req> {
    reqs.into_iter()
        .map(|r| Req {
            at_us: r.at_us + by_us,
            ..r
        })
        .collect()
}

/// How a client's requests spread over the instances.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Spread {
    /// Each request to an instance drawn uniformly.
    Uniform,
    /// Each request to an instance drawn by a Zipf law (s = 1) over the
    /// client's own random ranking of the instances.
    Zipf,
    /// One instance at a time, moving to another after `stay_us` on
    /// average (sticky sessions, connection reuse).
    Sticky {
        /// Mean stay on one instance (µs).
        stay_us: u64,
    },
}

impl Spread {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Uniform => "uniform",
            Self::Zipf => "zipf",
            Self::Sticky { .. } => "sticky-moving",
        }
    }
}

/// One client: Poisson arrivals at `rate` per second for `secs`, all for
/// `key`, spread over `instances` as `spread` says.
pub fn client(
    rate: f64,
    secs: f64,
    instances: usize,
    spread: Spread,
    key: u64,
    rng: &mut Rng,
) -> Vec<Req> {
    match spread {
        Spread::Sticky { stay_us } => {
            sticky_moving(rate, secs, instances, stay_us as f64, key, rng)
        }
        Spread::Uniform | Spread::Zipf => {
            // The client's own order of the instances.
            let mut order: Vec<usize> = (0..instances).collect();
            for i in (1..instances).rev() {
                order.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let weights: Vec<f64> = (1..=instances)
                .map(|r| match spread {
                    Spread::Zipf => 1.0 / r as f64,
                    _ => 1.0,
                })
                .collect();
            let mut out = Vec::new();
            let mut t = 0;
            let end = (secs * 1e6) as u64;
            loop {
                t += rng.exp(1e6 / rate).max(1);
                if t >= end {
                    return out;
                }
                out.push(Req {
                    at_us: t,
                    instance: order[rng.weighted(&weights)],
                    key,
                });
            }
        }
    }
}

/// The requests of `reqs` (one client, sorted) that a perfect limiter of
/// `setup`'s rule admits, played from an interval boundary: a client that
/// paces itself and never sends what its quota does not allow.
pub fn within_quota(setup: &Setup, reqs: &[Req]) -> Vec<Req> {
    let clock = ManualClock::new(T0);
    let perfect = MemoryBackend::with_clock(clock.clone())
        .limiter(&setup.rule())
        .unwrap();
    reqs.iter()
        .copied()
        .filter(|r| {
            clock.set(T0 + r.at_us);
            allowed(perfect.as_ref(), &Key::from(r.key))
        })
        .collect()
}
