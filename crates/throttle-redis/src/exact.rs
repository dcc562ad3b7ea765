//! Exact mode: one atomic script per check.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use redis::{Script, ScriptInvocation};
use throttle_core::algorithm::{
    FixedWindow, FixedWindowState, Gcra, GcraState, Meter, SlidingWindowCounter,
    SlidingWindowCounterState, SlidingWindowLog,
};
use throttle_core::{
    Acquire, Algorithm, ConfigError, FailurePolicy, Key, Limiter, MemoryBackend, Outcome, Rule,
    Step, Unavailable,
};

use crate::conn::{Failure, Redis};
use crate::keys::KeyBase;
use crate::scripts::{
    FIXED_WINDOW_RELEASE_SCRIPT, FIXED_WINDOW_SCRIPT, GCRA_RELEASE_SCRIPT, GCRA_SCRIPT,
    SLIDING_COUNTER_RELEASE_SCRIPT, SLIDING_COUNTER_SCRIPT, SLIDING_LOG_RELEASE_SCRIPT,
    SLIDING_LOG_SCRIPT,
};

/// The scripts add the bucket's depth to Unix-epoch microseconds in Lua
/// doubles, exact below 2^53: depths up to 2^52 us (about 140 years) fit.
const MAX_LUA_TAU_US: u64 = 1 << 52;

fn lua_safe(gcra: Gcra, rule: &Rule) -> Result<Gcra, ConfigError> {
    if gcra.tau().0 > MAX_LUA_TAU_US {
        return Err(ConfigError::new(
            "quota.burst",
            "makes the bucket take more than 2^52 us (about 140 years) to fill, beyond what the Redis scripts count exactly",
        )
        .in_rule(rule.name()));
    }
    Ok(gcra)
}

/// A rule's algorithm, compiled, as the exact mode runs it.
#[derive(Debug, Clone, Copy)]
enum Compiled {
    Fixed(FixedWindow),
    Counter(SlidingWindowCounter),
    Log(SlidingWindowLog),
    Gcra(Gcra),
}

impl Compiled {
    pub(crate) fn of(rule: &Rule) -> Result<Self, ConfigError> {
        rule.validate()?;
        let q = rule.quota();
        let named = |e: ConfigError| e.in_rule(rule.name());
        Ok(match rule.algorithm() {
            Algorithm::FixedWindow => Self::Fixed(FixedWindow::new(q).map_err(named)?),
            Algorithm::SlidingWindowCounter => {
                Self::Counter(SlidingWindowCounter::new(q).map_err(named)?)
            }
            Algorithm::SlidingWindowLog => Self::Log(SlidingWindowLog::new(q).map_err(named)?),
            Algorithm::TokenBucket => {
                Self::Gcra(lua_safe(Gcra::token_bucket(q).map_err(named)?, rule)?)
            }
            Algorithm::LeakyBucket => {
                Self::Gcra(lua_safe(Gcra::leaky_bucket(q).map_err(named)?, rule)?)
            }
            other => {
                return Err(ConfigError::new(
                    "algorithm",
                    format!("{} is not supported by the Redis backends", other.name()),
                )
                .in_rule(rule.name()));
            }
        })
    }

