use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, StreamBody};

use super::*;

async fn collect<B: Body<Data = Bytes>>(body: ReplayBody<B>) -> Bytes
where
    B::Error: std::fmt::Debug,
{
    body.collect().await.unwrap().to_bytes()
}

#[tokio::test]
async fn a_body_ready_at_once_within_the_limit_is_kept() {
    let (first, kept) = buffer(Full::new(Bytes::from_static(b"hello")), 10)
        .await
        .unwrap();
    let kept = kept.expect("kept");
    assert_eq!(collect(first).await, "hello");
    assert_eq!(collect(kept.body::<Full<Bytes>>()).await, "hello");
    assert_eq!(collect(kept.body::<Full<Bytes>>()).await, "hello");
    let (first, kept) = buffer(Empty::<Bytes>::new(), 0).await.unwrap();
    assert!(kept.is_some(), "an empty body is always kept");
    assert!(first.is_end_stream());
}

#[tokio::test]
async fn several_frames_are_joined_and_trailers_kept() {
    let mut trailers = HeaderMap::new();
    trailers.insert("x-sum", "9".parse().unwrap());
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
        Ok(Frame::data(Bytes::from_static(b"ab"))),
        Ok(Frame::data(Bytes::from_static(b"cd"))),
        Ok(Frame::trailers(trailers)),
    ];
    let body = StreamBody::new(futures_util::stream::iter(frames));
    let (first, kept) = buffer(body, 4).await.unwrap();
    let collected = first.collect().await.unwrap();
    assert_eq!(collected.trailers().unwrap()["x-sum"], "9");
    assert_eq!(collected.to_bytes(), "abcd");
    let again = kept.unwrap().body::<Full<Bytes>>().collect().await.unwrap();
    assert_eq!(again.trailers().unwrap()["x-sum"], "9");
}

#[tokio::test]
async fn over_the_limit_is_sent_whole_and_not_kept() {
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
        Ok(Frame::data(Bytes::from_static(b"abc"))),
        Ok(Frame::data(Bytes::from_static(b"def"))),
        Ok(Frame::data(Bytes::from_static(b"g"))),
    ];
    let (first, kept) = buffer(StreamBody::new(futures_util::stream::iter(frames)), 5)
        .await
        .unwrap();
    assert!(kept.is_none());
    assert_eq!(collect(first).await, "abcdefg");
    // Known to be larger from its size: not read at all.
    let (first, kept) = buffer(Full::new(Bytes::from_static(b"0123456789")), 5)
        .await
        .unwrap();
    assert!(kept.is_none());
    assert_eq!(first.size_hint().exact(), Some(10));
    assert_eq!(collect(first).await, "0123456789");
}

#[tokio::test]
async fn a_stream_still_being_written_is_not_waited_for() {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    tx.send(Ok(Frame::data(Bytes::from_static(b"first"))))
        .await
        .unwrap();
    let mut rx = rx;
    let body = StreamBody::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    // Returns although the stream has not ended: a caller that writes the
    // rest only after an answer would otherwise deadlock.
    let (first, kept) = buffer(body, 1 << 20).await.unwrap();
    assert!(kept.is_none());
    tx.send(Ok(Frame::data(Bytes::from_static(b" second"))))
        .await
        .unwrap();
    drop(tx);
    assert_eq!(collect(first).await, "first second");
}
