//! The `[backend]` table.

use std::ops::Range;
use std::time::Duration;

use super::{Loader, Result};
use crate::file;
use crate::model::{BackendConfig, BackendKind, SentinelConfig};

impl Loader<'_> {
    pub(super) fn backend(&self, raw: &file::Backend) -> Result<BackendConfig> {
        let kind = match raw.kind.get_ref().as_str() {
            "memory" => BackendKind::Memory,
            "redis-exact" => BackendKind::RedisExact,
            "redis-approximate" => BackendKind::RedisApproximate,
            "redis-leased" => BackendKind::RedisLeased,
            other => {
                return Err(self.err(
                    "backend.kind",
                    raw.kind.span(),
                    format!(
                        "must be memory, redis-exact, redis-approximate or redis-leased (got {other:?})"
                    ),
                ));
            }
        };
        let redis = kind != BackendKind::Memory;
        // A setting that does nothing for this backend is an error, not a
        // silent no-op: whoever wrote it expected it to matter.
        let only = |field: &str, span: Range<usize>, allowed: bool, for_what: &str| {
            if allowed {
                Ok(())
            } else {
                Err(self.err(
                    &format!("backend.{field}"),
                    span,
                    format!("applies only to {for_what}, not to {}", raw.kind.get_ref()),
                ))
            }
        };
        if let Some(v) = &raw.url {
            only("url", v.span(), redis, "Redis backends")?;
            if !v.get_ref().starts_with("redis://") && !v.get_ref().starts_with("rediss://") {
                return Err(self.err(
                    "backend.url",
                    v.span(),
                    "must start with redis:// or rediss://",
                ));
            }
            self.tls_available("backend.url", v.get_ref(), v.span())?;
        }
        if let Some(v) = &raw.cluster {
            only("cluster", v.span(), redis, "Redis backends")?;
            if v.get_ref().is_empty() {
                return Err(self.err("backend.cluster", v.span(), "needs at least one node URL"));
            }
            if raw.url.is_some() {
                return Err(self.err(
                    "backend.cluster",
                    v.span(),
                    "give either url (one Redis) or cluster (seed nodes), not both",
                ));
            }
            for node in v.get_ref() {
                self.tls_available("backend.cluster", node, v.span())?;
            }
        }
        let sentinel = match &raw.sentinel {
            Some(v) => {
                only("sentinel", v.span(), redis, "Redis backends")?;
                if raw.url.is_some() || raw.cluster.is_some() {
                    return Err(self.err(
                        "backend.sentinel",
                        v.span(),
                        "give one of url (one Redis), cluster (seed nodes) or sentinel, not several",
                    ));
                }
                Some(self.sentinel(v.get_ref())?)
            }
            None => None,
        };
        if redis && raw.url.is_none() && raw.cluster.is_none() && sentinel.is_none() {
            return Err(self.err(
                "backend.url",
                raw.kind.span(),
                "a Redis backend needs url (or cluster, or sentinel)",
            ));
        }
        let mut config = BackendConfig {
            kind,
            url: raw.url.as_ref().map(|v| v.get_ref().clone()),
            cluster: raw
                .cluster
                .as_ref()
                .map(|v| v.get_ref().clone())
                .unwrap_or_default(),
            sentinel,
            ..BackendConfig::default()
        };
        if let Some(v) = &raw.key_prefix {
            only("key_prefix", v.span(), redis, "Redis backends")?;
            config.key_prefix = Some(v.get_ref().clone());
        }
        if let Some(v) = &raw.command_timeout_ms {
            only("command_timeout_ms", v.span(), redis, "Redis backends")?;
            let ms = self.int("backend.command_timeout_ms", v, 1, 60_000)?;
            config.command_timeout = Some(Duration::from_millis(ms as u64));
        }
        if let Some(v) = &raw.fleet_size {
            only("fleet_size", v.span(), redis, "Redis backends")?;
            config.fleet_size = Some(self.int("backend.fleet_size", v, 1, 100_000)? as u32);
        }
        if let Some(v) = &raw.spans {
            only(
                "spans",
                v.span(),
                kind == BackendKind::RedisApproximate,
                "redis-approximate",
            )?;
            config.spans = Some(self.int("backend.spans", v, 2, 1_000)? as u32);
        }
        if let Some(v) = &raw.batch {
            only(
                "batch",
                v.span(),
                kind == BackendKind::RedisLeased,
                "redis-leased",
            )?;
            config.batch = Some(self.int("backend.batch", v, 1, 4_096)? as u64);
        }
        if let Some(v) = &raw.max_keys {
            only("max_keys", v.span(), kind == BackendKind::Memory, "memory")?;
            config.max_keys = Some(self.int("backend.max_keys", v, 1, 1 << 32)? as usize);
        }
        self.backend_access(raw, redis, &mut config)?;
        Ok(config)
    }

    /// `sentinel = { nodes = [...], service = "..." }`.
    fn sentinel(&self, raw: &file::Sentinel) -> Result<SentinelConfig> {
        let nodes = raw.nodes.get_ref();
        if nodes.is_empty() {
            return Err(self.err(
                "backend.sentinel.nodes",
                raw.nodes.span(),
                "needs at least one sentinel URL",
            ));
        }
        if let Some(i) = nodes
            .iter()
            .position(|n| !n.starts_with("redis://") && !n.starts_with("rediss://"))
        {
            return Err(self.err(
                "backend.sentinel.nodes",
                raw.nodes.span(),
                format!("each must start with redis:// or rediss:// (entry {i} does not)"),
            ));
        }
        if raw.service.get_ref().trim().is_empty() {
            return Err(self.err(
                "backend.sentinel.service",
                raw.service.span(),
                "needs the name the sentinels know the primary by (their master name)",
            ));
        }
        Ok(SentinelConfig {
            nodes: nodes.clone(),
            service: raw.service.get_ref().clone(),
        })
    }
}