    fn suffixes(&self) -> &'static [&'static str] {
        match self {
            Self::Fixed(_) => &["fw"],
            Self::Counter(_) => &["swc"],
            Self::Log(_) => &["log", "logm"],
            Self::Gcra(_) => &["gcra"],
        }
    }

    fn script(&self) -> &'static Script {
        match self {
            Self::Fixed(_) => &FIXED_WINDOW_SCRIPT,
            Self::Counter(_) => &SLIDING_COUNTER_SCRIPT,
            Self::Log(_) => &SLIDING_LOG_SCRIPT,
            Self::Gcra(_) => &GCRA_SCRIPT,
        }
    }

    /// The script's arguments after the keys.
    fn args(&self, inv: &mut ScriptInvocation<'_>, now: u64, cost: u64) {
        inv.arg(now);
        match self {
            Self::Fixed(m) => inv.arg(m.capacity()).arg(m.period_us()).arg(cost),
            Self::Counter(m) => inv.arg(m.capacity()).arg(m.period_us()).arg(cost),
            Self::Log(m) => inv.arg(m.capacity()).arg(m.period_us()).arg(cost),
            Self::Gcra(m) => {
                let (inc_us, inc_rem) = m.increment(cost);
                let (tau_us, tau_rem) = m.tau();
                inv.arg(m.limit())
                    .arg(inc_us)
                    .arg(inc_rem)
                    .arg(tau_us)
                    .arg(tau_rem)
            }
        };
    }

    /// Turns the script's reply into the step and the script's "now", with
    /// the same report code the memory backend uses.
    fn step(&self, reply: &[i64], cost: u64) -> Option<(Step, u64)> {
        let n = |i: usize| reply.get(i).and_then(|&v| u64::try_from(v).ok());
        let allowed = n(0)? == 1;
        Some(match self {
            Self::Fixed(m) => {
                let st = FixedWindowState {
                    window: n(1)?,
                    count: n(2)?,
                };
                (m.report(&st, n(3)?, cost, allowed), n(3)?)
            }
            Self::Counter(m) => {
                let st = SlidingWindowCounterState {
                    window: n(1)?,
                    cur: n(2)?,
                    prev: n(3)?,
                };
                (m.report(&st, n(4)?, cost, allowed), n(4)?)
            }
            Self::Gcra(m) => {
                let st = GcraState {
                    tat_us: n(1)?,
                    tat_rem: n(2)?,
                };
                (m.report(&st, n(3)?, cost, allowed), n(3)?)
            }
            Self::Log(m) => {
                let (total, now) = (n(1)?, n(2)?);
                let newest = reply.get(3).copied()?;
                let fit = reply.get(4).copied()?;
                let period = m.period_us();
                let step = Step {
                    allowed,
                    remaining: m.capacity() - total.min(m.capacity()),
                    reset_us: u64::try_from(newest).map_or(0, |at| at + period - now),
                    retry_after_us: match (allowed, u64::try_from(fit)) {
                        (true, _) => 0,
                        (false, Ok(at)) if cost <= m.capacity() => at + period - now,
                        (false, _) => period,
                    },
                    delay_us: 0,
                };
                (step, now)
            }
        })
    }

    fn release_script(&self) -> &'static Script {
        match self {
            Self::Fixed(_) => &FIXED_WINDOW_RELEASE_SCRIPT,
            Self::Counter(_) => &SLIDING_COUNTER_RELEASE_SCRIPT,
            Self::Log(_) => &SLIDING_LOG_RELEASE_SCRIPT,
            Self::Gcra(_) => &GCRA_RELEASE_SCRIPT,
        }
    }

    /// The refund script's arguments after the keys.
    fn release_args(&self, inv: &mut ScriptInvocation<'_>, at: u64, cost: u64) {
        match self {
            Self::Fixed(m) => inv.arg(at).arg(m.period_us()).arg(cost),
            Self::Counter(m) => inv.arg(at).arg(m.period_us()).arg(cost),
            Self::Log(_) => inv.arg(at).arg(cost),
            Self::Gcra(m) => {
                let (inc_us, inc_rem) = m.increment(cost);
                inv.arg(m.limit()).arg(inc_us).arg(inc_rem)
            }
        };
    }
}

struct Inner {
    redis: Arc<Redis>,
    rule: Rule,
    compiled: Compiled,
    keys: KeyBase,
    /// Fail open: counts locally (never denies); local fallback: decides.
    local: Option<Arc<dyn Limiter>>,
}

/// One rule in the exact mode: every check is one `EVALSHA` of the rule's
/// script, reading and updating the key's state atomically with Redis' own
/// clock. Concurrent instances can never admit more than the quota.
#[derive(Clone)]
pub struct ExactLimiter(Arc<Inner>);

impl std::fmt::Debug for ExactLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExactLimiter")
            .field("rule", &self.0.rule)
            .finish_non_exhaustive()
    }
}

impl ExactLimiter {
    pub(crate) fn new(redis: Arc<Redis>, rule: &Rule) -> Result<Self, ConfigError> {
        let compiled = Compiled::of(rule)?;
        let local = local_limiter(&redis, rule)?;
        let keys = KeyBase::new(&redis.config.key_prefix, rule.name());
        Ok(Self(Arc::new(Inner {
            redis,
            rule: rule.clone(),
            compiled,
            keys,
            local,
        })))
    }
}

