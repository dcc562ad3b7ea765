//! Which connections are let in: a global cap taken before `accept` (past
//! it, new connections wait in the kernel's backlog), and a cap per client
//! checked right after it (past it, the connection is closed, logged and
//! counted).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use throttle_fleet_core::{ConfigError, Key};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::ServeLimits;
use super::log_throttle::{Count, Flush, LogThrottle};
use crate::ClientIp;

/// The `metrics` names of the counts (with the `metrics` feature).
#[cfg(feature = "metrics")]
mod names {
    pub(super) const ACCEPTED: &str = "throttle_connections_accepted_total";
    pub(super) const REFUSED: &str = "throttle_connections_refused_total";
    pub(super) const OPEN: &str = "throttle_connections_open";
    pub(super) const ACCEPT_ERRORS: &str = "throttle_accept_errors_total";
}

/// How long to wait after a failed `accept` (out of file descriptors and
/// the like) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The connections a server holds, and the counts behind its limits.
/// Clones share one set of counts.
///
/// [`serve`](super::serve) uses one; a server with its own accept loop
/// (a TLS handshake first, say) calls [`accept`](Self::accept) and hands
/// each connection to [`serve_connection`](super::serve_connection).
#[derive(Clone)]
pub struct Connections {
    shared: Arc<Shared>,
}

struct Shared {
    limits: ServeLimits,
    clients: ClientIp,
    permits: Arc<Semaphore>,
    /// Open connections per client key (trusted proxies are not counted).
    hosts: Mutex<HashMap<Key, usize>>,
    stats: ConnectionStats,
    /// Refusals at the per-client cap, and the latest one's client.
    refusals: Mutex<LogThrottle<IpAddr>>,
    /// Failed accepts, and the latest one's error.
    accept_errors: Mutex<LogThrottle<io::Error>>,
}

/// Counts of what [`Connections`] let in and refused. Clones share the
/// counts. With the `metrics` feature (on by default) the same counts go to
/// the `metrics` facade, summed over every server in the process:
/// `throttle_connections_accepted_total`,
/// `throttle_connections_refused_total{reason="per_client"}`,
/// `throttle_connections_open` (a gauge) and `throttle_accept_errors_total`.
#[derive(Debug, Clone, Default)]
pub struct ConnectionStats {
    inner: Arc<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    open: AtomicUsize,
    accepted: AtomicU64,
    refused_per_client: AtomicU64,
    accept_errors: AtomicU64,
}

impl ConnectionStats {
    /// Connections open now.
    pub fn open(&self) -> usize {
        self.inner.open.load(Ordering::Relaxed)
    }

    /// Connections let in since the start.
    pub fn accepted(&self) -> u64 {
        self.inner.accepted.load(Ordering::Relaxed)
    }

    /// Connections closed at accept because their client already held
    /// `max_connections_per_client` connections.
    pub fn refused_per_client(&self) -> u64 {
        self.inner.refused_per_client.load(Ordering::Relaxed)
    }

    /// `accept` calls that failed (out of file descriptors and the like).
    pub fn accept_errors(&self) -> u64 {
        self.inner.accept_errors.load(Ordering::Relaxed)
    }
}

/// A connection let in: holds its place under both caps until dropped.
#[must_use = "the connection's place is given back when this is dropped"]
pub struct Admitted {
    shared: Arc<Shared>,
    host: Option<Key>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.shared.stats.inner.open.fetch_sub(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::gauge!(names::OPEN).decrement(1.0);
        if let Some(host) = &self.host {
            let mut hosts = self.shared.hosts();
            if let Some(n) = hosts.get_mut(host) {
                *n -= 1;
                if *n == 0 {
                    hosts.remove(host);
                }
            }
        }
    }
}

impl Connections {
    /// Connections under `limits`, with clients grouped as `clients` groups
    /// them (its IPv4 and IPv6 prefixes; its trusted proxies are exempt
    /// from the per-client cap). Pass the `ClientIp` the policy limits by,
    /// so that a connection's client is the limiter's client. The error
    /// names the limit that cannot work.
    pub fn new(limits: ServeLimits, clients: ClientIp) -> Result<Self, ConfigError> {
        Self::with_stats(limits, clients, ConnectionStats::default())
    }

    pub(super) fn with_stats(
        limits: ServeLimits,
        clients: ClientIp,
        stats: ConnectionStats,
    ) -> Result<Self, ConfigError> {
        limits.validate()?;
        throttle_fleet_tower::KeyExtractor::validate(&clients)?;
        Ok(Self {
            shared: Arc::new(Shared {
                limits,
                clients,
                permits: Arc::new(Semaphore::new(limits.max_connections)),
                hosts: Mutex::new(HashMap::new()),
                stats,
                refusals: Mutex::new(LogThrottle::default()),
                accept_errors: Mutex::new(LogThrottle::default()),
            }),
        })
    }

    /// The limits these connections are held to.
    pub fn limits(&self) -> &ServeLimits {
        &self.shared.limits
    }

    /// The counts behind the limits.
    pub fn stats(&self) -> ConnectionStats {
        self.shared.stats.clone()
    }

