//! Penalties that escalate: a key denied `after` times within `within` is
//! blocked for `block`; each further block of the same key while the
//! previous one is remembered (`memory` after it ended) lasts twice as
//! long, up to `max`.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use parking_lot::Mutex;

use super::room::make_room;

use crate::{ConfigError, Key};

/// The most keys whose denials one rule tracks at once in this process (a
/// fleet-wide backend keeps them in its store instead). Past it, keys whose
/// history is over are forgotten (a scan at most once a second); if none
/// is, a new key's denial is not tracked.
pub const MAX_TRACKED_KEYS: usize = 100_000;

/// How a rule punishes a key that keeps being denied ([`Rule::with_penalty`]):
/// `after` denials within `within` block the key for `block`; each block
/// that starts while the last one is remembered ([`with_memory_window`](Self::with_memory_window),
/// an hour by default) lasts twice the last, at most
/// [`with_max_block`](Self::with_max_block) (`block` by default).
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_core::{Answer, Key, Quota, Rule};
/// use throttle_fleet_core::decision::Demand;
/// use throttle_fleet_core::{memory::MemoryBackend, operate::Penalty, rule_set::RuleSet};
///
/// // 5 denials within a minute: blocked 10 s, then 20 s, 40 s, at most 60 s.
/// let p = Penalty::new(5, Duration::from_secs(60), Duration::from_secs(10))
///     .with_max_block(Duration::from_secs(60));
/// let mut rules = RuleSet::new();
/// let login = rules.bind(Rule::new("login", Quota::per_minute(1)).with_penalty(p), &MemoryBackend::default())?;
/// let check = |rules: &RuleSet| match rules.check(&[Demand::new(login, Key::new("10.0.0.1"), 1)]) {
///     Answer::Ready(checked) => checked.into_decision(),
///     Answer::Pending(_) => unreachable!("the memory backend answers at once"),
/// };
/// assert!(check(&rules).is_allowed());
/// for _ in 0..5 {
///     assert!(check(&rules).is_denied()); // the fifth denial starts a block
/// }
/// let blocked = check(&rules);
/// assert!(blocked.is_denied());
/// assert!(blocked.retry_after() <= Duration::from_secs(10));
/// assert!(blocked.retry_after() > Duration::from_secs(9)); // not the quota's minute
///
/// let bad = Penalty::new(0, Duration::from_secs(60), Duration::from_secs(10));
/// assert_eq!(bad.validate().unwrap_err().field(), "penalty.after");
/// # Ok::<(), throttle_fleet_core::ConfigError>(())
/// ```
///
/// [`Rule::with_penalty`]: crate::Rule::with_penalty
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Penalty {
    after: u32,
    within: Duration,
    block: Duration,
    max: Duration,
    memory: Duration,
}

impl Penalty {
    /// Blocks a key for `block` once it has been denied `after` times
    /// within `within`. Further blocks double, up to 16 times `block`
    /// unless [`with_max_block`](Self::with_max_block) says otherwise, while the previous block
    /// ended less than an hour ago (see [`with_memory_window`](Self::with_memory_window)).
    pub fn new(after: u32, within: Duration, block: Duration) -> Self {
        Self {
            after,
            within,
            block,
            max: block.saturating_mul(16),
            memory: Duration::from_secs(3600),
        }
    }

    /// The longest block (at least `block`).
    #[must_use]
    pub fn with_max_block(mut self, max: Duration) -> Self {
        self.max = max;
        self
    }

    /// How long after a block ends the next one still doubles it
    /// (default one hour).
    #[must_use]
    pub fn with_memory_window(mut self, memory: Duration) -> Self {
        self.memory = memory;
        self
    }

    /// Denials that start a block.
    pub fn after(&self) -> u32 {
        self.after
    }

    /// The window the denials are counted in.
    pub fn within(&self) -> Duration {
        self.within
    }

    /// The first block's length.
    pub fn first_block(&self) -> Duration {
        self.block
    }

    /// The longest block.
    pub fn max_block(&self) -> Duration {
        self.max
    }

    /// How long a block is remembered after it ends.
    pub fn memory_window(&self) -> Duration {
        self.memory
    }

