//! Distributed rate limiting for [tonic]: one layer, per-peer, per-method
//! and per-key limits, and denials that gRPC clients understand —
//! `RESOURCE_EXHAUSTED` with `google.rpc.RetryInfo` and
//! `google.rpc.QuotaFailure`, never an HTTP 429 (which gRPC clients turn
//! into `UNAVAILABLE` and lose every detail of).
//!
//! ```no_run
//! use throttle_fleet_tonic::prelude::*;
//! use tonic::service::Routes;
//! use tonic::transport::Server;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = Policy::new()
//!     .rule(Rule::new("ip", Quota::per_minute(100)).sliding_window_counter(), PeerIp::default())
//!     .rule(Rule::new("tenant", Quota::per_minute(1_000)).token_bucket(), Metadata::new("x-api-key"))
//!     .rule(Rule::new("hello", Quota::per_minute(20)).fixed_window(), GrpcMethod::only(["/helloworld.Greeter/SayHello"]));
//!
//! Server::builder()
//!     .layer(ThrottleLayer::new(policy, MemoryBackend::default())?)
//!     .add_routes(Routes::default()) // or .add_service(GreeterServer::new(MyGreeter))
//!     .serve("127.0.0.1:50051".parse()?)
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! The same layer on an axum router that serves tonic services next to HTTP
//! routes (`Routes::into_axum_router`) answers each request in its own
//! protocol: HTTP requests get `429 Too Many Requests` with a JSON body,
//! gRPC calls get status 8 ([`GrpcResponder`] tells them apart by
//! `content-type`). Serve such a router with
//! `into_make_service_with_connect_info::<SocketAddr>()` so that [`PeerIp`]
//! finds the peer.
//!
//! A denied call, as the client sees it:
//!
//! ```
//! use std::convert::Infallible;
//! use http::{Request, Response};
//! use throttle_fleet_tonic::{GrpcMethod, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
//! use tower::{Layer, Service, ServiceExt, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = Policy::new().rule(Rule::new("hello", Quota::per_minute(1)), GrpcMethod::full());
//! let mut svc = ThrottleLayer::new(policy, MemoryBackend::default())?
//!     .layer(service_fn(|_req: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) }));
//!
//! let call = || Request::post("/helloworld.Greeter/SayHello")
//!     .header("content-type", "application/grpc")
//!     .body(())
//!     .unwrap();
//! let first = svc.ready().await?.call(call()).await?;
//! assert_eq!(first.headers()["x-ratelimit-remaining"], "0");
//! let second = svc.ready().await?.call(call()).await?;
//! assert_eq!(second.status(), 200); // gRPC errors travel in a 200
//! assert_eq!(second.headers()["grpc-status"], "8"); // RESOURCE_EXHAUSTED
//! assert_eq!(second.headers()["retry-after"], "60");
//! assert!(second.headers().contains_key("grpc-status-details-bin"));
//! # Ok(())
//! # }
//! ```
//!
//! Rate limits run before the service, so they see only what the request
//! carries and what earlier layers put into it. An interceptor attached to a
//! generated server (`GreeterServer::with_interceptor`) runs *after* this
//! layer; to limit by an identity that an auth interceptor verifies, add the
//! interceptor as a layer in front of this one
//! (`Server::builder().layer(tonic::service::InterceptorLayer::new(auth)).layer(throttle)`)
//! and key the rule with [`Extension`](crate::key::Extension).
//!
//! Streaming calls are limited once, when they start: a denied stream ends
//! before its first message, an allowed one is never cut off midway.
//!
//! A call holds what it was given (a concurrency rule's slots) until its
//! answer ends, and tonic waits for a unary call's message before calling
//! its handler: a client that sends headers and no message would hold them
//! for as long as its connection lives. [`BodyTimeoutLayer`] bounds that
//! wait (60 s, then a minimum rate); put it on every server that has a
//! concurrency rule.
//!
//! See [`GrpcResponder`] for the exact answers (status mapping, metadata,
//! gRPC-web). Everything in `throttle-fleet-tower` and `throttle-fleet-core` that a user
//! needs is re-exported here.
//!
//! [tonic]: https://docs.rs/tonic

// docs.rs (`--cfg docsrs`, nightly) marks each feature-gated item with
// the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod arena;
mod call_timeout;
mod denial;
mod extract;
#[cfg(feature = "config")]
pub mod from_config;
mod grpc_responder;

pub use call_timeout::{BodyTimeoutLayer, BodyTimeoutService, CallBody};
pub use extract::{GrpcMethod, GrpcService, Metadata, PeerIp, TonicPeer};
pub use grpc_responder::GrpcResponder;
#[cfg(feature = "redis")]
pub use throttle_fleet_redis as redis;
pub use throttle_fleet_tower::integration::*;

/// The gRPC side of an answer: the error domain of `ErrorInfo`, the
/// pushback trailer, the protocol a request speaks, and the HTTP-to-gRPC
/// status map.
pub mod grpc {
    pub use crate::grpc_responder::{ERROR_DOMAIN, GRPC_RETRY_PUSHBACK_MS, GrpcProtocol};
}

/// What a policy is written with, for `use throttle_fleet_tonic::prelude::*`:
/// the policy, its rules and quotas, the memory backend, what a key extractor
/// of your own needs, the layer and tonic's extractors.
pub mod prelude {
    pub use crate::{GrpcMethod, GrpcService, Metadata, PeerIp, ThrottleLayer};
    pub use throttle_fleet_tower::integration::prelude::*;
}

/// The throttle layer for tonic, answering gRPC calls with gRPC statuses and
/// plain HTTP requests with HTTP 429 ([`GrpcResponder`]). Use
/// [`ThrottleLayer::with_responder`] to override key kinds or for a custom
/// answer.
pub type ThrottleLayer = throttle_fleet_tower::ThrottleLayer<GrpcResponder>;
