//! The local table of the leased mode: tokens held per key.

use std::sync::Arc;

use throttle_fleet_core::algorithm::{GcraState, Meter, Step};
use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;

/// Per-key state of the leased mode.
#[derive(Debug, Default)]
pub(crate) struct LeaseState {
    /// Tokens held locally.
    pub(super) tokens: u64,
    /// The bucket was empty: deny locally until then.
    pub(super) exhausted_until: u64,
    /// A batch lease is on its way; requests the local tokens cannot pay
    /// for wait for it here instead of each calling Redis.
    pub(super) fetching: Option<Arc<Notify>>,
    /// Last time a token was spent (or leased).
    pub(super) used_at: u64,
    /// The size of this key's next batch: 0 for a new key (its first lease
    /// takes only the request's cost), grown while it keeps spending.
    pub(super) batch: u64,
    /// When the bucket is full again, as of the last lease.
    pub(super) full_at: u64,
    /// Requests denied here (bucket known to be empty) since the last lease.
    pub(super) denied: u64,
    /// A drained key asks again after `2^backoff` seconds at most.
    pub(super) backoff: u8,
    /// The key's last lease came back short: the bucket is drained, and
    /// what one instance holds another may be denied for. Leases are then
    /// sized to this instance's demand and taken once its tokens are about
    /// to run out (see [`LeaseState::fetch_below`]).
    pub(super) drained: bool,
    /// The cost requested here, decayed with a time constant of
    /// [`DEMAND_US`] (requests denied here count too): this instance's
    /// demand for the key.
    pub(super) demand: f64,
    /// When `demand` was last brought up to date.
    pub(super) demand_at: u64,
    /// Cost requested here (admitted or denied) since the last lease.
    pub(super) since_lease: u64,
}

/// The time constant of a key's demand estimate.
pub(super) const DEMAND_US: u64 = 10_000_000;

impl LeaseState {
    /// Counts a request of `cost` at `now` (admitted or denied): in the
    /// demand estimate, and among what the key asked for since its last
    /// lease.
    pub(super) fn note_request(&mut self, now: u64, cost: u64) {
        self.note_demand(now, cost);
        self.since_lease = self.since_lease.saturating_add(cost);
    }

    /// Records a lease's outcome in the backoff; returns the backoff wait
    /// (microseconds) before a drained key asks again.
    ///
    /// The backoff starts at a second and doubles while the key's asks
    /// bring back less than its requests here asked for since its last
    /// lease (admitted or denied), or a background lease (`cost` 0) finds
    /// the bucket drained: it is over its limit, and a flood then costs
    /// about one call per batch refill per instance. A request's ask that
    /// covers them halves it, so a client pacing at the rate gets each
    /// token as it comes. A drained key that gets a whole lease may be
    /// drained again soon: the exponent of its backoff halves rather than
    /// resets (a wait of 16 s becomes 4 s, not 8 s or 1 s).
    pub(super) fn after_lease(&mut self, short: bool, cost: u64, granted: u64) -> u64 {
        if short {
            let covered =
                cost > 0 && granted >= cost && granted > self.denied && granted >= self.since_lease;
            self.backoff = if covered {
                self.backoff.saturating_sub(1)
            } else {
                (self.backoff + 1).min(MAX_BACKOFF)
            };
        } else if self.drained {
            self.backoff /= 2;
        } else {
            self.backoff = 0;
        }
        self.drained = short;
        self.denied = 0;
        self.since_lease = 0;
        1_000_000u64 << self.backoff
    }

    /// The lease of a drained key: what this instance's demand spends in
    /// `refill_us` (a batch's refill time, the longest a drained key waits
    /// before it asks again), at least 1 and at most its batch. What it
    /// would take beyond that, another instance may be denied for
    /// meanwhile.
    pub(super) fn drained_lease(&self, now: u64, refill_us: u64) -> u64 {
        let need = self.demand_per_s(now) * refill_us as f64 / 1e6;
        (need.ceil() as u64).clamp(1, self.batch.max(1))
    }

    /// Below how many tokens the next lease is fetched in the background:
    /// `low_water`, or for a drained key, once it is about to run out
    /// (fewer than a second of its demand here, never above `low_water`,
    /// which the overshoot bound counts): what it fetched early, another
    /// instance may lack.
    pub(super) fn fetch_below(&self, now: u64, low_water: u64) -> u64 {
        if self.drained {
            low_water.min(self.demand_per_s(now).ceil() as u64)
        } else {
            low_water
        }
    }

