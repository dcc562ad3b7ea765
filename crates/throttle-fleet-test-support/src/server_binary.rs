//! Which server binary the harness starts, and which command-line client
//! it runs for its own calls: the one place that chooses them.
//!
//! * `THROTTLE_REDIS_SERVER` unset or empty: `redis-server` and
//!   `redis-cli` from `PATH` (the suites' default).
//! * `THROTTLE_REDIS_SERVER=<path>`: that binary, e.g. a `valkey-server` or
//!   an older `redis-server`, for every standalone server and cluster node.
//!   The client is `valkey-cli` or `redis-cli` from the same folder if one
//!   is there (a Redis 6.2 build ships its own), else `redis-cli` from
//!   `PATH` (it speaks to Valkey as well).
//!
//! A test process that starts a server with the variable set prints once
//! to stderr (past the test harness's capture) which server it used and
//! its version, so a log shows what a run was tested against.
//!
//! ```text
//! THROTTLE_REDIS_SERVER=/opt/valkey/bin/valkey-server cargo test -p throttle-fleet-redis --test exactness
//! throttle test support: server /opt/valkey/bin/valkey-server (Valkey server v=9.1.2 ...), client redis-cli
//! ```

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The variable that names the server binary.
pub const SERVER_VAR: &str = "THROTTLE_REDIS_SERVER";

struct Binaries {
    server: OsString,
    cli: OsString,
}

fn binaries() -> &'static Binaries {
    static CHOSEN: OnceLock<Binaries> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        let Some(server) = std::env::var_os(SERVER_VAR).filter(|s| !s.is_empty()) else {
            return Binaries {
                server: "redis-server".into(),
                cli: "redis-cli".into(),
            };
        };
        let dir = Path::new(&server).parent().map(Path::to_path_buf);
        let cli = ["valkey-cli", "redis-cli"]
            .iter()
            .filter_map(|name| dir.as_ref().map(|d| d.join(name)))
            .find(|p| p.is_file())
            .map_or_else(|| OsString::from("redis-cli"), PathBuf::into_os_string);
        let version = Command::new(&server)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|e| format!("--version failed: {e}"));
        // Straight to the process's stderr: the test harness captures only
        // what the print macros write.
        let _ = writeln!(
            std::io::stderr(),
            "throttle test support: server {} ({version}), client {}",
            Path::new(&server).display(),
            Path::new(&cli).display(),
        );
        Binaries { server, cli }
    })
}

/// The server binary to start: `redis-server` or `$THROTTLE_REDIS_SERVER`.
pub fn server() -> Command {
    Command::new(&binaries().server)
}

/// The command-line client for the harness's own calls (`--cluster create`,
/// [`RedisServer::cli`](crate::RedisServer::cli)).
pub fn cli() -> Command {
    Command::new(&binaries().cli)
}
