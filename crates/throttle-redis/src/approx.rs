//! Approximate mode: local counting, decided locally, flushed to Redis at
//! every span end (after the design in "Decentralized Request Throttling").
//!
//! Each rule's quota `MAX` per `INTERVAL` is split into `N` spans. Requests
//! are counted per key in this process's memory and decided there, with no
//! Redis call on the request path. At each span end one flush writes, for
//! every key active since the last flush, this instance's *cumulative* count
//! for the interval, and reads back the other instances' counts. Keys share
//! [`BUCKETS`] hashes per rule and interval (field: the key; value:
//! `instance=count:span` entries), one script call per hash: a flush costs a
//! few commands per bucket, whatever the number of keys. Writing the
//! cumulative count rather than a delta makes a flush idempotent: a flush
//! that timed out and ran late, or one sent twice, writes the same number
//! again, and the next flush corrects anything lost, so nothing is counted
//! twice and no delta is dropped while its interval lasts.
//!
//! The local decision feeds the fleet estimate to the same window code the
//! memory backend uses ([`FixedWindow`] or [`SlidingWindowCounter`]):
//!
//! ```text
//! fleet = max(mine + others, each brought forward by how much mine grew
//!             since they were taken;  mine * nodes)
//! ```
//!
//! where `nodes = fleet total / my total` from the last flush reply. A fleet
//! total above `MAX` in a reply blocks the key locally for the cooldown.
//! While Redis cannot be reached, a `LocalFallback` rule also blocks a key
//! when `mine in this span * nodes > MAX / N`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use throttle_core::algorithm::{
    FixedWindow, FixedWindowState, Meter, SlidingWindowCounter, SlidingWindowCounterState, Step,
};
use throttle_core::{
    Acquire, Algorithm, Clock, ConfigError, FailurePolicy, Key, Limiter, MemoryBackend,
    MemoryLimiter, Outcome, Rule, Unavailable,
};

use crate::conn::Redis;
use crate::keys::KeyBase;
use crate::registry::Registry;
use crate::scripts::APPROX_FLUSH_SCRIPT;

/// Settings of the approximate mode.
///
/// ```
/// use std::time::Duration;
/// use throttle_redis::ApproximateOptions;
///
/// let options = ApproximateOptions::default().spans(20).cooldown(Duration::from_secs(5));
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct ApproximateOptions {
    pub(crate) spans: u32,
    pub(crate) cooldown: Option<Duration>,
    pub(crate) flush_timeout: Duration,
    pub(crate) max_keys: usize,
}

impl Default for ApproximateOptions {
    fn default() -> Self {
        Self {
            spans: 10,
            cooldown: None,
            flush_timeout: Duration::from_secs(1),
            max_keys: throttle_core::DEFAULT_MAX_KEYS,
        }
    }
}

impl ApproximateOptions {
    /// Spans per interval (`N`, default 10, at least 2): flushes happen at
    /// every span end. More spans: less overshoot, more Redis commands.
    #[must_use]
    pub fn spans(mut self, spans: u32) -> Self {
        self.spans = spans;
        self
    }

    /// How long a key stays blocked once a flush shows the fleet over the
    /// quota (default: until its interval ends, when the count starts over).
    #[must_use]
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = Some(cooldown);
        self
    }

    /// How long one flush may take before it counts as failed (default 1 s;
    /// flushes are off the request path).
    #[must_use]
    pub fn flush_timeout(mut self, timeout: Duration) -> Self {
        self.flush_timeout = timeout;
        self
    }

    /// Keys tracked locally per rule (default 1,000,000). A key with counts
    /// not yet flushed is never evicted as idle.
    #[must_use]
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(2..=1_000).contains(&self.spans) {
            return Err(ConfigError::new(
                "approximate.spans",
                format!("must be from 2 to 1000 (got {})", self.spans),
            ));
        }
        if self.cooldown.is_some_and(|c| c.is_zero()) {
            return Err(ConfigError::new("approximate.cooldown", "must be positive"));
        }
        if self.flush_timeout.is_zero() {
            return Err(ConfigError::new(
                "approximate.flush_timeout",
                "must be positive",
            ));
        }
        Ok(())
    }
}

