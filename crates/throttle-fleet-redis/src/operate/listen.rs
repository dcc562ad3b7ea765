//! Listening for changes and reading the log: a subscription to the
//! operations' channel, on a connection of its own to the node of their
//! slot, and a read of what changed since the last (applied to the rules'
//! tables) whenever a change is published and whenever the subscription
//! starts (again: what was published while it was down is in the log).
//! Before each such read, and at each probe interval while changes wait,
//! the changes made here while Redis could not be asked are sent
//! (`outbox.rs`).
//!
//! The time-driven part is a job of the backend's scheduler (`listening`,
//! every probe interval, and once at once when the backend starts): it
//! subscribes when no subscription is held, and tries again a read that
//! failed or changes that wait. The subscription's
//! reader only waits on its connection: a message reads the log, the end
//! of the stream lets the next round subscribe again; a dropped backend
//! (its operations dropped) aborts it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use futures_util::{FutureExt, StreamExt};
use redis::Value;

use super::wire::{self, Change, Polled};
use super::{Operations, POLL, RuleOps};
use crate::link::Eval;
use crate::schedule::{Every, Going};

impl Operations {
    /// Listens for the backend's lifetime: a first round at once (so that
    /// blocks made elsewhere are heard of from the start, whatever the
    /// scheduler's time), then a round every probe interval on the
    /// backend's scheduler.
    pub(super) fn listen(this: &Arc<Self>) {
        let Ok(redis) = this.redis() else { return };
        if tokio::runtime::Handle::try_current().is_err() {
            tracing::warn!(
                "throttle: no Tokio runtime where the Redis backend was built: blocks and resets \
                 made on other instances will not be heard of"
            );
            return;
        }
        let first = this.clone();
        tokio::spawn(async move { first.listening().await });
        let listening = Every::new(
            this,
            redis.local_now() + crate::schedule::micros(redis.config.probe_interval),
            redis.config.probe_interval,
            |ops: Arc<Self>| {
                Box::pin(async move {
                    ops.listening().await;
                    Going::On
                })
            },
        );
        redis.config.scheduler.start(listening);
    }

