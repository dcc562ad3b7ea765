//! The `[server]` table: the gateway example's own settings (its connection
//! cap and header-read timeout), read here so that their errors name the
//! field and its line like every other.

use std::time::Duration;

use super::{Loader, Result};
use crate::file;
use crate::model::ServerConfig;

impl Loader<'_> {
    pub(super) fn server(&self, table: &file::Server) -> Result<ServerConfig> {
        let mut server = ServerConfig::default();
        if let Some(v) = &table.max_connections {
            server.max_connections = self.int("server.max_connections", v, 1, 1_000_000)? as usize;
        }
        if let Some(v) = &table.header_timeout_secs {
            server.header_timeout =
                Duration::from_secs(self.int("server.header_timeout_secs", v, 1, 3_600)? as u64);
        }
        Ok(server)
    }
}
