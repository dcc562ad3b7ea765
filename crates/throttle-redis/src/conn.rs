//! Connections (standalone or cluster), timeouts, the circuit breaker and
//! the counters every mode shares.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, RedisResult, ScriptInvocation};
use throttle_core::{Clock, ConfigError};

use crate::breaker::Breaker;
use crate::config::{RedisConfig, Target};

#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    async fn invoke<T: FromRedisValue>(&mut self, inv: &ScriptInvocation<'_>) -> RedisResult<T> {
        match self {
            Self::Single(c) => inv.invoke_async(c).await,
            Self::Cluster(c) => inv.invoke_async(c).await,
        }
    }

    async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Self::Single(c) => cmd.query_async(c).await,
            Self::Cluster(c) => cmd.query_async(c).await,
        }
    }
}

/// Counters of a Redis backend, for dashboards and for trusting it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStats {
    /// Script calls sent to Redis on the request path.
    pub calls: u64,
    /// Calls that failed with an error.
    pub errors: u64,
    /// Calls that took longer than the command timeout.
    pub timeouts: u64,
    /// Whether the circuit breaker is open now.
    pub breaker_open: bool,
    /// How many times the breaker has opened.
    pub breaker_opened: u64,
    /// Checks decided by a failure policy instead of Redis.
    pub degraded: u64,
    /// Exact mode: checks denied without a Redis call, for a key Redis had
    /// shown over its limit and whose wait was not over.
    pub denied_locally: u64,
}

/// What went wrong with a call.
#[derive(Debug)]
pub(crate) enum Failure {
    Timeout,
    Error(redis::RedisError),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => f.write_str("redis command timed out"),
            Self::Error(e) => write!(f, "redis error: {e}"),
        }
    }
}

pub(crate) struct Redis {
    pub(crate) config: RedisConfig,
    clock: Arc<dyn Clock>,
    conns: Box<[Conn]>,
    next: AtomicUsize,
    pub(crate) breaker: Breaker,
    probing: AtomicBool,
    calls: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    pub(crate) degraded: AtomicU64,
    pub(crate) denied_locally: AtomicU64,
}

