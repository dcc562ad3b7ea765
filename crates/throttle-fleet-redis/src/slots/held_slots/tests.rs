use super::*;

#[test]
fn a_release_takes_one_slot_of_its_key_and_cost_and_only_once() {
    let (a, b) = (Key::new("a"), Key::new("b"));
    let mut held = HeldSlots::default();
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
    let mut held = HeldSlots::default();
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
