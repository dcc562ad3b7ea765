//! A [`GatewayConfig`] as an axum layer: `throttle_fleet_config::build` with
//! axum's [`Axum`] integration (peer addresses from `ConnectInfo`, routes
//! from `MatchedPath`, denials as HTTP 429).

use throttle_fleet_config::{ConfigFileError, GatewayConfig, build::Integration};
use throttle_fleet_core::backend::Backend;
use throttle_fleet_tower::{HttpResponder, KeyExtractor, Policy};

use crate::{ConnectInfoPeer, Route, ThrottleLayer};

/// axum as a [`throttle_fleet_config::build::Integration`]: `ip` keys are [`ClientIp`](crate::ClientIp),
/// `route` keys are [`Route`] templates, denials are [`HttpResponder`]'s,
/// with the file's header style.
#[derive(Debug, Clone, Copy, Default)]
pub struct Axum;

impl Integration for Axum {
    type Peer = ConnectInfoPeer;
    type Responder = HttpResponder;
    type Bodies = crate::AxumBodies;

    fn peer(&self) -> ConnectInfoPeer {
        ConnectInfoPeer
    }

    fn route(&self, only: Option<&[String]>) -> Box<dyn KeyExtractor> {
        match only {
            Some(routes) => Box::new(Route::only(routes.iter().cloned())),
            None => Box::new(Route::template()),
        }
    }

    fn responder(&self, config: &GatewayConfig) -> HttpResponder {
        config.headers.responder()
    }
}

/// Builds the layer a configuration describes, on `backend`; `file` names
/// the configuration in errors.
///
/// ```
/// use throttle_fleet_axum::{MemoryBackend, from_config};
/// use throttle_fleet_config::GatewayConfig;
///
/// let config = GatewayConfig::parse("gateway.toml", r#"
///     [[rules]]
///     name = "ip"
///     key = "ip"
///     limit = 100
///     period_secs = 60
/// "#, None)?;
/// let layer = from_config::layer(&config, "gateway.toml", MemoryBackend::default())?;
/// assert_eq!(layer.rules().len(), 1);
/// # Ok::<(), throttle_fleet_config::ConfigFileError>(())
/// ```
pub fn layer(
    config: &GatewayConfig,
    file: &str,
    backend: impl Backend,
) -> Result<ThrottleLayer, ConfigFileError> {
    throttle_fleet_config::build::layer(config, file, backend, &Axum)
}

/// The policy a configuration describes (its rules, in file order).
pub fn policy(config: &GatewayConfig, file: &str) -> Result<Policy, ConfigFileError> {
    throttle_fleet_config::build::policy(config, file, &Axum)
}

/// The connections a configuration's `[server]` table allows, for
/// [`serve`](crate::serve): its caps and timeouts, with clients told apart
/// as `ip` keys tell them (the file's trusted proxies exempt from the
/// per-client cap). The error names the limit that cannot work.
///
/// ```
/// use throttle_fleet_axum::from_config;
/// use throttle_fleet_config::GatewayConfig;
///
/// let config = GatewayConfig::parse("gateway.toml", r#"
///     [server]
///     max_connections_per_client = 20
///     idle_timeout_secs = 30
///     write_timeout_secs = 20
///     body_timeout_secs = 30
///     [[rules]]
///     name = "ip"
///     key = "ip"
///     limit = 100
///     period_secs = 60
/// "#, None)?;
/// let connections = from_config::connections(&config).unwrap();
/// assert_eq!(connections.limits().max_connections_per_client, 20);
/// assert_eq!(connections.limits().idle_timeout.as_secs(), 30);
/// assert_eq!(connections.limits().write_timeout.as_secs(), 20);
/// assert_eq!(connections.limits().body_timeout.as_secs(), 30);
/// assert_eq!(connections.limits().body_min_bytes_per_sec, 500);
/// # Ok::<(), throttle_fleet_config::ConfigFileError>(())
/// ```
#[cfg(feature = "serve")]
pub fn connections(
    config: &GatewayConfig,
) -> Result<crate::serve::Connections, throttle_fleet_core::ConfigError> {
    crate::serve::Connections::new(
        config.server,
        throttle_fleet_config::build::client_addr(config, ConnectInfoPeer),
    )
}
