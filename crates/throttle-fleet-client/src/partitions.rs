//! Per partition (a server, or what the key function names), when the
//! next request may go, and how many may go before an answer says more.
//!
//! A partition's [`Gate`] is a value with methods that tests drive with
//! their own instants:
//! - an answer that says to wait ([`Told::wait`]) closes the gate until
//!   then; when it opens, as many requests go as the quota's size says
//!   (`X-RateLimit-Limit`, `q`), or one when no field gave it, whose
//!   answer tells the rest (a gate that opens onto the whole queue would
//!   be the storm over again);
//! - between waits, what the answers report as remaining, less the
//!   requests still in flight, may go; the rest wait for the next answer;
//! - an answer with no quota field stops the counting;
//! - a call whose deadline is closer than answers take (smoothed) is not
//!   sent: the server would count a request its caller no longer waits
//!   for;
//! - an answer to a request sent before one whose answer has already
//!   counted is older news (answers overtake one another on their way
//!   back): it closes the gate if it says to wait, but never raises what
//!   may go;
//! - a partition that refills as time passes is paced rather than held.
//!
//! # Pacing
//!
//! The rule is the crate's docs', "Pacing a quota that refills" (stated
//! there once, for users; [`Gate::learn`] and the wait in
//! [`Gate::answered_as`] follow it).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::told::{Reset, Told};

/// Which partition a request counts under: a group (a label of the
/// layer's metrics, so a handful of names) and a key within it (hashed;
/// never a label).
///
/// ```
/// use throttle_fleet_client::{ClientLayer, Partition};
///
/// // One partition per tenant header value, all of group "tenant".
/// let layer = ClientLayer::new().partition_by(|parts| {
///     Partition::new("tenant", parts.headers.get("x-tenant").map(|v| v.as_bytes()))
/// });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    group: &'static str,
    key: u64,
}

impl Partition {
    /// The partition `key` of `group`.
    pub fn new(group: &'static str, key: impl Hash) -> Self {
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        Self {
            group,
            key: hasher.finish(),
        }
    }

    /// Its group: the label its waits and retries are counted under.
    pub(crate) fn group(&self) -> &'static str {
        self.group
    }
}

/// What a request may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Go (the request is counted in flight).
    Go,
    /// Not before this instant: a server said so.
    Until(Instant),
    /// Not before an answer in flight says how much is left.
    Answer,
    /// Not at all: the call's deadline is closer than an answer takes.
    TooLate,
}

/// One partition's state.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    /// Closed until then.
    until: Option<Instant>,
    /// How many may go when it opens.
    opens_with: u64,
    /// How many may go before an answer says more; `None`: not counted.
    credit: Option<u64>,
    in_flight: u64,
    /// Requests let go so far: the last one's sequence number.
    sent: u64,
    /// The latest sequence number whose answer counted.
    newest_answered: u64,
    /// How long answers take, smoothed (an eighth of each new one).
    round_trip: Option<Duration>,
    /// Whether the partition refills as time passes: `None` not known,
    /// `Some(true)` its answers showed it, `Some(false)` never paced again
    /// (a refusal came after it was learnt).
    refills: Option<bool>,
    /// What the newest counted answer said was left, and its reset.
    last: Option<(u64, ResetAt)>,
}

/// A told reset, in a form two answers' resets compare in.
#[derive(Debug, Clone, Copy)]
enum ResetAt {
    /// A Unix time in seconds: exact.
    Unix(u64),
    /// An instant from a relative reset: within a second of the truth.
    About(Instant),
}

impl ResetAt {
    fn new(reset: Reset, now: Instant) -> Self {
        match reset {
            Reset::Unix(secs) => Self::Unix(secs),
            Reset::After(secs) => Self::About(now + Duration::from_secs(secs.min(MAX_RESET_SECS))),
        }
    }

    /// Whether `self` is surely later than `before`.
    fn later_than(self, before: Self) -> bool {
        match (before, self) {
            (Self::Unix(a), Self::Unix(b)) => b > a,
            (Self::About(a), Self::About(b)) => b > a + Duration::from_secs(1),
            _ => false,
        }
    }
}

/// A relative reset longer than this (a century) is only long.
const MAX_RESET_SECS: u64 = 100 * 365 * 86_400;

impl Gate {
    /// Whether a request that must be answered by `deadline` may go at
    /// `now`; if so it is in flight.
    pub(crate) fn turn(&mut self, now: Instant, deadline: Option<Instant>) -> Turn {
        if let Some(until) = self.until {
            if now < until {
                return Turn::Until(until);
            }
            self.until = None;
            self.credit = Some(self.opens_with.max(1));
        }
        match self.credit {
            // Nothing left and nothing in flight to say more: one goes and
            // asks.
            Some(0) if self.in_flight > 0 => return Turn::Answer,
            _ => {}
        }
        // Sent now, its answer would come after its caller stopped
        // waiting: the server would count it for nothing.
        if deadline.is_some_and(|d| now + self.round_trip() > d) {
            return Turn::TooLate;
        }
        if let Some(credit) = self.credit {
            self.credit = Some(credit.saturating_sub(1));
        }
        self.in_flight += 1;
        self.sent += 1;
        Turn::Go
    }

