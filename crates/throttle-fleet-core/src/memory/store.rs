//! One rule's table, in the cells its meter's states fit: packed words
//! when the meter [packs](Meter::packs) them (the token and leaky buckets
//! within their ranges, concurrency), a lock per key otherwise.

use parking_lot::Mutex;

use super::cell::Packed;
use super::table::{MemoryStats, Table};
use crate::Key;
use crate::algorithm::{Meter, Step};

#[derive(Debug)]
pub(crate) enum Store<M: Meter> {
    Packed(Table<M, Packed>),
    Locked(Table<M, Mutex<M::State>>),
}

/// `$body` with `$table` bound to whichever table `$store` holds.
macro_rules! each {
    ($store:expr, $table:ident => $body:expr) => {
        match $store {
            Store::Packed($table) => $body,
            Store::Locked($table) => $body,
        }
    };
}

impl<M: Meter> Store<M> {
    pub(crate) fn new(meter: M, shards: usize, max_keys: usize, origin_us: u64) -> Self {
        if meter.packs() {
            Self::Packed(Table::new(meter, shards, max_keys, origin_us))
        } else {
            Self::Locked(Table::new(meter, shards, max_keys, origin_us))
        }
    }

    /// A store over the same table deciding with `meter` (a reload at
    /// another quota), or `None` when `meter` keeps its states in the
    /// other kind of cell (a token bucket reloaded past the ranges that
    /// pack): its counts then start afresh.
    pub(crate) fn with_meter(&self, meter: M) -> Option<Self> {
        match self {
            Self::Packed(t) if meter.packs() => Some(Self::Packed(t.with_meter(meter))),
            Self::Locked(t) if !meter.packs() => Some(Self::Locked(t.with_meter(meter))),
            _ => None,
        }
    }

    #[inline(always)]
    pub(crate) fn acquire(&self, key: &Key, now_us: u64, cost: u64, limit: u64) -> Step {
        each!(self, t => t.acquire(key, now_us, cost, limit))
    }

    pub(crate) fn with_state<R>(
        &self,
        key: &Key,
        now_us: u64,
        f: impl FnOnce(&mut M::State) -> R,
    ) -> R {
        each!(self, t => t.with_state(key, now_us, f))
    }

    pub(crate) fn update<R>(&self, key: &Key, f: impl FnOnce(&mut M::State) -> R) -> Option<R> {
        each!(self, t => t.update(key, f))
    }

    pub(crate) fn for_each(&self, f: impl FnMut(&Key, &mut M::State)) {
        each!(self, t => t.for_each(f))
    }

    pub(crate) fn refund(&self, key: &Key, acquired_at_us: u64, cost: u64) {
        each!(self, t => t.refund(key, acquired_at_us, cost))
    }

    #[inline(always)]
    pub(crate) fn meter(&self) -> &M {
        each!(self, t => t.meter())
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        each!(self, t => t.stats())
    }
}
