//! What the leased-mode test binaries (`leased`, `leased_fairness`) share:
//! a leased backend on a test clock, the instances' give-back timers, and
//! the worst sliding window over a perfect bucket.

use std::sync::Arc;
use std::time::Duration;

use crate::RedisServer;
use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Backend, ManualClock, MemoryBackend, Rule};
use throttle_fleet_redis::{LeaseOptions, LeasedBackend, RedisBackend, RedisConfig};

/// The test clock's start (Unix microseconds).
pub const T0: u64 = 1_700_000_000_000_000;

/// A leased backend on `server`, reading time from `clock`.
pub async fn leased(
    server: &RedisServer,
    clock: &ManualClock,
    options: LeaseOptions,
) -> LeasedBackend {
    let config = RedisConfig::standalone(server.url())
        .clock_for_tests(clock.clone())
        .command_timeout(Duration::from_millis(500));
    RedisBackend::leased(config, options).await.unwrap()
}

/// `n` leased instances on `server` sharing `rule`, each with its limiter.
pub async fn leased_fleet(
    server: &RedisServer,
    clock: &ManualClock,
    options: &LeaseOptions,
    rule: &Rule,
    n: usize,
) -> Vec<(LeasedBackend, Arc<dyn Limiter>)> {
    let mut fleet = Vec::with_capacity(n);
    for _ in 0..n {
        let backend = leased(server, clock, options.clone()).await;
        let limiter = backend.limiter(rule).unwrap();
        fleet.push((backend, limiter));
    }
    fleet
}

/// The perfect limiter of `rule` on `clock`: one memory bucket for the
/// whole fleet, what the leased instances are compared with.
pub fn perfect(clock: &ManualClock, rule: &Rule) -> Arc<dyn Limiter> {
    MemoryBackend::with_clock(clock.clone())
        .limiter(rule)
        .unwrap()
}

/// Plays the one-second give-back timers of `fleet` due by `t` (from
/// `T0`), in time order; `ticks[i]` is instance `i`'s next one.
pub async fn give_backs_until<L>(
    clock: &ManualClock,
    fleet: &[(LeasedBackend, L)],
    ticks: &mut [u64],
    t: u64,
) {
    loop {
        let (j, &tick) = ticks.iter().enumerate().min_by_key(|(_, t)| **t).unwrap();
        if tick > t {
            return;
        }
        clock.set(T0 + tick);
        fleet[j].0.flush().await;
        ticks[j] += 1_000_000;
    }
}

/// Admitted in the worst window of each width, over what a perfect bucket
/// allows there (`burst + rate x width`).
pub fn worst_excess(times: &[u64], burst: u64, limit: u64, period: u64) -> i64 {
    let mut worst = i64::MIN;
    for width in [0, period / 100, period / 10, period, 3 * period] {
        let allowed = (burst + width * limit / period) as i64;
        let mut lo = 0;
        for hi in 0..times.len() {
            while times[hi] - times[lo] > width {
                lo += 1;
            }
            worst = worst.max((hi - lo + 1) as i64 - allowed);
        }
    }
    worst
}
