//! The gRPC responder: decisions -> Trailers-Only `RESOURCE_EXHAUSTED`
//! answers with the standard error details.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderName, HeaderValue, Response, StatusCode};
use throttle_fleet_core::fields::{reset_epoch_secs, retry_after_secs};
use throttle_fleet_core::{Rule, decision::Decision};
use throttle_fleet_tower::HttpResponder;
use throttle_fleet_tower::RequestHead;
use throttle_fleet_tower::headers::{
    SuccessHeaders, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET, number,
};
use throttle_fleet_tower::responder::{Rejection, Responder};
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::denial::{
    RuleAnswers, describe_quota, dimension, limited_details, limited_message, shed_status,
    unavailable_status,
};

/// `grpc-retry-pushback-ms`: how long a client with a retry policy must wait
/// before retrying (gRPC's retry design, A6).
pub static GRPC_RETRY_PUSHBACK_MS: HeaderName =
    HeaderName::from_static(throttle_fleet_core::fields::names::GRPC_RETRY_PUSHBACK_MS);

pub use crate::denial::ERROR_DOMAIN;

const GRPC_CONTENT_TYPE: HeaderValue = HeaderValue::from_static("application/grpc");

/// Which gRPC wire protocol a request speaks, from its `content-type`.
///
/// ```
/// use throttle_fleet_tonic::grpc::GrpcProtocol;
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
pub(crate) fn is_grpc(req: &RequestHead<'_>) -> bool {
    GrpcProtocol::of(req.headers).is_some()
}

/// The responder of `throttle-fleet-tonic`: gRPC calls get the gRPC error model's
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
///   `"<dimension>:<key kind>"` (e.g. `ip:peer-ip`; the key kind is the
///   rule's extractor's [`kind`](throttle_fleet_tower::KeyExtractor::kind), or the
///   one given with [`key_kind`](Self::key_kind), which overrides it; the
///   key itself is never echoed) and whose `description` states the quota
///   (`ip: 5 per 60s`; a concurrency rule's, the requests it lets in
///   flight: `pool: 4 in flight`);
/// - `google.rpc.ErrorInfo`: `reason` `RATE_LIMIT_EXCEEDED`, `domain`
///   `throttle`, `metadata` `{"dimension": "ip"}`: the codes of the HTTP
///   answer's JSON body, for clients that switch on a reason.
///
/// `retry-after` is whole seconds, rounded up; `grpc-retry-pushback-ms` is
/// the wait in milliseconds, rounded up, so a client whose retry policy
/// lists `RESOURCE_EXHAUSTED` waits as long as needed, never less (a
/// long wait is rounded up as the decision keeps it: see
/// [`Decision`](throttle_fleet_core::decision::Decision)).
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
/// | a rule shed the call for capacity ([`Decision::is_shed`]) | `UNAVAILABLE` (14) | RetryInfo (the wait, at least 1 s), ErrorInfo `TEMPORARY_REDUCED_CAPACITY`; `retry-after`, `grpc-retry-pushback-ms` |
///
/// A missing key's HTTP status (the rule's
/// [`MissingKey::Reject`](throttle_fleet_tower::MissingKey::Reject)) is turned
/// into a gRPC code by the inverse of `google.rpc.Code`'s HTTP mapping: 400
/// `INVALID_ARGUMENT`, 401 `UNAUTHENTICATED`, 403 `PERMISSION_DENIED`, 404
/// `NOT_FOUND`, 409 `ABORTED`, 412 `FAILED_PRECONDITION`, 429
/// `RESOURCE_EXHAUSTED`, 499 `CANCELLED`, 500 `INTERNAL`, 501
/// `UNIMPLEMENTED`, 503 `UNAVAILABLE`, 504 `DEADLINE_EXCEEDED`; any other
/// 4xx `FAILED_PRECONDITION`, 5xx `INTERNAL`, anything else `UNKNOWN`.
///
/// # Allowed calls
///
/// Their response headers (the call's initial metadata) carry what an
/// allowed HTTP response carries under the [`http`](Self::http)
/// responder's settings: by default `x-ratelimit-limit`,
/// `x-ratelimit-remaining` and `x-ratelimit-reset` of the most restrictive
/// rule; also `ratelimit-policy` and `ratelimit` with
/// [`ietf_headers`](HttpResponder::ietf_headers); nothing with
/// [`success_headers(false)`](HttpResponder::success_headers).
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
/// # Made once per rule
///
/// When the layer is built (and on every reload) the responder is bound to
/// the rules ([`Responder::bind`]): each rule's `QuotaFailure` and
/// `ErrorInfo` are encoded then, and so is the whole answer of an
/// unreachable backend. A denial encodes only its message's number and its
/// `RetryInfo`, into a buffer of the thread that its header values share,
/// which is reused once the answers written into it are gone: a denied
/// call costs 2 allocations, those of the answer's `http::HeaderMap`.
/// The answers are the ones tonic-types builds, byte for byte.
///
/// ```
/// use throttle_fleet_tonic::GrpcResponder;
/// use throttle_fleet_tonic::HttpResponder;
///
/// let responder = GrpcResponder::new()
///     .key_kind("tenant", "api-key") // instead of the extractor's kind
///     .http(HttpResponder::new().ietf_headers(true));
/// # let _ = responder;
/// ```
#[derive(Clone, Default)]
pub struct GrpcResponder {
    http: HttpResponder,
    kinds: Arc<[(Box<str>, Box<str>)]>,
    /// What each rule's answers share, by rule index; made by
    /// [`Responder::bind`] when the layer is built.
    bound: Arc<[RuleAnswers]>,
}

