//! The reloader on a real file: a changed quota carries the counts, an
//! invalid file is refused with its error and the running rules stay, a
//! `[tls]` added is refused, an unchanged file does nothing, and `watch`
//! stops when told.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use throttle_fleet_config::reload::{ReloadEvent, Reloader};
use throttle_fleet_config::{GatewayConfig, build::Integration};
use throttle_fleet_core::memory::MemoryBackend;
use throttle_fleet_core::rule_set::Carried;
use throttle_fleet_tower::RequestHead;
use throttle_fleet_tower::key::Global;
use throttle_fleet_tower::{HttpResponder, KeyExtractor};

/// A server whose peer address is a `SocketAddr` extension.
struct Plain;

fn peer(req: &RequestHead<'_>) -> Option<SocketAddr> {
    req.extensions.get::<SocketAddr>().copied()
}

impl Integration for Plain {
    type Peer = fn(&RequestHead<'_>) -> Option<SocketAddr>;
    type Responder = HttpResponder;
    type Bodies = throttle_fleet_tower::Wrap;

    fn peer(&self) -> Self::Peer {
        peer
    }

    fn route(&self, _only: Option<&[String]>) -> Box<dyn KeyExtractor> {
        Box::new(Global)
    }

    fn responder(&self, config: &GatewayConfig) -> HttpResponder {
        config.headers.responder()
    }
}

fn rules(limit: &str) -> String {
    format!("[[rules]]\nname = \"ip\"\nkey = \"ip\"\nlimit = {limit}\nperiod_secs = 60\n")
}

/// Writes `text` to `path` with a modification time `secs` after the
/// epoch, so that every write is a change whatever the clock's grain.
fn write(path: &Path, text: &str, secs: u64) {
    std::fs::write(path, text).unwrap();
    let file = std::fs::File::options().write(true).open(path).unwrap();
    file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "throttle-fleet-config-reload-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("gateway.toml")
}

#[test]
fn changes_reload_and_invalid_files_keep_the_running_rules() {
    let path = scratch("changes");
    write(&path, &rules("5"), 1_000);
    let config = GatewayConfig::load(&path).unwrap();
    let backend = MemoryBackend::default();
    let layer =
        throttle_fleet_config::build::layer(&config, "gateway.toml", backend.clone(), &Plain)
            .unwrap();
    let mut reloader = Reloader::new(&path, config, layer.clone(), backend, Plain);
    assert!(reloader.check().is_empty(), "unchanged: nothing to do");

    write(&path, &rules("8"), 2_000);
    let events = reloader.check();
    let [ReloadEvent::Reloaded { reloaded, .. }] = &events[..] else {
        panic!("{events:?}")
    };
    assert_eq!(reloaded.rules, [("ip".to_owned(), Carried::Requoted)]);
    assert_eq!(layer.rules().rule(0).quota().limit(), 8);
    let file = path.display().to_string();
    assert_eq!(
        events[0].to_string(),
        format!("reloaded {file}: ip (new quota, counts kept)")
    );

    write(&path, &rules("-5"), 3_000);
    let events = reloader.check();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        events[0].to_string(),
        format!(
            "{file}:4:9: rule \"ip\", field \"limit\": must be at least 1 (got -5); keeping the running rules"
        )
    );
    assert_eq!(
        layer.rules().rule(0).quota().limit(),
        8,
        "the old rules stay"
    );

    let tls = format!("[tls]\nself_signed = true\n{}", rules("9"));
    write(&path, &tls, 4_000);
    let events = reloader.check();
    assert_eq!(
        events[0].to_string(),
        format!("{file}: [tls] is added or removed only on restart; keeping the running rules")
    );

    let moved = format!("listen = \"127.0.0.1:9\"\n{}", rules("10"));
    write(&path, &moved, 5_000);
    let events = reloader.check();
    assert!(
        matches!(
            &events[..],
            [
                ReloadEvent::NeedsRestart { .. },
                ReloadEvent::Reloaded { .. }
            ]
        ),
        "{events:?}"
    );
    assert_eq!(layer.rules().rule(0).quota().limit(), 10);
    assert_eq!(reloader.running().listen.unwrap().port(), 9);
}

#[tokio::test]
async fn watch_reports_and_stops() {
    let path = scratch("watch");
    write(&path, &rules("5"), 1_000);
    let config = GatewayConfig::load(&path).unwrap();
    let backend = MemoryBackend::default();
    let layer = throttle_fleet_config::build::layer(&config, "g", backend.clone(), &Plain).unwrap();
    let reloader = Reloader::new(&path, config, layer.clone(), backend, Plain);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let watcher = tokio::spawn(reloader.watch(
        Duration::from_millis(10),
        async move {
            let _ = stop_rx.await;
        },
        move |e| {
            let _ = seen_tx.send(e.to_string());
        },
    ));
    write(&path, &rules("7"), 2_000);
    let line = tokio::time::timeout(Duration::from_secs(10), seen.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(line.starts_with("reloaded "), "{line}");
    assert_eq!(layer.rules().rule(0).quota().limit(), 7);
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), watcher)
        .await
        .unwrap()
        .unwrap();
}

/// A password rotated in its file is read again by the next reload, which
/// reports that the backend takes it on restart (a reload rebuilds the
/// rules, not the backend).
#[test]
fn a_rotated_password_file_is_reported_as_needing_a_restart() {
    let path = scratch("password");
    let dir = path.parent().unwrap().to_owned();
    std::fs::write(dir.join("redis.password"), "old-password\n").unwrap();
    let text = format!(
        "[backend]\nkind = \"redis-exact\"\nurl = \"redis://127.0.0.1:1\"\n\
         username = \"throttle\"\npassword_file = \"redis.password\"\n{}",
        rules("5")
    );
    write(&path, &text, 1_000);
    let config = GatewayConfig::load(&path).unwrap();
    let backend = MemoryBackend::default();
    let layer =
        throttle_fleet_config::build::layer(&config, "gateway.toml", backend.clone(), &Plain)
            .unwrap();
    let mut reloader = Reloader::new(&path, config, layer, backend, Plain);

    std::fs::write(dir.join("redis.password"), "new-password\n").unwrap();
    write(&path, &text, 2_000);
    let events = reloader.check();
    assert!(
        matches!(
            &events[..],
            [
                ReloadEvent::NeedsRestart { .. },
                ReloadEvent::Reloaded { .. }
            ]
        ),
        "{events:?}"
    );
    let running = reloader.running().backend.password.as_ref().unwrap();
    assert_eq!(running.secret(), "new-password");
    assert!(!format!("{events:?}").contains("password\""), "{events:?}");
}
