//! The request body the inner service is given: buffered, so that a
//! retry can send it again, or the caller's own stream when it cannot be.
//!
//! A body is buffered when all of it is ready at once and it is no
//! larger than the layer's replay limit: what a unary gRPC call, a
//! `Full` or an empty body is. Reading stops at the first frame that is
//! not ready (a stream the caller is still writing, which a wait for it
//! to end could deadlock) or at the limit; the frames read so far are
//! sent ahead of the rest, and that request is not repeated.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

/// A request body as the layer passes it on: a buffered copy that can be
/// sent again, or the caller's stream (behind what was read of it).
///
/// The inner service takes `http::Request<ReplayBody<B>>` where the
/// layer's callers send `http::Request<B>`: hyper-util's client is built
/// for it, and tonic's `Channel` takes it through
/// `tonic::body::Body::new` (the guide's chapter shows both).
#[derive(Debug)]
pub struct ReplayBody<B> {
    kind: Kind<B>,
}

#[derive(Debug)]
enum Kind<B> {
    Buffered {
        data: Option<Bytes>,
        trailers: Option<HeaderMap>,
    },
    Stream {
        read: VecDeque<Frame<Bytes>>,
        rest: Pin<Box<B>>,
    },
}

/// A buffered body, kept for retries.
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    data: Bytes,
    trailers: Option<HeaderMap>,
}

impl Kept {
    pub(crate) fn body<B>(&self) -> ReplayBody<B> {
        ReplayBody {
            kind: Kind::Buffered {
                data: (!self.data.is_empty()).then(|| self.data.clone()),
                trailers: self.trailers.clone(),
            },
        }
    }
}

/// Reads `body` as far as it is ready, up to `limit` bytes: its copy if
/// that was all of it, and the body to send first.
pub(crate) async fn buffer<B>(
    body: B,
    limit: usize,
) -> Result<(ReplayBody<B>, Option<Kept>), B::Error>
where
    B: Body<Data = Bytes>,
{
    let stream = |read, rest| ReplayBody {
        kind: Kind::Stream { read, rest },
    };
    if body.is_end_stream() {
        let copy = Kept {
            data: Bytes::new(),
            trailers: None,
        };
        return Ok((copy.body(), Some(copy)));
    }
    let mut rest = Box::pin(body);
    if limit == 0 || rest.size_hint().lower() > limit as u64 {
        return Ok((stream(VecDeque::new(), rest), None));
    }
    let mut read = VecDeque::new();
    let mut size = 0_usize;
    let mut trailers = None;
    loop {
        let next = poll_fn(|cx| match rest.as_mut().poll_frame(cx) {
            Poll::Pending => Poll::Ready(None),
            Poll::Ready(frame) => Poll::Ready(Some(frame)),
        })
        .await;
        match next {
            // Not ready, or not all of it within the limit: sent as it is.
            None => return Ok((stream(read, rest), None)),
            Some(Some(Err(e))) => return Err(e),
            Some(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    size = size.saturating_add(data.len());
                } else if let Some(t) = frame.trailers_ref() {
                    trailers = Some(t.clone());
                }
                read.push_back(frame);
                if size > limit {
                    return Ok((stream(read, rest), None));
                }
            }
            Some(None) => break,
        }
    }
    let mut data = BytesMut::with_capacity(size);
    let mut chunks = read.into_iter().filter_map(|f| f.into_data().ok());
    let data = match (chunks.next(), size) {
        (None, _) => Bytes::new(),
        (Some(only), n) if only.len() == n => only,
        (Some(first), _) => {
            data.extend_from_slice(&first);
            chunks.for_each(|c| data.extend_from_slice(&c));
            data.freeze()
        }
    };
    let copy = Kept { data, trailers };
    Ok((copy.body(), Some(copy)))
}

impl<B> Body for ReplayBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match &mut self.get_mut().kind {
            Kind::Buffered { data, trailers } => Poll::Ready(
                data.take()
                    .map(Frame::data)
                    .or_else(|| trailers.take().map(Frame::trailers))
                    .map(Ok),
            ),
            Kind::Stream { read, rest } => match read.pop_front() {
                Some(frame) => Poll::Ready(Some(Ok(frame))),
                None => rest.as_mut().poll_frame(cx),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Buffered { data, trailers } => data.is_none() && trailers.is_none(),
            Kind::Stream { read, rest } => read.is_empty() && rest.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Buffered { data, .. } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
            Kind::Stream { read, rest } => {
                let ahead: u64 = read
                    .iter()
                    .filter_map(|f| f.data_ref())
                    .map(|d| d.len() as u64)
                    .sum();
                let hint = rest.size_hint();
                let mut sum = SizeHint::new();
                sum.set_lower(hint.lower().saturating_add(ahead));
                if let Some(upper) = hint.upper() {
                    sum.set_upper(upper.saturating_add(ahead));
                }
                sum
            }
        }
    }
}

#[cfg(test)]
mod tests;
