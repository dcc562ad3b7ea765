mod packing;

use crate::{ConfigError, Quota};

use super::{Meter, Step};
use packing::{Packing, Params};

/// The longest time a bucket may take to fill from empty (`burst * period /
/// limit`), about 146,000 years: the TAT is whole microseconds in a `u64`,
/// and `now + 2 * tau` must fit.
const MAX_FILL_US: u64 = 1 << 62;

/// The bucket family as GCRA (generic cell rate algorithm): a token bucket of
/// `burst` tokens refilled at `limit` per `period`, or a leaky bucket (queue)
/// of `burst` drained at the same rate.
///
/// The state is one "theoretical arrival time" (TAT): the time at which the
/// bucket will be full again. A cost `c` takes `c * T`, where `T = period /
/// limit` is the emission interval, and fits when the new TAT is at most
/// `burst * T` ahead of now. Time is whole microseconds, but `T` is kept as an
/// exact fraction (`TAT = tat_us + tat_rem / limit`), so a quota such as 3 per
/// second never drifts.
///
/// Guarantee: over any interval of length `d`, at most `burst + d * limit /
/// period` units pass. With `burst = limit` (the default) that is at most
/// twice the limit in one period after a full idle period, and the long-run
/// rate is exactly `limit / period`.
///
/// In the memory backend a key's state is one word updated by
/// compare-and-swap ([`Meter::packs`]) when the interval's fraction of a
/// microsecond has a denominator of at most 4,096 (`limit / gcd(limit,
/// period in us)`: 1 whenever the interval is whole microseconds, 3 for 3
/// a second, 1,000 for 1e9 a second) and the bucket fills within 2^51 us
/// (71 years); the word keeps the TAT exactly for 142 years from the
/// backend's start. Any other quota keeps its state behind a lock of the
/// key's own, with the same decisions.
///
/// As a **leaky bucket** (`shaping`), an admitted request is not let through
/// at once: it is scheduled at the time its turn comes (`Step::delay_us`), so
/// requests leave at most at the drain rate and at most `burst` wait.
///
/// ```
/// use throttle_fleet_core::{Quota, algorithm::{Gcra, GcraState, Meter}};
///
/// let tb = Gcra::token_bucket(Quota::per_minute(10)).unwrap();
/// let mut st = GcraState::default();
/// for left in (0..10).rev() {
///     assert_eq!(tb.acquire(&mut st, 0, 1).remaining, left);
/// }
/// let d = tb.acquire(&mut st, 0, 1);
/// assert!(!d.allowed);
/// assert_eq!(d.retry_after_us, 6_000_000); // one token every 6 s
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    limit: u64,
    period_us: u64,
    burst: u64,
    shaping: bool,
    /// `burst * T` as whole microseconds plus remainder (in 1/limit us).
    tau_us: u64,
    tau_rem: u64,
    /// `T` as whole microseconds plus remainder (in 1/limit us).
    t_us: u64,
    t_rem: u64,
    /// `burst * period`, when it fits in a u64 (the fast path of `report`).
    tau_s: Option<u64>,
    /// How a state packs into one word, when it does ([`Meter::packs`]).
    packing: Option<Packing>,
}

/// Per-key state of a [`Gcra`]: the theoretical arrival time
/// `tat_us + tat_rem / limit` microseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GcraState {
    /// Whole microseconds of the TAT.
    pub tat_us: u64,
    /// Fraction of a microsecond of the TAT, in units of `1 / limit` us.
    pub tat_rem: u64,
}

impl Gcra {
    /// A token bucket: admitted requests pass at once.
    pub fn token_bucket(quota: Quota) -> Result<Self, ConfigError> {
        Self::new(quota, false)
    }

    /// A leaky bucket: admitted requests are delayed until their turn.
    pub fn leaky_bucket(quota: Quota) -> Result<Self, ConfigError> {
        Self::new(quota, true)
    }

