//! Exact mode: atomic scripts, with Redis' own clock.
//!
//! Checks of one rule that arrive while a call for that rule is on its way
//! are sent together in the next call: the batch script runs them in order,
//! exactly as separate calls would, but reads and writes a repeated key once
//! and costs one round trip, one `EVALSHA` and one `TIME` for all of them.
//! A lone check goes out at once, so batching adds no latency; under load
//! batches grow with the concurrency, and a hot key (the attack case) costs
//! Redis a small fraction of one call per request.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use redis::{Script, ScriptInvocation};
use throttle_core::algorithm::{
    FixedWindow, FixedWindowState, Gcra, GcraState, Meter, SlidingWindowCounter,
    SlidingWindowCounterState, SlidingWindowLog,
};
use throttle_core::{
    Acquire, Algorithm, ConfigError, Key, Limiter, Outcome, Rule, Step, Unavailable,
};

use crate::conn::{Failure, Redis};
use crate::failure::{degraded, local_limiter};
use crate::keys::KeyBase;
use crate::scripts::{
    FIXED_WINDOW_BATCH_SCRIPT, FIXED_WINDOW_RELEASE_SCRIPT, GCRA_BATCH_SCRIPT, GCRA_RELEASE_SCRIPT,
    SLIDING_COUNTER_BATCH_SCRIPT, SLIDING_COUNTER_RELEASE_SCRIPT, SLIDING_LOG_RELEASE_SCRIPT,
    SLIDING_LOG_SCRIPT,
};

/// The most checks one batch call carries.
const MAX_BATCH: usize = 256;

/// The most checks waiting for a call: past this Redis is not keeping up,
/// and further checks are decided by the failure policy at once.
const MAX_QUEUE: usize = 16 * MAX_BATCH;

/// A check waiting for the next batch call.
struct Job {
    key: Key,
    cost: u64,
    /// Redis's answer, or `None`: Redis could not be asked, and the waiting
    /// check decides by failure policy itself (so a check that gave up
    /// waiting is never decided twice).
    reply: oneshot::Sender<Option<Outcome>>,
}

/// The checks of one rule waiting to be sent, and whether a call is out.
#[derive(Default)]
struct Batcher {
    queue: Mutex<Vec<Job>>,
    sending: AtomicBool,
}

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

    /// The script that runs many checks of this rule in one call, for
    /// every algorithm but the log (whose checks each walk a sorted set).
    fn batch_script(&self) -> Option<&'static Script> {
        match self {
            Self::Fixed(_) => Some(&FIXED_WINDOW_BATCH_SCRIPT),
            Self::Counter(_) => Some(&SLIDING_COUNTER_BATCH_SCRIPT),
            Self::Gcra(_) => Some(&GCRA_BATCH_SCRIPT),
            Self::Log(_) => None,
        }
    }

    /// The batch script's arguments after the keys: "now", the rule's
    /// parameters, then each check's cost.
    fn batch_args(
        &self,
        inv: &mut ScriptInvocation<'_>,
        now: u64,
        costs: impl Iterator<Item = u64>,
    ) {
        inv.arg(now);
        match self {
            Self::Fixed(m) => {
                inv.arg(m.capacity()).arg(m.period_us());
                costs.for_each(|c| {
                    inv.arg(c);
                });
            }
            Self::Counter(m) => {
                inv.arg(m.capacity()).arg(m.period_us());
                costs.for_each(|c| {
                    inv.arg(c);
                });
            }
            Self::Gcra(m) => {
                let (tau_us, tau_rem) = m.tau();
                inv.arg(m.limit()).arg(tau_us).arg(tau_rem);
                costs.for_each(|c| {
                    let (inc_us, inc_rem) = m.increment(c);
                    inv.arg(inc_us).arg(inc_rem);
                });
            }
            Self::Log(_) => {}
        }
    }

    /// Turns a batch script's reply into each check's step and "now", with
    /// the same report code the memory backend uses.
    fn batch_steps(&self, reply: &[i64], costs: &[u64]) -> Option<Vec<(Step, u64)>> {
        let n = |i: usize| reply.get(i).and_then(|&v| u64::try_from(v).ok());
        let mut steps = Vec::with_capacity(costs.len());
        for (j, &cost) in costs.iter().enumerate() {
            steps.push(match self {
                Self::Fixed(m) => {
                    let at = 4 * j;
                    let st = FixedWindowState {
                        window: n(at + 1)?,
                        count: n(at + 2)?,
                    };
                    let now = n(at + 3)?;
                    (m.report(&st, now, cost, n(at)? == 1), now)
                }
                Self::Counter(m) => {
                    let at = 5 * j;
                    let st = SlidingWindowCounterState {
                        window: n(at + 1)?,
                        cur: n(at + 2)?,
                        prev: n(at + 3)?,
                    };
                    let now = n(at + 4)?;
                    (m.report(&st, now, cost, n(at)? == 1), now)
                }
                Self::Gcra(m) => {
                    let at = 3 * j;
                    let st = GcraState {
                        tat_us: n(at + 1)?,
                        tat_rem: n(at + 2)?,
                    };
                    let now = n(3 * costs.len())?;
                    (m.report(&st, now, cost, n(at)? == 1), now)
                }
                Self::Log(_) => return None,
            });
        }
        Some(steps)
    }

    /// The log's arguments after the keys.
    fn log_args(m: &SlidingWindowLog, inv: &mut ScriptInvocation<'_>, now: u64, cost: u64) {
        inv.arg(now).arg(m.capacity()).arg(m.period_us()).arg(cost);
    }

    /// Turns the log script's reply into the step and the script's "now".
    fn log_step(m: &SlidingWindowLog, reply: &[i64], cost: u64) -> Option<(Step, u64)> {
        let n = |i: usize| reply.get(i).and_then(|&v| u64::try_from(v).ok());
        let allowed = n(0)? == 1;
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
        Some((step, now))
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
    batcher: Batcher,
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
            batcher: Batcher::default(),
        })))
    }
}

