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
pub(crate) struct Held {
    by_key: HashMap<Key, Vec<Slot>>,
    slots: usize,
}

impl Held {
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
mod tests {
    use super::*;

    #[test]
    fn a_release_takes_one_slot_of_its_key_and_cost_and_only_once() {
        let (a, b) = (Key::new("a"), Key::new("b"));
        let mut held = Held::default();
        held.add(a, Slot { seq: 1, cost: 1 });
        held.add(a, Slot { seq: 2, cost: 3 });
        held.add(b, Slot { seq: 3, cost: 1 });
        assert_eq!(held.len(), 3);
        assert_eq!(held.take(&a, 3), Some(Slot { seq: 2, cost: 3 }));
        assert_eq!(held.take(&a, 3), None, "a slot is given back once");
        assert_eq!(held.take(&b, 2), None, "no slot of that cost");
        assert_eq!(held.snapshot().len(), 2);
        assert_eq!(held.take(&a, 1), Some(Slot { seq: 1, cost: 1 }));
        assert_eq!(held.snapshot(), vec![(b, vec![Slot { seq: 3, cost: 1 }])]);
        assert_eq!(held.drain().len(), 1);
        assert_eq!(held.len(), 0);
        assert!(held.snapshot().is_empty());
    }

    #[test]
    fn a_slot_missing_at_its_renewal_is_lost_only_while_still_held() {
        let (a, b) = (Key::new("a"), Key::new("b"));
        let mut held = Held::default();
        held.add(a, Slot { seq: 1, cost: 1 });
        held.add(a, Slot { seq: 2, cost: 1 });
        held.add(b, Slot { seq: 3, cost: 1 });
        let listed = held.snapshot();
        let slots_of = |key| &listed.iter().find(|(k, _)| *k == key).unwrap().1;
        let (of_a, of_b) = (slots_of(a).clone(), slots_of(b).clone());
        // Released after the renewal listed it: its release ran first.
        let released = held.take(&a, 1).unwrap();
        let position =
            |slots: &[Slot], seq| slots.iter().position(|s| s.seq == seq).unwrap() as u64 + 1;
        let other = 3 - released.seq;
        assert_eq!(held.lost(&a, &of_a, &[position(&of_a, released.seq)]), 0);
        assert_eq!(held.lost(&a, &of_a, &[1, 2]), 1, "the one still held");
        assert_eq!(held.lost(&a, &of_a, &[position(&of_a, other)]), 1);
        assert_eq!(held.lost(&b, &of_b, &[1]), 1);
        // Positions past the list, or zero, name no slot.
        assert_eq!(held.lost(&b, &of_b, &[0, 2]), 0);
        held.take(&b, 1);
        assert_eq!(held.lost(&b, &of_b, &[1]), 0, "no slot of b is held");
    }
}
