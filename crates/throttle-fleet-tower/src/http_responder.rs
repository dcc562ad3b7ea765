//! The HTTP responder: a decision -> a `429`, `503` or `400` answer
//! with `Retry-After`, the rate-limit headers and a JSON body.

use std::cell::RefCell;
use std::sync::LazyLock;
use std::time::Duration;

use crate::RequestHead;
use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use throttle_fleet_core::fields::{reset_epoch_secs, retry_after_secs};
use throttle_fleet_core::{Rule, decision::Decision};

use crate::headers::{
    HeaderBlock, RATELIMIT, RATELIMIT_POLICY, SuccessHeaders, X_RATELIMIT_LIMIT,
    X_RATELIMIT_REMAINING, X_RATELIMIT_RESET, in_flight_field, in_flight_policy_value, numbers,
    policy_value, rate_limit_headers, ratelimit_field,
};

use crate::responder::{Rejection, Responder};

/// The HTTP responder: `429 Too Many Requests` with `Retry-After`, the
/// `X-RateLimit-*` headers and a JSON body naming the dimension; success
/// responses carry the same headers.
///
/// ```text
/// HTTP/1.1 429 Too Many Requests
/// content-type: application/json
/// content-length: 132
/// retry-after: 14
/// x-ratelimit-limit: 100
/// x-ratelimit-remaining: 0
/// x-ratelimit-reset: 1774780860
///
/// {"error":"RATE_LIMIT_EXCEEDED","message":"Quota exceeded. Please retry after 14 seconds.","retry_after_seconds":14,"dimension":"ip"}
/// ```
///
/// The `429` carries its body's `Content-Length` (a custom responder that
/// wraps this one and replaces the body must set it again or remove it).
/// A missing key answers the rule's status (400 by default) with
/// `{"error":"RATE_LIMIT_KEY_MISSING",...}`; an unreachable fail-closed
/// backend answers `503` with `Retry-After: 1` and
/// `{"error":"RATE_LIMITER_UNAVAILABLE",...}`. A request shed for
/// capacity ([`Decision::is_shed`]) answers `503` with `Retry-After` and
/// `{"error":"TEMPORARY_REDUCED_CAPACITY","type":"temporary-reduced-capacity",...}`,
/// without rate-limit headers: its client is not over a limit. With
/// [`ietf_headers`](Self::ietf_headers) on, the IETF draft fields
/// `RateLimit-Policy: "ip";q=100;w=60` and `RateLimit: "ip";r=74;t=14` are
/// added to both kinds of answer; with
/// [`x_ratelimit_headers`](Self::x_ratelimit_headers) off as well, they
/// replace the `X-RateLimit-*` trio (the `429` keeps `Retry-After`).
#[derive(Debug, Clone, Copy)]
pub struct HttpResponder {
    ietf: bool,
    /// The `X-RateLimit-*` trio (on unless turned off with `ietf` on).
    legacy: bool,
    /// Headers on allowed answers at all.
    success: bool,
}

impl Default for HttpResponder {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpResponder {
    /// `X-RateLimit-*` headers only.
    pub const fn new() -> Self {
        Self {
            ietf: false,
            legacy: true,
            success: true,
        }
    }

    /// Whether allowed answers carry rate-limit headers (default on). Off,
    /// only refusals do: for services whose clients do not read them, or
    /// that must not tell a client how close it is to its limit.
    #[must_use]
    pub const fn success_headers(mut self, on: bool) -> Self {
        self.success = on;
        self
    }

    /// Also sends the IETF draft `RateLimit-Policy` and `RateLimit` fields.
    #[must_use]
    pub const fn ietf_headers(mut self, on: bool) -> Self {
        self.ietf = on;
        self
    }

    /// Whether the `X-RateLimit-*` trio is sent alongside the IETF fields
    /// (default on). Off, an IETF answer carries only `RateLimit-Policy`
    /// and `RateLimit` (and a `429` its `Retry-After`): two headers an
    /// allowed answer instead of five, cheaper than the trio alone. Without
    /// [`ietf_headers`](Self::ietf_headers) the trio is always sent.
    ///
    /// ```
    /// use throttle_fleet_tower::HttpResponder;
    ///
    /// let ietf_only = HttpResponder::new().ietf_headers(true).x_ratelimit_headers(false);
    /// # let _ = ietf_only;
    /// ```
    #[must_use]
    pub const fn x_ratelimit_headers(mut self, on: bool) -> Self {
        self.legacy = on;
        self
    }

