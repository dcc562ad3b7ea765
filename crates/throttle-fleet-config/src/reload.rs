//! Reload on change: the file is read again when its modification time
//! changes; a valid file replaces the layer's rules (counts carried over
//! where a rule's name and algorithm stay), an invalid one is reported and
//! the running rules stay. Works for any server with an [`Integration`],
//! and for any other [`ReloadTarget`].
//!
//! ```no_run
//! # use throttle_fleet_config::{GatewayConfig, build::Integration, reload::Reloader};
//! # async fn run<I: Integration + Send + 'static>(integration: I) -> Result<(), Box<dyn std::error::Error>>
//! # where I::Responder: Send + Sync {
//! use std::time::Duration;
//!
//! let config = GatewayConfig::load("gateway.toml")?;
//! let backend = config.backend.build("gateway.toml").await?.as_backend();
//! let layer = throttle_fleet_config::build::layer(&config, "gateway.toml", backend.clone(), &integration)?;
//! // ... serve with `layer.clone()` ...
//! let reloader = Reloader::new("gateway.toml", config, layer, backend, integration);
//! tokio::spawn(reloader.watch(Duration::from_millis(250), std::future::pending(), |event| {
//!     eprintln!("{event}");
//! }));
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use throttle_fleet_core::backend::Backend;
use throttle_fleet_core::rule_set::Carried;
use throttle_fleet_tower::{Reloaded, ThrottleLayer};

use crate::build::{self, Integration};
use crate::model::GatewayConfig;

/// What one look at the file did.
#[derive(Debug)]
pub enum ReloadEvent {
    /// The file's rules replaced the running ones.
    Reloaded {
        /// The file, as named.
        file: String,
        /// What became of each rule's counts.
        reloaded: Reloaded,
    },
    /// The rules will be reloaded, but these changes need a restart
    /// (`[backend]`, `listen`, `[rls]`, `[admin]`): reported before the
    /// [`Reloaded`](Self::Reloaded) that follows.
    NeedsRestart {
        /// The file, as named.
        file: String,
    },
    /// The file was refused (it does not validate, or it adds or removes
    /// `[tls]`); the running rules stay.
    Kept {
        /// Why, naming the file (and the rule, field, line and column when
        /// the file is invalid).
        reason: String,
    },
}

impl fmt::Display for ReloadEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Reloaded { file, reloaded } => {
                write!(f, "reloaded {file}: ")?;
                for (i, (name, how)) in reloaded.rules.iter().enumerate() {
                    let how = match how {
                        Carried::Same => "kept",
                        Carried::Requoted => "new quota, counts kept",
                        Carried::Fresh => "new",
                    };
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{name} ({how})")?;
                }
                Ok(())
            }
            Self::NeedsRestart { file } => write!(
                f,
                "{file}: [backend], listen, [rls] and [admin] changes take effect on restart; reloading the rules"
            ),
            Self::Kept { reason } => write!(f, "{reason}; keeping the running rules"),
        }
    }
}

/// What a reload swaps the rules of: a server's layer ([`LayerTarget`]),
/// or another server built on the same file (the Envoy rate limit
/// services of `throttle-fleet-envoy`).
pub trait ReloadTarget {
    /// Why `config` can only replace `running` on a restart, if it cannot
    /// be reloaded at all (the running rules stay).
    fn refuse(
        &self,
        running: &GatewayConfig,
        config: &GatewayConfig,
        file: &str,
    ) -> Option<String> {
        let _ = (running, config, file);
        None
    }

    /// Replaces the running rules with `config`'s, carrying counts over
    /// where a rule's name and algorithm stay; what became of each, or why
    /// nothing changed (naming `file`).
    fn apply(&mut self, config: &GatewayConfig, file: &str) -> Result<Reloaded, String>;
}

/// A server's [`ThrottleLayer`], reloaded on `backend` for the server
/// `integration` describes.
pub struct LayerTarget<I: Integration, B> {
    layer: ThrottleLayer<I::Responder, I::Bodies>,
    backend: B,
    integration: I,
}

impl<I: Integration, B: Backend + Clone> ReloadTarget for LayerTarget<I, B> {
    fn refuse(
        &self,
        running: &GatewayConfig,
        config: &GatewayConfig,
        file: &str,
    ) -> Option<String> {
        // The listener speaks HTTP or HTTPS from its start; rules keyed by
        // fingerprints on a plain listener would find none.
        (config.tls.is_some() != running.tls.is_some())
            .then(|| format!("{file}: [tls] is added or removed only on restart"))
    }

