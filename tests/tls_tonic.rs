//! tonic behind the fingerprinting acceptor: `serve_with_incoming` over a
//! `TlsIncoming`, real tonic clients over TLS with two different rustls
//! configurations. The fingerprint reaches the service as a request
//! extension, and a rule keyed by the peer and it counts each TLS stack
//! apart.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use throttle_fleet_test_support::grpc::helloworld;
use throttle_fleet_test_support::tls::{Certs, certs, client_config, name, server_config};
use throttle_fleet_tls::tokio_rustls::TlsConnector;
use throttle_fleet_tls::{
    FingerprintAcceptor, TcpInfoLayer, TlsConnectInfo, TlsFingerprint, TlsIncoming,
};
use throttle_fleet_tonic::{MemoryBackend, PeerIp, Policy, Quota, Rule, ThrottleLayer};
use tonic::transport::{Endpoint, Server};
use tonic::{Code, Request, Response, Status};

use helloworld::greeter_client::GreeterClient;
use helloworld::greeter_server::{Greeter, GreeterServer};
use helloworld::{HelloReply, HelloRequest};
use throttle_fleet_tonic::core::clock::ManualClock;

/// A memory backend on a clock that does not move: these tests count with
/// fixed windows, and a window aligned to the wall clock's minute could roll
/// over between two requests and refill.
fn frozen() -> MemoryBackend<ManualClock> {
    MemoryBackend::with_clock(ManualClock::new(1_000_000))
}

/// Answers with the JA4 of the caller's connection.
struct Fingerprints;

#[tonic::async_trait]
impl Greeter for Fingerprints {
    async fn say_hello(&self, req: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        let info = req
            .extensions()
            .get::<TlsConnectInfo>()
            .ok_or_else(|| Status::internal("no TlsConnectInfo on the request"))?;
        let fingerprint = info
            .fingerprint()
            .ok_or_else(|| Status::internal("no fingerprint"))?;
        Ok(Response::new(HelloReply {
            message: fingerprint.ja4().to_string(),
        }))
    }
}

/// A gRPC server over TLS on a free port, limiting each (peer address, TLS
/// fingerprint) to 2 calls a minute.
async fn serve(certs: &Certs) -> std::net::SocketAddr {
    let mut tls = Arc::unwrap_or_clone(server_config(certs));
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let policy = Policy::new().rule(
        Rule::new("fingerprint", Quota::new(2, Duration::from_secs(60))).fixed_window(),
        (PeerIp::default(), TlsFingerprint::ja4()),
    );
    let layer = ThrottleLayer::new(policy, frozen()).unwrap();
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let incoming = TlsIncoming::new(tcp, FingerprintAcceptor::new(Arc::new(tls)));
    tokio::spawn(
        Server::builder()
            .layer(TcpInfoLayer)
            .layer(layer)
            .add_service(GreeterServer::new(Fingerprints))
            .serve_with_incoming(incoming),
    );
    addr
}

/// A tonic client whose TLS is rustls with `provider`'s cipher suites.
async fn client(
    certs: &Certs,
    addr: std::net::SocketAddr,
    narrow: bool,
) -> GreeterClient<tonic::transport::Channel> {
    let connector = TlsConnector::from(client_config(certs, &[b"h2"], narrow));
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await?;
                let tls = connector.connect(name(), tcp).await?;
                Ok::<_, std::io::Error>(TokioIo::new(tls))
            }
        }))
        .await
        .unwrap();
    GreeterClient::new(channel)
}

async fn call(client: &mut GreeterClient<tonic::transport::Channel>) -> Result<String, Status> {
    let reply = client
        .say_hello(HelloRequest {
            name: "x".to_owned(),
        })
        .await?;
    Ok(reply.into_inner().message)
}

#[tokio::test]
async fn the_fingerprint_reaches_tonic_requests_and_each_tls_stack_has_its_own_key() {
    let certs = certs();
    let addr = serve(&certs).await;
    let mut wide = client(&certs, addr, false).await;
    let mut narrow = client(&certs, addr, true).await;

    let a = call(&mut wide).await.unwrap();
    assert!(a.starts_with("t13i") || a.starts_with("t13d"), "{a}");
    assert_eq!(&a[8..10], "h2", "{a}");
    assert_eq!(call(&mut wide).await.unwrap(), a);
    let denied = call(&mut wide).await.unwrap_err();
    assert_eq!(denied.code(), Code::ResourceExhausted, "{denied:?}");

    // Another rustls configuration: another JA4, its own quota.
    let b = call(&mut narrow).await.unwrap();
    assert_ne!(a, b);
    assert_eq!(&b[4..6], "01", "one cipher suite: {b}");
    assert_eq!(call(&mut narrow).await.unwrap(), b);
    assert_eq!(
        call(&mut narrow).await.unwrap_err().code(),
        Code::ResourceExhausted
    );
}
