//! The examples' logs: `tracing` to standard error at the level `RUST_LOG`
//! gives (`info` unless it says otherwise), so a refused connection, a
//! Redis outage, a breaker opening or a reload shows.

use tracing_subscriber::EnvFilter;

/// Installs the subscriber; call once, first thing in `main`.
pub(crate) fn init() {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
}