    fn apply(&mut self, config: &GatewayConfig, file: &str) -> Result<Reloaded, String> {
        let policy = build::policy(config, file, &self.integration).map_err(|e| e.to_string())?;
        let responder = self.integration.responder(config);
        self.layer
            .reload_with_responder(policy, self.backend.clone(), responder)
            .map_err(|e| format!("{file}: {e}"))
    }
}

/// Reloads rules from their configuration file: a layer's
/// ([`Reloader::new`]), or any [`ReloadTarget`]'s
/// ([`Reloader::with_target`]).
pub struct Reloader<T> {
    path: PathBuf,
    running: GatewayConfig,
    target: T,
    seen: Option<SystemTime>,
}

impl<T> fmt::Debug for Reloader<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloader")
            .field("path", &self.path)
            .field("seen", &self.seen)
            .finish_non_exhaustive()
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl<I: Integration, B: Backend + Clone> Reloader<LayerTarget<I, B>> {
    /// Reloads `layer` (built from `running`, the file at `path` as it is
    /// now) on `backend`, for `integration`'s server. The file counts as
    /// seen: only a later change reloads it.
    pub fn new(
        path: impl Into<PathBuf>,
        running: GatewayConfig,
        layer: ThrottleLayer<I::Responder, I::Bodies>,
        backend: B,
        integration: I,
    ) -> Self {
        let target = LayerTarget {
            layer,
            backend,
            integration,
        };
        Self::with_target(path, running, target)
    }
}

impl<T: ReloadTarget> Reloader<T> {
    /// Reloads `target` (built from `running`, the file at `path` as it is
    /// now). The file counts as seen: only a later change reloads it.
    pub fn with_target(path: impl Into<PathBuf>, running: GatewayConfig, target: T) -> Self {
        let path = path.into();
        let seen = modified(&path);
        Self {
            path,
            running,
            target,
            seen,
        }
    }

    /// The configuration the running rules come from now.
    pub fn running(&self) -> &GatewayConfig {
        &self.running
    }

    /// Reloads if the file's modification time changed since it was last
    /// seen; what that did (nothing if it did not change).
    pub fn check(&mut self) -> Vec<ReloadEvent> {
        let now = modified(&self.path);
        if now == self.seen {
            return Vec::new();
        }
        self.seen = now;
        self.reload()
    }

    /// Reads the file and reloads now, changed or not.
    pub fn reload(&mut self) -> Vec<ReloadEvent> {
        let file = self.path.display().to_string();
        let kept = |reason: String| vec![ReloadEvent::Kept { reason }];
        let config = match GatewayConfig::load(&self.path) {
            Ok(config) => config,
            Err(e) => return kept(e.to_string()),
        };
        if let Some(reason) = self.target.refuse(&self.running, &config, &file) {
            return kept(reason);
        }
        let mut events = Vec::new();
        if config.backend != self.running.backend
            || config.listen != self.running.listen
            || config.rls != self.running.rls
            || admin_of(&config) != admin_of(&self.running)
        {
            events.push(ReloadEvent::NeedsRestart { file: file.clone() });
        }
        match self.target.apply(&config, &file) {
            Ok(reloaded) => {
                events.push(ReloadEvent::Reloaded { file, reloaded });
                self.running = config;
            }
            Err(reason) => events.push(ReloadEvent::Kept { reason }),
        }
        events
    }

    /// Looks at the file every `every` until `stop` completes, handing
    /// each event to `report` (to log it).
    pub async fn watch(
        mut self,
        every: Duration,
        stop: impl Future<Output = ()>,
        mut report: impl FnMut(&ReloadEvent),
    ) {
        let mut stop = std::pin::pin!(stop);
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = &mut stop => return,
            }
            for event in self.check() {
                report(&event);
            }
        }
    }
}

/// What of `[admin]` a running gateway holds from its start: its address
/// and token.
fn admin_of(config: &GatewayConfig) -> Option<(std::net::SocketAddr, &str)> {
    config.admin.as_ref().map(|a| (a.listen, a.token.secret()))
}