    /// One round: subscribes if no subscription is held (then sends what
    /// waits and reads what changed while nobody here listened); otherwise,
    /// a read that failed (the first call on a connection Redis closed
    /// when it restarted) or changes that wait (Redis hung, and answers
    /// again without the subscription ending) are tried again.
    async fn listening(self: &Arc<Self>) {
        // One round at a time (the first, spawned, may still run when the
        // scheduler's first comes).
        let Ok(_one_at_a_time) = self.listening.try_lock() else {
            return;
        };
        if self.subscribed.load(Ordering::Acquire) {
            if !self.caught_up.load(Ordering::Acquire) || !self.outbox.is_empty() {
                let done = self.flush().await && self.poll().await;
                self.caught_up.store(done, Ordering::Release);
            }
            return;
        }
        let Ok(redis) = self.redis() else { return };
        let patience = redis.config.connect_timeout + redis.config.command_timeout;
        let Some(client) = redis.pubsub_client(self.slot) else {
            // No node is known for the slot yet: the next round.
            return;
        };
        drop(redis);
        let channel = self.channel.clone();
        let subscribed = tokio::time::timeout(patience, async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        })
        .await;
        let Ok(Ok(pubsub)) = subscribed else { return };
        self.subscribed.store(true, Ordering::Release);
        let weak = Arc::downgrade(self);
        let reader = tokio::spawn(async move {
            let mut messages = pubsub.into_on_message();
            while messages.next().await.is_some() {
                // Those that arrived together, read once.
                while let Some(Some(_)) = messages.next().now_or_never() {}
                let Some(done) = Self::read_if_alive(&weak).await else {
                    return;
                };
                if let Some(ops) = weak.upgrade() {
                    ops.caught_up.store(done, Ordering::Release);
                }
            }
            if let Some(ops) = weak.upgrade() {
                ops.subscribed.store(false, Ordering::Release);
            }
        });
        if let Some(old) = self.reader.lock().replace(reader.abort_handle()) {
            old.abort();
        }
        // What this instance changed while Redis could not be asked, then
        // what changed while nobody here listened.
        let done = self.flush().await && self.poll().await;
        self.caught_up.store(done, Ordering::Release);
    }

    /// Sends what waits and reads the log, if the operations are still
    /// alive (`None`: they are not): whether all of it was done.
    async fn read_if_alive(weak: &Weak<Self>) -> Option<bool> {
        let ops = weak.upgrade()?;
        Some(ops.flush().await && ops.poll().await)
    }

    /// One read of the log: applies what changed since the last. When
    /// Redis lost what this instance had read, sends again the blocks it
    /// holds, then loads the tables. Whether it read.
    async fn poll(self: &Arc<Self>) -> bool {
        let _one_at_a_time = self.reading.lock().await;
        // A loss takes a second read: the tables once the blocks are back.
        for _ in 0..2 {
            match self.read().await {
                Read::Done => return true,
                Read::Failed => return false,
                Read::Lost => {}
            }
        }
        false
    }

    /// One read of the log (the caller holds `reading`).
    async fn read(self: &Arc<Self>) -> Read {
        let Ok(redis) = self.redis() else {
            return Read::Failed;
        };
        let last = self.last.lock().clone();
        let known = self.epoch.lock().clone();
        let mut inv = Eval::new(&POLL, 4, 3, 96);
        inv.arg(&self.log)
            .arg(&self.blocks)
            .arg(&self.resets)
            .arg(&self.epoch_key);
        inv.arg(&last).arg(1_000).arg(&known);
        let timeout = redis.config.command_timeout;
        let Ok(reply) = redis.eval_off_path::<Value>(&inv, self.slot, timeout).await else {
            // Read again from the same place.
            return Read::Failed;
        };
        match wire::polled(reply) {
            Some(Polled::Lost) => {
                if !self.reassert().await {
                    // Tried again at the next read.
                    return Read::Failed;
                }
                // The next read loads the tables, whatever Redis' epoch
                // is now (the blocks just sent may have written one), and
                // they replace what this instance knew (not a first load).
                *self.epoch.lock() = "*".to_owned();
                self.last.lock().clear();
                return Read::Lost;
            }
            Some(Polled::Tables {
                epoch,
                last: newest,
                blocks,
                resets,
            }) if known.is_empty() => {
                // The first load: what this instance did before it (a
                // block it made meanwhile, sent already) stays; the log's
                // next entries follow.
                *self.epoch.lock() = epoch;
                for (rule, key, block) in blocks {
                    self.rule(&rule).blocks.insert(key, block);
                }
                for (rule, key, generation, until) in resets {
                    self.rule(&rule).resets.insert(key, &generation, until);
                }
                *self.last.lock() = newest;
            }
            // The load after a loss: every block this instance held was
            // sent again (and those a later change superseded, adopted),
            // so what Redis holds replaces what it knew, unblocks it had
            // not read included.
            Some(Polled::Tables {
                epoch,
                last: newest,
                blocks,
                resets,
            }) => {
                *self.epoch.lock() = epoch;
                let rules: Vec<(Arc<str>, Arc<RuleOps>)> = {
                    let mut names: Vec<Arc<str>> = blocks
                        .iter()
                        .map(|(r, _, _)| r.clone())
                        .chain(resets.iter().map(|(r, _, _, _)| r.clone()))
                        .collect();
                    names.extend(self.rules.lock().keys().cloned());
                    names.sort();
                    names.dedup();
                    names
                        .into_iter()
                        .map(|n| (n.clone(), self.rule(&n)))
                        .collect()
                };
                for (name, tables) in rules {
                    tables.blocks.replace_all(
                        blocks
                            .iter()
                            .filter(|(r, _, _)| *r == name)
                            .map(|(_, k, b)| (*k, b.clone())),
                    );
                    tables.resets.replace_all(
                        resets
                            .iter()
                            .filter(|(r, _, _, _)| *r == name)
                            .map(|(_, k, g, u)| (*k, g.clone(), *u)),
                    );
                }
                *self.last.lock() = newest;
            }
            Some(Polled::Entries(entries)) => {
                let mut newest = None;
                for (id, change) in entries {
                    self.apply(&id, change);
                    newest = Some(id);
                }
                if let Some(id) = newest {
                    *self.last.lock() = id;
                }
            }
            None => {
                tracing::warn!("throttle: unexpected reply reading the operations log");
                return Read::Failed;
            }
        }
        Read::Done
    }

    fn apply(&self, id: &str, change: Change) {
        match change {
            Change::Block { rule, key, block } => {
                self.rule(&rule).blocks.insert(key, block);
            }
            Change::Unblock { rule, key } => {
                self.rule(&rule).blocks.remove(&key);
            }
            Change::Reset {
                rule,
                key,
                until_us,
            } => {
                self.rule(&rule).resets.insert(key, id, until_us);
            }
            Change::Unknown => {}
        }
    }
}

/// How a read of the log went.
enum Read {
    /// Read and applied.
    Done,
    /// Redis lost this instance's state: the blocks it holds were sent
    /// again, and the tables are to be read now.
    Lost,
    /// Not read (Redis did not answer): tried again from the same place.
    Failed,
}
