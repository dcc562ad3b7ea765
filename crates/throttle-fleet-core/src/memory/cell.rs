//! How the table keeps one key's state: packed in a word and updated by
//! compare-and-swap, or behind a lock of the key's own. Either way a check
//! of a tracked key needs only the table's shared lock, so two cores
//! checking keys of one shard do not take turns.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::algorithm::{Meter, Step};

/// One key's state in the table.
pub(crate) trait Cell<M: Meter>: Send + Sync + fmt::Debug + Sized + 'static {
    /// Whether [`try_with`](Self::try_with) runs its closure.
    const SHARED_WITH: bool;

    /// The state of a key never seen.
    fn fresh(meter: &M, origin_us: u64) -> Self;

    /// Checks `cost` at `now_us` under `limit` ([`Meter::acquire_under`]
    /// for a meter that takes one), taking it when it fits.
    fn acquire(&self, meter: &M, origin_us: u64, now_us: u64, cost: u64, limit: u64) -> Step;

    /// Gives back `cost` taken at `acquired_at_us`.
    fn refund(&self, meter: &M, origin_us: u64, acquired_at_us: u64, cost: u64);

    /// Runs `f` on the state through a shared reference, when the cell can
    /// (a lock of its own); gives `f` back otherwise.
    fn try_with<R, F: FnOnce(&mut M::State) -> R>(
        &self,
        meter: &M,
        origin_us: u64,
        f: F,
    ) -> Result<R, F>;

    /// Runs `f` on the state, with the table held exclusively.
    fn with_mut<R>(&mut self, meter: &M, origin_us: u64, f: impl FnOnce(&mut M::State) -> R) -> R;

    /// [`Meter::idle_at`] of the state.
    fn idle_at(&self, meter: &M, origin_us: u64) -> u64;
}

#[inline(always)]
fn step<M: Meter>(meter: &M, st: &mut M::State, now_us: u64, cost: u64, limit: u64) -> Step {
    if M::TAKES_A_LIMIT {
        meter.acquire_under(st, now_us, cost, limit)
    } else {
        meter.acquire(st, now_us, cost)
    }
}

/// A state that [packs](Meter::packs) into one word, updated by
/// compare-and-swap: a check reads the word, decides on the unpacked copy,
/// and writes back only what changed (a denial writes nothing).
#[derive(Debug)]
pub(crate) struct Packed(AtomicU64);

impl<M: Meter> Cell<M> for Packed {
    const SHARED_WITH: bool = false;

    fn fresh(meter: &M, origin_us: u64) -> Self {
        Self(AtomicU64::new(meter.pack(&M::State::default(), origin_us)))
    }

    #[inline(always)]
    fn acquire(&self, meter: &M, origin_us: u64, now_us: u64, cost: u64, limit: u64) -> Step {
        // A clock that steps back past the origin stands still at it.
        let now_us = now_us.max(origin_us);
        let mut word = self.0.load(Ordering::Relaxed);
        loop {
            let (step, new) = meter.acquire_packed(word, origin_us, now_us, cost, limit);
            match self.swap(word, new) {
                Ok(()) => return step,
                Err(seen) => word = seen,
            }
        }
    }

    fn refund(&self, meter: &M, origin_us: u64, acquired_at_us: u64, cost: u64) {
        self.update(meter, origin_us, |st| {
            meter.refund(st, acquired_at_us, cost)
        });
    }

    fn try_with<R, F: FnOnce(&mut M::State) -> R>(&self, _: &M, _: u64, f: F) -> Result<R, F> {
        Err(f)
    }

    fn with_mut<R>(&mut self, meter: &M, origin_us: u64, f: impl FnOnce(&mut M::State) -> R) -> R {
        let word = self.0.get_mut();
        let mut st = meter.unpack(*word, origin_us);
        let r = f(&mut st);
        *word = meter.pack(&st, origin_us);
        r
    }

    fn idle_at(&self, meter: &M, origin_us: u64) -> u64 {
        meter.idle_at(&meter.unpack(self.0.load(Ordering::Relaxed), origin_us))
    }
}

impl Packed {
    /// Runs `f` on the unpacked state until the word it read is still the
    /// word when the result is written (`f` runs again on the newer state
    /// otherwise). The word is the key's whole state, so relaxed ordering
    /// suffices: every update of one word is in one total order.
    #[inline(always)]
    fn update<M: Meter, R>(
        &self,
        meter: &M,
        origin_us: u64,
        mut f: impl FnMut(&mut M::State) -> R,
    ) -> R {
        let mut word = self.0.load(Ordering::Relaxed);
        loop {
            let mut st = meter.unpack(word, origin_us);
            let r = f(&mut st);
            match self.swap(word, meter.pack(&st, origin_us)) {
                Ok(()) => return r,
                Err(seen) => word = seen,
            }
        }
    }

    /// Writes `new` where `old` was read, unless the word has changed since
    /// (then `Err` with what it holds now). Nothing to write is a success.
    #[inline(always)]
    fn swap(&self, old: u64, new: u64) -> Result<(), u64> {
        if new == old {
            return Ok(());
        }
        self.0
            .compare_exchange_weak(old, new, Ordering::Relaxed, Ordering::Relaxed)
            .map(drop)
    }
}

/// A state behind a lock of the key's own (a byte beside it), held only
/// while the meter decides.
impl<M: Meter> Cell<M> for Mutex<M::State> {
    const SHARED_WITH: bool = true;

    fn fresh(_: &M, _: u64) -> Self {
        Mutex::new(M::State::default())
    }

    #[inline(always)]
    fn acquire(&self, meter: &M, _: u64, now_us: u64, cost: u64, limit: u64) -> Step {
        step(meter, &mut self.lock(), now_us, cost, limit)
    }

    fn refund(&self, meter: &M, _: u64, acquired_at_us: u64, cost: u64) {
        meter.refund(&mut self.lock(), acquired_at_us, cost);
    }

    fn try_with<R, F: FnOnce(&mut M::State) -> R>(&self, _: &M, _: u64, f: F) -> Result<R, F> {
        Ok(f(&mut self.lock()))
    }

    fn with_mut<R>(&mut self, _: &M, _: u64, f: impl FnOnce(&mut M::State) -> R) -> R {
        f(self.get_mut())
    }

    fn idle_at(&self, meter: &M, _: u64) -> u64 {
        meter.idle_at(&self.lock())
    }
}