impl fmt::Debug for GrpcResponder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcResponder")
            .field("http", &self.http)
            .field("key_kinds", &self.kinds)
            .field("bound_rules", &self.bound.len())
            .finish()
    }
}

impl GrpcResponder {
    /// gRPC answers for gRPC calls, [`HttpResponder::new`] for the rest.
    pub fn new() -> Self {
        Self::default()
    }

    /// Answers plain HTTP requests with `http`, whose settings also choose
    /// the success headers of every allowed call, gRPC or not.
    #[must_use]
    pub fn http(mut self, http: HttpResponder) -> Self {
        self.http = http;
        self
    }

    /// Names the kind of key the rule called `rule` limits by, overriding
    /// its extractor's [`kind`](throttle_fleet_tower::KeyExtractor::kind), so
    /// that its `QuotaFailure` violation's subject reads `"<rule>:<kind>"`.
    ///
    /// Not needed for the built-in extractors, which name their kind
    /// themselves (`PeerIp` is `peer-ip`, `Metadata::new("x-api-key")` is
    /// `metadata:x-api-key`); useful for closures and custom extractors
    /// that do not (their kind is `custom`), or to keep an older subject.
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

    /// The `QuotaFailure` subject for `rule`, whose extractor's kind is
    /// `extractor_kind` (`None`: not known, the responder was not bound to
    /// a layer's rules): `"<rule>:<kind>"`, or the rule's name alone when
    /// no kind is known.
    fn subject(&self, rule: &Rule, extractor_kind: Option<&str>) -> String {
        let named = self.kinds.iter().find(|(r, _)| **r == *rule.name());
        match named.map(|(_, kind)| &**kind).or(extractor_kind) {
            Some(kind) => [rule.name(), ":", kind].concat(),
            None => rule.name().to_owned(),
        }
    }

    /// The answers made for rule `index` at build, if they are `rule`'s.
    fn bound(&self, index: usize, rule: &Rule) -> Option<&RuleAnswers> {
        self.bound.get(index).filter(|a| a.is_for(rule))
    }

    /// The answers made for `rule` at build, found by name.
    fn bound_by_name(&self, rule: &Rule) -> Option<&RuleAnswers> {
        self.bound.iter().find(|a| a.is_for(rule))
    }
}

