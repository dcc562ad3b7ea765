//! `PeerIp` behind tonic's own TLS: a real TLS handshake over TCP. tonic
//! records `TlsConnectInfo` there, and (as of 0.14) `TcpConnectInfo` next to
//! it, which is what `PeerIp` reads; this test notices if that changes. The
//! certificates under `tests/tls/` are a throwaway CA and a `localhost` /
//! `127.0.0.1` server certificate made for this test only (valid to 2126).

use std::net::{IpAddr, Ipv4Addr};

use throttle_fleet_test_support::grpc::{GreeterClient, details, expect_code, meta, say_hello};
use throttle_fleet_tonic::{
    GrpcResponder, MemoryBackend, PeerIp, Policy, Quota, Rule, ThrottleLayer,
};
use tonic::Code;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig};

const CA: &str = include_str!("tls/ca.pem");
const CERT: &str = include_str!("tls/server.pem");
const KEY: &str = include_str!("tls/server.key");

async fn client_from(addr: std::net::SocketAddr, local: Ipv4Addr) -> GreeterClient {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(CA))
        .domain_name("localhost");
    let channel = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .local_address(Some(IpAddr::V4(local)))
        .connect()
        .await
        .unwrap();
    GreeterClient::new(channel)
}

#[tokio::test]
async fn peer_ip_finds_the_peer_behind_tonics_tls() {
    let policy = Policy::new().rule(
        // A day's window: the memory backend aligns it to the system clock,
        // and a boundary inside the run would admit a second window's quota.
        Rule::new("ip", Quota::per_day(2)).fixed_window(),
        PeerIp::default(),
    );
    let responder = GrpcResponder::new().key_kind("ip", "peer-ip");
    let layer = ThrottleLayer::with_responder(policy, MemoryBackend::default(), responder).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder()
        .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(CERT, KEY)))
        .unwrap()
        .layer(layer)
        .add_routes(throttle_fleet_test_support::grpc::routes());
    tokio::spawn(server.serve_with_incoming(TcpIncoming::from(listener)));

    let mut a = client_from(addr, Ipv4Addr::new(127, 0, 0, 2)).await;
    let mut b = client_from(addr, Ipv4Addr::new(127, 0, 0, 3)).await;
    for left in ["1", "0"] {
        let reply = say_hello(&mut a, &[]).await.unwrap();
        assert_eq!(meta(reply.metadata(), "x-ratelimit-remaining"), Some(left));
    }
    let status = expect_code(say_hello(&mut a, &[]).await, Code::ResourceExhausted);
    assert_eq!(
        details(&status).quota.unwrap().violations[0].subject,
        "ip:peer-ip"
    );
    // Another address over TLS is another peer: not a shared fallback key.
    let reply = say_hello(&mut b, &[]).await.unwrap();
    assert_eq!(meta(reply.metadata(), "x-ratelimit-remaining"), Some("1"));
}
