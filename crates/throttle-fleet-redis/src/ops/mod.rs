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
mod tables;
mod wire;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use redis::{Script, Value};
use throttle_fleet_core::backend::Unavailable;
use throttle_fleet_core::operate::OpError;
use throttle_fleet_core::{Clock, Key};

use crate::conn::{Eval, Redis};
pub(crate) use limiter::{FleetOps, fleet_operations};
pub(crate) use tables::RuleOps;

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
    /// Where every change is published.
    channel: String,
    head: String,
    slot: u16,
    rules: Mutex<HashMap<Arc<str>, Arc<RuleOps>>>,
    /// The last log id read; empty until the first load.
    last: Mutex<String>,
    /// Held by the read in progress: reads one at a time, each from where
    /// the last stopped.
    reading: tokio::sync::Mutex<()>,
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
                    channel: format!("{head}changed"),
                    slot: crate::slot::slot_of(head.as_bytes()),
                    head,
                    rules: Mutex::new(HashMap::new()),
                    last: Mutex::new(String::new()),
                    reading: tokio::sync::Mutex::new(()),
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
    /// in `table` (blocks or resets); the log entry's id.
    async fn change(
        self: Arc<Self>,
        op: &'static str,
        table: bool,
        rule: Arc<str>,
        key: Key,
        value: String,
    ) -> Result<String, OpError> {
        let field = wire::field(&rule, &key);
        let redis = self.redis()?;
        if redis.is_open(self.slot) {
            return Err(OpError::Unavailable(Unavailable::new(
                "the Redis node of the operations log is down (its breaker is open)",
            )));
        }
        let mut inv = Eval::new(&OP, 4, 6, 96 + field.len() + value.len());
        let (table, cursor) = if table {
            (&self.blocks, format!("{}blocks-sweep", self.head))
        } else {
            (&self.resets, format!("{}resets-sweep", self.head))
        };
        inv.arg(&self.log)
            .arg(table)
            .arg(cursor)
            .arg(self.history(&rule, &key));
        inv.arg(op)
            .arg(&field)
            .arg(&value)
            .arg(redis.script_now())
            .arg(LOG_LEN)
            .arg(&self.channel);
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
