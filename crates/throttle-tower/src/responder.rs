//! Responders: a decision -> the protocol's answer.

use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode};
use throttle_core::{Allowed, Denied, Refused, Rule};

use crate::headers::{
    HeaderBlock, RATELIMIT, RATELIMIT_POLICY, SuccessHeaders, number, rate_limit_headers,
    retry_after_secs,
};

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

    /// Called when the layer is built, and again on every reload, before
    /// the first request: every rule in policy order (the position is the
    /// rule's index, as in [`Denied::rule`]) with its extractor's
    /// [`kind`](crate::KeyExtractor::kind). The place to make once what
    /// each rule's answers share. The default does nothing.
    fn bind(&mut self, rules: &[(&Rule, &str)]) {
        let _ = rules;
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
