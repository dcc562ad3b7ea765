//! The three Redis modes, for the tests that run in each: a mode, and a
//! backend of that mode from a configuration.

use throttle_fleet_redis::{ApproximateOptions, LeaseOptions, RedisBackend, RedisConfig};

#[derive(Clone, Copy, Debug)]
pub(crate) enum Mode {
    Exact,
    Approximate,
    Leased,
}

/// Every mode.
pub(crate) const MODES: [Mode; 3] = [Mode::Exact, Mode::Approximate, Mode::Leased];

/// A backend of `mode` on `config`, with the mode's default options.
pub(crate) async fn backend_of(config: RedisConfig, mode: Mode) -> RedisBackend {
    match mode {
        Mode::Exact => RedisBackend::exact(config).await.unwrap().into(),
        Mode::Approximate => RedisBackend::approximate(config, ApproximateOptions::default())
            .await
            .unwrap()
            .into(),
        Mode::Leased => RedisBackend::leased(config, LeaseOptions::default())
            .await
            .unwrap()
            .into(),
    }
}
