//! One rule in the approximate mode: the local decision on the request
//! path and the flush schedule.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use throttle_core::algorithm::{FixedWindow, Meter, SlidingWindowCounter};
use throttle_core::{
    Acquire, Algorithm, Clock, ConfigError, FailurePolicy, Key, Limiter, MemoryBackend,
    MemoryLimiter, Outcome, Rule, Unavailable,
};

use super::flush::Write;
use super::meter::{SpanMeter, Window};
use super::shared::Shared;
use crate::conn::Redis;
use crate::keys::KeyBase;

/// One rule in the approximate mode.
pub(crate) struct ApproxRule {
    pub(super) rule: Rule,
    pub(super) redis: Arc<Redis>,
    pub(super) shared: Arc<Shared>,
    pub(super) keys: KeyBase,
    pub(super) store: Arc<MemoryLimiter<SpanMeter, Arc<dyn Clock>>>,
    pub(super) interval_us: u64,
    pub(super) limit: u64,
    pub(super) cooldown_us: Option<u64>,
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

impl ApproxRule {
    /// Flushes at every span end until the rule is dropped.
    pub(super) fn schedule(this: &Arc<Self>) {
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

    /// The local decision. A key the fleet has not been heard about yet
    /// (no flush reply so far) that takes more than its share of a span
    /// (`MAX / N`) is flushed at once, without waiting for the span to end:
    /// a burst on a new key then learns about the other instances within a
    /// round trip instead of a span. Keys with a node estimate never flush
    /// early, so steady load costs no extra commands.
    pub(super) fn decide(self: &Arc<Self>, key: &Key, cost: u64) -> Result<Outcome, Unavailable> {
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
