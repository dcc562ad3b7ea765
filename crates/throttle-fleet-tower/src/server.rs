//! What one client, slow, idle or greedy, may hold of a server built on
//! the layer: one definition for `throttle_fleet_axum::serve` and for the
//! configuration file's `[server]` table.

use std::time::Duration;

use throttle_fleet_core::ConfigError;

/// The connection limits a server applies before the rate limiter sees a
/// request (`throttle_fleet_axum::serve`, the gateway; the file's
/// `[server]` table): a connection that never sends a complete request
/// never reaches a [`ThrottleLayer`](crate::ThrottleLayer), so these are
/// what bound slowloris clients and connection hoards.
///
/// | field | default | what it bounds |
/// |---|---:|---|
/// | `max_connections` | 10,000 | connections open at once; past it, new ones wait in the kernel's listen backlog |
/// | `max_connections_per_client` | 256 | connections one client holds at once, counted per address as the client-IP key groups them (IPv6 by `/64`); past it a new connection is closed at accept, logged and counted. Trusted proxies are exempt |
/// | `header_timeout` | 10 s | from a new connection, or from the first byte of a request, until its headers are complete (a slowloris client or a stalled request line) |
/// | `idle_timeout` | 60 s | how long a keep-alive connection waits for its next request after a response |
/// | `write_timeout` | 30 s | how long the server's writes to a connection may make no progress: a client that stops reading, or pipelines requests and never reads the answers |
/// | `body_timeout` | 60 s | how long a handler may wait for the next bytes of its request's body; also the grace before `body_min_bytes_per_sec` counts |
/// | `body_min_bytes_per_sec` | 500 | the average rate a request body must keep up past that grace, while its handler waits for it |
///
/// A running request is never cut for being slow to produce: a slow
/// handler or a long streamed body holds its connection as long as it
/// runs. What is cut is a connection whose client stops reading: once the
/// kernel's send buffer is full the server's writes wait, and a write (or
/// flush) that has waited `write_timeout` with no byte taken fails and
/// closes the connection. Any byte taken restarts the clock, so a long
/// response read slowly but steadily is sent in full. The kernel takes
/// bytes in chunks, though: Linux wakes a waiting writer once about a
/// third of the socket's send buffer has drained, so "steadily" means at
/// least that much per `write_timeout` (over TLS, the TLS layer's own
/// buffer, 64 KiB by default, as well). While a connection's writes wait,
/// hyper reads further requests only as long as its own write buffer
/// (about 400 KiB) has room for their answers, so what a client that
/// pipelines without reading holds is bounded by the kernel's buffers and
/// hyper's, for `write_timeout` after the last byte written.
///
/// The default, 30 s, is half nginx's `send_timeout`: longer than the
/// stalls a mobile network makes (a handover, a few retransmissions), and
/// short enough that a client holding `max_connections_per_client`
/// connections full of unread answers gives their memory back within half
/// a minute.
///
/// A request body is timed while its handler waits for it, under
/// `body_timeout` and `body_min_bytes_per_sec` as
/// [`BodyTimeout`](crate::body_timeout::BodyTimeout)
/// states (a handler that never reads its body is not timed, nor is the
/// time it spends between reads). Past the bound the body ends in an
/// error, the handler's answer (axum's `Json` answers a body error with
/// 400) is replaced by `408 Request Timeout`, and the connection is
/// closed: a request whose client sends its headers and no body, or
/// trickles it a byte a second, gives back what it holds (a concurrency
/// rule's slots) after 60 s, or 60.1 s for the trickle, instead of holding
/// it as long as the client likes. The defaults are nginx's
/// `client_body_timeout` and the minimum rate of Apache's
/// `RequestReadTimeout`. An upload that keeps up the rate is never cut, so
/// what bounds a slow body's hold on a slot is the rate together with the
/// body size the handler accepts (axum's `DefaultBodyLimit`, 2 MB: 70
/// minutes at 500 B/s); a service whose bodies are small can raise the
/// rate.
///
/// A client that disconnects while one pipelined byte of its next request
/// is still unread keeps its running request, and so its place under a
/// concurrency rule, until the handler ends: hyper notices the close only
/// once its read buffer is empty. That is bounded by the handler, and
/// costs only the client's own key.
///
/// Keep `max_connections` below the process's file-descriptor limit
/// (`ulimit -n`) less what the service opens itself, or accepts fail with
/// "too many open files" (logged, and retried after 50 ms).
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_tower::server::ServeLimits;
///
/// let limits = ServeLimits {
///     max_connections_per_client: 64,
///     idle_timeout: Duration::from_secs(30),
///     ..ServeLimits::default()
/// };
/// assert!(limits.validate().is_ok());
/// let none = ServeLimits { max_connections_per_client: 0, ..limits };
/// assert_eq!(none.validate().unwrap_err().field(), "serve.max_connections_per_client");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections one client (one address, one IPv6 `/64`) holds at once.
    pub max_connections_per_client: usize,
    /// How long a request's headers may take, counted from the
    /// connection's start or the request's first byte.
    pub header_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// How long the server's writes to a connection may make no progress
    /// (no byte taken by the socket) before it is closed.
    pub write_timeout: Duration,
    /// How long a handler may wait for its request body's next bytes, and
    /// the grace before the minimum rate counts.
    pub body_timeout: Duration,
    /// The average rate, in bytes a second, a request body must keep up
    /// while its handler waits for it, past the grace.
    pub body_min_bytes_per_sec: u32,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            max_connections_per_client: 256,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            body_min_bytes_per_sec: 500,
        }
    }
}

impl ServeLimits {
    /// Checks that every limit can work: counts and the body rate of at
    /// least 1, timeouts longer than zero. The error names the field
    /// (`serve.max_connections_per_client`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.max_connections == 0 {
            return Err(ConfigError::new(
                "serve.max_connections",
                "must be at least 1 (no connection could be served)",
            ));
        }
        if self.max_connections_per_client == 0 {
            return Err(ConfigError::new(
                "serve.max_connections_per_client",
                "must be at least 1 (no client could connect)",
            ));
        }
        if self.header_timeout.is_zero() {
            return Err(ConfigError::new(
                "serve.header_timeout",
                "must be longer than zero",
            ));
        }
        if self.idle_timeout.is_zero() {
            return Err(ConfigError::new(
                "serve.idle_timeout",
                "must be longer than zero",
            ));
        }
        if self.write_timeout.is_zero() {
            return Err(ConfigError::new(
                "serve.write_timeout",
                "must be longer than zero",
            ));
        }
        if self.body_timeout.is_zero() {
            return Err(ConfigError::new(
                "serve.body_timeout",
                "must be longer than zero",
            ));
        }
        if self.body_min_bytes_per_sec == 0 {
            return Err(ConfigError::new(
                "serve.body_min_bytes_per_sec",
                "must be at least 1 (a body needs some rate to keep up)",
            ));
        }
        Ok(())
    }
}
