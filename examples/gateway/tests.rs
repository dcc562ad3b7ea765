//! The gateway end to end, on its own accept loop: over HTTPS, a file with
//! `[tls]` and a composite key with the TLS fingerprint, real rustls
//! clients; over plain HTTP, `GET /slow` and a concurrency rule on it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use throttle_fleet_config::GatewayConfig;
use throttle_fleet_tls::tokio_rustls::TlsConnector;
use throttle_fleet_tls::tokio_rustls::rustls::{
    self, ClientConfig, RootCertStore,
    crypto::ring,
    pki_types::{CertificateDer, ServerName},
};
use tokio::sync::watch;

/// A fresh directory of the test's own under the system's temporary one.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "throttle-gateway-test-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A certificate for `localhost` written to `dir` as `cert.pem` and
/// `key.pem`; the certificate, for clients to trust.
fn write_cert(dir: &Path) -> CertificateDer<'static> {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(dir.join("cert.pem"), made.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), made.signing_key.serialize_pem()).unwrap();
    made.cert.der().clone()
}

/// Unauthenticated clients: 2 a minute per (/24, JA4, User-Agent).
const GATEWAY_TLS: &str = r#"
[tls]
cert_file = "cert.pem"
key_file = "key.pem"

[[rules]]
name = "unauthenticated"
key = "composite"
parts = ["ip", "tls-fingerprint", "user-agent"]
ipv4_prefix = 24
algorithm = "fixed_window"
limit = 2
period_secs = 60
"#;

/// The gateway serving `config` on a free port; it stops when the returned
/// sender is dropped.
async fn start(config: &GatewayConfig, file: &str) -> (SocketAddr, watch::Sender<bool>) {
    let layer = throttle_fleet_axum::from_config::layer(
        config,
        file,
        throttle_fleet_axum::MemoryBackend::default(),
    )
    .unwrap();
    let tls = crate::tls::acceptor(config.tls.as_ref().unwrap(), file).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(crate::server::serve(
        listener,
        crate::app(layer),
        throttle_fleet_axum::from_config::connections(config).unwrap(),
        Some(tls),
        stop,
        Duration::from_secs(1),
    ));
    (addr, stop_tx)
}