/// What the approximate mode has done, for dashboards and for trusting it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApproximateStats {
    /// Flushes that reached Redis.
    pub flushes: u64,
    /// Flushes that failed or timed out (their counts are sent again).
    pub failed_flushes: u64,
    /// Duration of the last successful flush, in microseconds.
    pub last_flush_us: u64,
    /// Longest successful flush so far, in microseconds.
    pub max_flush_us: u64,
    /// Keys whose counts were not yet in Redis at the last flush.
    pub pending_keys: u64,
    /// Instances sharing the busiest key, as last estimated (x1000).
    pub nodes_estimate_milli: u64,
    /// Requests denied by a local decision.
    pub local_denials: u64,
    /// Most a fleet total exceeded the quota in a flush reply.
    pub max_overshoot: u64,
    /// Counts of an interval that ended while Redis was unreachable, given up.
    pub dropped: u64,
    /// Whether the last flush reached Redis.
    pub redis_ok: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    flushes: AtomicU64,
    failed_flushes: AtomicU64,
    last_flush_us: AtomicU64,
    max_flush_us: AtomicU64,
    pending_keys: AtomicU64,
    nodes_estimate_milli: AtomicU64,
    local_denials: AtomicU64,
    max_overshoot: AtomicU64,
    dropped: AtomicU64,
}

/// State shared by every approximate rule of one backend.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) options: ApproximateOptions,
    instance: String,
    redis_ok: AtomicBool,
    counters: Counters,
    rules: Registry<ApproxRule>,
}

impl Shared {
    pub(crate) fn new(options: ApproximateOptions) -> Arc<Self> {
        Arc::new(Self {
            options,
            instance: instance_id(),
            redis_ok: AtomicBool::new(true),
            counters: Counters::default(),
            rules: Registry::default(),
        })
    }

    pub(crate) fn stats(&self) -> ApproximateStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ApproximateStats {
            flushes: get(&c.flushes),
            failed_flushes: get(&c.failed_flushes),
            last_flush_us: get(&c.last_flush_us),
            max_flush_us: get(&c.max_flush_us),
            pending_keys: get(&c.pending_keys),
            nodes_estimate_milli: get(&c.nodes_estimate_milli),
            local_denials: get(&c.local_denials),
            max_overshoot: get(&c.max_overshoot),
            dropped: get(&c.dropped),
            redis_ok: self.redis_ok.load(Ordering::Relaxed),
        }
    }

    /// Flushes every rule now (tests, and graceful shutdown); returns
    /// whether everything reached Redis.
    pub(crate) async fn flush_all(&self) -> bool {
        let mut ok = true;
        for rule in self.rules.live() {
            ok &= rule.flush().await;
        }
        ok
    }
}

/// A random id for this process's field in the shared hashes.
pub(crate) fn instance_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// The window code the fleet estimate is fed to.
#[derive(Debug, Clone, Copy)]
enum Window {
    Fixed(FixedWindow),
    Sliding(SlidingWindowCounter),
}

/// The local decision of one rule: a pure state machine over the per-key
/// counts and what the last flush said about the fleet.
#[derive(Debug)]
pub(crate) struct SpanMeter {
    window: Window,
    limit: u64,
    interval_us: u64,
    spans: u64,
    /// Decide with the stricter per-span limit while Redis is unreachable.
    strict_when_down: bool,
    shared: Arc<Shared>,
}

/// Per-key state of the approximate mode.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct SpanState {
    /// Interval number (`now / interval`).
    interval: u64,
    /// Admitted here in this interval.
    local: u64,
    /// Absolute span number (`interval * spans + span`), what this instance
    /// had admitted when it began and when the span before it began, and
    /// what it admitted in it.
    span: u64,
    at_span: u64,
    at_prev_span: u64,
    span_local: u64,
    /// The last successful flush: the count written, and this instance's
    /// count one span before it was taken.
    flushed: u64,
    flush_mine_prev: u64,
    /// The other instances' counts in that flush's reply: taken at the same
    /// span end (`a`), one span earlier (`b`), or earlier still (`c`).
    others_a: u64,
    others_b: u64,
    others_c: u64,
    /// The fleet total of the previous interval, as best known.
    prev_fleet: u64,
    /// Instances sharing this key, x1000 (0: not estimated yet).
    nodes_milli: u64,
    /// Blocked until then by a flush reply over the quota.
    blocked_until: u64,
    /// The previous interval's count, if it was not fully flushed.
    pending_interval: u64,
    pending_local: u64,
    /// `span + 1` of the last early flush (see [`ApproxRule::decide`]).
    early_span: u64,
}

/// `others` counted when this instance had `mine`, extrapolated to now (when
/// it has `local`): every instance is assumed to grow in proportion.
fn extrapolate(others: u64, mine: u64, local: u64) -> u64 {
    if others == 0 || mine == 0 {
        return others;
    }
    (u128::from(others) * u128::from(local) / u128::from(mine)) as u64
}

