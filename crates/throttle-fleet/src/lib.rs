//! Distributed rate limiting for Rust services, as Tower middleware: one
//! crate to add, features for the rest.
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use throttle_fleet::axum::prelude::*;
//! use throttle_fleet::axum::serve::{ServeLimits, serve};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let client = ClientIp::default();
//!     let policy = Policy::new()
//!         .rule(Rule::new("ip", Quota::per_minute(100)).sliding_window_counter(), client.clone())
//!         .rule(Rule::new("tenant", Quota::per_minute(1_000)).token_bucket(), Header::new("x-api-key"))
//!         .rule(Rule::new("search", Quota::per_minute(20)).fixed_window(), Route::only(["/search"]));
//!
//!     let app = Router::new()
//!         .route("/search", get(|| async { "results" }))
//!         .layer(ThrottleLayer::new(policy, MemoryBackend::default())?);
//!
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//!     // Not axum::serve: connection limits the rate limit cannot give.
//!     serve(listener, app)
//!         .limits(ServeLimits::default())
//!         .client_ip(client)
//!         .await?;
//!     Ok(())
//! }
//! ```
//!
//! A request must pass every rule of the policy; the first rule that
//! denies is named in the `429` answer, and what the other rules took is
//! given back. The [`guide`] explains the rest, a chapter per concern.
//!
//! # Features
//!
//! Each feature brings one member crate, re-exported under a short name.
//! The member crates are published too, for those who want one piece.
//!
//! | feature | module | crate | what it holds |
//! |---|---|---|---|
//! | `axum` (default) | [`axum`](mod@axum) | `throttle-fleet-axum` | the axum layer, `serve` (axum's server with connection limits), `ClientIp` and `Route` keys |
//! | `tonic` | [`tonic`](mod@tonic) | `throttle-fleet-tonic` | the tonic layer, gRPC `RESOURCE_EXHAUSTED` answers, peer, method and metadata keys |
//! | `redis` | [`redis`](mod@redis) | `throttle-fleet-redis` | the Redis backends: exact, approximate and leased, standalone or Cluster |
//! | `redis-tls` | in [`redis`](mod@redis) | `throttle-fleet-redis` (`tls`) | TLS to Redis: `rediss://`, a CA file, client certificates, on rustls with ring (brings `redis`; with `config`, `[backend]`'s TLS files) |
//! | `config` | [`config`](mod@config) | `throttle-fleet-config` | the configuration file, validated whole, and its reload; `from_config` on the layers |
//! | `envoy` | [`envoy`](mod@envoy) | `throttle-fleet-envoy` | Envoy's rate limit services, RLS v3 and RLQS |
//! | `client` | [`client`](mod@client) | `throttle-fleet-client` | the client side: a Tower layer for HTTP and gRPC clients that waits when a server says so (`Retry-After`, `RateLimit`, gRPC pushback) and retries within a budget |
//! | `tls` | [`tls`](mod@tls) | `throttle-fleet-tls` | TLS ClientHello fingerprints (JA4) and the acceptor that reads them |
//! | `jwt` | in [`axum::key`], [`tonic::key`] | `throttle-fleet-tower` | the `Jwt` key extractor: a claim of a verified bearer token (`config` brings it too) |
//! | always | [`core`](mod@core), [`tower`](mod@tower) | `throttle-fleet-core`, `throttle-fleet-tower` | algorithms, rules, keys, decisions, the memory backend; the Tower layer every integration builds on |
//!
//! The default features build what an axum service needs and nothing of
//! Redis, tonic or TLS.

// docs.rs (`--cfg docsrs`, nightly) marks each feature-gated item with
// the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(all(
    feature = "axum",
    feature = "tonic",
    feature = "redis",
    feature = "config",
    feature = "envoy",
    feature = "tls",
    feature = "client"
))]
// (docs.rs marks it with the features it needs, as every gated item.)
pub mod guide;

#[cfg(feature = "axum")]
#[doc(inline)]
pub use throttle_fleet_axum as axum;
#[cfg(feature = "client")]
#[doc(inline)]
pub use throttle_fleet_client as client;
#[cfg(feature = "config")]
#[doc(inline)]
pub use throttle_fleet_config as config;
#[doc(inline)]
pub use throttle_fleet_core as core;
#[cfg(feature = "envoy")]
#[doc(inline)]
pub use throttle_fleet_envoy as envoy;
#[cfg(feature = "redis")]
#[doc(inline)]
pub use throttle_fleet_redis as redis;
#[cfg(feature = "tls")]
#[doc(inline)]
pub use throttle_fleet_tls as tls;
#[cfg(feature = "tonic")]
#[doc(inline)]
pub use throttle_fleet_tonic as tonic;
#[doc(inline)]
pub use throttle_fleet_tower as tower;
