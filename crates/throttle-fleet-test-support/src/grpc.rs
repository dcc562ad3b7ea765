//! gRPC helpers: the services generated from throttle-fleet-tonic's protos (the
//! code its codegen checks in) as one set of routes for a test to serve
//! behind its layer, real tonic clients, and decoding of the standard
//! error details (no dependency on the tonic integration: its tests use
//! this crate). HTTP/1.1 requests (plain routes of a mixed
//! router, gRPC-web) go through [`crate::http`].

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;

use prost::Message;
use tokio_stream::{Stream, StreamExt};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_types::{ErrorInfo, QuotaFailure, RetryInfo, StatusExt};

/// `helloworld.Greeter`, generated from `proto/helloworld.proto`.
#[allow(unreachable_pub, missing_docs, clippy::all)]
pub mod helloworld {
    include!("../../throttle-fleet-tonic/proto/gen/helloworld.rs");
}

/// `echo.Echo` (every kind of call), generated from `proto/echo.proto`.
#[allow(unreachable_pub, missing_docs, clippy::all)]
pub mod echo {
    include!("../../throttle-fleet-tonic/proto/gen/echo.rs");
}

use echo::Tick;
use echo::echo_server::EchoServer;
use helloworld::greeter_server::GreeterServer;
use helloworld::{HelloReply, HelloRequest};

/// The path of `SayHello`, for HTTP requests and method rules.
pub const SAY_HELLO: &str = "/helloworld.Greeter/SayHello";

/// Answers `Hello <name>!`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Greeter;

#[tonic::async_trait]
impl helloworld::greeter_server::Greeter for Greeter {
    async fn say_hello(
        &self,
        request: Request<HelloRequest>,
    ) -> Result<Response<HelloReply>, Status> {
        let name = request.into_inner().name;
        Ok(Response::new(HelloReply {
            message: format!("Hello {name}!"),
        }))
    }
}

type TickStream = Pin<Box<dyn Stream<Item = Result<Tick, Status>> + Send>>;

/// Every kind of call, doing the least that shows it ran.
#[derive(Debug, Default, Clone, Copy)]
pub struct Echo;

#[tonic::async_trait]
impl echo::echo_server::Echo for Echo {
    async fn unary(&self, request: Request<Tick>) -> Result<Response<Tick>, Status> {
        Ok(Response::new(request.into_inner()))
    }

    type ServerStreamStream = TickStream;

    async fn server_stream(&self, request: Request<Tick>) -> Result<Response<TickStream>, Status> {
        let n = request.into_inner().n;
        Ok(Response::new(Box::pin(tokio_stream::iter(
            (1..=n).map(|n| Ok(Tick { n })),
        ))))
    }

    async fn client_stream(
        &self,
        request: Request<Streaming<Tick>>,
    ) -> Result<Response<Tick>, Status> {
        let mut stream = request.into_inner();
        let mut n = 0;
        while let Some(tick) = stream.next().await {
            tick?;
            n += 1;
        }
        Ok(Response::new(Tick { n }))
    }

    type BidiStream = TickStream;

    async fn bidi(
        &self,
        request: Request<Streaming<Tick>>,
    ) -> Result<Response<TickStream>, Status> {
        Ok(Response::new(Box::pin(request.into_inner())))
    }
}

/// The tonic services of the tests, as one set of routes.
pub fn routes() -> tonic::service::Routes {
    tonic::service::Routes::new(GreeterServer::new(Greeter)).add_service(EchoServer::new(Echo))
}

/// A real tonic channel to `addr` whose connection comes from `local` (any
/// address in 127.0.0.0/8 works on loopback, so tests can be several peers).
pub async fn channel_from(addr: SocketAddr, local: Ipv4Addr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .local_address(Some(IpAddr::V4(local)))
        .connect()
        .await
        .unwrap()
}

/// A channel from 127.0.0.1.
pub async fn channel(addr: SocketAddr) -> Channel {
    channel_from(addr, Ipv4Addr::LOCALHOST).await
}

/// A greeter client on a [`channel`].
pub type GreeterClient = helloworld::greeter_client::GreeterClient<Channel>;
/// An echo client on a [`channel`].
pub type EchoClient = echo::echo_client::EchoClient<Channel>;

/// Calls `SayHello` with `metadata`.
pub async fn say_hello(
    client: &mut GreeterClient,
    metadata: &[(&'static str, &str)],
) -> Result<Response<HelloReply>, Status> {
    let mut request = Request::new(HelloRequest {
        name: "throttle".into(),
    });
    for (k, v) in metadata {
        request.metadata_mut().insert(*k, v.parse().unwrap());
    }
    client.say_hello(request).await
}

/// A metadata value as text.
pub fn meta<'a>(map: &'a tonic::metadata::MetadataMap, name: &str) -> Option<&'a str> {
    map.get(name).map(|v| v.to_str().unwrap())
}

/// A metadata value as a number.
pub fn meta_u64(map: &tonic::metadata::MetadataMap, name: &str) -> u64 {
    meta(map, name)
        .unwrap_or_else(|| panic!("no {name} in {map:?}"))
        .parse()
        .unwrap()
}

/// The standard details of a status, decoded, after checking that
/// `grpc-status-details-bin` is a `google.rpc.Status` agreeing with the
/// status itself.
#[derive(Debug)]
pub struct Details {
    /// The `RetryInfo` detail, if any.
    pub retry: Option<RetryInfo>,
    /// The `QuotaFailure` detail, if any.
    pub quota: Option<QuotaFailure>,
    /// The `ErrorInfo` detail, if any.
    pub info: Option<ErrorInfo>,
    /// How many details there are in all.
    pub count: usize,
}

/// Decodes the standard details of `status` (see [`Details`]); panics if
/// they are not a `google.rpc.Status` agreeing with `status`.
pub fn details(status: &Status) -> Details {
    let rpc = tonic_types::pb::Status::decode(status.details())
        .unwrap_or_else(|e| panic!("details of {status:?} are not a google.rpc.Status: {e}"));
    assert_eq!(rpc.code, status.code() as i32, "{rpc:?}");
    assert_eq!(rpc.message, status.message(), "{rpc:?}");
    Details {
        retry: status.get_details_retry_info(),
        quota: status.get_details_quota_failure(),
        info: status.get_details_error_info(),
        count: rpc.details.len(),
    }
}

/// Asserts `status` is this code, with a message and details.
pub fn expect_code(result: Result<impl std::fmt::Debug, Status>, code: Code) -> Status {
    match result {
        Err(status) if status.code() == code => status,
        other => panic!("expected {code:?}, got {other:?}"),
    }
}