impl SpanState {
    fn dirty(&self) -> bool {
        self.local != self.flushed || self.pending_local > 0
    }

    fn nodes(&self) -> u64 {
        self.nodes_milli.max(1_000)
    }

    /// The fleet's count for this interval, estimated now: what the last
    /// flush said, brought forward; and never less than this instance's
    /// count times the node estimate (the only guide before the first
    /// flush of an interval, or while Redis is away).
    fn fleet(&self) -> u64 {
        let heard = self.local
            + self.others_c
            + extrapolate(self.others_a, self.flushed, self.local)
            + extrapolate(self.others_b, self.flush_mine_prev, self.local);
        heard.max(self.local * self.nodes() / 1_000)
    }
}

impl SpanMeter {
    // Periods are at most 366 days (3.2e13 us) and spans at most 1000, so
    // these products fit in a u64.
    fn span_of(&self, interval: u64, now_us: u64) -> u64 {
        let into = now_us - interval * self.interval_us;
        into * self.spans / self.interval_us
    }

    fn span_end(&self, interval: u64, span: u64) -> u64 {
        interval * self.interval_us + (span + 1) * self.interval_us / self.spans
    }

    /// Moves the state to `now`'s interval and span; returns `now` (never
    /// before the state's interval, should the clock step back).
    pub(crate) fn roll(&self, st: &mut SpanState, now_us: u64) -> u64 {
        let now_us = now_us.max(st.interval * self.interval_us);
        let w = now_us / self.interval_us;
        if w > st.interval {
            if w == st.interval + 1 {
                if st.pending_local > 0 {
                    // Two intervals old and never sent: given up.
                    self.shared
                        .counters
                        .dropped
                        .fetch_add(st.pending_local, Ordering::Relaxed);
                    st.pending_local = 0;
                }
                if st.local != st.flushed {
                    st.pending_interval = st.interval;
                    st.pending_local = st.local;
                }
                st.prev_fleet = st.fleet();
            } else {
                // Counts of an interval long over: too late to matter.
                let lost = st.pending_local + st.local.saturating_sub(st.flushed);
                if lost > 0 {
                    self.shared
                        .counters
                        .dropped
                        .fetch_add(lost, Ordering::Relaxed);
                }
                st.prev_fleet = 0;
                st.pending_local = 0;
            }
            *st = SpanState {
                interval: w,
                span: w * self.spans,
                prev_fleet: st.prev_fleet,
                nodes_milli: st.nodes_milli,
                blocked_until: st.blocked_until,
                pending_interval: st.pending_interval,
                pending_local: st.pending_local,
                ..SpanState::default()
            };
        }
        let span = w * self.spans + self.span_of(w, now_us);
        if span != st.span {
            st.at_prev_span = if span == st.span + 1 {
                st.at_span
            } else {
                st.local
            };
            st.at_span = st.local;
            st.span = span;
            st.span_local = 0;
        }
        now_us
    }

    fn deny(&self, retry_after_us: u64, reset_us: u64) -> Step {
        Step {
            allowed: false,
            remaining: 0,
            reset_us,
            retry_after_us: retry_after_us.max(1),
            delay_us: 0,
        }
    }
}

impl Meter for SpanMeter {
    type State = SpanState;

    fn capacity(&self) -> u64 {
        self.limit
    }

    fn acquire(&self, st: &mut SpanState, now_us: u64, cost: u64) -> Step {
        let now = self.roll(st, now_us);
        let interval_end = (st.interval + 1) * self.interval_us;
        if now < st.blocked_until {
            return self.deny(st.blocked_until - now, st.blocked_until - now);
        }
        if self.strict_when_down && !self.shared.redis_ok.load(Ordering::Relaxed) {
            // Redis unreachable: no key may take more than its share of a span.
            let share = self.limit.div_ceil(self.spans);
            if (st.span_local + cost) * st.nodes() > share * 1_000 {
                let span_end = self.span_end(st.interval, st.span % self.spans);
                return self.deny(span_end - now, interval_end - now);
            }
        }
        let fleet = st.fleet();
        let step = match self.window {
            Window::Fixed(fw) => {
                let mut s = FixedWindowState {
                    window: st.interval,
                    count: fleet,
                };
                fw.acquire(&mut s, now, cost)
            }
            Window::Sliding(swc) => {
                let mut s = SlidingWindowCounterState {
                    window: st.interval,
                    cur: fleet,
                    prev: st.prev_fleet,
                };
                swc.acquire(&mut s, now, cost)
            }
        };
        if step.allowed {
            st.local += cost;
            st.span_local += cost;
        }
        step
    }

