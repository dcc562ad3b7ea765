//! Concurrency rules in Redis, on the exact mode's connections: at most
//! `n` requests of a key in flight across the fleet.
//!
//! - **Acquire**: one script call (one round trip) adds this request's
//!   member to the key's sorted set, scored by when it expires, if the
//!   cost fits; it first drops the members whose time has passed.
//! - **Release**: when the request ends, its member is removed by a script
//!   sent in the background: the response never waits for it.
//! - **Renewal**: every third of the slot lifetime, one script call per key
//!   with running requests moves their members' expiry forward, so a
//!   request keeps its slot however long it runs, while the slots of an
//!   instance that died (SIGKILL, power loss) come back after at most one
//!   slot lifetime.
//! - **Failure**: while Redis cannot be asked, the rule's failure policy
//!   decides (open: allow, counted locally; closed: refuse; local: a
//!   local limit of `n /` fleet size). A grant whose reply was lost (a
//!   timeout, or a request cancelled while its acquire was on its way) is
//!   taken back in the background, and otherwise expires after one slot
//!   lifetime. A slot that expired while this instance
//!   could not reach Redis for a whole lifetime is not added back (a
//!   release racing the renewal could otherwise bring back a slot whose
//!   request had ended): its request runs on uncounted, and
//!   [`SlotStats::lost`] counts it.

mod concurrency_script;
mod held_slots;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use throttle_fleet_core::algorithm::Concurrency;
use throttle_fleet_core::backend::{KeyOps, Limiter, Outcome, Unavailable};
use throttle_fleet_core::operate::{Block, Blocks, OpError};
use throttle_fleet_core::{Answer, ConfigError, Key, Rule};

use crate::failure_policy::{degraded, degraded_read, local_limiter};
use crate::keys::KeyBase;
use crate::link::{Eval, Redis};
use crate::operate::FleetOps;
use crate::registry::Registry;
use crate::reply::Reply;
use crate::schedule::{Every, Going, micros};
use concurrency_script::{CONCURRENCY_SCRIPT, NO_CLOCK};
use held_slots::{HeldSlots, Slot};

/// The refusal of a concurrency rule by a mode that decides from local
/// counts.
pub(crate) fn needs_exact_mode(rule: &Rule) -> ConfigError {
    ConfigError::new(
        "algorithm",
        "concurrency needs the exact mode: the approximate and leased modes decide from local counts, which cannot bound requests in flight across the fleet",
    )
    .in_rule(rule.name())
}

/// What the concurrency rules of a backend have done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SlotStats {
    /// Slots this instance holds in Redis now (its running requests').
    pub held: u64,
    /// Slots granted by Redis so far.
    pub granted: u64,
    /// Slots given back so far.
    pub released: u64,
    /// Renewal calls sent (one per key with running requests, every third
    /// of the slot lifetime).
    pub renewals: u64,
    /// Slots found expired at a renewal: their instance could not reach
    /// Redis for a whole slot lifetime; their requests ran on uncounted.
    pub lost: u64,
}

/// The concurrency rules of one backend: this instance's id in the
/// members' names, and the live rules (for renewals and shutdown).
pub(crate) struct Shared {
    instance: String,
    seq: AtomicU64,
    rules: Registry<Inner>,
    granted: AtomicU64,
    released: AtomicU64,
    renewals: AtomicU64,
    lost: AtomicU64,
}

