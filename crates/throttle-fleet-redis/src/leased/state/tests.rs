use super::*;

#[test]
fn demand_is_the_cost_requested_over_the_time_constant() {
    let mut st = LeaseState::default();
    // One request a second for a minute: about one per second.
    for i in 0..60u64 {
        st.note_demand(i * 1_000_000, 1);
    }
    let rate = st.demand_per_s(59_000_000);
    assert!((rate - 1.0).abs() < 0.1, "{rate}");
    // About a second per token at that rate, as of the last request.
    let per_token = st.spend_us(1);
    assert!((900_000..1_100_000).contains(&per_token), "{per_token}");
}

#[test]
fn demand_fades_when_the_key_stops_coming() {
    let mut st = LeaseState::default();
    st.note_demand(0, 10);
    let at_once = st.demand_per_s(0);
    // One time constant later, a factor e less.
    let later = st.demand_per_s(DEMAND_US);
    assert!((at_once / later - std::f64::consts::E).abs() < 1e-9);
    // A request seen out of order (an earlier instant) does not move
    // the estimate's time back.
    st.note_demand(DEMAND_US, 1);
    st.note_demand(DEMAND_US / 2, 1);
    assert_eq!(st.demand_at, DEMAND_US);
}

/// A key that asked one token a second here for a minute.
fn one_per_second(batch: u64) -> LeaseState {
    let mut st = LeaseState {
        batch,
        ..LeaseState::default()
    };
    for i in 0..60u64 {
        st.note_request(i * 1_000_000, 1);
    }
    st
}

#[test]
fn a_drained_key_leases_what_its_demand_spends_in_a_refill() {
    let st = one_per_second(50);
    // 30 s of refill at about one a second: about 30, not the batch.
    let lease = st.drained_lease(59_000_000, 30_000_000);
    assert!((28..=33).contains(&lease), "{lease}");
    // Never more than the batch, never nothing.
    assert_eq!(st.drained_lease(59_000_000, 600_000_000), 50);
    assert_eq!(LeaseState::default().drained_lease(0, 30_000_000), 1);
}

#[test]
fn a_drained_key_fetches_once_it_is_about_to_run_out() {
    let mut st = one_per_second(50);
    assert_eq!(st.fetch_below(59_000_000, 10), 10, "not drained: low water");
    st.drained = true;
    // A second of demand (just over one request, rounded up).
    assert_eq!(st.fetch_below(59_000_000, 10), 2);
    // A hot drained key: still never above the low-water mark.
    for _ in 0..1_000 {
        st.note_request(59_000_000, 1);
    }
    assert_eq!(st.fetch_below(59_000_000, 10), 10);
}

#[test]
fn the_backoff_grows_until_an_ask_covers_what_was_asked_for_here() {
    let mut st = one_per_second(50);
    // A background lease that finds the bucket drained: 2 s.
    assert_eq!(st.after_lease(true, 0, 3), 2_000_000);
    assert_eq!(st.since_lease, 0);
    // Five requests here since; an ask that brings 3: 4 s.
    for i in 0..5 {
        st.note_request(60_000_000 + i, 1);
    }
    assert_eq!(st.after_lease(true, 1, 3), 4_000_000);
    // One request since; an ask that brings it: halved.
    st.note_request(61_000_000, 1);
    assert_eq!(st.after_lease(true, 1, 1), 2_000_000);
    // A whole lease after the bucket was drained: the exponent halved
    // (8 s becomes 2 s), not reset.
    st.after_lease(true, 0, 0);
    st.after_lease(true, 0, 0);
    assert_eq!(st.backoff, 3);
    st.after_lease(false, 1, 9);
    assert_eq!((st.backoff, st.drained), (1, false));
    st.after_lease(false, 1, 9);
    assert_eq!(st.backoff, 0);
}

#[test]
fn a_drained_key_keeps_what_its_demand_spends_soon() {
    let mut st = one_per_second(50);
    st.tokens = 4;
    assert_eq!(st.keep_idle_us(1_000_000, 10_000_000), 1_000_000);
    st.drained = true;
    // Four tokens and two more requests at about one a second.
    let keep = st.keep_idle_us(1_000_000, 10_000_000);
    assert!((5_500_000..6_500_000).contains(&keep), "{keep}");
    // Never past the surplus time.
    st.tokens = 40;
    assert_eq!(st.keep_idle_us(1_000_000, 10_000_000), 10_000_000);
}

#[test]
fn no_demand_never_spends() {
    let st = LeaseState::default();
    assert_eq!(st.demand_per_s(1_000), 0.0);
    assert_eq!(st.spend_us(5), u64::MAX);
}
