//! The server's connections, accepted under the file's `[rls]` caps:
//! `max_connections` in all and `max_connections_per_client` per address
//! (the same accounting as `throttle_fleet_axum::serve`), each with
//! `TCP_NODELAY` set, so that an answer's message and trailers leave
//! together rather than waiting for the client's delayed acknowledgement.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_util::Stream;
use throttle_fleet_axum::ClientIp;
use throttle_fleet_axum::serve::{Admitted, Connections, ServeLimits};
use throttle_fleet_config::RlsConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// The accepted connections of `listener` under `rls`'s caps, for
/// `serve_with_incoming`.
pub(crate) fn incoming(
    listener: TcpListener,
    rls: &RlsConfig,
) -> Result<impl Stream<Item = io::Result<Connection>>, String> {
    let limits = ServeLimits {
        max_connections: rls.max_connections,
        max_connections_per_client: rls.max_connections_per_client,
        ..ServeLimits::default()
    };
    let connections = Connections::new(limits, ClientIp::default()).map_err(|e| e.to_string())?;
    Ok(futures_util::stream::unfold(
        (connections, listener),
        |(connections, listener)| async move {
            // With TCP_NODELAY set.
            let (stream, _peer, admitted) = connections.accept(&listener).await;
            let connection = Connection {
                stream,
                _admitted: admitted,
            };
            Some((Ok(connection), (connections, listener)))
        },
    ))
}

/// One accepted connection, holding its place under the caps until it
/// closes.
pub(crate) struct Connection {
    stream: TcpStream,
    _admitted: Admitted,
}

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Connection {
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
