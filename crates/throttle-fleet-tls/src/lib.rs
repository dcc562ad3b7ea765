//! TLS ClientHello fingerprints (JA4) for throttle.
//!
//! Behind a carrier-grade NAT thousands of phones share one IPv4 address,
//! so limiting an unauthenticated endpoint by address (or worse, by `/24`)
//! punishes a neighbourhood for one bot. Bots rarely share a TLS stack with
//! the people around them, so the production key for such endpoints is
//! *address prefix + TLS fingerprint + User-Agent*. rustls does not expose
//! the ClientHello fields a fingerprint needs, so this crate reads the raw
//! hello off the socket before rustls does, computes its [JA4], and replays
//! the same bytes into rustls.
//!
//! - [`FingerprintAcceptor`]: wraps a `tokio_rustls::TlsAcceptor`; bounded
//!   buffering, a deadline for the whole handshake, and a choice for hellos
//!   it cannot read ([`OnInvalid`]).
//! - [`Ja4`]: the fingerprint, computed from bytes ([`Ja4::from_records`]).
//! - [`Fingerprint`]: the request extension; [`TlsFingerprint`]: the key
//!   extractor over it.
//! - [`TlsIncoming`]: the accept loop, handshakes concurrent and capped; a
//!   stream of [`TlsConnection`]s for tonic's `Server::serve_with_incoming`
//!   (with the `tonic` feature, tonic puts each connection's
//!   [`TlsConnectInfo`] on its requests).
//! - with the `axum` feature, [`axum::TlsListener`] for `axum::serve` and
//!   [`axum::make_service`] to put the fingerprint and the peer address on
//!   every request.
//!
//! ```no_run
//! # async fn run(tls: tokio_rustls::rustls::ServerConfig) -> std::io::Result<()> {
//! use std::sync::Arc;
//! use axum::{Router, routing::get};
//! use throttle_fleet_tls::{FingerprintAcceptor, axum::{TlsListener, make_service}};
//!
//! let app = Router::new().route("/", get(|| async { "hi" }));
//! let acceptor = FingerprintAcceptor::new(Arc::new(tls));
//! let tcp = tokio::net::TcpListener::bind("127.0.0.1:3443").await?;
//! axum::serve(TlsListener::new(tcp, acceptor), make_service(app)).await
//! # }
//! ```
//!
//! [JA4]: https://github.com/FoxIO-LLC/ja4/blob/main/technical_details/JA4.md

// docs.rs (`--cfg docsrs`, nightly) marks each feature-gated item with
// the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acceptor;
#[cfg(feature = "axum")]
pub mod axum;
mod fingerprint;
mod hello;
mod incoming;
mod ja4;
#[cfg(feature = "tonic")]
mod tonic;

pub use acceptor::{AcceptError, FingerprintAcceptor, OnInvalid, Rewind};
pub use fingerprint::{Fingerprint, TlsFingerprint};
pub use hello::{DEFAULT_MAX_HELLO, HelloError};
pub use incoming::{DEFAULT_MAX_HANDSHAKES, TlsConnectInfo, TlsConnection, TlsIncoming};
pub use ja4::Ja4;
pub use tokio_rustls;
#[cfg(feature = "tonic")]
pub use tonic::{TcpInfo, TcpInfoLayer};
