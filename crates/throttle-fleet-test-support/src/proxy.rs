//! Test support: a TCP proxy in front of a server (a [`RedisServer`]) that
//! forwards bytes both ways and can make the server look slow or hung,
//! without touching the server itself.
//!
//! * [`DelayingProxy::start`] listens on a free port of 127.0.0.1 and
//!   forwards every connection it accepts to the server's port.
//! * [`DelayingProxy::delay_every`]`(n, delay)`: of the chunks read from the
//!   server side (over all connections, counted together), every `n`th is
//!   written to its client `delay` late. A connection's bytes stay in
//!   order: what the server sends on that connection after the delayed
//!   chunk waits behind it, as replies behind a slow command would. The
//!   counting is deterministic (the 100th, the 200th, ...), so two late
//!   chunks are `n` chunks apart, never one after the other.
//! * [`DelayingProxy::hang`] / [`DelayingProxy::resume`]: while hung,
//!   nothing is forwarded either way (connections stay open, new ones are
//!   accepted), as with a `SIGSTOP`ped server; on resume what was held goes
//!   through in order.
//! * [`DelayingProxy::redirect`]`(port, cut)`: new connections go to
//!   another server from now on, as a managed service's endpoint name moves
//!   to a promoted replica; the open ones are cut (`cut`) or stay with the
//!   server they reached (a move does not always close them).
//!
//! A chunk is what one `read` returned: with one request in flight per
//! connection (a `PING` every probe interval) it is one reply; replies the
//! server wrote together may share a chunk, and a long reply may span
//! several. That is enough to make "one answer in `n` late" without a RESP
//! parser.
//!
//! ```ignore
//! let redis = RedisServer::start();
//! let proxy = DelayingProxy::start(redis.port());    // proxy.url() for the client
//! proxy.delay_every(100, Duration::from_millis(300));
//! proxy.hang();                                     // nothing answers
//! proxy.resume();
//! ```
//!
//! Plain threads (two per connection), like the rest of the harness, so
//! the proxy keeps forwarding whatever the test's runtime is doing.
//! Dropping the proxy closes its listener and every connection.
//!
//! [`RedisServer`]: crate::RedisServer

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use crate::redis_server::lock;

/// How many bytes of each delayed chunk [`DelayingProxy::delayed`] keeps.
const KEPT: usize = 32;

/// A proxy owned by a test; see the [module docs](self).
pub struct DelayingProxy {
    port: u16,
    shared: Arc<Shared>,
}

struct Shared {
    /// Where new connections go.
    upstream: Mutex<SocketAddr>,
    /// Every `n`th chunk from the server is late (0: none).
    every: AtomicU64,
    /// By how long, in microseconds.
    delay_us: AtomicU64,
    /// Chunks read from the server side so far.
    chunks: AtomicU64,
    /// The first bytes of each chunk delayed so far.
    delayed: Mutex<Vec<Vec<u8>>>,
    /// Whether nothing is forwarded now; woken on resume and on drop.
    hung: Mutex<bool>,
    resumed: Condvar,
    closed: AtomicBool,
    /// Both ends of every connection, shut down on drop.
    sockets: Mutex<Vec<TcpStream>>,
}

impl std::fmt::Debug for DelayingProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayingProxy")
            .field("port", &self.port)
            .field("upstream", &*lock(&self.shared.upstream))
            .finish_non_exhaustive()
    }
}