impl Inner {
    fn invocation(&self, script: &'static Script, key: &Key) -> ScriptInvocation<'static> {
        let mut inv = script.prepare_invoke();
        for suffix in self.compiled.suffixes() {
            inv.key(self.keys.key(key, suffix));
        }
        inv
    }

    /// One check of a sliding window log, in its own call.
    async fn log(
        self: Arc<Self>,
        m: SlidingWindowLog,
        key: Key,
        cost: u64,
    ) -> Result<Outcome, Unavailable> {
        let mut inv = self.invocation(&SLIDING_LOG_SCRIPT, &key);
        Compiled::log_args(&m, &mut inv, self.redis.script_now(), cost);
        let failure = match self.redis.eval::<Vec<i64>>(&inv).await {
            Ok(reply) => match Compiled::log_step(&m, &reply, cost) {
                Some((step, at_us)) => return Ok(Outcome::new(step, at_us)),
                None => unexpected_reply(),
            },
            Err(failure) => failure,
        };
        tracing::debug!(rule = self.rule.name(), %failure, "deciding by failure policy");
        self.degraded(&key, cost)
    }

    /// Queues a check for the next batch call, starting one if none is out.
    fn enqueue(self: &Arc<Self>, key: Key, cost: u64) -> Acquire {
        let (reply, answer) = oneshot::channel();
        {
            let mut queue = self.batcher.queue.lock();
            if queue.len() >= MAX_QUEUE {
                drop(queue);
                return Acquire::Ready(self.degraded(&key, cost));
            }
            queue.push(Job { key, cost, reply });
        }
        if !self.batcher.sending.swap(true, Ordering::AcqRel) {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    rt.spawn(self.clone().send_batches());
                }
                Err(_) => {
                    // No runtime to send from: decide by failure policy.
                    self.batcher.sending.store(false, Ordering::Release);
                    let jobs = std::mem::take(&mut *self.batcher.queue.lock());
                    self.answer_locally(jobs);
                }
            }
        }
        // A check may wait for the call before its own: its wait is bounded
        // from now, so a hung Redis still costs it one command timeout at
        // most. (If the call runs later anyway, its answer is dropped; like
        // any timed-out script, it may still count in Redis.)
        let this = self.clone();
        let patience = self.redis.config.command_timeout;
        Acquire::Pending(Box::pin(async move {
            match tokio::time::timeout(patience, answer).await {
                Ok(Ok(Some(outcome))) => Ok(outcome),
                Ok(Ok(None) | Err(_)) | Err(_) => this.degraded(&key, cost),
            }
        }))
    }

    /// Sends what is queued, one call at a time, until the queue is empty.
    async fn send_batches(self: Arc<Self>) {
        loop {
            let jobs = std::mem::take(&mut *self.batcher.queue.lock());
            if jobs.is_empty() {
                self.batcher.sending.store(false, Ordering::Release);
                // A check queued between the take and the store above would
                // wait for nobody: take the sending role back if so.
                if self.batcher.queue.lock().is_empty()
                    || self.batcher.sending.swap(true, Ordering::AcqRel)
                {
                    return;
                }
                continue;
            }
            if self.redis.is_cluster() {
                // A script touches one slot: one call per key (concurrently).
                let mut by_key: HashMap<Key, Vec<Job>> = HashMap::new();
                for job in jobs {
                    by_key.entry(job.key).or_default().push(job);
                }
                futures_util::future::join_all(by_key.into_values().map(|group| self.send(group)))
                    .await;
            } else {
                let mut jobs = jobs;
                while jobs.len() > MAX_BATCH {
                    let rest = jobs.split_off(MAX_BATCH);
                    self.send(jobs).await;
                    jobs = rest;
                }
                self.send(jobs).await;
            }
        }
    }

    /// One batch call; answers every check in it. Checks that stopped
    /// waiting (they were answered by the failure policy) are not sent: a
    /// request told "unavailable" is not charged.
    async fn send(&self, mut jobs: Vec<Job>) {
        jobs.retain(|job| !job.reply.is_closed());
        if jobs.is_empty() {
            return;
        }
        let Some(script) = self.compiled.batch_script() else {
            return self.answer_locally(jobs);
        };
        if self.redis.breaker.is_open() {
            return self.answer_locally(jobs);
        }
        let mut inv = script.prepare_invoke();
        for job in &jobs {
            for suffix in self.compiled.suffixes() {
                inv.key(self.keys.key(&job.key, suffix));
            }
        }
        let costs: Vec<u64> = jobs.iter().map(|j| j.cost).collect();
        self.compiled
            .batch_args(&mut inv, self.redis.script_now(), costs.iter().copied());
        let failure = match self.redis.eval::<Vec<i64>>(&inv).await {
            Ok(reply) => match self.compiled.batch_steps(&reply, &costs) {
                Some(steps) => {
                    for (job, (step, at_us)) in jobs.into_iter().zip(steps) {
                        let _ = job.reply.send(Some(Outcome::new(step, at_us)));
                    }
                    return;
                }
                None => unexpected_reply(),
            },
            Err(failure) => failure,
        };
        tracing::debug!(rule = self.rule.name(), %failure, checks = jobs.len(), "deciding by failure policy");
        self.answer_locally(jobs);
    }

    fn answer_locally(&self, jobs: Vec<Job>) {
        for job in jobs {
            let _ = job.reply.send(None);
        }
    }

    /// The rule's failure policy decides.
    pub(crate) fn degraded(&self, key: &Key, cost: u64) -> Result<Outcome, Unavailable> {
        degraded(&self.redis, &self.rule, self.local.as_deref(), key, cost)
    }
}

fn unexpected_reply() -> Failure {
    Failure::Error(redis::RedisError::from((
        redis::ErrorKind::Parse,
        "unexpected reply from the rate-limit script",
    )))
}

impl Limiter for ExactLimiter {
    fn acquire(&self, key: &Key, cost: u64) -> Acquire {
        if self.0.redis.breaker.is_open() {
            return Acquire::Ready(self.0.degraded(key, cost));
        }
        match self.0.compiled {
            Compiled::Log(m) => Acquire::Pending(Box::pin(self.0.clone().log(m, *key, cost))),
            _ => self.0.enqueue(*key, cost),
        }
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
