//! The layer in front of tonic's `Channel`, against a tonic server over
//! real TCP: throttle's own tonic layer (`RESOURCE_EXHAUSTED` with
//! `RetryInfo` and pushback), and a service that answers pushback -1.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use support::TokioClock;
use throttle_fleet_client::{ClientLayer, ReplayBody};
use throttle_fleet_test_support::grpc::helloworld::greeter_client::GreeterClient;
use throttle_fleet_test_support::grpc::helloworld::greeter_server::{Greeter, GreeterServer};
use throttle_fleet_test_support::grpc::helloworld::{HelloReply, HelloRequest};
use throttle_fleet_tonic::prelude::*;
use tokio::time::Instant;
use tonic::body::Body;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Request, Response, Status};
use tower::ServiceBuilder;

/// A greeter that counts its calls and answers what `answer` says.
#[derive(Clone)]
struct Counting {
    calls: Arc<AtomicU64>,
    pushback: Option<&'static str>,
}

#[tonic::async_trait]
impl Greeter for Counting {
    async fn say_hello(&self, _: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match self.pushback {
            None => Ok(Response::new(HelloReply {
                message: "hello".into(),
            })),
            Some(pushback) => {
                let mut status = Status::unavailable("busy");
                status
                    .metadata_mut()
                    .insert("grpc-retry-pushback-ms", pushback.parse().unwrap());
                Err(status)
            }
        }
    }
}

async fn serve(greeter: Counting, layer: ThrottleLayer) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let router = Server::builder()
        .layer(layer)
        .add_service(GreeterServer::new(greeter));
    tokio::spawn(async move { router.serve_with_incoming(incoming).await.unwrap() });
    addr
}

/// A greeter client on a channel to `addr` behind the layer: tonic's
/// `Channel` takes its own body, so the layer's is wrapped in it.
async fn client(
    addr: SocketAddr,
    layer: ClientLayer,
) -> GreeterClient<
    impl tonic::client::GrpcService<Body, Error: Into<tonic::codegen::StdError>, ResponseBody = Body>
    + Clone,
> {
    let channel: Channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let service = ServiceBuilder::new()
        .layer(layer)
        .map_request(|r: http::Request<ReplayBody<Body>>| r.map(Body::new))
        .service(channel);
    GreeterClient::new(service)
}

fn hello() -> Request<HelloRequest> {
    Request::new(HelloRequest { name: "a".into() })
}

#[tokio::test(start_paused = true)]
async fn resource_exhausted_with_retry_info_is_waited_out_then_retried() {
    // 1 per 2 s: a first call without the layer spends it, so the
    // layer's first word is the refusal (RetryInfo, pushback and
    // retry-after of 2 s).
    let policy = Policy::new().rule(
        Rule::new("all", Quota::new(1, Duration::from_secs(2)).with_burst(1)).token_bucket(),
        GrpcMethod::default(),
    );
    let backend = MemoryBackend::with_clock(TokioClock::from_wall());
    let layer = ThrottleLayer::new(policy, backend).unwrap();
    let calls = Arc::new(AtomicU64::new(0));
    let greeter = Counting {
        calls: calls.clone(),
        pushback: None,
    };
    let addr = serve(greeter, layer).await;
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    GreeterClient::new(channel)
        .say_hello(hello())
        .await
        .unwrap();
    let mut greeter = client(addr, ClientLayer::new()).await;

    let start = Instant::now();
    let reply = greeter.say_hello(hello()).await.unwrap();
    assert_eq!(reply.into_inner().message, "hello");
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "waited: {:?}",
        start.elapsed()
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the refused call ran once, after its wait"
    );
}

#[tokio::test(start_paused = true)]
async fn pushback_minus_one_is_never_retried() {
    for (pushback, expected_calls) in [("-1", 1), ("10", 4)] {
        let calls = Arc::new(AtomicU64::new(0));
        let greeter = Counting {
            calls: calls.clone(),
            pushback: Some(pushback),
        };
        // A limit nothing reaches: the answers are the service's.
        let policy = Policy::new().rule(
            Rule::new("all", Quota::per_second(1_000_000)),
            GrpcMethod::default(),
        );
        let layer = ThrottleLayer::new(policy, MemoryBackend::default()).unwrap();
        let addr = serve(greeter, layer).await;
        // UNAVAILABLE is retried by default: 3 retries after the first.
        let mut greeter = client(addr, ClientLayer::new()).await;
        let status = greeter.say_hello(hello()).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            expected_calls,
            "pushback {pushback}"
        );
    }
}
