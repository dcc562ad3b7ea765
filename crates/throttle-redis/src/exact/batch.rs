//! Batching: checks of one rule that arrive while a call is out go
//! together in the next call.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use throttle_core::{Acquire, Key, Outcome};
use tokio::sync::oneshot;

use super::{Inner, unexpected_reply};

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
    /// Queues a check for the next batch call, starting one if none is out.
    pub(super) fn enqueue(self: &Arc<Self>, key: Key, cost: u64) -> Acquire {
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
        // In a cluster a call carries one key's checks (one slot, one group).
        let group = self.group(&jobs[0].key);
        if self.redis.is_open(group) {
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
        let sent_at = self.deny.now();
        let failure = match self.redis.eval::<Vec<i64>>(&inv, group).await {
            Ok(reply) => match self.compiled.batch_steps(&reply, &costs) {
                Some(steps) => {
                    for (job, (step, at_us)) in jobs.into_iter().zip(steps) {
                        self.deny.remember(&job.key, job.cost, &step, sent_at);
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
}
