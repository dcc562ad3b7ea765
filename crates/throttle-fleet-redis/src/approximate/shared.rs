//! State shared by every approximate rule of one backend.

use std::sync::atomic::{AtomicBool, AtomicU64};

use super::options::ApproximateOptions;
use super::stats::Counters;

/// State shared by every approximate rule of one backend.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) options: ApproximateOptions,
    pub(super) instance: String,
    /// Numbers the rules built on this backend (part of each rule's id).
    pub(super) next_rule: AtomicU64,
    /// The backend is shutting down: flushes give claims back.
    pub(super) closing: AtomicBool,
    pub(super) counters: Counters,
}

impl Shared {
    pub(super) fn new(options: ApproximateOptions) -> Self {
        Self {
            options,
            instance: crate::instance::instance_id(),
            closing: AtomicBool::new(false),
            next_rule: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }
}