    /// The sequence number of the request last let go.
    pub(crate) fn sent(&self) -> u64 {
        self.sent
    }

    /// The request last let go ended with `told` (`None`: no answer).
    #[cfg(test)]
    pub(crate) fn answered(&mut self, told: Option<&Told>, now: Instant) {
        self.answered_as(self.sent, told, now);
    }

    /// How long answers take, smoothed (zero before the first).
    pub(crate) fn round_trip(&self) -> Duration {
        self.round_trip.unwrap_or_default()
    }

    /// An answer came `took` after its request went.
    pub(crate) fn timed(&mut self, took: Duration) {
        self.round_trip = Some(match self.round_trip {
            None => took,
            Some(smoothed) => smoothed - smoothed / 8 + took / 8,
        });
    }

    /// Request number `seq` (its [`sent`](Self::sent) when it went) ended
    /// with `told` (`None`: no answer).
    pub(crate) fn answered_as(&mut self, seq: u64, told: Option<&Told>, now: Instant) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let Some(told) = told else { return };
        // Sent before a request whose answer already counted: the server
        // decided it before that one, as far as can be told, so what it
        // says is left is more than is.
        let stale = seq < self.newest_answered;
        self.newest_answered = self.newest_answered.max(seq);
        if !stale {
            self.learn(told, now);
        }
        if let Some(wait) = told.wait {
            let (wait, opens_with) = match told.limit {
                // Refilling: one request's share of the time to full.
                Some(limit) if self.refills == Some(true) && !told.refused => {
                    (wait / u32::try_from(limit.max(1)).unwrap_or(u32::MAX), 1)
                }
                limit => (wait, limit.unwrap_or(1)),
            };
            let until = now + wait;
            if self.until.is_none_or(|u| u < until) {
                self.until = Some(until);
            }
            self.opens_with = opens_with;
            self.credit = Some(0);
            return;
        }
        if self.until.is_some() {
            // An answer to a request sent before the gate closed: the
            // gate's own figures are newer.
            return;
        }
        if stale {
            return;
        }
        self.credit = match told.remaining {
            None => None,
            Some(left) if self.in_flight == 0 => Some(left),
            Some(left) => Some(
                self.credit
                    .unwrap_or(u64::MAX)
                    .min(left.saturating_sub(self.in_flight)),
            ),
        };
    }

    /// What `told` shows of how the partition refills (the crate's docs,
    /// "Pacing a quota that refills").
    fn learn(&mut self, told: &Told, now: Instant) {
        if told.refused && self.refills == Some(true) {
            self.refills = Some(false);
        }
        let (Some(left), Some(reset)) = (told.remaining, told.reset) else {
            return;
        };
        let at = ResetAt::new(reset, now);
        // What is left has not grown, and is short of a fresh quota's
        // (one request out of a new window), while the reset moved later.
        let not_fresh = match told.limit {
            Some(limit) => left.saturating_add(1) < limit,
            None => false,
        };
        if let Some((before_left, before_at)) = self.last
            && self.refills.is_none()
            && (left < before_left || (left == before_left && not_fresh))
            && at.later_than(before_at)
        {
            self.refills = Some(true);
        }
        self.last = Some((left, at));
    }
}

/// A partition: its gate and the answers waited for.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    pub(crate) gate: Mutex<Gate>,
    pub(crate) answered: Notify,
}

/// The partitions of one layer, at most `max` tracked at once.
#[derive(Debug)]
pub(crate) struct Partitions {
    /// Read-locked to find a tracked partition (every call), written
    /// only to add one.
    map: RwLock<HashMap<u64, Arc<Slot>>>,
    max: usize,
}

impl Partitions {
    pub(crate) fn new(max: usize) -> Self {
        Self {
            map: RwLock::new(HashMap::new()),
            max,
        }
    }

    /// The slot of `partition`. When `max` are tracked, those with
    /// nothing in flight and no wait ahead of `now` are forgotten first;
    /// if none is, the request gets a slot of its own (its answers then
    /// teach no other request).
    pub(crate) fn slot(&self, partition: Partition, now: Instant) -> Arc<Slot> {
        if let Some(slot) = self.map.read().get(&partition.key) {
            return slot.clone();
        }
        let mut map = self.map.write();
        if let Some(slot) = map.get(&partition.key) {
            return slot.clone();
        }
        if map.len() >= self.max {
            map.retain(|_, slot| {
                let gate = slot.gate.lock();
                Arc::strong_count(slot) > 1 || gate.until.is_some_and(|u| u > now)
            });
            if map.len() >= self.max {
                return Arc::default();
            }
        }
        map.entry(partition.key).or_default().clone()
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.read().len()
    }
}

#[cfg(test)]
mod tests;