    /// Only the IETF fields.
    const fn ietf_only(&self) -> bool {
        self.ietf && !self.legacy
    }

    /// `RateLimit-Policy` and `RateLimit`, or neither if the field could
    /// not be made; `window` is the key's own quota period (its tier's, if
    /// any).
    fn ietf_values(
        rule: &Rule,
        (limit, window): (u64, Duration),
        remaining: u64,
        t: u64,
    ) -> Option<(HeaderValue, HeaderValue)> {
        let (policy, now) = if rule.algorithm().is_concurrency() {
            let policy = in_flight_policy_value(rule.name(), limit);
            let now = in_flight_field(&policy, remaining);
            (policy, now)
        } else {
            let policy = policy_value(rule.name(), limit, window);
            let now = ratelimit_field(&policy, remaining, t);
            (policy, now)
        };
        Some((policy, now?))
    }

    /// Pushes [`ietf_values`](Self::ietf_values) into `out`.
    fn ietf_fields(
        out: &mut HeaderBlock,
        rule: &Rule,
        quota: (u64, Duration),
        remaining: u64,
        t: u64,
    ) {
        if let Some((policy, now)) = Self::ietf_values(rule, quota, remaining, t) {
            out.push(RATELIMIT_POLICY.clone(), policy);
            out.push(RATELIMIT.clone(), now);
        }
    }
}

/// `{"error":..,"message":..,"dimension":..}` plus an optional problem
/// type (`"type":..`, after the error) and retry field, the message given
/// in pieces. Every string written is either fixed or a validated rule
/// name, so no escaping is needed. One allocation of exactly the body's
/// size (a `Vec` whose length is its capacity becomes `Bytes` without a
/// second one).
fn json_body(
    error: &str,
    problem: Option<&str>,
    message: &[&str],
    retry_after: Option<u64>,
    dimension: &str,
) -> Bytes {
    let mut buf = itoa::Buffer::new();
    let retry = retry_after.map(|secs| buf.format(secs));
    let len = JSON_PARTS_LEN
        + error.len()
        + problem.map_or(0, |p| TYPE_FIELD.len() + p.len())
        + message.iter().map(|p| p.len()).sum::<usize>()
        + retry.map_or(0, |r| RETRY_FIELD.len() + r.len())
        + dimension.len();
    let mut body = Vec::with_capacity(len);
    body.extend_from_slice(b"{\"error\":\"");
    body.extend_from_slice(error.as_bytes());
    if let Some(problem) = problem {
        body.extend_from_slice(TYPE_FIELD.as_bytes());
        body.extend_from_slice(problem.as_bytes());
    }
    body.extend_from_slice(b"\",\"message\":\"");
    for part in message {
        body.extend_from_slice(part.as_bytes());
    }
    body.push(b'"');
    if let Some(retry) = retry {
        body.extend_from_slice(RETRY_FIELD.as_bytes());
        body.extend_from_slice(retry.as_bytes());
    }
    body.extend_from_slice(b",\"dimension\":\"");
    body.extend_from_slice(dimension.as_bytes());
    body.extend_from_slice(b"\"}");
    debug_assert_eq!(body.len(), len);
    Bytes::from(body)
}

/// A refusal whose body is a function of the wait and the rule's name
/// only, so that its last few bodies are kept per thread and shared.
#[derive(Clone, Copy)]
enum Refusal {
    /// A `429`: the key is over its limit.
    Limited,
    /// A `503`: shed for capacity (the class's share of a concurrency
    /// rule is full).
    Shed,
}

impl Refusal {
    /// The body's error code.
    const fn error(self) -> &'static str {
        match self {
            Self::Limited => "RATE_LIMIT_EXCEEDED",
            Self::Shed => "TEMPORARY_REDUCED_CAPACITY",
        }
    }

    /// The body's problem type, if it names one.
    const fn problem(self) -> Option<&'static str> {
        match self {
            Self::Limited => None,
            Self::Shed => Some("temporary-reduced-capacity"),
        }
    }

    /// The body's message, up to the wait (in seconds, then " seconds.").
    const fn message(self) -> &'static str {
        match self {
            Self::Limited => "Quota exceeded. Please retry after ",
            Self::Shed => "The service is short of capacity. Please retry after ",
        }
    }
}

