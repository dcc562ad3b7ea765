//! TLS to Redis: which roots verify the servers of `rediss://` URLs (the
//! platform's, or a CA file) and the client certificate shown to servers
//! that ask for one (mutual TLS). The files are read when the backend
//! connects, so a backend built again reads them again; each node is
//! verified against its own host name (the URL's, or the one a Cluster
//! announces), which is also what it is sent as SNI.

#[cfg(feature = "tls")]
use std::path::Path;
use std::path::PathBuf;

use redis::{ConnectionAddr, ConnectionInfo};
use throttle_fleet_core::ConfigError;

use crate::RedisConfig;

/// The TLS settings of a [`RedisConfig`]: paths only (a key is never held
/// here, and never printed).
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    ca_file: Option<PathBuf>,
    client_cert: Option<(PathBuf, PathBuf)>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let roots = match &self.ca_file {
            Some(path) => format!("ca file {}", path.display()),
            None => "platform roots".to_owned(),
        };
        f.debug_struct("Tls")
            .field("roots", &roots)
            .field("client_cert", &self.client_cert.as_ref().map(|(c, _)| c))
            .finish()
    }
}

impl RedisConfig {
    /// Verifies the servers of `rediss://` URLs against the CA
    /// certificates in this PEM file instead of the platform's roots (a
    /// private CA, as most managed Redis services and self-run ones use).
    /// The file is read when the backend connects; an unreadable file, or
    /// one without a certificate, is an error naming `redis.tls_ca_file`.
    /// Each node's certificate must name the host the backend dials it by
    /// (the URL's host, or the address a Cluster announces for the nodes
    /// it discovers).
    ///
    /// Needs the `tls` feature; a `redis://` URL with this setting is an
    /// error (it would do nothing).
    ///
    /// ```
    /// use throttle_fleet_redis::RedisConfig;
    ///
    /// let config = RedisConfig::standalone("rediss://redis.internal:6380")
    ///     .tls_ca_file("/etc/throttle/redis-ca.pem");
    /// # let _ = config;
    /// ```
    #[must_use]
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca_file = Some(path.into());
        self
    }

    /// Shows this certificate chain and its private key (PEM files) to
    /// servers that ask for a client certificate (mutual TLS: Redis's
    /// `tls-auth-clients yes`). Read when the backend connects; errors
    /// name `redis.tls_cert_file` or `redis.tls_key_file`, and a key that
    /// does not match the certificate is one.
    ///
    /// ```
    /// use throttle_fleet_redis::RedisConfig;
    ///
    /// let config = RedisConfig::standalone("rediss://redis.internal:6380")
    ///     .tls_ca_file("/etc/throttle/redis-ca.pem")
    ///     .tls_client_cert("/etc/throttle/client.pem", "/etc/throttle/client-key.pem");
    /// # let _ = config;
    /// ```
    #[must_use]
    pub fn tls_client_cert(
        mut self,
        cert_file: impl Into<PathBuf>,
        key_file: impl Into<PathBuf>,
    ) -> Self {
        self.tls.client_cert = Some((cert_file.into(), key_file.into()));
        self
    }
}