/// A rustls client trusting `cert`; `narrow` offers a single cipher suite,
/// which makes its ClientHello (and so its JA4) differ from the default's.
fn client(cert: &CertificateDer<'static>, narrow: bool) -> Arc<ClientConfig> {
    let mut provider = ring::default_provider();
    if narrow {
        provider.cipher_suites = vec![ring::cipher_suite::TLS13_AES_128_GCM_SHA256];
    }
    let mut roots = RootCertStore::empty();
    roots.add(cert.clone()).unwrap();
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    // A resumed session adds pre_shared_key, another JA4: connect afresh.
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

/// `GET /` on a new TLS connection: the status and the body.
async fn get(client: &Arc<ClientConfig>, addr: SocketAddr) -> (u16, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = TlsConnector::from(client.clone())
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("/")
        .header("host", "localhost")
        .header("user-agent", "one-browser/1.0")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn two_tls_stacks_behind_one_address_have_their_own_quotas() {
    let dir = scratch("stacks");
    let cert = write_cert(&dir);
    let path = dir.join("gateway.toml");
    std::fs::write(&path, GATEWAY_TLS).unwrap();
    let config = GatewayConfig::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let (addr, _stop) = start(&config, "gateway.toml").await;

    // Same address, same User-Agent, reconnecting each time: one key.
    let wide = client(&cert, false);
    assert_eq!(get(&wide, addr).await.0, 200);
    assert_eq!(get(&wide, addr).await.0, 200);
    let (status, body) = get(&wide, addr).await;
    assert_eq!(status, 429, "{body}");
    assert!(body.contains(r#""dimension":"unauthenticated""#), "{body}");
    // Another TLS stack from the same address is not punished for it.
    let narrow = client(&cert, true);
    assert_eq!(get(&narrow, addr).await.0, 200);
    assert_eq!(get(&narrow, addr).await.0, 200);
    assert_eq!(get(&narrow, addr).await.0, 429);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_client_speaking_plain_http_to_the_tls_gateway_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = scratch("plain");
    write_cert(&dir);
    let path = dir.join("gateway.toml");
    std::fs::write(&path, GATEWAY_TLS).unwrap();
    let config = GatewayConfig::load(&path).unwrap();
    let (addr, _stop) = start(&config, "gateway.toml").await;
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer))
        .await
        .expect("the gateway closes a connection that is not TLS")
        .unwrap_or(0);
    assert_eq!(n, 0, "{:?}", String::from_utf8_lossy(&answer));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn slow_reads_its_milliseconds_and_refuses_anything_else() {
    use crate::{MAX_SLOW_MS, slow_ms};
    assert_eq!(slow_ms(Some("ms=250")), Ok(250));
    assert_eq!(slow_ms(Some("x=1&ms=0")), Ok(0));
    assert_eq!(slow_ms(Some("ms=10000")), Ok(MAX_SLOW_MS));
    for bad in [
        None,
        Some(""),
        Some("ms="),
        Some("ms=-1"),
        Some("ms=1.5"),
        Some("ms=10001"),
    ] {
        let why = slow_ms(bad).unwrap_err();
        assert!(why.contains("GET /slow?ms=N"), "{bad:?}: {why}");
    }
    let long = format!("ms={}", "9".repeat(100));
    assert!(
        slow_ms(Some(&long)).unwrap_err().len() < 120,
        "the echo is cut short"
    );
}

/// A concurrency rule of one slot on `/slow`, per client address.
const GATEWAY_SLOW: &str = r#"
[[rules]]
name = "slow"
key = "ip"
routes = ["/slow"]
algorithm = "concurrency"
limit = 1
"#;

#[tokio::test]
async fn slow_holds_its_concurrency_slot_until_it_answers_or_its_client_leaves() {
    use throttle_fleet_test_support::http;
    let config = GatewayConfig::parse("gateway.toml", GATEWAY_SLOW, None).unwrap();
    let (addr, _stop_tx) = serve_plain(&config).await;
    for bad in ["/slow", "/slow?ms=abc", "/slow?ms=10001"] {
        let reply = http::get(addr, bad).await;
        let text = String::from_utf8_lossy(&reply.body);
        assert_eq!(reply.status, 400, "{bad}: {text}");
        assert!(text.contains("GET /slow?ms=N"), "{bad}: {text}");
    }
    assert_eq!(http::get(addr, "/slow?ms=0").await.status, 200);
    // A request that would sleep 10 s holds the one slot...
    let held = tokio::spawn(async move { http::get(addr, "/slow?ms=10000").await });
    let reply = first_refusal(addr).await;
    let text = String::from_utf8_lossy(&reply.body);
    assert_eq!(reply.status, 429, "{text}");
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert!(text.contains(r#""dimension":"slow""#), "{text}");
    // ...until its client goes away: the slot comes back.
    held.abort();
    let _ = held.await;
    let reply = guard(async {
        loop {
            // (until the server has seen the connection close)
            let reply = http::get(addr, "/slow?ms=0").await;
            if reply.status != 429 {
                return reply;
            }
        }
    })
    .await;
    assert_eq!(reply.status, 200, "{:?}", reply.body);
}

/// Three slots before every route, one kept per class above a request's:
/// `/slow` is sheddable (one slot), `/checkout` critical (all three).
const GATEWAY_RESERVE: &str = r#"
[[rules]]
name = "backend"
key = "global"
algorithm = "concurrency"
limit = 3
reserve = 1
class = "route"
classes = { critical = ["/checkout"], sheddable = ["/slow"] }
"#;

#[tokio::test]
async fn the_file_s_classes_reach_the_reserve_and_a_shed_request_gets_503() {
    use throttle_fleet_test_support::http;
    let config = GatewayConfig::parse("gateway.toml", GATEWAY_RESERVE, None).unwrap();
    let (addr, _stop_tx) = serve_plain(&config).await;
    // A sheddable request holds the one slot its class may use...
    let held = tokio::spawn(async move { http::get(addr, "/slow?ms=10000").await });
    let reply = first_refusal(addr).await;
    let text = String::from_utf8_lossy(&reply.body);
    assert_eq!(reply.status, 503, "{text}");
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert!(text.contains("TEMPORARY_REDUCED_CAPACITY"), "{text}");
    // ...and a critical one still passes.
    let reply = http::send(addr, "POST", "/checkout", &[], Bytes::new()).await;
    assert_eq!(
        reply.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
    held.abort();
}

/// The gateway serving `config` over plain HTTP on a free port, on the
/// memory backend; it stops when the returned sender is dropped.
async fn serve_plain(config: &GatewayConfig) -> (SocketAddr, watch::Sender<bool>) {
    let layer = throttle_fleet_axum::from_config::layer(
        config,
        "gateway.toml",
        throttle_fleet_axum::MemoryBackend::default(),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(crate::server::serve(
        listener,
        crate::app(layer),
        throttle_fleet_axum::from_config::connections(config).unwrap(),
        None,
        stop,
        Duration::from_secs(1),
    ));
    (addr, stop_tx)
}

/// The first answer to `GET /slow?ms=0` that is not a 200: asked until a
/// request held on another connection has been admitted.
async fn first_refusal(addr: SocketAddr) -> throttle_fleet_test_support::http::Reply {
    guard(async {
        loop {
            let reply = throttle_fleet_test_support::http::get(addr, "/slow?ms=0").await;
            if reply.status != 200 {
                return reply;
            }
        }
    })
    .await
}

/// `wait`, or a failure if it has not happened within 10 s (a hang guard,
/// not a measure: the loops it bounds end as soon as the server has moved).
async fn guard<T>(wait: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("the gateway never got there")
}
