//! The greeter the gRPC examples serve: the quick start's
//! `helloworld.Greeter`, answering `Hello <name>!`.

use tonic::{Request, Response, Status};

/// Generated from `crates/throttle-fleet-tonic/proto/helloworld.proto` (see
/// `crates/throttle-fleet-tonic/codegen` to regenerate).
#[allow(unreachable_pub, missing_docs, clippy::all)]
pub(crate) mod helloworld {
    include!("../../crates/throttle-fleet-tonic/proto/gen/helloworld.rs");
}

use helloworld::greeter_server::Greeter;
use helloworld::{HelloReply, HelloRequest};

/// Says hello.
#[derive(Debug, Default)]
pub(crate) struct MyGreeter;

#[tonic::async_trait]
impl Greeter for MyGreeter {
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