    /// Checks the penalty's fields; the error names the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let day = Duration::from_secs(86_400);
        if self.after == 0 {
            return Err(ConfigError::new(
                "penalty.after",
                "must be at least 1 (got 0)",
            ));
        }
        for (field, d, most) in [
            ("penalty.within_secs", self.within, day),
            ("penalty.block_secs", self.block, day * 30),
            ("penalty.max_block_secs", self.max, day * 30),
            ("penalty.memory_secs", self.memory, day * 30),
        ] {
            if d < Duration::from_millis(1) || d > most {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "must be from 1 ms to {} days (got {d:?})",
                        most.as_secs() / 86_400
                    ),
                ));
            }
        }
        if self.max < self.block {
            return Err(ConfigError::new(
                "penalty.max_block_secs",
                format!(
                    "must be at least the first block, {:?} (got {:?})",
                    self.block, self.max
                ),
            ));
        }
        Ok(())
    }

    /// Counts a denial of a key whose history is `st`, at `now_us`: the
    /// block it starts, if it starts one (its length in microseconds, and
    /// its level: 0 for the first, 1 for the second within the memory,
    /// ...). The Redis backends run the same steps in a script.
    pub(crate) fn escalate(&self, st: &mut PenaltyState, now_us: u64) -> Option<(u64, u32)> {
        let within = micros(self.within);
        if st.denials == 0 || now_us >= st.window_start_us.saturating_add(within) {
            st.window_start_us = now_us;
            st.denials = 0;
        }
        st.denials += 1;
        if st.denials < self.after {
            return None;
        }
        st.denials = 0;
        let remembered =
            st.last_end_us != 0 && now_us <= st.last_end_us.saturating_add(micros(self.memory));
        st.level = if remembered {
            st.level.saturating_add(1)
        } else {
            0
        };
        let grown = micros(self.block).saturating_mul(1u64 << st.level.min(40));
        let length = grown.min(micros(self.max));
        st.last_end_us = now_us.saturating_add(length);
        Some((length, st.level))
    }

    /// When `st` is back to a key never denied: it can be forgotten then.
    pub(crate) fn idle_at(&self, st: &PenaltyState) -> u64 {
        let window_end = st.window_start_us.saturating_add(micros(self.within));
        let memory_end = if st.last_end_us == 0 {
            0
        } else {
            st.last_end_us.saturating_add(micros(self.memory))
        };
        window_end.max(memory_end)
    }
}

/// One key's denials and blocks under a [`Penalty`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PenaltyState {
    /// When the current count of denials started (µs).
    pub(crate) window_start_us: u64,
    /// Denials counted since.
    pub(crate) denials: u32,
    /// The last block's level.
    pub(crate) level: u32,
    /// When the last block ended or ends (µs), or 0: never blocked.
    pub(crate) last_end_us: u64,
}

/// A rule's penalty with the keys' histories, in this process: what a
/// backend without a fleet-wide store of its own escalates with.
#[derive(Debug)]
pub(crate) struct Escalation {
    penalty: Penalty,
    states: Mutex<HashMap<Key, PenaltyState>>,
    /// When a full table may next be scanned for histories that are over.
    next_sweep_us: AtomicU64,
}

impl Escalation {
    /// No key denied yet.
    pub(crate) fn new(penalty: Penalty) -> Self {
        Self {
            penalty,
            states: Mutex::new(HashMap::new()),
            next_sweep_us: AtomicU64::new(0),
        }
    }

    /// Counts a denial of `key` at `now_us`; the block it starts, if any
    /// (see [`Penalty::escalate`]).
    pub(crate) fn denied(&self, key: &Key, now_us: u64) -> Option<(u64, u32)> {
        let mut states = self.states.lock();
        if !states.contains_key(key)
            && !make_room(
                &mut states,
                MAX_TRACKED_KEYS,
                now_us,
                &self.next_sweep_us,
                |st| self.penalty.idle_at(st) > now_us,
            )
        {
            return None;
        }
        self.penalty
            .escalate(states.entry(*key).or_default(), now_us)
    }

    /// Forgets `key`'s history (a reset).
    pub(crate) fn forget(&self, key: &Key) {
        self.states.lock().remove(key);
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
