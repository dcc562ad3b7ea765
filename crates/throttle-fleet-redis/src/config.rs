//! Where Redis is and how patient to be with it.

use std::time::Duration;

use throttle_fleet_core::ConfigError;

use crate::schedule::Scheduler;

/// The longest key prefix accepted.
pub const MAX_PREFIX_LEN: usize = 64;

#[derive(Clone)]
pub(crate) enum Target {
    Standalone(String),
    Cluster(Vec<String>),
    /// The sentinels' URLs and the service (master) name they know the
    /// primary by (`link/sentinel.rs`).
    Sentinel {
        sentinels: Vec<String>,
        service: String,
    },
}

/// How to reach Redis and how long to wait for it, shared by every mode.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_redis::RedisConfig;
///
/// let config = RedisConfig::standalone("redis://127.0.0.1:6379")
///     .command_timeout(Duration::from_millis(20))
///     .key_prefix("myapp:rl");
/// let cluster = RedisConfig::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]);
/// let sentinel = RedisConfig::sentinel(["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"], "mymaster");
/// # let _ = (config, cluster, sentinel);
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    pub(crate) target: Target,
    pub(crate) key_prefix: String,
    pub(crate) command_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) breaker_threshold: u32,
    pub(crate) probe_interval: Duration,
    pub(crate) connections: usize,
    pub(crate) fleet_size: u32,
    pub(crate) scheduler: Scheduler,
    /// `tls.rs`: the CA and the client certificate of `rediss://` URLs.
    pub(crate) tls: crate::tls::TlsSettings,
    /// `credentials.rs`: the ACL user and password of every connection.
    pub(crate) credentials: crate::credentials::Credentials,
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let target = match &self.target {
            Target::Standalone(_) => "standalone",
            Target::Cluster(_) => "cluster",
            Target::Sentinel { .. } => "sentinel",
        };
        // URLs may hold passwords: never printed.
        f.debug_struct("RedisConfig")
            .field("target", &target)
            .field("key_prefix", &self.key_prefix)
            .field("command_timeout", &self.command_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("breaker_threshold", &self.breaker_threshold)
            .field("probe_interval", &self.probe_interval)
            .field("connections", &self.connections)
            .field("fleet_size", &self.fleet_size)
            .field("scheduler", &self.scheduler)
            .field("tls", &self.tls)
            .field("credentials", &self.credentials)
            .finish()
    }
}

impl RedisConfig {
    fn new(target: Target) -> Self {
        Self {
            target,
            key_prefix: "rl".to_owned(),
            command_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_millis(50),
            breaker_threshold: 3,
            probe_interval: Duration::from_millis(250),
            connections: 1,
            fleet_size: 1,
            scheduler: Scheduler::runtime(),
            tls: Default::default(),
            credentials: Default::default(),
        }
    }

    /// One Redis server: `redis://[user:password@]host:port[/db]`, or
    /// `rediss://...` for TLS (the `tls` feature; without it such a URL is
    /// an error naming `redis.url` and the feature). Over TLS the server is
    /// verified against the platform's roots, or
    /// [`tls_ca_file`](Self::tls_ca_file), for the URL's host name (also
    /// sent as SNI); [`tls_client_cert`](Self::tls_client_cert) adds a
    /// client certificate. [`username`](Self::username) and
    /// [`password`](Self::password) keep credentials out of the URL.
    pub fn standalone(url: impl Into<String>) -> Self {
        Self::new(Target::Standalone(url.into()))
    }

    /// A Redis Cluster, found through any of these seed nodes. `MOVED` and
    /// `ASK` redirections and slot changes are followed. Every node the
    /// Cluster announces is reached as the first seed is: over TLS if it
    /// is a `rediss://` URL (verified for the address the Cluster
    /// announces), with the same credentials.
    pub fn cluster<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(Target::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    /// A primary and its replicas watched by Redis Sentinel: the sentinels'
    /// URLs (`redis://[:password@]host:26379`, the password being the
    /// sentinels' own `requirepass`) and the name they know the primary by
    /// (`sentinel monitor <service> ...`, the master name). Commands go to
    /// the primary the sentinels name, once it says it is one (`ROLE`);
    /// after a failover the breaker's probe asks the sentinels again and
    /// follows the promoted replica, while each rule's failure policy
    /// decides. The data nodes' own credentials, if they need any, are
    /// [`username`](Self::username) and [`password`](Self::password); the
    /// sentinels' are in their URLs. A `rediss://` sentinel URL makes the
    /// data nodes' connections TLS too, with the same CA and client
    /// certificate.
    ///
    /// ```
    /// use throttle_fleet_redis::RedisConfig;
    ///
    /// let config = RedisConfig::sentinel(
    ///     ["redis://:sentinel-secret@10.0.0.1:26379", "redis://:sentinel-secret@10.0.0.2:26379"],
    ///     "mymaster",
    /// )
    /// .password("data-secret");
    /// # let _ = config;
    /// ```
    pub fn sentinel<I, S>(sentinels: I, service: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::new(Target::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            service: service.into(),
        })
    }

