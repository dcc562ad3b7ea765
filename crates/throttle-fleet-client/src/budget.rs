//! The retry budget ([`Budget`], whose docs hold its arithmetic), over a
//! ring of slots that a window slides along a tenth at a time.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use throttle_fleet_core::ConfigError;

/// How many retries a client may make: `share` of its requests over the
/// last `window`, plus `floor_per_sec` a second (Finagle's `RetryBudget`,
/// tower's `TpsBudget`). The window slides a tenth of itself at a time.
/// The share is kept in millionths and compared in integers, so 0.3
/// allows 30 retries in 100 requests, not 33: tower's `TpsBudget` turns
/// a fraction into a whole number of requests per retry and rounds it
/// down (tower#857). [`Budget::default`] is Finagle's: 20% over 10 s,
/// and 10 a second.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_client::Budget;
///
/// // Finagle's defaults: 20% of the requests of the last 10 s, and 10
/// // retries a second whatever the traffic.
/// let budget = Budget::new(Duration::from_secs(10), 10, 0.2)?;
/// # Ok::<(), throttle_fleet_client::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct Budget {
    slot: Duration,
    floor: u64,
    /// Retries allowed per request, in millionths.
    share_ppm: u64,
    slots: Mutex<Slots>,
}

/// Slots of `window / SLOTS` each, as a ring.
const SLOTS: usize = 10;
const PPM: u64 = 1_000_000;

#[derive(Debug)]
struct Slots {
    /// The slot `current` began at.
    at: Instant,
    current: usize,
    requests: [u64; SLOTS],
    retries: [u64; SLOTS],
}

impl Slots {
    fn new(at: Instant) -> Self {
        Self {
            at,
            current: 0,
            requests: [0; SLOTS],
            retries: [0; SLOTS],
        }
    }
}

impl Budget {
    /// A budget of `share` (0 to 1000, a fraction: 0.2 is 20%) of the
    /// requests made over `window` (at least 10 ms), plus `floor_per_sec`
    /// retries a second over the same window.
    pub fn new(window: Duration, floor_per_sec: u32, share: f64) -> Result<Self, ConfigError> {
        if window < Duration::from_millis(10) || window > Duration::from_secs(3600) {
            return Err(ConfigError::new(
                "budget window",
                "must be from 10 ms to 1 hour",
            ));
        }
        if !(0.0..=1000.0).contains(&share) {
            return Err(ConfigError::new("budget share", "must be from 0 to 1000"));
        }
        let floor = (u128::from(floor_per_sec) * window.as_millis()).div_ceil(1000) as u64;
        Ok(Self {
            slot: window / SLOTS as u32,
            floor,
            share_ppm: (share * PPM as f64).round() as u64,
            slots: Mutex::new(Slots::new(Instant::now())),
        })
    }

    /// The same budget with nothing counted yet.
    pub(crate) fn renewed(&self) -> Self {
        Self {
            slots: Mutex::new(Slots::new(Instant::now())),
            ..*self
        }
    }

    /// Counts a request (not a retry) made at `now`.
    pub(crate) fn deposit(&self, now: Instant) {
        let mut slots = self.slots.lock();
        let i = self.roll(&mut slots, now);
        slots.requests[i] += 1;
    }

    /// Takes a retry from the budget at `now`, if there is one.
    pub(crate) fn withdraw(&self, now: Instant) -> bool {
        let mut slots = self.slots.lock();
        let i = self.roll(&mut slots, now);
        let requests: u64 = slots.requests.iter().sum();
        let retries: u64 = slots.retries.iter().sum();
        // (retries + 1) <= floor + share * requests, in millionths.
        let allowed = u128::from(self.floor) * u128::from(PPM)
            + u128::from(self.share_ppm) * u128::from(requests);
        if u128::from(retries + 1) * u128::from(PPM) > allowed {
            return false;
        }
        slots.retries[i] += 1;
        true
    }

    /// Empties the slots that `now` has left behind; the current slot's
    /// index.
    fn roll(&self, slots: &mut Slots, now: Instant) -> usize {
        let passed = now.saturating_duration_since(slots.at);
        let steps = (passed.as_nanos() / self.slot.as_nanos().max(1)) as u64;
        if steps == 0 {
            return slots.current;
        }
        if steps >= SLOTS as u64 {
            *slots = Slots::new(now);
            return 0;
        }
        for _ in 0..steps {
            slots.current = (slots.current + 1) % SLOTS;
            slots.requests[slots.current] = 0;
            slots.retries[slots.current] = 0;
        }
        slots.at += self.slot * steps as u32;
        slots.current
    }
}

impl Default for Budget {
    /// 20% of the requests of the last 10 s, and 10 retries a second
    /// (Finagle's defaults).
    fn default() -> Self {
        Self::new(Duration::from_secs(10), 10, 0.2).expect("valid")
    }
}

#[cfg(test)]
mod tests;
