//! tonic: a [`TlsIncoming`](crate::TlsIncoming) is what
//! `Server::serve_with_incoming` takes, and tonic puts each connection's
//! [`TlsConnectInfo`] on every request of it, where
//! [`TlsFingerprint`](crate::TlsFingerprint) finds the fingerprint;
//! [`TcpInfoLayer`] makes the peer address visible where tonic's own
//! connections put it.

use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::{TlsConnectInfo, TlsConnection};

impl Connected for TlsConnection {
    type ConnectInfo = TlsConnectInfo;

    fn connect_info(&self) -> TlsConnectInfo {
        self.info()
    }
}

/// Copies the peer address of each request's [`TlsConnectInfo`] into
/// tonic's `TcpConnectInfo`, which tonic's `Request::remote_addr` and
/// `throttle_fleet_tonic::PeerIp` read (tonic inserts only the IO's own connect
/// info). Put it outside the throttle layer:
/// `Server::builder().layer(TcpInfoLayer).layer(throttle)`, so that a key
/// of the peer's address prefix and the fingerprint works.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpInfoLayer;

impl<S> tower_layer::Layer<S> for TcpInfoLayer {
    type Service = TcpInfo<S>;

    fn layer(&self, inner: S) -> TcpInfo<S> {
        TcpInfo { inner }
    }
}

/// The service of [`TcpInfoLayer`].
#[derive(Debug, Clone)]
pub struct TcpInfo<S> {
    inner: S,
}

impl<S, B> tower_service::Service<http::Request<B>> for TcpInfo<S>
where
    S: tower_service::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if let Some(info) = req.extensions().get::<TlsConnectInfo>().copied() {
            req.extensions_mut().insert(TcpConnectInfo {
                local_addr: None,
                remote_addr: Some(info.remote_addr()),
            });
        }
        self.inner.call(req)
    }
}
