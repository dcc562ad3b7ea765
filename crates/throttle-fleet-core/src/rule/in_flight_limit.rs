//! What a concurrency rule has that a rate rule has not: its reserve, its
//! adaptive limit and its slots' lifetime, typed apart so that a rate rule
//! cannot be given one.

use std::time::Duration;

use super::{DEFAULT_SLOT_TTL, MAX_SLOT_TTL, MIN_SLOT_TTL};
use crate::adaptive::Vegas;
use crate::{Class, ConfigError};

/// A concurrency rule's settings ([`Rule::concurrency`](crate::Rule::concurrency)):
/// at most `limit` requests of a key in flight, and how the rule shares
/// them out. Plain fields, read and written by the same name; a rule
/// checks them when it is bound ([`Rule::validate`](crate::Rule::validate)),
/// and the error names the field.
///
/// A bare number is a limit with the defaults:
/// `Rule::concurrency("inflight", 20)`.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_core::{adaptive::Vegas, Class, InFlightLimit, Rule};
///
/// // 40 in flight; 10 slots kept for each class above a request's.
/// let pool = InFlightLimit { reserve: 10, ..InFlightLimit::new(40) };
/// assert_eq!(pool.limit_for(Class::Critical, 40), 40);
/// assert_eq!(pool.limit_for(Class::Default, 40), 30);
/// assert_eq!(pool.limit_for(Class::Sheddable, 40), 20);
/// // Under an adaptive limit of 20, the reserve is 5 a class.
/// assert_eq!(pool.limit_for(Class::Sheddable, 20), 10);
/// assert!(Rule::concurrency("backend", pool).validate().is_ok());
///
/// let too_much = Rule::concurrency("backend", InFlightLimit { reserve: 20, ..InFlightLimit::new(40) });
/// assert_eq!(too_much.validate().unwrap_err().field(), "reserve");
///
/// // A limit that follows latency, and slots that outlive a lost instance by 30 s.
/// let adaptive = InFlightLimit {
///     adaptive: Some(Vegas::new()),
///     slot_ttl: Duration::from_secs(30),
///     ..InFlightLimit::new(64)
/// };
/// assert!(Rule::concurrency("pool", adaptive).validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlightLimit {
    /// At most this many requests of a key in flight at once (the rule's
    /// quota: [`Quota::in_flight`](crate::Quota::in_flight)).
    pub limit: u64,
    /// Slots kept for each class above a request's ([`Class`](crate::Class)):
    /// a critical request may use all `limit`, a default one
    /// `limit − reserve`, a sheddable one `limit − 2 × reserve`; under an
    /// adaptive limit the reserve shrinks with it (the formula:
    /// [`limit_for`](Self::limit_for)). A request refused for capacity that only a higher
    /// class may use (or, under an adaptive limit, below `limit`) is *shed*
    /// ([`Decision::is_shed`](crate::decision::Decision::is_shed)):
    /// answered 503, not 429. At most `(limit − 1) / 2`, so that a
    /// sheddable request can still take a slot; a rule with a reserve has
    /// no tiers. Default 0.
    pub reserve: u64,
    /// A limit that adapts to the latency of the requests the rule admits,
    /// in this process, between the algorithm's minimum and `limit` (see
    /// [`Vegas`]); a request refused under a limit below `limit` is shed
    /// (503). Bound to a backend that decides in the process (the memory
    /// backend); no tiers. Default none.
    pub adaptive: Option<Vegas>,
    /// How long a slot lives in a shared backend (Redis) unless its
    /// instance renews it: default [`DEFAULT_SLOT_TTL`], from
    /// [`MIN_SLOT_TTL`] to [`MAX_SLOT_TTL`], whole milliseconds. An
    /// instance renews the slots of its running requests three times per
    /// lifetime, so a slow request keeps its slot however long it runs,
    /// while the slots of an instance that died come back after at most
    /// this long. The memory backend does not use it.
    pub slot_ttl: Duration,
}

impl InFlightLimit {
    /// `limit` in flight, no reserve, no adaptive limit, the default slot
    /// lifetime.
    pub const fn new(limit: u64) -> Self {
        Self {
            limit,
            reserve: 0,
            adaptive: None,
            slot_ttl: DEFAULT_SLOT_TTL,
        }
    }

    /// How many slots a request of `class` may find held and still take
    /// one, when the rule's limit is `now` (`limit`, or the adaptive
    /// limit): `now − steps × reserve`, the reserve scaled by
    /// `now / limit` when `now` is lower, where `steps` is how far below
    /// critical the class is ([`Class::steps_below_critical`]).
    #[inline]
    pub fn limit_for(&self, class: Class, now: u64) -> u64 {
        let steps = class.steps_below_critical();
        if steps == 0 || self.reserve == 0 {
            return now;
        }
        let n = self.limit.max(1);
        let reserve = if now >= n {
            self.reserve
        } else {
            (u128::from(self.reserve) * u128::from(now)).div_ceil(u128::from(n)) as u64
        };
        now.saturating_sub(steps.saturating_mul(reserve))
    }

    /// Checks the settings against the rule's limit `n` (a tier's, when
    /// the rule has tiers).
    pub(crate) fn validate(&self, n: u64) -> Result<(), ConfigError> {
        let ttl = self.slot_ttl;
        if ttl < MIN_SLOT_TTL || ttl > MAX_SLOT_TTL || !ttl.subsec_nanos().is_multiple_of(1_000_000)
        {
            return Err(ConfigError::new(
                "slot_ttl",
                format!(
                    "must be a whole number of milliseconds from {MIN_SLOT_TTL:?} to one day (got {ttl:?})"
                ),
            ));
        }
        if self.reserve > 0 && self.reserve.saturating_mul(2) >= n {
            return Err(ConfigError::new(
                "reserve",
                format!(
                    "must be at most {} for a limit of {n}, so that a sheddable request can still take a slot (got {})",
                    n.saturating_sub(1) / 2,
                    self.reserve
                ),
            ));
        }
        if let Some(vegas) = &self.adaptive {
            vegas.validate(n)?;
        }
        Ok(())
    }
}

impl From<u64> for InFlightLimit {
    fn from(limit: u64) -> Self {
        Self::new(limit)
    }
}
