//! The response body of the throttle service: the inner service's body
//! (holding the request's concurrency slots until it ends), or the
//! limiter's own answer.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use throttle_fleet_core::rule_set::Held;

pin_project! {
    /// Either the inner service's body or a complete body written by the
    /// limiter (a rejection).
    pub struct ThrottleBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner {
            #[pin]
            body: B,
            // Given back when the body ends, or when it is dropped.
            slots: Option<Box<Held>>,
        },
        Full {
            data: Option<Bytes>,
        },
    }
}

impl<B> ThrottleBody<B> {
    /// Wraps the inner service's body.
    pub fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body, slots: None },
        }
    }

    /// Wraps the inner service's body, which holds `held` (the request's
    /// concurrency slots) until its last frame has been read or it is
    /// dropped.
    pub fn holding(body: B, held: Box<Held>) -> Self {
        Self {
            kind: Kind::Inner {
                body,
                slots: Some(held),
            },
        }
    }

    /// A complete body.
    pub fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

impl<B> Body for ThrottleBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { mut body, slots } => {
                let frame = body.as_mut().poll_frame(cx);
                if slots.is_some() {
                    release_at_end(&frame, &body, slots);
                }
                frame
            }
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body, .. } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

/// What polling a body for its next frame gives.
type Polled<B> = Poll<Option<Result<Frame<<B as Body>::Data>, <B as Body>::Error>>>;

/// Gives `slots` back if `frame`, just polled from `body`, ends it: no
/// frame left, an error, or the last frame of a body that knows it is
/// done. Out of line: a body without slots (no concurrency rule) never
/// comes here.
#[cold]
#[inline(never)]
fn release_at_end<B: Body>(frame: &Polled<B>, body: &Pin<&mut B>, slots: &mut Option<Box<Held>>) {
    let ended = match frame {
        Poll::Ready(None | Some(Err(_))) => true,
        Poll::Ready(Some(Ok(_))) => body.is_end_stream(),
        Poll::Pending => false,
    };
    if ended {
        *slots = None;
    }
}

/// How the layer makes its responses' bodies from the inner service's
/// body `B`: the body type of its responses, and how a body holds what
/// the request holds (its concurrency slots, until the body ends) and how
/// the limiter's own answer is written.
///
/// [`Wrap`], the default, answers [`ThrottleBody<B>`] for every response.
/// An integration whose framework boxes bodies anyway answers in the
/// framework's own body type and wraps only a body that holds something
/// (`throttle_fleet_axum::AxumBodies`): a request that holds nothing then
/// costs no wrapper and no allocation.
pub trait ResponseBodies<B>: Send + Sync + 'static {
    /// The body of the layer's responses.
    type Body;

    /// The inner service's body, holding nothing.
    fn inner(body: B) -> Self::Body;

    /// The inner service's body, holding `held` until it ends or is
    /// dropped.
    fn holding(body: B, held: Box<Held>) -> Self::Body;

    /// A complete body written by the limiter (a rejection).
    fn full(bytes: Bytes) -> Self::Body;
}

/// Every response's body is a [`ThrottleBody`] (see [`ResponseBodies`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Wrap;

impl<B> ResponseBodies<B> for Wrap {
    type Body = ThrottleBody<B>;

    #[inline]
    fn inner(body: B) -> Self::Body {
        ThrottleBody::inner(body)
    }

    fn holding(body: B, held: Box<Held>) -> Self::Body {
        ThrottleBody::holding(body, held)
    }

    fn full(bytes: Bytes) -> Self::Body {
        ThrottleBody::full(bytes)
    }
}