    fn new(quota: Quota, shaping: bool) -> Result<Self, ConfigError> {
        quota.validate(true)?;
        let (limit, period_us, burst) = (quota.limit(), quota.period_us(), quota.burst());
        let tau = u128::from(burst) * u128::from(period_us);
        if tau / u128::from(limit) > u128::from(MAX_FILL_US) {
            return Err(ConfigError::new(
                "quota.burst",
                format!(
                    "must fill within 2^62 us at the quota's rate (burst * period / limit is {} us)",
                    tau / u128::from(limit)
                ),
            ));
        }
        Ok(Self {
            limit,
            period_us,
            burst,
            shaping,
            tau_us: (tau / u128::from(limit)) as u64,
            tau_rem: (tau % u128::from(limit)) as u64,
            t_us: period_us / limit,
            t_rem: period_us % limit,
            tau_s: u64::try_from(tau).ok(),
            packing: Packing::new(Params {
                limit,
                period_us,
                burst,
                shaping,
            }),
        })
    }

    /// Whether admitted requests are delayed (leaky bucket).
    pub fn is_shaping(&self) -> bool {
        self.shaping
    }

    /// The refill: `limit` units per period.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The period in microseconds.
    pub fn period_us(&self) -> u64 {
        self.period_us
    }

    /// `burst * T` as `(whole microseconds, remainder in 1/limit us)`: the
    /// most a TAT may lead "now" by.
    pub fn tau(&self) -> (u64, u64) {
        (self.tau_us, self.tau_rem)
    }

    /// `cost * T` as `(whole microseconds, remainder in 1/limit us)`.
    pub fn increment(&self, cost: u64) -> (u64, u64) {
        if cost == 1 {
            return (self.t_us, self.t_rem);
        }
        let total = u128::from(cost) * u128::from(self.period_us);
        let limit = u128::from(self.limit);
        ((total / limit) as u64, (total % limit) as u64)
    }

    #[inline]
    fn scaled(&self, us: u64, rem: u64) -> u128 {
        u128::from(us) * u128::from(self.limit) + u128::from(rem)
    }

    /// The report for `st` after a check of `cost` at `now_us` that was (or
    /// was not) admitted. Everything the Redis script returns is the new
    /// state, and this turns it into the same figures the memory backend
    /// gives.
    #[inline]
    pub fn report(&self, st: &GcraState, now_us: u64, cost: u64, allowed: bool) -> Step {
        // How far the TAT leads now, as (whole us, remainder in 1/limit us).
        let (ahead_us, ahead_rem) = if st.tat_us < now_us {
            (0, 0)
        } else {
            (st.tat_us - now_us, st.tat_rem)
        };
        let reset_us = ahead_us + u64::from(ahead_rem > 0);
        if cost > self.burst && !allowed {
            let remaining = self.remaining(ahead_us, ahead_rem);
            return Step {
                allowed,
                remaining,
                reset_us,
                retry_after_us: self.period_us,
                delay_us: 0,
            };
        }
        let (retry_after_us, delay_us) = if allowed && !self.shaping {
            (0, 0)
        } else {
            self.wait(ahead_us, ahead_rem, cost, allowed)
        };
        Step {
            allowed,
            remaining: self.remaining(ahead_us, ahead_rem),
            reset_us,
            retry_after_us,
            delay_us,
        }
    }

    /// `(retry_after_us, delay_us)` of a denial, or of an admission by a
    /// leaky bucket, with the TAT `ahead` of now.
    #[inline]
    fn wait(&self, ahead_us: u64, ahead_rem: u64, cost: u64, allowed: bool) -> (u64, u64) {
        // Everything below in units of 1/limit us: u64 where it fits (the
        // common case), u128 otherwise.
        if let Some(tau_s) = self.tau_s
            && let Some(ahead_s) = ahead_us
                .checked_mul(self.limit)
                .and_then(|a| a.checked_add(ahead_rem))
            && let Some(cost_s) = cost.checked_mul(self.period_us)
            && let Some(after_s) = ahead_s.checked_add(cost_s)
        {
            return if allowed {
                // The request's turn began where the previous TAT stood.
                (0, ahead_s.saturating_sub(cost_s).div_ceil(self.limit))
            } else {
                (after_s.saturating_sub(tau_s).div_ceil(self.limit), 0)
            };
        }
        let l = u128::from(self.limit);
        let ahead_s = u128::from(ahead_us) * l + u128::from(ahead_rem);
        let tau_s = u128::from(self.burst) * u128::from(self.period_us);
        let cost_s = u128::from(cost) * u128::from(self.period_us);
        if allowed {
            (0, ahead_s.saturating_sub(cost_s).div_ceil(l) as u64)
        } else {
            (
                (ahead_s + cost_s).saturating_sub(tau_s).div_ceil(l) as u64,
                0,
            )
        }
    }

