//! Which server the backend talks to (Redis or Valkey, and its version),
//! read from `INFO server` when a backend starts: logged, and refused when
//! it lacks what the scripts use.
//!
//! What the modes need of the server, and since when each server has it:
//!
//! | used by | what | Redis | Valkey |
//! |---|---|---|---|
//! | every mode's scripts | `SET ... KEEPTTL` | 6.0 | every release (7.2) |
//! | every mode's scripts | `TIME` before writes (effects replication) | 5.0 | every release |
//! | operations | `XADD ... MAXLEN ~`, `XRANGE`, `HSCAN` | 5.0 | every release |
//!
//! Nothing newer is used: no functions (`FCALL`), no `EXPIRE ... NX`,
//! `GETEX`, `LPOS` or `SCRIPT FLUSH ASYNC`, no RESP3 (the connections
//! speak RESP2), no sharded Pub/Sub. Redis older than 6.0 is refused; 6.0
//! and 6.1 run the scripts but are not tested (6.2 is): a warning says so.
//! Valkey also reports a `redis_version` (7.2.4 for every Valkey so far);
//! it is read only for a server that does not name itself.

use std::fmt;
use std::sync::Arc;

use throttle_fleet_core::ConfigError;

use super::{Redis, Route};

/// The oldest Redis every mode's scripts run on (`SET ... KEEPTTL`).
pub(crate) const MIN_REDIS: (u32, u32) = (6, 0);
/// The oldest Redis the project is tested on.
const OLDEST_TESTED_REDIS: (u32, u32) = (6, 2);

/// The server software.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Server {
    Redis,
    Valkey,
}

/// A server and its version, as `INFO server` tells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerVersion {
    pub(crate) server: Server,
    /// `(major, minor, patch)` of the server's own numbering.
    pub(crate) version: (u32, u32, u32),
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.server {
            Server::Redis => "Redis",
            Server::Valkey => "Valkey",
        };
        let (major, minor, patch) = self.version;
        write!(f, "{name} {major}.{minor}.{patch}")
    }
}

fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

fn numbers(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    let patch = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    Some((major, minor, patch))
}

/// The server and version of an `INFO server` text: Valkey by its
/// `server_name:valkey` and `valkey_version:`, anything else by its
/// `redis_version:`.
pub(crate) fn parse_version(info: &str) -> Option<ServerVersion> {
    if field(info, "server_name") == Some("valkey") {
        return Some(ServerVersion {
            server: Server::Valkey,
            version: numbers(field(info, "valkey_version")?)?,
        });
    }
    Some(ServerVersion {
        server: Server::Redis,
        version: numbers(field(info, "redis_version")?)?,
    })
}

/// Refuses a server that lacks what the scripts use, naming the versions.
pub(crate) fn check_version(found: ServerVersion) -> Result<(), ConfigError> {
    let (major, minor, _) = found.version;
    if found.server == Server::Redis && (major, minor) < MIN_REDIS {
        return Err(ConfigError::new(
            "redis.version",
            format!(
                "{found} is older than Redis {}.{}, the oldest every mode's scripts run on \
                 (they use SET ... KEEPTTL); Redis {}.{} or later, or Valkey, is needed",
                MIN_REDIS.0, MIN_REDIS.1, OLDEST_TESTED_REDIS.0, OLDEST_TESTED_REDIS.1
            ),
        ));
    }
    Ok(())
}

impl Redis {
    /// The server's version (`INFO server`), if it answers within the
    /// connect and command timeouts; for a cluster, the oldest of its
    /// primaries that answer. Nodes whose breaker is open are not asked.
    pub(crate) async fn server_version(&self) -> Option<ServerVersion> {
        let nodes = match &self.route {
            Route::Single(node) => vec![node.clone()],
            Route::Cluster(cluster) => cluster.nodes(),
            Route::Sentinel(sentinel) => sentinel.primary().into_iter().collect(),
        };
        let mut oldest: Option<ServerVersion> = None;
        // A node already known down is not waited for a second time.
        for node in nodes.into_iter().filter(|n| !n.breaker.is_open()) {
            let mut conn = node.conn();
            let cmd = redis::cmd("INFO").arg("server").to_owned();
            let asked = cmd.query_async::<redis::Value>(&mut conn);
            let text = match tokio::time::timeout(self.patience(), asked).await {
                Ok(Ok(redis::Value::BulkString(b))) => String::from_utf8_lossy(&b).into_owned(),
                Ok(Ok(redis::Value::VerbatimString { text, .. })) => text,
                _ => continue,
            };
            let Some(found) = parse_version(&text) else {
                continue;
            };
            if oldest.is_none_or(|o| o.server == found.server && o.version > found.version) {
                oldest = Some(found);
            }
        }
        oldest
    }

    /// At startup: logs the server and its version, and refuses one the
    /// scripts cannot run on. A server that does not answer now is not
    /// checked (the backend starts degraded, as it would anyway).
    pub(crate) async fn check_server(self: &Arc<Self>) -> Result<(), ConfigError> {
        let Some(found) = self.server_version().await else {
            tracing::info!("throttle: the Redis server's version is not known (no answer)");
            return Ok(());
        };
        check_version(found)?;
        let (major, minor, _) = found.version;
        if found.server == Server::Redis && (major, minor) < OLDEST_TESTED_REDIS {
            tracing::warn!(
                server = %found,
                "throttle: {found} is older than Redis {}.{}, the oldest tested",
                OLDEST_TESTED_REDIS.0,
                OLDEST_TESTED_REDIS.1
            );
        } else {
            tracing::info!(server = %found, "throttle: connected to {found}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
