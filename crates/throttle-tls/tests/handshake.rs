//! Real TLS handshakes through the acceptor: the fingerprint reaches every
//! request, keys are per TLS stack, and hostile clients are refused.

mod support;

use std::time::Duration;

use axum::http::HeaderMap;
use axum::{Router, routing::get};
use http::StatusCode;
use throttle_axum::{ClientIp, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
use throttle_tls::axum::{TlsListener, make_service};
use throttle_tls::{AcceptError, Fingerprint, FingerprintAcceptor, HelloError, Ja4, OnInvalid};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::*;

async fn echo(fingerprint: Option<axum::Extension<Fingerprint>>) -> (HeaderMap, &'static str) {
    let mut headers = HeaderMap::new();
    if let Some(axum::Extension(f)) = fingerprint {
        headers.insert("x-tls-fingerprint", f.ja4().as_str().parse().unwrap());
    }
    (headers, "ok\n")
}

/// An HTTPS server limiting `/` to 2 requests a minute per
/// (/24 prefix, JA4).
async fn serve(acceptor: FingerprintAcceptor) -> std::net::SocketAddr {
    let quota = Quota::new(2, Duration::from_secs(60));
    let key = (
        ClientIp::default().ipv4_prefix(24),
        throttle_tls::TlsFingerprint::ja4(),
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
    let connect = throttle_tls::tokio_rustls::TlsConnector::from(client).connect(name(), client_io);
    let (_, accepted) = tokio::join!(connect, small.accept(server_io));
    assert!(
        matches!(accepted, Err(AcceptError::Hello(HelloError::TooLarge))),
        "{accepted:?}"
    );
}

#[tokio::test]
async fn a_hello_arriving_a_few_bytes_at_a_time_is_fingerprinted_and_replayed() {
    let certs = certs();
    let acceptor = FingerprintAcceptor::new(server_config(&certs));
    let client = client_config(&certs, &[b"h2"], false);
    let expected = {
        let (c, mut s) = tokio::io::duplex(64 * 1024);
        let connect =
            throttle_tls::tokio_rustls::TlsConnector::from(client.clone()).connect(name(), c);
        tokio::spawn(connect);
        let mut buf = vec![0u8; 64 * 1024];
        let n = s.read(&mut buf).await.unwrap();
        Ja4::from_records(&buf[..n]).unwrap()
    };
    // Every read the acceptor makes returns at most 7 bytes.
    let (c, s) = tokio::io::duplex(64 * 1024);
    let connect = throttle_tls::tokio_rustls::TlsConnector::from(client).connect(name(), c);
    let (connected, accepted) = tokio::join!(connect, acceptor.accept(Trickle(s)));
    let (mut server, fingerprint) = accepted.unwrap();
    let mut client = connected.unwrap();
    assert_eq!(fingerprint.unwrap().ja4(), &expected);
    client.write_all(b"ping").await.unwrap();
    client.flush().await.unwrap();
    let mut got = [0u8; 4];
    server.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"ping");
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

/// A stream whose reads return at most 7 bytes: a hello in many segments.
struct Trickle<S>(S);

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Trickle<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let mut small = [0u8; 7];
        let mut part = tokio::io::ReadBuf::new(&mut small[..buf.remaining().min(7)]);
        let poll = std::pin::Pin::new(&mut self.0).poll_read(cx, &mut part);
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
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
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
    tokio::spawn(throttle_tls::tokio_rustls::TlsConnector::from(client).connect(name(), c));
    let mut buf = vec![0u8; 64 * 1024];
    let n = s.read(&mut buf).await.unwrap();
    if let Some(path) = std::env::var_os("CAPTURE_RUSTLS_HELLO") {
        std::fs::write(path, &buf[..n]).unwrap();
    }
    let committed = include_bytes!("vectors/rustls.bin");
    assert_eq!(
        throttle_tls::Ja4::from_records(&buf[..n]).unwrap().as_str(),
        throttle_tls::Ja4::from_records(committed).unwrap().as_str(),
        "rustls sends another ClientHello than the committed vector: capture it again"
    );
}
