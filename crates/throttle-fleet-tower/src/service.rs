use std::fmt;
use std::marker::PhantomData;
use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use arc_swap::{ArcSwap, Guard};
use http::{Request, Response};
use throttle_fleet_core::backend::Pending;
use throttle_fleet_core::{Answer, rule_set::Checked};
use tower_service::Service;

use crate::RequestHead;
use crate::body::{ResponseBodies, Wrap};
use crate::engine::Engine;
use crate::future::ResponseFuture;
use crate::responder::Responder;

/// The service [`ThrottleLayer`](crate::ThrottleLayer) wraps around another:
/// decides in `call`, answers rejections itself, passes everything else on.
///
/// `poll_ready` only forwards to the inner service (limits are never
/// enforced through back-pressure, which would be per clone and unkeyed),
/// and the error type stays the inner service's.
pub struct Throttle<S, R, W = Wrap> {
    inner: S,
    /// The layer's current rules (replaced whole by a reload).
    shared: Arc<ArcSwap<Engine<R>>>,
    /// How response bodies are made ([`ResponseBodies`]).
    bodies: PhantomData<fn() -> W>,
}

impl<S, R, W> Throttle<S, R, W> {
    pub(crate) fn new(inner: S, shared: Arc<ArcSwap<Engine<R>>>) -> Self {
        Self {
            inner,
            shared,
            bodies: PhantomData,
        }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: Clone, R, W> Clone for Throttle<S, R, W> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            bodies: PhantomData,
        }
    }
}

impl<S: fmt::Debug, R, W> fmt::Debug for Throttle<S, R, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttle")
            .field("inner", &self.inner)
            .field("rules", &self.shared.load().rules)
            .finish()
    }
}

impl<S: Clone, R, W> Throttle<S, R, W> {
    /// The future of a check that needs a round trip.
    fn checking<F, ReqBody>(
        &mut self,
        check: Pending<Checked>,
        request: Request<ReqBody>,
        shared: Arc<Engine<R>>,
    ) -> ResponseFuture<F, S, ReqBody, R, W> {
        // The inner call happens after an await: take the service that was
        // polled ready and leave a fresh clone in its place.
        let clone = self.inner.clone();
        let ready = mem::replace(&mut self.inner, clone);
        ResponseFuture::checking(check, ready, request, shared)
    }
}

impl<S, R, W, ReqBody, ResBody> Service<Request<ReqBody>> for Throttle<S, R, W>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    R: Responder,
    W: ResponseBodies<ResBody>,
{
    type Response = Response<W::Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S, ReqBody, R, W>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    // Kept out of line: inlined into axum's layers it costs a request
    // more copies of the request.
    #[inline(never)]
    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The rules as they are now; a reload during this request's check
        // does not change which rules it was checked and charged against.
        let shared = self.shared.load();
        let head = RequestHead::of(&req);
        match shared.prepare(&head) {
            Ok(Answer::Ready(checked)) => {
                let (decision, held) = checked.into_parts();
                if let Some(headers) = shared.call_now(&head, &decision) {
                    return ResponseFuture::called(self.inner.call(req), headers, held);
                }
                let next = shared.next(&head, &decision);
                ResponseFuture::decided(&mut self.inner, req, next, held)
            }
            Ok(Answer::Pending(check)) => self.checking(check, req, Guard::into_inner(shared)),
            Err(rejection) => ResponseFuture::rejected(shared.responder.reject(&head, rejection)),
        }
    }
}
