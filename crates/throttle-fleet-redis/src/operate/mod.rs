//! Operations for the whole fleet: blocks, their ends and resets made on
//! one instance (by an operator, or by a rule's penalty) reach every other
//! instance of the backend's Redis, whatever the mode.
//!
//! What lives in Redis, under one hash tag of its own
//! (`<prefix>:{throttle-ops}:...`, one slot in a Cluster):
//! - `log`, a stream of the changes (`op.lua`, `penalty.lua` append; at
//!   most [`LOG_LEN`] entries, roughly);
//! - `blocks` and `resets`, hashes of what holds now, which an instance
//!   loads whole when it starts, or after Redis lost entries it had not
//!   read yet (`poll.lua`); each write also removes a few ended
//!   entries (`sweep.lua`, a cursor kept beside each table), so ended ones
//!   leave at a bounded cost per write;
//! - `stamps`, when each key's last block or unblock was made, which
//!   orders a change that waited on its instance (see below) against the
//!   others: the change made last wins, whatever the order they arrive in;
//! - `epoch`, written once by the first change made on a Redis that has
//!   none, by which an instance tells that Redis lost what it had read;
//! - `p:<rule>:<key>`, each penalized key's history (`penalty.lua`, which
//!   is `Penalty::escalate` step for step), kept until it is back to a key
//!   never denied.
//!
//! A block or an unblock that cannot reach Redis (its breaker open, or the
//! call failed) holds on its instance at once and waits there, in the
//! outbox (`outbox.rs`), until Redis answers again; then it is sent, with
//! the time it was made. When an instance finds that Redis lost its state
//! (another epoch, or the last change it read gone from the log: a restart
//! without persistence, a failover to a replica that had not received it,
//! or a log trimmed past it), it sends again every block it holds, then
//! loads the tables. So a
//! fleet split by an outage, or by a Redis that forgot, converges once
//! Redis answers.
//!
//! Every change is also published on a channel
//! (`<prefix>:{throttle-ops}:changed`). Each instance holds a subscription
//! to it on a connection of its own
//! (`listen.rs`) and reads the log when told, and whenever it subscribes
//! (again): a change holds on every instance about one round trip after
//! it was made, and while nothing changes the operations cost Redis no
//! call at all. A blocked key is denied from core's table in memory, so
//! its requests cost no Redis call either.
//!
//! A reset key is counted under a new name (see [`tables::Resets`]):
//! what every mode holds for the old name, in Redis and in each instance's
//! memory (the exact mode's deny cache, the approximate mode's counts
//! and claims, the leased mode's leases), is left behind at once and
//! expires on its own.

mod limiter;
mod listen;
mod outbox;
mod tables;
mod wire;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use redis::Value;
use throttle_fleet_core::backend::Unavailable;
use throttle_fleet_core::operate::{Block, OpError};
use throttle_fleet_core::{Key, clock::Clock};

use crate::link::{Eval, LuaScript, Redis};
use crate::schedule::micros;
pub(crate) use limiter::{FleetOps, fleet_operations};
pub(crate) use tables::RuleOps;

/// About the most entries the log keeps (`XADD MAXLEN ~`).
pub(crate) const LOG_LEN: u64 = 10_000;

/// How long a reset key is counted under its new name: a day, or two of
/// the rule's windows if that is longer, so that what the old name held
/// has expired when the key goes back to it.
const RESET_HOLD: Duration = Duration::from_secs(86_400);

/// How long the time of a key's last block or unblock is kept in Redis
/// at least (a block's is kept until it ends, if that is later): a change
/// that waited longer than this on its instance is dropped, not sent
/// (`outbox.rs`), since nothing could order it any more.
const ORDER_HOLD: Duration = Duration::from_secs(86_400);

static OP: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(concat!(include_str!("sweep.lua"), include_str!("op.lua"))));
static PENALTY: LazyLock<LuaScript> = LazyLock::new(|| {
    LuaScript::new(concat!(
        include_str!("sweep.lua"),
        include_str!("penalty.lua")
    ))
});
static POLL: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::new(include_str!("poll.lua")));

/// The backend's operations: the rules' tables and the log's reader.
pub(crate) struct Operations {
    redis: Weak<Redis>,
    clock: Arc<dyn Clock>,
    log: String,
    blocks: String,
    resets: String,
    stamps: String,
    epoch_key: String,
    /// Where every change is published.
    channel: String,
    head: String,
    slot: u16,
    rules: Mutex<HashMap<Arc<str>, Arc<RuleOps>>>,
    /// The last log id read; empty until the first load.
    last: Mutex<String>,
    /// The epoch of the Redis last read: empty until the first load, `-`
    /// while Redis has none, `*` between a loss and the load after it
    /// (`poll.lua`).
    epoch: Mutex<String>,
    /// Blocks and unblocks made here that Redis has not received yet.
    outbox: outbox::Outbox,
    /// Held by the read in progress: reads one at a time, each from where
    /// the last stopped.
    reading: tokio::sync::Mutex<()>,
    /// Held by the listener's round in progress (`listen.rs`).
    listening: tokio::sync::Mutex<()>,
    /// Whether a subscription to `channel` is held now (`listen.rs`).
    subscribed: std::sync::atomic::AtomicBool,
    /// Whether the last read (and send) after a change was done whole.
    caught_up: std::sync::atomic::AtomicBool,
    /// The subscription's reader: aborted when the operations are dropped
    /// (with their backend), which closes its connection.
    reader: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Drop for Operations {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.get_mut().take() {
            reader.abort();
        }
    }
}

