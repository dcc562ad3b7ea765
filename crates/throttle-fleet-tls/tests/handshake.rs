//! Real TLS handshakes through the acceptor: the fingerprint reaches every
//! request, keys are per TLS stack, and hostile clients are refused.

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::{Router, routing::get};
use http::StatusCode;
use throttle_fleet_axum::{ClientIp, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
use throttle_fleet_tls::axum::{TlsListener, make_service};
use throttle_fleet_tls::tokio_rustls::TlsConnector;
use throttle_fleet_tls::tokio_rustls::rustls::ClientConfig;
use throttle_fleet_tls::{
    AcceptError, Fingerprint, FingerprintAcceptor, HelloError, Ja4, OnInvalid,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use throttle_fleet_test_support::tls::*;

async fn echo(fingerprint: Option<axum::Extension<Fingerprint>>) -> (HeaderMap, &'static str) {
    let mut headers = HeaderMap::new();
    if let Some(axum::Extension(f)) = fingerprint {
        headers.insert("x-tls-fingerprint", f.ja4().as_str().parse().unwrap());
    }
    (headers, "ok\n")
}

/// An HTTPS server limiting `/` to 2 requests a day per (/24 prefix, JA4).
/// A day, not a minute: the fixed window is aligned to the system clock,
/// and a window boundary inside a test would admit a second window's quota.
async fn serve(acceptor: FingerprintAcceptor) -> std::net::SocketAddr {
    let quota = Quota::per_day(2);
    let key = (
        ClientIp::default().ipv4_prefix(24),
        throttle_fleet_tls::TlsFingerprint::ja4(),
    );
    let policy = Policy::new().rule(Rule::new("unauthenticated", quota).fixed_window(), key);
    let app = Router::new()
        .route("/", get(echo))
        .layer(ThrottleLayer::new(policy, MemoryBackend::default()).unwrap());
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(TlsListener::new(tcp, acceptor), make_service(app))
            .await
            .unwrap();
    });
    addr
}

#[tokio::test]
async fn two_tls_stacks_behind_one_address_get_separate_quotas() {
    let certs = certs();
    let addr = serve(FingerprintAcceptor::new(server_config(&certs))).await;
    let wide = client_config(&certs, &[b"h2", b"http/1.1"], false);
    let narrow = client_config(&certs, &[b"http/1.1"], true);

    // The same client reconnecting keeps its key: each `get` is a new
    // connection, and the third one is over the quota.
    let a1 = fetch(wide.clone(), addr).await;
    let a2 = fetch(wide.clone(), addr).await;
    let a3 = fetch(wide.clone(), addr).await;
    assert_eq!(a1.version, http::Version::HTTP_2);
    assert_eq!(
        (a1.status, a2.status, a3.status),
        (
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        )
    );
    assert_eq!(a1.fingerprint, a2.fingerprint);
    assert!(
        a1.fingerprint.as_deref().unwrap().starts_with("t13d"),
        "{:?}",
        a1.fingerprint
    );

    // Another stack from the same address is not punished for the first.
    let b1 = fetch(narrow.clone(), addr).await;
    assert_eq!(b1.version, http::Version::HTTP_11);
    assert_eq!(b1.status, StatusCode::OK);
    assert_ne!(b1.fingerprint, a1.fingerprint);
    assert!(
        b1.fingerprint.as_deref().unwrap().contains("01"),
        "{:?}",
        b1.fingerprint
    );
    assert_eq!(fetch(narrow.clone(), addr).await.status, StatusCode::OK);
    assert_eq!(
        fetch(narrow, addr).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn curl_gets_its_own_fingerprint_over_http1_and_http2() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("these tests need curl on the PATH");
    }
    let certs = certs();
    let addr = serve(FingerprintAcceptor::new(server_config(&certs))).await;
    let url = format!("https://127.0.0.1:{}/", addr.port());
    let mut seen = Vec::new();
    for (flag, version) in [("--http1.1", "HTTP/1.1 200"), ("--http2", "HTTP/2 200")] {
        let out = tokio::process::Command::new("curl")
            .args(["-sk", "-D", "-", "-o", "/dev/null", flag, &url])
            .output()
            .await
            .unwrap();
        let head = String::from_utf8(out.stdout).unwrap();
        assert!(head.starts_with(version), "{head}");
        let fp = head
            .lines()
            .find_map(|l| l.strip_prefix("x-tls-fingerprint: "))
            .unwrap_or_else(|| panic!("{head}"))
            .trim()
            .to_owned();
        seen.push(fp);
    }
    // ALPN is part of JA4: `h1` and `h2`; the rest of curl's hello is the same.
    assert!(
        seen[0].starts_with("t13i") && seen[0][8..10] == *"h1",
        "{seen:?}"
    );
    assert_eq!(&seen[1][8..10], "h2");
    assert_eq!(seen[0][10..], seen[1][10..]);
    // The rustls client is another key again.
    let rustls = fetch(client_config(&certs, &[b"h2"], false), addr).await;
    assert!(!seen.contains(rustls.fingerprint.as_ref().unwrap()));
}