    fn release(&self, st: &mut SpanState, acquired_at_us: u64, cost: u64) {
        if st.interval == acquired_at_us / self.interval_us {
            // The next flush writes the lower cumulative count.
            st.local = st.local.saturating_sub(cost);
            st.span_local = st.span_local.saturating_sub(cost);
        }
    }

    fn idle_at(&self, st: &SpanState) -> u64 {
        if st.dirty() {
            return u64::MAX;
        }
        // The counts weigh until the next interval ends (sliding), and a
        // block until it lifts.
        ((st.interval + 2) * self.interval_us).max(st.blocked_until)
    }
}

/// One rule in the approximate mode.
pub(crate) struct ApproxRule {
    rule: Rule,
    redis: Arc<Redis>,
    shared: Arc<Shared>,
    keys: KeyBase,
    store: Arc<MemoryLimiter<SpanMeter, Arc<dyn Clock>>>,
    interval_us: u64,
    limit: u64,
    cooldown_us: Option<u64>,
}

/// A limiter of the approximate mode.
#[derive(Clone)]
pub(crate) struct ApproxLimiter(Arc<ApproxRule>);

impl ApproxLimiter {
    pub(crate) fn new(
        redis: Arc<Redis>,
        shared: Arc<Shared>,
        rule: &Rule,
    ) -> Result<Self, ConfigError> {
        rule.validate()?;
        let q = rule.quota();
        let named = |e: ConfigError| e.in_rule(rule.name());
        let window = match rule.algorithm() {
            Algorithm::FixedWindow => Window::Fixed(FixedWindow::new(q).map_err(named)?),
            Algorithm::SlidingWindowCounter => {
                Window::Sliding(SlidingWindowCounter::new(q).map_err(named)?)
            }
            other => {
                return Err(ConfigError::new(
                    "algorithm",
                    format!(
                        "{} cannot be counted approximately (the approximate mode counts per interval): use \
                         fixed_window() or sliding_window_counter(), the leased mode for a token bucket, or the \
                         exact mode",
                        other.name()
                    ),
                )
                .in_rule(rule.name()));
            }
        };
        let options = &shared.options;
        let interval_us = q.period().as_micros() as u64;
        if interval_us / u64::from(options.spans) < 1_000 {
            return Err(ConfigError::new(
                "approximate.spans",
                format!(
                    "make spans shorter than 1 ms for a period of {:?}",
                    q.period()
                ),
            )
            .in_rule(rule.name()));
        }
        let cooldown_us = options.cooldown.map(|c| c.as_micros() as u64);
        let meter = SpanMeter {
            window,
            limit: q.limit(),
            interval_us,
            spans: u64::from(options.spans),
            strict_when_down: rule.failure_policy() == FailurePolicy::LocalFallback,
            shared: shared.clone(),
        };
        let store = MemoryBackend::with_clock(redis.local_clock())
            .max_keys(options.max_keys)
            .limiter_for(meter)
            .map_err(|e| e.in_rule(rule.name()))?;
        let this = Arc::new(ApproxRule {
            rule: rule.clone(),
            keys: KeyBase::new(&redis.config.key_prefix, rule.name()),
            redis,
            shared: shared.clone(),
            store,
            interval_us,
            limit: q.limit(),
            cooldown_us,
        });
        shared.rules.add(&this);
        if this.redis.config.test_clock.is_none() {
            ApproxRule::schedule(&this);
        }
        Ok(Self(this))
    }
}

/// One key's counts to write.
struct Write {
    key: Key,
    interval: u64,
    /// This instance's cumulative count, taken at the start of `span`.
    cum: u64,
    span: u64,
    /// This instance's count at the start of the span before.
    mine_prev: u64,
}

impl Write {
    /// The key's count for its current interval.
    fn current(key: &Key, st: &SpanState) -> Self {
        Self {
            key: *key,
            interval: st.interval,
            cum: st.local,
            span: st.span,
            mine_prev: st.at_prev_span,
        }
    }
}

/// The other instances' counts in a flush reply, by age.
#[derive(Debug, Default)]
struct Others {
    same: u64,
    prev: u64,
    older: u64,
}

