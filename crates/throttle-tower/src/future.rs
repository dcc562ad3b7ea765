use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::request::Parts;
use http::{Request, Response};
use pin_project_lite::pin_project;
use throttle_core::Decision;
use tokio::time::Sleep;
use tower_service::Service;

use crate::body::ThrottleBody;
use crate::layer::Shared;
use crate::responder::{HeaderBlock, Rejection, Responder};

type Pending = Pin<Box<dyn Future<Output = Decision> + Send>>;

pin_project! {
    /// The response future of [`Throttle`](crate::Throttle): the inner
    /// service's future, a rejection, or (with remote backends and leaky
    /// buckets) a check or a delay before the inner call.
    pub struct ResponseFuture<F, S, ReqBody, R> {
        #[pin]
        state: State<F, S, ReqBody, R>,
        headers: HeaderBlock,
    }
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
            check: Pending,
            service: S,
            request: Request<ReqBody>,
            shared: Arc<Shared<R>>,
        },
        Delay {
            #[pin]
            sleep: Sleep,
            service: S,
            request: Request<ReqBody>,
        },
        Reject {
            response: Option<Response<Bytes>>,
        },
        Done,
    }
}

/// What a decision leads to.
enum Next {
    Call(HeaderBlock),
    Delay(HeaderBlock, std::time::Duration),
    Reject(Response<Bytes>),
}

fn next<R: Responder>(shared: &Shared<R>, parts: &Parts, decision: Decision) -> Next {
    match decision {
        Decision::Unlimited => Next::Call(HeaderBlock::default()),
        Decision::Allowed(allowed) => {
            let mut headers = HeaderBlock::default();
            shared.responder.allowed(parts, &allowed, &mut headers);
            if allowed.delay.is_zero() {
                Next::Call(headers)
            } else {
                Next::Delay(headers, allowed.delay)
            }
        }
        Decision::Denied(denied) => {
            Next::Reject(shared.responder.reject(parts, Rejection::Limited(&denied)))
        }
        Decision::Unavailable(refused) => {
            tracing::warn!(rule = refused.rule.name(), error = %refused.error, "fail-closed rule could not be checked");
            Next::Reject(
                shared
                    .responder
                    .reject(parts, Rejection::Unavailable(&refused)),
            )
        }
    }
}

impl<F, S, ReqBody, R> ResponseFuture<F, S, ReqBody, R> {
    pub(crate) fn rejected(response: Response<Bytes>) -> Self {
        Self {
            state: State::Reject {
                response: Some(response),
            },
            headers: HeaderBlock::default(),
        }
    }

    pub(crate) fn checking(
        check: Pending,
        service: S,
        request: Request<ReqBody>,
        shared: Arc<Shared<R>>,
    ) -> Self {
        Self {
            state: State::Check {
                check,
                service,
                request,
                shared,
            },
            headers: HeaderBlock::default(),
        }
    }
}

impl<F, S, ReqBody, R> ResponseFuture<F, S, ReqBody, R>
where
    S: Service<Request<ReqBody>, Future = F> + Clone,
    R: Responder,
{
    /// The future for a decision made in `call`: the inner call, a
    /// rejection, or a delay (leaky bucket) with the ready service moved in.
    pub(crate) fn decided(
        shared: &Shared<R>,
        service: &mut S,
        parts: Parts,
        body: ReqBody,
        decision: Decision,
    ) -> Self {
        match next(shared, &parts, decision) {
            Next::Call(headers) => Self {
                state: State::Call {
                    future: service.call(Request::from_parts(parts, body)),
                },
                headers,
            },
            Next::Delay(headers, delay) => {
                let clone = service.clone();
                Self {
                    state: State::Delay {
                        sleep: tokio::time::sleep(delay),
                        service: std::mem::replace(service, clone),
                        request: Request::from_parts(parts, body),
                    },
                    headers,
                }
            }
            Next::Reject(response) => Self::rejected(response),
        }
    }
}

impl<F, S, ReqBody, ResBody, E, R> Future for ResponseFuture<F, S, ReqBody, R>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    S: Service<Request<ReqBody>, Future = F, Response = Response<ResBody>, Error = E>,
    R: Responder,
{
    type Output = Result<Response<ThrottleBody<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Call { future } => {
                    let mut response = ready!(future.poll(cx))?.map(ThrottleBody::inner);
                    std::mem::take(this.headers).apply(response.headers_mut());
                    this.state.set(State::Done);
                    return Poll::Ready(Ok(response));
                }
                StateProj::Check { check, .. } => {
                    let decision = ready!(check.as_mut().poll(cx));
                    let StateOwned::Check {
                        mut service,
                        request,
                        shared,
                        ..
                    } = this.state.as_mut().project_replace(State::Done)
                    else {
                        unreachable!("the state was Check a moment ago")
                    };
                    let (parts, body) = request.into_parts();
                    match next(&shared, &parts, decision) {
                        Next::Call(headers) => {
                            *this.headers = headers;
                            let future = service.call(Request::from_parts(parts, body));
                            this.state.set(State::Call { future });
                        }
                        Next::Delay(headers, delay) => {
                            *this.headers = headers;
                            this.state.set(State::Delay {
                                sleep: tokio::time::sleep(delay),
                                service,
                                request: Request::from_parts(parts, body),
                            });
                        }
                        Next::Reject(response) => {
                            this.state.set(State::Reject {
                                response: Some(response),
                            });
                        }
                    }
                }
                StateProj::Delay { sleep, .. } => {
                    ready!(sleep.poll(cx));
                    let StateOwned::Delay {
                        mut service,
                        request,
                        ..
                    } = this.state.as_mut().project_replace(State::Done)
                    else {
                        unreachable!("the state was Delay a moment ago")
                    };
                    let future = service.call(request);
                    this.state.set(State::Call { future });
                }
                StateProj::Reject { response } => {
                    let response = response.take().map(|r| r.map(ThrottleBody::full));
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
