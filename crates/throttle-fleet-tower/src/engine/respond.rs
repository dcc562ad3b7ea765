//! What a decision leads to: the inner call (with the success headers), a
//! delay before it, or a rejection.

use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http::request::Parts;
use throttle_fleet_core::Decision;

use super::Engine;
use crate::headers::SuccessHeaders;
use crate::responder::{Rejection, Responder};

/// What a decision leads to.
pub(crate) enum Next {
    Call(SuccessHeaders),
    Delay(SuccessHeaders, Duration),
    Reject(Response<Bytes>),
}

impl<R: Responder> Engine<R> {
    /// What `decision` on the request `parts` leads to.
    pub(crate) fn next(&self, parts: &Parts, decision: Decision) -> Next {
        let shared = self;
        match decision {
            Decision::Unlimited => Next::Call(SuccessHeaders::none()),
            Decision::Allowed(allowed) => {
                let mut headers = if allowed.shadow {
                    // Only shadow rules applied: clients are not told of them.
                    SuccessHeaders::none()
                } else {
                    let rule = shared.rules.rule(allowed.rule);
                    shared.responder.allowed(parts, &allowed, rule)
                };
                if !allowed.shadow_denied.is_empty() {
                    headers = shadow_report(shared, &allowed, headers);
                }
                if allowed.delay.is_zero() {
                    Next::Call(headers)
                } else {
                    Next::Delay(headers, allowed.delay)
                }
            }
            Decision::Denied(denied) => {
                let rule = shared.rules.rule(denied.rule);
                Next::Reject(shared.responder.reject(
                    parts,
                    Rejection::Limited {
                        denied: &denied,
                        rule,
                    },
                ))
            }
            Decision::Refused(refused) => {
                let rule = shared.rules.rule(refused.rule);
                tracing::warn!(rule = rule.name(), error = %refused.error, "fail-closed rule could not be checked");
                Next::Reject(shared.responder.reject(
                    parts,
                    Rejection::Refused {
                        refused: &refused,
                        rule,
                    },
                ))
            }
        }
    }
}

/// Reports shadow denials: a tracing event (rule names, never the key) and,
/// when the policy asks for it, the `X-RateLimit-Shadow` header.
#[cold]
fn shadow_report<R>(
    shared: &Engine<R>,
    allowed: &throttle_fleet_core::Allowed,
    headers: SuccessHeaders,
) -> SuccessHeaders {
    let names = || {
        allowed
            .shadow_denied
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
