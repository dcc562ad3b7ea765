//! TLS Redis servers for the tests: a CA made for the test, a server
//! certificate it signs for `localhost` and `127.0.0.1`, a client
//! certificate it signs (mutual TLS), and a second CA that signed nothing
//! here (a wrong CA), all written as PEM files in a temp dir of their own;
//! the `redis-server` arguments that make a server speak TLS only (no
//! plain port); and the harness's own queries over TLS.
//!
//! ```ignore
//! let files = TlsFiles::generate();
//! let redis = RedisServer::start_tls(ServerTls::new(&files), &[]);   // redis.url() is rediss://
//! let config = RedisConfig::standalone(redis.url()).tls_ca_file(&files.ca);
//! ```

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::resp::Reply;

/// PEM files for a TLS Redis, in a temp dir removed on drop.
#[derive(Debug)]
pub struct TlsFiles {
    dir: PathBuf,
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// The server's certificate (for `localhost` and `127.0.0.1`).
    pub server_cert: PathBuf,
    /// The server's private key.
    pub server_key: PathBuf,
    /// A client certificate the CA signed (mutual TLS).
    pub client_cert: PathBuf,
    /// Its private key.
    pub client_key: PathBuf,
    /// A CA that signed none of these: a client trusting it refuses the
    /// server.
    pub other_ca: PathBuf,
}

impl Drop for TlsFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(feature = "redis-tls")]
impl TlsFiles {
    /// A fresh CA, server and client certificates, and a wrong CA.
    pub fn generate() -> Arc<Self> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        use std::sync::atomic::{AtomicU64, Ordering};

        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "throttle-fleet-tls-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = |name: &str| {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name.push(DnType::CommonName, name);
            params.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
        };
        let issuer = ca("throttle test CA");
        let other = ca("throttle test CA (another)");
        let signed = |names: Vec<String>, cn: &str| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(names).unwrap();
            params.distinguished_name.push(DnType::CommonName, cn);
            let cert = params.signed_by(&key, &*issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = signed(
            vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
            "localhost",
        );
        let (client_cert, client_key) = signed(Vec::new(), "throttle-client");
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        Arc::new(Self {
            ca: write("ca.pem", &issuer.pem()),
            server_cert: write("server.pem", &server_cert),
            server_key: write("server-key.pem", &server_key),
            client_cert: write("client.pem", &client_cert),
            client_key: write("client-key.pem", &client_key),
            other_ca: write("other-ca.pem", &other.pem()),
            dir,
        })
    }
}

/// How a server speaks TLS: its files, and whether it asks clients for a
/// certificate (`tls-auth-clients`).
#[derive(Debug, Clone)]
pub struct ServerTls {
    files: Arc<TlsFiles>,
    auth_clients: bool,
}

impl ServerTls {
    /// TLS with `files`, client certificates not asked for.
    pub fn new(files: &Arc<TlsFiles>) -> Self {
        Self {
            files: files.clone(),
            auth_clients: false,
        }
    }

    /// Asks every client for a certificate the CA signed (mutual TLS).
    pub fn auth_clients(mut self) -> Self {
        self.auth_clients = true;
        self
    }

    /// The files.
    pub fn files(&self) -> &Arc<TlsFiles> {
        &self.files
    }

    /// The `redis-server` arguments for TLS on `port` and no plain port;
    /// a cluster node also speaks TLS on its bus and to its primary.
    pub(crate) fn server_args(&self, port: u16, cluster: bool) -> Vec<String> {
        let f = &self.files;
        let mut args = vec![
            "--port".to_owned(),
            "0".to_owned(),
            "--tls-port".to_owned(),
            port.to_string(),
            "--tls-cert-file".to_owned(),
            f.server_cert.display().to_string(),
            "--tls-key-file".to_owned(),
            f.server_key.display().to_string(),
            "--tls-ca-cert-file".to_owned(),
            f.ca.display().to_string(),
            "--tls-auth-clients".to_owned(),
            if self.auth_clients { "yes" } else { "no" }.to_owned(),
        ];
        if cluster {
            args.extend(
                ["--tls-cluster", "yes", "--tls-replication", "yes"]
                    .iter()
                    .map(|s| s.to_string()),
            );
        }
        args
    }

    /// `redis-cli`'s arguments to reach such a server (it always shows the
    /// client certificate: a server that does not ask ignores it).
    pub(crate) fn cli_args(&self) -> Vec<String> {
        let f = &self.files;
        vec![
            "--tls".to_owned(),
            "--cacert".to_owned(),
            f.ca.display().to_string(),
            "--cert".to_owned(),
            f.client_cert.display().to_string(),
            "--key".to_owned(),
            f.client_key.display().to_string(),
        ]
    }
}

/// Sends `request` (RESP) to the TLS server on `port` over a fresh
/// connection and reads one reply.
#[cfg(feature = "redis-tls")]
pub(crate) fn query(
    tls: &ServerTls,
    port: u16,
    request: &[u8],
    timeout: Duration,
) -> io::Result<Reply> {
    use std::io::{BufReader, Write};
    use std::net::{Ipv4Addr, SocketAddr, TcpStream};

    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let tcp = TcpStream::connect_timeout(&addr, timeout)?;
    tcp.set_read_timeout(Some(timeout))?;
    tcp.set_write_timeout(Some(timeout))?;
    tcp.set_nodelay(true)?;
    let name = rustls::pki_types::ServerName::try_from("localhost").map_err(io::Error::other)?;
    let conn =
        rustls::ClientConnection::new(client_config(&tls.files), name).map_err(io::Error::other)?;
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    stream.write_all(request)?;
    stream.flush()?;
    crate::resp::read_reply(&mut BufReader::new(stream))
}

#[cfg(not(feature = "redis-tls"))]
pub(crate) fn query(_: &ServerTls, _: u16, _: &[u8], _: Duration) -> io::Result<Reply> {
    // A `ServerTls` has files only where `TlsFiles::generate` exists.
    Err(io::Error::other("TLS servers need the redis-tls feature"))
}

/// The harness's client: trusts the CA, shows the client certificate.
#[cfg(feature = "redis-tls")]
fn client_config(files: &TlsFiles) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&files.ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let chain = CertificateDer::pem_file_iter(&files.client_cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&files.client_key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .unwrap(),
    )
}
