//! A request's body under the body timeout ([`ServeLimits::body_timeout`]
//! and [`ServeLimits::body_min_bytes_per_sec`]), and the `408 Request
//! Timeout` that replaces the handler's answer when it timed out.
//!
//! The handler sees the timeout as its body's error, and answers what its
//! extractor makes of one (axum's `Json` a 400); the connection's service
//! knows from the body that it was a timeout and answers 408 instead, with
//! `Connection: close` (the rest of the body is never read).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, HttpBody};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use throttle_fleet_tower::body_timeout::{BodyTimedOut, BodyTimeout, TimedBody};

use super::ServeLimits;
use super::activity::{BodyWatch, Running};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The bound `limits` put on request bodies.
pub(super) fn bound(limits: &ServeLimits) -> BodyTimeout {
    BodyTimeout {
        timeout: limits.body_timeout,
        min_bytes_per_sec: limits.body_min_bytes_per_sec,
    }
}

/// The request body `running`'s handler reads: `body` under `bound`.
pub(super) fn request_body(body: Incoming, bound: BodyTimeout, running: &Running) -> Body {
    // One allocation, as before: axum boxes whatever body it is given, and
    // takes a `Body` as it is.
    Body::new(RequestBody {
        body: TimedBody::new(body, bound),
        watch: running.body_watch(),
    })
}

/// The answer to a request whose body timed out, in place of its
/// handler's (whose drop gives back what the request held, a concurrency
/// rule's slots): `408 Request Timeout`, and the connection closed.
#[cold]
pub(super) fn request_timeout() -> Response {
    tracing::debug!("request body timed out: answered 408 and closing the connection");
    let mut timeout = Response::new(Body::from("request body timed out\n"));
    *timeout.status_mut() = StatusCode::REQUEST_TIMEOUT;
    let headers = timeout.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    timeout
}

/// A request body that tells its request when it timed out.
struct RequestBody {
    body: TimedBody<Incoming>,
    watch: BodyWatch,
}

impl HttpBody for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(Err(e))) = &polled
            && e.is::<BodyTimedOut>()
        {
            self.watch.timed_out();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
