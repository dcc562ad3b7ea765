//! The `[server]` table: the gateway example's own settings (its connection
//! caps, header, idle, write and body timeouts), read here so that their errors name the
//! field and its line like every other.

use std::time::Duration;

use super::{Loader, Result};
use crate::file;
use throttle_fleet_tower::server::ServeLimits;

impl Loader<'_> {
    pub(super) fn server(&self, table: &file::Server) -> Result<ServeLimits> {
        let mut server = ServeLimits::default();
        if let Some(v) = &table.max_connections {
            server.max_connections = self.int("server.max_connections", v, 1, 1_000_000)? as usize;
        }
        if let Some(v) = &table.header_timeout_secs {
            server.header_timeout =
                Duration::from_secs(self.int("server.header_timeout_secs", v, 1, 3_600)? as u64);
        }
        if let Some(v) = &table.idle_timeout_secs {
            server.idle_timeout =
                Duration::from_secs(self.int("server.idle_timeout_secs", v, 1, 86_400)? as u64);
        }
        if let Some(v) = &table.write_timeout_secs {
            server.write_timeout =
                Duration::from_secs(self.int("server.write_timeout_secs", v, 1, 3_600)? as u64);
        }
        if let Some(v) = &table.body_timeout_secs {
            server.body_timeout =
                Duration::from_secs(self.int("server.body_timeout_secs", v, 1, 3_600)? as u64);
        }
        if let Some(v) = &table.body_min_bytes_per_sec {
            server.body_min_bytes_per_sec =
                self.int("server.body_min_bytes_per_sec", v, 1, 1_000_000_000)? as u32;
        }
        if let Some(v) = &table.max_connections_per_client {
            server.max_connections_per_client =
                self.int("server.max_connections_per_client", v, 1, 1_000_000)? as usize;
        }
        Ok(server)
    }
}
