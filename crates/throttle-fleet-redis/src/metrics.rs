//! What the Redis backends report through the
//! [`metrics`](https://docs.rs/metrics) facade: errors and timeouts, the
//! circuit breakers, the approximate mode's flushes and node estimate, and
//! the leased mode's leases.
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `throttle_redis_calls_total` | counter | | script calls sent to Redis (request path and flushes) |
//! | `throttle_redis_errors_total` | counter | `kind` | failed calls: `timeout` (over the command timeout), `error` (Redis or connection error), `unrouted` (no known cluster primary for the slot) |
//! | `throttle_redis_breaker_open` | gauge | `node` | 1 while the node's circuit breaker is open, else 0 (with several backends on one node: how many of their breakers are open) |
//! | `throttle_redis_breaker_opened_total` | counter | `node` | times the breaker opened |
//! | `throttle_redis_flushes_total` | counter | `rule`, `result` | approximate mode: flushes that reached Redis (`ok`) or not (`failed`, their counts are sent again) |
//! | `throttle_redis_flush_seconds` | histogram | `rule` | approximate mode: duration of each successful flush |
//! | `throttle_redis_nodes_estimate` | gauge | `rule` | approximate mode: instances sharing the last flushed key, as estimated from the fleet's total |
//! | `throttle_redis_lease_calls_total` | counter | `rule` | leased mode: lease calls sent to Redis |
//! | `throttle_redis_lease_tokens_total` | counter | `rule` | leased mode: tokens Redis granted |
//!
//! `node` is the server's `host:port` (for a standalone Redis, the one of
//! its URL; for a cluster, each primary's): primaries are few, so the label
//! stays bounded. No label ever carries a key.
//!
//! Handles are registered when the backend, a node or a rule is created,
//! with the recorder installed then. With the crate's `metrics` feature off
//! (it is on by default) nothing is recorded.

/// Counter of script calls.
pub const CALLS: &str = "throttle_redis_calls_total";
/// Counter of failed calls, labelled `kind`.
pub const ERRORS: &str = "throttle_redis_errors_total";
/// Gauge: 1 while a node's breaker is open, labelled `node`.
pub const BREAKER_OPEN: &str = "throttle_redis_breaker_open";
/// Counter of breaker openings, labelled `node`.
pub const BREAKER_OPENED: &str = "throttle_redis_breaker_opened_total";
/// Counter of approximate-mode flushes, labelled `rule` and `result`.
pub const FLUSHES: &str = "throttle_redis_flushes_total";
/// Histogram of successful flush durations in seconds, labelled `rule`.
pub const FLUSH_SECONDS: &str = "throttle_redis_flush_seconds";
/// Gauge of the approximate mode's node estimate, labelled `rule`.
pub const NODES_ESTIMATE: &str = "throttle_redis_nodes_estimate";
/// Counter of lease calls, labelled `rule`.
pub const LEASE_CALLS: &str = "throttle_redis_lease_calls_total";
/// Counter of leased tokens, labelled `rule`.
pub const LEASE_TOKENS: &str = "throttle_redis_lease_tokens_total";

/// Gives the metrics above their descriptions and units in the recorder
/// installed now. The backends call it when they connect.
pub fn describe() {
    #[cfg(feature = "metrics")]
    {
        use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
        describe_counter!(CALLS, Unit::Count, "Script calls sent to Redis");
        describe_counter!(ERRORS, Unit::Count, "Failed Redis calls, by kind");
        describe_gauge!(BREAKER_OPEN, "1 while the node's circuit breaker is open");
        describe_counter!(BREAKER_OPENED, Unit::Count, "Times the breaker opened");
        describe_counter!(FLUSHES, Unit::Count, "Approximate-mode flushes, by result");
        describe_histogram!(FLUSH_SECONDS, Unit::Seconds, "Successful flush durations");
        describe_gauge!(NODES_ESTIMATE, "Instances sharing a key, as estimated");
        describe_counter!(LEASE_CALLS, Unit::Count, "Lease calls sent to Redis");
        describe_counter!(LEASE_TOKENS, Unit::Count, "Tokens Redis granted to leases");
    }
}

#[cfg(feature = "metrics")]
pub(crate) use on::*;

#[cfg(not(feature = "metrics"))]
pub(crate) use off::*;

#[cfg(feature = "metrics")]
mod on {
    use std::time::Duration;

