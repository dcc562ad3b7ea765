//! A bucket's turns at flushing: one flush out, at most one waiting (why,
//! in `flush.rs`'s `write_bucket`).

use std::sync::atomic::{AtomicBool, Ordering};

/// A bucket's flushes: the one out holds `lock`; `waiting` says one
/// waits for it (at most one does), and `full` that a flush which left
/// its keys to that one was a span end's, not an early one (the one
/// waiting then writes every listed key, not only those that asked).
#[derive(Default)]
pub(super) struct Turns {
    pub(super) lock: tokio::sync::Mutex<()>,
    pub(super) waiting: AtomicBool,
    pub(super) full: AtomicBool,
}

/// Lowers a bucket's `waiting` when the flush waiting takes its turn, or
/// is dropped before it.
pub(super) struct Queued<'a>(pub(super) &'a AtomicBool);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}
