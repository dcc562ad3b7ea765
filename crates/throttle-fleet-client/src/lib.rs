//! The client side of throttle: a Tower layer for HTTP and gRPC clients
//! (hyper-util's `Client`, tonic's `Channel`, any
//! `Service<http::Request<_>>`) that waits when a server says so and
//! retries within a budget.
//!
//! From every answer it reads `Retry-After` (seconds or an HTTP-date), the
//! IETF `RateLimit` and `RateLimit-Policy` fields, `X-RateLimit-Remaining`
//! and `-Reset`, gRPC `RetryInfo` and `grpc-retry-pushback-ms`, with the
//! names throttle's servers write them under
//! ([`throttle_fleet_core::fields::names`]). Per partition (the server's
//! scheme and authority, or what [`ClientLayer::partition_by`] names) it
//! keeps when the next request may go and how many may go before an
//! answer says more:
//! - a call to a partition told to wait waits (up to its deadline), or
//!   fails at once with [`Throttled`], which says until when;
//! - `r=0` (or `X-RateLimit-Remaining: 0`) holds the partition for `t`
//!   (or until the reset) rather than spending a request on a `429`;
//! - a limiter's refusal (`429`, `503` with `Retry-After`, gRPC
//!   `RESOURCE_EXHAUSTED` or `UNAVAILABLE` with a retry field) is retried
//!   whatever the method; other failures only for idempotent methods and
//!   listed gRPC codes; never after pushback -1;
//! - the wait is the server's when it gave one, full-jitter backoff
//!   otherwise, within a [`Budget`] of retries against requests and the
//!   call's [`Deadline`];
//! - a body is sent again only if it was kept ([`ReplayBody`]).
//!
//! The guide's chapter "Calling rate-limited APIs" (in the `throttle-fleet`
//! crate) has hyper-util and tonic examples, the rules for contradictory
//! fields and the storm benchmark's figures.
//!
//! ```
//! use std::time::Duration;
//! use throttle_fleet_client::ClientLayer;
//! use tower::{Service, ServiceBuilder, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! // Any service of `http::Request<ReplayBody<B>>` (a real client here
//! // would be hyper-util's): this one answers 200.
//! let inner = tower::service_fn(|_req: http::Request<_>| async {
//!     Ok::<_, std::convert::Infallible>(http::Response::new(()))
//! });
//! let mut client = ServiceBuilder::new()
//!     .layer(ClientLayer::new().deadline(Duration::from_secs(5)))
//!     .service(inner);
//! let request = http::Request::get("http://api.example/items")
//!     .body(http_body_util::Empty::<bytes::Bytes>::new())?;
//! let response = client.ready().await?.call(request).await?;
//! assert_eq!(response.status(), 200);
//! # Ok(())
//! # }
//! ```

mod body;
mod budget;
mod error;
mod grpc;
mod layer;
pub mod metrics;
mod partitions;
mod retry;
mod service;
mod told;

pub use body::ReplayBody;
pub use budget::Budget;
pub use error::{ConfigError, Error, Throttled};
pub use layer::{ClientLayer, Deadline};
pub use partitions::Partition;
pub use service::{ClientService, ResponseFuture};
