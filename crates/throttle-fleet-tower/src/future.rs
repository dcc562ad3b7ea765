use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use throttle_fleet_core::backend::Pending;
use throttle_fleet_core::rule_set::Checked;
use throttle_fleet_core::rule_set::Held;
use tokio::time::Sleep;
use tower_service::Service;

use crate::RequestHead;
use crate::body::{ResponseBodies, Wrap};
use crate::engine::{Engine, Next};
use crate::headers::SuccessHeaders;
use crate::responder::Responder;

pin_project! {
    /// The response future of [`Throttle`](crate::Throttle): the inner
    /// service's future, a rejection, or (with remote backends and leaky
    /// buckets) a check or a delay before the inner call.
    ///
    /// The common case (decided in `call`, inner future running) keeps only
    /// the inner future and three numbers for the headers; the rare states
    /// are boxed so they do not make every request's future larger.
    pub struct ResponseFuture<F, S, ReqBody, R, W = Wrap> {
        #[pin]
        state: State<F, S, ReqBody, R>,
        headers: SuccessHeaders,
        // What the request holds: response-aware charges settled when the
        // inner service answers, and concurrency slots handed to the body
        // then (given back if this future is dropped first).
        held: Option<Box<Held>>,
        bodies: PhantomData<fn() -> W>,
    }
}

/// Waiting for a remote backend, with what the inner call needs.
struct Checking<S, ReqBody, R> {
    check: Pending<Checked>,
    service: S,
    request: Request<ReqBody>,
    shared: Arc<Engine<R>>,
}

/// Waiting for a leaky bucket's turn.
struct Delaying<S, ReqBody> {
    sleep: Pin<Box<Sleep>>,
    service: S,
    request: Request<ReqBody>,
}

pin_project! {
    #[project = StateProj]
    #[project_replace = StateOwned]
    enum State<F, S, ReqBody, R> {
        Call {
            #[pin]
            future: F,
        },
        Check {
            pending: Box<Checking<S, ReqBody, R>>,
        },
        Delay {
            pending: Box<Delaying<S, ReqBody>>,
        },
        Reject {
            response: Option<Response<Bytes>>,
        },
        Done,
    }
}

impl<F, S, ReqBody, R, W> ResponseFuture<F, S, ReqBody, R, W> {
    pub(crate) fn rejected(response: Response<Bytes>) -> Self {
        Self {
            state: State::Reject {
                response: Some(response),
            },
            headers: SuccessHeaders::none(),
            held: None,
            bodies: PhantomData,
        }
    }

    /// The inner call made in `call`, with the headers for its response
    /// and what the request holds.
    #[inline]
    pub(crate) fn called(future: F, headers: SuccessHeaders, held: Option<Box<Held>>) -> Self {
        Self {
            state: State::Call { future },
            headers,
            held,
            bodies: PhantomData,
        }
    }

    pub(crate) fn checking(
        check: Pending<Checked>,
        service: S,
        request: Request<ReqBody>,
        shared: Arc<Engine<R>>,
    ) -> Self {
        Self {
            state: State::Check {
                pending: Box::new(Checking {
                    check,
                    service,
                    request,
                    shared,
                }),
            },
            headers: SuccessHeaders::none(),
            held: None,
            bodies: PhantomData,
        }
    }
}

fn delaying<F, S, ReqBody, R>(
    delay: Duration,
    service: S,
    request: Request<ReqBody>,
) -> State<F, S, ReqBody, R> {
    State::Delay {
        pending: Box::new(Delaying {
            sleep: Box::pin(tokio::time::sleep(delay)),
            service,
            request,
        }),
    }
}

impl<F, S, ReqBody, R, W> ResponseFuture<F, S, ReqBody, R, W>
where
    S: Service<Request<ReqBody>, Future = F> + Clone,
    R: Responder,
{
    /// The future for a decision made in `call` (`next`): the inner
    /// call, a rejection, or a delay (leaky bucket) with the ready service
    /// moved in; `held` goes with the response if the service is called.
    #[inline]
    pub(crate) fn decided(
        service: &mut S,
        request: Request<ReqBody>,
        next: Next,
        held: Option<Box<Held>>,
    ) -> Self {
        match next {
            Next::Call(headers) => Self {
                state: State::Call {
                    future: service.call(request),
                },
                headers,
                held,
                bodies: PhantomData,
            },
            Next::Delay(headers, delay) => {
                let clone = service.clone();
                let ready = std::mem::replace(service, clone);
                Self {
                    state: delaying(delay, ready, request),
                    headers,
                    held,
                    bodies: PhantomData,
                }
            }
            Next::Reject(response) => Self::rejected(response),
        }
    }
}

/// Settles what the request holds by the response's status, and hands its
/// slots to the body. Out of line: most policies hold nothing.
#[cold]
#[inline(never)]
fn settle<W: ResponseBodies<B>, B>(
    mut held: Box<Held>,
    response: Response<B>,
) -> Response<W::Body> {
    held.settle(response.status().as_u16());
    if held.slots() > 0 {
        response.map(|body| W::holding(body, held))
    } else {
        response.map(W::inner)
    }
}

impl<F, S, ReqBody, ResBody, E, R, W> Future for ResponseFuture<F, S, ReqBody, R, W>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    S: Service<Request<ReqBody>, Future = F, Response = Response<ResBody>, Error = E>,
    R: Responder,
    W: ResponseBodies<ResBody>,
{
    type Output = Result<Response<W::Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Call { future } => {
                    let result = ready!(future.poll(cx));
                    // Done first: an error returns at once, and a poll
                    // after it must not poll the finished future again.
                    this.state.set(State::Done);
                    let mut response = match this.held.take() {
                        None => result?.map(W::inner),
                        Some(held) => settle::<W, _>(held, result?),
                    };
                    std::mem::take(this.headers).apply(response.headers_mut());
                    return Poll::Ready(Ok(response));
                }
                StateProj::Check { pending } => {
                    let (decision, held) = ready!(pending.check.as_mut().poll(cx)).into_parts();
                    let StateOwned::Check { pending } =
                        this.state.as_mut().project_replace(State::Done)
                    else {
                        unreachable!("the state was Check a moment ago")
                    };
                    let Checking {
                        mut service,
                        request,
                        shared,
                        ..
                    } = *pending;
                    match shared.next(&RequestHead::of(&request), &decision) {
                        Next::Call(headers) => {
                            *this.headers = headers;
                            *this.held = held;
                            let future = service.call(request);
                            this.state.set(State::Call { future });
                        }
                        Next::Delay(headers, delay) => {
                            *this.headers = headers;
                            *this.held = held;
                            this.state.set(delaying(delay, service, request));
                        }
                        Next::Reject(response) => {
                            this.state.set(State::Reject {
                                response: Some(response),
                            });
                        }
                    }
                }
                StateProj::Delay { pending } => {
                    ready!(pending.sleep.as_mut().poll(cx));
                    let StateOwned::Delay { pending } =
                        this.state.as_mut().project_replace(State::Done)
                    else {
                        unreachable!("the state was Delay a moment ago")
                    };
                    let Delaying {
                        mut service,
                        request,
                        ..
                    } = *pending;
                    let future = service.call(request);
                    this.state.set(State::Call { future });
                }
                StateProj::Reject { response } => {
                    let response = response.take().map(|r| r.map(W::full));
                    this.state.set(State::Done);
                    return match response {
                        Some(response) => Poll::Ready(Ok(response)),
                        None => Poll::Pending,
                    };
                }
                StateProj::Done => {
                    // Polled after completion: there is nothing left to give.
                    return Poll::Pending;
                }
            }
        }
    }
}
