//! The gRPC responder: decisions -> Trailers-Only `RESOURCE_EXHAUSTED`
//! answers with the standard error details.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use throttle_core::{Allowed, Quota, Rule};
use throttle_tower::headers::{HeaderBlock, SuccessHeaders, rate_limit_headers, retry_after_secs};
use throttle_tower::{HttpResponder, Rejection, Responder};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// `grpc-retry-pushback-ms`: how long a client with a retry policy must wait
/// before retrying (gRPC's retry design, A6).
pub static GRPC_RETRY_PUSHBACK_MS: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// The `ErrorInfo.domain` of every answer of the limiter.
pub const ERROR_DOMAIN: &str = "throttle";

const GRPC_CONTENT_TYPE: HeaderValue = HeaderValue::from_static("application/grpc");

/// Which gRPC wire protocol a request speaks, from its `content-type`.
///
/// ```
/// use throttle_tonic::GrpcProtocol;
///
/// let req = http::Request::post("/helloworld.Greeter/SayHello")
///     .header("content-type", "application/grpc-web+proto")
///     .body(())
///     .unwrap();
/// assert_eq!(GrpcProtocol::of(req.headers()), Some(GrpcProtocol::GrpcWeb));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GrpcProtocol {
    /// gRPC over HTTP/2: `application/grpc`, `application/grpc+proto`, ...
    Grpc,
    /// gRPC-web, binary: `application/grpc-web`, `application/grpc-web+proto`, ...
    GrpcWeb,
    /// gRPC-web, base64 text: `application/grpc-web-text`, ...
    GrpcWebText,
}

impl GrpcProtocol {
    /// The protocol of a request with these headers, or `None` for a request
    /// that is not a gRPC call (plain HTTP).
    pub fn of(headers: &http::HeaderMap) -> Option<Self> {
        let ct = headers.get(CONTENT_TYPE)?.as_bytes();
        const BASE: &[u8] = b"application/grpc";
        if ct.len() < BASE.len() || !ct[..BASE.len()].eq_ignore_ascii_case(BASE) {
            return None;
        }
        let rest = &ct[BASE.len()..];
        // What may follow a media type: nothing, a `+codec` suffix or
        // `;parameters`.
        let ends = |r: &[u8]| matches!(r.first(), None | Some(b'+' | b';' | b' '));
        let starts =
            |r: &[u8], p: &[u8]| r.len() >= p.len() && r[..p.len()].eq_ignore_ascii_case(p);
        if ends(rest) {
            Some(Self::Grpc)
        } else if starts(rest, b"-web-text") && ends(&rest[9..]) {
            Some(Self::GrpcWebText)
        } else if starts(rest, b"-web") && ends(&rest[4..]) {
            Some(Self::GrpcWeb)
        } else {
            None
        }
    }
}

/// Whether `req` is a gRPC call (gRPC or gRPC-web), by its `content-type`.
pub fn is_grpc(req: &Parts) -> bool {
    GrpcProtocol::of(&req.headers).is_some()
}