impl TlsSettings {
    /// `info` (from the URL in `field`) with these settings: the CA and
    /// client certificate read and set on a `rediss://` address; a setting
    /// on a plain address is an error, as is a `rediss://` URL in a build
    /// without TLS.
    pub(crate) fn apply(
        &self,
        info: ConnectionInfo,
        field: &str,
    ) -> Result<ConnectionInfo, ConfigError> {
        if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
            let set = if self.ca_file.is_some() {
                Some("redis.tls_ca_file")
            } else if self.client_cert.is_some() {
                Some("redis.tls_cert_file")
            } else {
                None
            };
            return match set {
                Some(setting) => Err(ConfigError::new(
                    setting,
                    format!("applies only to rediss:// URLs (TLS), and {field} is not one"),
                )),
                None => Ok(info),
            };
        }
        self.certificates(info)
    }

    #[cfg(not(feature = "tls"))]
    fn certificates(&self, _: ConnectionInfo) -> Result<ConnectionInfo, ConfigError> {
        // `endpoint::parse` refuses `rediss://` without the feature first.
        Err(ConfigError::new("redis.url", needs_feature()))
    }

    #[cfg(feature = "tls")]
    fn certificates(&self, info: ConnectionInfo) -> Result<ConnectionInfo, ConfigError> {
        use redis::{ClientTlsConfig, TlsCertificates};

        let root_cert = match &self.ca_file {
            Some(path) => read_certificates(path, "redis.tls_ca_file")?,
            None => platform_roots()?,
        };
        let root_cert = Some(root_cert);
        let client_tls = match &self.client_cert {
            Some((cert, key)) => {
                let client_cert = read_certificates(cert, "redis.tls_cert_file")?;
                let client_key = read_key(key)?;
                check_pair(&client_cert, &client_key)?;
                Some(ClientTlsConfig {
                    client_cert,
                    client_key,
                })
            }
            None => None,
        };
        let certificates = TlsCertificates {
            client_tls,
            root_cert,
        };
        redis::Client::build_with_tls(info, certificates)
            .map(|client| client.get_connection_info().clone())
            .map_err(|e| {
                let field = if self.ca_file.is_some() {
                    "redis.tls_ca_file"
                } else {
                    "redis.tls_cert_file"
                };
                ConfigError::new(field, format!("cannot be used ({:?})", e.kind()))
            })
    }
}

/// The platform's root certificates as PEM, read now: once per backend,
/// not at every dial (see the `tls` feature in Cargo.toml).
#[cfg(feature = "tls")]
fn platform_roots() -> Result<Vec<u8>, ConfigError> {
    use base64::Engine as _;

    let found = rustls_native_certs::load_native_certs();
    if found.certs.is_empty() {
        let why = found
            .errors
            .first()
            .map_or_else(|| "none found".to_owned(), ToString::to_string);
        return Err(ConfigError::new(
            "redis.tls_ca_file",
            format!("is needed: the platform's root certificates cannot be read ({why})"),
        ));
    }
    let mut pem = Vec::with_capacity(found.certs.len() * 2048);
    for cert in &found.certs {
        let text = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        pem.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
        for line in text.as_bytes().chunks(64) {
            pem.extend_from_slice(line);
            pem.push(b'\n');
        }
        pem.extend_from_slice(b"-----END CERTIFICATE-----\n");
    }
    Ok(pem)
}

/// What a `rediss://` URL in a build without TLS is told.
pub(crate) fn needs_feature() -> &'static str {
    "is a rediss:// URL (TLS), which needs the `tls` feature of throttle-fleet-redis \
     (`redis-tls` of throttle-fleet)"
}

#[cfg(feature = "tls")]
fn read(path: &Path, field: &'static str) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path)
        .map_err(|e| ConfigError::new(field, format!("{} cannot be read: {e}", path.display())))
}

/// The PEM file's bytes, once it is known to hold at least one
/// certificate and no block that fails to parse.
#[cfg(feature = "tls")]
fn read_certificates(path: &Path, field: &'static str) -> Result<Vec<u8>, ConfigError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    let pem = read(path, field)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ConfigError::new(field, format!("{} is not PEM: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(ConfigError::new(
            field,
            format!("{} holds no CERTIFICATE block", path.display()),
        ));
    }
    Ok(pem)
}

#[cfg(feature = "tls")]
fn read_key(path: &Path) -> Result<Vec<u8>, ConfigError> {
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;

    let field = "redis.tls_key_file";
    let pem = read(path, field)?;
    // The error names the file, never the key's bytes.
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| {
        ConfigError::new(
            field,
            format!("{} holds no PEM private key", path.display()),
        )
    })?;
    Ok(pem)
}

/// Whether the key is the certificate's: checked once here, where the
/// error can name the field, not at every connection.
#[cfg(feature = "tls")]
fn check_pair(cert: &[u8], key: &[u8]) -> Result<(), ConfigError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_default();
    let Ok(key) = PrivateKeyDer::from_pem_slice(key) else {
        return Ok(());
    };
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            b.with_root_certificates(rustls::RootCertStore::empty())
                .with_client_auth_cert(chain, key)
        })
        .map(drop)
        .map_err(|e| {
            ConfigError::new(
                "redis.tls_key_file",
                format!("cannot be used with tls_cert_file: {e}"),
            )
        })
}