/// The body of a [`Refusal`]: the same for every refusal of its kind with
/// the same wait under the same rule, so the last few are kept per thread
/// and shared (a flood of denials or of shed requests then allocates no
/// body).
fn refusal_body(refusal: Refusal, secs: u64, rule: &str) -> Bytes {
    REFUSAL_BODIES.with(|cache| {
        let mut cache = cache.borrow_mut();
        let slot = &mut cache[refusal as usize][(secs % REFUSAL_BODIES_KEPT as u64) as usize];
        if let Some((s, body)) = slot
            && *s == secs
            && names_rule(body, rule)
        {
            return body.clone();
        }
        let mut buf = itoa::Buffer::new();
        let message = [refusal.message(), buf.format(secs), " seconds."];
        let body = json_body(
            refusal.error(),
            refusal.problem(),
            &message,
            Some(secs),
            rule,
        );
        *slot = Some((secs, body.clone()));
        body
    })
}

/// The `503` of a request shed for capacity: `Retry-After` and a body
/// naming the problem type (`temporary-reduced-capacity`) and the rule.
fn shed_response(decision: &Decision, rule: &Rule) -> Response<Bytes> {
    let secs = retry_after_secs(decision.retry_after());
    let body = refusal_body(Refusal::Shed, secs, rule.name());
    let [length, retry] = numbers([body.len() as u64, secs]);
    let headers = limited_headers(
        &SHED,
        RefusalValues {
            content_length: Some(length),
            retry_after: Some(retry),
            ..RefusalValues::default()
        },
    );
    let mut res = Response::new(body);
    *res.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    *res.headers_mut() = headers;
    res
}

/// Whether a refusal's body (a function of the wait and the rule's name
/// only) ends with `rule` as its dimension.
fn names_rule(body: &[u8], rule: &str) -> bool {
    body.len() > rule.len() + 2
        && body[body.len() - 2 - rule.len()..body.len() - 2] == *rule.as_bytes()
        && body[body.len() - 3 - rule.len()] == b'"'
}

const REFUSAL_BODIES_KEPT: usize = 8;

/// Recent bodies of each [`Refusal`], by wait (seconds) modulo their
/// number.
type RefusalBodies = [[Option<(u64, Bytes)>; REFUSAL_BODIES_KEPT]; 2];

thread_local! {
    /// Kept for what it saves: a body made for every refusal instead costs
    /// 436 instructions more per denied request (17,370 against 16,934,
    /// 2.6%; `MODES="bare memory-deny" benches/http/callgrind.sh`).
    static REFUSAL_BODIES: RefCell<RefusalBodies> =
        const { RefCell::new([const { [const { None }; REFUSAL_BODIES_KEPT] }; 2]) };
}

/// The fixed text of [`json_body`] besides the type and retry fields.
const JSON_PARTS_LEN: usize = "{\"error\":\"".len()
    + "\",\"message\":\"".len()
    + "\"".len()
    + ",\"dimension\":\"".len()
    + "\"}".len();
const TYPE_FIELD: &str = "\",\"type\":\"";
const RETRY_FIELD: &str = ",\"retry_after_seconds\":";

fn json_response(status: StatusCode, body: Bytes, headers: HeaderBlock) -> Response<Bytes> {
    let mut res = Response::new(body);
    *res.status_mut() = status;
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.apply(h);
    res
}

/// The headers of a `429` (and, with neither kind of rate-limit header,
/// of a shed `503`), with empty placeholder values: a refusal clones the
/// map and places each value under its name (see [`limited_headers`]),
/// which allocates the map once. `Content-Length`
/// is among them: a server that adds it to a map without it (axum does)
/// would insert into a clone that has no room to spare, and grow it (a
/// reallocation and a rehash, about 700 instructions per denial).
fn limited_template(ietf: bool, legacy: bool) -> HeaderMap {
    let unfilled = || HeaderValue::from_static("");
    let mut map = HeaderMap::with_capacity(8);
    map.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    map.insert(CONTENT_LENGTH, unfilled());
    map.insert(RETRY_AFTER, unfilled());
    if legacy {
        map.insert(X_RATELIMIT_LIMIT.clone(), unfilled());
        map.insert(X_RATELIMIT_REMAINING.clone(), unfilled());
        map.insert(X_RATELIMIT_RESET.clone(), unfilled());
    }
    if ietf {
        map.insert(RATELIMIT_POLICY.clone(), unfilled());
        map.insert(RATELIMIT.clone(), unfilled());
    }
    map
}

