//! The five algorithms as pure state machines over integer microseconds.
//!
//! Each algorithm is a [`Meter`]: parameters compiled from a [`Quota`], a
//! small per-key state, and a deterministic `acquire` that takes the state,
//! "now" and a cost and says whether the cost fits. Nothing here reads a
//! clock, allocates on the common path or knows about HTTP or Redis: the
//! memory backend, the Redis scripts (which mirror this code and are checked
//! against it by differential tests) and the simulator all drive the same
//! code.
//!
//! | algorithm | state per key | guarantee | trade-off |
//! |---|---|---|---|
//! | [`FixedWindow`] | window number + count | at most `limit` per aligned window | up to 2x `limit` across a window boundary |
//! | [`SlidingWindowLog`] | one entry per admitted request | at most `limit` in *every* window of length `period`: exact | memory and time grow with `limit` |
//! | [`SlidingWindowCounter`] | window number + two counts | at most `limit` per aligned window; smooth estimate of the sliding window | approximate: assumes the previous window's traffic was uniform |
//! | [`Gcra`] as token bucket | one timestamp | at most `burst + elapsed * rate` over any interval | none beyond the burst you choose |
//! | [`Gcra`] as leaky bucket | one timestamp | admitted requests leave at `rate`, at most `burst` queued | admitted requests wait (shaping) |
//! | [`Concurrency`] | cost in flight | at most `limit` in flight at once | a slot is held until the request ends (the layer gives it back) |
//!
//! [`Quota`]: crate::Quota

mod concurrency;
mod fixed_window;
mod gcra;
mod sliding_counter;
mod sliding_log;

pub use concurrency::{Concurrency, InFlight};
pub use fixed_window::{FixedWindow, FixedWindowState};
pub use gcra::{Gcra, GcraState};
pub use sliding_counter::{SlidingWindowCounter, SlidingWindowCounterState};
pub use sliding_log::{SlidingWindowLog, SlidingWindowLogState};

/// Which algorithm a rule uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Algorithm {
    /// Counts per aligned window; cheap; admits up to twice the limit across
    /// a boundary.
    FixedWindow,
    /// Remembers every admitted request; exact; memory grows with the limit.
    SlidingWindowLog,
    /// Weighs the previous window by the part of it still inside the sliding
    /// window; cheap and smooth; approximate.
    SlidingWindowCounter,
    /// A bucket of `burst` tokens refilled at `limit / period` (GCRA); the
    /// default.
    #[default]
    TokenBucket,
    /// A queue of `burst` drained at `limit / period` (GCRA); admitted
    /// requests are delayed until their turn instead of passing at once.
    LeakyBucket,
    /// At most `limit` requests of a key in flight at once, each holding
    /// its slots until it ends ([`Concurrency`]): not a rate, so not in
    /// [`ALL`](Self::ALL).
    Concurrency,
}

impl Algorithm {
    /// The five rate algorithms, in the order of the table above.
    pub const ALL: [Self; 5] = [
        Self::FixedWindow,
        Self::SlidingWindowLog,
        Self::SlidingWindowCounter,
        Self::TokenBucket,
        Self::LeakyBucket,
    ];

    /// A stable lower-case name (`fixed_window`, `token_bucket`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            Self::FixedWindow => "fixed_window",
            Self::SlidingWindowLog => "sliding_window_log",
            Self::SlidingWindowCounter => "sliding_window_counter",
            Self::TokenBucket => "token_bucket",
            Self::LeakyBucket => "leaky_bucket",
            Self::Concurrency => "concurrency",
        }
    }

    /// Whether the algorithm bounds requests in flight rather than a rate
    /// ([`Concurrency`]): no window, slots given back as requests end.
    pub const fn is_concurrency(self) -> bool {
        matches!(self, Self::Concurrency)
    }

    /// Whether the algorithm uses [`Quota::burst`](crate::Quota::burst).
    pub const fn uses_burst(self) -> bool {
        matches!(self, Self::TokenBucket | Self::LeakyBucket)
    }
}

