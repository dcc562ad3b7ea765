//! What a decision leads to: the inner call (with the success headers), a
//! delay before it, or a rejection.

use std::time::Duration;

use bytes::Bytes;
use http::Response;
use throttle_fleet_core::decision::Kind;
use throttle_fleet_core::{Rule, decision::Decision};

use super::Engine;
use crate::RequestHead;
use crate::headers::SuccessHeaders;
use crate::responder::{Rejection, Responder};

/// What a decision leads to.
pub(crate) enum Next {
    Call(SuccessHeaders),
    Delay(SuccessHeaders, Duration),
    Reject(Response<Bytes>),
}

impl<R: Responder> Engine<R> {
    /// The success headers when `decision` calls the inner service now
    /// (allowed, no delay); `None` for anything else, which [`next`](Self::next)
    /// answers. The common case without building a [`Next`], whose
    /// rejection makes it large.
    #[inline]
    pub(crate) fn call_now(
        &self,
        req: &RequestHead<'_>,
        decision: &Decision,
    ) -> Option<SuccessHeaders> {
        if !matches!(decision.kind(), Kind::Allowed) || !decision.delay().is_zero() {
            return None;
        }
        Some(self.success_headers(req, decision))
    }

    /// The headers for an allowed decision's response.
    #[inline]
    fn success_headers(&self, req: &RequestHead<'_>, decision: &Decision) -> SuccessHeaders {
        let headers = if decision.is_shadow() {
            // Only shadow rules applied: clients are not told of them.
            SuccessHeaders::none()
        } else {
            self.allowed(req, decision)
        };
        if decision.shadow_denied().is_empty() {
            headers
        } else {
            shadow_report(self, decision, headers)
        }
    }

    /// What `decision` on the request `req` leads to.
    #[inline]
    pub(crate) fn next(&self, req: &RequestHead<'_>, decision: &Decision) -> Next {
        match decision.kind() {
            Kind::Allowed => {
                let headers = self.success_headers(req, decision);
                let delay = decision.delay();
                if delay.is_zero() {
                    Next::Call(headers)
                } else {
                    Next::Delay(headers, delay)
                }
            }
            Kind::Denied => {
                let rule = self.rule_of(decision);
                let rejection = if decision.is_shed() {
                    Rejection::Shed { decision, rule }
                } else {
                    Rejection::Denied { decision, rule }
                };
                Next::Reject(self.responder.reject(req, rejection))
            }
            Kind::Refused => Next::Reject(self.refused(req, decision)),
            // No rule applied, or a kind this version does not know.
            _ => Next::Call(SuccessHeaders::none()),
        }
    }

    #[inline]
    fn rule_of(&self, decision: &Decision) -> &Rule {
        self.rules.rule(decision.rule().unwrap_or_default())
    }

    #[inline]
    fn allowed(&self, req: &RequestHead<'_>, decision: &Decision) -> SuccessHeaders {
        self.responder
            .allowed(req, decision, self.rule_of(decision))
    }

    #[cold]
    fn refused(&self, req: &RequestHead<'_>, decision: &Decision) -> Response<Bytes> {
        let rule = self.rule_of(decision);
        if let Some(error) = decision.error() {
            tracing::warn!(rule = rule.name(), %error, "fail-closed rule could not be checked");
        }
        self.responder
            .reject(req, Rejection::Refused { decision, rule })
    }
}

/// Reports shadow denials: a tracing event (rule names, never the key) and,
/// when the policy asks for it, the `X-RateLimit-Shadow` header.
#[cold]
fn shadow_report<R>(
    shared: &Engine<R>,
    decision: &Decision,
    headers: SuccessHeaders,
) -> SuccessHeaders {
    let names = || {
        decision
            .shadow_denied()
            .iter()
            .map(|i| shared.rules.rule(i).name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    tracing::debug!(target: "throttle::shadow", rules = %names(), "shadow rule would have denied the request");
    if !shared.shadow_header {
        return headers;
    }
    match http::HeaderValue::try_from(names()) {
        Ok(value) => headers.with(crate::headers::X_RATELIMIT_SHADOW.clone(), value),
        Err(_) => headers,
    }
}
