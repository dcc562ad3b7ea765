//! What this crate's test binaries share that names its types: the test
//! services served behind a layer of this crate (the test support cannot
//! depend on this crate, which takes it as a dev-dependency).

use std::net::SocketAddr;

use throttle_fleet_test_support::grpc::routes;
use throttle_fleet_tonic::ThrottleLayer;
use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

/// Serves the greeter and echo services behind `layer` with
/// `tonic::transport::Server` on an ephemeral loopback port.
pub(crate) async fn serve(layer: ThrottleLayer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder().layer(layer).add_routes(routes());
    tokio::spawn(async move {
        server
            .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true)))
            .await
            .unwrap();
    });
    addr
}
