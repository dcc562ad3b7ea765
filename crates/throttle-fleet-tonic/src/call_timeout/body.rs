//! A call's request body under the bound: timed until its first message is
//! whole (or to its end), and a timeout told to tonic as
//! `DEADLINE_EXCEEDED`.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use throttle_fleet_tower::body_timeout::{BodyTimedOut, BodyTimeout, TimedBody};

use super::first_message::FirstMessage;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project! {
    /// The request body [`BodyTimeoutService`](crate::BodyTimeoutService)
    /// hands its inner service: the call's body, timed as
    /// [`BodyTimeoutLayer`](crate::BodyTimeoutLayer) says.
    pub struct CallBody<B> {
        #[pin]
        body: TimedBody<B>,
        // Until the first message is whole, for a call timed that far.
        first: Option<FirstMessage>,
        // A gRPC call (its timeout is told as a `Status`), or plain HTTP.
        grpc: bool,
    }
}

impl<B> CallBody<B> {
    pub(super) fn new(body: B, bound: BodyTimeout, first_only: bool, grpc: bool) -> Self {
        Self {
            body: TimedBody::new(body, bound),
            first: first_only.then(FirstMessage::default),
            grpc,
        }
    }
}

impl<B> Body for CallBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let polled = this.body.as_mut().poll_frame(cx);
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(first) = this.first
                    && let Some(data) = frame.data_ref()
                    && first.feed(data)
                {
                    // The first message is whole: the rest of a stream is
                    // the application's to wait for.
                    *this.first = None;
                    this.body.disarm();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) if *this.grpc && e.is::<BodyTimedOut>() => {
                // tonic reads a `Status` in a body's error as the call's
                // answer; any other error would be `UNKNOWN`.
                Poll::Ready(Some(Err(Box::new(tonic::Status::deadline_exceeded(
                    e.to_string(),
                )))))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
