//! Responders: a decision -> the protocol's answer.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use smallvec::SmallVec;
use throttle_core::{Allowed, Denied, Refused, Rule, unix_now_us};

/// `X-RateLimit-Limit`.
pub static X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub static X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset` (Unix epoch seconds).
pub static X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
/// `RateLimit-Policy` (IETF draft).
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `X-RateLimit-Shadow`: the shadow rules that would have denied the
/// request, when [`Policy::shadow_header`](crate::Policy::shadow_header) is on.
pub static X_RATELIMIT_SHADOW: HeaderName = HeaderName::from_static("x-ratelimit-shadow");
/// `RateLimit` (IETF draft).
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Why a request is answered by the limiter instead of the service.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Rejection<'a> {
    /// A rule denied the request.
    Limited {
        /// What the rule found.
        denied: &'a Denied,
        /// The rule (dimension) that denied it.
        rule: &'a Rule,
    },
    /// A rule's key material was missing and the rule rejects such requests.
    MissingKey {
        /// The rule whose key was missing.
        rule: &'a Rule,
        /// The status the rule answers with.
        status: StatusCode,
    },
    /// A fail-closed rule's backend could not be reached.
    Unavailable {
        /// What went wrong.
        refused: &'a Refused,
        /// The rule that could not be checked.
        rule: &'a Rule,
    },
}

/// Headers to add to an allowed response; small and allocation-free itself.
#[derive(Debug, Clone, Default)]
pub struct HeaderBlock {
    entries: SmallVec<[(HeaderName, HeaderValue); 5]>,
}

impl HeaderBlock {
    /// Adds a header.
    pub fn push(&mut self, name: HeaderName, value: HeaderValue) {
        self.entries.push((name, value));
    }

    /// Whether there is nothing to add.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Moves the headers into `headers`, replacing same-named ones.
    pub fn apply(self, headers: &mut HeaderMap) {
        for (name, value) in self.entries {
            headers.insert(name, value);
        }
    }
}

/// Headers for an allowed request's response, decided in `call` and
/// written when the inner service answers.
///
/// The standard `X-RateLimit-*` trio is kept as three numbers and rendered
/// at the end without allocating for small values; anything else is a
/// [`HeaderBlock`].
#[derive(Debug, Clone, Default)]
pub struct SuccessHeaders(SuccessRepr);

#[derive(Debug, Clone, Default)]
enum SuccessRepr {
    #[default]
    None,
    Standard {
        limit: u64,
        /// `None`: not known for the fleet (a degraded decision).
        remaining: Option<u64>,
        reset_epoch: u64,
    },
    Block(Box<HeaderBlock>),
}

impl SuccessHeaders {
    /// No headers.
    pub fn none() -> Self {
        Self(SuccessRepr::None)
    }

    /// `X-RateLimit-Limit`, `-Remaining` and `-Reset` (Unix epoch seconds at
    /// which `reset` from now has passed).
    pub fn standard(limit: u64, remaining: u64, reset: Duration) -> Self {
        Self(SuccessRepr::Standard {
            limit,
            remaining: Some(remaining),
            reset_epoch: reset_epoch_secs(reset),
        })
    }

    /// The `X-RateLimit-*` trio of an allowed decision, its reset counted
    /// from when the backend decided (no second clock read). A degraded
    /// decision (the backend could not be asked) carries no
    /// `X-RateLimit-Remaining`: the fleet's count is not known.
    pub fn for_allowed(allowed: &Allowed) -> Self {
        let reset_us = u64::try_from(allowed.reset.as_micros()).unwrap_or(u64::MAX);
        Self(SuccessRepr::Standard {
            limit: allowed.limit,
            remaining: (!allowed.degraded).then_some(allowed.remaining),
            reset_epoch: allowed.at_us.saturating_add(reset_us).div_ceil(1_000_000),
        })
    }

    /// Any headers.
    pub fn block(block: HeaderBlock) -> Self {
        Self(SuccessRepr::Block(Box::new(block)))
    }

    /// The same headers and one more.
    #[must_use]
    pub fn with(self, name: HeaderName, value: HeaderValue) -> Self {
        let mut block = match self.0 {
            SuccessRepr::Block(block) => *block,
            other => {
                let mut map = HeaderMap::new();
                Self(other).apply(&mut map);
                let mut block = HeaderBlock::default();
                let mut last = None;
                for (name, value) in map {
                    let name = name.or_else(|| last.clone());
                    if let Some(name) = name {
                        last = Some(name.clone());
                        block.push(name, value);
                    }
                }
                block
            }
        };
        block.push(name, value);
        Self::block(block)
    }

    /// Writes the headers into `headers`, replacing same-named ones.
    pub fn apply(self, headers: &mut HeaderMap) {
        match self.0 {
            SuccessRepr::None => {}
            SuccessRepr::Standard {
                limit,
                remaining,
                reset_epoch,
            } => {
                headers.insert(X_RATELIMIT_LIMIT.clone(), number(limit));
                if let Some(remaining) = remaining {
                    headers.insert(X_RATELIMIT_REMAINING.clone(), number(remaining));
                }
                headers.insert(X_RATELIMIT_RESET.clone(), number(reset_epoch));
            }
            SuccessRepr::Block(block) => block.apply(headers),
        }
    }
}

/// The numbers 0 to 1023 as text, made once and kept for the program's
/// life, so their header values are static: cloning one touches no shared
/// reference count.
static SMALL_NUMBER_TEXT: std::sync::LazyLock<Box<[String]>> =
    std::sync::LazyLock::new(|| (0..1024u64).map(|n| n.to_string()).collect());

static SMALL_NUMBERS: std::sync::LazyLock<Box<[HeaderValue]>> = std::sync::LazyLock::new(|| {
    SMALL_NUMBER_TEXT
        .iter()
        .map(|s| HeaderValue::from_static(s.as_str()))
        .collect()
});

/// A recently rendered larger number and its header value.
type Recent = (u64, Option<HeaderValue>);

thread_local! {
    /// Recently rendered larger numbers (limits, reset times), per thread:
    /// the same few values repeat from request to request.
    static RECENT: std::cell::RefCell<[Recent; 16]> =
        std::cell::RefCell::new(std::array::from_fn(|_| (0, None)));
}

/// `n` as a header value; no allocation for small or recently seen numbers.
pub fn number(n: u64) -> HeaderValue {
    if let Some(v) = SMALL_NUMBERS.get(n as usize) {
        return v.clone();
    }
    RECENT.with(|recent| {
        let mut recent = recent.borrow_mut();
        let slot = &mut recent[(n % 16) as usize];
        match &slot.1 {
            Some(v) if slot.0 == n => v.clone(),
            _ => {
                let v = HeaderValue::from(n);
                *slot = (n, Some(v.clone()));
                v
            }
        }
    })
}

/// Turns decisions into responses: a whole response for rejections, and
/// headers for allowed requests.
///
/// Closures `Fn(&Parts, Rejection<'_>) -> Response<Bytes>` are responders
/// whose allowed responses carry the standard `X-RateLimit-*` headers.
pub trait Responder: Send + Sync + 'static {
    /// The response to a rejected request.
    fn reject(&self, req: &Parts, rejection: Rejection<'_>) -> Response<Bytes>;

    /// Headers for an allowed request's response (default: `X-RateLimit-*`
    /// of the most restrictive rule, `rule`).
    fn allowed(&self, req: &Parts, allowed: &Allowed, rule: &Rule) -> SuccessHeaders {
        let _ = (req, rule);
        SuccessHeaders::for_allowed(allowed)
    }
}

impl<F> Responder for F
where
    F: Fn(&Parts, Rejection<'_>) -> Response<Bytes> + Send + Sync + 'static,
{
    fn reject(&self, req: &Parts, rejection: Rejection<'_>) -> Response<Bytes> {
        self(req, rejection)
    }
}

/// Whole seconds to wait, rounded up, and never 0 for a positive wait (a
/// `Retry-After: 0` invites an immediate retry storm).
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(u64::from(!wait.is_zero()))
}

/// Unix epoch seconds (rounded up) at which `reset` from now has passed.
pub fn reset_epoch_secs(reset: Duration) -> u64 {
    let at_us = unix_now_us() + reset.as_micros() as u64;
    at_us.div_ceil(1_000_000)
}

/// Writes `X-RateLimit-Limit`, `-Remaining` and `-Reset` into `out`.
pub fn rate_limit_headers(out: &mut HeaderBlock, limit: u64, remaining: u64, reset: Duration) {
    out.push(X_RATELIMIT_LIMIT.clone(), number(limit));
    out.push(X_RATELIMIT_REMAINING.clone(), number(remaining));
    out.push(X_RATELIMIT_RESET.clone(), number(reset_epoch_secs(reset)));
}

/// The HTTP responder: `429 Too Many Requests` with `Retry-After`, the
/// `X-RateLimit-*` headers and a JSON body naming the dimension; success
/// responses carry the same headers.
///
/// ```text
/// HTTP/1.1 429 Too Many Requests
/// content-type: application/json
/// retry-after: 14
/// x-ratelimit-limit: 100
/// x-ratelimit-remaining: 0
/// x-ratelimit-reset: 1774780860
///
/// {"error":"RATE_LIMIT_EXCEEDED","message":"Quota exceeded. Please retry after 14 seconds.","retry_after_seconds":14,"dimension":"ip"}
/// ```
///
/// A missing key answers the rule's status (400 by default) with
/// `{"error":"RATE_LIMIT_KEY_MISSING",...}`; an unreachable fail-closed
/// backend answers `503` with `Retry-After: 1` and
/// `{"error":"RATE_LIMITER_UNAVAILABLE",...}`. With
/// [`ietf_headers`](Self::ietf_headers) on, the IETF draft fields
/// `RateLimit-Policy: "ip";q=100;w=60` and `RateLimit: "ip";r=74;t=14` are
/// added to both kinds of answer.
#[derive(Debug, Clone, Copy)]
pub struct HttpResponder {
    ietf: bool,
}

impl Default for HttpResponder {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpResponder {
    /// `X-RateLimit-*` headers only.
    pub const fn new() -> Self {
        Self { ietf: false }
    }

    /// Also sends the IETF draft `RateLimit-Policy` and `RateLimit` fields.
    #[must_use]
    pub const fn ietf_headers(mut self, on: bool) -> Self {
        self.ietf = on;
        self
    }

    /// `window` is the key's own quota period (its tier's, if any).
    fn ietf_fields(
        out: &mut HeaderBlock,
        rule: &Rule,
        (limit, window): (u64, Duration),
        remaining: u64,
        t: u64,
    ) {
        let name = rule.name();
        let w = retry_after_secs(window);
        let mut policy = String::with_capacity(name.len() + 32);
        let mut buf = itoa::Buffer::new();
        policy.push('"');
        policy.push_str(name);
        policy.push_str("\";q=");
        policy.push_str(buf.format(limit));
        policy.push_str(";w=");
        policy.push_str(buf.format(w));
        let mut now = String::with_capacity(name.len() + 32);
        now.push('"');
        now.push_str(name);
        now.push_str("\";r=");
        now.push_str(buf.format(remaining));
        now.push_str(";t=");
        now.push_str(buf.format(t));
        // Rule names are restricted to [A-Za-z0-9_.-]: always valid.
        if let (Ok(p), Ok(n)) = (HeaderValue::try_from(policy), HeaderValue::try_from(now)) {
            out.push(RATELIMIT_POLICY.clone(), p);
            out.push(RATELIMIT.clone(), n);
        }
    }
}

/// `{"error":..,"message":..,"dimension":..}` plus an optional retry field.
/// Every string written is either fixed or a validated rule name, so no
/// escaping is needed.
fn json_body(error: &str, message: &str, retry_after: Option<u64>, dimension: &str) -> Bytes {
    let mut body = String::with_capacity(128 + message.len());
    body.push_str("{\"error\":\"");
    body.push_str(error);
    body.push_str("\",\"message\":\"");
    body.push_str(message);
    body.push('"');
    if let Some(secs) = retry_after {
        body.push_str(",\"retry_after_seconds\":");
        body.push_str(itoa::Buffer::new().format(secs));
    }
    body.push_str(",\"dimension\":\"");
    body.push_str(dimension);
    body.push_str("\"}");
    Bytes::from(body)
}

fn json_response(status: StatusCode, body: Bytes, headers: HeaderBlock) -> Response<Bytes> {
    let mut res = Response::new(body);
    *res.status_mut() = status;
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.apply(h);
    res
}

impl Responder for HttpResponder {
    fn reject(&self, _req: &Parts, rejection: Rejection<'_>) -> Response<Bytes> {
        let mut headers = HeaderBlock::default();
        match rejection {
            Rejection::Limited { denied: d, rule } => {
                let secs = retry_after_secs(d.retry_after);
                headers.push(RETRY_AFTER, number(secs));
                rate_limit_headers(&mut headers, d.limit, d.remaining, d.reset);
                if self.ietf {
                    Self::ietf_fields(
                        &mut headers,
                        rule,
                        (d.limit, d.quota.period()),
                        d.remaining,
                        secs,
                    );
                }
                let mut buf = itoa::Buffer::new();
                let message = [
                    "Quota exceeded. Please retry after ",
                    buf.format(secs),
                    " seconds.",
                ]
                .concat();
                let body = json_body("RATE_LIMIT_EXCEEDED", &message, Some(secs), rule.name());
                json_response(StatusCode::TOO_MANY_REQUESTS, body, headers)
            }
            Rejection::MissingKey { rule, status } => {
                let message = "The request does not carry the key this rate limit is applied by.";
                json_response(
                    status,
                    json_body("RATE_LIMIT_KEY_MISSING", message, None, rule.name()),
                    headers,
                )
            }
            Rejection::Unavailable { rule, .. } => {
                headers.push(RETRY_AFTER, HeaderValue::from_static("1"));
                let message = "The rate limiter is unavailable. Please retry later.";
                let body = json_body("RATE_LIMITER_UNAVAILABLE", message, Some(1), rule.name());
                json_response(StatusCode::SERVICE_UNAVAILABLE, body, headers)
            }
        }
    }

    fn allowed(&self, _req: &Parts, allowed: &Allowed, rule: &Rule) -> SuccessHeaders {
        if !self.ietf || allowed.degraded {
            // (Degraded: no remaining count to report, in either form.)
            return SuccessHeaders::for_allowed(allowed);
        }
        let mut headers = HeaderBlock::default();
        rate_limit_headers(
            &mut headers,
            allowed.limit,
            allowed.remaining,
            allowed.reset,
        );
        let t = retry_after_secs(allowed.reset);
        Self::ietf_fields(
            &mut headers,
            rule,
            (allowed.limit, allowed.quota.period()),
            allowed.remaining,
            t,
        );
        SuccessHeaders::block(headers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_render_the_same_from_the_tables_and_from_scratch() {
        for n in [0, 1, 9, 10, 1_023, 1_024, 60_000, 1_796_025_675, u64::MAX] {
            assert_eq!(number(n), HeaderValue::from(n));
            assert_eq!(number(n), HeaderValue::from(n), "cached");
        }
        // Two values sharing a cache slot.
        assert_eq!(number(1_040), HeaderValue::from(1_040u64));
        assert_eq!(number(1_056), HeaderValue::from(1_056u64));
        assert_eq!(number(1_040), HeaderValue::from(1_040u64));
    }

    #[test]
    fn retry_after_rounds_up_and_is_never_zero_for_a_wait() {
        assert_eq!(retry_after_secs(Duration::ZERO), 0);
        assert_eq!(retry_after_secs(Duration::from_micros(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(999)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(14)), 14);
    }
}
