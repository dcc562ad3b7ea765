//! axum 0.8: a TLS [`Listener`] and a make-service that puts the
//! [`Fingerprint`] and the peer address on every request.
//!
//! axum's `serve` hands a make-service each connection's
//! [`IncomingStream`], whose `io()` is this listener's [`TlsConnection`];
//! [`make_service`] copies the connection's fingerprint and
//! `ConnectInfo<SocketAddr>` (what `throttle_axum::ClientIp` reads) into the
//! extensions of each of its requests, HTTP/1.1 and HTTP/2 alike.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;
use tower_service::Service;

use crate::{Fingerprint, FingerprintAcceptor, Rewind};

/// How many handshakes may be in progress at once by default; more wait in
/// the kernel's backlog.
const DEFAULT_MAX_HANDSHAKES: usize = 1024;

/// A TLS connection accepted by [`TlsListener`], with its fingerprint.
#[derive(Debug)]
pub struct TlsConnection {
    stream: TlsStream<Rewind<TcpStream>>,
    fingerprint: Option<Fingerprint>,
}

impl TlsConnection {
    /// The ClientHello's fingerprint, if it could be read.
    pub fn fingerprint(&self) -> Option<Fingerprint> {
        self.fingerprint
    }

    /// The rustls stream (negotiated ALPN, SNI, ...).
    pub fn get_ref(&self) -> &TlsStream<Rewind<TcpStream>> {
        &self.stream
    }
}

impl AsyncRead for TlsConnection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConnection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// An [`axum::serve::Listener`] that accepts TCP connections and runs their
/// handshakes through a [`FingerprintAcceptor`] concurrently (a slow client
/// holds up nobody but itself, until the acceptor's deadline), yielding only
/// the connections whose handshake succeeded.
///
/// Must be created inside a Tokio runtime: it spawns the accept loop, which
/// stops when the listener is dropped.
#[derive(Debug)]
pub struct TlsListener {
    connections: mpsc::Receiver<(TlsConnection, SocketAddr)>,
    local_addr: io::Result<SocketAddr>,
    accept_loop: JoinHandle<()>,
}

impl TlsListener {
    /// Serves TLS on `tcp` with `acceptor`, at most 1024 handshakes at once.
    pub fn new(tcp: TcpListener, acceptor: FingerprintAcceptor) -> Self {
        Self::with_max_handshakes(tcp, acceptor, DEFAULT_MAX_HANDSHAKES)
    }

    /// As [`new`](Self::new), with at most `max` handshakes in progress.
    pub fn with_max_handshakes(
        tcp: TcpListener,
        acceptor: FingerprintAcceptor,
        max: usize,
    ) -> Self {
        let local_addr = tcp.local_addr();
        let (tx, connections) = mpsc::channel(64);
        let permits = Arc::new(Semaphore::new(max.max(1)));
        let accept_loop = tokio::spawn(async move {
            loop {
                let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
                    return;
                };
                let (tcp, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(error = %e, "throttle-tls: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let accepted = acceptor.accept(tcp).await;
                    drop(permit);
                    match accepted {
                        Ok((stream, fingerprint)) => {
                            let conn = TlsConnection {
                                stream,
                                fingerprint,
                            };
                            let _ = tx.send((conn, peer)).await;
                        }
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "throttle-tls: handshake refused")
                        }
                    }
                });
            }
        });
        Self {
            connections,
            local_addr,
            accept_loop,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

impl Listener for TlsListener {
    type Io = TlsConnection;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.connections.recv().await {
            Some(conn) => conn,
            // The accept loop only ends when the listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        match &self.local_addr {
            Ok(addr) => Ok(*addr),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        }
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
