//! `[tls]`: the rustls configuration and the acceptor that reads each
//! client's ClientHello fingerprint before the handshake.

use std::sync::Arc;

use throttle_fleet_config::{ConfigFileError, InvalidHello, TlsConfig, TlsIdentity};
use throttle_fleet_tls::tokio_rustls::rustls::{
    ServerConfig,
    crypto::ring,
    pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer},
};
use throttle_fleet_tls::{FingerprintAcceptor, OnInvalid};

/// The acceptor `[tls]` describes; `file` names the configuration in
/// errors. The gateway speaks HTTP/1.1, so that is the only ALPN offered.
pub(crate) fn acceptor(
    config: &TlsConfig,
    file: &str,
) -> Result<FingerprintAcceptor, ConfigFileError> {
    let (chain, key) = match &config.identity {
        TlsIdentity::Pem {
            cert_chain, key, ..
        } => (cert_chain.clone(), key.clone_key()),
        TlsIdentity::SelfSigned => {
            let made = rcgen::generate_simple_self_signed(vec![
                "localhost".to_owned(),
                "127.0.0.1".to_owned(),
            ])
            .map_err(|e| {
                ConfigFileError::in_file(file, None, "tls.self_signed", format!("failed: {e}"))
            })?;
            let key =
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(made.signing_key.serialize_der()));
            (vec![made.cert.der().clone()], key)
        }
    };
    let mut tls = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigFileError::in_file(file, None, "tls", e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            ConfigFileError::in_file(
                file,
                None,
                "tls.key_file",
                format!("does not go with the certificate: {e}"),
            )
        })?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(FingerprintAcceptor::new(Arc::new(tls))
        .timeout(config.handshake_timeout)
        .on_invalid(match config.invalid_hello {
            InvalidHello::Close => OnInvalid::Close,
            InvalidHello::Proceed => OnInvalid::Proceed,
        }))
}
