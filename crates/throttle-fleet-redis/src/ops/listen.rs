//! Listening for changes and reading the log: a subscription to the
//! operations' channel, on a connection of its own to the node of their
//! slot, and a read of what changed since the last (applied to the rules'
//! tables) whenever a change is published and whenever the subscription
//! starts (again: what was published while it was down is in the log).

use std::sync::{Arc, Weak};

use futures_util::{FutureExt, StreamExt};
use redis::Value;

use super::wire::{self, Change, Polled};
use super::{Operations, POLL, RuleOps};
use crate::conn::Eval;

impl Operations {
    /// Listens for the backend's lifetime: subscribes, reads the log, then
    /// reads it again at each message (those that arrived together, once);
    /// when the connection ends, subscribes again after a probe interval.
    pub(super) fn listen(this: &Arc<Self>) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                "throttle: no Tokio runtime where the Redis backend was built: blocks and resets \
                 made on other instances will not be heard of"
            );
            return;
        };
        let weak = Arc::downgrade(this);
        rt.spawn(async move {
            loop {
                let Some((client, channel, scheduler, retry, patience)) = Self::settings(&weak)
                else {
                    return;
                };
                let subscribed = match client {
                    Some(client) => tokio::time::timeout(patience, async {
                        let mut pubsub = client.get_async_pubsub().await?;
                        pubsub.subscribe(&channel).await?;
                        Ok::<_, redis::RedisError>(pubsub)
                    })
                    .await
                    .ok()
                    .and_then(Result::ok),
                    None => None,
                };
                if let Some(pubsub) = subscribed {
                    let mut messages = pubsub.into_on_message();
                    // What changed while nobody here listened.
                    Self::read_if_alive(&weak).await;
                    loop {
                        tokio::select! {
                            message = messages.next() => {
                                if message.is_none() {
                                    break;
                                }
                                while let Some(Some(_)) = messages.next().now_or_never() {}
                                if !Self::read_if_alive(&weak).await {
                                    return;
                                }
                            }
                            // A dropped backend closes its connection.
                            () = scheduler.sleep(retry) => {
                                if weak.strong_count() == 0 {
                                    return;
                                }
                            }
                        }
                    }
                }
                scheduler.sleep(retry).await;
            }
        });
    }

    /// What a round of [`listen`](Self::listen) needs, if the operations
    /// (and the backend) are still alive: the subscriber's client (none
    /// while no node is known for the slot), the channel, the scheduler,
    /// how long to wait before subscribing again, and how long subscribing
    /// may take.
    #[allow(clippy::type_complexity)]
    fn settings(
        weak: &Weak<Self>,
    ) -> Option<(
        Option<redis::Client>,
        String,
        crate::schedule::Scheduler,
        std::time::Duration,
        std::time::Duration,
    )> {
        let ops = weak.upgrade()?;
        let redis = ops.redis().ok()?;
        Some((
            redis.pubsub_client(ops.slot),
            ops.channel.clone(),
            redis.config.scheduler.clone(),
            redis.config.probe_interval,
            redis.config.connect_timeout + redis.config.command_timeout,
        ))
    }

    /// Reads the log if the operations are still alive; whether they are.
    async fn read_if_alive(weak: &Weak<Self>) -> bool {
        match weak.upgrade() {
            Some(ops) => {
                ops.poll().await;
                true
            }
            None => false,
        }
    }

    /// One read of the log: applies what changed since the last.
    async fn poll(self: &Arc<Self>) {
        let Ok(redis) = self.redis() else { return };
        let _one_at_a_time = self.reading.lock().await;
        let last = self.last.lock().clone();
        let mut inv = Eval::new(&POLL, 3, 2, 64);
        inv.arg(&self.log).arg(&self.blocks).arg(&self.resets);
        inv.arg(&last).arg(1_000);
        let timeout = redis.config.command_timeout;
        let Ok(reply) = redis.eval_off_path::<Value>(&inv, self.slot, timeout).await else {
            // Read again at the next message or subscription, from the
            // same place.
            return;
        };
        match wire::polled(reply) {
            Some(Polled::Tables {
                last: newest,
                blocks,
                resets,
            }) if last.is_empty() => {
                // The first load: what this instance did before it (a block
                // it made meanwhile) stays; the log's next entries follow.
                for (rule, key, block) in blocks {
                    self.rule(&rule).blocks.insert(key, block);
                }
                for (rule, key, generation, until) in resets {
                    self.rule(&rule).resets.insert(key, &generation, until);
                }
                *self.last.lock() = newest;
            }
            // Entries were trimmed before this instance read them (an unblock
            // among them, perhaps): what Redis holds replaces what it knew.
            Some(Polled::Tables {
                last: newest,
                blocks,
                resets,
            }) => {
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
            None => tracing::warn!("throttle: unexpected reply reading the operations log"),
        }
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
