//! The `[backend]` table made real: a memory backend, or a Redis backend
//! connected (Redis being down is not an error: the failure policies
//! handle it).

use std::sync::Arc;

use throttle_fleet_core::{backend::Backend, memory::MemoryBackend};

use crate::error::ConfigFileError;
use crate::model::{BackendConfig, BackendKind};

/// What a backend built from a file is: something rules bind to, and for
/// Redis the backend itself (for `shutdown()` and its stats).
#[derive(Clone)]
pub enum BuiltBackend {
    /// In this process.
    Memory(MemoryBackend),
    /// A Redis backend in one of its modes.
    #[cfg(feature = "redis")]
    Redis(throttle_fleet_redis::RedisBackend),
}

impl std::fmt::Debug for BuiltBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Memory(_) => f.write_str("BuiltBackend::Memory"),
            #[cfg(feature = "redis")]
            Self::Redis(r) => write!(f, "BuiltBackend::Redis({r:?})"),
        }
    }
}

impl BuiltBackend {
    /// The backend as rules bind to it.
    pub fn as_backend(&self) -> Arc<dyn Backend> {
        match self {
            Self::Memory(m) => Arc::new(m.clone()),
            #[cfg(feature = "redis")]
            Self::Redis(r) => Arc::new(r.clone()),
        }
    }
}

impl BackendConfig {
    /// Builds the backend; `file` names the configuration in errors.
    pub async fn build(&self, file: &str) -> Result<BuiltBackend, ConfigFileError> {
        match self.kind {
            BackendKind::Memory => {
                let mut memory = MemoryBackend::default();
                if let Some(max) = self.max_keys {
                    memory = memory.max_keys(max);
                }
                Ok(BuiltBackend::Memory(memory))
            }
            #[cfg(feature = "redis")]
            _ => self.redis(file).await,
            #[cfg(not(feature = "redis"))]
            _ => Err(ConfigFileError::new(
                file,
                "backend.kind",
                "Redis backends need throttle-fleet-config's `redis` feature",
            )),
        }
    }

    #[cfg(feature = "redis")]
    async fn redis(&self, file: &str) -> Result<BuiltBackend, ConfigFileError> {
        use throttle_fleet_redis::{ApproximateOptions, LeaseOptions, RedisBackend, RedisConfig};
        let mut config = if let Some(sentinel) = &self.sentinel {
            RedisConfig::sentinel(sentinel.nodes.clone(), sentinel.service.clone())
        } else if self.cluster.is_empty() {
            RedisConfig::standalone(self.url.clone().unwrap_or_default())
        } else {
            RedisConfig::cluster(self.cluster.clone())
        };
        if let Some(prefix) = &self.key_prefix {
            config = config.key_prefix(prefix.clone());
        }
        if let Some(t) = self.command_timeout {
            config = config.command_timeout(t);
        }
        if let Some(n) = self.fleet_size {
            config = config.fleet_size(n);
        }
        if let Some(ca) = &self.tls_ca_file {
            config = config.tls_ca_file(ca);
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert_file, &self.tls_key_file) {
            config = config.tls_client_cert(cert, key);
        }
        if let Some(user) = &self.username {
            config = config.username(user.clone());
        }
        if let Some(password) = &self.password {
            config = config.password(password.secret());
        }
        let built = match self.kind {
            BackendKind::RedisExact => RedisBackend::exact(config).await.map(RedisBackend::from),
            BackendKind::RedisApproximate => {
                let mut options = ApproximateOptions::default();
                if let Some(spans) = self.spans {
                    options = options.spans(spans);
                }
                RedisBackend::approximate(config, options)
                    .await
                    .map(RedisBackend::from)
            }
            BackendKind::RedisLeased => {
                let mut options = LeaseOptions::default();
                if let Some(batch) = self.batch {
                    options = options.batch(batch).low_water((batch / 5).min(batch - 1));
                }
                RedisBackend::leased(config, options)
                    .await
                    .map(RedisBackend::from)
            }
            BackendKind::Memory => unreachable!("handled by build"),
        };
        built.map(BuiltBackend::Redis).map_err(|e| {
            ConfigFileError::new(file, self.field_of(e.field()), e.reason().to_owned())
        })
    }

    /// The `[backend]` field a Redis setting's error is about: the file's
    /// own name for what the file set (`backend.password_file`,
    /// `backend.tls_ca_file`), `backend.<field>` for the rest.
    #[cfg(feature = "redis")]
    fn field_of(&self, field: &str) -> String {
        match field {
            "redis.password" => match &self.password {
                Some(p) => p.field().to_owned(),
                None => "backend.password_file".to_owned(),
            },
            "redis.username" => "backend.username".to_owned(),
            "redis.tls_ca_file" => "backend.tls_ca_file".to_owned(),
            "redis.tls_cert_file" => "backend.tls_cert_file".to_owned(),
            "redis.tls_key_file" => "backend.tls_key_file".to_owned(),
            "redis.url" => "backend.url".to_owned(),
            "redis.cluster" => "backend.cluster".to_owned(),
            other => format!("backend.{other}"),
        }
    }
}