impl Redis {
    /// Validates `config` and opens lazy connections; then checks once that
    /// Redis answers. If it does not, the breaker starts open and a
    /// background probe waits for Redis: starting never fails because Redis
    /// is down.
    pub(crate) async fn connect(config: RedisConfig) -> Result<Arc<Self>, ConfigError> {
        config.validate()?;
        let mut conns = Vec::with_capacity(config.connections);
        for _ in 0..config.connections {
            conns.push(match &config.target {
                Target::Standalone(url) => {
                    let client = redis::Client::open(url.as_str())
                        .map_err(|e| ConfigError::new("redis.url", format!("{:?}", e.kind())))?;
                    let cfg = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(config.connect_timeout))
                        .set_response_timeout(Some(config.command_timeout))
                        .set_number_of_retries(1);
                    Conn::Single(
                        ConnectionManager::new_lazy_with_config(client, cfg).map_err(|e| {
                            ConfigError::new("redis.url", format!("{:?}", e.kind()))
                        })?,
                    )
                }
                Target::Cluster(nodes) => {
                    let client = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
                        .connection_timeout(config.connect_timeout)
                        .response_timeout(config.command_timeout)
                        .retries(2)
                        .build()
                        .map_err(|e| {
                            ConfigError::new("redis.cluster", format!("{:?}", e.kind()))
                        })?;
                    let cfg = ClusterConfig::new()
                        .set_connection_timeout(config.connect_timeout)
                        .set_response_timeout(config.command_timeout);
                    Conn::Cluster(client.get_pending_async_connection_with_config(cfg))
                }
            });
        }
        let clock: Arc<dyn Clock> = match &config.test_clock {
            Some(c) => c.clone(),
            None => Arc::new(throttle_core::WallClock),
        };
        let redis = Arc::new(Self {
            clock,
            breaker: Breaker::new(config.breaker_threshold),
            config,
            conns: conns.into(),
            next: AtomicUsize::new(0),
            probing: AtomicBool::new(false),
            calls: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            degraded: AtomicU64::new(0),
            denied_locally: AtomicU64::new(0),
        });
        let patience = redis.config.connect_timeout + redis.config.command_timeout;
        if !redis.ping(patience).await {
            tracing::warn!(
                "throttle: Redis does not answer at startup; deciding by failure policy until it does"
            );
            if redis.breaker.trip() {
                Self::probe(&redis);
            }
        }
        Ok(redis)
    }

    fn conn(&self) -> Conn {
        let i = if self.conns.len() == 1 {
            0
        } else {
            self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len()
        };
        self.conns[i].clone()
    }

    /// "Now" for the scripts: 0 (read Redis `TIME`) unless a test clock is set.
    pub(crate) fn script_now(&self) -> u64 {
        self.config.test_clock.as_ref().map_or(0, |c| c.now_us())
    }

    /// "Now" for local decisions and flush schedules: the test clock if set.
    pub(crate) fn local_now(&self) -> u64 {
        self.clock.now_us()
    }

    /// The clock local decisions, flushes and leases all read: the test
    /// clock, or the wall clock (one clock, so local instants compare).
    pub(crate) fn local_clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    /// Whether the target is a Redis Cluster (pipelines must stay in one slot).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.config.target, Target::Cluster(_))
    }

    /// Runs a script off the request path (flushes): bounded by `timeout`,
    /// counted, but not reported to the breaker.
    pub(crate) async fn eval_off_path<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
        timeout: std::time::Duration,
    ) -> Result<T, Failure> {
        self.timed(inv, timeout).await
    }

    /// Runs a script on the request path: bounded by the command timeout,
    /// counted, and reported to the breaker.
    pub(crate) async fn eval<T: FromRedisValue>(
        self: &Arc<Self>,
        inv: &ScriptInvocation<'_>,
    ) -> Result<T, Failure> {
        let result = self.timed(inv, self.config.command_timeout).await;
        match &result {
            Ok(_) => self.breaker.success(),
            Err(failure) => self.failed(failure),
        }
        result
    }

    async fn timed<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
        timeout: std::time::Duration,
    ) -> Result<T, Failure> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut conn = self.conn();
        let result = match tokio::time::timeout(timeout, conn.invoke(inv)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Failure::Error(e)),
            Err(_) => Err(Failure::Timeout),
        };
        if let Err(failure) = &result {
            match failure {
                Failure::Timeout => self.timeouts.fetch_add(1, Ordering::Relaxed),
                Failure::Error(_) => self.errors.fetch_add(1, Ordering::Relaxed),
            };
        }
        result
    }

    /// Sends a script in the background (refunds): never waited for, never
    /// sent while the breaker is open.
    pub(crate) fn spawn_eval(self: &Arc<Self>, inv: ScriptInvocation<'static>) {
        if self.breaker.is_open() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let this = self.clone();
        rt.spawn(async move {
            let _ = this.eval::<redis::Value>(&inv).await;
        });
    }

    fn failed(self: &Arc<Self>, failure: &Failure) {
        if self.breaker.failure() {
            tracing::warn!(%failure, "throttle: circuit breaker opened; Redis gets no request-path traffic until a probe succeeds");
            Self::probe(self);
        } else {
            tracing::debug!(%failure, "throttle: Redis call failed");
        }
    }

    /// One `PING` within the connect and command timeouts: whether Redis
    /// answers now (off the request path: the breaker is not told).
    pub(crate) async fn ping_once(&self) -> bool {
        self.ping(self.config.connect_timeout + self.config.command_timeout)
            .await
    }

    /// The server's version (`INFO server`), if it answers; for each node
    /// of a cluster the one the query reached.
    pub(crate) async fn server_version(&self) -> Option<(u32, u32)> {
        let mut conn = self.conn();
        let cmd = redis::cmd("INFO").arg("server").to_owned();
        let patience = self.config.connect_timeout + self.config.command_timeout;
        let info = match tokio::time::timeout(patience, conn.query::<redis::Value>(&cmd)).await {
            Ok(Ok(v)) => v,
            _ => return None,
        };
        let text = match info {
            redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
            redis::Value::VerbatimString { text, .. } => text,
            redis::Value::Map(nodes) => nodes
                .into_iter()
                .find_map(|(_, v)| match v {
                    redis::Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
                    redis::Value::VerbatimString { text, .. } => Some(text),
                    _ => None,
                })
                .unwrap_or_default(),
            _ => return None,
        };
        parse_version(&text)
    }

    async fn ping(&self, patience: std::time::Duration) -> bool {
        let mut conn = self.conn();
        let cmd = redis::cmd("PING");
        let ping = conn.query::<String>(&cmd);
        matches!(tokio::time::timeout(patience, ping).await, Ok(Ok(_)))
    }

    /// While the breaker is open, pings Redis every probe interval and
    /// closes the breaker when it answers.
    fn probe(this: &Arc<Self>) {
        if this.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            this.probing.store(false, Ordering::Release);
            return;
        };
        let weak: Weak<Self> = Arc::downgrade(this);
        rt.spawn(async move {
            loop {
                let interval = match weak.upgrade() {
                    Some(r) => r.config.probe_interval,
                    None => return,
                };
                tokio::time::sleep(interval).await;
                let Some(redis) = weak.upgrade() else { return };
                let patience = redis.config.connect_timeout + redis.config.command_timeout;
                if redis.ping(patience).await {
                    // Lower the flag first: a failure that reopens the
                    // breaker after close() must be able to start a probe.
                    redis.probing.store(false, Ordering::Release);
                    redis.breaker.close();
                    tracing::info!("throttle: Redis answers again; circuit breaker closed");
                    return;
                }
            }
        });
    }

    pub(crate) fn stats(&self) -> RedisStats {
        RedisStats {
            calls: self.calls.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            breaker_open: self.breaker.is_open(),
            breaker_opened: self.breaker.times_opened(),
            degraded: self.degraded.load(Ordering::Relaxed),
            denied_locally: self.denied_locally.load(Ordering::Relaxed),
        }
    }
}

/// `redis_version:x.y.z` in an `INFO` text, as `(x, y)`.
pub(crate) fn parse_version(info: &str) -> Option<(u32, u32)> {
    let line = info
        .lines()
        .find_map(|l| l.trim().strip_prefix("redis_version:"))?;
    let mut parts = line.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn versions_are_read_from_info() {
        assert_eq!(
            parse_version("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"),
            Some((7, 0))
        );
        assert_eq!(parse_version("redis_version:6.2.14"), Some((6, 2)));
        assert_eq!(parse_version("redis_version:garbage"), None);
        assert_eq!(parse_version("no version here"), None);
    }
}
