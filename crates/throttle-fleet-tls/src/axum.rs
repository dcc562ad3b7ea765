//! axum 0.8: a TLS [`Listener`] and a make-service that puts the
//! [`Fingerprint`] and the peer address on every request.
//!
//! axum's `serve` hands a make-service each connection's
//! [`IncomingStream`], whose `io()` is this listener's [`TlsConnection`];
//! [`make_service`] copies the connection's fingerprint and
//! `ConnectInfo<SocketAddr>` (what `throttle_fleet_axum::ClientIp` reads) into the
//! extensions of each of its requests, HTTP/1.1 and HTTP/2 alike.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::io;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use axum::extract::ConnectInfo;
use axum::serve::{IncomingStream, Listener};
use tokio::net::TcpListener;
use tower_service::Service;

use crate::{Fingerprint, FingerprintAcceptor, TlsConnection, TlsIncoming};

/// An [`axum::serve::Listener`] over [`TlsIncoming`]: TLS connections
/// whose handshakes ran concurrently, at most
/// [`DEFAULT_MAX_HANDSHAKES`](crate::DEFAULT_MAX_HANDSHAKES) at once unless
/// told otherwise.
///
/// Must be created inside a Tokio runtime: it spawns the accept loop, which
/// stops when the listener is dropped.
#[derive(Debug)]
pub struct TlsListener {
    incoming: TlsIncoming,
}

impl TlsListener {
    /// Serves TLS on `tcp` with `acceptor`, at most 1024 handshakes at once.
    pub fn new(tcp: TcpListener, acceptor: FingerprintAcceptor) -> Self {
        Self {
            incoming: TlsIncoming::new(tcp, acceptor),
        }
    }

    /// As [`new`](Self::new), with at most `max` handshakes in progress.
    pub fn with_max_handshakes(
        tcp: TcpListener,
        acceptor: FingerprintAcceptor,
        max: usize,
    ) -> Self {
        Self {
            incoming: TlsIncoming::with_max_handshakes(tcp, acceptor, max),
        }
    }
}

impl Listener for TlsListener {
    type Io = TlsConnection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let conn = self.incoming.accept().await;
        let peer = conn.remote_addr();
        (conn, peer)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.incoming.local_addr()
    }
}

/// The make-service for `axum::serve(TlsListener, make_service(app))`: each
/// request gets `ConnectInfo<SocketAddr>` and, when the hello was read, the
/// connection's [`Fingerprint`] as extensions.
pub fn make_service<S>(service: S) -> TlsMakeService<S> {
    TlsMakeService { service }
}

/// See [`make_service`].
#[derive(Debug, Clone)]
pub struct TlsMakeService<S> {
    service: S,
}

impl<S: Clone> Service<IncomingStream<'_, TlsListener>> for TlsMakeService<S> {
    type Response = WithTlsInfo<S>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, stream: IncomingStream<'_, TlsListener>) -> Self::Future {
        ready(Ok(WithTlsInfo {
            service: self.service.clone(),
            peer: *stream.remote_addr(),
            fingerprint: stream.io().fingerprint(),
        }))
    }
}

/// One connection's service: inserts its peer address and fingerprint into
/// every request.
#[derive(Debug, Clone)]
pub struct WithTlsInfo<S> {
    service: S,
    peer: SocketAddr,
    fingerprint: Option<Fingerprint>,
}

impl<S, B> Service<http::Request<B>> for WithTlsInfo<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.service.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        req.extensions_mut().insert(ConnectInfo(self.peer));
        if let Some(fingerprint) = self.fingerprint {
            req.extensions_mut().insert(fingerprint);
        }
        self.service.call(req)
    }
}