/// The local limiter a rule's failure policy needs while Redis is away.
pub(crate) fn local_limiter(
    redis: &Redis,
    rule: &Rule,
) -> Result<Option<Arc<dyn Limiter>>, ConfigError> {
    let quota = match rule.failure_policy() {
        FailurePolicy::FailClosed => return Ok(None),
        FailurePolicy::LocalFallback => {
            let share = |n: u64| n.div_ceil(u64::from(redis.config.fleet_size)).max(1);
            let q = rule.quota();
            let scaled = throttle_core::Quota::new(share(q.limit()), q.period());
            match q.explicit_burst() {
                Some(b) => scaled.with_burst(share(b)),
                None => scaled,
            }
        }
        _ => rule.quota(),
    };
    let local_rule = Rule::new(rule.name(), quota)
        .algorithm_is(rule.algorithm())
        .cost(rule.static_cost().min(quota_capacity(rule, quota)));
    let limiter = match &redis.config.test_clock {
        Some(clock) => {
            throttle_core::Backend::limiter(&MemoryBackend::with_clock(clock.clone()), &local_rule)?
        }
        None => throttle_core::Backend::limiter(&MemoryBackend::default(), &local_rule)?,
    };
    Ok(Some(limiter))
}

fn quota_capacity(rule: &Rule, quota: throttle_core::Quota) -> u32 {
    let cap = if rule.algorithm().uses_burst() {
        quota.burst()
    } else {
        quota.limit()
    };
    u32::try_from(cap).unwrap_or(u32::MAX)
}

impl Inner {
    fn invocation(&self, script: &'static Script, key: &Key) -> ScriptInvocation<'static> {
        let mut inv = script.prepare_invoke();
        for suffix in self.compiled.suffixes() {
            inv.key(self.keys.key(key, suffix));
        }
        inv
    }

    async fn remote(self: Arc<Self>, key: Key, cost: u64) -> Result<Outcome, Unavailable> {
        let mut inv = self.invocation(self.compiled.script(), &key);
        self.compiled.args(&mut inv, self.redis.script_now(), cost);
        let failure = match self.redis.eval::<Vec<i64>>(&inv).await {
            Ok(reply) => match self.compiled.step(&reply, cost) {
                Some((step, at_us)) => return Ok(Outcome::new(step, at_us)),
                None => Failure::Error(redis::RedisError::from((
                    redis::ErrorKind::Parse,
                    "unexpected reply from the rate-limit script",
                ))),
            },
            Err(failure) => failure,
        };
        tracing::debug!(rule = self.rule.name(), %failure, "deciding by failure policy");
        self.degraded(&key, cost)
    }

    /// The rule's failure policy decides.
    pub(crate) fn degraded(&self, key: &Key, cost: u64) -> Result<Outcome, Unavailable> {
        degraded(&self.redis, &self.rule, self.local.as_deref(), key, cost)
    }
}

/// Decides by the rule's failure policy, with its local limiter.
pub(crate) fn degraded(
    redis: &Redis,
    rule: &Rule,
    local: Option<&dyn Limiter>,
    key: &Key,
    cost: u64,
) -> Result<Outcome, Unavailable> {
    redis.degraded.fetch_add(1, Ordering::Relaxed);
    let local_outcome = match local.map(|l| l.acquire(key, cost)) {
        Some(Acquire::Ready(Ok(o))) => Some(o),
        _ => None,
    };
    match (rule.failure_policy(), local_outcome) {
        (FailurePolicy::FailClosed, _) | (_, None) => Err(Unavailable::new("Redis is unavailable")),
        (FailurePolicy::LocalFallback, Some(mut o)) => {
            o.degraded = true;
            Ok(o)
        }
        (_, Some(mut o)) => {
            // Fail open: allowed whatever the local count says.
            o.degraded = true;
            o.step.allowed = true;
            o.step.retry_after_us = 0;
            Ok(o)
        }
    }
}

impl Limiter for ExactLimiter {
    fn acquire(&self, key: &Key, cost: u64) -> Acquire {
        if self.0.redis.breaker.is_open() {
            return Acquire::Ready(self.0.degraded(key, cost));
        }
        Acquire::Pending(Box::pin(self.0.clone().remote(*key, cost)))
    }

    fn release(&self, key: &Key, cost: u64, outcome: &Outcome) {
        if outcome.degraded {
            if let Some(local) = &self.0.local {
                local.release(key, cost, outcome);
            }
            return;
        }
        let mut inv = self.0.invocation(self.0.compiled.release_script(), key);
        self.0.compiled.release_args(&mut inv, outcome.at_us, cost);
        self.0.redis.spawn_eval(inv);
    }
}
