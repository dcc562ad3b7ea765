//! A rule's gRPC answers, made once when the layer is built: the parts of a
//! denial's `google.rpc.Status` that are the same for every denial
//! (`QuotaFailure`, `ErrorInfo`, the message around the number), and the
//! whole answer of an unreachable backend. Per denial only the message's
//! number and the `RetryInfo` are encoded, into the thread's buffer
//! ([`arena`](crate::arena)).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::BufMut;
use http::{HeaderMap, HeaderValue};
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};
use throttle_fleet_core::{Quota, Rule};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, RetryInfo, StatusExt};

use crate::arena;

/// The `ErrorInfo.domain` of every answer of the limiter.
pub const ERROR_DOMAIN: &str = "throttle";

/// The denial message: `Quota exceeded for <rule>. Please retry after <n> seconds.`
const MESSAGE: [&str; 3] = ["Quota exceeded for ", ". Please retry after ", " seconds."];

/// A denial's message.
pub(crate) fn limited_message(rule: &Rule, secs: u64) -> String {
    let mut buf = itoa::Buffer::new();
    [
        MESSAGE[0],
        rule.name(),
        MESSAGE[1],
        buf.format(secs),
        MESSAGE[2],
    ]
    .concat()
}

/// `ErrorInfo.metadata` of every answer about `rule`.
pub(crate) fn dimension(rule: &Rule) -> HashMap<String, String> {
    HashMap::from([("dimension".to_owned(), rule.name().to_owned())])
}

/// The details of a denial, as they were built per denial before they were
/// made once per rule (and as the unbound responder still builds them).
pub(crate) fn limited_details(
    retry: Duration,
    subject: String,
    description: String,
    rule: &Rule,
) -> ErrorDetails {
    ErrorDetails::with_retry_info(Some(retry))
        .add_quota_failure_violation(subject, description)
        .set_error_info("RATE_LIMIT_EXCEEDED", ERROR_DOMAIN, dimension(rule))
        .to_owned()
}

/// The `grpc-message` and `grpc-status-details-bin` values tonic writes for
/// `status`.
fn status_values(status: &Status) -> Option<(HeaderValue, HeaderValue)> {
    let mut map = HeaderMap::new();
    status.add_header(&mut map).ok()?;
    Some((
        map.remove("grpc-message")?,
        map.remove("grpc-status-details-bin")?,
    ))
}

/// `text` as `grpc-message` carries it (percent-encoded by tonic's rules).
fn wire_text(text: &str) -> Box<[u8]> {
    // A status whose message is `text` between two letters, so that
    // leading and trailing spaces are encoded as inside a message.
    let status = Status::new(Code::Unknown, format!("a{text}a"));
    let mut map = HeaderMap::new();
    let _ = status.add_header(&mut map);
    let wire = map.get("grpc-message").map_or(&b"aa"[..], |v| v.as_bytes());
    wire[1..wire.len() - 1].into()
}

/// What every answer about one rule shares.
pub(crate) struct RuleAnswers {
    /// The rule's name, to check that a rejection is about this rule.
    name: Arc<str>,
    /// The `QuotaFailure` subject.
    subject: Box<str>,
    /// The message up to its number, and after it: as text (for the
    /// `Status` message) and as `grpc-message` carries it.
    head: Box<str>,
    wire_head: Box<[u8]>,
    wire_tail: Box<[u8]>,
    /// `Status.details` entries 2 and 3 (`QuotaFailure` and `ErrorInfo`,
    /// protobuf-encoded with their field keys), for each quota the rule can
    /// apply (its own, its tiers').
    tails: Box<[(Quota, Box<[u8]>)]>,
    /// The `grpc-message` and details of a fail-closed rule whose backend
    /// is unreachable.
    unavailable: Option<(HeaderValue, HeaderValue)>,
}

/// The per-denial header values of a limited call.
pub(crate) struct LimitedValues {
    pub(crate) message: HeaderValue,
    pub(crate) details: HeaderValue,
    pub(crate) pushback_ms: HeaderValue,
    pub(crate) reset: HeaderValue,
}

