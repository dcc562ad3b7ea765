//! How the `[backend]` reaches Redis securely: TLS files (`tls_ca_file`,
//! `tls_cert_file`, `tls_key_file`, read and parsed now, as `[tls]`'s
//! are, so that a wrong file is an error at its name) and credentials
//! (`username`, and the password from `password_file` or `password_env`,
//! as `[admin]` reads its token: never from this file).

use std::ops::Range;

use toml::Spanned;

use super::{Loader, Result};
use crate::file;
use crate::limits::MAX_PASSWORD_FILE_BYTES;
use crate::model::{BackendConfig, RedisPassword};

impl Loader<'_> {
    pub(super) fn backend_access(
        &self,
        raw: &file::Backend,
        redis: bool,
        config: &mut BackendConfig,
    ) -> Result<()> {
        let settings = [
            ("tls_ca_file", &raw.tls_ca_file),
            ("tls_cert_file", &raw.tls_cert_file),
            ("tls_key_file", &raw.tls_key_file),
            ("username", &raw.username),
            ("password_file", &raw.password_file),
            ("password_env", &raw.password_env),
        ];
        for (field, value) in settings {
            if let Some(v) = value
                && !redis
            {
                return Err(self.err(
                    &format!("backend.{field}"),
                    v.span(),
                    format!(
                        "applies only to Redis backends, not to {}",
                        raw.kind.get_ref()
                    ),
                ));
            }
        }
        if let Some(v) = &raw.password {
            return Err(self.err(
                "backend.password",
                v.span(),
                "the password is never written in the file: use password_file (a file holding \
                 it, relative to this one) or password_env (the name of an environment variable \
                 holding it)",
            ));
        }
        self.backend_tls(raw, config)?;
        config.username = match &raw.username {
            Some(v) if v.get_ref().is_empty() || v.get_ref().contains(char::is_whitespace) => {
                return Err(self.err(
                    "backend.username",
                    v.span(),
                    "must be a non-empty name without spaces",
                ));
            }
            Some(v) => Some(v.get_ref().clone()),
            None => None,
        };
        config.password = match (&raw.password_file, &raw.password_env) {
            (Some(path), None) => Some(self.password_file(path)?),
            (None, Some(var)) => Some(self.password_env(var)?),
            (Some(path), Some(_)) => {
                return Err(self.err(
                    "backend.password_file",
                    path.span(),
                    "give password_file or password_env, not both",
                ));
            }
            (None, None) => None,
        };
        if let (Some(user), None) = (&raw.username, &config.password) {
            // A password in the URL (`redis://user:password@host`) will do.
            let mut urls = config.url.iter().chain(&config.cluster);
            if !urls.any(|u| u.contains('@')) {
                return Err(self.err(
                    "backend.username",
                    user.span(),
                    "needs a password: password_file or password_env",
                ));
            }
        }
        Ok(())
    }

    fn backend_tls(&self, raw: &file::Backend, config: &mut BackendConfig) -> Result<()> {
        let tls_urls = config
            .url
            .iter()
            .chain(&config.cluster)
            .all(|u| u.starts_with("rediss://"));
        let first = [&raw.tls_ca_file, &raw.tls_cert_file, &raw.tls_key_file]
            .into_iter()
            .zip([
                "backend.tls_ca_file",
                "backend.tls_cert_file",
                "backend.tls_key_file",
            ])
            .find_map(|(v, field)| v.as_ref().map(|v| (field, v.span())));
        if let Some((field, span)) = first
            && !tls_urls
        {
            return Err(self.err(
                field,
                span,
                "applies only to rediss:// URLs (TLS); backend.url or backend.cluster is not one",
            ));
        }
        if let Some(ca) = &raw.tls_ca_file {
            config.tls_ca_file = Some(self.certificates("backend.tls_ca_file", ca)?);
        }
        match (&raw.tls_cert_file, &raw.tls_key_file) {
            (Some(cert), Some(key)) => {
                config.tls_cert_file = Some(self.certificates("backend.tls_cert_file", cert)?);
                config.tls_key_file = Some(self.private_key(key)?);
            }
            (Some(cert), None) => {
                return Err(self.err(
                    "backend.tls_key_file",
                    cert.span(),
                    "tls_cert_file needs tls_key_file (the certificate's PEM private key)",
                ));
            }
            (None, Some(key)) => {
                return Err(self.err(
                    "backend.tls_cert_file",
                    key.span(),
                    "tls_key_file needs tls_cert_file (the client certificate, PEM)",
                ));
            }
            (None, None) => {}
        }
        Ok(())
    }

    /// `rediss://` needs TLS built in: said here, at the URL, rather than
    /// when the backend is built.
    pub(super) fn tls_available(&self, field: &str, url: &str, span: Range<usize>) -> Result<()> {
        if url.starts_with("rediss://") && !cfg!(feature = "redis-tls") {
            return Err(self.err(
                field,
                span,
                "is a rediss:// URL (TLS), which needs throttle-fleet-config's `redis-tls` \
                 feature (`redis-tls` of throttle-fleet)",
            ));
        }
        Ok(())
    }

    fn certificates(&self, field: &str, written: &Spanned<String>) -> Result<std::path::PathBuf> {
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject;

        let path = self.path(written.get_ref());
        let certs = CertificateDer::pem_file_iter(&path)
            .and_then(|certs| certs.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|e| {
                self.err(
                    field,
                    written.span(),
                    format!("{:?} cannot be read as PEM: {e}", written.get_ref()),
                )
            })?;
        if certs.is_empty() {
            return Err(self.err(
                field,
                written.span(),
                format!("{:?} holds no CERTIFICATE block", written.get_ref()),
            ));
        }
        Ok(path)
    }

    fn private_key(&self, written: &Spanned<String>) -> Result<std::path::PathBuf> {
        use rustls_pki_types::PrivateKeyDer;
        use rustls_pki_types::pem::PemObject;

        let path = self.path(written.get_ref());
        // The error names the file, never what it holds.
        PrivateKeyDer::from_pem_file(&path).map_err(|_| {
            self.err(
                "backend.tls_key_file",
                written.span(),
                format!("{:?} holds no readable PEM private key", written.get_ref()),
            )
        })?;
        Ok(path)
    }

    fn password_file(&self, written: &Spanned<String>) -> Result<RedisPassword> {
        let field = "backend.password_file";
        let text = self.secret_file(written, field, MAX_PASSWORD_FILE_BYTES)?;
        RedisPassword::new(&text, field).ok_or_else(|| {
            self.err(
                field,
                written.span(),
                format!("{:?} cannot be read: it is empty", written.get_ref()),
            )
        })
    }

    fn password_env(&self, var: &Spanned<String>) -> Result<RedisPassword> {
        let field = "backend.password_env";
        let value = std::env::var(var.get_ref()).map_err(|e| {
            self.err(
                field,
                var.span(),
                format!("names {:?}, which cannot be read: {e}", var.get_ref()),
            )
        })?;
        RedisPassword::new(&value, field).ok_or_else(|| {
            self.err(
                field,
                var.span(),
                format!("names {:?}, which is empty", var.get_ref()),
            )
        })
    }
}
