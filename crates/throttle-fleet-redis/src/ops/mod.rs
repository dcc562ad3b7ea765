//! Operations for the whole fleet: blocks, their ends and resets made on
//! one instance (by an operator, or by a rule's penalty) reach every other
//! instance of the backend's Redis, whatever the mode.
//!
//! Three things in Redis, under one hash tag of their own
//! (`<prefix>:{throttle-ops}:...`, one slot in a Cluster):
//! - `log`, a stream of the changes (`op.lua`, `penalty.lua` append; at
//!   most [`LOG_LEN`] entries, roughly);
//! - `blocks` and `resets`, hashes of what holds now, which an instance
//!   loads whole when it starts, or when entries it had not read yet were
//!   trimmed from the log (`poll.lua`); each write also removes a few ended
//!   entries (`sweep.lua`, a cursor kept beside each table), so ended ones
//!   leave at a bounded cost per write;
//! - `p:<rule>:<key>`, each penalized key's history (`penalty.lua`, which
//!   is `Penalty::escalate` step for step), kept until it is back to a key
//!   never denied.
//!
//! Every instance reads the log every [`operations_interval`]: a change
//! holds on every instance within that plus one command timeout (the
//! propagation bound). A blocked key is denied from core's table in
//! memory, so its requests cost no Redis call.
//!
//! A reset key is counted under a new name (see [`tables::Resets`]):
//! what every mode holds for the old name, in Redis and in each instance's
//! memory (the exact mode's deny cache, the approximate mode's counts
//! and claims, the leased mode's leases), is left behind at once and
//! expires on its own.
//!
//! [`operations_interval`]: crate::RedisConfig::operations_interval

mod tables;
mod wire;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use redis::{Script, Value};
use throttle_fleet_core::backend::Unavailable;
use throttle_fleet_core::operate::{Block, BlockCause, Blocks, OpError, Penalty};
use throttle_fleet_core::{Answer, Clock, Key, Rule};

use crate::conn::{Eval, Redis};
use crate::schedule::{Every, Going, micros};
pub(crate) use tables::RuleOps;
use wire::{Change, Polled};

/// About the most entries the log keeps (`XADD MAXLEN ~`).
pub(crate) const LOG_LEN: u64 = 10_000;

/// How long a reset key is counted under its new name: a day, or two of
/// the rule's windows if that is longer, so that what the old name held
/// has expired when the key goes back to it.
const RESET_HOLD: Duration = Duration::from_secs(86_400);

static OP: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("sweep.lua"), include_str!("op.lua"))));
static PENALTY: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("sweep.lua"),
        include_str!("penalty.lua")
    ))
});
static POLL: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("poll.lua")));

/// The backend's operations: the rules' tables and the log's reader.
pub(crate) struct Operations {
    redis: Weak<Redis>,
    clock: Arc<dyn Clock>,
    log: String,
    blocks: String,
    resets: String,
    head: String,
    slot: u16,
    rules: Mutex<HashMap<Arc<str>, Arc<RuleOps>>>,
    /// The last log id read; empty until the first load.
    last: Mutex<String>,
}

