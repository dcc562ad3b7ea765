//! A small traffic simulator: drives any [`Meter`](throttle_fleet_core::algorithm::Meter) with a
//! synthetic timeline for one key and measures what got through. Used by
//! the property tests, to produce the figures quoted in the documentation,
//! and by the laboratory (`cargo run -p throttle-fleet-suite --example lab`), which draws what
//! [`simulate`] returns.
//!
//! - [`Pattern`]: the laboratory's traffic, sized from a quota: steady
//!   traffic at the quota's rate, the window-edge burst, a bot swarm, or
//!   [`Custom`] traffic (rate, duration, burst size, jitter, seed). The same
//!   seed gives the same timeline.
//! - [`simulate`]: runs a timeline against one [`Algorithm`](throttle_fleet_core::algorithm::Algorithm)
//!   through the memory backend on a [`ManualClock`](throttle_fleet_core::clock::ManualClock), and
//!   returns every decision (a [`Run`]) and its [`Summary`]: admitted,
//!   denied, the worst admitted count in any sliding window of the quota's
//!   period, the first denial.
//! - [`run`]: the same for a meter of your own, from a fresh state, without
//!   a backend.
//!
//! ```
//! use throttle_fleet_core::{Quota, algorithm::FixedWindow};
//! use throttle_fleet_test_support::sim;
//!
//! // 100 requests in the last 10 ms of a window, 100 in the first 10 ms of the next.
//! let fw = FixedWindow::new(Quota::per_minute(100)).unwrap();
//! let timeline = sim::edge_burst(60_000_000, 100, 10_000);
//! let run = sim::run(&fw, &timeline);
//! assert_eq!(run.admitted_cost(), 200);
//! assert_eq!(run.max_in_any_window(60_000_000), 200); // the fixed-window boundary burst
//! ```

mod patterns;
mod runner;
mod summary;

pub use patterns::{Custom, Pattern, edge_burst, steady};
pub use runner::{Run, Simulation, run, simulate};
pub use summary::Summary;

/// One request: when (microseconds since the epoch) and its cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// When the request arrives.
    pub at_us: u64,
    /// Its cost.
    pub cost: u64,
}

/// `quota`'s period in whole microseconds, the unit the simulator counts
/// in (a validated quota's period is far below `u64::MAX` microseconds).
pub(crate) fn period_us(quota: throttle_fleet_core::Quota) -> u64 {
    u64::try_from(quota.period().as_micros()).unwrap_or(u64::MAX)
}