    /// The next connection let in: waits for a place under
    /// `max_connections`, accepts, and closes (logs, counts) connections
    /// from clients at their `max_connections_per_client` cap. A failed `accept` is logged
    /// and retried after 50 ms; this never returns an error.
    ///
    /// The stream comes with `TCP_NODELAY` set: hyper writes a response's
    /// head and body in separate writes, and without it Nagle's algorithm
    /// holds the second until the client's delayed ACK (about 40 ms on
    /// Linux).
    pub async fn accept(&self, listener: &TcpListener) -> (TcpStream, SocketAddr, Admitted) {
        loop {
            let permit = Arc::clone(&self.shared.permits)
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            let (stream, peer) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    Shared::accept_failed(&self.shared, e);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            if let Some(admitted) = self.admit(peer, permit) {
                // Fails only on a socket already dead, which the first
                // read or write reports.
                let _ = stream.set_nodelay(true);
                return (stream, peer, admitted);
            }
            // Refused: dropping the stream closes it.
        }
    }

    /// Lets a connection from `peer` in under the per-client cap, or
    /// refuses it (logged, counted).
    fn admit(&self, peer: SocketAddr, permit: OwnedSemaphorePermit) -> Option<Admitted> {
        let shared = &self.shared;
        let ip = peer.ip();
        let host = if shared.clients.is_trusted_peer(ip) {
            None
        } else {
            let key = shared.clients.key_of(ip);
            let mut hosts = shared.hosts();
            let held = hosts.entry(key).or_insert(0);
            if *held >= shared.limits.max_connections_per_client {
                drop(hosts);
                Shared::refused(shared, peer.ip());
                return None;
            }
            *held += 1;
            Some(key)
        };
        shared.stats.inner.open.fetch_add(1, Ordering::Relaxed);
        shared.stats.inner.accepted.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        {
            metrics::gauge!(names::OPEN).increment(1.0);
            metrics::counter!(names::ACCEPTED).increment(1);
        }
        Some(Admitted {
            shared: Arc::clone(shared),
            host,
            _permit: permit,
        })
    }

    /// Waits until every connection let in has closed, at most `timeout`.
    /// Returns whether they all did.
    pub async fn drain(&self, timeout: Duration) -> bool {
        let all = u32::try_from(self.shared.limits.max_connections).unwrap_or(u32::MAX);
        tokio::time::timeout(timeout, self.shared.permits.acquire_many(all))
            .await
            .is_ok()
    }
}

impl Shared {
    fn hosts(&self) -> std::sync::MutexGuard<'_, HashMap<Key, usize>> {
        self.hosts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn refused(this: &Arc<Self>, client: IpAddr) {
        this.stats
            .inner
            .refused_per_client
            .fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(names::REFUSED, "reason" => "per_client").increment(1);
        let count = this.refusals().count(client, Instant::now());
        match count {
            Count::Log(refused, client) => this.log_refused(refused, client),
            Count::FlushAt(at) => flush_at(this, at, Self::refusals, Self::log_refused),
            Count::Held => {}
        }
    }

    fn refusals(&self) -> std::sync::MutexGuard<'_, LogThrottle<IpAddr>> {
        self.refusals.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn log_refused(&self, refused: u64, client: IpAddr) {
        tracing::warn!(
            %client,
            refused,
            max_connections_per_client = self.limits.max_connections_per_client,
            "connection refused: the client already holds its per-client cap of connections \
             ({refused} refused since the last such line, the latest shown)"
        );
    }

    fn accept_failed(this: &Arc<Self>, e: io::Error) {
        this.stats
            .inner
            .accept_errors
            .fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!(names::ACCEPT_ERRORS).increment(1);
        let count = this.accept_errors().count(e, Instant::now());
        match count {
            Count::Log(failed, e) => this.log_accept_failed(failed, e),
            Count::FlushAt(at) => flush_at(this, at, Self::accept_errors, Self::log_accept_failed),
            Count::Held => {}
        }
    }

    fn accept_errors(&self) -> std::sync::MutexGuard<'_, LogThrottle<io::Error>> {
        self.accept_errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn log_accept_failed(&self, failed: u64, e: io::Error) {
        tracing::warn!(
            error = %e,
            failed,
            "accept failed; retrying in 50 ms ({failed} failures since the last such line, \
             the latest shown)"
        );
    }
}

/// Logs what `events` holds at `at`, or later if a line went out since
/// (a task of its own: no later event may come to log it). The task
/// holds no strong reference: a server gone by then logs nothing.
fn flush_at<T: Send + 'static>(
    shared: &Arc<Shared>,
    at: Instant,
    events: for<'a> fn(&'a Shared) -> std::sync::MutexGuard<'a, LogThrottle<T>>,
    log: fn(&Shared, u64, T),
) {
    let shared: Weak<Shared> = Arc::downgrade(shared);
    tokio::spawn(async move {
        let mut at = at;
        loop {
            tokio::time::sleep_until(at).await;
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let flushed = events(&shared).flush(Instant::now());
            match flushed {
                Flush::Log(n, latest) => return log(&shared, n, latest),
                Flush::Again(later) => at = later,
                Flush::Done => return,
            }
        }
    });
}

#[cfg(test)]
mod tests;
