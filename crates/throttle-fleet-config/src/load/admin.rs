//! The `[admin]` table: the admin endpoint's address and its bearer token,
//! read from a file or an environment variable (never from this file: a
//! configuration is read by many and committed to repositories).

use std::net::SocketAddr;
use std::ops::Range;

use toml::Spanned;

use super::{Loader, Result};
use crate::file;
use crate::limits::{MAX_ADMIN_TOKEN_FILE_BYTES, MIN_ADMIN_TOKEN_LEN};
use crate::model::{AdminConfig, AdminToken};

impl Loader<'_> {
    /// `[admin]`; `public` are the addresses it must not share (`listen`,
    /// `[metrics] listen`).
    pub(super) fn admin(
        &self,
        raw: &file::Admin,
        span: Range<usize>,
        public: &[(&str, Option<SocketAddr>)],
    ) -> Result<AdminConfig> {
        if let Some(token) = &raw.token {
            return Err(self.err(
                "admin.token",
                token.span(),
                "the token is never written in the file: use token_file (a file holding it, \
                 relative to this one) or token_env (the name of an environment variable holding it)",
            ));
        }
        let Some(listen) = &raw.listen else {
            return Err(self.err(
                "admin.listen",
                span,
                "is missing: the admin endpoint's own address, e.g. \"127.0.0.1:9091\"",
            ));
        };
        let listen_addr = self.socket_addr("admin.listen", listen)?;
        for (field, addr) in public {
            if *addr == Some(listen_addr) {
                return Err(self.err(
                    "admin.listen",
                    listen.span(),
                    format!("is also {field}: the admin endpoint needs an address of its own"),
                ));
            }
        }
        let token = match (&raw.token_file, &raw.token_env) {
            (Some(path), None) => self.token_file(path)?,
            (None, Some(var)) => self.token_env(var)?,
            (Some(path), Some(_)) => {
                return Err(self.err(
                    "admin.token_file",
                    path.span(),
                    "give token_file or token_env, not both",
                ));
            }
            (None, None) => {
                return Err(self.err(
                    "admin.token_file",
                    span,
                    "is missing: the admin endpoint needs a bearer token, from token_file (a file \
                     holding it) or token_env (an environment variable holding it)",
                ));
            }
        };
        Ok(AdminConfig {
            listen: listen_addr,
            token,
        })
    }

    fn token_file(&self, written: &Spanned<String>) -> Result<AdminToken> {
        let field = "admin.token_file";
        let text = self.secret_file(written, field, MAX_ADMIN_TOKEN_FILE_BYTES)?;
        AdminToken::new(&text).ok_or_else(|| {
            self.err(
                field,
                written.span(),
                format!(
                    "{:?} holds {} bytes (trimmed): a token has at least {MIN_ADMIN_TOKEN_LEN}",
                    written.get_ref(),
                    text.trim().len()
                ),
            )
        })
    }

    fn token_env(&self, var: &Spanned<String>) -> Result<AdminToken> {
        let field = "admin.token_env";
        let value = std::env::var(var.get_ref()).map_err(|e| {
            self.err(
                field,
                var.span(),
                format!("names {:?}, which cannot be read: {e}", var.get_ref()),
            )
        })?;
        AdminToken::new(&value).ok_or_else(|| {
            self.err(
                field,
                var.span(),
                format!(
                    "names {:?}, which holds {} bytes (trimmed): a token has at least {MIN_ADMIN_TOKEN_LEN}",
                    var.get_ref(),
                    value.trim().len()
                ),
            )
        })
    }
}