    use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};

    use super::*;
    use crate::call_failure::Failure;

    /// The backend's call and error counters.
    #[derive(Debug)]
    pub(crate) struct CallMetrics {
        calls: Counter,
        timeouts: Counter,
        errors: Counter,
        unrouted: Counter,
    }

    impl CallMetrics {
        pub(crate) fn new() -> Self {
            describe();
            Self {
                calls: counter!(CALLS),
                timeouts: counter!(ERRORS, "kind" => "timeout"),
                errors: counter!(ERRORS, "kind" => "error"),
                unrouted: counter!(ERRORS, "kind" => "unrouted"),
            }
        }

        #[inline]
        pub(crate) fn call(&self) {
            self.calls.increment(1);
        }

        pub(crate) fn failed(&self, failure: &Failure) {
            match failure {
                Failure::Timeout => &self.timeouts,
                Failure::Error(_) => &self.errors,
                Failure::Unrouted => &self.unrouted,
            }
            .increment(1);
        }
    }

    /// One node's breaker gauge and openings.
    #[derive(Debug)]
    pub(crate) struct BreakerMetrics {
        open: Gauge,
        opened: Counter,
    }

    impl BreakerMetrics {
        /// For the node at `node` (`host:port`). The gauge moves by one
        /// (not set): two backends on one node share its series, and
        /// one's closing must not hide the other's open breaker.
        pub(crate) fn new(node: &str) -> Self {
            Self {
                open: gauge!(BREAKER_OPEN, "node" => node.to_owned()),
                opened: counter!(BREAKER_OPENED, "node" => node.to_owned()),
            }
        }

        /// The breaker went from closed to open.
        pub(crate) fn opened(&self) {
            self.open.increment(1.0);
            self.opened.increment(1);
        }

        /// The breaker went from open to closed.
        pub(crate) fn closed(&self) {
            self.open.decrement(1.0);
        }
    }

    /// An approximate rule's flushes and node estimate.
    #[derive(Debug)]
    pub(crate) struct FlushMetrics {
        ok: Counter,
        failed: Counter,
        seconds: Histogram,
        nodes: Gauge,
    }

    impl FlushMetrics {
        pub(crate) fn new(rule: &str) -> Self {
            let rule = rule.to_owned();
            Self {
                ok: counter!(FLUSHES, "rule" => rule.clone(), "result" => "ok"),
                failed: counter!(FLUSHES, "rule" => rule.clone(), "result" => "failed"),
                seconds: histogram!(FLUSH_SECONDS, "rule" => rule.clone()),
                nodes: gauge!(NODES_ESTIMATE, "rule" => rule),
            }
        }

        pub(crate) fn flushed(&self, took: Duration) {
            self.ok.increment(1);
            self.seconds.record(took.as_secs_f64());
        }

        pub(crate) fn failed(&self) {
            self.failed.increment(1);
        }

        pub(crate) fn nodes_milli(&self, milli: u64) {
            self.nodes.set(milli as f64 / 1_000.0);
        }
    }

    /// A leased rule's lease calls and tokens.
    #[derive(Debug)]
    pub(crate) struct LeaseMetrics {
        calls: Counter,
        tokens: Counter,
    }

    impl LeaseMetrics {
        pub(crate) fn new(rule: &str) -> Self {
            Self {
                calls: counter!(LEASE_CALLS, "rule" => rule.to_owned()),
                tokens: counter!(LEASE_TOKENS, "rule" => rule.to_owned()),
            }
        }

        pub(crate) fn call(&self) {
            self.calls.increment(1);
        }

        pub(crate) fn granted(&self, tokens: u64) {
            self.tokens.increment(tokens);
        }
    }
}

/// The same API, recording nothing.
#[cfg(not(feature = "metrics"))]
#[allow(clippy::unused_self)]
mod off {
    use std::time::Duration;

    use crate::call_failure::Failure;

    #[derive(Debug)]
    pub(crate) struct CallMetrics;

    impl CallMetrics {
        pub(crate) fn new() -> Self {
            Self
        }
        pub(crate) fn call(&self) {}
        pub(crate) fn failed(&self, _: &Failure) {}
    }

    #[derive(Debug)]
    pub(crate) struct BreakerMetrics;

    impl BreakerMetrics {
        pub(crate) fn new(_: &str) -> Self {
            Self
        }
        pub(crate) fn opened(&self) {}
        pub(crate) fn closed(&self) {}
    }

    #[derive(Debug)]
    pub(crate) struct FlushMetrics;

    impl FlushMetrics {
        pub(crate) fn new(_: &str) -> Self {
            Self
        }
        pub(crate) fn flushed(&self, _: Duration) {}
        pub(crate) fn failed(&self) {}
        pub(crate) fn nodes_milli(&self, _: u64) {}
    }

    #[derive(Debug)]
    pub(crate) struct LeaseMetrics;

    impl LeaseMetrics {
        pub(crate) fn new(_: &str) -> Self {
            Self
        }
        pub(crate) fn call(&self) {}
        pub(crate) fn granted(&self, _: u64) {}
    }
}
