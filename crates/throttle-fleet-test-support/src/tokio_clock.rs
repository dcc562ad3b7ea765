//! A limiter clock that follows tokio's, so that a test on tokio's paused
//! time moves the limiter's time with its own.

use throttle_fleet_core::clock::Clock;
use tokio::time::Instant;

/// Unix microseconds that advance with tokio's clock, paused or not, from
/// the instant it was made.
#[derive(Debug, Clone)]
pub struct TokioClock {
    unix_us: u64,
    at: Instant,
}

impl TokioClock {
    /// Reads `unix_us` now.
    pub fn starting_at(unix_us: u64) -> Self {
        Self {
            unix_us,
            at: Instant::now(),
        }
    }

    /// Reads the wall clock's time now.
    pub fn from_wall() -> Self {
        let unix_us = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        Self::starting_at(unix_us)
    }
}

impl Clock for TokioClock {
    fn now_us(&self) -> u64 {
        self.unix_us + self.at.elapsed().as_micros() as u64
    }
}
