//! A [`GatewayConfig`] as a tonic layer: `throttle_fleet_config::build` with
//! tonic's [`Tonic`] integration (peer addresses from the connection,
//! routes as gRPC methods, denials as `RESOURCE_EXHAUSTED`).

use throttle_fleet_config::{ConfigFileError, GatewayConfig, build::Integration};
use throttle_fleet_core::backend::Backend;
use throttle_fleet_tower::{KeyExtractor, Policy};

use crate::{GrpcMethod, GrpcResponder, ThrottleLayer, TonicPeer};

/// tonic as a [`throttle_fleet_config::build::Integration`]: `ip` keys are
/// [`PeerIp`](crate::PeerIp), a `route` is the full gRPC method
/// (`routes = ["/helloworld.Greeter/SayHello"]`, through [`GrpcMethod`]),
/// denials are [`GrpcResponder`]'s; plain HTTP requests get the file's
/// header style.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tonic;

impl Integration for Tonic {
    type Peer = TonicPeer;
    type Responder = GrpcResponder;
    type Bodies = throttle_fleet_tower::Wrap;

    fn peer(&self) -> TonicPeer {
        TonicPeer
    }

    fn route(&self, only: Option<&[String]>) -> Box<dyn KeyExtractor> {
        match only {
            Some(methods) => Box::new(GrpcMethod::only(methods.iter().cloned())),
            None => Box::new(GrpcMethod::full()),
        }
    }

    fn responder(&self, config: &GatewayConfig) -> GrpcResponder {
        GrpcResponder::new().http(config.headers.responder())
    }
}

/// Builds the layer a configuration describes, on `backend`; `file` names
/// the configuration in errors.
///
/// ```
/// use throttle_fleet_tonic::{MemoryBackend, from_config};
/// use throttle_fleet_config::GatewayConfig;
///
/// let config = GatewayConfig::parse("greeter.toml", r#"
///     [[rules]]
///     name = "hello"
///     key = "route"
///     routes = ["/helloworld.Greeter/SayHello"]
///     limit = 100
///     period_secs = 60
/// "#, None)?;
/// let layer = from_config::layer(&config, "greeter.toml", MemoryBackend::default())?;
/// assert_eq!(layer.rules().len(), 1);
/// # Ok::<(), throttle_fleet_config::ConfigFileError>(())
/// ```
pub fn layer(
    config: &GatewayConfig,
    file: &str,
    backend: impl Backend,
) -> Result<ThrottleLayer, ConfigFileError> {
    throttle_fleet_config::build::layer(config, file, backend, &Tonic)
}

/// The policy a configuration describes (its rules, in file order).
pub fn policy(config: &GatewayConfig, file: &str) -> Result<Policy, ConfigFileError> {
    throttle_fleet_config::build::policy(config, file, &Tonic)
}
