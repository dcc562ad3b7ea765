//! What the approximate mode's unit tests share.

use throttle_fleet_core::algorithm::FixedWindow;

use super::meter::{SpanMeter, Window};

/// The tests' rule: 1,000 per 10 s in ten spans (a span of 1 s), fixed
/// window, fail closed while Redis is away.
pub(super) fn span_meter() -> SpanMeter {
    let q = throttle_fleet_core::Quota::new(1_000, std::time::Duration::from_secs(10));
    SpanMeter {
        window: Window::Fixed(FixedWindow::new(q).unwrap()),
        limit: 1_000,
        interval_us: 10_000_000,
        spans: 10,
        strict_when_down: false,
        closed_when_down: true,
        configured_fleet: 1,
    }
}
