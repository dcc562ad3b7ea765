//! State shared by every leased rule of one backend.

use std::sync::atomic::AtomicUsize;

use super::options::LeaseOptions;
use super::stats::Counters;

/// State shared by every leased rule of one backend.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) options: LeaseOptions,
    pub(super) counters: Counters,
    /// Leases on their way in the background.
    pub(super) in_flight: AtomicUsize,
    /// Told when the last lease on its way has arrived (`in_flight` is 0).
    pub(super) settled: tokio::sync::Notify,
}

impl Shared {
    pub(super) fn new(options: LeaseOptions) -> Self {
        Self {
            options,
            counters: Counters::default(),
            in_flight: AtomicUsize::new(0),
            settled: tokio::sync::Notify::new(),
        }
    }
}
