//! Distributed rate limiting for [axum]: one layer, per-client limits, and
//! HTTP 429 answers that tell clients when to retry.
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use axum::{Router, routing::get};
//! use throttle_axum::{ClientIp, Header, MemoryBackend, Policy, Quota, Route, Rule, ThrottleLayer};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = Policy::new()
//!     .rule(Rule::new("ip", Quota::per_minute(100)).sliding_window_counter(), ClientIp::default())
//!     .rule(Rule::new("tenant", Quota::per_minute(1_000)).token_bucket(), Header::new("x-api-key"))
//!     .rule(Rule::new("search", Quota::per_minute(20)).fixed_window(), Route::only(["/search"]));
//!
//! let app = Router::new()
//!     .route("/search", get(|| async { "results" }))
//!     .layer(ThrottleLayer::new(policy, MemoryBackend::default())?);
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```
//!
//! Denials are `429 Too Many Requests` with `Retry-After` (whole seconds,
//! rounded up), `X-RateLimit-Limit`, `X-RateLimit-Remaining`,
//! `X-RateLimit-Reset` (Unix epoch seconds) and a JSON body naming the
//! dimension; allowed responses carry the same `X-RateLimit-*` headers (see
//! [`HttpResponder`]). Everything in `throttle-tower` and `throttle-core`
//! that a user needs is re-exported here.
//!
//! [axum]: https://docs.rs/axum

mod extract;
#[cfg(feature = "config")]
pub mod from_config;

pub use extract::{ClientIp, ConnectInfoPeer, Route};
// The same list in throttle-axum and throttle-tonic: one crate per
// integration is all a user needs (plus `redis` for the Redis backends).
pub use throttle_core::{Algorithm, Allowed, Backend, Clock, ConfigError, Decision, Denied, FailurePolicy, Key, ManualClock, MemoryBackend, Quota, Refused, Rule, SystemClock, Tiers};
pub use throttle_core::rule_set::Carried;
pub use throttle_core::decision::ShadowDenials;
#[cfg(feature = "redis")]
pub use throttle_redis as redis;
pub use throttle_tower::{
    ClientAddr, Extension, Extracted, ForwardedHeader, Global, Header, HttpResponder, IpPrefix,
    KeyExtractor, KeyExtractorExt, Limit, MAX_FORWARDED_ENTRIES, MissingKey, PeerSource, Policy,
    Rejection, Reloaded, Responder, Throttle, ThrottleBody, UserAgentHash,
};
#[cfg(feature = "jwt")]
pub use throttle_tower::{Jwt, MAX_TOKEN_LEN};
pub use throttle_tower::{headers, metrics};

/// The throttle layer for axum, answering rejections with HTTP 429 and JSON
/// ([`HttpResponder`]). Use [`ThrottleLayer::with_responder`] for a custom
/// answer.
pub type ThrottleLayer = throttle_tower::ThrottleLayer<HttpResponder>;
