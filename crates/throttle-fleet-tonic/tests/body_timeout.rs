//! `BodyTimeoutLayer` over real gRPC (a `tonic::transport::Server` on a
//! loopback port, real tonic clients over HTTP/2), on tokio's paused clock:
//! calls that send headers and no message give their concurrency slots
//! back at the bound, to the millisecond, and a client stream silent
//! between its messages is not cut unless the layer is told to.

use std::net::SocketAddr;
use std::time::Duration;

use http::uri::PathAndQuery;
use throttle_fleet_test_support::grpc::echo::Tick;
use throttle_fleet_test_support::grpc::helloworld::{HelloReply, HelloRequest};
use throttle_fleet_test_support::grpc::{
    EchoClient, GreeterClient, SAY_HELLO, channel, expect_code, routes, say_hello,
};
use throttle_fleet_tonic::body_timeout::BodyTimeout;
use throttle_fleet_tonic::key::Global;
use throttle_fleet_tonic::{BodyTimeoutLayer, MemoryBackend, Policy, Rule, ThrottleLayer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request, Response, Status};

/// The bound's timeout (the default).
const BOUND: Duration = Duration::from_secs(60);
/// How late past the bound a call may end: the paused clock jumps to the
/// deadline, so only the work after it counts.
const SLACK: Duration = Duration::from_millis(100);
/// The slots of the concurrency rule every call is under.
const SLOTS: u64 = 4;
/// Longer than any bound here: a call that never ends fails the test (the
/// paused clock jumps here) instead of hanging it.
const NEVER: Duration = Duration::from_secs(3_600);

/// `call`'s answer, or a failure once `NEVER` has passed.
async fn ended<T>(call: impl Future<Output = T>) -> T {
    tokio::time::timeout(NEVER, call)
        .await
        .expect("the call never ended")
}

/// The greeter and echo services behind `timeouts` and a global
/// concurrency rule of `SLOTS`, as the issue's `tonic_greeter` was.
async fn serve(timeouts: BodyTimeoutLayer) -> SocketAddr {
    let policy = Policy::new().rule(Rule::concurrency("pool", SLOTS), Global);
    let throttle = ThrottleLayer::new(policy, MemoryBackend::default()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder()
        .layer(timeouts)
        .layer(throttle)
        .add_routes(routes());
    tokio::spawn(async move {
        server
            .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true)))
            .await
            .unwrap();
    });
    addr
}

/// The default bound, with the unary methods named.
fn named() -> BodyTimeoutLayer {
    BodyTimeoutLayer::new(BodyTimeout::default())
        .unwrap()
        .whole_request([SAY_HELLO, "/echo.Echo/Unary"])
        .unwrap()
}

/// Calls `SayHello` with `messages` as its request stream, whatever they
/// are: none and never an end, one and never an end, ...
async fn say_hello_with(
    channel: Channel,
    messages: impl Stream<Item = HelloRequest> + Send + 'static,
) -> Result<Response<HelloReply>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<HelloRequest, HelloReply>::default();
    ended(grpc.client_streaming(
        Request::new(messages),
        PathAndQuery::from_static(SAY_HELLO),
        codec,
    ))
    .await
}

fn assert_ended_at(what: &str, took: Duration, bound: Duration) {
    assert!(
        took >= bound && took <= bound + SLACK,
        "{what}: ended after {took:?}, expected {bound:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn four_calls_that_send_headers_and_no_message_give_their_slots_back_at_the_bound() {
    let addr = serve(named()).await;
    let channel = channel(addr).await;
    let mut greeter = GreeterClient::new(channel.clone());
    let start = Instant::now();
    let silent: Vec<_> = (0..SLOTS)
        .map(|_| tokio::spawn(say_hello_with(channel.clone(), tokio_stream::pending())))
        .collect();
    // They hold every slot.
    tokio::time::sleep(Duration::from_secs(1)).await;
    expect_code(say_hello(&mut greeter, &[]).await, Code::ResourceExhausted);
    for call in silent {
        let status = expect_code(call.await.unwrap(), Code::DeadlineExceeded);
        assert_ended_at("headers and no message", start.elapsed(), BOUND);
        assert!(status.message().contains("no bytes for 60 s"), "{status:?}");
    }
    let reply = say_hello(&mut greeter, &[]).await.unwrap();
    assert_eq!(reply.into_inner().message, "Hello throttle!");
}

#[tokio::test(start_paused = true)]
async fn a_named_unary_method_is_timed_to_the_end_of_its_request() {
    let addr = serve(named()).await;
    let channel = channel(addr).await;
    let start = Instant::now();
    // The message, and never the end of the stream: tonic waits for it
    // before calling the handler.
    let message = HelloRequest {
        name: "throttle".into(),
    };
    let never_ends = tokio_stream::iter([message]).chain(tokio_stream::pending());
    let result = say_hello_with(channel, never_ends).await;
    expect_code(result, Code::DeadlineExceeded);
    assert_ended_at("a message and no end", start.elapsed(), BOUND);
}

/// A client stream that sends a tick, is silent for `silence`, sends
/// another and ends: its answer (the ticks counted), and when it came.
async fn client_stream_silent_for(
    channel: Channel,
    silence: Duration,
) -> (Result<Response<Tick>, Status>, Duration) {
    let start = Instant::now();
    let (ticks, rx) = mpsc::channel(1);
    ticks.send(Tick { n: 1 }).await.unwrap();
    tokio::spawn(async move {
        tokio::time::sleep(silence).await;
        // Gone if the call was cut.
        let _ = ticks.send(Tick { n: 2 }).await;
    });
    let result = ended(EchoClient::new(channel).client_stream(ReceiverStream::new(rx))).await;
    (result, start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_client_stream_silent_between_messages_is_not_cut_by_default() {
    let addr = serve(named()).await;
    let (result, took) = client_stream_silent_for(channel(addr).await, BOUND * 3).await;
    assert_eq!(result.unwrap().into_inner().n, 2);
    assert!(took >= BOUND * 3, "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_client_stream_silent_between_messages_is_cut_when_every_request_is_timed_whole() {
    let always = BodyTimeoutLayer::new(BodyTimeout::default())
        .unwrap()
        .whole_request_always();
    let addr = serve(always).await;
    let (result, took) = client_stream_silent_for(channel(addr).await, BOUND * 3).await;
    expect_code(result, Code::DeadlineExceeded);
    // The silence is timed from the first tick's arrival.
    assert_ended_at("a silent client stream", took, BOUND);
}

#[test]
fn a_bound_that_cannot_work_is_refused_naming_the_field() {
    let zero = BodyTimeout {
        timeout: Duration::ZERO,
        ..BodyTimeout::default()
    };
    let err = BodyTimeoutLayer::new(zero).unwrap_err();
    assert_eq!(err.field(), "timeout");
    let err = named().whole_request(["/no-method"]).unwrap_err();
    assert_eq!(err.field(), "whole_request");
    assert!(err.to_string().contains("/no-method"), "{err}");
}