impl std::fmt::Debug for Operations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operations")
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl Operations {
    /// The backend's operations, started (their log read on the
    /// backend's scheduler) the first time a rule asks.
    pub(crate) fn of(redis: &Arc<Redis>) -> Arc<Self> {
        let held = redis
            .ops
            .get_or_init(|| {
                let head = format!("{}:{{throttle-ops}}:", redis.config.key_prefix);
                let ops = Arc::new(Self {
                    redis: Arc::downgrade(redis),
                    clock: redis.local_clock(),
                    log: format!("{head}log"),
                    blocks: format!("{head}blocks"),
                    resets: format!("{head}resets"),
                    slot: crate::slot::slot_of(head.as_bytes()),
                    head,
                    rules: Mutex::new(HashMap::new()),
                    last: Mutex::new(String::new()),
                });
                let reader = Every::new(
                    &ops,
                    redis.local_now(),
                    redis.config.operations_interval,
                    |ops: Arc<Self>| {
                        Box::pin(async move {
                            ops.poll().await;
                            Going::On
                        })
                    },
                );
                redis.config.scheduler.start(reader);
                ops as Arc<dyn std::any::Any + Send + Sync>
            })
            .clone();
        held.downcast::<Self>()
            .unwrap_or_else(|_| unreachable!("only Operations is held there"))
    }

    /// The tables of the rule named `name`.
    pub(crate) fn rule(&self, name: &str) -> Arc<RuleOps> {
        let mut rules = self.rules.lock();
        if let Some(r) = rules.get(name) {
            return r.clone();
        }
        let r = Arc::new(RuleOps::new(self.clock.clone()));
        rules.insert(Arc::from(name), r.clone());
        r
    }

    fn redis(&self) -> Result<Arc<Redis>, OpError> {
        self.redis
            .upgrade()
            .ok_or_else(|| OpError::Unavailable(Unavailable::new("the backend was dropped")))
    }

    /// One read of the log: applies what changed since the last.
    async fn poll(self: &Arc<Self>) {
        let Ok(redis) = self.redis() else { return };
        // A node known down is not waited for: the log is read again once
        // its breaker closes (a hung node would cost each round a command
        // timeout).
        if redis.is_open(self.slot) {
            return;
        }
        let last = self.last.lock().clone();
        let mut inv = Eval::new(&POLL, 3, 2, 64);
        inv.arg(&self.log).arg(&self.blocks).arg(&self.resets);
        inv.arg(&last).arg(1_000);
        let timeout = redis.config.command_timeout;
        let Ok(reply) = redis.eval_off_path::<Value>(&inv, self.slot, timeout).await else {
            // Read again next round, from the same place.
            return;
        };
        match wire::polled(reply) {
            Some(Polled::Tables {
                last,
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
                *self.last.lock() = last;
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

    /// Runs `op.lua`: `op` on `field` with `value`, in `table`; the log
    /// entry's id.
    async fn change(
        self: Arc<Self>,
        op: &'static str,
        table: bool,
        field: String,
        value: String,
    ) -> Result<String, OpError> {
        let redis = self.redis()?;
        if redis.is_open(self.slot) {
            return Err(OpError::Unavailable(Unavailable::new(
                "the Redis node of the operations log is down (its breaker is open)",
            )));
        }
        let mut inv = Eval::new(&OP, 3, 5, 64 + field.len() + value.len());
        let (table, cursor) = if table {
            (&self.blocks, format!("{}blocks-sweep", self.head))
        } else {
            (&self.resets, format!("{}resets-sweep", self.head))
        };
        inv.arg(&self.log).arg(table).arg(cursor);
        inv.arg(op)
            .arg(&field)
            .arg(&value)
            .arg(redis.script_now())
            .arg(LOG_LEN);
        let timeout = redis.config.command_timeout;
        match redis.eval_off_path::<Value>(&inv, self.slot, timeout).await {
            Ok(reply) => wire::text(&reply).ok_or_else(|| {
                OpError::Unavailable(Unavailable::new(
                    "unexpected reply from the operations script",
                ))
            }),
            Err(failure) => Err(OpError::Unavailable(Unavailable::new(failure.to_string()))),
        }
    }
}

/// The operations' methods of `Limiter` for a mode's limiter that has a
/// method `ops(&self) -> &FleetOps`: each delegates to it.
macro_rules! fleet_operations {
    () => {
        fn reset(
            &self,
            key: &throttle_fleet_core::Key,
        ) -> throttle_fleet_core::Answer<Result<(), throttle_fleet_core::OpError>> {
            self.ops().reset(key)
        }

        fn blocks(&self) -> Option<std::sync::Arc<throttle_fleet_core::operate::Blocks>> {
            self.ops().blocks()
        }

        fn share_block(
            &self,
            key: &throttle_fleet_core::Key,
            block: Option<&throttle_fleet_core::operate::Block>,
        ) -> throttle_fleet_core::Answer<Result<(), throttle_fleet_core::OpError>> {
            self.ops().share_block(key, block)
        }

        fn violated(
            &self,
            key: &throttle_fleet_core::Key,
            penalty: &throttle_fleet_core::Penalty,
        ) -> bool {
            self.ops().violated(key, penalty)
        }
    };
}
pub(crate) use fleet_operations;

/// A rule's part in the fleet's operations: what each mode's limiter
/// delegates the operations of `Limiter` to.
#[derive(Debug, Clone)]
pub(crate) struct FleetOps {
    hub: Arc<Operations>,
    name: Arc<str>,
    tables: Arc<RuleOps>,
    hold: Duration,
}

impl FleetOps {
    pub(crate) fn new(redis: &Arc<Redis>, rule: &Rule) -> Self {
        let hub = Operations::of(redis);
        Self {
            tables: hub.rule(rule.name()),
            name: rule.shared_name().clone(),
            hub,
            hold: RESET_HOLD.max(rule.window().saturating_mul(2)),
        }
    }

    /// The name `key` is counted under now (itself unless it was reset).
    #[inline]
    pub(crate) fn current(&self, key: &Key) -> Key {
        self.tables.resets.current(key)
    }

    pub(crate) fn blocks(&self) -> Option<Arc<Blocks>> {
        Some(self.tables.blocks.clone())
    }

    pub(crate) fn share_block(
        &self,
        key: &Key,
        block: Option<&Block>,
    ) -> Answer<Result<(), OpError>> {
        let field = wire::field(&self.name, key);
        let (op, value) = match block {
            Some(b) => ("b", wire::block_value(b)),
            None => ("u", String::new()),
        };
        let hub = self.hub.clone();
        Answer::Pending(Box::pin(async move {
            hub.change(op, true, field, value).await.map(|_| ())
        }))
    }

    pub(crate) fn reset(&self, key: &Key) -> Answer<Result<(), OpError>> {
        let until = self.hub.clock.now_us().saturating_add(micros(self.hold));
        let (hub, tables, key) = (self.hub.clone(), self.tables.clone(), *key);
        let field = wire::field(&self.name, &key);
        Answer::Pending(Box::pin(async move {
            let id = hub.change("r", false, field, until.to_string()).await?;
            tables.resets.insert(key, &id, until);
            Ok(())
        }))
    }

    /// Counts a denial in Redis, in the background; `false` (count it in
    /// this process) while the log's node is down.
    pub(crate) fn violated(&self, key: &Key, penalty: &Penalty) -> bool {
        let Ok(redis) = self.hub.redis() else {
            return false;
        };
        if redis.is_open(self.hub.slot) {
            return false;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let mut hex = String::new();
        key.write_hex(&mut hex);
        let mut inv = Eval::new(&PENALTY, 4, 8, 160);
        inv.arg(format!("{}p:{}:{hex}", self.hub.head, self.name))
            .arg(&self.hub.blocks)
            .arg(&self.hub.log)
            .arg(format!("{}blocks-sweep", self.hub.head));
        inv.arg(redis.script_now())
            .arg(penalty.after())
            .arg(micros(penalty.within()))
            .arg(micros(penalty.first_block()))
            .arg(micros(penalty.max_block()))
            .arg(micros(penalty.memory_window()))
            .arg(wire::field(&self.name, key))
            .arg(LOG_LEN);
        let (slot, timeout) = (self.hub.slot, redis.config.command_timeout);
        let (tables, key, name) = (self.tables.clone(), *key, self.name.clone());
        rt.spawn(async move {
            let Ok(reply) = redis.eval_off_path::<Value>(&inv, slot, timeout).await else {
                return;
            };
            if let Some((length, level, until_us)) = wire::started(&reply) {
                let block = Block {
                    until_us,
                    label: Arc::from(""),
                    cause: BlockCause::Penalty { level },
                };
                if tables.blocks.insert(key, block) {
                    tables.blocks.count_start();
                    tracing::info!(
                        rule = &*name,
                        key = ?key,
                        level,
                        block_ms = length / 1_000,
                        "throttle: a key kept being denied; blocked on every instance"
                    );
                }
            }
        });
        true
    }
}