#[tokio::test]
async fn a_hello_larger_than_the_bound_proceeds_without_a_fingerprint_if_told() {
    let certs = certs();
    let small = FingerprintAcceptor::new(server_config(&certs)).max_hello(64);
    let addr = serve(small.clone().on_invalid(OnInvalid::Proceed)).await;
    let client = client_config(&certs, &[b"http/1.1"], false);
    // No fingerprint: the composite key is missing, which this rule rejects.
    let answer = fetch(client.clone(), addr).await;
    assert_eq!(answer.fingerprint, None);
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);

    // Told to close, the acceptor refuses the same hello.
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let connect =
        throttle_fleet_tls::tokio_rustls::TlsConnector::from(client).connect(name(), client_io);
    let (_, accepted) = tokio::join!(connect, small.accept(server_io));
    assert!(
        matches!(accepted, Err(AcceptError::Hello(HelloError::TooLarge))),
        "{accepted:?}"
    );
}

/// The JA4 of the hello `client` sends.
async fn ja4_of(client: &Arc<ClientConfig>) -> Ja4 {
    let (c, mut s) = tokio::io::duplex(64 * 1024);
    tokio::spawn(TlsConnector::from(client.clone()).connect(name(), c));
    let mut buf = vec![0u8; 64 * 1024];
    let n = s.read(&mut buf).await.unwrap();
    Ja4::from_records(&buf[..n]).unwrap()
}

/// A handshake whose ClientHello reaches the acceptor through `server_io`
/// (a [`Trickle`] of the client's bytes) gets the hello's JA4 and a working
/// connection.
async fn handshake_through<IO>(
    acceptor: &FingerprintAcceptor,
    client: Arc<ClientConfig>,
    client_io: tokio::io::DuplexStream,
    server_io: IO,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let expected = ja4_of(&client).await;
    let connect = TlsConnector::from(client).connect(name(), client_io);
    let (connected, accepted) = tokio::join!(connect, acceptor.accept(server_io));
    let (mut server, fingerprint) = accepted.unwrap();
    let mut client = connected.unwrap();
    assert_eq!(fingerprint.unwrap().ja4(), &expected);
    client.write_all(b"ping").await.unwrap();
    client.flush().await.unwrap();
    let mut got = [0u8; 4];
    server.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");
}

#[tokio::test]
async fn a_hello_arriving_one_byte_at_a_time_is_fingerprinted_and_replayed() {
    let certs = certs();
    let acceptor = FingerprintAcceptor::new(server_config(&certs));
    let client = client_config(&certs, &[b"h2"], false);
    let (c, s) = tokio::io::duplex(64 * 1024);
    handshake_through(&acceptor, client, c, Trickle::new(s, &[1])).await;
}

