//! The slots one instance holds in Redis for one concurrency rule, per key:
//! plain data that the limiter changes and the renewal reads, tested
//! without a server.

use std::collections::HashMap;

use throttle_fleet_core::Key;

/// One running request's slot: the sequence number that names its member
/// in the key's sorted set, and the cost it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub(crate) seq: u64,
    pub(crate) cost: u64,
}

/// Every slot this instance holds for one rule, by key.
#[derive(Debug, Default)]
pub(crate) struct HeldSlots {
    by_key: HashMap<Key, Vec<Slot>>,
    slots: usize,
}

impl HeldSlots {
    /// A slot Redis granted for `key`.
    pub(crate) fn add(&mut self, key: Key, slot: Slot) {
        self.by_key.entry(key).or_default().push(slot);
        self.slots += 1;
    }

    /// Takes back one of `key`'s slots holding `cost` (a request of `key`
    /// ended): any of them, since slots of one key and cost are alike.
    /// `None` when this instance holds none (already released, or never
    /// granted).
    pub(crate) fn take(&mut self, key: &Key, cost: u64) -> Option<Slot> {
        let slots = self.by_key.get_mut(key)?;
        let i = slots.iter().position(|s| s.cost == cost)?;
        let slot = slots.swap_remove(i);
        if slots.is_empty() {
            self.by_key.remove(key);
        }
        self.slots -= 1;
        Some(slot)
    }

    /// Every key with its slots, for one round of renewals.
    pub(crate) fn snapshot(&self) -> Vec<(Key, Vec<Slot>)> {
        self.by_key.iter().map(|(k, s)| (*k, s.clone())).collect()
    }

    /// Of `slots`, the slots of `key` a renewal listed, how many of those
    /// at the 1-based `missing` positions (absent from Redis) this
    /// instance still holds: those expired and their requests run on
    /// uncounted. One no longer held was released after the renewal
    /// listed it, and its release reached Redis first.
    pub(crate) fn lost(&self, key: &Key, slots: &[Slot], missing: &[u64]) -> u64 {
        let Some(held) = self.by_key.get(key) else {
            return 0;
        };
        missing
            .iter()
            .filter_map(|&i| slots.get(usize::try_from(i).ok()?.checked_sub(1)?))
            .filter(|slot| held.iter().any(|h| h.seq == slot.seq))
            .count() as u64
    }

    /// Takes every slot (a shutdown gives them all back).
    pub(crate) fn drain(&mut self) -> Vec<(Key, Vec<Slot>)> {
        self.slots = 0;
        self.by_key.drain().collect()
    }

    /// How many slots are held.
    pub(crate) fn len(&self) -> usize {
        self.slots
    }
}

#[cfg(test)]
mod tests;