/// The responder of `throttle-tonic`: gRPC calls get the gRPC error model's
/// answer, everything else gets [`HttpResponder`]'s HTTP answer, so one
/// layer can guard an axum router that serves both.
///
/// # A denied gRPC call
///
/// A Trailers-Only response (the status in the only `HEADERS` frame, no
/// message), which every gRPC client reads as the call's status:
///
/// ```text
/// :status: 200
/// content-type: application/grpc
/// grpc-status: 8                                   (RESOURCE_EXHAUSTED)
/// grpc-message: Quota exceeded for ip. Please retry after 12 seconds.
/// grpc-status-details-bin: <google.rpc.Status, base64>
/// retry-after: 12
/// grpc-retry-pushback-ms: 11734
/// x-ratelimit-limit: 5
/// x-ratelimit-remaining: 0
/// x-ratelimit-reset: 1774780860
/// ```
///
/// `grpc-status-details-bin` is a `google.rpc.Status` with the same code and
/// message and these details:
///
/// - `google.rpc.RetryInfo`: `retry_delay` is the exact wait (not rounded);
/// - `google.rpc.QuotaFailure`: one violation whose `subject` is
///   `"<dimension>:<key kind>"` (e.g. `ip:peer-ip`; the key kind is the one
///   given with [`key_kind`](Self::key_kind), and the subject is just the
///   dimension when none was given; the key itself is never echoed) and
///   whose `description` states the quota (`ip: 5 per 60s`);
/// - `google.rpc.ErrorInfo`: `reason` `RATE_LIMIT_EXCEEDED`, `domain`
///   `throttle`, `metadata` `{"dimension": "ip"}`: the codes of the HTTP
///   answer's JSON body, for clients that switch on a reason.
///
/// `retry-after` is whole seconds, rounded up; `grpc-retry-pushback-ms` is
/// the wait in milliseconds, rounded up, so a client whose retry policy
/// lists `RESOURCE_EXHAUSTED` waits exactly as long as needed.
///
/// # Other answers
///
/// | rejection | gRPC status | details |
/// |---|---|---|
/// | a rule denied the call | `RESOURCE_EXHAUSTED` (8) | RetryInfo, QuotaFailure, ErrorInfo `RATE_LIMIT_EXCEEDED` |
/// | the key is missing, rule answers 400 (the default, e.g. [`Metadata`](crate::Metadata)) | `INVALID_ARGUMENT` (3) | ErrorInfo `RATE_LIMIT_KEY_MISSING` |
/// | the key is missing, rule answers 401 | `UNAUTHENTICATED` (16) | same |
/// | the key is missing, rule answers 403 | `PERMISSION_DENIED` (7) | same |
/// | the key is missing, rule answers 500 (e.g. [`PeerIp`](crate::PeerIp) without a peer address) | `INTERNAL` (13) | same |
/// | a fail-closed rule's backend is unreachable | `UNAVAILABLE` (14) | RetryInfo 1 s, ErrorInfo `RATE_LIMITER_UNAVAILABLE`; `retry-after: 1`, `grpc-retry-pushback-ms: 1000` |
///
/// A missing key's HTTP status (the rule's
/// [`MissingKey::Reject`](throttle_tower::MissingKey::Reject)) is turned
/// into a gRPC code by the inverse of `google.rpc.Code`'s HTTP mapping: 400
/// `INVALID_ARGUMENT`, 401 `UNAUTHENTICATED`, 403 `PERMISSION_DENIED`, 404
/// `NOT_FOUND`, 409 `ABORTED`, 412 `FAILED_PRECONDITION`, 429
/// `RESOURCE_EXHAUSTED`, 499 `CANCELLED`, 500 `INTERNAL`, 501
/// `UNIMPLEMENTED`, 503 `UNAVAILABLE`, 504 `DEADLINE_EXCEEDED`; any other
/// 4xx `FAILED_PRECONDITION`, 5xx `INTERNAL`, anything else `UNKNOWN`.
///
/// # Allowed calls
///
/// Their response headers (the call's initial metadata) carry
/// `x-ratelimit-limit`, `x-ratelimit-remaining` and `x-ratelimit-reset` of
/// the most restrictive rule, as HTTP responses do.
///
/// # gRPC-web
///
/// A gRPC-web call (`application/grpc-web`, `-web+proto`, `-web-text`, ...)
/// gets the same answer in the gRPC-web form: the gRPC-web protocol allows
/// a Trailers-Only response as plain response headers with an empty body,
/// which gRPC-web clients read as the status, so the answer differs only in
/// its `content-type`, which is the request's. Browsers show a script only
/// the headers that CORS exposes: a CORS layer outside this one must expose
/// `grpc-status`, `grpc-message`, `grpc-status-details-bin`, `retry-after`,
/// `grpc-retry-pushback-ms` and `x-ratelimit-*`.
///
/// ```
/// use throttle_tonic::{GrpcResponder, HttpResponder};
///
/// let responder = GrpcResponder::new()
///     .key_kind("ip", "peer-ip")
///     .key_kind("tenant", "metadata:x-api-key")
///     .http(HttpResponder::new().ietf_headers(true));
/// # let _ = responder;
/// ```
#[derive(Clone, Default)]
pub struct GrpcResponder {
    http: HttpResponder,
    kinds: Arc<[(Box<str>, Box<str>)]>,
}

impl fmt::Debug for GrpcResponder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcResponder")
            .field("http", &self.http)
            .field("key_kinds", &self.kinds)
            .finish()
    }
}

impl GrpcResponder {
    /// gRPC answers for gRPC calls, [`HttpResponder::new`] for the rest.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers plain HTTP requests (and adds success headers) with `http`.
    #[must_use]
    pub fn http(mut self, http: HttpResponder) -> Self {
        self.http = http;
        self
    }

    /// Names the kind of key the rule called `rule` limits by (`peer-ip`,
    /// `method`, `metadata:x-api-key`, `user`, ...), so that its
    /// `QuotaFailure` violation's subject reads `"<rule>:<kind>"`.
    #[must_use]
    pub fn key_kind(self, rule: impl Into<String>, kind: impl Into<String>) -> Self {
        let (rule, kind) = (rule.into(), kind.into());
        let mut kinds: Vec<_> = self
            .kinds
            .iter()
            .filter(|(r, _)| **r != *rule)
            .cloned()
            .collect();
        kinds.push((rule.into(), kind.into()));
        Self {
            kinds: kinds.into(),
            ..self
        }
    }