/// How many hashes a rule's keys are spread over per interval. A flush
/// costs a few commands per bucket, whatever the number of keys; in a
/// cluster the buckets spread over the slots.
pub(crate) const BUCKETS: u64 = 8;

/// The most keys one flush call carries.
const FLUSH_CHUNK: usize = 256;

/// The bucket of a key: the same on every instance (FNV-1a of its bytes).
fn bucket_of(key: &Key) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in std::iter::once(u8::from(key.is_digest())).chain(key.as_bytes().iter().copied()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % BUCKETS
}

impl ApproxRule {
    /// Flushes at every span end until the rule is dropped.
    fn schedule(this: &Arc<Self>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::error!(
                rule = this.rule.name(),
                "approximate mode needs a Tokio runtime to flush; counting locally only"
            );
            return;
        };
        let weak = Arc::downgrade(this);
        let span_us = this.interval_us / u64::from(this.shared.options.spans);
        rt.spawn(async move {
            loop {
                let now = throttle_core::unix_now_us();
                // Just after the next span boundary.
                let next = (now / span_us + 1) * span_us + 200;
                tokio::time::sleep(Duration::from_micros(next - now)).await;
                let Some(rule) = weak.upgrade() else { return };
                rule.flush().await;
            }
        });
    }

    /// The hash of one bucket for one interval.
    fn bucket_name(&self, bucket: u64, interval: u64) -> String {
        self.keys.bucket(bucket, interval)
    }

    /// Writes every dirty key's cumulative count and reads the fleet totals;
    /// returns whether it all reached Redis.
    pub(crate) async fn flush(&self) -> bool {
        let mut writes: HashMap<(u64, u64), Vec<Write>> = HashMap::new();
        let now = self.redis.local_now();
        let meter = self.store.meter();
        let mut dirty = 0;
        self.store.for_each(|key, st| {
            meter.roll(st, now);
            let bucket = bucket_of(key);
            if st.pending_local > 0 {
                dirty += 1;
                writes
                    .entry((bucket, st.pending_interval))
                    .or_default()
                    .push(Write {
                        key: *key,
                        interval: st.pending_interval,
                        cum: st.pending_local,
                        span: st.interval * meter.spans - 1,
                        mine_prev: 0,
                    });
            }
            if st.local != st.flushed {
                dirty += 1;
                writes
                    .entry((bucket, st.interval))
                    .or_default()
                    .push(Write::current(key, st));
            }
        });
        let c = &self.shared.counters;
        c.pending_keys.store(dirty, Ordering::Relaxed);
        if writes.is_empty() {
            return true;
        }
        let started = Instant::now();
        let mut calls = Vec::new();
        for ((bucket, interval), group) in &writes {
            for chunk in group.chunks(FLUSH_CHUNK) {
                calls.push(self.flush_bucket(*bucket, *interval, chunk, now));
            }
        }
        let ok = futures_util::future::join_all(calls)
            .await
            .into_iter()
            .all(|r| r);
        if ok {
            let us = started.elapsed().as_micros() as u64;
            c.flushes.fetch_add(1, Ordering::Relaxed);
            c.last_flush_us.store(us, Ordering::Relaxed);
            c.max_flush_us.fetch_max(us, Ordering::Relaxed);
        } else {
            c.failed_flushes.fetch_add(1, Ordering::Relaxed);
        }
        self.shared.redis_ok.store(ok, Ordering::Relaxed);
        ok
    }

    /// One flush call for keys sharing a bucket and interval; applies the
    /// reply. Returns whether it reached Redis.
    async fn flush_bucket(&self, bucket: u64, interval: u64, writes: &[Write], now: u64) -> bool {
        let name = self.bucket_name(bucket, interval);
        // Kept until the next interval ends (the sliding estimate reads it),
        // plus a second.
        let ttl_ms = ((interval + 2) * self.interval_us).saturating_sub(now) / 1_000 + 1_000;
        let mut inv = APPROX_FLUSH_SCRIPT.prepare_invoke();
        inv.key(name).arg(&self.shared.instance).arg(ttl_ms);
        let mut field = String::new();
        for w in writes {
            field.clear();
            w.key.write_hex(&mut field);
            inv.arg(field.as_str()).arg(format!("{}:{}", w.cum, w.span));
        }
        match self
            .redis
            .eval_off_path::<Vec<String>>(&inv, self.shared.options.flush_timeout)
            .await
        {
            Ok(others) if others.len() == writes.len() => {
                self.apply(writes, &others);
                true
            }
            Ok(_) => false,
            Err(failure) => {
                tracing::debug!(rule = self.rule.name(), %failure, "flush failed; counts kept for the next one");
                false
            }
        }
    }

    /// Sorts the other instances' `count:span` values by age relative to
    /// this instance's write.
    fn others(w: &Write, values: &str) -> Others {
        let mut others = Others::default();
        for value in values.split(',').filter(|v| !v.is_empty()) {
            let Some((cum, span)) = value.split_once(':') else {
                continue;
            };
            let (Ok(cum), Ok(span)) = (cum.parse::<u64>(), span.parse::<u64>()) else {
                continue;
            };
            if span >= w.span {
                others.same += cum;
            } else if span + 1 == w.span {
                others.prev += cum;
            } else {
                others.older += cum;
            }
        }
        others
    }

    fn apply(&self, writes: &[Write], replies: &[String]) {
        let c = &self.shared.counters;
        let now = self.redis.local_now();
        for (w, values) in writes.iter().zip(replies) {
            let o = Self::others(w, values);
            let raw = w.cum + o.same + o.prev + o.older;
            // The fleet as of this write: older counts brought forward.
            let equivalent = w.cum + o.same + o.older + extrapolate(o.prev, w.mine_prev, w.cum);
            let nodes_milli = (equivalent * 1_000)
                .checked_div(w.cum)
                .map_or(1_000, |n| n.max(1_000));
            if raw > self.limit {
                c.max_overshoot
                    .fetch_max(raw - self.limit, Ordering::Relaxed);
            }
            c.nodes_estimate_milli.store(nodes_milli, Ordering::Relaxed);
            self.store.update(&w.key, |st| {
                if st.interval == w.interval {
                    st.flushed = w.cum;
                    st.flush_mine_prev = w.mine_prev;
                    st.others_a = o.same;
                    st.others_b = o.prev;
                    st.others_c = o.older;
                    st.nodes_milli = nodes_milli;
                    if raw > self.limit {
                        let end = (w.interval + 1) * self.interval_us;
                        st.blocked_until = self.cooldown_us.map_or(end, |cd| now + cd);
                    }
                } else if st.pending_local > 0 && st.pending_interval == w.interval {
                    if st.pending_local == w.cum {
                        st.pending_local = 0;
                    }
                    if st.interval == w.interval + 1 {
                        st.prev_fleet = st.prev_fleet.max(raw);
                    }
                }
            });
        }
    }

    /// The local decision. A key the fleet has not been heard about yet
    /// (no flush reply so far) that takes more than its share of a span
    /// (`MAX / N`) is flushed at once, without waiting for the span to end:
    /// a burst on a new key then learns about the other instances within a
    /// round trip instead of a span. Keys with a node estimate never flush
    /// early, so steady load costs no extra commands.
    fn decide(self: &Arc<Self>, key: &Key, cost: u64) -> Result<Outcome, Unavailable> {
        let redis_ok = self.shared.redis_ok.load(Ordering::Relaxed);
        if !redis_ok && self.rule.failure_policy() == FailurePolicy::FailClosed {
            return Err(Unavailable::new("Redis is unavailable"));
        }
        let meter = self.store.meter();
        let share = self.limit / meter.spans;
        let (step, now, early) = self.store.with_state(key, |st, now| {
            let step = meter.acquire(st, now, cost);
            let early = redis_ok
                && step.allowed
                && st.nodes_milli == 0
                && st.early_span != st.span + 1
                && st.span_local > share;
            if early {
                st.early_span = st.span + 1;
            }
            (step, now, early.then(|| Write::current(key, st)))
        });
        if let Some(write) = early {
            self.flush_early(write);
        }
        if !step.allowed {
            self.shared
                .counters
                .local_denials
                .fetch_add(1, Ordering::Relaxed);
        }
        let mut outcome = Outcome::new(step, now);
        outcome.degraded = !redis_ok;
        Ok(outcome)
    }

    fn flush_early(self: &Arc<Self>, write: Write) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        rt.spawn(async move {
            let now = this.redis.local_now();
            let (bucket, interval) = (bucket_of(&write.key), write.interval);
            this.flush_bucket(bucket, interval, &[write], now).await;
        });
    }
}

impl Limiter for ApproxLimiter {
    #[inline]
    fn acquire(&self, key: &Key, cost: u64) -> Acquire {
        Acquire::Ready(ApproxRule::decide(&self.0, key, cost))
    }

    fn release(&self, key: &Key, cost: u64, outcome: &Outcome) {
        self.0.store.release(key, cost, outcome);
    }
}
