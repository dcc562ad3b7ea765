//! The accept loop, on the library's hardened serving parts: at most
//! `max_connections` at once (TLS handshakes included) and
//! `max_connections_per_client` per client address, a header timeout and
//! an idle keep-alive timeout (so slowloris clients and idle hoards cost a
//! bounded amount), the peer address handed to the router as axum's
//! `ConnectInfo`, with `[tls]` the connection's ClientHello fingerprint
//! too, and a graceful stop.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use throttle_fleet_axum::serve::{Connections, ServeLimits, serve_connection};
use throttle_fleet_tls::{Fingerprint, FingerprintAcceptor};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

/// Serves `app` on `listener` (over TLS through `tls` if given) until
/// `stop` turns true, then waits up to `drain` for open connections to
/// finish.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    connections: Connections,
    tls: Option<FingerprintAcceptor>,
    mut stop: watch::Receiver<bool>,
    drain: Duration,
) {
    loop {
        let (stream, peer, admitted) = tokio::select! {
            accepted = connections.accept(&listener) => accepted,
            _ = stop.changed() => break,
        };
        let app = app.clone();
        let stop = stop.clone();
        let tls = tls.clone();
        let limits = *connections.limits();
        tokio::spawn(async move {
            let _admitted = admitted;
            let Some(acceptor) = tls else {
                return connection(stream, peer, None, app, &limits, stop).await;
            };
            // The handshake holds the connection's place; the acceptor's
            // deadline bounds it.
            let mut stopped = stop.clone();
            let accepted = tokio::select! {
                accepted = acceptor.accept(stream) => accepted,
                _ = stopped.changed() => return,
            };
            match accepted {
                Ok((stream, fingerprint)) => {
                    connection(stream, peer, fingerprint, app, &limits, stop).await
                }
                Err(e) => eprintln!("gateway: TLS from {peer} refused: {e}"),
            }
        });
    }
    // Stopped accepting: wait for the connections still open.
    drop(listener);
    let _ = connections.drain(drain).await;
}

/// One HTTP/1.1 connection: every request gets the peer address and the
/// fingerprint (if any) as extensions.
async fn connection<IO>(
    io: IO,
    peer: SocketAddr,
    fingerprint: Option<Fingerprint>,
    app: Router,
    limits: &ServeLimits,
    mut stop: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = tower::service_fn(move |mut req: hyper::Request<Body>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        if let Some(fingerprint) = fingerprint {
            req.extensions_mut().insert(fingerprint);
        }
        app.clone().oneshot(req)
    });
    let stopped = async move {
        let _ = stop.wait_for(|stop| *stop).await;
    };
    serve_connection(io, service, limits, stopped).await;
}

/// The address a listener is bound to, for logs.
pub(crate) fn bound(listener: &TcpListener) -> SocketAddr {
    listener
        .local_addr()
        .expect("a bound listener has an address")
}