impl Shared {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            instance: crate::instance::instance_id(),
            seq: AtomicU64::new(1),
            rules: Registry::default(),
            granted: AtomicU64::new(0),
            released: AtomicU64::new(0),
            renewals: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        })
    }

    pub(crate) fn stats(&self) -> SlotStats {
        SlotStats {
            held: self
                .rules
                .live()
                .iter()
                .map(|r| r.held.lock().len() as u64)
                .sum(),
            granted: self.granted.load(Ordering::Relaxed),
            released: self.released.load(Ordering::Relaxed),
            renewals: self.renewals.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
        }
    }

    /// Gives back every slot still held (a shutdown: the requests that
    /// held them will not end here). Returns whether all got there.
    pub(crate) async fn release_all(&self) -> bool {
        let mut ok = true;
        for rule in self.rules.live() {
            let drained = rule.held.lock().drain();
            for (key, slots) in drained {
                for slot in slots {
                    let inv = rule.release_call(&key, slot);
                    let timeout = rule.redis.config.command_timeout;
                    ok &= rule
                        .redis
                        .eval_off_path::<redis::Value>(&inv, rule.group(&key), timeout)
                        .await
                        .is_ok();
                    self.released.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        ok
    }
}

struct Inner {
    redis: Arc<Redis>,
    shared: Arc<Shared>,
    rule: Rule,
    meter: Concurrency,
    keys: KeyBase,
    /// Fail open: counts locally (never denies); local fallback: decides.
    local: Option<Arc<dyn Limiter>>,
    held: Mutex<HeldSlots>,
    /// Whether the background renewal was started.
    renewing: AtomicBool,
    /// The rule's blocks, shared with the fleet (a concurrency rule is
    /// neither reset nor penalized: its slots are held by running requests).
    ops: FleetOps,
}

/// One concurrency rule in Redis (see the module's docs).
#[derive(Clone)]
pub(crate) struct SlotLimiter(Arc<Inner>);

impl SlotLimiter {
    pub(crate) fn new(
        redis: Arc<Redis>,
        shared: Arc<Shared>,
        rule: &Rule,
    ) -> Result<Self, ConfigError> {
        rule.validate()?;
        let meter = Concurrency::new(rule.quota()).map_err(|e| e.in_rule(rule.name()))?;
        let local = local_limiter(&redis, rule)?;
        let keys = KeyBase::new(&redis.config.key_prefix, rule.name());
        let inner = Arc::new(Inner {
            ops: FleetOps::new(&redis, rule),
            redis,
            shared,
            rule: rule.clone(),
            meter,
            keys,
            local,
            held: Mutex::new(HeldSlots::default()),
            renewing: AtomicBool::new(false),
        });
        inner.shared.rules.add(&inner);
        Ok(Self(inner))
    }
}

impl Inner {
    fn group(&self, key: &Key) -> u16 {
        self.redis.slot_for(&self.keys, key)
    }

    /// The rule's slot lifetime (a concurrency rule's: see
    /// [`InFlightLimit::slot_ttl`](throttle_fleet_core::InFlightLimit::slot_ttl)).
    fn slot_ttl(&self) -> std::time::Duration {
        self.rule
            .in_flight_limit()
            .map_or(throttle_fleet_core::limits::DEFAULT_SLOT_TTL, |c| {
                c.slot_ttl
            })
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.slot_ttl().as_millis()).unwrap_or(u64::MAX)
    }

    fn member(&self, slot: Slot) -> String {
        format!("{}:{}:{}", self.shared.instance, slot.seq, slot.cost)
    }

    /// A call of the slots script for `key`: operation `op`, at `now`,
    /// with room for `args` more arguments.
    fn call(&self, key: &Key, now: u64, op: &str, args: usize) -> Eval {
        let mut inv = Eval::new(&CONCURRENCY_SCRIPT, 2, 2 + args, 24 * (2 + args));
        inv.arg(self.keys.key(key, "cz"))
            .arg(self.keys.key(key, "ct"))
            .arg(now)
            .arg(op);
        inv
    }

    fn release_call(&self, key: &Key, slot: Slot) -> Eval {
        let mut inv = self.call(key, NO_CLOCK, "r", 2);
        inv.arg(self.member(slot)).arg(slot.cost);
        inv
    }

    /// Takes a slot of `cost` for `key` if what the fleet holds plus
    /// `cost` is at most `limit` (the rule's, or a class's share of it).
    async fn acquire(
        self: Arc<Self>,
        key: Key,
        cost: u64,
        limit: u64,
    ) -> Result<Outcome, Unavailable> {
        let slot = Slot {
            seq: self.shared.seq.fetch_add(1, Ordering::Relaxed),
            cost,
        };
        let mut inv = self.call(&key, self.redis.script_now(), "a", 4);
        inv.arg(limit.min(self.meter_limit()))
            .arg(cost)
            .arg(self.ttl_ms())
            .arg(self.member(slot));
        // A request cancelled while its acquire is on its way (a client
        // that went away) gives back the slot the script may have granted.
        let mut unanswered = Unanswered {
            rule: Some(&self),
            key,
            slot,
        };
        let answer = self.redis.eval::<Reply>(&inv, self.group(&key)).await;
        unanswered.rule = None;
        match answer {
            Ok(reply) => {
                if let (Some(ok), Some(in_flight), Some(now)) =
                    (reply.int(0), reply.u64(1), reply.u64(2))
                {
                    let allowed = ok == 1;
                    if allowed {
                        self.held.lock().add(key, slot);
                        self.shared.granted.fetch_add(1, Ordering::Relaxed);
                    }
                    let step = self.meter.report_under(limit, in_flight, allowed);
                    return Ok(Outcome::new(step, now));
                }
                tracing::debug!(
                    rule = self.rule.name(),
                    "unexpected reply from the slot script"
                );
            }
            Err(failure) => {
                tracing::debug!(rule = self.rule.name(), %failure, "deciding by failure policy");
            }
        }
        // The script may have granted a slot that no answer reports: take
        // it back if it did.
        self.redis
            .send_now(self.release_call(&key, slot), self.group(&key));
        self.degraded(&key, cost)
    }

    /// [`SlotLimiter::peek`]'s call; the failure policy's read if Redis
    /// does not answer.
    async fn peek(&self, key: &Key) -> Result<Outcome, OpError> {
        let inv = self.call(key, self.redis.script_now(), "p", 0);
        let timeout = self.redis.config.command_timeout;
        let read = self
            .redis
            .eval_off_path::<Reply>(&inv, self.group(key), timeout);
        match read.await {
            Ok(reply) => match (reply.u64(0), reply.u64(1)) {
                (Some(held), Some(now)) => {
                    let step = self.meter.report(held, held <= self.meter_limit());
                    return Ok(Outcome::new(step, now));
                }
                _ => tracing::debug!(
                    rule = self.rule.name(),
                    "unexpected reply from the slot script; reading by failure policy"
                ),
            },
            Err(failure) => {
                tracing::debug!(rule = self.rule.name(), %failure, "reading by failure policy");
            }
        }
        degraded_read(&self.rule, self.local.as_deref(), key)
    }

    fn meter_limit(&self) -> u64 {
        throttle_fleet_core::algorithm::Meter::capacity(&self.meter)
    }

    fn degraded(&self, key: &Key, cost: u64) -> Result<Outcome, Unavailable> {
        degraded(&self.redis, &self.rule, self.local.as_deref(), key, cost)
    }

    /// Renews every slot this rule holds: one call per key.
    async fn renew(&self) -> bool {
        let snapshot = self.held.lock().snapshot();
        let timeout = self.redis.config.command_timeout;
        let calls = snapshot.into_iter().map(|(key, slots)| {
            let mut inv = self.call(&key, self.redis.script_now(), "n", 1 + slots.len());
            inv.arg(self.ttl_ms());
            for &slot in &slots {
                inv.arg(self.member(slot));
            }
            let group = self.group(&key);
            async move {
                let missing = self.redis.eval_off_path::<Vec<u64>>(&inv, group, timeout);
                (key, slots, missing.await)
            }
        });
        let mut ok = true;
        for (key, slots, result) in futures_util::future::join_all(calls).await {
            self.shared.renewals.fetch_add(1, Ordering::Relaxed);
            match result {
                Ok(missing) => {
                    let lost = self.held.lock().lost(&key, &slots, &missing);
                    if lost > 0 {
                        tracing::warn!(
                            rule = self.rule.name(),
                            lost,
                            "throttle: concurrency slots expired before their renewal; their requests run uncounted"
                        );
                        self.shared.lost.fetch_add(lost, Ordering::Relaxed);
                    }
                }
                Err(_) => ok = false,
            }
        }
        ok
    }

    /// Starts the renewal (once): every third of the slot lifetime, on the
    /// backend's scheduler, while the rule lives.
    fn start_renewing(self: &Arc<Self>) {
        if self.renewing.load(Ordering::Relaxed) || self.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        let every = self.slot_ttl() / 3;
        let first = self.redis.local_now() + micros(every);
        let renewals = Every::new(self, first, every, |rule: Arc<Self>| {
            Box::pin(async move {
                if rule.held.lock().len() > 0 {
                    rule.renew().await;
                }
                Going::On
            })
        });
        self.redis.config.scheduler.start(renewals);
    }
}

/// An acquire on its way: dropped before its answer (the request was
/// cancelled), it sends the release of the member it may have added.
struct Unanswered<'a> {
    rule: Option<&'a Arc<Inner>>,
    key: Key,
    slot: Slot,
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if let Some(rule) = self.rule {
            rule.redis.send_now(
                rule.release_call(&self.key, self.slot),
                rule.group(&self.key),
            );
        }
    }
}