#[tokio::test]
async fn a_hello_in_odd_fragments_and_many_records_is_fingerprinted_and_replayed() {
    let certs = certs();
    let acceptor = FingerprintAcceptor::new(server_config(&certs));
    let client = client_config(&certs, &[b"h2", b"http/1.1"], false);
    // Reads of 3, 1, 4, 1, 5, 9, 2, 6 bytes, over the same hello cut into
    // 37-byte records by a relay between client and acceptor (rustls
    // reassembles such a hello too).
    let (c, relay_client) = tokio::io::duplex(64 * 1024);
    let (relay_server, s) = tokio::io::duplex(64 * 1024);
    tokio::spawn(reframe_first_record(relay_client, relay_server, 37));
    handshake_through(
        &acceptor,
        client,
        c,
        Trickle::new(s, &[3, 1, 4, 1, 5, 9, 2, 6]),
    )
    .await;
}

/// Relays bytes between `client` and `server`, with the client's first
/// record (its ClientHello) cut into records of at most `size` bytes.
async fn reframe_first_record(
    mut client: tokio::io::DuplexStream,
    mut server: tokio::io::DuplexStream,
    size: usize,
) {
    let mut header = [0u8; 5];
    client.read_exact(&mut header).await.unwrap();
    let mut body = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
    client.read_exact(&mut body).await.unwrap();
    for part in body.chunks(size) {
        server.write_all(&header[..3]).await.unwrap();
        server
            .write_all(&(part.len() as u16).to_be_bytes())
            .await
            .unwrap();
        server.write_all(part).await.unwrap();
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

/// Past the listener's cap on handshakes in progress, new connections wait
/// (in the kernel's backlog) for a slot, and get one as soon as a slot
/// frees. Real sockets, paused time: the idle clients' deadline (60 s)
/// never passes in the test.
#[tokio::test(start_paused = true)]
async fn handshakes_past_the_cap_wait_for_a_free_slot() {
    let certs = certs();
    let acceptor = FingerprintAcceptor::new(server_config(&certs)).timeout(Duration::from_secs(60));
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let _listener = TlsListener::with_max_handshakes(tcp, acceptor, 2);
    // Two clients that connect and say nothing hold both slots.
    let idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    let connector = TlsConnector::from(client_config(&certs, &[b"http/1.1"], false));
    let third = tokio::spawn(async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        connector.connect(name(), tcp).await
    });
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        !third.is_finished(),
        "a third handshake went ahead with two of two slots taken: {:?}",
        third.await
    );
    // One idle client hangs up: its slot goes to the waiting one.
    drop(idle);
    let tls = tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .expect("the waiting handshake got the freed slot")
        .unwrap();
    assert!(tls.is_ok(), "{tls:?}");
}

/// Every accepted connection has `TCP_NODELAY` set, so the handshake's
/// flights and a response's head and body are not held by Nagle's
/// algorithm until the client's delayed ACK.
#[tokio::test]
async fn an_accepted_connection_has_nodelay_set() {
    let certs = certs();
    let acceptor = FingerprintAcceptor::new(server_config(&certs));
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    let mut incoming = throttle_fleet_tls::TlsIncoming::new(tcp, acceptor);
    let connector = TlsConnector::from(client_config(&certs, &[b"http/1.1"], false));
    let client = tokio::spawn(async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        connector.connect(name(), tcp).await.unwrap()
    });
    let conn = incoming.accept().await;
    let _client = client.await.unwrap();
    let (rewind, _) = conn.get_ref().get_ref();
    assert!(rewind.get_ref().nodelay().unwrap(), "TCP_NODELAY is set");
}