/// What one check found, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Step {
    /// Whether the cost fits (and was taken).
    pub allowed: bool,
    /// Units of cost that would still fit right now, after this check.
    pub remaining: u64,
    /// Time until the key is back to its full allowance.
    pub reset_us: u64,
    /// When denied: the shortest wait after which the same cost fits, if
    /// nothing else is taken meanwhile. Zero when allowed.
    pub retry_after_us: u64,
    /// When allowed by a leaky bucket: how long the request waits for its
    /// turn. Zero otherwise.
    pub delay_us: u64,
}

/// An algorithm compiled from a quota: parameters plus the per-key state
/// machine.
///
/// A cost larger than the algorithm's capacity can never fit: such a check is
/// denied with `retry_after_us` equal to the quota's period, so clients are
/// told to back off rather than to retry at once.
pub trait Meter: Send + Sync + 'static {
    /// Per-key state. `Default` is the state of a key never seen. `Sync`
    /// because the memory backend reads states under a shared lock.
    type State: Default + Send + Sync + std::fmt::Debug + 'static;

    /// The most cost the key can spend at once (the window's limit or the
    /// bucket's capacity): what `X-RateLimit-Limit` reports.
    fn capacity(&self) -> u64;

    /// Checks `cost` at time `now_us` and takes it when it fits.
    fn acquire(&self, state: &mut Self::State, now_us: u64, cost: u64) -> Step;

    /// Gives back `cost` taken by an `acquire` at `acquired_at_us` (another
    /// rule of the same request denied it). Best effort: a window that has
    /// moved on is left alone.
    fn refund(&self, state: &mut Self::State, acquired_at_us: u64, cost: u64);

    /// The time from which `state` behaves exactly like a fresh key, so it can
    /// be forgotten.
    fn idle_at(&self, state: &Self::State) -> u64;

    /// Whether every state of this meter packs into one `u64` without
    /// loss ([`pack`](Self::pack), [`unpack`](Self::unpack)), within the
    /// ranges the meter documents, and an `acquire` that denies leaves the
    /// state as it was (default: no). The memory backend then
    /// decides a tracked key by compare-and-swap on that word, under its
    /// table's shared lock; otherwise each key's state has a lock of its own.
    fn packs(&self) -> bool {
        false
    }

    /// `state` as one word, for a meter that [`packs`](Self::packs).
    /// `origin_us` is at or before every `now_us` the state has seen (the
    /// memory backend's start): a meter that keeps a time in the word keeps
    /// it from there. A state outside the documented ranges is clamped.
    fn pack(&self, state: &Self::State, origin_us: u64) -> u64 {
        let _ = (state, origin_us);
        0
    }

    /// The state [`pack`](Self::pack) made `word` from, with the same
    /// `origin_us`.
    fn unpack(&self, word: u64, origin_us: u64) -> Self::State {
        let _ = (word, origin_us);
        Self::State::default()
    }

    /// [`acquire_under`](Self::acquire_under) on a packed state: the step,
    /// and the word to write back (`word` itself when nothing changed).
    /// By default the state is unpacked, decided and packed again; a meter
    /// may decide on the word directly, with the same steps.
    #[inline]
    fn acquire_packed(
        &self,
        word: u64,
        origin_us: u64,
        now_us: u64,
        cost: u64,
        limit: u64,
    ) -> (Step, u64) {
        let mut st = self.unpack(word, origin_us);
        let step = if Self::TAKES_A_LIMIT {
            self.acquire_under(&mut st, now_us, cost, limit)
        } else {
            self.acquire(&mut st, now_us, cost)
        };
        let word = if step.allowed {
            self.pack(&st, origin_us)
        } else {
            word
        };
        (step, word)
    }

    /// Whether [`acquire_under`](Self::acquire_under) applies its limit
    /// (default: no). Only a meter of slots does ([`Concurrency`]).
    const TAKES_A_LIMIT: bool = false;

    /// [`acquire`](Self::acquire) under `limit` instead of the meter's own
    /// capacity (a class's share, an adaptive limit; never above the
    /// capacity). By default the limit is ignored.
    fn acquire_under(&self, state: &mut Self::State, now_us: u64, cost: u64, limit: u64) -> Step {
        let _ = limit;
        self.acquire(state, now_us, cost)
    }
}