impl DelayingProxy {
    /// Listens on a free port and forwards to `upstream_port` on
    /// 127.0.0.1, delaying nothing until told to.
    pub fn start(upstream_port: u16) -> Self {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("proxy: bind");
        let port = listener.local_addr().expect("proxy: local address").port();
        let shared = Arc::new(Shared {
            upstream: Mutex::new(SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port))),
            every: AtomicU64::new(0),
            delay_us: AtomicU64::new(0),
            chunks: AtomicU64::new(0),
            delayed: Mutex::new(Vec::new()),
            hung: Mutex::new(false),
            resumed: Condvar::new(),
            closed: AtomicBool::new(false),
            sockets: Mutex::new(Vec::new()),
        });
        let accepting = shared.clone();
        thread::spawn(move || accept(&listener, &accepting));
        Self { port, shared }
    }

    /// From now on every `n`th chunk read from the server is written to its
    /// client `delay` late (`n` = 0: none). The count starts again here.
    pub fn delay_every(&self, n: u64, delay: Duration) {
        let us = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.shared.delay_us.store(us, Ordering::Relaxed);
        self.shared.chunks.store(0, Ordering::Relaxed);
        self.shared.every.store(n, Ordering::Relaxed);
    }

    /// Forwards nothing either way until [`resume`](Self::resume).
    pub fn hang(&self) {
        *lock(&self.shared.hung) = true;
    }

    /// Forwards again, what was held first.
    pub fn resume(&self) {
        *lock(&self.shared.hung) = false;
        self.shared.resumed.notify_all();
    }

    /// From now on, new connections are forwarded to `upstream_port` on
    /// 127.0.0.1. The open ones are shut down (both ends) if `cut`, else
    /// they stay with the server they reached.
    pub fn redirect(&self, upstream_port: u16, cut: bool) {
        *lock(&self.shared.upstream) = SocketAddr::from((Ipv4Addr::LOCALHOST, upstream_port));
        if cut {
            for socket in lock(&self.shared.sockets).drain(..) {
                let _ = socket.shutdown(Shutdown::Both);
            }
        }
    }

    /// Chunks read from the server side since the last
    /// [`delay_every`](Self::delay_every) (or the start).
    pub fn chunks(&self) -> u64 {
        self.shared.chunks.load(Ordering::Relaxed)
    }

    /// The first bytes (up to 32) of every chunk delayed so far, in the
    /// order they were read: `b"+PONG\r\n"` for a late `PING`.
    pub fn delayed(&self) -> Vec<Vec<u8>> {
        lock(&self.shared.delayed).clone()
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for DelayingProxy {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Relaxed);
        self.resume();
        // Wakes the accepting thread, which then sees `closed`.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
        for socket in lock(&self.shared.sockets).drain(..) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.closed.load(Ordering::Relaxed) {
            return;
        }
        let Ok(client) = client else { continue };
        let upstream = *lock(&shared.upstream);
        let Ok(server) = TcpStream::connect(upstream) else {
            // The server is down: the client sees its connection closed.
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let clones = (|| {
            Ok::<_, io::Error>((
                client.try_clone()?,
                server.try_clone()?,
                client.try_clone()?,
                server.try_clone()?,
            ))
        })();
        let Ok((client_in, server_out, client_kept, server_kept)) = clones else {
            continue;
        };
        lock(&shared.sockets).extend([client_kept, server_kept]);
        let (up, down) = (shared.clone(), shared.clone());
        thread::spawn(move || pump(client_in, server_out, &up, false));
        thread::spawn(move || pump(server, client, &down, true));
    }
}

/// Copies `from` to `to` until either end closes, holding each chunk while
/// the proxy is hung and, from the server (`replies`), delaying every
/// `n`th.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, replies: bool) {
    let mut buf = vec![0; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if replies {
            let count = shared.chunks.fetch_add(1, Ordering::Relaxed) + 1;
            let every = shared.every.load(Ordering::Relaxed);
            if every != 0 && count.is_multiple_of(every) {
                lock(&shared.delayed).push(buf[..n.min(KEPT)].to_vec());
                let us = shared.delay_us.load(Ordering::Relaxed);
                thread::sleep(Duration::from_micros(us));
            }
        }
        let mut hung = lock(&shared.hung);
        while *hung {
            hung = shared
                .resumed
                .wait(hung)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        drop(hung);
        if shared.closed.load(Ordering::Relaxed) || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    // One side closed: close the other, so the client sees a lost
    // connection when the server goes away (and the reverse).
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
