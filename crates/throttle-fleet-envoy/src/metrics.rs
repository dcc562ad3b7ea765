//! What the services report through the [`metrics`](https://docs.rs/metrics)
//! facade, beside each rule's decisions (`throttle_decisions_total`, the
//! layer's names, counted the same way):
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `throttle_envoy_rls_requests_total` | counter | `answer` | `ShouldRateLimit` calls: `ok`, `over_limit`, `invalid` |
//! | `throttle_envoy_rlqs_reports_total` | counter | | usage reports received (one per bucket per report) |
//! | `throttle_envoy_rlqs_assignments_total` | counter | `action` | bucket actions sent: `token_bucket`, `allow_all`, `deny_all`, `abandon` |
//! | `throttle_envoy_rlqs_streams` | gauge | | quota streams open |
//! | `throttle_envoy_rlqs_degraded_total` | counter | `policy` | shares Redis did not give (timed out, node down, an error), by the rule's failure policy that answered instead: `open` (no limit from that rule), `closed` (the stream ended), `local` (the memory shares) |
//! | `throttle_envoy_rlqs_refused_total` | counter | `bound` | what a bound of [`RlqsOptions`](crate::RlqsOptions) refused: `streams` (a stream), `buckets_in_all`, `buckets`, `stream_bytes`, `bucket_id_bytes` (a bucket left without assignment) |
//!
//! No label carries a descriptor value or a bucket id: label sets stay
//! bounded.

use metrics::{Counter, counter, describe_counter, describe_gauge, gauge};

/// Counter of `ShouldRateLimit` calls, labelled `answer`.
pub const RLS_REQUESTS: &str = "throttle_envoy_rls_requests_total";
/// Counter of bucket usage reports received.
pub const RLQS_REPORTS: &str = "throttle_envoy_rlqs_reports_total";
/// Counter of bucket actions sent, labelled `action`.
pub const RLQS_ASSIGNMENTS: &str = "throttle_envoy_rlqs_assignments_total";
/// Gauge of quota streams open.
pub const RLQS_STREAMS: &str = "throttle_envoy_rlqs_streams";
/// Counter of shares Redis did not give, labelled `policy`.
pub const RLQS_DEGRADED: &str = "throttle_envoy_rlqs_degraded_total";
/// Counter of what a bound refused, labelled `bound`.
pub const RLQS_REFUSED: &str = "throttle_envoy_rlqs_refused_total";

/// Gives the metrics above (and the layer's decision counters) their
/// descriptions in the recorder installed now.
pub fn describe() {
    throttle_fleet_tower::metrics::describe();
    describe_counter!(RLS_REQUESTS, "ShouldRateLimit calls, by answer");
    describe_counter!(RLQS_REPORTS, "RLQS bucket usage reports received");
    describe_counter!(RLQS_ASSIGNMENTS, "RLQS bucket actions sent, by action");
    describe_gauge!(RLQS_STREAMS, "RLQS streams open");
    describe_counter!(
        RLQS_DEGRADED,
        "RLQS shares Redis did not give, by the failure policy that answered"
    );
    describe_counter!(RLQS_REFUSED, "RLQS streams and buckets refused, by bound");
}

/// The `answer` of one `ShouldRateLimit` call.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RlsAnswer {
    Ok,
    OverLimit,
    Invalid,
}

/// The RLS counters, registered once (with the recorder installed when
/// the service is made), so an answer costs an increment, not a lookup.
#[derive(Debug, Clone)]
pub(crate) struct RlsMetrics {
    ok: Counter,
    over_limit: Counter,
    invalid: Counter,
}

impl RlsMetrics {
    pub(crate) fn new() -> Self {
        Self {
            ok: counter!(RLS_REQUESTS, "answer" => "ok"),
            over_limit: counter!(RLS_REQUESTS, "answer" => "over_limit"),
            invalid: counter!(RLS_REQUESTS, "answer" => "invalid"),
        }
    }

    pub(crate) fn answered(&self, answer: RlsAnswer) {
        match answer {
            RlsAnswer::Ok => &self.ok,
            RlsAnswer::OverLimit => &self.over_limit,
            RlsAnswer::Invalid => &self.invalid,
        }
        .increment(1);
    }
}

pub(crate) fn rlqs_reports(n: u64) {
    counter!(RLQS_REPORTS).increment(n);
}

pub(crate) fn rlqs_action(action: &'static str) {
    counter!(RLQS_ASSIGNMENTS, "action" => action).increment(1);
}

pub(crate) fn rlqs_streams(delta: f64) {
    gauge!(RLQS_STREAMS).increment(delta);
}

pub(crate) fn rlqs_degraded(policy: &'static str) {
    counter!(RLQS_DEGRADED, "policy" => policy).increment(1);
}

pub(crate) fn rlqs_refused(bound: &'static str) {
    counter!(RLQS_REFUSED, "bound" => bound).increment(1);
}