    /// Whole units that fit now: `floor((burst * T - ahead) / T)`.
    #[inline]
    fn remaining(&self, ahead_us: u64, ahead_rem: u64) -> u64 {
        if let Some(tau_s) = self.tau_s
            && let Some(ahead_s) = ahead_us
                .checked_mul(self.limit)
                .and_then(|a| a.checked_add(ahead_rem))
        {
            return tau_s.saturating_sub(ahead_s) / self.period_us;
        }
        let ahead_s = u128::from(ahead_us) * u128::from(self.limit) + u128::from(ahead_rem);
        let tau_s = u128::from(self.burst) * u128::from(self.period_us);
        (tau_s.saturating_sub(ahead_s) / u128::from(self.period_us)) as u64
    }
}

impl Meter for Gcra {
    type State = GcraState;

    fn capacity(&self) -> u64 {
        self.burst
    }

    #[inline]
    fn acquire(&self, st: &mut GcraState, now_us: u64, cost: u64) -> Step {
        if cost > self.burst {
            return self.report(st, now_us, cost, false);
        }
        let (mut tat_us, mut tat_rem) = (st.tat_us, st.tat_rem);
        if tat_us < now_us {
            (tat_us, tat_rem) = (now_us, 0);
        }
        let (inc_us, inc_rem) = self.increment(cost);
        let mut new_us = tat_us + inc_us;
        let mut new_rem = tat_rem + inc_rem;
        if new_rem >= self.limit {
            new_rem -= self.limit;
            new_us += 1;
        }
        let lead = new_us - now_us;
        let allowed = lead < self.tau_us || (lead == self.tau_us && new_rem <= self.tau_rem);
        if allowed {
            *st = GcraState {
                tat_us: new_us,
                tat_rem: new_rem,
            };
        }
        self.report(st, now_us, cost, allowed)
    }

    fn refund(&self, st: &mut GcraState, _acquired_at_us: u64, cost: u64) {
        let back = self
            .scaled(st.tat_us, st.tat_rem)
            .saturating_sub(u128::from(cost) * u128::from(self.period_us));
        let l = u128::from(self.limit);
        *st = GcraState {
            tat_us: (back / l) as u64,
            tat_rem: (back % l) as u64,
        };
    }

    fn idle_at(&self, st: &GcraState) -> u64 {
        st.tat_us + u64::from(st.tat_rem > 0)
    }

    /// See the type's documentation for the ranges that pack.
    fn packs(&self) -> bool {
        self.packing.is_some()
    }

    #[inline]
    fn pack(&self, st: &GcraState, origin_us: u64) -> u64 {
        self.packing.map_or(0, |p| p.pack(st, origin_us))
    }

    #[inline]
    fn unpack(&self, word: u64, origin_us: u64) -> GcraState {
        self.packing
            .map_or_else(GcraState::default, |p| p.unpack(word, origin_us))
    }

    /// Decided on the word itself, in `1/d` us: the same steps as
    /// `acquire` on the unpacked state (tested against it).
    #[inline]
    fn acquire_packed(
        &self,
        word: u64,
        origin_us: u64,
        now_us: u64,
        cost: u64,
        _: u64,
    ) -> (Step, u64) {
        match &self.packing {
            Some(p) => p.acquire(word, origin_us, now_us, cost),
            // Never asked: only a meter that packs has packed states.
            None => (
                self.report(&GcraState::default(), now_us, cost, false),
                word,
            ),
        }
    }
}