static LIMITED: LazyLock<HeaderMap> = LazyLock::new(|| limited_template(false, true));
static LIMITED_IETF: LazyLock<HeaderMap> = LazyLock::new(|| limited_template(true, true));
static LIMITED_IETF_ONLY: LazyLock<HeaderMap> = LazyLock::new(|| limited_template(true, false));
/// A shed `503`'s: `Content-Type`, `Content-Length`, `Retry-After`.
static SHED: LazyLock<HeaderMap> = LazyLock::new(|| limited_template(false, false));

/// The values of a refusal's headers, each for the header it is named
/// for; a template's header whose value is `None` is left out.
#[derive(Default)]
struct RefusalValues {
    content_length: Option<HeaderValue>,
    retry_after: Option<HeaderValue>,
    limit: Option<HeaderValue>,
    remaining: Option<HeaderValue>,
    reset: Option<HeaderValue>,
    policy: Option<HeaderValue>,
    ratelimit: Option<HeaderValue>,
}

impl RefusalValues {
    /// Where the value of the header `name` is kept; `None` for a header
    /// whose value is the template's own (`Content-Type`). The standard
    /// names are told apart as such (an enum compared); the others by
    /// their length (and one letter for the two of 17), then checked
    /// whole: one comparison of text per header.
    #[inline(always)]
    fn slot(&mut self, name: &HeaderName) -> Option<&mut Option<HeaderValue>> {
        if name == CONTENT_LENGTH {
            return Some(&mut self.content_length);
        }
        if name == RETRY_AFTER {
            return Some(&mut self.retry_after);
        }
        if name == CONTENT_TYPE {
            return None;
        }
        let text = name.as_str();
        let (slot, expected) = match text.len() {
            17 if text.as_bytes()[12] == b'l' => (&mut self.limit, &X_RATELIMIT_LIMIT),
            17 => (&mut self.reset, &X_RATELIMIT_RESET),
            21 => (&mut self.remaining, &X_RATELIMIT_REMAINING),
            16 => (&mut self.policy, &RATELIMIT_POLICY),
            9 => (&mut self.ratelimit, &RATELIMIT),
            _ => return None,
        };
        same_name(text, expected).then_some(slot)
    }
}

/// Whether `a` is the text of the name `b`: the same text where it lies
/// (a template's names are clones of these statics, which share it), or
/// else equal text.
#[inline(always)]
fn same_name(a: &str, b: &HeaderName) -> bool {
    let b = b.as_str();
    a.len() == b.len() && (std::ptr::eq(a.as_ptr(), b.as_ptr()) || a == b)
}

/// A refusal's headers: `template`'s, each value placed under its own
/// name. The map's order (which `http` documents as arbitrary) is never
/// relied on: each entry is visited with its name, which is compared, not
/// hashed. A denial through the layer costs 7,013 instructions
/// (`benches/layer/run.sh denied`), 192 more than values placed by
/// position (6,821) and 178 fewer than each name compared with each of
/// the seven in turn.
#[inline(always)]
fn limited_headers(template: &HeaderMap, mut values: RefusalValues) -> HeaderMap {
    let mut map = template.clone();
    let mut unfilled = false;
    for (name, slot) in map.iter_mut() {
        if let Some(value) = values.slot(name) {
            match value.take() {
                Some(value) => *slot = value,
                None => unfilled = true,
            }
        }
    }
    if unfilled {
        drop_unfilled(&mut map);
    }
    map
}

/// Removes the headers [`limited_headers`] had no value for (still the
/// template's empty placeholder).
#[cold]
#[inline(never)]
fn drop_unfilled(map: &mut HeaderMap) {
    let names: Vec<HeaderName> = map
        .iter()
        .filter(|(_, value)| value.is_empty())
        .map(|(name, _)| name.clone())
        .collect();
    for name in names {
        map.remove(name);
    }
}

