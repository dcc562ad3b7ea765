//! Concurrency rules over gRPC, with a real `tonic::transport::Server` on an
//! ephemeral port and real tonic clients: a streaming call holds its slot
//! until its stream ends (read to its end by the client) or the client
//! drops it, a call over the limit is `RESOURCE_EXHAUSTED` with a
//! `RetryInfo` of one second and a `QuotaFailure` that counts requests in
//! flight, and a call shed for capacity is `UNAVAILABLE`, its message
//! stating its wait.
//!
//! The echo service here paces its server streams from the test (each call
//! hands the test the sender of its stream), so nothing sleeps: each step
//! waits for the event it needs, bounded by a hang guard.

use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;
use throttle_fleet_core::InFlightLimit;

use throttle_fleet_test_support::grpc::echo::Tick;
use throttle_fleet_test_support::grpc::echo::echo_server::{Echo, EchoServer};
use throttle_fleet_test_support::grpc::{EchoClient, channel, details, expect_code, meta};
use throttle_fleet_tonic::core::Class;
use throttle_fleet_tonic::{
    GrpcMethod, Limit, MemoryBackend, Metadata, Policy, RequestHead, Rule, ThrottleLayer,
};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Request, Response, Status, Streaming};

type Ticks = Pin<Box<dyn Stream<Item = Result<Tick, Status>> + Send>>;

/// An echo service whose server streams the test feeds: each call sends
/// the test its stream's sender; the stream ends when that is dropped.
struct Paced {
    arrivals: mpsc::UnboundedSender<mpsc::Sender<Result<Tick, Status>>>,
}

#[tonic::async_trait]
impl Echo for Paced {
    async fn unary(&self, request: Request<Tick>) -> Result<Response<Tick>, Status> {
        Ok(Response::new(request.into_inner()))
    }

    type ServerStreamStream = Ticks;

