//! A GCRA state in one word, for the memory backend's compare-and-swap.
//!
//! The word is `(tat_us - origin) << 12 | fraction`: the TAT's whole
//! microseconds since the table's origin in the top 52 bits, and its
//! fraction of a microsecond in the low 12, in units of `1/d` us where `d`
//! is the emission interval's denominator. The ranges that pack follow
//! from the constants below; [`Gcra`](super::Gcra)'s documentation states
//! them for users.

use super::GcraState;
use crate::algorithm::Step;

/// Bits of the word that hold the TAT's fraction of a microsecond.
const FRACTION_BITS: u32 = 12;
const FRACTION_MASK: u64 = (1 << FRACTION_BITS) - 1;
/// The most whole microseconds a word holds past its origin.
const MAX_OFFSET_US: u64 = u64::MAX >> FRACTION_BITS;
/// The longest fill time (`burst * period / limit`) that packs.
const MAX_FILL_US: u64 = 1 << 51;

/// How one quota's states pack: a remainder `rem` (in `1/limit` us) is
/// always a multiple of `unit`, and `rem / unit` (in `1/d` us) fits the
/// fraction's bits. The check on a word ([`acquire`](Self::acquire))
/// counts in `1/d` us: the TAT, `now`, the interval and the fill time are
/// then whole numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Packing {
    /// `rem / unit` is `(rem >> shift) * inverse` (exact division by
    /// multiplying with the inverse of `unit`'s odd part).
    unit: u64,
    shift: u32,
    inverse: u64,
    limit: u64,
    /// `limit / unit`: a microsecond in the word's fractions.
    d: u64,
    /// The interval `T` in `1/d` us, and the fill time `burst * T`.
    t_s: u64,
    tau_s: u64,
    burst: u64,
    period_us: u64,
    shaping: bool,
}

/// A GCRA quota, as [`Packing::new`] takes it.
pub(super) struct Params {
    pub(super) limit: u64,
    pub(super) period_us: u64,
    pub(super) burst: u64,
    pub(super) shaping: bool,
}

impl Packing {
    /// The packing of `quota`, or `None` when its states do not fit a word.
    pub(super) fn new(quota: Params) -> Option<Self> {
        let Params {
            limit,
            period_us,
            burst,
            shaping,
        } = quota;
        let fill_us = u128::from(burst) * u128::from(period_us) / u128::from(limit);
        if fill_us >= u128::from(MAX_FILL_US) {
            return None;
        }
        // Every remainder the meter reaches is a sum of multiples of
        // `period_us` taken modulo `limit`: a multiple of their gcd.
        let unit = if limit <= 1 << FRACTION_BITS {
            1
        } else {
            gcd(period_us, limit)
        };
        if limit / unit > 1 << FRACTION_BITS {
            return None;
        }
        let shift = unit.trailing_zeros();
        let odd = unit >> shift;
        // Newton's iteration for the inverse modulo 2^64 of an odd number:
        // each step doubles the bits that are right (3, 6, ..., 96).
        let mut inverse = odd;
        for _ in 0..5 {
            inverse = inverse.wrapping_mul(2u64.wrapping_sub(odd.wrapping_mul(inverse)));
        }
        let d = limit / unit;
        // Exact: `unit` divides `period_us` or is 1 with `limit` dividing
        // into 4,096ths. Below 2^63: the fill time is below 2^51 us.
        let t_s = u128::from(period_us) * u128::from(d) / u128::from(limit);
        Some(Self {
            unit,
            shift,
            inverse,
            limit,
            d,
            t_s: t_s as u64,
            tau_s: (t_s * u128::from(burst)) as u64,
            burst,
            period_us,
            shaping,
        })
    }

    /// Whole microseconds in `s` (in `1/d` us), rounded up.
    #[inline(always)]
    fn us_ceil(&self, s: u64) -> u64 {
        if self.d == 1 { s } else { s.div_ceil(self.d) }
    }

    /// [`Meter::acquire`](crate::algorithm::Meter::acquire) on a packed
    /// word: the same step as on the unpacked state, and the word to write
    /// back (`word` itself when denied). A `now_us` before the origin is
    /// taken as the origin.
    #[inline(always)]
    pub(super) fn acquire(&self, word: u64, origin_us: u64, now_us: u64, cost: u64) -> (Step, u64) {
        let d = self.d;
        let now_s = now_us.saturating_sub(origin_us).min(MAX_OFFSET_US) * d;
        let tat_s = (word >> FRACTION_BITS) * d + (word & FRACTION_MASK).min(d - 1);
        // How far the TAT leads now (0 when it is past).
        let ahead = tat_s.saturating_sub(now_s);
        let remaining = |ahead: u64| self.tau_s.saturating_sub(ahead) / self.t_s;
        if cost > self.burst {
            let step = Step {
                allowed: false,
                remaining: remaining(ahead),
                reset_us: self.us_ceil(ahead),
                retry_after_us: self.period_us,
                delay_us: 0,
            };
            return (step, word);
        }
        let after = ahead + cost * self.t_s;
        if after > self.tau_s {
            let step = Step {
                allowed: false,
                remaining: remaining(ahead),
                reset_us: self.us_ceil(ahead),
                retry_after_us: self.us_ceil(after - self.tau_s),
                delay_us: 0,
            };
            return (step, word);
        }
        let step = Step {
            allowed: true,
            remaining: remaining(after),
            reset_us: self.us_ceil(after),
            retry_after_us: 0,
            // A leaky bucket's request waits until the TAT it found.
            delay_us: if self.shaping { self.us_ceil(ahead) } else { 0 },
        };
        let new_s = now_s.saturating_add(after);
        let word = if d == 1 {
            new_s << FRACTION_BITS
        } else {
            ((new_s / d) << FRACTION_BITS) | (new_s % d)
        };
        (step, word)
    }

    #[inline]
    pub(super) fn pack(&self, st: &GcraState, origin_us: u64) -> u64 {
        if st.tat_us < origin_us {
            // Before the origin is in the past: a full bucket, as at the origin.
            return 0;
        }
        let offset = (st.tat_us - origin_us).min(MAX_OFFSET_US);
        let fraction = (st.tat_rem >> self.shift).wrapping_mul(self.inverse) & FRACTION_MASK;
        (offset << FRACTION_BITS) | fraction
    }

    #[inline]
    pub(super) fn unpack(&self, word: u64, origin_us: u64) -> GcraState {
        GcraState {
            tat_us: origin_us.saturating_add(word >> FRACTION_BITS),
            // Below `limit` whatever the word (one packed for another quota
            // of the same table, before a reload).
            tat_rem: (word & FRACTION_MASK)
                .saturating_mul(self.unit)
                .min(self.limit - 1),
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests;
