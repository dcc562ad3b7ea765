//! The `[jwt]` and `[tls]` tables: keys, certificates, and what a hello
//! that cannot be read gets.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::{Loader, Result};
use crate::file;
use crate::model::{InvalidHello, JwtConfig, TlsConfig, TlsIdentity};

impl Loader<'_> {
    pub(super) fn jwt(&self, raw: &file::Jwt) -> Result<JwtConfig> {
        let algorithm = raw.algorithm.get_ref().as_str();
        let hmac = match algorithm {
            "HS256" => true,
            "RS256" | "ES256" => false,
            other => {
                return Err(self.err(
                    "jwt.algorithm",
                    raw.algorithm.span(),
                    format!(
                        "must be HS256, RS256 or ES256 (got {other:?}; `none` is never accepted)"
                    ),
                ));
            }
        };
        let mut config = JwtConfig {
            algorithm: algorithm.to_owned(),
            secret: None,
            public_key_file: None,
            audience: raw.audience.as_ref().map(|v| v.get_ref().clone()),
            issuer: raw.issuer.as_ref().map(|v| v.get_ref().clone()),
        };
        match (hmac, &raw.secret_env, &raw.public_key_file) {
            (true, Some(var), None) => {
                let secret = std::env::var_os(var.get_ref()).unwrap_or_default();
                if secret.is_empty() {
                    return Err(self.err(
                        "jwt.secret_env",
                        var.span(),
                        format!("names {:?}, which is not set or empty", var.get_ref()),
                    ));
                }
                config.secret = Some(secret.into_encoded_bytes());
            }
            (false, None, Some(file)) => {
                let path = self.path(file.get_ref());
                if !path.is_file() {
                    return Err(self.err(
                        "jwt.public_key_file",
                        file.span(),
                        format!("{:?} is not a readable file", file.get_ref()),
                    ));
                }
                config.public_key_file = Some(path);
            }
            (true, _, _) => {
                return Err(self.err(
                    "jwt.secret_env",
                    raw.algorithm.span(),
                    "HS256 needs secret_env (the environment variable holding the secret) and no public_key_file",
                ));
            }
            (false, _, _) => {
                return Err(self.err(
                    "jwt.public_key_file",
                    raw.algorithm.span(),
                    format!(
                        "{algorithm} needs public_key_file (a PEM public key) and no secret_env"
                    ),
                ));
            }
        }
        Ok(config)
    }

    pub(super) fn tls(&self, raw: &file::Tls, span: Range<usize>) -> Result<TlsConfig> {
        let self_signed = raw.self_signed.as_ref().is_some_and(|v| *v.get_ref());
        let identity = match (&raw.cert_file, &raw.key_file, self_signed) {
            (Some(cert), Some(key), false) => self.pem_identity(cert, key)?,
            (None, None, true) => TlsIdentity::SelfSigned,
            (Some(cert), _, true) | (_, Some(cert), true) => {
                return Err(self.err(
                    "tls.self_signed",
                    cert.span(),
                    "give either cert_file and key_file or self_signed = true, not both",
                ));
            }
            (Some(_), None, false) => {
                return Err(self.err(
                    "tls.key_file",
                    span,
                    "cert_file needs key_file (the certificate's PEM private key)",
                ));
            }
            (None, _, false) => {
                return Err(self.err(
                    "tls.cert_file",
                    span,
                    "[tls] needs cert_file and key_file (PEM), or self_signed = true to try it out",
                ));
            }
        };
        let handshake_timeout = match &raw.handshake_timeout_secs {
            None => Duration::from_secs(5),
            Some(v) => {
                Duration::from_secs(self.int("tls.handshake_timeout_secs", v, 1, 60)? as u64)
            }
        };
        let invalid_hello = match raw.invalid_hello.as_ref() {
            None => InvalidHello::default(),
            Some(v) => match v.get_ref().as_str() {
                "close" => InvalidHello::Close,
                "proceed" => InvalidHello::Proceed,
                other => {
                    return Err(self.err(
                        "tls.invalid_hello",
                        v.span(),
                        format!("must be \"close\" or \"proceed\" (got {other:?})"),
                    ));
                }
            },
        };
        Ok(TlsConfig {
            identity,
            handshake_timeout,
            invalid_hello,
        })
    }

    /// Reads and parses the PEM files now, so that a wrong file is an
    /// error pointing at its name in the configuration.
    pub(super) fn pem_identity(
        &self,
        cert: &Spanned<String>,
        key: &Spanned<String>,
    ) -> Result<TlsIdentity> {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};

        let cert_file = self.path(cert.get_ref());
        let key_file = self.path(key.get_ref());
        let unreadable = |field: &str, value: &Spanned<String>, e: &dyn std::fmt::Display| {
            self.err(
                field,
                value.span(),
                format!("{:?} cannot be read as PEM: {e}", value.get_ref()),
            )
        };
        let cert_chain = CertificateDer::pem_file_iter(&cert_file)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| unreadable("tls.cert_file", cert, &e))?;
        if cert_chain.is_empty() {
            return Err(self.err(
                "tls.cert_file",
                cert.span(),
                format!("{:?} holds no CERTIFICATE block", cert.get_ref()),
            ));
        }
        let key_der = PrivateKeyDer::from_pem_file(&key_file)
            .map_err(|e| unreadable("tls.key_file", key, &e))?;
        Ok(TlsIdentity::Pem {
            cert_file,
            key_file,
            cert_chain,
            key: std::sync::Arc::new(key_der),
        })
    }
}

impl Loader<'_> {
    /// The text of the secret file `written` names (relative to the
    /// configuration file), for `field`: an error naming it when the file
    /// cannot be read or holds more than `max_bytes`. The text is never
    /// quoted in an error.
    pub(super) fn secret_file(
        &self,
        written: &Spanned<String>,
        field: &str,
        max_bytes: u64,
    ) -> Result<String> {
        let path = self.path(written.get_ref());
        let unreadable = |why: String| {
            self.err(
                field,
                written.span(),
                format!("{:?} cannot be read: {why}", written.get_ref()),
            )
        };
        let len = std::fs::metadata(&path)
            .map_err(|e| unreadable(e.to_string()))?
            .len();
        if len > max_bytes {
            return Err(unreadable(format!("it is larger than {max_bytes} bytes")));
        }
        std::fs::read_to_string(&path).map_err(|e| unreadable(e.to_string()))
    }
}
