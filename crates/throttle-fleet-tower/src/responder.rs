//! Responders: a decision -> the protocol's answer.

use bytes::Bytes;
use http::{Response, StatusCode};
use throttle_fleet_core::{Rule, decision::Decision};

use crate::RequestHead;
use crate::headers::SuccessHeaders;

/// Why a request is answered by the limiter instead of the service.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Rejection<'a> {
    /// A rule denied the request.
    Denied {
        /// What the check decided (its figures are the denying rule's).
        decision: &'a Decision,
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
    /// A rule refused the request for capacity, not for its client: a
    /// concurrency rule's reserve was kept for higher classes, or its
    /// adaptive limit was below its own
    /// ([`Decision::is_shed`]).
    Shed {
        /// What the check decided (its figures are the shedding rule's).
        decision: &'a Decision,
        /// The rule that shed it.
        rule: &'a Rule,
    },
    /// A fail-closed rule's backend could not be reached.
    Refused {
        /// What the check decided ([`Decision::error`] says what went
        /// wrong).
        decision: &'a Decision,
        /// The rule that could not be checked.
        rule: &'a Rule,
    },
}

/// Turns decisions into responses: a whole response for rejections, and
/// headers for allowed requests.
///
/// Closures `Fn(&RequestHead<'_>, Rejection<'_>) -> Response<Bytes>` are responders
/// whose allowed responses carry the standard `X-RateLimit-*` headers.
pub trait Responder: Send + Sync + 'static {
    /// The response to a rejected request.
    fn reject(&self, req: &RequestHead<'_>, rejection: Rejection<'_>) -> Response<Bytes>;

    /// Headers for an allowed request's response (default: `X-RateLimit-*`
    /// of the most restrictive rule, `rule`, the one `decision` names).
    fn allowed(&self, req: &RequestHead<'_>, decision: &Decision, rule: &Rule) -> SuccessHeaders {
        let _ = req;
        SuccessHeaders::for_allowed(decision, rule)
    }

    /// Called when the layer is built, and again on every reload, before
    /// the first request: every rule in policy order (the position is the
    /// rule's index, as in [`Decision::rule`]) with its extractor's
    /// [`kind`](crate::KeyExtractor::kind). The place to make once what
    /// each rule's answers share. The default does nothing.
    fn bind(&mut self, rules: &[(&Rule, &str)]) {
        let _ = rules;
    }
}

impl<F> Responder for F
where
    F: Fn(&RequestHead<'_>, Rejection<'_>) -> Response<Bytes> + Send + Sync + 'static,
{
    fn reject(&self, req: &RequestHead<'_>, rejection: Rejection<'_>) -> Response<Bytes> {
        self(req, rejection)
    }
}