    async fn server_stream(&self, _: Request<Tick>) -> Result<Response<Ticks>, Status> {
        let (tx, rx) = mpsc::channel(1);
        let _ = self.arrivals.send(tx);
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn client_stream(&self, _: Request<Streaming<Tick>>) -> Result<Response<Tick>, Status> {
        Err(Status::unimplemented("not used here"))
    }

    type BidiStream = Ticks;

    async fn bidi(&self, request: Request<Streaming<Tick>>) -> Result<Response<Ticks>, Status> {
        Ok(Response::new(Box::pin(request.into_inner())))
    }
}

/// The paced echo behind `policy` (memory backend), and the senders of
/// its server streams as calls reach it.
async fn serve(
    policy: Policy,
) -> (
    SocketAddr,
    mpsc::UnboundedReceiver<mpsc::Sender<Result<Tick, Status>>>,
) {
    let layer = ThrottleLayer::new(policy, MemoryBackend::default()).unwrap();
    let (arrivals, arrived) = mpsc::unbounded_channel();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder()
        .layer(layer)
        .add_service(EchoServer::new(Paced { arrivals }));
    tokio::spawn(async move {
        server
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    (addr, arrived)
}

/// `wait`, or a failure after 10 s: a guard against a hang, never a
/// measure.
async fn guard<T>(wait: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("waited 10 s for an event that should come at once")
}

/// A request for tenant `tenant` (metadata `x-tenant`).
fn of<T>(tenant: &str, message: T) -> Request<T> {
    let mut req = Request::new(message);
    req.metadata_mut()
        .insert("x-tenant", tenant.parse().unwrap());
    req
}

/// Asserts `result` is the denial of a concurrency rule of one slot:
/// `RESOURCE_EXHAUSTED` naming `rule`, with a `RetryInfo` of one second
/// and a `QuotaFailure` that says one request in flight (not a rate).
fn assert_denied(result: Result<impl std::fmt::Debug, Status>, rule: &str) {
    let status = expect_code(result, Code::ResourceExhausted);
    assert_eq!(meta(status.metadata(), "retry-after"), Some("1"));
    let d = details(&status);
    let delay = d.retry.expect("a RetryInfo").retry_delay.unwrap();
    assert_eq!(delay, Duration::from_secs(1));
    assert_eq!(d.info.unwrap().metadata["dimension"], rule);
    let violations = d.quota.expect("a QuotaFailure").violations;
    assert_eq!(violations[0].description, format!("{rule}: 1 in flight"));
}

#[tokio::test]
async fn a_server_stream_holds_its_slot_until_the_client_has_read_its_end() {
    let policy = Policy::new().rule(Rule::concurrency("streams", 1), Metadata::new("x-tenant"));
    let (addr, mut arrived) = serve(policy).await;
    let mut echo = EchoClient::new(channel(addr).await);

    let mut stream = guard(echo.server_stream(of("a", Tick { n: 0 })))
        .await
        .unwrap();
    assert_eq!(meta(stream.metadata(), "x-ratelimit-remaining"), Some("0"));
    let ticks = guard(arrived.recv()).await.unwrap();
    ticks.send(Ok(Tick { n: 1 })).await.unwrap();
    assert_eq!(guard(stream.get_mut().next()).await.unwrap().unwrap().n, 1);

    // The first stream is open: a second call of the tenant is denied,
    // whatever its kind; another tenant has its own slot.
    assert_denied(echo.server_stream(of("a", Tick { n: 0 })).await, "streams");
    assert_denied(echo.unary(of("a", Tick { n: 7 })).await, "streams");
    assert_eq!(
        echo.unary(of("b", Tick { n: 7 }))
            .await
            .unwrap()
            .into_inner()
            .n,
        7
    );
    ticks.send(Ok(Tick { n: 2 })).await.unwrap();
    assert_eq!(guard(stream.get_mut().next()).await.unwrap().unwrap().n, 2);
    assert_denied(echo.unary(of("a", Tick { n: 7 })).await, "streams");

    // The stream ends, and the client reads it to its end (the trailers).
    drop(ticks);
    assert!(guard(stream.get_mut().next()).await.is_none());
    assert_eq!(
        echo.unary(of("a", Tick { n: 8 }))
            .await
            .unwrap()
            .into_inner()
            .n,
        8
    );
    let again = guard(echo.server_stream(of("a", Tick { n: 0 })))
        .await
        .unwrap();
    drop(guard(arrived.recv()).await.unwrap());
    let rest: Vec<_> = guard(again.into_inner().collect::<Vec<_>>()).await;
    assert!(rest.is_empty(), "{rest:?}");
}

#[tokio::test]
async fn a_client_that_drops_a_stream_midway_frees_the_slot() {
    let policy = Policy::new().rule(Rule::concurrency("per-method", 1), GrpcMethod::full());
    let (addr, mut arrived) = serve(policy).await;
    let mut echo = EchoClient::new(channel(addr).await);

    let mut stream = guard(echo.server_stream(Tick { n: 0 })).await.unwrap();
    let ticks = guard(arrived.recv()).await.unwrap();
    ticks.send(Ok(Tick { n: 1 })).await.unwrap();
    assert_eq!(guard(stream.get_mut().next()).await.unwrap().unwrap().n, 1);
    assert_denied(echo.server_stream(Tick { n: 0 }).await, "per-method");
    // Another method has its own slot.
    assert_eq!(echo.unary(Tick { n: 3 }).await.unwrap().into_inner().n, 3);

    // The client drops the stream midway: the server drops its body.
    drop(stream);
    guard(ticks.closed()).await;
    let next = guard(echo.server_stream(Tick { n: 0 })).await.unwrap();
    let ticks = guard(arrived.recv()).await.unwrap();
    ticks.send(Ok(Tick { n: 5 })).await.unwrap();
    assert_eq!(guard(next.into_inner().next()).await.unwrap().unwrap().n, 5);
}

#[tokio::test]
async fn a_bidi_stream_holds_its_slot_until_both_sides_have_ended() {
    let policy = Policy::new().rule(Rule::concurrency("per-method", 1), GrpcMethod::full());
    let (addr, _arrived) = serve(policy).await;
    let mut echo = EchoClient::new(channel(addr).await);

    let (tx, rx) = mpsc::channel(1);
    let mut bidi = guard(echo.bidi(ReceiverStream::new(rx)))
        .await
        .unwrap()
        .into_inner();
    tx.send(Tick { n: 1 }).await.unwrap();
    assert_eq!(guard(bidi.next()).await.unwrap().unwrap().n, 1);
    assert_denied(echo.bidi(tokio_stream::empty()).await, "per-method");

    // The client is done sending; the echo ends; the client reads the end.
    drop(tx);
    assert!(guard(bidi.next()).await.is_none());
    let mut second = guard(echo.bidi(tokio_stream::iter([Tick { n: 2 }])))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(guard(second.next()).await.unwrap().unwrap().n, 2);
    assert!(guard(second.next()).await.is_none());
}

/// A shed call's message states the wait its `retry-after` and `RetryInfo`
/// give, as the HTTP answer's body does.
#[tokio::test]
async fn a_shed_call_says_how_long_to_wait() {
    // Three slots, one kept for each class above sheddable: every call
    // here is sheddable, so one stream holds its share and the next call
    // is shed.
    let rule = Rule::concurrency(
        "pool",
        InFlightLimit {
            reserve: 1,
            ..InFlightLimit::new(3)
        },
    );
    let limit =
        Limit::new(rule, GrpcMethod::full()).class_by(|_: &RequestHead<'_>| Class::Sheddable);
    let (addr, mut arrived) = serve(Policy::new().limit(limit)).await;
    let mut echo = EchoClient::new(channel(addr).await);

    let _held = guard(echo.server_stream(Tick { n: 0 })).await.unwrap();
    let _ticks = guard(arrived.recv()).await.unwrap();
    let status = expect_code(echo.server_stream(Tick { n: 0 }).await, Code::Unavailable);
    assert_eq!(meta(status.metadata(), "retry-after"), Some("1"));
    assert_eq!(
        meta(status.metadata(), "grpc-retry-pushback-ms"),
        Some("1000")
    );
    let d = details(&status);
    assert_eq!(d.info.unwrap().reason, "TEMPORARY_REDUCED_CAPACITY");
    assert_eq!(
        d.retry.expect("a RetryInfo").retry_delay,
        Some(Duration::from_secs(1))
    );
    assert_eq!(
        status.message(),
        "The service is short of capacity. Please retry after 1 seconds."
    );
}
