//! A concurrency rule's reserve across a fleet (the harness and its model
//! are in `slots_fleet`): four copies on one Redis, one key, `n` = 8 slots
//! of which 2 are kept for each class above a request's (a critical
//! request may fill 8, a default one 6, a sheddable one 4), the class read
//! from `x-priority`. Clients (48 critical, 8 default, 12 sheddable) hold
//! slow requests (300 to 500 ms) open, each sending its next request to
//! the next copy, and retry after `Retry-After` when refused.
//!
//! Held exactly: no request admitted above its class's share; at most 4
//! sheddable requests run at once, at most 6 default and sheddable ones,
//! at most 8 in all; a critical request refused with 429, the others shed
//! with 503 `TEMPORARY_REDUCED_CAPACITY`; no slot left in Redis. And the
//! reserve does not cost critical requests: at most 1% of critical
//! refusals are made while fewer than `n` requests held a slot or were on
//! their way to one.
//!
//! `FLEET_RUNS=20 cargo test --release -p throttle-fleet-suite --test reserve_fleet -- --nocapture`
//! gives the figures over twenty runs; CI runs one.

mod slots_fleet;

use slots_fleet::{Setup, runs};

/// `n` = 8, of which 2 are kept for each class above a request's; enough
/// critical clients to keep the rule at `n`, so that critical refusals are
/// many.
static SETUP: Setup = Setup {
    rule: "backend",
    n: 8,
    reserve: 2,
    clients: [48, 8, 12],
    served_per_client: 2,
    hold_ms: 300,
    hold_spread_ms: 200,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_copies_keep_the_reserve_and_refuse_critical_requests_almost_never_below_n() {
    let t = runs(&SETUP).await;
    assert!(t.violations.is_empty(), "{:#?}", t.violations);
    assert!(
        t.refused.iter().all(|&r| r > 0),
        "the load never reached every class's limit: refused {:?}",
        t.refused
    );
    // The goal is 1%. One run's 150 critical refusals cannot resolve it
    // (one release outrun by an acquire is 0.7%): one run is held to 2%,
    // as `concurrency_fleet` holds its own, and five runs or more to the
    // goal itself. Measured: 0.04% over twenty release runs (1 of 2,769;
    // the first measure 0.36%), 0.23% over three debug runs, 0.5% over
    // four debug runs with the machine's two cores oversubscribed three
    // times (at most 1.3% in one of them).
    let bound = if t.refused_at_n >= 500 { 0.01 } else { 0.02 };
    assert!(
        t.false_share() <= bound,
        "{} of {} critical refusals made while fewer than 8 held a slot",
        t.refused_below_held,
        t.refused_at_n
    );
}
