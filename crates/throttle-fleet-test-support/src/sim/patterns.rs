//! Synthetic traffic: timelines of requests for one key.

use throttle_fleet_core::Quota;

use super::{Event, period_us};

/// `count` requests of cost 1, evenly spaced over `duration_us`, from `start_us`.
pub fn steady(start_us: u64, count: u64, duration_us: u64) -> Vec<Event> {
    (0..count)
        .map(|i| Event {
            at_us: start_us + i * duration_us / count.max(1),
            cost: 1,
        })
        .collect()
}

/// `per_side` requests spread over the last `spread_us` before the boundary
/// `boundary_us`, then `per_side` more over the first `spread_us` after it:
/// the fixed-window boundary attack.
pub fn edge_burst(boundary_us: u64, per_side: u64, spread_us: u64) -> Vec<Event> {
    let mut events = steady(boundary_us - spread_us, per_side, spread_us);
    events.extend(steady(boundary_us, per_side, spread_us));
    events
}

/// Traffic at an average rate, arriving in bursts of simultaneous requests,
/// each burst moved off its even slot by a random jitter: the general
/// pattern, of which steady traffic (bursts of one, no jitter) and a bot
/// swarm (far above the quota, many requests per instant) are cases.
///
/// The timeline is a pure function of the fields: the same seed gives the
/// same timeline on every run and every platform.
///
/// ```
/// use throttle_fleet_test_support::sim::Custom;
///
/// let traffic = Custom {
///     start_us: 0,
///     duration_us: 10_000_000, // 10 s
///     rate_per_s: 5.0,
///     burst: 10,
///     jitter_us: 100_000,
///     seed: 7,
/// };
/// let events = traffic.events();
/// assert_eq!(events.len() as u64, traffic.count()); // 50 requests
/// assert_eq!(events, traffic.events()); // deterministic
/// assert!(events.windows(2).all(|w| w[0].at_us <= w[1].at_us));
/// // Five bursts of ten requests, each at one instant.
/// assert_eq!(events[0].at_us, events[9].at_us);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Custom {
    /// When the traffic starts (microseconds since the epoch).
    pub start_us: u64,
    /// How long it lasts: every request arrives in `[start, start + duration)`.
    pub duration_us: u64,
    /// Requests per second, on average: `rate * duration` requests in all,
    /// rounded to the nearest whole. A rate that is negative or not a number
    /// sends nothing.
    pub rate_per_s: f64,
    /// Requests that arrive together at one instant (0 counts as 1).
    pub burst: u64,
    /// Each burst lands up to this far before or after its even slot,
    /// uniformly at random (kept inside the duration).
    pub jitter_us: u64,
    /// Seeds the jitter.
    pub seed: u64,
}

impl Custom {
    /// How many requests [`events`](Self::events) returns, computed without
    /// building them (to bound a simulation before allocating it).
    pub fn count(&self) -> u64 {
        // `as` saturates: NaN and negative rates give 0, huge ones u64::MAX.
        (self.rate_per_s * (self.duration_us as f64 / 1e6)).round() as u64
    }

    /// The requests, in time order, each of cost 1.
    pub fn events(&self) -> Vec<Event> {
        let count = self.count();
        let burst = self.burst.max(1);
        let bursts = count.div_ceil(burst);
        let mut rng = crate::Rng::new(self.seed);
        let last = self.start_us + self.duration_us.saturating_sub(1);
        let mut events = Vec::with_capacity(usize::try_from(count).unwrap_or(usize::MAX));
        for b in 0..bursts {
            let slot = self.start_us
                + (u128::from(b) * u128::from(self.duration_us) / u128::from(bursts)) as u64;
            let at_us = if self.jitter_us == 0 {
                slot
            } else {
                // Uniform in [slot - jitter, slot + jitter], then kept inside.
                let offset = rng.below_by_multiply(2 * self.jitter_us + 1);
                (slot + offset)
                    .saturating_sub(self.jitter_us)
                    .clamp(self.start_us, last)
            };
            let size = burst.min(count - b * burst);
            events.extend((0..size).map(|_| Event { at_us, cost: 1 }));
        }
        // Jitter can move a burst past its neighbour; bursts stay whole.
        events.sort_by_key(|e| e.at_us);
        events
    }
}

