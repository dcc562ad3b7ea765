//! Counters of the leased mode.

use std::sync::atomic::{AtomicU64, Ordering};

/// What the leased mode has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Lease calls sent to Redis (background and waited for).
    pub fetches: u64,
    /// Tokens Redis granted.
    pub leased: u64,
    /// Tokens given back by idle keys.
    pub returned: u64,
    /// Requests that waited for a lease.
    pub waited: u64,
    /// Requests denied locally (bucket known to be empty).
    pub local_denials: u64,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) fetches: AtomicU64,
    pub(super) leased: AtomicU64,
    pub(super) returned: AtomicU64,
    pub(super) waited: AtomicU64,
    pub(super) local_denials: AtomicU64,
}

impl Counters {
    pub(super) fn snapshot(&self) -> LeaseStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LeaseStats {
            fetches: get(&self.fetches),
            leased: get(&self.leased),
            returned: get(&self.returned),
            waited: get(&self.waited),
            local_denials: get(&self.local_denials),
        }
    }
}
