//! Tower middleware of throttle: [`ThrottleLayer`], its service and response
//! future, the [`KeyExtractor`] and [`Responder`] traits, the extractors that
//! need only `http`, and the HTTP 429 responder.
//!
//! Most users add an integration crate instead (`throttle-axum`,
//! `throttle-tonic`), which re-exports all of this with the right responder.
//!
//! ```
//! use std::convert::Infallible;
//! use http::{Request, Response, StatusCode};
//! use throttle_tower::{Header, HttpResponder, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
//! use tower::{Layer, Service, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = Policy::new().rule(Rule::new("tenant", Quota::per_minute(1)), Header::new("x-api-key"));
//! let layer = ThrottleLayer::<HttpResponder>::new(policy, MemoryBackend::default())?;
//! let mut svc = layer.layer(service_fn(|_req: Request<String>| async {
//!     Ok::<_, Infallible>(Response::new(String::from("hello")))
//! }));
//!
//! let req = || Request::get("/").header("x-api-key", "k1").body(String::new()).unwrap();
//! let first = svc.ready().await?.call(req()).await?;
//! assert_eq!(first.status(), StatusCode::OK);
//! assert_eq!(first.headers()["x-ratelimit-remaining"], "0");
//! let second = svc.ready().await?.call(req()).await?;
//! assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(second.headers()["retry-after"], "60");
//! # Ok(())
//! # }
//! ```

mod body;
mod engine;
mod extract;
mod future;
pub mod headers;
mod ip;
#[cfg(feature = "jwt")]
mod jwt;
mod layer;
pub mod metrics;
mod policy;
mod responder;
mod service;

pub use body::ThrottleBody;
pub use extract::{
    Extension, Extracted, Global, Header, KeyExtractor, KeyExtractorExt, Or, UserAgentHash,
};
pub use future::ResponseFuture;
pub use ip::{ClientAddr, ForwardedHeader, IpPrefix, MAX_FORWARDED_ENTRIES, PeerSource};
#[cfg(feature = "jwt")]
pub use jwt::{Jwt, MAX_TOKEN_LEN};
pub use layer::{Reloaded, ThrottleLayer};
pub use policy::{CostFn, Limit, MissingKey, Policy, RefundFn};
pub use responder::{HttpResponder, Rejection, Responder};
pub use service::Throttle;
pub use throttle_core::{Algorithm, Allowed, Backend, ConfigError, Decision, Denied, FailurePolicy, Key, MemoryBackend, Quota, Refused, Rule, Tiers};
pub use throttle_core::rule_set::Carried;
pub use throttle_core::decision::ShadowDenials;
