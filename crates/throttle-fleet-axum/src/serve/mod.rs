//! Serving an axum app with the connection limits a public service needs:
//! [`serve`] is `axum::serve` with a connection cap, a cap per client, a
//! header timeout, an idle keep-alive timeout, a write timeout and a
//! request body timeout ([`ServeLimits`]).
//!
//! The rate limiter only sees complete requests. A client that opens
//! connections and sends nothing, or sends its headers a line at a time
//! (slowloris), or keeps idle keep-alive connections, costs the server a
//! file descriptor each and never meets the limiter; with `axum::serve` such
//! connections stay open as long as the client likes. So does a client
//! that stops reading, or pipelines requests and never reads the answers,
//! holding the server's send buffers as well. So does a client that sends
//! a request's headers and then its body never, or a byte at a time,
//! holding whatever the request holds (a concurrency rule's slots) while
//! its handler waits. `serve` closes them after the documented time, and
//! caps how many one client holds, so one host cannot take every
//! descriptor. A running request is still never cut for being slow to
//! produce (a slow handler, a long streamed body).
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use throttle_fleet_axum::prelude::*;
//! use throttle_fleet_axum::serve::{serve, ServeLimits};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = ClientIp::default();
//! let policy = Policy::new().rule(Rule::new("ip", Quota::per_minute(100)), client.clone());
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(ThrottleLayer::new(policy, MemoryBackend::default())?);
//!
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! serve(listener, app)
//!     .limits(ServeLimits::default())
//!     .client_ip(client)
//!     .with_graceful_shutdown(async { let _ = tokio::signal::ctrl_c().await; })
//!     .await?;
//! # Ok(())
//! # }
//! ```
//!
//! Every request carries axum's `ConnectInfo<SocketAddr>`, so
//! [`ClientIp`] works as with
//! `into_make_service_with_connect_info::<SocketAddr>()`. Connections are
//! HTTP/1.1 with keep-alive (no HTTP/2, no upgrades such as WebSocket).
//! A server with its own accept loop (TLS first) uses the parts:
//! [`Connections::accept`] and [`serve_connection`].

mod activity;
mod admission;
mod body;
mod connection;
mod deadline;
mod log_throttle;

use std::convert::Infallible;
use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::Response;
use http::Request;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower_service::Service;

pub use admission::{Admitted, ConnectionStats, Connections};
pub use connection::serve_connection;
pub use throttle_fleet_tower::server::ServeLimits;

use crate::ClientIp;

/// Serves `app` on `listener` under [`ServeLimits::default`], clients
/// grouped as `ClientIp::default()` groups them; change either with
/// [`Serve::limits`] and [`Serve::client_ip`], then `.await` it.
pub fn serve(listener: TcpListener, app: Router) -> Serve {
    Serve {
        listener,
        app,
        limits: ServeLimits::default(),
        clients: ClientIp::default(),
        shutdown: None,
        drain: Duration::from_secs(30),
        stats: ConnectionStats::default(),
    }
}

type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A server being set up; `.await` it to run it (see [`serve`]).
#[must_use = "a server does nothing until it is awaited"]
pub struct Serve {
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    clients: ClientIp,
    shutdown: Option<Shutdown>,
    drain: Duration,
    stats: ConnectionStats,
}

impl Serve {
    /// The connection limits (default [`ServeLimits::default`]).
    pub fn limits(mut self, limits: ServeLimits) -> Self {
        self.limits = limits;
        self
    }

    /// How clients are told apart for the per-client cap: pass the
    /// `ClientIp` the policy limits by. Its prefixes group addresses (IPv6
    /// by `/64` by default) and its trusted proxies are not capped.
    pub fn client_ip(mut self, clients: ClientIp) -> Self {
        self.clients = clients;
        self
    }

    /// Stops accepting when `signal` completes, closes idle connections,
    /// and waits for running requests (at most the drain timeout, 30 s
    /// unless [`drain_timeout`](Self::drain_timeout) says otherwise).
    pub fn with_graceful_shutdown<F>(mut self, signal: F) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.shutdown = Some(Box::pin(signal));
        self
    }

    /// How long a graceful shutdown waits for running requests.
    pub fn drain_timeout(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }

    /// The server's connection counts (open, accepted, refused per client),
    /// readable while it runs.
    pub fn stats(&self) -> ConnectionStats {
        self.stats.clone()
    }

    async fn run(self) -> io::Result<()> {
        let connections = Connections::with_stats(self.limits, self.clients, self.stats)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let limits = self.limits;
        // Every route made a `Route` once, as `axum::serve` does (through
        // `into_make_service`), not again for every request.
        let app = self.app.with_state::<()>(());
        let (stop, stopped) = watch::channel(false);
        let mut shutdown = self
            .shutdown
            .unwrap_or_else(|| Box::pin(std::future::pending()));
        loop {
            let (stream, peer, admitted) = tokio::select! {
                accepted = connections.accept(&self.listener) => accepted,
                () = &mut shutdown => break,
            };
            let app = WithPeer {
                app: app.clone(),
                peer,
            };
            let mut stopped = stopped.clone();
            tokio::spawn(async move {
                let _admitted = admitted;
                let stop = async move {
                    let _ = stopped.wait_for(|stop| *stop).await;
                };
                serve_connection(stream, app, &limits, stop).await;
            });
        }
        drop(self.listener);
        let _ = stop.send(true);
        if !connections.drain(self.drain).await {
            tracing::warn!(
                open = connections.stats().open(),
                "graceful shutdown: connections still open after the drain timeout"
            );
        }
        Ok(())
    }
}

impl IntoFuture for Serve {
    type Output = io::Result<()>;
    type IntoFuture = Pin<Box<dyn Future<Output = io::Result<()>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// The app with the connection's peer address as `ConnectInfo`.
#[derive(Clone)]
struct WithPeer {
    app: Router,
    peer: SocketAddr,
}

impl Service<Request<Body>> for WithPeer {
    type Response = Response;
    type Error = Infallible;
    type Future = <Router as Service<Request<Body>>>::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Service::<Request<Body>>::poll_ready(&mut self.app, cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        req.extensions_mut().insert(ConnectInfo(self.peer));
        self.app.call(req)
    }
}
