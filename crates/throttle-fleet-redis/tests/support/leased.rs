//! What the leased-mode test binaries (`leased`, `leased_fairness`) share:
//! a leased backend on test time, a fleet of them whose give-back timers
//! are out of step, and the worst sliding window over a perfect bucket.

use std::sync::Arc;
use std::time::Duration;

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Rule, backend::Backend, clock::ManualClock, memory::MemoryBackend};
use throttle_fleet_redis::schedule::{Lateness, Scheduler, TestTime};
use throttle_fleet_redis::{LeaseOptions, LeasedBackend, RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;

/// The test time's start (Unix microseconds).
pub const T0: u64 = 1_700_000_000_000_000;

/// A leased backend on `server`, on `time`.
pub async fn leased(server: &RedisServer, time: &TestTime, options: LeaseOptions) -> LeasedBackend {
    on(server, time.scheduler(), options).await
}

async fn on(server: &RedisServer, scheduler: Scheduler, options: LeaseOptions) -> LeasedBackend {
    let config = RedisConfig::standalone(server.url())
        .scheduler(scheduler)
        .command_timeout(Duration::from_millis(500));
    RedisBackend::leased(config, options).await.unwrap()
}

/// `n` leased instances on `server` sharing `rule`, each with its limiter;
/// instance `i`'s timers (its give-backs) run `i x stagger` late, so that
/// they are not in step.
pub async fn leased_fleet(
    server: &RedisServer,
    time: &TestTime,
    options: &LeaseOptions,
    rule: &Rule,
    n: usize,
    stagger: Duration,
) -> Vec<(LeasedBackend, Arc<dyn Limiter>)> {
    let mut fleet = Vec::with_capacity(n);
    for i in 0..n {
        let lateness = Lateness {
            timer: stagger * i as u32,
            signal: Duration::ZERO,
        };
        let backend = on(server, time.instance(0, lateness), options.clone()).await;
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