impl Limiter for SlotLimiter {
    fn ops(&self) -> Option<&dyn KeyOps> {
        Some(self)
    }

    /// The script compares what the fleet holds with `limit`, so a class's
    /// share holds fleet-wide. While Redis cannot be asked, the rule's
    /// failure policy decides without classes.
    fn acquire(&self, key: &Key, cost: u64, limit: u64) -> Answer<Result<Outcome, Unavailable>> {
        if self.0.redis.is_open(self.0.group(key)) {
            return Answer::Ready(self.0.degraded(key, cost));
        }
        self.0.start_renewing();
        Answer::Pending(Box::pin(self.0.clone().acquire(*key, cost, limit)))
    }

    /// The request ended: its slot goes back, off the response path.
    fn refund(&self, key: &Key, cost: u64, outcome: &Outcome) {
        if outcome.degraded {
            if let Some(local) = &self.0.local {
                local.refund(key, cost, outcome);
            }
            return;
        }
        let Some(slot) = self.0.held.lock().take(key, cost) else {
            return;
        };
        self.0.shared.released.fetch_add(1, Ordering::Relaxed);
        self.0
            .redis
            .send_now(self.0.release_call(key, slot), self.0.group(key));
    }

    fn is_remote(&self) -> bool {
        true
    }

    /// Slots live in Redis under the rule's name: a limiter for the new
    /// limit reads them as they are. (The old limiter keeps renewing the
    /// slots of the requests it admitted, and gives them back, until the
    /// last of them ends.)
    fn requota(&self, rule: &Rule) -> Option<Arc<dyn Limiter>> {
        Some(Arc::new(
            SlotLimiter::new(self.0.redis.clone(), self.0.shared.clone(), rule).ok()?,
        ))
    }
}

impl KeyOps for SlotLimiter {
    /// What the fleet holds for `key` (the slots whose time has not
    /// passed), read by the script without taking a slot or dropping one.
    /// As in memory, a key at its limit reads as allowed with nothing
    /// remaining: a read takes no cost. While the breaker of the key's
    /// node is open, or if Redis does not answer, the failure policy's
    /// read, as for the rate rules of the exact mode.
    fn peek(&self, key: &Key) -> Answer<Result<Outcome, OpError>> {
        if self.0.redis.is_open(self.0.group(key)) {
            return Answer::Ready(degraded_read(&self.0.rule, self.0.local.as_deref(), key));
        }
        let inner = self.0.clone();
        let key = *key;
        Answer::Pending(Box::pin(async move { inner.peek(&key).await }))
    }

    fn blocks(&self) -> Option<Arc<Blocks>> {
        self.0.ops.blocks()
    }

    fn share_block(
        &self,
        key: &Key,
        block: Option<&Block>,
    ) -> Answer<Result<throttle_fleet_core::operate::Reach, OpError>> {
        self.0.ops.share_block(key, block)
    }
}