    /// How long an idle key keeps its tokens while the bucket lacks them:
    /// `keep_us`, or for a drained key, whose lease was sized to this
    /// instance's demand, as long as that demand takes to spend them and
    /// two more requests, up to `surplus_us` (a return and a new lease
    /// would cost two calls to move them nowhere).
    pub(super) fn keep_idle_us(&self, keep_us: u64, surplus_us: u64) -> u64 {
        if self.drained {
            keep_us.max(self.spend_us(self.tokens + 2).min(surplus_us))
        } else {
            keep_us
        }
    }

    /// Counts `cost` requested at `now` in the demand estimate.
    fn note_demand(&mut self, now: u64, cost: u64) {
        self.demand = self.decayed_demand(now) + cost as f64;
        self.demand_at = self.demand_at.max(now);
    }

    /// The decayed demand as of `now`.
    fn decayed_demand(&self, now: u64) -> f64 {
        let dt = now.saturating_sub(self.demand_at) as f64;
        self.demand * (-dt / DEMAND_US as f64).exp()
    }

    /// How long this instance's demand, as of its last request, takes to
    /// spend `tokens` (`u64::MAX` without demand).
    fn spend_us(&self, tokens: u64) -> u64 {
        if self.demand > 0.0 {
            (tokens as f64 * DEMAND_US as f64 / self.demand) as u64
        } else {
            u64::MAX
        }
    }

    /// This instance's demand for the key, in cost per second, as of `now`.
    pub(super) fn demand_per_s(&self, now: u64) -> f64 {
        self.decayed_demand(now) * 1e6 / DEMAND_US as f64
    }
}

/// The largest backoff exponent (the wait is also capped by a batch's
/// refill time).
pub(super) const MAX_BACKOFF: u8 = 12;

/// The meter of the local table: only `idle_at` matters (a key holding
/// tokens or waiting for them is never forgotten); decisions are made by
/// [`LeaseRule`].
#[derive(Debug)]
pub(crate) struct LeaseMeter {
    pub(super) capacity: u64,
    pub(super) return_after_us: u64,
}

impl Meter for LeaseMeter {
    type State = LeaseState;

    fn capacity(&self) -> u64 {
        self.capacity
    }

    fn acquire(&self, st: &mut LeaseState, now_us: u64, cost: u64) -> Step {
        spend(st, now_us, cost)
    }

    fn refund(&self, st: &mut LeaseState, _acquired_at_us: u64, cost: u64) {
        st.tokens += cost;
    }

    fn idle_at(&self, st: &LeaseState) -> u64 {
        if st.tokens > 0 || st.fetching.is_some() {
            return u64::MAX;
        }
        (st.used_at + self.return_after_us).max(st.exhausted_until)
    }
}

/// Spends `cost` local tokens if there are enough.
pub(super) fn spend(st: &mut LeaseState, now_us: u64, cost: u64) -> Step {
    let allowed = st.tokens >= cost;
    if allowed {
        st.tokens -= cost;
        st.used_at = now_us;
    }
    Step {
        allowed,
        remaining: st.tokens,
        reset_us: st.full_at.saturating_sub(now_us),
        retry_after_us: u64::from(!allowed),
        delay_us: 0,
    }
}

/// What one lease call got: tokens granted, the bucket after, Redis' now.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lease {
    pub(super) granted: u64,
    pub(super) bucket: GcraState,
    pub(super) now: u64,
}

/// What the local table said about a request.
pub(super) enum Local {
    /// Decided here; the next batch to fetch in the background, if due.
    Decided(Step, Option<u64>),
    /// Lease `want` tokens now (`batch`: this lease brings the next batch).
    Fetch { want: u64, batch: bool },
    /// A batch is on its way: wait for it.
    Wait(OwnedNotified),
}

/// Marks a batch lease as started; false if one already is.
pub(super) fn start_fetch(st: &mut LeaseState) -> bool {
    if st.fetching.is_some() {
        return false;
    }
    st.fetching = Some(Arc::new(Notify::new()));
    true
}

#[cfg(test)]
mod tests;
