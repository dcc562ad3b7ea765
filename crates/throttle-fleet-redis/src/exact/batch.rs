//! Batching: checks of one rule that arrive while a call is out go
//! together in the next call.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use throttle_fleet_core::backend::{Outcome, Unavailable};
use throttle_fleet_core::{Answer, Key};
use tokio::sync::oneshot;

use super::{Inner, unexpected_reply};
use crate::link::{Eval, Failure};
use crate::reply::Reply;

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
pub(super) struct Batcher {
    queue: Mutex<Vec<Job>>,
    sending: AtomicBool,
}

impl Inner {
    /// Decides a check by a batch call: a lone check (no call out) makes
    /// its call itself; otherwise it is queued for the next call, started
    /// if none is out.
    pub(super) fn enqueue(
        self: &Arc<Self>,
        key: Key,
        cost: u64,
    ) -> Answer<Result<Outcome, Unavailable>> {
        // In a cluster the sender only hands calls out (one per key, each
        // on its own), so it never holds the role through a call.
        if !self.redis.is_cluster() && !self.batcher.sending.swap(true, Ordering::AcqRel) {
            // The role is held from here, by the future: dropped at any
            // point (even before its first poll), it gives the role back.
            let role = Role(self.clone());
            return Answer::Pending(Box::pin(Self::send_alone(role, key, cost)));
        }
        let (reply, answer) = oneshot::channel();
        {
            let mut queue = self.batcher.queue.lock();
            if queue.len() >= MAX_QUEUE {
                drop(queue);
                return Answer::Ready(self.degraded(&key, cost));
            }
            queue.push(Job { key, cost, reply });
        }
        if !self.batcher.sending.swap(true, Ordering::AcqRel) {
            self.start_sender();
        }
        // A check may wait for the call before its own: its wait is bounded
        // from now, so a hung Redis still costs it one command timeout at
        // most. (If the call runs later anyway, its answer is dropped; like
        // any timed-out script, it may still count in Redis.)
        let this = self.clone();
        let patience = self.redis.config.command_timeout;
        Answer::Pending(Box::pin(async move {
            match tokio::time::timeout(patience, answer).await {
                Ok(Ok(Some(outcome))) => Ok(outcome),
                Ok(Ok(None) | Err(_)) | Err(_) => this.degraded(&key, cost),
            }
        }))
    }

    /// A check sent alone by its own future, which holds the sending role
    /// meanwhile: no task, no channel and no timer besides the call's own
    /// (its deadline bounds the wait). Checks that arrive meanwhile queue
    /// and go together in the next call, once this one is back (or
    /// dropped).
    async fn send_alone(role: Role, key: Key, cost: u64) -> Result<Outcome, Unavailable> {
        let this = &role.0;
        let check = [(key, cost)];
        let group = this.group(&key);
        let sent_at = this.deny.now();
        match this.call(&check, group).await {
            Ok(reply) => {
                if let Some((step, at_us)) = this.compiled.batch_step(&reply, 0, 1, cost) {
                    this.deny.remember(&key, cost, &step, sent_at);
                    return Ok(Outcome::new(step, at_us));
                }
                tracing::debug!(rule = this.rule.name(), failure = %unexpected_reply(), "deciding by failure policy");
            }
            Err(failure) => {
                tracing::debug!(rule = this.rule.name(), %failure, "deciding by failure policy");
            }
        }
        this.degraded(&key, cost)
    }

    /// Starts a task sending what is queued; the caller holds the sending
    /// role, which the task takes over.
    fn start_sender(self: &Arc<Self>) {
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

    /// Gives the sending role up; true if checks were queued meanwhile and
    /// the caller has taken the role back to send them.
    fn release_role(&self) -> bool {
        self.batcher.sending.store(false, Ordering::Release);
        // A check queued between the caller's last look at the queue and
        // the store above would wait for nobody: take the role back if so.
        !self.batcher.queue.lock().is_empty() && !self.batcher.sending.swap(true, Ordering::AcqRel)
    }

    /// Sends what is queued, one call at a time, until the queue is empty.
    async fn send_batches(self: Arc<Self>) {
        loop {
            let jobs = std::mem::take(&mut *self.batcher.queue.lock());
            if jobs.is_empty() {
                if self.release_role() {
                    continue;
                }
                return;
            }
            if self.redis.is_cluster() {
                // A script touches one slot: one call per key, each on its
                // own, so a key on a hung primary holds up no other key.
                let mut by_key: HashMap<Key, Vec<Job>> = HashMap::new();
                for job in jobs {
                    by_key.entry(job.key).or_default().push(job);
                }
                for group in by_key.into_values() {
                    let this = self.clone();
                    tokio::spawn(async move { this.send(group).await });
                }
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

    /// One batch call for `checks` (keys and costs), all in `group`.
    async fn call(&self, checks: &[(Key, u64)], group: u16) -> Result<Reply, Failure> {
        let Some(script) = self.compiled.batch_script() else {
            return Err(unexpected_reply());
        };
        let keys = self.compiled.suffixes().len() * checks.len();
        let args = 4 + 2 * checks.len();
        let mut inv = Eval::new(script, keys, keys + args, 64 * keys + 20 * args);
        for (key, _) in checks {
            for suffix in self.compiled.suffixes() {
                inv.arg(self.keys.key(key, suffix));
            }
        }
        self.compiled.batch_args(
            &mut inv,
            self.redis.script_now(),
            checks.iter().map(|&(_, cost)| cost),
        );
        self.redis.eval::<Reply>(&inv, group).await
    }

    /// One batch call; answers every check in it. Checks that stopped
    /// waiting (they were answered by the failure policy) are not sent: a
    /// request told "unavailable" is not charged.
    async fn send(&self, mut jobs: Vec<Job>) {
        jobs.retain(|job| !job.reply.is_closed());
        if jobs.is_empty() {
            return;
        }
        if self.compiled.batch_script().is_none() {
            return self.answer_locally(jobs);
        }
        // In a cluster a call carries one key's checks (one slot, one group).
        let group = self.group(&jobs[0].key);
        if self.redis.is_open(group) {
            return self.answer_locally(jobs);
        }
        let checks: Vec<(Key, u64)> = jobs.iter().map(|j| (j.key, j.cost)).collect();
        let sent_at = self.deny.now();
        let failure = match self.call(&checks, group).await {
            Ok(reply) => {
                let n = jobs.len();
                let steps: Option<Vec<_>> = jobs
                    .iter()
                    .enumerate()
                    .map(|(j, job)| self.compiled.batch_step(&reply, j, n, job.cost))
                    .collect();
                match steps {
                    Some(steps) => {
                        for (job, (step, at_us)) in jobs.into_iter().zip(steps) {
                            self.deny.remember(&job.key, job.cost, &step, sent_at);
                            let _ = job.reply.send(Some(Outcome::new(step, at_us)));
                        }
                        return;
                    }
                    None => unexpected_reply(),
                }
            }
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
}

/// The sending role, held by a check sent alone: given up when its call is
/// back or its future dropped, and handed to a sender task if checks were
/// queued meanwhile.
struct Role(Arc<Inner>);

impl Drop for Role {
    fn drop(&mut self) {
        if self.0.release_role() {
            self.0.start_sender();
        }
    }
}
