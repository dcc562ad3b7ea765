//! The accept loop: TCP connections in, TLS connections with their
//! fingerprints out, handshakes run concurrently and capped.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_rustls::server::TlsStream;

use crate::{Fingerprint, FingerprintAcceptor, Rewind};

/// How many handshakes may be in progress at once by default; more wait in
/// the kernel's backlog.
pub const DEFAULT_MAX_HANDSHAKES: usize = 1024;

/// A TLS connection accepted by [`TlsIncoming`], with its fingerprint.
#[derive(Debug)]
pub struct TlsConnection {
    stream: TlsStream<Rewind<TcpStream>>,
    info: TlsConnectInfo,
}

/// What is known of a [`TlsConnection`] from its start: the peer and the
/// ClientHello's fingerprint. With the `tonic` feature, tonic puts it on
/// every request of the connection as an extension, where
/// [`TlsFingerprint`](crate::TlsFingerprint) reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsConnectInfo {
    remote_addr: SocketAddr,
    fingerprint: Option<Fingerprint>,
}

impl TlsConnectInfo {
    /// The peer's address.
    pub fn remote_addr(&self) -> SocketAddr {
        self.remote_addr
    }

    /// The ClientHello's fingerprint, if it could be read.
    pub fn fingerprint(&self) -> Option<Fingerprint> {
        self.fingerprint
    }
}

impl TlsConnection {
    /// The ClientHello's fingerprint, if it could be read.
    pub fn fingerprint(&self) -> Option<Fingerprint> {
        self.info.fingerprint
    }

    /// The peer's address.
    pub fn remote_addr(&self) -> SocketAddr {
        self.info.remote_addr
    }

    /// The peer's address and the fingerprint.
    pub fn info(&self) -> TlsConnectInfo {
        self.info
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

/// Accepts TCP connections and runs their handshakes through a
/// [`FingerprintAcceptor`] concurrently (a slow client holds up nobody but
/// itself, until the acceptor's deadline), yielding only the connections
/// whose handshake succeeded. At most
/// [`DEFAULT_MAX_HANDSHAKES`] handshakes are in progress at once unless
/// told otherwise; past that, new connections wait in the kernel's backlog.
///
/// Every accepted TCP connection has `TCP_NODELAY` set.
///
/// A [`Stream`](futures_core::Stream) of `io::Result<TlsConnection>` (never
/// an error: failed handshakes are logged at debug level and dropped), as
/// tonic's `Server::serve_with_incoming` takes one; `axum::serve` takes it
/// through [`axum::TlsListener`](crate::axum::TlsListener).
///
/// Must be created inside a Tokio runtime: it spawns the accept loop, which
/// stops when this is dropped.
#[derive(Debug)]
pub struct TlsIncoming {
    connections: mpsc::Receiver<TlsConnection>,
    local_addr: io::Result<SocketAddr>,
    accept_loop: JoinHandle<()>,
}

impl TlsIncoming {
    /// Serves TLS on `tcp` with `acceptor`, at most
    /// [`DEFAULT_MAX_HANDSHAKES`] handshakes at once.
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
                        tracing::warn!(error = %e, "throttle-fleet-tls: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // The handshake's flights and every answer go out at once:
                // without it, Nagle's algorithm holds a second small write
                // until the client's delayed ACK (about 40 ms on Linux).
                // Fails only on a socket already dead, which the handshake
                // reports.
                let _ = tcp.set_nodelay(true);
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let accepted = acceptor.accept(tcp).await;
                    drop(permit);
                    match accepted {
                        Ok((stream, fingerprint)) => {
                            let info = TlsConnectInfo {
                                remote_addr: peer,
                                fingerprint,
                            };
                            let _ = tx.send(TlsConnection { stream, info }).await;
                        }
                        Err(e) => {
                            tracing::debug!(%peer, error = %e, "throttle-fleet-tls: handshake refused")
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

    /// The next connection whose handshake succeeded.
    pub async fn accept(&mut self) -> TlsConnection {
        match self.connections.recv().await {
            Some(conn) => conn,
            // The accept loop only ends when this is dropped.
            None => std::future::pending().await,
        }
    }

    /// The address the TCP listener is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.local_addr {
            Ok(addr) => Ok(*addr),
            Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
        }
    }
}

impl Drop for TlsIncoming {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

impl futures_core::Stream for TlsIncoming {
    type Item = io::Result<TlsConnection>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        // The accept loop only ends when this is dropped, so `None` never
        // comes; were it to, the stream would end.
        self.connections.poll_recv(cx).map(|c| c.map(Ok))
    }
}
