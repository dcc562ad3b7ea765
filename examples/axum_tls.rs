//! HTTPS with the unauthenticated composite key: address prefix + TLS
//! fingerprint (JA4) + User-Agent.
//!
//! Run with `cargo run -p throttle-fleet-suite --example axum_tls`, then:
//!
//! ```text
//! curl -sk -D - https://127.0.0.1:3443/ -o /dev/null
//! curl -sk --http1.1 -D - https://127.0.0.1:3443/ -o /dev/null
//! openssl s_client -connect 127.0.0.1:3443 -alpn http/1.1 -quiet <<< $'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
//! ```
//!
//! Each answer carries `x-tls-fingerprint` (the client's JA4). `/` admits 5
//! requests a minute per (IPv4 /24, JA4, User-Agent): the sixth curl gets
//! `429`, while openssl, another TLS stack from the same address, still gets
//! `200`. The certificate is self-signed and made at start (hence `-k`).
//! The address is `127.0.0.1:3443` unless `THROTTLE_LISTEN` says otherwise.

#[path = "support/logs.rs"]
mod logs;

use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::{Extension, Router, routing::get};
use throttle_fleet_axum::key::{Global, UserAgentHash};
use throttle_fleet_axum::{
    ClientIp, KeyExtractorExt, MemoryBackend, Policy, Quota, Rule, ThrottleLayer,
};
use throttle_fleet_tls::axum::{TlsListener, make_service};
use throttle_fleet_tls::tokio_rustls::rustls::{
    ServerConfig,
    crypto::ring,
    pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer},
};
use throttle_fleet_tls::{Fingerprint, FingerprintAcceptor, TlsFingerprint};

async fn hello(fingerprint: Option<Extension<Fingerprint>>) -> (HeaderMap, &'static str) {
    let mut headers = HeaderMap::new();
    if let Some(Extension(f)) = fingerprint
        && let Ok(value) = f.ja4().as_str().parse()
    {
        headers.insert("x-tls-fingerprint", value);
    }
    (headers, "Hello over TLS!\n")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    logs::init();
    let addr = std::env::var("THROTTLE_LISTEN").unwrap_or_else(|_| "127.0.0.1:3443".to_owned());

    // A /24 alone would lock out a whole carrier-grade NAT pool; with the
    // TLS stack and the User-Agent, one bot no longer shares its bucket
    // with every phone behind the same address. A request without a
    // User-Agent shares the (prefix, JA4) bucket of the others without one
    // (UserAgentHash alone would answer it 400).
    let unauthenticated = (
        ClientIp::default().ipv4_prefix(24),
        TlsFingerprint::ja4(),
        UserAgentHash.or(Global),
    );
    let quota = Quota::new(5, Duration::from_secs(60));
    let policy = Policy::new().rule(
        Rule::new("unauthenticated", quota).fixed_window(),
        unauthenticated,
    );
    let app = Router::new()
        .route("/", get(hello))
        .layer(ThrottleLayer::new(policy, MemoryBackend::default())?);

    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
    let mut tls = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];

    let acceptor = FingerprintAcceptor::new(Arc::new(tls)).timeout(Duration::from_secs(5));
    let tcp = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on https://{}", tcp.local_addr()?);
    axum::serve(TlsListener::new(tcp, acceptor), make_service(app))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
