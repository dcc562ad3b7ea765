//! Leasing: asking Redis for a batch of tokens, in the background or while
//! requests wait for it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use throttle_fleet_core::Key;
use throttle_fleet_core::algorithm::GcraState;
use throttle_fleet_core::backend::{Outcome, Unavailable};
use tokio::sync::futures::OwnedNotified;

use crate::algorithm_scripts::GCRA_LEASE_SCRIPT;
use crate::failure_policy::degraded;
use crate::link::{Eval, Failure};
use crate::reply::Reply;

use super::limiter::LeaseRule;
use super::state::{Lease, Local};

impl LeaseRule {
    /// The hash slot of a key's bucket, for its breaker (0 unless a
    /// cluster).
    pub(super) fn group(&self, key: &Key) -> u16 {
        self.redis.slot_for(&self.keys, key)
    }

    pub(super) fn invocation(&self, key: &Key, need: u64, want: u64) -> Eval {
        let mut inv = Eval::new(&GCRA_LEASE_SCRIPT, 1, 8, 8 * 20);
        inv.arg(self.keys.key(key, "gcra"));
        let (t_us, t_rem) = self.gcra.increment(1);
        let (tau_us, tau_rem) = self.gcra.tau();
        inv.arg(self.redis.script_now())
            .arg(self.gcra.limit())
            .arg(t_us)
            .arg(t_rem)
            .arg(tau_us)
            .arg(tau_rem)
            .arg(need)
            .arg(want);
        inv
    }

    /// One lease call: `(granted, state after, Redis now)`.
    pub(super) async fn lease(&self, key: &Key, need: u64, want: u64) -> Result<Lease, Failure> {
        self.shared.counters.fetches.fetch_add(1, Ordering::Relaxed);
        self.metrics.call();
        let inv = self.invocation(key, need, want);
        let reply: Reply = self.redis.eval(&inv, self.group(key)).await?;
        let n = |i: usize| reply.u64(i);
        match (n(0), n(1), n(2), n(3)) {
            (Some(k), Some(tat_us), Some(tat_rem), Some(now)) => {
                self.shared.counters.leased.fetch_add(k, Ordering::Relaxed);
                self.metrics.granted(k);
                Ok(Lease {
                    granted: k,
                    bucket: GcraState { tat_us, tat_rem },
                    now,
                })
            }
            _ => Err(Failure::Error(redis::RedisError::from((
                redis::ErrorKind::Parse,
                "unexpected reply from the lease script",
            )))),
        }
    }

    /// A batch lease failed: lets the requests waiting for it try again.
    pub(super) fn end_fetch(&self, key: &Key) {
        if let Some(waiters) = self.store.update(key, |st| st.fetching.take()).flatten() {
            waiters.notify_waiters();
        }
    }

    /// Fetches the next batch in the background.
    pub(super) fn prefetch(self: &Arc<Self>, key: Key, batch: u64) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.end_fetch(&key);
            return;
        };
        if self.redis.is_open(self.group(&key)) {
            // No background traffic to a Redis known to be away.
            self.end_fetch(&key);
            return;
        }
        let this = self.clone();
        this.shared.in_flight.fetch_add(1, Ordering::AcqRel);
        rt.spawn(async move {
            match this.lease(&key, 1, batch).await {
                Ok(lease) => {
                    this.record(&key, &lease, batch, 0, true);
                }
                Err(_) => this.end_fetch(&key),
            }
            if this.shared.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
                this.shared.settled.notify_waiters();
            }
        });
    }

    /// A request the local tokens could not pay for: lease, then decide.
    pub(super) async fn wait(
        self: Arc<Self>,
        key: Key,
        cost: u64,
        want: u64,
        batch: bool,
    ) -> Result<Outcome, Unavailable> {
        self.shared.counters.waited.fetch_add(1, Ordering::Relaxed);
        // The lease runs in its own task: if this request goes away (its
        // client disconnected, or it gave up waiting), the lease still
        // completes, its tokens are kept and waiting requests are woken.
        let (this, fallback) = (self.clone(), self.clone());
        match tokio::spawn(async move { this.lease_and_record(key, cost, want, batch).await }).await
        {
            Ok(decided) => decided,
            Err(_) => degraded(
                &fallback.redis,
                &fallback.rule,
                fallback.local.as_deref(),
                &key,
                cost,
            ),
        }
    }

    pub(super) async fn lease_and_record(
        self: Arc<Self>,
        key: Key,
        cost: u64,
        want: u64,
        batch: bool,
    ) -> Result<Outcome, Unavailable> {
        match self.lease(&key, cost, want).await {
            Ok(lease) => {
                let now = lease.now;
                let step = self.record(&key, &lease, want, cost, batch);
                if !step.allowed {
                    self.shared
                        .counters
                        .local_denials
                        .fetch_add(1, Ordering::Relaxed);
                }
                Ok(Outcome::new(step, now))
            }
            Err(failure) => {
                if batch {
                    self.end_fetch(&key);
                }
                tracing::debug!(rule = self.rule.name(), %failure, "deciding by failure policy");
                degraded(&self.redis, &self.rule, self.local.as_deref(), &key, cost)
            }
        }
    }

    /// A request that waits for the batch on its way, then decides locally
    /// like any other. If batches keep running out before its turn (more
    /// concurrent requests than a batch holds), it leases its own cost.
    pub(super) async fn queue(
        self: Arc<Self>,
        key: Key,
        cost: u64,
        mut notified: OwnedNotified,
    ) -> Result<Outcome, Unavailable> {
        self.shared.counters.waited.fetch_add(1, Ordering::Relaxed);
        for _ in 0..8 {
            notified.await;
            match self.local(&key, cost, true) {
                (Local::Decided(step, prefetch), now) => {
                    if let Some(batch) = prefetch {
                        self.prefetch(key, batch);
                    }
                    if !step.allowed {
                        self.shared
                            .counters
                            .local_denials
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(Outcome::new(step, now));
                }
                (Local::Fetch { want, batch }, _) => {
                    if self.redis.is_open(self.group(&key)) {
                        if batch {
                            self.end_fetch(&key);
                        }
                        return degraded(
                            &self.redis,
                            &self.rule,
                            self.local.as_deref(),
                            &key,
                            cost,
                        );
                    }
                    return self.wait(key, cost, want, batch).await;
                }
                (Local::Wait(next), _) => notified = next,
            }
        }
        if self.redis.is_open(self.group(&key)) {
            return degraded(&self.redis, &self.rule, self.local.as_deref(), &key, cost);
        }
        self.wait(key, cost, cost, false).await
    }
}
