use super::*;

/// A report on a bucket of 10 a second.
fn report(envoy: &str, demand: f64, now_ms: u64) -> Report<'_> {
    Report {
        envoy,
        demand,
        capacity: 10.0,
        now_ms,
        expires_ms: now_ms + 15_000,
    }
}

fn steps(h: &mut HashMap<String, Holding>, r: Report<'_>) -> u32 {
    allocate(h, r)
}

#[test]
fn shares_follow_demand_and_never_sum_past_one() {
    let mut h = HashMap::new();
    // Alone: the whole quota.
    assert_eq!(steps(&mut h, report("a", 10.0, 0)), STEPS);
    // A newcomer gets what is spare: nothing until `a` shrinks.
    assert_eq!(steps(&mut h, report("b", 30.0, 1)), 0);
    // `a` reports again: a quarter of the demand (smoothed: 10).
    assert_eq!(steps(&mut h, report("a", 10.0, 5_000)), STEPS / 4);
    // `b` grows into what `a` let go.
    assert_eq!(steps(&mut h, report("b", 30.0, 5_001)), STEPS * 3 / 4);
    let sum: u32 = h.values().map(|h| h.steps).sum();
    assert!(sum <= STEPS);
    // A small move keeps the weight (Envoy keeps its bucket).
    assert_eq!(steps(&mut h, report("a", 11.0, 10_000)), STEPS / 4);
}

#[test]
fn a_gone_envoys_share_is_held_until_its_assignment_expires() {
    let mut h = HashMap::new();
    steps(&mut h, report("a", 10.0, 0));
    // `a` stops reporting; `b` cannot take its share before 15 s.
    assert_eq!(steps(&mut h, report("b", 10.0, 14_999)), 0);
    assert_eq!(steps(&mut h, report("b", 10.0, 15_000)), STEPS);
}

#[test]
fn an_idle_envoy_keeps_one_step() {
    let mut h = HashMap::new();
    steps(&mut h, report("a", 0.0, 0));
    steps(&mut h, report("a", 0.0, 1));
    steps(&mut h, report("b", 100.0, 2));
    // `a` idle: it shrinks to one step; `b` takes the rest.
    assert_eq!(steps(&mut h, report("a", 0.0, 5_000)), 1);
    assert_eq!(steps(&mut h, report("b", 100.0, 5_001)), STEPS - 1);
}

#[test]
fn under_the_quota_each_gets_its_demand_and_a_part_of_the_rest() {
    let mut h = HashMap::new();
    steps(&mut h, report("a", 2.0, 0));
    steps(&mut h, report("b", 2.0, 1));
    // 4 of 10 a second used: each 2 + 3 of the 6 left = half.
    assert_eq!(steps(&mut h, report("a", 2.0, 5_000)), STEPS / 2);
    assert_eq!(steps(&mut h, report("b", 2.0, 5_001)), STEPS / 2);
    // `a`'s demand moves up: it gets no more than `b` leaves it, until
    // `b` is asked again.
    assert_eq!(steps(&mut h, report("a", 8.0, 10_000)), STEPS / 2);
    assert!(steps(&mut h, report("b", 2.0, 10_001)) < STEPS / 2);
    assert!(steps(&mut h, report("a", 8.0, 10_002)) > STEPS / 2);
}

#[test]
fn an_envoy_with_nothing_gets_a_small_share_once_one_is_free() {
    let mut h = HashMap::new();
    steps(&mut h, report("a", 20.0, 0));
    // `b` arrives with a small demand: nothing is free yet.
    assert_eq!(steps(&mut h, report("b", 0.5, 1)), 0);
    // `a` lets go of a little; `b`'s target (1 step) is within the
    // hysteresis of its 0, which must not keep it at nothing.
    steps(&mut h, report("a", 20.0, 5_000));
    assert_eq!(steps(&mut h, report("b", 0.5, 5_001)), 1);
}

#[test]
fn the_memory_store_forgets_a_bucket_once_every_share_of_it_expired() {
    let shares = MemoryShares::default();
    for i in 0..3_000 {
        shares.report(&format!("b{i}"), report("a", 1.0, 0));
    }
    // `b0` is reported again before it expires: it stays, and so does
    // its share.
    shares.report("b0", report("a", 1.0, 10_000));
    assert_eq!(held(&shares), 3_000);
    // Past the others' expiry, reports on any bucket drop them (one
    // shard in turn beside their own).
    for _ in 0..SHARDS {
        assert_eq!(shares.report("b1", report("b", 1.0, 15_000)), STEPS);
    }
    assert_eq!(held(&shares), 2);
    assert_eq!(shares.report("b0", report("b", 1.0, 15_001)), 0);
    // A released share is free at once.
    shares.release("b0", "a");
    assert_eq!(shares.report("b0", report("b", 1.0, 15_002)), STEPS);
}

/// Buckets held.
fn held(shares: &MemoryShares) -> usize {
    shares.shards.iter().map(|s| s.lock().buckets.len()).sum()
}