impl Responder for HttpResponder {
    fn reject(&self, _req: &RequestHead<'_>, rejection: Rejection<'_>) -> Response<Bytes> {
        match rejection {
            Rejection::Denied { decision: d, rule } => {
                let secs = retry_after_secs(d.retry_after());
                let body = refusal_body(Refusal::Limited, secs, rule.name());
                let limit = d.limit(rule);
                let [length, retry, limit_value, remaining, reset] = numbers([
                    body.len() as u64,
                    secs,
                    limit,
                    d.remaining(),
                    reset_epoch_secs(d),
                ]);
                // (The trio's values go unused under the IETF fields alone.)
                let mut values = RefusalValues {
                    content_length: Some(length),
                    retry_after: Some(retry),
                    limit: Some(limit_value),
                    remaining: Some(remaining),
                    reset: Some(reset),
                    ..RefusalValues::default()
                };
                let template = if self.ietf {
                    let quota = (limit, d.quota(rule).period());
                    (values.policy, values.ratelimit) =
                        Self::ietf_values(rule, quota, d.remaining(), secs).unzip();
                    if self.legacy {
                        &LIMITED_IETF
                    } else {
                        &LIMITED_IETF_ONLY
                    }
                } else {
                    &LIMITED
                };
                let mut res = Response::new(body);
                *res.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                *res.headers_mut() = limited_headers(template, values);
                res
            }
            Rejection::MissingKey { rule, status } => {
                let headers = HeaderBlock::default();
                let message = "The request does not carry the key this rate limit is applied by.";
                json_response(
                    status,
                    json_body(
                        "RATE_LIMIT_KEY_MISSING",
                        None,
                        &[message],
                        None,
                        rule.name(),
                    ),
                    headers,
                )
            }
            Rejection::Shed { decision, rule } => shed_response(decision, rule),
            Rejection::Refused { rule, .. } => {
                let mut headers = HeaderBlock::default();
                headers.push(RETRY_AFTER, HeaderValue::from_static("1"));
                let message = "The rate limiter is unavailable. Please retry after 1 second.";
                let body = json_body(
                    "RATE_LIMITER_UNAVAILABLE",
                    None,
                    &[message],
                    Some(1),
                    rule.name(),
                );
                json_response(StatusCode::SERVICE_UNAVAILABLE, body, headers)
            }
        }
    }

    // Inline: without success headers the answer is one branch, not a
    // call that sets up the frame the headers need.
    #[inline]
    fn allowed(&self, _req: &RequestHead<'_>, decision: &Decision, rule: &Rule) -> SuccessHeaders {
        if !self.success {
            return SuccessHeaders::none();
        }
        self.success_headers_for(decision, rule)
    }
}

impl HttpResponder {
    /// [`Responder::allowed`] with success headers on.
    #[inline(never)]
    fn success_headers_for(&self, decision: &Decision, rule: &Rule) -> SuccessHeaders {
        if !self.ietf {
            // The default, and the hot path: the trio alone.
            return SuccessHeaders::for_allowed(decision, rule);
        }
        let limit = decision.limit(rule);
        let degraded = decision.is_degraded();
        if self.ietf_only() && !rule.algorithm().is_concurrency() {
            let policy = policy_value(rule.name(), limit, decision.quota(rule).period());
            // (Degraded: the fleet's remaining count is not known, so no
            // `RateLimit` field, as no `X-RateLimit-Remaining` otherwise.)
            let remaining = (!degraded).then_some(decision.remaining());
            return SuccessHeaders::ietf(policy, remaining, retry_after_secs(decision.reset()));
        }
        if self.ietf_only() && degraded {
            // A concurrency rule's policy alone: no remaining count to report.
            let mut headers = HeaderBlock::default();
            headers.push(
                RATELIMIT_POLICY.clone(),
                in_flight_policy_value(rule.name(), limit),
            );
            return SuccessHeaders::block(headers);
        }
        if degraded {
            // (Degraded: no remaining count to report, in either form.)
            return SuccessHeaders::for_allowed(decision, rule);
        }
        let mut headers = HeaderBlock::default();
        if self.legacy {
            let reset = reset_epoch_secs(decision);
            rate_limit_headers(&mut headers, limit, decision.remaining(), reset);
        }
        let t = retry_after_secs(decision.reset());
        Self::ietf_fields(
            &mut headers,
            rule,
            (limit, decision.quota(rule).period()),
            decision.remaining(),
            t,
        );
        SuccessHeaders::block(headers)
    }
}

#[cfg(test)]
mod tests;
