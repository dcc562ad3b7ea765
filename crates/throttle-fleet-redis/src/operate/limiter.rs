//! What each mode's limiter delegates its `KeyOps` to: a rule's part in
//! the fleet's operations.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use throttle_fleet_core::operate::{Block, BlockCause, Blocks, OpError, Penalty, Reach};
use throttle_fleet_core::{Answer, Key, Rule};

use super::{LOG_LEN, ORDER_HOLD, Operations, PENALTY, RESET_HOLD, RuleOps, wire};
use crate::link::{Eval, Redis};
use crate::schedule::micros;

/// The methods of `KeyOps` but `peek` for a mode's limiter that has a
/// method `fleet(&self) -> &FleetOps`: each delegates to it.
macro_rules! fleet_operations {
    () => {
        fn reset(
            &self,
            key: &throttle_fleet_core::Key,
        ) -> throttle_fleet_core::Answer<Result<(), throttle_fleet_core::operate::OpError>> {
            self.fleet().reset(key)
        }

        fn blocks(&self) -> Option<std::sync::Arc<throttle_fleet_core::operate::Blocks>> {
            self.fleet().blocks()
        }

        fn share_block(
            &self,
            key: &throttle_fleet_core::Key,
            block: Option<&throttle_fleet_core::operate::Block>,
        ) -> throttle_fleet_core::Answer<
            Result<throttle_fleet_core::operate::Reach, throttle_fleet_core::operate::OpError>,
        > {
            self.fleet().share_block(key, block)
        }

        fn violated(
            &self,
            key: &throttle_fleet_core::Key,
            penalty: &throttle_fleet_core::operate::Penalty,
        ) -> bool {
            self.fleet().violated(key, penalty)
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

    /// The name `key` is counted under now, if it was reset (`None`: its
    /// own): `let key = renamed.as_ref().unwrap_or(key)`.
    #[inline]
    pub(crate) fn renamed(&self, key: &Key) -> Option<Key> {
        self.tables.resets.renamed(key)
    }

    pub(crate) fn blocks(&self) -> Option<Arc<Blocks>> {
        Some(self.tables.blocks.clone())
    }

    pub(crate) fn share_block(
        &self,
        key: &Key,
        block: Option<&Block>,
    ) -> Answer<Result<Reach, OpError>> {
        let (hub, name, key, block) = (self.hub.clone(), self.name.clone(), *key, block.cloned());
        Answer::Pending(Box::pin(async move { hub.share(name, key, block).await }))
    }

    pub(crate) fn reset(&self, key: &Key) -> Answer<Result<(), OpError>> {
        let until = self.hub.clock.now_us().saturating_add(micros(self.hold));
        let (hub, tables, key) = (self.hub.clone(), self.tables.clone(), *key);
        let name = self.name.clone();
        Answer::Pending(Box::pin(async move {
            let id = hub.reset(&name, &key, until).await?;
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
        let mut inv = Eval::new(&PENALTY, 7, 10, 260);
        inv.arg(self.hub.history(&self.name, key))
            .arg(&self.hub.blocks)
            .arg(&self.hub.log)
            .arg(format!("{}blocks-sweep", self.hub.head))
            .arg(&self.hub.stamps)
            .arg(format!("{}stamps-sweep", self.hub.head))
            .arg(&self.hub.epoch_key);
        inv.arg(redis.script_now())
            .arg(penalty.after())
            .arg(micros(penalty.within()))
            .arg(micros(penalty.first_block()))
            .arg(micros(penalty.max_block()))
            .arg(micros(penalty.memory_window()))
            .arg(wire::field(&self.name, key))
            .arg(LOG_LEN)
            .arg(&self.hub.channel)
            .arg(micros(ORDER_HOLD));
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
