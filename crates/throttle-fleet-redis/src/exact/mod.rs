//! Exact mode: atomic scripts, with Redis' own clock.
//!
//! Checks of one rule that arrive while a call for that rule is on its way
//! are sent together in the next call: the batch script runs them in order,
//! exactly as separate calls would, but reads and writes a repeated key once
//! and costs one round trip, one `EVALSHA` and one `TIME` for all of them.
//! A lone check goes out at once, so batching adds no latency; under load
//! batches grow with the concurrency, and a hot key (the attack case) costs
//! Redis a small fraction of one call per request.

mod backend;
mod batch;
mod compiled;
mod deny;

pub use backend::ExactBackend;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::link::LuaScript;
use throttle_fleet_core::algorithm::SlidingWindowLog;
use throttle_fleet_core::backend::{KeyOps, Limiter, Outcome, Unavailable};
use throttle_fleet_core::operate::OpError;

use throttle_fleet_core::{Answer, ConfigError, Key, Rule};

use crate::algorithm_scripts::SLIDING_LOG_SCRIPT;
use crate::failure_policy::{degraded, degraded_read, local_limiter};
use crate::keys::KeyBase;
use crate::link::{Eval, Failure, Redis};
use crate::operate::FleetOps;
use crate::reply::Reply;
use batch::Batcher;
use compiled::Compiled;
use deny::DenyCache;

struct Inner {
    redis: Arc<Redis>,
    rule: Rule,
    compiled: Compiled,
    keys: KeyBase,
    /// Fail open: counts locally (never denies); local fallback: decides.
    local: Option<Arc<dyn Limiter>>,
    batcher: Batcher,
    /// Keys Redis showed over their limit, denied here until their wait is
    /// over.
    deny: DenyCache,
    /// The rule's blocks and resets, shared with the fleet.
    ops: FleetOps,
}

/// One rule in the exact mode: every check is one `EVALSHA` of the rule's
/// script, reading and updating the key's state atomically with Redis' own
/// clock. Concurrent instances can never admit more than the quota.
#[derive(Clone)]
pub(crate) struct ExactLimiter(Arc<Inner>);

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
        let deny = DenyCache::new(redis.local_clock()).map_err(|e| e.in_rule(rule.name()))?;
        let ops = FleetOps::new(&redis, rule);
        Ok(Self(Arc::new(Inner {
            ops,
            redis,
            rule: rule.clone(),
            compiled,
            keys,
            local,
            batcher: Batcher::default(),
            deny,
        })))
    }
}

impl Inner {
    /// The hash slot of a key, for its breaker (0 unless a cluster).
    pub(super) fn group(&self, key: &Key) -> u16 {
        self.redis.slot_for(&self.keys, key)
    }

    /// A call of `script` for `key`'s checks: its keys written, room for
    /// `args` arguments.
    fn invocation(&self, script: &'static LuaScript, key: &Key, args: usize) -> Eval {
        let suffixes = self.compiled.suffixes();
        let mut inv = Eval::new(script, suffixes.len(), args, 20 * args);
        for suffix in suffixes {
            inv.arg(self.keys.key(key, suffix));
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
        let mut inv = self.invocation(&SLIDING_LOG_SCRIPT, &key, 4);
        Compiled::log_args(&m, &mut inv, self.redis.script_now(), cost);
        let sent_at = self.deny.now();
        let failure = match self.redis.eval::<Reply>(&inv, self.group(&key)).await {
            Ok(reply) => match Compiled::log_step(&m, &reply, cost) {
                Some((step, at_us)) => {
                    self.deny.remember(&key, cost, &step, sent_at);
                    return Ok(Outcome::new(step, at_us));
                }
                None => unexpected_reply(),
            },
            Err(failure) => failure,
        };
        tracing::debug!(rule = self.rule.name(), %failure, "deciding by failure policy");
        self.degraded(&key, cost)
    }

    /// An operator's read of `key`: the rule's read script, which writes
    /// nothing, off the request path (a read tells no breaker); the failure
    /// policy's read if Redis does not answer.
    async fn read(self: Arc<Self>, key: Key) -> Result<Outcome, OpError> {
        let mut inv = self.invocation(self.compiled.read_script(), &key, 4);
        self.compiled.read_args(&mut inv, self.redis.script_now());
        let timeout = self.redis.config.command_timeout;
        let read = self
            .redis
            .eval_off_path::<Reply>(&inv, self.group(&key), timeout);
        let failure = match read.await {
            Ok(reply) => match self.compiled.read_step(&reply) {
                Some((step, at_us)) => return Ok(Outcome::new(step, at_us)),
                None => unexpected_reply(),
            },
            Err(failure) => failure,
        };
        tracing::debug!(rule = self.rule.name(), %failure, "reading by failure policy");
        degraded_read(&self.rule, self.local.as_deref(), &key)
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

impl ExactLimiter {
    fn fleet(&self) -> &FleetOps {
        &self.0.ops
    }
}

impl Limiter for ExactLimiter {
    fn ops(&self) -> Option<&dyn KeyOps> {
        Some(self)
    }

    fn acquire(&self, key: &Key, cost: u64, _limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        let renamed = self.0.ops.renamed(key);
        let key = renamed.as_ref().unwrap_or(key);
        if let Some((step, now)) = self.0.deny.check(key, cost) {
            self.0.redis.denied_locally.fetch_add(1, Ordering::Relaxed);
            return Answer::Ready(Ok(Outcome::new(step, now)));
        }
        if self.0.redis.is_open(self.0.group(key)) {
            return Answer::Ready(self.0.degraded(key, cost));
        }
        match self.0.compiled {
            Compiled::Log(m) => Answer::Pending(Box::pin(self.0.clone().log(m, *key, cost))),
            _ => self.0.enqueue(*key, cost),
        }
    }

    fn is_remote(&self) -> bool {
        true
    }

    /// The counts are Redis's, under the rule's name: a limiter for the new
    /// quota reads them as they are (with a deny cache of its own: denials
    /// remembered under the old quota may not hold under the new one).
    fn requota(&self, rule: &Rule) -> Option<Arc<dyn Limiter>> {
        Some(Arc::new(
            ExactLimiter::new(self.0.redis.clone(), rule).ok()?,
        ))
    }

    fn refund(&self, key: &Key, cost: u64, outcome: &Outcome) {
        let renamed = self.0.ops.renamed(key);
        let key = renamed.as_ref().unwrap_or(key);
        if outcome.degraded {
            if let Some(local) = &self.0.local {
                local.refund(key, cost, outcome);
            }
            return;
        }
        let mut inv = self.0.invocation(self.0.compiled.refund_script(), key, 3);
        self.0.compiled.refund_args(&mut inv, outcome.at_us, cost);
        self.0.redis.spawn_eval(inv, self.0.group(key));
    }
}

impl KeyOps for ExactLimiter {
    /// The key's state in Redis, read by the rule's read script: what a
    /// check of cost 0 would find, with no key written (a check of cost 0
    /// writes the key's state and its expiry, or creates it). While the
    /// breaker of the key's node is open, or if Redis does not answer, the
    /// failure policy's read: its local counts, marked degraded (a
    /// fail-closed rule: unavailable).
    fn peek(&self, key: &Key) -> Answer<Result<Outcome, OpError>> {
        let key = self.0.ops.renamed(key).unwrap_or(*key);
        if self.0.redis.is_open(self.0.group(&key)) {
            return Answer::Ready(degraded_read(&self.0.rule, self.0.local.as_deref(), &key));
        }
        Answer::Pending(Box::pin(self.0.clone().read(key)))
    }

    crate::operate::fleet_operations!();
}
