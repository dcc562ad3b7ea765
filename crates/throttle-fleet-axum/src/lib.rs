//! Distributed rate limiting for [axum]: one layer, per-client limits, and
//! HTTP 429 answers that tell clients when to retry.
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use throttle_fleet_axum::prelude::*;
//! use throttle_fleet_axum::serve::serve;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = ClientIp::default();
//! let policy = Policy::new()
//!     .rule(Rule::new("ip", Quota::per_minute(100)).sliding_window_counter(), client.clone())
//!     .rule(Rule::new("tenant", Quota::per_minute(1_000)).token_bucket(), Header::new("x-api-key"))
//!     .rule(Rule::new("search", Quota::per_minute(20)).fixed_window(), Route::only(["/search"]));
//!
//! let app = Router::new()
//!     .route("/search", get(|| async { "results" }))
//!     .layer(ThrottleLayer::new(policy, MemoryBackend::default())?);
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // axum::serve with connection caps and header and idle timeouts.
//! serve(listener, app).client_ip(client).await?;
//! # Ok(())
//! # }
//! ```
//!
//! Serve with [`serve::serve`] rather than `axum::serve`: the limiter only
//! sees complete requests, and `serve` bounds the connections that never
//! make one (slowloris clients, idle hoards; see [`serve`]).
//!
//! Denials are `429 Too Many Requests` with `Retry-After` (whole seconds,
//! rounded up), `X-RateLimit-Limit`, `X-RateLimit-Remaining`,
//! `X-RateLimit-Reset` (Unix epoch seconds) and a JSON body naming the
//! dimension; allowed responses carry the same `X-RateLimit-*` headers (see
//! [`HttpResponder`]). Everything in `throttle-fleet-tower` and
//! `throttle-fleet-core` that a user needs is re-exported here: the names a policy
//! is written with in [`prelude`], the rest in modules ([`key`], [`core`],
//! [`responder`], [`limits`], [`headers`], [`metrics`]).
//!
//! [axum]: https://docs.rs/axum

// docs.rs (`--cfg docsrs`, nightly) marks each feature-gated item with
// the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod extract;
#[cfg(feature = "config")]
pub mod from_config;
#[cfg(feature = "serve")]
pub mod serve;

pub use extract::{ClientIp, ConnectInfoPeer, Route};
#[cfg(feature = "redis")]
pub use throttle_fleet_redis as redis;
pub use throttle_fleet_tower::integration::*;

/// What a policy is written with, for `use throttle_fleet_axum::prelude::*`:
/// the quick start's names (`Policy`, `Rule`, `Quota`, `MemoryBackend`, `Key`,
/// `KeyExtractor`, `KeyExtractorExt`, `MissingKey`, `ConfigError`, the layer,
/// [`ClientIp`], [`Route`] and [`key::Header`]). The rest by module path:
/// [`key`] for the other extractors, [`core`] for decisions, algorithms,
/// tiers and failure policies.
pub mod prelude {
    pub use crate::key::Header;
    pub use crate::{ClientIp, Route, ThrottleLayer};
    pub use throttle_fleet_tower::integration::prelude::*;
}

/// The throttle layer for axum, answering rejections with HTTP 429 and JSON
/// ([`HttpResponder`]) in axum's own body ([`AxumBodies`]). Use
/// [`ThrottleLayer::with_responder`] for another `HttpResponder`, and
/// `throttle_fleet_tower::ThrottleLayer<YourResponder, AxumBodies>` for an
/// answer of your own.
pub type ThrottleLayer = throttle_fleet_tower::ThrottleLayer<HttpResponder, AxumBodies>;

/// How [`ThrottleLayer`]'s responses carry their bodies: in axum's own
/// [`Body`](axum::body::Body), so that a router does not box the layer's
/// body again. Only a response that holds something until its body ends
/// (a concurrency rule's slot) wraps the body, in a [`ThrottleBody`]; the
/// others pass the handler's body through as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct AxumBodies;

impl<B> throttle_fleet_tower::ResponseBodies<B> for AxumBodies
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Body = axum::body::Body;

    #[inline]
    fn inner(body: B) -> axum::body::Body {
        // No allocation when `body` is already axum's (a router's handler).
        axum::body::Body::new(body)
    }

    fn holding(body: B, held: Box<throttle_fleet_tower::core::rule_set::Held>) -> axum::body::Body {
        axum::body::Body::new(ThrottleBody::holding(body, held))
    }

    fn full(bytes: bytes::Bytes) -> axum::body::Body {
        axum::body::Body::from(bytes)
    }
}
