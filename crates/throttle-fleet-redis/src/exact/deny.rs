//! The exact mode's local deny cache: a key that Redis showed over its limit
//! is denied here, without a Redis call, until the reply's retry-after has
//! passed (envoy's ratelimit local over-limit cache, rate-limiter-flexible's
//! `inMemoryBlockOnConsumed`). Counts stay exact: a denied request takes
//! nothing, and the wait is measured from when the call was sent, so the
//! cache never denies past the moment Redis would admit the same request.
//! Only requests of cost 1 (the common case) are cached: for them nothing
//! fits until the wait is over, so the answer (remaining 0, the same reset
//! and retry-after) is the one Redis would give, which the differential
//! tests check. (A refund made meanwhile, when another rule denied the
//! request, is seen once the wait is over. The wait is kept on the local
//! clock: a clock stepped back lengthens it, and a cached answer's reset is
//! counted from the local clock, not Redis's.)

use std::sync::Arc;

use throttle_fleet_core::algorithm::{Meter, Step};
use throttle_fleet_core::memory::MemoryLimiter;
use throttle_fleet_core::{ConfigError, Key, clock::Clock, memory::MemoryBackend};

/// Keys remembered per rule (the table is bounded like the memory backend's;
/// keys whose wait is over are the first to go).
pub(super) const DENY_CACHE_KEYS: usize = 100_000;

/// One key's denial, in local time.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Denial {
    until: u64,
    reset_at: u64,
}

/// The table's meter: entries are written and read by [`DenyCache`]; it
/// only says when an entry can be forgotten.
#[derive(Debug)]
pub(super) struct DenyMeter;

impl Meter for DenyMeter {
    type State = Denial;

    fn capacity(&self) -> u64 {
        0
    }

    fn acquire(&self, _: &mut Denial, _: u64, _: u64) -> Step {
        Step::default()
    }

    fn refund(&self, _: &mut Denial, _: u64, _: u64) {}

    fn idle_at(&self, st: &Denial) -> u64 {
        st.until
    }
}

/// Denials remembered for one rule.
pub(super) struct DenyCache {
    table: Arc<MemoryLimiter<DenyMeter, Arc<dyn Clock>>>,
    clock: Arc<dyn Clock>,
}

impl DenyCache {
    pub(super) fn new(clock: Arc<dyn Clock>) -> Result<Self, ConfigError> {
        let table = MemoryBackend::with_clock(clock.clone())
            .max_keys(DENY_CACHE_KEYS)
            .shards(16)
            .limiter_for(DenyMeter)?;
        Ok(Self { table, clock })
    }

    /// Local "now", to take before a call is sent.
    pub(super) fn now(&self) -> u64 {
        self.clock.now_us()
    }

    /// The denial of `cost` for `key` if one is remembered and still holds:
    /// no allocation, and nothing inserted.
    pub(super) fn check(&self, key: &Key, cost: u64) -> Option<(Step, u64)> {
        if cost != 1 {
            return None;
        }
        let now = self.clock.now_us();
        self.table
            .update(key, |d| {
                (now < d.until).then(|| {
                    let step = Step {
                        allowed: false,
                        remaining: 0,
                        reset_us: d.reset_at.saturating_sub(now),
                        retry_after_us: d.until - now,
                        delay_us: 0,
                    };
                    (step, now)
                })
            })
            .flatten()
    }

    /// Remembers a denial Redis answered for a call sent at `sent_at`.
    pub(super) fn remember(&self, key: &Key, cost: u64, step: &Step, sent_at: u64) {
        if cost != 1 || step.allowed || step.remaining > 0 || step.retry_after_us == 0 {
            return;
        }
        let denial = Denial {
            until: sent_at + step.retry_after_us,
            reset_at: sent_at + step.reset_us,
        };
        self.table.with_state(key, |d, _| *d = denial);
    }
}