/// The gRPC code for a missing key answered with `status` over HTTP: the
/// inverse of `google.rpc.Code`'s HTTP mapping.
pub(crate) fn code_for_http_status(status: StatusCode) -> Code {
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

/// Milliseconds, rounded up, at least 1 for a positive wait.
fn pushback_ms(wait: Duration) -> u64 {
    let ms = wait.as_micros().div_ceil(1_000);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

/// `grpc-status`.
static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message`.
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// `grpc-status-details-bin`.
static GRPC_STATUS_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");

/// The most headers an answer carries: content type, the three of the
/// status, `retry-after`, `grpc-retry-pushback-ms` and `x-ratelimit-*`.
const ANSWER_HEADERS: usize = 9;

/// A Trailers-Only answer, so far only its content type: the status and
/// metadata go in the headers, there is no body. The header map has room
/// for every header of an answer, so it is allocated once.
fn trailers_only(protocol: GrpcProtocol, req: &RequestHead<'_>) -> Response<Bytes> {
    let mut res = Response::new(Bytes::new());
    let headers = res.headers_mut();
    *headers = http::HeaderMap::with_capacity(ANSWER_HEADERS);
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
    res
}

/// Writes `status` (code, message, details) into `headers`.
fn put_status(headers: &mut http::HeaderMap, status: &Status) {
    if status.add_header(headers).is_err() {
        // Unreachable in practice (the message is percent-encoded and the
        // details base64), but a status without a message beats a panic.
        headers.insert(GRPC_STATUS.clone(), HeaderValue::from(status.code() as i32));
    }
}

/// `grpc-status: 8` with a made message and details.
fn put_resource_exhausted(
    headers: &mut http::HeaderMap,
    message: HeaderValue,
    details: HeaderValue,
) {
    headers.insert(GRPC_STATUS.clone(), HeaderValue::from_static("8"));
    headers.insert(GRPC_MESSAGE.clone(), message);
    headers.insert(GRPC_STATUS_DETAILS.clone(), details);
}

impl GrpcResponder {
    /// A rule denied the call.
    fn limited(
        &self,
        protocol: GrpcProtocol,
        req: &RequestHead<'_>,
        d: &Decision,
        rule: &Rule,
    ) -> Response<Bytes> {
        let mut res = trailers_only(protocol, req);
        let headers = res.headers_mut();
        let retry_after = d.retry_after();
        let secs = retry_after_secs(retry_after);
        let pushback = pushback_ms(retry_after);
        let reset = reset_epoch_secs(d);
        let (limit, quota) = (d.limit(rule), d.quota(rule));
        headers.insert(RETRY_AFTER, number(secs));
        // Two ways, for what the first saves: the second way for every
        // denial costs 17,349 instructions more per denial in the layer
        // (28,456 against 11,107, `cargo bench -p throttle-fleet-suite
        // --bench grpc_denial_instructions`), about 23% of a whole denied
        // call (75,106, `PHASES=callgrind benches/grpc/run.sh`).
        let made = self
            .bound(d.rule().unwrap_or_default(), rule)
            .and_then(|answers| answers.limited(quota, retry_after, secs, pushback, reset));
        match made {
            Some(v) => {
                headers.insert(GRPC_RETRY_PUSHBACK_MS.clone(), v.pushback_ms);
                headers.insert(X_RATELIMIT_LIMIT.clone(), number(limit));
                headers.insert(X_RATELIMIT_REMAINING.clone(), number(d.remaining()));
                headers.insert(X_RATELIMIT_RESET.clone(), v.reset);
                put_resource_exhausted(headers, v.message, v.details);
            }
            None => {
                // Not bound to this rule (a responder used outside a layer),
                // or a quota the rule was not bound with: built whole.
                headers.insert(GRPC_RETRY_PUSHBACK_MS.clone(), HeaderValue::from(pushback));
                headers.insert(X_RATELIMIT_LIMIT.clone(), number(limit));
                headers.insert(X_RATELIMIT_REMAINING.clone(), number(d.remaining()));
                headers.insert(X_RATELIMIT_RESET.clone(), HeaderValue::from(reset));
                let subject = match self.bound_by_name(rule) {
                    Some(answers) => answers.subject().to_owned(),
                    None => self.subject(rule, None),
                };
                let details =
                    limited_details(retry_after, subject, describe_quota(rule, quota), rule);
                let message = limited_message(rule, secs);
                put_status(
                    headers,
                    &Status::with_error_details(Code::ResourceExhausted, message, details),
                );
            }
        }
        res
    }
}

impl Responder for GrpcResponder {
    fn reject(&self, req: &RequestHead<'_>, rejection: Rejection<'_>) -> Response<Bytes> {
        let Some(protocol) = GrpcProtocol::of(req.headers) else {
            return self.http.reject(req, rejection);
        };
        if let Rejection::Denied { decision, rule } = rejection {
            return self.limited(protocol, req, decision, rule);
        }
        let mut res = trailers_only(protocol, req);
        let headers = res.headers_mut();
        match rejection {
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
                put_status(
                    headers,
                    &Status::with_error_details(code_for_http_status(status), message, details),
                );
            }
            Rejection::Refused { rule, decision } => {
                headers.insert(RETRY_AFTER, HeaderValue::from_static("1"));
                headers.insert(
                    GRPC_RETRY_PUSHBACK_MS.clone(),
                    HeaderValue::from_static("1000"),
                );
                let made = self
                    .bound(decision.rule().unwrap_or_default(), rule)
                    .and_then(RuleAnswers::unavailable);
                match made {
                    Some((message, details)) => {
                        headers.insert(GRPC_STATUS.clone(), HeaderValue::from_static("14"));
                        headers.insert(GRPC_MESSAGE.clone(), message);
                        headers.insert(GRPC_STATUS_DETAILS.clone(), details);
                    }
                    None => put_status(headers, &unavailable_status(rule)),
                }
            }
            Rejection::Shed { rule, decision } => {
                let wait = decision.retry_after().max(Duration::from_secs(1));
                let secs = retry_after_secs(wait);
                headers.insert(RETRY_AFTER, number(secs));
                headers.insert(
                    GRPC_RETRY_PUSHBACK_MS.clone(),
                    HeaderValue::from(pushback_ms(wait)),
                );
                put_status(headers, &shed_status(rule, wait, secs));
            }
            // A future rejection we do not know yet: still a gRPC status.
            _ => put_status(
                headers,
                &Status::with_error_details(
                    Code::Unavailable,
                    "The rate limiter refused the call.",
                    ErrorDetails::with_retry_info(Some(Duration::from_secs(1))),
                ),
            ),
        }
        res
    }

    fn allowed(&self, req: &RequestHead<'_>, decision: &Decision, rule: &Rule) -> SuccessHeaders {
        // gRPC calls and plain requests alike: an allowed call's initial
        // metadata is the headers the HTTP responder's settings choose.
        self.http.allowed(req, decision, rule)
    }

    fn bind(&mut self, rules: &[(&Rule, &str)]) {
        self.bound = rules
            .iter()
            .map(|&(rule, kind)| RuleAnswers::new(rule, &self.subject(rule, Some(kind))))
            .collect();
    }
}

#[cfg(test)]
mod tests;