impl std::fmt::Debug for Operations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operations")
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

impl Operations {
    /// The backend's operations, started (their channel listened to) the
    /// first time a rule asks.
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
                    stamps: format!("{head}stamps"),
                    epoch_key: format!("{head}epoch"),
                    channel: format!("{head}changed"),
                    slot: crate::hash_slot::slot_of(head.as_bytes()),
                    head,
                    rules: Mutex::new(HashMap::new()),
                    last: Mutex::new(String::new()),
                    epoch: Mutex::new(String::new()),
                    outbox: outbox::Outbox::default(),
                    reading: tokio::sync::Mutex::new(()),
                    listening: tokio::sync::Mutex::new(()),
                    subscribed: std::sync::atomic::AtomicBool::new(false),
                    caught_up: std::sync::atomic::AtomicBool::new(false),
                    reader: Mutex::new(None),
                });
                Self::listen(&ops);
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

    /// The name of `key`'s penalty history under the rule named `rule`.
    fn history(&self, rule: &str, key: &Key) -> String {
        let mut out = format!("{}p:{rule}:", self.head);
        key.write_hex(&mut out);
        out
    }

    /// Runs `op.lua`: `op` on `key` of the rule named `rule`, with `value`,
    /// in `table` (blocks or resets); `made` (µs, this instance's clock)
    /// orders a block or an unblock against the key's other changes.
    async fn run_op(
        &self,
        op: &'static str,
        rule: &str,
        key: &Key,
        value: &str,
        made: u64,
    ) -> Result<wire::Sent, OpError> {
        let field = wire::field(rule, key);
        let redis = self.redis()?;
        let mut inv = Eval::new(&OP, 7, 8, 160 + field.len() + value.len());
        let (table, cursor) = if op == "r" {
            (&self.resets, format!("{}resets-sweep", self.head))
        } else {
            (&self.blocks, format!("{}blocks-sweep", self.head))
        };
        inv.arg(&self.log)
            .arg(table)
            .arg(cursor)
            .arg(self.history(rule, key))
            .arg(&self.stamps)
            .arg(format!("{}stamps-sweep", self.head))
            .arg(&self.epoch_key);
        inv.arg(op)
            .arg(&field)
            .arg(value)
            .arg(redis.script_now())
            .arg(LOG_LEN)
            .arg(&self.channel)
            .arg(made)
            .arg(
                made.saturating_add(micros(ORDER_HOLD))
                    .max(until_of(op, value)),
            );
        let timeout = redis.config.command_timeout;
        match redis.eval_off_path::<Value>(&inv, self.slot, timeout).await {
            Ok(reply) => wire::sent(&reply).ok_or_else(|| {
                OpError::Unavailable(Unavailable::new(
                    "unexpected reply from the operations script",
                ))
            }),
            Err(failure) => Err(OpError::Unavailable(Unavailable::new(failure.to_string()))),
        }
    }

    /// A reset of `key` under the rule named `rule`, held until `until`:
    /// its generation (the log entry's id). Refused while Redis cannot be
    /// asked: a reset is not queued, since each instance counts the key
    /// under the generation Redis gives it.
    async fn reset(&self, rule: &str, key: &Key, until: u64) -> Result<String, OpError> {
        if self.redis()?.is_open(self.slot) {
            return Err(OpError::Unavailable(Unavailable::new(
                "the Redis node of the operations log is down (its breaker is open)",
            )));
        }
        match self.run_op("r", rule, key, &until.to_string(), 0).await? {
            wire::Sent::Done(id) => Ok(id),
            wire::Sent::Stale(_) => Err(OpError::Unavailable(Unavailable::new(
                "unexpected reply from the operations script",
            ))),
        }
    }

    /// The local table of `key` under the rule named `rule` takes what
    /// Redis holds (a change of ours that a later one superseded).
    fn adopt(&self, rule: &str, key: &Key, holds: Option<Block>) {
        let tables = self.rule(rule);
        match holds {
            Some(block) => {
                tables.blocks.insert(*key, block);
            }
            None => {
                tables.blocks.remove(key);
            }
        }
    }
}

/// When a block's value (`<until> ...`) ends; 0 for anything else.
fn until_of(op: &str, value: &str) -> u64 {
    if op != "b" {
        return 0;
    }
    value
        .split(' ')
        .next()
        .and_then(|u| u.parse().ok())
        .unwrap_or(0)
}
