//! What the service side of one connection tells the rest of it: how many
//! requests have started and how many still run (for the connection's
//! clocks), and which request's body timed out (for its answer, a 408).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The requests of one connection, as its service side sees them.
///
/// Nothing is woken when the last one ends: its response's last bytes are
/// written after that (hyper drops a body before it writes the body's
/// end), and the write that takes them starts the idle clock. A wake-up
/// here would cost a second poll of the connection's task per request.
#[derive(Debug, Default)]
pub(super) struct Activity {
    started: AtomicU64,
    running: AtomicUsize,
    /// The number of the last request whose body timed out (requests are
    /// numbered from 1 in the order they start; 0 for none).
    body_timed_out: AtomicU64,
}

impl Activity {
    /// A request's headers were read and its handler called; the returned
    /// guard marks it running until dropped.
    pub(super) fn start(self: &Arc<Self>) -> Running {
        let request = self.started.fetch_add(1, Ordering::Relaxed) + 1;
        self.running.fetch_add(1, Ordering::Relaxed);
        Running {
            activity: Arc::clone(self),
            request,
        }
    }

    /// Requests started so far.
    pub(super) fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// Requests still running (their response not yet sent or dropped).
    pub(super) fn running(&self) -> usize {
        self.running.load(Ordering::Relaxed)
    }
}

/// A running request; dropped with its response body.
#[derive(Debug)]
pub(super) struct Running {
    activity: Arc<Activity>,
    request: u64,
}

impl Running {
    /// What this request's body tells when it times out.
    pub(super) fn body_watch(&self) -> BodyWatch {
        BodyWatch {
            activity: Arc::clone(&self.activity),
            request: self.request,
        }
    }

    /// Whether this request's body timed out.
    pub(super) fn body_timed_out(&self) -> bool {
        self.activity.body_timed_out.load(Ordering::Relaxed) == self.request
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.activity.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Held by a request's body: marks the request as one whose body timed
/// out.
#[derive(Debug)]
pub(super) struct BodyWatch {
    activity: Arc<Activity>,
    request: u64,
}

impl BodyWatch {
    pub(super) fn timed_out(&self) {
        self.activity
            .body_timed_out
            .store(self.request, Ordering::Relaxed);
    }
}
