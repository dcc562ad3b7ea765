//! Tower middleware of throttle: [`ThrottleLayer`], its service and response
//! future, the [`KeyExtractor`] and [`Responder`](crate::responder::Responder) traits, the extractors that
//! need only `http`, and the HTTP 429 responder.
//!
//! Most users add an integration crate instead (`throttle-fleet-axum`,
//! `throttle-fleet-tonic`), which re-exports all of this with the right responder.
//!
//! ```
//! use std::convert::Infallible;
//! use http::{Request, Response, StatusCode};
//! use throttle_fleet_tower::key::Header;
//! use throttle_fleet_tower::{HttpResponder, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
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

// docs.rs (`--cfg docsrs`, nightly) marks each feature-gated item with
// the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod body;
pub mod body_timeout;
mod engine;
mod extract;
mod future;
mod head;
pub mod headers;
mod http_responder;
mod ip;
#[cfg(feature = "jwt")]
mod jwt;
mod layer;
pub mod metrics;
mod policy;
pub mod responder;
pub mod server;
mod service;

pub use body::{ResponseBodies, ThrottleBody, Wrap};
pub use extract::{KeyExtractor, KeyExtractorExt};
pub use future::ResponseFuture;
pub use head::RequestHead;
pub use http_responder::HttpResponder;
pub use layer::{Reloaded, ThrottleLayer};
pub use policy::{ClassFn, CostFn, Limit, MissingKey, Policy};
pub use service::Throttle;
pub use throttle_fleet_core::rule_set::RefundFn;
pub use throttle_fleet_core::{
    ConfigError, InFlightLimit, Key, Quota, Rule, memory::MemoryBackend,
};

/// The core crate, for what the roots leave out: decisions
/// ([`core::decision::Decision`], [`core::decision`]), algorithms, tiers, failure
/// policies, clocks, and the backend trait for backend authors.
pub use throttle_fleet_core as core;

/// Key extractors: who a rule limits. The integration crates add their own
/// (the client IP, the route, gRPC methods and metadata).
pub mod key {
    pub use crate::extract::{
        AllOf, Extension, Extracted, Global, Header, KeyInputs, Or, UserAgentHash,
    };
    pub use crate::ip::{ClientAddr, ForwardedHeader, IpPrefix, PeerSource};
    #[cfg(feature = "jwt")]
    pub use crate::jwt::Jwt;
}

/// The bounds the layer enforces on what a request carries.
pub mod limits {
    pub use crate::ip::MAX_FORWARDED_ENTRIES;
    #[cfg(feature = "jwt")]
    pub use crate::jwt::MAX_TOKEN_LEN;
}

/// What an integration crate re-exports at its root, besides its layer and
/// extractors: one list for `throttle-fleet-axum` and `throttle-fleet-tonic`.
#[doc(hidden)]
pub mod integration {
    pub use crate::{
        ConfigError, CostFn, HttpResponder, InFlightLimit, Key, KeyExtractor, KeyExtractorExt,
        Limit, MemoryBackend, MissingKey, Policy, Quota, RefundFn, Reloaded, RequestHead,
        ResponseBodies, ResponseFuture, Rule, Throttle, ThrottleBody, Wrap,
    };
    pub use crate::{body_timeout, core, headers, key, limits, metrics, responder, server};

    /// The start of each integration crate's prelude: what a policy is
    /// written with (the policy, its rules and quotas, the memory
    /// backend, and what a key extractor of your own needs). Everything
    /// else is named by its module (`key::Header`,
    /// `core::decision::Decision`, `core::algorithm::Algorithm`, ...); the
    /// integration crates' preludes add their layer and their own
    /// extractors.
    pub mod prelude {
        pub use crate::{KeyExtractor, KeyExtractorExt, MissingKey, Policy};
        pub use throttle_fleet_core::{
            ConfigError, InFlightLimit, Key, Quota, Rule, memory::MemoryBackend,
        };
    }
}