/// The laboratory's named traffic patterns, each sized from the quota it is
/// run against and starting at the Unix epoch (a boundary of every window).
///
/// ```
/// use throttle_fleet_core::Quota;
/// use throttle_fleet_test_support::sim::Pattern;
///
/// let q = Quota::per_minute(100);
/// let attack = Pattern::EdgeBurst.events(q);
/// assert_eq!(attack.len(), 200); // 100 just before 60 s, 100 just after
/// assert!(attack.iter().all(|e| e.at_us.abs_diff(60_000_000) <= 300_000));
/// assert_eq!(Pattern::EdgeBurst.span_us(q), 120_000_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Pattern {
    /// A well-behaved client at exactly the quota's rate, evenly spaced
    /// (never early by a fraction of a microsecond), for three periods.
    Steady,
    /// The boundary attack on fixed windows: a full quota in the moment just
    /// before the boundary at one period, and another just after it, each
    /// spread over half the quota's emission interval (`period / limit`),
    /// at most one second. The timeline spans two periods.
    EdgeBurst,
    /// A swarm of bots at ten times the quota's rate for two periods, in
    /// volleys of a fifth of the limit (from 5 to 100 requests at one
    /// instant), each volley jittered by up to half the gap between volleys.
    BotSwarm {
        /// Seeds the jitter.
        seed: u64,
    },
    /// Explicit traffic; its own start and duration.
    Custom(Custom),
}

impl Pattern {
    /// The stable lower-case name (`steady`, `edge_burst`, `bot_swarm`,
    /// `custom`).
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Steady => "steady",
            Self::EdgeBurst => "edge_burst",
            Self::BotSwarm { .. } => "bot_swarm",
            Self::Custom(_) => "custom",
        }
    }

    /// How long the timeline lasts, from the epoch (or from a custom
    /// pattern's start): the time axis to draw it on.
    pub fn span_us(&self, quota: Quota) -> u64 {
        let p = period_us(quota);
        match self {
            Self::Steady => 3 * p,
            Self::EdgeBurst | Self::BotSwarm { .. } => 2 * p,
            Self::Custom(c) => c.duration_us,
        }
    }

    /// How many requests [`events`](Self::events) returns, computed without
    /// building them.
    pub fn count(&self, quota: Quota) -> u64 {
        match self {
            Self::Steady => quota.limit().saturating_mul(3),
            Self::EdgeBurst => quota.limit().saturating_mul(2),
            Self::BotSwarm { .. } | Self::Custom(_) => self.as_custom(quota).count(),
        }
    }

    /// The requests, in time order, each of cost 1.
    pub fn events(&self, quota: Quota) -> Vec<Event> {
        let (limit, p) = (quota.limit(), period_us(quota));
        match self {
            Self::Steady => {
                // Rounded up, so that no request comes early: with a period
                // that the limit does not divide, a truncated schedule would
                // send some a fraction of a microsecond before their turn.
                let count = limit.saturating_mul(3);
                (0..count)
                    .map(|i| Event {
                        at_us: (u128::from(i) * u128::from(3 * p)).div_ceil(u128::from(count))
                            as u64,
                        cost: 1,
                    })
                    .collect()
            }
            Self::EdgeBurst => {
                let spread = (p / limit / 2).clamp(1, 1_000_000);
                edge_burst(p, limit, spread)
            }
            Self::BotSwarm { .. } | Self::Custom(_) => self.as_custom(quota).events(),
        }
    }

    /// The pattern as [`Custom`] traffic, for those that are one.
    fn as_custom(&self, quota: Quota) -> Custom {
        match *self {
            Self::Custom(c) => c,
            _ => {
                let (limit, p) = (quota.limit(), period_us(quota));
                let seed = match *self {
                    Self::BotSwarm { seed } => seed,
                    _ => 0,
                };
                let burst = (limit / 5).clamp(5, 100);
                let count = limit.saturating_mul(20);
                let volleys = count.div_ceil(burst).max(1);
                Custom {
                    start_us: 0,
                    duration_us: 2 * p,
                    rate_per_s: 10.0 * limit as f64 * 1e6 / p as f64,
                    burst,
                    jitter_us: 2 * p / volleys / 2,
                    seed,
                }
            }
        }
    }
}
