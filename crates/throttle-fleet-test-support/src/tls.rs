//! TLS helpers: a self-signed certificate for `localhost`, rustls server
//! and client configurations (ring), and an HTTPS client over tokio-rustls
//! and hyper that reports the fingerprint the server saw.

use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::{
    self, ClientConfig, RootCertStore, ServerConfig,
    crypto::ring,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName},
};

/// A self-signed certificate and its key.
pub struct Certs {
    /// The certificate (DER), for `localhost`.
    pub cert: CertificateDer<'static>,
    /// Its private key (PKCS#8 DER).
    pub key: PrivatePkcs8KeyDer<'static>,
}

/// A fresh self-signed certificate for `localhost`.
pub fn certs() -> Certs {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    Certs {
        cert: c.cert.der().clone(),
        key: PrivatePkcs8KeyDer::from(c.signing_key.serialize_der()),
    }
}

/// A rustls server presenting `certs`, offering ALPN `h2` and `http/1.1`.
pub fn server_config(certs: &Certs) -> Arc<ServerConfig> {
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![certs.cert.clone()],
            PrivateKeyDer::Pkcs8(certs.key.clone_key()),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// A rustls client trusting `certs`, offering `alpn`; `narrow` offers one
/// cipher suite only, so its fingerprint differs from the default's.
pub fn client_config(certs: &Certs, alpn: &[&[u8]], narrow: bool) -> Arc<ClientConfig> {
    let mut provider = ring::default_provider();
    if narrow {
        provider.cipher_suites = vec![ring::cipher_suite::TLS13_AES_128_GCM_SHA256];
    }
    let mut roots = RootCertStore::empty();
    roots.add(certs.cert.clone()).unwrap();
    let mut config = ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    // A resumed session adds `pre_shared_key` to the hello, which changes
    // its JA4; these clients reconnect afresh (see the guide's keys chapter).
    config.resumption = rustls::client::Resumption::disabled();
    Arc::new(config)
}

/// The server name the certificate is for (`localhost`).
pub fn name() -> ServerName<'static> {
    ServerName::try_from("localhost").unwrap()
}

/// What [`fetch`] got.
pub struct Answer {
    /// The response status.
    pub status: http::StatusCode,
    /// The `x-tls-fingerprint` header the test server echoes, if any.
    pub fingerprint: Option<String>,
    /// The HTTP version the response came in.
    pub version: http::Version,
}

/// One GET `/` on a new connection; HTTP/2 when the server picked `h2`.
pub async fn fetch(client: Arc<ClientConfig>, addr: SocketAddr) -> Answer {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = TlsConnector::from(client)
        .connect(name(), tcp)
        .await
        .unwrap();
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let io = TokioIo::new(tls);
    let req = http::Request::get(format!("https://localhost:{}/", addr.port()))
        .header("user-agent", "throttle-fleet-tls-test")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = if h2 {
        let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
            .await
            .unwrap();
        tokio::spawn(conn);
        send.send_request(req).await.unwrap()
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        send.send_request(req).await.unwrap()
    };
    Answer {
        status: resp.status(),
        fingerprint: resp
            .headers()
            .get("x-tls-fingerprint")
            .map(|v| v.to_str().unwrap().to_owned()),
        version: resp.version(),
    }
}