    /// The `QuotaFailure` subject for `rule`.
    fn subject(&self, rule: &Rule) -> String {
        match self.kinds.iter().find(|(r, _)| **r == *rule.name()) {
            Some((_, kind)) => [rule.name(), ":", kind].concat(),
            None => rule.name().to_owned(),
        }
    }
}

/// The gRPC code for a missing key answered with `status` over HTTP: the
/// inverse of `google.rpc.Code`'s HTTP mapping.
pub fn code_for_http_status(status: StatusCode) -> Code {
    match status.as_u16() {
        400 => Code::InvalidArgument,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::NotFound,
        409 => Code::Aborted,
        412 => Code::FailedPrecondition,
        429 => Code::ResourceExhausted,
        499 => Code::Cancelled,
        500 => Code::Internal,
        501 => Code::Unimplemented,
        503 => Code::Unavailable,
        504 => Code::DeadlineExceeded,
        s if (400..500).contains(&s) => Code::FailedPrecondition,
        s if (500..600).contains(&s) => Code::Internal,
        _ => Code::Unknown,
    }
}

/// `ip: 5 per 60s`, `m: 3 per 1500ms`, `ip: 10 per 1s (burst 50)`: the
/// key's own `quota` (its tier's, when the rule has tiers).
fn describe_quota(rule: &Rule, quota: Quota) -> String {
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

/// Milliseconds, rounded up, at least 1 for a positive wait.
fn pushback_ms(wait: Duration) -> u64 {
    let ms = wait.as_micros().div_ceil(1_000);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

fn dimension(rule: &Rule) -> std::collections::HashMap<String, String> {
    std::collections::HashMap::from([("dimension".to_owned(), rule.name().to_owned())])
}

/// A Trailers-Only answer: the status and `metadata` in the headers, no body.
fn trailers_only(
    protocol: GrpcProtocol,
    req: &Parts,
    status: &Status,
    metadata: HeaderBlock,
) -> Response<Bytes> {
    let mut res = Response::new(Bytes::new());
    let headers = res.headers_mut();
    let content_type = match protocol {
        GrpcProtocol::Grpc => GRPC_CONTENT_TYPE,
        // Only a gRPC-web content type can get here, so it is the request's.
        GrpcProtocol::GrpcWeb | GrpcProtocol::GrpcWebText => req
            .headers
            .get(CONTENT_TYPE)
            .cloned()
            .unwrap_or(GRPC_CONTENT_TYPE),
    };
    headers.insert(CONTENT_TYPE, content_type);
    metadata.apply(headers);
    if status.add_header(headers).is_err() {
        // Unreachable in practice (the message is percent-encoded and the
        // details base64), but a status without a message beats a panic.
        headers.insert("grpc-status", HeaderValue::from(status.code() as i32));
    }
    res
}

impl Responder for GrpcResponder {
    fn reject(&self, req: &Parts, rejection: Rejection<'_>) -> Response<Bytes> {
        let Some(protocol) = GrpcProtocol::of(&req.headers) else {
            return self.http.reject(req, rejection);
        };
        let mut metadata = HeaderBlock::default();
        let status = match rejection {
            Rejection::Limited { denied: d, rule } => {
                let secs = retry_after_secs(d.retry_after);
                metadata.push(RETRY_AFTER, HeaderValue::from(secs));
                metadata.push(
                    GRPC_RETRY_PUSHBACK_MS.clone(),
                    HeaderValue::from(pushback_ms(d.retry_after)),
                );
                rate_limit_headers(&mut metadata, d.limit, d.remaining, d.reset);
                let message = format!(
                    "Quota exceeded for {}. Please retry after {secs} seconds.",
                    rule.name()
                );
                let details = ErrorDetails::with_retry_info(Some(d.retry_after))
                    .add_quota_failure_violation(self.subject(rule), describe_quota(rule, d.quota))
                    .set_error_info("RATE_LIMIT_EXCEEDED", ERROR_DOMAIN, dimension(rule))
                    .to_owned();
                Status::with_error_details(Code::ResourceExhausted, message, details)
            }
            Rejection::MissingKey { rule, status } => {
                let message = format!(
                    "The call does not carry the key the {} rate limit is applied by.",
                    rule.name()
                );
                let details = ErrorDetails::with_error_info(
                    "RATE_LIMIT_KEY_MISSING",
                    ERROR_DOMAIN,
                    dimension(rule),
                );
                Status::with_error_details(code_for_http_status(status), message, details)
            }
            Rejection::Unavailable { rule, .. } => {
                metadata.push(RETRY_AFTER, HeaderValue::from_static("1"));
                metadata.push(
                    GRPC_RETRY_PUSHBACK_MS.clone(),
                    HeaderValue::from_static("1000"),
                );
                let message = "The rate limiter is unavailable. Please retry later.";
                let details = ErrorDetails::with_retry_info(Some(Duration::from_secs(1)))
                    .set_error_info("RATE_LIMITER_UNAVAILABLE", ERROR_DOMAIN, dimension(rule))
                    .to_owned();
                Status::with_error_details(Code::Unavailable, message, details)
            }
            // A future rejection we do not know yet: still a gRPC status.
            _ => Status::with_error_details(
                Code::Unavailable,
                "The rate limiter refused the call.",
                ErrorDetails::with_retry_info(Some(Duration::from_secs(1))),
            ),
        };
        trailers_only(protocol, req, &status, metadata)
    }

    fn allowed(&self, req: &Parts, allowed: &Allowed, rule: &Rule) -> SuccessHeaders {
        if GrpcProtocol::of(&req.headers).is_some() {
            SuccessHeaders::for_allowed(allowed)
        } else {
            self.http.allowed(req, allowed, rule)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(ct: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
        h
    }

    #[test]
    fn content_types_are_classified_exactly() {
        use GrpcProtocol::*;
        for (ct, expected) in [
            ("application/grpc", Some(Grpc)),
            ("application/grpc+proto", Some(Grpc)),
            ("Application/GRPC+json", Some(Grpc)),
            ("application/grpc; charset=utf-8", Some(Grpc)),
            ("application/grpc-web", Some(GrpcWeb)),
            ("application/grpc-web+proto", Some(GrpcWeb)),
            ("application/grpc-web-text", Some(GrpcWebText)),
            ("application/grpc-web-text+proto", Some(GrpcWebText)),
            ("application/grpcx", None),
            ("application/grpc-webx", None),
            ("application/grpc-", None),
            ("application/json", None),
            ("application/grp", None),
        ] {
            assert_eq!(GrpcProtocol::of(&headers(ct)), expected, "{ct}");
        }
        assert_eq!(GrpcProtocol::of(&http::HeaderMap::new()), None);
    }

    #[test]
    fn missing_key_statuses_map_to_grpc_codes() {
        for (http, code) in [
            (400, Code::InvalidArgument),
            (401, Code::Unauthenticated),
            (403, Code::PermissionDenied),
            (418, Code::FailedPrecondition),
            (429, Code::ResourceExhausted),
            (500, Code::Internal),
            (502, Code::Internal),
            (503, Code::Unavailable),
            (302, Code::Unknown),
        ] {
            assert_eq!(
                code_for_http_status(StatusCode::from_u16(http).unwrap()),
                code,
                "{http}"
            );
        }
    }

    #[test]
    fn pushback_rounds_up() {
        assert_eq!(pushback_ms(Duration::from_micros(1)), 1);
        assert_eq!(pushback_ms(Duration::from_millis(1500)), 1500);
        assert_eq!(pushback_ms(Duration::from_micros(1_500_001)), 1501);
    }

    #[test]
    fn quotas_are_described_with_their_unit() {
        let q = throttle_core::Quota::new(5, Duration::from_secs(60));
        assert_eq!(
            describe_quota(&Rule::new("ip", q).fixed_window(), q),
            "ip: 5 per 60s"
        );
        assert_eq!(
            describe_quota(
                &Rule::new("ip", q.with_burst(9)).token_bucket(),
                q.with_burst(9)
            ),
            "ip: 5 per 60s (burst 9)"
        );
        let q = throttle_core::Quota::new(3, Duration::from_millis(1500));
        assert_eq!(
            describe_quota(&Rule::new("m", q).fixed_window(), q),
            "m: 3 per 1500ms"
        );
    }

    #[test]
    fn key_kinds_name_the_subject() {
        let r = GrpcResponder::new()
            .key_kind("ip", "x")
            .key_kind("ip", "peer-ip");
        let rule = Rule::new("ip", throttle_core::Quota::per_minute(1));
        assert_eq!(r.subject(&rule), "ip:peer-ip");
        let other = Rule::new("tenant", throttle_core::Quota::per_minute(1));
        assert_eq!(r.subject(&other), "tenant");
    }
}
