//! Synthetic traffic: timelines of requests for one key.

use super::Event;

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