/// The `Status.details` entries after `RetryInfo` in a denial of `rule`
/// under `quota`: encoded by tonic-types, then cut out of its `Status`.
fn details_tail(rule: &Rule, subject: &str, quota: Quota) -> Box<[u8]> {
    let details = limited_details(
        Duration::ZERO,
        subject.to_owned(),
        describe_quota(rule, quota),
        rule,
    );
    let status = Status::with_error_details(Code::ResourceExhausted, "", details);
    let decoded =
        tonic_types::pb::Status::decode(status.details()).expect("tonic-types encodes a Status");
    let mut tail = Vec::new();
    for any in decoded.details.iter().skip(1) {
        prost::encoding::message::encode(3, any, &mut tail);
    }
    tail.into()
}

/// `ip: 5 per 60s`, `m: 3 per 1500ms`, `ip: 10 per 1s (burst 50)`: the
/// key's own `quota` (its tier's, when the rule has tiers); `pool: 4 in
/// flight` for a concurrency rule, which bounds requests at once, not a
/// rate (its quota's period is a placeholder).
pub(crate) fn describe_quota(rule: &Rule, quota: Quota) -> String {
    if rule.algorithm().is_concurrency() {
        return format!("{}: {} in flight", rule.name(), quota.limit());
    }
    let period = quota.period();
    let period = if period.subsec_nanos() == 0 {
        format!("{}s", period.as_secs())
    } else if period.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", period.as_millis())
    } else {
        format!("{}us", period.as_micros())
    };
    let mut out = format!("{}: {} per {period}", rule.name(), quota.limit());
    if rule.algorithm().uses_burst() && quota.burst() != quota.limit() {
        out.push_str(&format!(" (burst {})", quota.burst()));
    }
    out
}

/// The length of a length-delimited field `tag` of `len` bytes.
fn field_len(tag: u32, len: usize) -> usize {
    prost::encoding::key_len(tag) + encoded_len_varint(len as u64) + len
}

