//! The accept loop: at most `max_connections` at once (TLS handshakes
//! included), a header timeout that also closes idle keep-alive connections
//! (so slowloris clients and idle hoards cost a bounded amount), the peer
//! address handed to the router as axum's `ConnectInfo`, with `[tls]` the
//! connection's ClientHello fingerprint too, and a graceful stop.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use throttle_fleet_config::ServerConfig;
use throttle_fleet_tls::{Fingerprint, FingerprintAcceptor};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

/// Serves `app` on `listener` (over TLS through `tls` if given) until
/// `stop` turns true, then waits up to `drain` for open connections to
/// finish.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServerConfig,
    tls: Option<FingerprintAcceptor>,
    mut stop: watch::Receiver<bool>,
    drain: Duration,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        // A permit before accepting: past the cap, new connections wait in
        // the kernel's backlog instead of costing memory here.
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            _ = stop.changed() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait, go on.
                    eprintln!("gateway: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let app = app.clone();
        let mut stop = stop.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let Some(acceptor) = tls else {
                return connection(stream, peer, None, app, limits, stop).await;
            };
            // The handshake holds the connection's permit; the acceptor's
            // deadline bounds it.
            let accepted = tokio::select! {
                accepted = acceptor.accept(stream) => accepted,
                _ = stop.changed() => return,
            };
            match accepted {
                Ok((stream, fingerprint)) => {
                    connection(stream, peer, fingerprint, app, limits, stop).await
                }
                Err(e) => eprintln!("gateway: TLS from {peer} refused: {e}"),
            }
        });
    }
    // Stopped accepting: wait for the connections still open.
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(drain, permits.acquire_many(all)).await;
}

/// One HTTP/1.1 connection: every request gets the peer address and the
/// fingerprint (if any) as extensions.
async fn connection<IO>(
    io: IO,
    peer: SocketAddr,
    fingerprint: Option<Fingerprint>,
    app: Router,
    limits: ServerConfig,
    mut stop: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        if let Some(fingerprint) = fingerprint {
            req.extensions_mut().insert(fingerprint);
        }
        let app = app.clone();
        async move { Ok::<_, Infallible>(app.oneshot(req).await.unwrap_or_else(|e| match e {})) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = stop.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

/// The address a listener is bound to, for logs.
pub(crate) fn bound(listener: &TcpListener) -> SocketAddr {
    listener
        .local_addr()
        .expect("a bound listener has an address")
}