#[tokio::test(start_paused = true)]
async fn a_client_that_sends_nothing_times_out() {
    let certs = certs();
    let acceptor = FingerprintAcceptor::new(server_config(&certs)).timeout(Duration::from_secs(5));
    let (_client, server) = tokio::io::duplex(1024);
    let accepted = acceptor.accept(server).await;
    assert!(
        matches!(accepted, Err(AcceptError::Timeout)),
        "{accepted:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_inside_its_hello_times_out() {
    let certs = certs();
    let acceptor = FingerprintAcceptor::new(server_config(&certs)).timeout(Duration::from_secs(5));
    let (mut client, server) = tokio::io::duplex(1024);
    let hello = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/curl.bin"
    ))
    .unwrap();
    client.write_all(&hello[..100]).await.unwrap();
    let accepted = acceptor.accept(server).await;
    assert!(
        matches!(accepted, Err(AcceptError::Timeout)),
        "{accepted:?}"
    );
}

#[tokio::test]
async fn truncated_garbage_and_oversized_hellos_are_refused() {
    let certs = certs();
    let acceptor = FingerprintAcceptor::new(server_config(&certs));
    let hello = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/vectors/curl.bin"
    ))
    .unwrap();
    let mut oversized = vec![22, 3, 1, 0x40, 0, 1, 0x01, 0, 0];
    oversized.resize(20_000, 0);
    let cases: [(&[u8], HelloError); 4] = [
        (&hello[..hello.len() - 1], HelloError::Truncated),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", HelloError::NotTls),
        (&oversized, HelloError::TooLarge),
        (&[22, 3, 1, 0, 5, 1, 0, 0, 1, 0xff], HelloError::Malformed),
    ];
    for (bytes, expected) in cases {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        client.write_all(bytes).await.unwrap();
        client.shutdown().await.unwrap();
        let accepted = acceptor.accept(server).await;
        match accepted {
            Err(AcceptError::Hello(e)) => assert_eq!(e, expected),
            other => panic!("{expected:?}: {other:?}"),
        }
    }
}

/// A stream whose reads return at most as many bytes as `sizes` says, in
/// turn and over again: a hello in many TCP segments.
struct Trickle<S> {
    inner: S,
    sizes: &'static [usize],
    next: usize,
}

impl<S> Trickle<S> {
    fn new(inner: S, sizes: &'static [usize]) -> Self {
        Self {
            inner,
            sizes,
            next: 0,
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Trickle<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        let size = this.sizes[this.next % this.sizes.len()];
        let mut small = [0u8; 16];
        let mut part = tokio::io::ReadBuf::new(&mut small[..buf.remaining().min(size)]);
        let poll = std::pin::Pin::new(&mut this.inner).poll_read(cx, &mut part);
        if !part.filled().is_empty() {
            this.next += 1;
        }
        buf.put_slice(part.filled());
        poll
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Trickle<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The rustls client these tests use still sends the hello of the
/// committed vector `vectors/rustls.bin` (same JA4), so the vector checked
/// against the independent implementation describes the rustls in use.
/// With `$CAPTURE_RUSTLS_HELLO` set, the hello is also written there (how
/// the vector was made; see `vectors/README.md`).
#[tokio::test]
async fn the_rustls_vector_is_what_rustls_sends() {
    let certs = certs();
    let client = client_config(&certs, &[b"h2", b"http/1.1"], false);
    let (c, mut s) = tokio::io::duplex(64 * 1024);
    tokio::spawn(throttle_fleet_tls::tokio_rustls::TlsConnector::from(client).connect(name(), c));
    let mut buf = vec![0u8; 64 * 1024];
    let n = s.read(&mut buf).await.unwrap();
    if let Some(path) = std::env::var_os("CAPTURE_RUSTLS_HELLO") {
        std::fs::write(path, &buf[..n]).unwrap();
    }
    let committed = include_bytes!("vectors/rustls.bin");
    assert_eq!(
        throttle_fleet_tls::Ja4::from_records(&buf[..n])
            .unwrap()
            .as_str(),
        throttle_fleet_tls::Ja4::from_records(committed)
            .unwrap()
            .as_str(),
        "rustls sends another ClientHello than the committed vector: capture it again"
    );
}
