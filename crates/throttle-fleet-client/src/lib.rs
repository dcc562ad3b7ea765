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
//!   fails at once with [`Throttled`], which says until when; a call
//!   whose deadline is closer than the partition's answers take is not
//!   sent either ([`Error::TooLate`]): the server would count a request
//!   nobody waits for;
//! - `r=0` (or `X-RateLimit-Remaining: 0`) holds the partition for `t`
//!   (or until the reset) rather than spending a request on a `429`; a
//!   partition whose answers show it refills as time passes (a token
//!   bucket: its reset moves later as it empties) is held for one
//!   request's share of that time instead, the longest one request's
//!   refill can take, so a reset rounded up to the second costs nothing;
//! - a limiter's refusal (`429`, `503` with `Retry-After`, gRPC
//!   `RESOURCE_EXHAUSTED` or `UNAVAILABLE` with a retry field) is retried
//!   whatever the method; other failures only for idempotent methods and
//!   listed gRPC codes; never after pushback -1;
//! - the wait is the server's when it gave one, full-jitter backoff
//!   otherwise, within a [`Budget`] of retries against requests and the
//!   call's [`Deadline`];
//! - a body is sent again only if it was kept ([`ReplayBody`]).
//!
//! # Which field wins
//!
//! 1. On a refusal, the retry fields: `Retry-After` (delta seconds, or an
//!    HTTP-date), gRPC `RetryInfo` and `grpc-retry-pushback-ms`. Several
//!    of them, or one named twice: the longest wait.
//! 2. Otherwise, and on any answer: the IETF `RateLimit` items at `r=0`,
//!    the longest `t` (an item without `t`: the `w` of the policy of that
//!    name in `RateLimit-Policy`). The least `r` of all items is what is
//!    left, and that policy's `q` the quota's size.
//! 3. Otherwise, `X-RateLimit-Remaining: 0` with `X-RateLimit-Reset`. A
//!    reset of 1,000,000,000 or more is a Unix time in seconds (September
//!    2001 on), a smaller one a number of seconds: no server means a delta
//!    of 31 years, and none a Unix time before 2001.
//!    `X-RateLimit-Limit` is the quota's size.
//!
//! A refusal's own wait wins over the quota fields because a token
//! bucket's reset is when it is full again, not when the next request
//! fits. The IETF fields win over the `X-` ones when both are sent.
//!
//! Every wait is cut to [`ClientLayer::max_wait`]. An absolute time counts
//! from this host's clock, or from the answer's `Date` when the two differ
//! by more than `Date`'s resolution (a second, and one more for the trip).
//! A value that does not parse is ignored as if absent (a `RateLimit`
//! that is not a Structured Field list is ignored whole, RFC 9651); a
//! figure too large for 64 bits is only long, and cut to the ceiling. A
//! negative `grpc-retry-pushback-ms`, or one that is not a number, means
//! "never retry" (gRFC A6). `pk` is read and not used: it names the
//! server's partition, which a client cannot know before it sends.
//!
//! # Pacing a quota that refills
//!
//! A token bucket's reset is when it is full again, rounded up to a whole
//! second: held until then, a client of 10 a second loses up to a second
//! of refill each time it empties the bucket, half its quota. The answers
//! show which partitions refill as time passes: from one answer to the
//! next their reset moves later while what is left falls, or holds short
//! of a fresh quota's (a fixed window's reset stays where it is until the
//! window ends, and then moves on with a fresh quota: all but the one
//! request left). Once two answers in a row have shown that, "0 left
//! until `R`" holds the partition for `(R - now) / limit` only: `R` is
//! when all `limit` are back, so one request's share is back by then. One
//! request goes, and its answer says what is left. Two resets compare exactly when both are Unix
//! times; relative ones (`t`, a small `X-RateLimit-Reset`) count only
//! when more than a second apart, since each is rounded to its second. A
//! refusal's own wait is never shortened, and a refusal once pacing has
//! begun turns it off for the partition for good: its quota was not the
//! bucket's size, or another client draws on it too.
//!
//! A gRPC status is read from the answer's headers, where a limiter's
//! Trailers-Only answer puts it; a status in trailers after messages is
//! the caller's (the call has begun).
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
mod deadline;
mod error;
mod grpc;
mod layer;
pub mod metrics;
mod partitions;
mod retry;
mod service;
mod settings;
mod told;

pub use body::ReplayBody;
pub use budget::Budget;
pub use deadline::Deadline;
pub use error::{Error, Throttled};
pub use layer::ClientLayer;
pub use partitions::Partition;
pub use service::{ClientService, ResponseFuture};
pub use throttle_fleet_core::ConfigError;
