//! The local table of the leased mode: tokens held per key.

use std::sync::Arc;

use throttle_core::algorithm::{GcraState, Meter, Step};
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
    /// sized to this instance's demand and taken only when its tokens have
    /// run out.
    pub(super) short: bool,
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
    /// Counts `cost` requested at `now` in the demand estimate.
    pub(super) fn note_demand(&mut self, now: u64, cost: u64) {
        self.demand = self.demand_at_time(now) + cost as f64;
        self.demand_at = self.demand_at.max(now);
    }

    /// The decayed demand as of `now`.
    fn demand_at_time(&self, now: u64) -> f64 {
        let dt = now.saturating_sub(self.demand_at) as f64;
        self.demand * (-dt / DEMAND_US as f64).exp()
    }

    /// How long this instance's demand, as of its last request, takes to
    /// spend `tokens` (`u64::MAX` without demand).
    pub(super) fn spend_us(&self, tokens: u64) -> u64 {
        if self.demand > 0.0 {
            (tokens as f64 * DEMAND_US as f64 / self.demand) as u64
        } else {
            u64::MAX
        }
    }

    /// This instance's demand for the key, in cost per second, as of `now`.
    pub(super) fn demand_per_s(&self, now: u64) -> f64 {
        self.demand_at_time(now) * 1e6 / DEMAND_US as f64
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

    fn release(&self, st: &mut LeaseState, _acquired_at_us: u64, cost: u64) {
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
mod tests {
    use super::*;

    #[test]
    fn demand_is_the_cost_requested_over_the_time_constant() {
        let mut st = LeaseState::default();
        // One request a second for a minute: about one per second.
        for i in 0..60u64 {
            st.note_demand(i * 1_000_000, 1);
        }
        let rate = st.demand_per_s(59_000_000);
        assert!((rate - 1.0).abs() < 0.1, "{rate}");
        // About a second per token at that rate, as of the last request.
        let per_token = st.spend_us(1);
        assert!((900_000..1_100_000).contains(&per_token), "{per_token}");
    }

    #[test]
    fn demand_fades_when_the_key_stops_coming() {
        let mut st = LeaseState::default();
        st.note_demand(0, 10);
        let at_once = st.demand_per_s(0);
        // One time constant later, a factor e less.
        let later = st.demand_per_s(DEMAND_US);
        assert!((at_once / later - std::f64::consts::E).abs() < 1e-9);
        // A request seen out of order (an earlier instant) does not move
        // the estimate's time back.
        st.note_demand(DEMAND_US, 1);
        st.note_demand(DEMAND_US / 2, 1);
        assert_eq!(st.demand_at, DEMAND_US);
    }

    #[test]
    fn no_demand_never_spends() {
        let st = LeaseState::default();
        assert_eq!(st.demand_per_s(1_000), 0.0);
        assert_eq!(st.spend_us(5), u64::MAX);
    }
}
