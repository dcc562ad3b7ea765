//! A concurrency rule's slot through the layer's response body, without a
//! network: given back at the body's last frame, while the body itself is
//! still alive (a server that keeps the body after writing it does not hold
//! the slot), on an error frame, and when the body is dropped unread.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use throttle_fleet_core::{Rule, memory::MemoryBackend};
use throttle_fleet_tower::key::Global;
use throttle_fleet_tower::{Policy, ThrottleLayer};
use tower::{Layer, Service, ServiceExt};

/// A body of the frames the test lists: data, then perhaps an error.
struct Frames(VecDeque<Result<Frame<Bytes>, std::io::Error>>);

impl Body for Frames {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(self.0.pop_front())
    }
}

fn one_slot() -> ThrottleLayer {
    ThrottleLayer::new(
        Policy::new().rule(Rule::concurrency("inflight", 1), Global),
        MemoryBackend::default(),
    )
    .unwrap()
}

async fn status<S>(svc: &mut S) -> (StatusCode, S::Response)
where
    S: Service<Request<()>, Error = Infallible>,
    S::Response: HasStatus,
{
    let res = svc
        .ready()
        .await
        .unwrap()
        .call(Request::new(()))
        .await
        .unwrap();
    (res.status_code(), res)
}

trait HasStatus {
    fn status_code(&self) -> StatusCode;
}

impl<B> HasStatus for Response<B> {
    fn status_code(&self) -> StatusCode {
        self.status()
    }
}

#[tokio::test]
async fn the_last_frame_gives_the_slot_back_while_the_body_is_still_held() {
    let layer = one_slot();
    let mut svc = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
    }));
    let (first, res) = status(&mut svc).await;
    assert_eq!(first, StatusCode::OK);
    let (busy, _) = status(&mut svc).await;
    assert_eq!(
        busy,
        StatusCode::TOO_MANY_REQUESTS,
        "the slot is held until the body ends"
    );
    let mut body = res.into_body();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "done");
    // The body is read to its end but not dropped: the slot is back.
    let (again, _) = status(&mut svc).await;
    assert_eq!(again, StatusCode::OK);
    drop(body);
}

#[tokio::test]
async fn an_error_frame_ends_the_body_and_gives_the_slot_back() {
    let layer = one_slot();
    let mut svc = layer.layer(tower::service_fn(|_: Request<()>| async {
        let frames = Frames(VecDeque::from([
            Ok(Frame::data(Bytes::from_static(b"part"))),
            Err(std::io::Error::other("the upstream went away")),
        ]));
        Ok::<_, Infallible>(Response::new(frames))
    }));
    let (_, res) = status(&mut svc).await;
    let mut body = res.into_body();
    assert!(body.frame().await.unwrap().is_ok());
    let (busy, _) = status(&mut svc).await;
    assert_eq!(busy, StatusCode::TOO_MANY_REQUESTS, "still streaming");
    assert!(body.frame().await.unwrap().is_err());
    let (again, _) = status(&mut svc).await;
    assert_eq!(again, StatusCode::OK);
    drop(body);
}

#[tokio::test]
async fn a_body_dropped_unread_gives_the_slot_back() {
    let layer = one_slot();
    let mut svc = layer.layer(tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
    }));
    let (_, res) = status(&mut svc).await;
    assert_eq!(status(&mut svc).await.0, StatusCode::TOO_MANY_REQUESTS);
    drop(res);
    assert_eq!(status(&mut svc).await.0, StatusCode::OK);
}
