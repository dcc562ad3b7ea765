//! Blocks and unblocks that wait on their instance for Redis: a change an
//! operator made while Redis could not be asked holds here at once and is
//! sent when Redis answers again, with the time it was made, so that the
//! fleet converges instead of staying split (`op.lua` orders changes by
//! that time: the one made last wins, whatever the order they arrive in).
//! And when Redis has lost the fleet's state, the blocks this instance
//! holds are sent again.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use throttle_fleet_core::Key;
use throttle_fleet_core::operate::{Block, OpError, Reach};

use super::wire::{self, Sent};
use super::{ORDER_HOLD, Operations};
use crate::schedule::micros;

/// The most changes one instance keeps waiting for Redis; past it, a
/// change is refused (it still holds on this instance).
const MAX_WAITING: usize = 100_000;

/// A block (`b`) or an unblock (`u`) of one key, made at `made` (µs).
#[derive(Debug, Clone)]
struct Waiting {
    op: &'static str,
    rule: Arc<str>,
    key: Key,
    value: String,
    made: u64,
}

/// The changes made here that Redis has not received, one per key (the
/// latest).
#[derive(Debug, Default)]
pub(super) struct Outbox {
    waiting: Mutex<HashMap<String, Waiting>>,
}

impl Outbox {
    /// Whether nothing waits.
    pub(super) fn is_empty(&self) -> bool {
        self.waiting.lock().is_empty()
    }
}

impl Operations {
    /// Tells the fleet that `key` of the rule named `rule` is blocked
    /// (`Some`) or no longer is: sent now if Redis answers, kept to be sent
    /// when it does otherwise.
    pub(super) async fn share(
        &self,
        rule: Arc<str>,
        key: Key,
        block: Option<Block>,
    ) -> Result<Reach, OpError> {
        let (op, value) = match &block {
            Some(b) => ("b", wire::block_value(b)),
            None => ("u", String::new()),
        };
        let change = Waiting {
            op,
            rule,
            key,
            value,
            made: self.clock.now_us(),
        };
        let field = wire::field(&change.rule, &change.key);
        // A change sent now supersedes one of ours still waiting.
        self.outbox.waiting.lock().remove(&field);
        let why = if self.redis()?.is_open(self.slot) {
            "the Redis node of the operations log is down (its breaker is open)".to_owned()
        } else {
            // A change that Redis finds older than the key's last (made
            // on an instance whose clock is ahead) leaves here what the
            // fleet holds: the fleet agrees either way.
            match self.send(&change).await {
                Ok(()) => return Ok(Reach::Fleet),
                Err(e) => e.to_string(),
            }
        };
        let mut waiting = self.outbox.waiting.lock();
        if waiting.len() >= MAX_WAITING && !waiting.contains_key(&field) {
            return Err(OpError::Invalid(format!(
                "Redis cannot be asked ({why}) and {MAX_WAITING} changes wait for it already: \
                 this one holds on this instance only"
            )));
        }
        tracing::warn!(
            rule = &*change.rule,
            key = ?change.key,
            why = %why,
            "throttle: a block or unblock holds here and waits to be sent to the fleet"
        );
        waiting.insert(field, change);
        Ok(Reach::Queued)
    }

    /// Sends `change`; a change that a later one superseded in Redis
    /// leaves here what holds there.
    async fn send(&self, change: &Waiting) -> Result<(), OpError> {
        match self
            .run_op(
                change.op,
                &change.rule,
                &change.key,
                &change.value,
                change.made,
            )
            .await?
        {
            Sent::Done(_) => Ok(()),
            Sent::Stale(holds) => {
                self.adopt(&change.rule, &change.key, holds);
                Ok(())
            }
        }
    }

    /// Sends what waits, oldest first; whether all of it went (the rest
    /// waits for the next try). A change older than [`ORDER_HOLD`], or a
    /// block that has ended, is dropped.
    pub(super) async fn flush(&self) -> bool {
        if self.outbox.is_empty() {
            return true;
        }
        let mut batch: Vec<(String, Waiting)> = self
            .outbox
            .waiting
            .lock()
            .iter()
            .map(|(f, w)| (f.clone(), w.clone()))
            .collect();
        batch.sort_by_key(|(_, w)| w.made);
        let now = self.clock.now_us();
        let (mut sent, mut dropped) = (0u64, 0u64);
        for (field, change) in batch {
            let ended = change.op == "b" && super::until_of("b", &change.value) <= now;
            let stale = change.made.saturating_add(micros(ORDER_HOLD)) <= now;
            if !(ended || stale) {
                if self.send(&change).await.is_err() {
                    return false;
                }
                sent += 1;
            } else if stale {
                dropped += 1;
            }
            let mut waiting = self.outbox.waiting.lock();
            if waiting.get(&field).is_some_and(|w| w.made == change.made) {
                waiting.remove(&field);
            }
        }
        if sent > 0 {
            tracing::info!(
                changes = sent,
                "throttle: blocks and unblocks made while Redis could not be asked were sent to the fleet"
            );
        }
        if dropped > 0 {
            tracing::warn!(
                changes = dropped,
                "throttle: blocks and unblocks that waited over a day for Redis were dropped"
            );
        }
        true
    }

    /// Sends again every block this instance holds (Redis lost the
    /// fleet's state), as changes made before any other: a later change
    /// to the same key, from any instance, wins. Whether all of it went.
    pub(super) async fn reassert(&self) -> bool {
        let held: Vec<(Arc<str>, Key, Block)> = self
            .rules
            .lock()
            .iter()
            .flat_map(|(name, tables)| {
                tables
                    .blocks
                    .list()
                    .into_iter()
                    .map(|(k, b, _)| (name.clone(), k, b))
            })
            .collect();
        let sent = held.len();
        for (rule, key, block) in held {
            let change = Waiting {
                op: "b",
                rule,
                key,
                value: wire::block_value(&block),
                made: 0,
            };
            if self.send(&change).await.is_err() {
                return false;
            }
        }
        tracing::warn!(
            blocks = sent,
            "throttle: Redis lost the fleet's blocks and resets (a restart without its data, or \
             a failover to a replica that had not received them): the blocks held here were sent again"
        );
        true
    }
}