    /// Prefix of every key (default `rl`): keys are
    /// `<prefix>:{<rule>:<key>}:<suffix>`.
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// How long a check may wait for Redis before the rule's failure policy
    /// decides (default 50 ms). A hung Redis adds at most this to a request,
    /// and only until the circuit breaker opens.
    #[must_use]
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// How long connecting may take (default 50 ms).
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Consecutive failures or timeouts that open the circuit breaker
    /// (default 3). While open, no check goes to Redis; a background probe
    /// closes it when Redis answers again.
    #[must_use]
    pub fn breaker_threshold(mut self, failures: u32) -> Self {
        self.breaker_threshold = failures;
        self
    }

    /// How often the open breaker probes Redis (default 250 ms).
    #[must_use]
    pub fn probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval;
        self
    }

    /// Multiplexed connections to open per Redis server, used in turn
    /// (default 1). Concurrent checks are pipelined on each connection.
    #[must_use]
    pub fn connections(mut self, connections: usize) -> Self {
        self.connections = connections;
        self
    }

    /// How many instances share each quota (default 1). While Redis is
    /// unavailable, a rule with [`FailurePolicy::LocalFallback`] allows each
    /// instance `quota / fleet_size`, so the fleet as a whole stays near the
    /// quota.
    ///
    /// [`FailurePolicy::LocalFallback`]: throttle_fleet_core::FailurePolicy::LocalFallback
    #[must_use]
    pub fn fleet_size(mut self, instances: u32) -> Self {
        self.fleet_size = instances;
        self
    }

    /// The clock and timers of the backend's background work (flushes,
    /// give-backs, renewals, heartbeats, probes): by default
    /// [`Scheduler::runtime`], the wall clock and Tokio's timers. A test
    /// gives a [`TestTime`](crate::schedule::TestTime)'s, which also passes
    /// its time to the scripts instead of letting them read Redis `TIME`,
    /// so that Redis and the in-memory algorithms share one timeline.
    #[must_use]
    pub fn scheduler(mut self, scheduler: Scheduler) -> Self {
        self.scheduler = scheduler;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let p = &self.key_prefix;
        if p.is_empty() || p.len() > MAX_PREFIX_LEN {
            return Err(ConfigError::new(
                "redis.key_prefix",
                format!("must be 1 to {MAX_PREFIX_LEN} bytes (got {})", p.len()),
            ));
        }
        if let Some(c) = p
            .chars()
            .find(|c| matches!(c, '{' | '}') || c.is_whitespace() || c.is_control())
        {
            return Err(ConfigError::new(
                "redis.key_prefix",
                format!("must not hold braces, spaces or control characters (found {c:?})"),
            ));
        }
        for (field, d) in [
            ("redis.command_timeout", self.command_timeout),
            ("redis.connect_timeout", self.connect_timeout),
            ("redis.probe_interval", self.probe_interval),
        ] {
            if d.is_zero() {
                return Err(ConfigError::new(field, "must be positive"));
            }
        }
        if self.breaker_threshold == 0 {
            return Err(ConfigError::new(
                "redis.breaker_threshold",
                "must be at least 1 (got 0)",
            ));
        }
        if self.connections == 0 || self.connections > 64 {
            return Err(ConfigError::new(
                "redis.connections",
                format!("must be from 1 to 64 (got {})", self.connections),
            ));
        }
        if self.fleet_size == 0 {
            return Err(ConfigError::new(
                "redis.fleet_size",
                "must be at least 1 (got 0)",
            ));
        }
        match &self.target {
            Target::Standalone(url) => check_url(url, "redis.url")?,
            Target::Cluster(nodes) if nodes.is_empty() => {
                return Err(ConfigError::new(
                    "redis.cluster",
                    "needs at least one seed node",
                ));
            }
            Target::Cluster(nodes) => nodes
                .iter()
                .try_for_each(|n| check_url(n, "redis.cluster"))?,
            Target::Sentinel { sentinels, .. } if sentinels.is_empty() => {
                return Err(ConfigError::new(
                    "redis.sentinel",
                    "needs at least one sentinel",
                ));
            }
            Target::Sentinel { service, .. } if service.is_empty() => {
                return Err(ConfigError::new(
                    "redis.sentinel.service",
                    "needs the name the sentinels know the primary by (got an empty one)",
                ));
            }
            Target::Sentinel { sentinels, .. } => sentinels
                .iter()
                .try_for_each(|n| check_url(n, "redis.sentinel"))?,
        }
        Ok(())
    }
}

fn check_url(url: &str, field: &'static str) -> Result<(), ConfigError> {
    crate::link::endpoint::parse(url, field).map(drop)
}
