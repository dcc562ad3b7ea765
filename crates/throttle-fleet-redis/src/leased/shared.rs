//! State shared by every leased rule of one backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::registry::Registry;

use super::limiter::LeaseRule;
use super::options::LeaseOptions;
use super::stats::{Counters, LeaseStats};

/// State shared by every leased rule of one backend.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(super) options: LeaseOptions,
    pub(super) counters: Counters,
    pub(super) in_flight: AtomicUsize,
    pub(super) rules: Registry<LeaseRule>,
}

impl Shared {
    pub(crate) fn new(options: LeaseOptions) -> Arc<Self> {
        Arc::new(Self {
            options,
            counters: Counters::default(),
            in_flight: AtomicUsize::new(0),
            rules: Registry::default(),
        })
    }

    pub(crate) fn stats(&self) -> LeaseStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LeaseStats {
            fetches: get(&c.fetches),
            leased: get(&c.leased),
            returned: get(&c.returned),
            waited: get(&c.waited),
            local_denials: get(&c.local_denials),
        }
    }

    /// Waits for background leases, then gives back tokens of keys idle
    /// for `return_after` (all of them when `all`). Returns whether every
    /// return reached Redis.
    pub(crate) async fn give_back(&self, all: bool) -> bool {
        while self.in_flight.load(Ordering::Acquire) > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut ok = true;
        for rule in self.rules.live() {
            ok &= rule.give_back(all).await;
        }
        ok
    }
}