fn put_field_head(tag: u32, len: usize, out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

/// Appends `Status.details` entry `RetryInfo { retry_delay }` (field 3 of
/// `google.rpc.Status`, a `google.protobuf.Any`), as prost encodes it.
///
/// Encoded by hand, as the status's code and message in
/// [`RuleAnswers::limited`] are, for what it saves: prost's types instead
/// (`tonic_types::pb::RetryInfo` in a `prost_types::Any`, the message a
/// `String`) cost 547 instructions more per denial (11,654 against
/// 11,107 in the layer, `cargo bench -p throttle-fleet-suite --bench
/// grpc_denial_instructions`; 0.7% of a whole denied call of about
/// 75,000) and 3 allocations.
fn put_retry_info(retry_delay: Duration, out: &mut Vec<u8>) {
    let delay = retry_delay.min(RetryInfo::MAX_RETRY_DELAY);
    let (seconds, nanos) = (delay.as_secs(), u64::from(delay.subsec_nanos()));
    // google.protobuf.Duration: the fields that are not zero.
    let duration_len = if seconds == 0 {
        0
    } else {
        1 + encoded_len_varint(seconds)
    } + if nanos == 0 {
        0
    } else {
        1 + encoded_len_varint(nanos)
    };
    let value_len = field_len(1, duration_len);
    let type_url = RetryInfo::TYPE_URL;
    let any_len = field_len(1, type_url.len()) + field_len(2, value_len);
    put_field_head(3, any_len, out);
    put_field_head(1, type_url.len(), out);
    out.put_slice(type_url.as_bytes());
    put_field_head(2, value_len, out);
    put_field_head(1, duration_len, out);
    if seconds != 0 {
        encode_key(1, WireType::Varint, out);
        encode_varint(seconds, out);
    }
    if nanos != 0 {
        encode_key(2, WireType::Varint, out);
        encode_varint(nanos, out);
    }
}

impl RuleAnswers {
    /// Makes the answers about `rule`, whose `QuotaFailure` subject is
    /// `subject`.
    pub(crate) fn new(rule: &Rule, subject: &str) -> Self {
        let mut quotas = vec![rule.quota()];
        if let Some(tiers) = rule.tiers() {
            for &q in tiers.quotas() {
                if !quotas.contains(&q) {
                    quotas.push(q);
                }
            }
        }
        let tails = quotas
            .into_iter()
            .map(|q| (q, details_tail(rule, subject, q)))
            .collect();
        let head = [MESSAGE[0], rule.name(), MESSAGE[1]].concat();
        Self {
            name: rule.shared_name().clone(),
            subject: subject.into(),
            wire_head: wire_text(&head),
            wire_tail: wire_text(MESSAGE[2]),
            head: head.into(),
            tails,
            unavailable: status_values(&unavailable_status(rule)),
        }
    }

    /// Whether these are the answers about `rule`.
    pub(crate) fn is_for(&self, rule: &Rule) -> bool {
        *self.name == *rule.name()
    }

    /// The `QuotaFailure` subject of the rule's denials.
    pub(crate) fn subject(&self) -> &str {
        &self.subject
    }

    /// The `grpc-message` and details of an unreachable backend.
    pub(crate) fn unavailable(&self) -> Option<(HeaderValue, HeaderValue)> {
        self.unavailable.clone()
    }

    /// The header values of denial `d`, whose `retry-after` is `secs`;
    /// `None` when the denial's quota is not one the rule was bound with
    /// (a tier function's), for the caller to build it the slow way.
    pub(crate) fn limited(
        &self,
        quota: Quota,
        retry_after: Duration,
        secs: u64,
        pushback_ms: u64,
        reset: u64,
    ) -> Option<LimitedValues> {
        let (_, tail) = self.tails.iter().find(|(q, _)| *q == quota)?;
        let mut secs_buf = itoa::Buffer::new();
        let secs_text = secs_buf.format(secs).as_bytes();
        arena::scratch(|status| {
            // google.rpc.Status: code, message, details (RetryInfo, then the
            // rule's own), the order tonic-types writes them in.
            encode_key(1, WireType::Varint, status);
            encode_varint(Code::ResourceExhausted as u64, status);
            let message_len = self.head.len() + secs_text.len() + MESSAGE[2].len();
            put_field_head(2, message_len, status);
            status.put_slice(self.head.as_bytes());
            status.put_slice(secs_text);
            status.put_slice(MESSAGE[2].as_bytes());
            put_retry_info(retry_after, status);
            status.put_slice(tail);
            let wire_len = self.wire_head.len() + secs_text.len() + self.wire_tail.len();
            let need = wire_len + arena::base64_len(status.len()) + 2 * 20;
            arena::write(need, |w| {
                Some(LimitedValues {
                    message: w.value(|b| {
                        b.put_slice(&self.wire_head);
                        b.put_slice(secs_text);
                        b.put_slice(&self.wire_tail);
                    })?,
                    details: w.base64(status)?,
                    pushback_ms: w.number(pushback_ms)?,
                    reset: w.number(reset)?,
                })
            })
        })
    }
}

/// The status of a fail-closed rule whose backend could not be reached:
/// its message states the wait its `RetryInfo` and `retry-after` give.
pub(crate) fn unavailable_status(rule: &Rule) -> Status {
    let message = "The rate limiter is unavailable. Please retry after 1 second.";
    let details = ErrorDetails::with_retry_info(Some(Duration::from_secs(1)))
        .set_error_info("RATE_LIMITER_UNAVAILABLE", ERROR_DOMAIN, dimension(rule))
        .to_owned();
    Status::with_error_details(Code::Unavailable, message, details)
}

/// The status of a call shed for capacity: `UNAVAILABLE`, told apart from
/// a fail-closed rule's by its ErrorInfo reason; its message states the
/// wait as `retry-after` does (`secs`, the `wait` of its `RetryInfo`
/// rounded up), in the words of the HTTP answer's.
pub(crate) fn shed_status(rule: &Rule, wait: Duration, secs: u64) -> Status {
    let mut buf = itoa::Buffer::new();
    let message = [
        "The service is short of capacity. Please retry after ",
        buf.format(secs),
        " seconds.",
    ]
    .concat();
    let details = ErrorDetails::with_retry_info(Some(wait))
        .set_error_info("TEMPORARY_REDUCED_CAPACITY", ERROR_DOMAIN, dimension(rule))
        .to_owned();
    Status::with_error_details(Code::Unavailable, message, details)
}

#[cfg(test)]
mod tests;
