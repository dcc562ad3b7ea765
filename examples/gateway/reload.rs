//! Hot reload: the file is read again when it changes; a valid file
//! replaces the rules (counts carried over where a rule's name and
//! algorithm stay), an invalid one is reported and the running rules stay.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use throttle_axum::{ThrottleLayer, from_config};
use throttle_axum::core::rule_set::Carried;
use throttle_axum::responder::HttpResponder;
use throttle_config::{BuiltBackend, GatewayConfig, HeaderStyle};
use tokio::sync::watch;

/// Watches `path` (by modification time, every `every`) until `stop`.
pub(crate) async fn watch(
    path: PathBuf,
    layer: ThrottleLayer,
    backend: BuiltBackend,
    loaded: GatewayConfig,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let modified = |p: &PathBuf| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut seen: Option<SystemTime> = modified(&path);
    let mut running = loaded;
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        let now = modified(&path);
        if now == seen {
            continue;
        }
        seen = now;
        let file = path.display().to_string();
        let config = match GatewayConfig::load(&path) {
            Ok(config) => config,
            Err(e) => {
                eprintln!("gateway: {e}; keeping the running rules");
                continue;
            }
        };
        if config.tls.is_some() != running.tls.is_some() {
            // The listener speaks HTTP or HTTPS from its start; rules keyed
            // by fingerprints on a plain listener would find none.
            eprintln!(
                "gateway: {file}: [tls] is added or removed only on restart; keeping the running rules"
            );
            continue;
        }
        if config.backend != running.backend || config.listen != running.listen {
            eprintln!(
                "gateway: {file}: [backend] and listen changes take effect on restart; reloading the rules"
            );
        }
        let policy = match from_config::policy(&config, &file) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("gateway: {e}; keeping the running rules");
                continue;
            }
        };
        let responder = HttpResponder::new().ietf_headers(config.headers == HeaderStyle::Ietf);
        match layer.reload_with_responder(policy, backend.as_backend(), responder) {
            Ok(reloaded) => {
                let rules: Vec<String> = reloaded
                    .rules
                    .iter()
                    .map(|(name, how)| {
                        let how = match how {
                            Carried::Same => "kept",
                            Carried::Requoted => "new quota, counts kept",
                            Carried::Fresh => "new",
                        };
                        format!("{name} ({how})")
                    })
                    .collect();
                eprintln!("gateway: reloaded {file}: {}", rules.join(", "));
                running = config;
            }
            Err(e) => eprintln!("gateway: {file}: {e}; keeping the running rules"),
        }
    }
}
