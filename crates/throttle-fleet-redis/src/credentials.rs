//! Who the backend is to Redis: an ACL user and its password, sent by
//! every connection the backend opens (to a standalone server, and to
//! every node of a Cluster, the discovered ones included). A password
//! given here replaces the one a URL holds; none is ever printed.

use redis::ConnectionInfo;
use throttle_fleet_core::ConfigError;

use crate::RedisConfig;

/// The credentials of a [`RedisConfig`], beside (and over) those of its
/// URLs.
#[derive(Clone, Default)]
pub(crate) struct Credentials {
    username: Option<String>,
    password: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl RedisConfig {
    /// The ACL user every connection authenticates as (`AUTH <user>
    /// <password>`), instead of the URL's (or Redis's `default` user).
    /// Needs a password, here or in the URL.
    ///
    /// ```
    /// use throttle_fleet_redis::RedisConfig;
    ///
    /// let password = std::env::var("REDIS_PASSWORD").unwrap_or_default();
    /// let config = RedisConfig::standalone("redis://redis.internal:6379")
    ///     .username("throttle")
    ///     .password(password);
    /// # let _ = config;
    /// ```
    #[must_use]
    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.credentials.username = Some(username.into());
        self
    }

    /// The password every connection authenticates with, on every node:
    /// it replaces the one a URL holds (so a URL can stay free of it), and
    /// it is never printed (`Debug` shows `<redacted>`). Read once, when
    /// the backend is built: a password changed in Redis takes a backend
    /// built again with the new one (Redis keeps several passwords per
    /// user, so the old one can stay valid until every instance has the
    /// new one). A refusal at startup (`WRONGPASS`, `NOAUTH`) is an error
    /// naming `redis.password`; a Redis that is down is not.
    ///
    /// ```
    /// use throttle_fleet_redis::RedisConfig;
    ///
    /// let config = RedisConfig::cluster(["rediss://10.0.0.1:6380", "rediss://10.0.0.2:6380"])
    ///     .password("s3cret");
    /// assert!(!format!("{config:?}").contains("s3cret"));
    /// ```
    #[must_use]
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.credentials.password = Some(password.into());
        self
    }
}

impl Credentials {
    /// `info` (from the URL in `field`) with these credentials.
    pub(crate) fn apply(
        &self,
        info: ConnectionInfo,
        field: &str,
    ) -> Result<ConnectionInfo, ConfigError> {
        if self.username.is_none() && self.password.is_none() {
            return Ok(info);
        }
        if self.password.as_ref().is_some_and(String::is_empty) {
            return Err(ConfigError::new("redis.password", "is empty"));
        }
        let mut settings = info.redis_settings().clone();
        if let Some(password) = &self.password {
            settings = settings.set_password(password);
        }
        if let Some(username) = &self.username {
            if username.is_empty() || username.chars().any(|c| c.is_whitespace()) {
                return Err(ConfigError::new(
                    "redis.username",
                    "must be a non-empty name without spaces",
                ));
            }
            if settings.password().is_none() {
                return Err(ConfigError::new(
                    "redis.username",
                    format!("needs a password (redis.password, or in {field})"),
                ));
            }
            settings = settings.set_username(username);
        }
        Ok(info.set_redis_settings(settings))
    }
}
