//! A bound on how long a call's request may keep the server waiting
//! ([`BodyTimeoutLayer`]): the layer, its service, and which calls it
//! times to their first message or to their end.

mod body;
mod first_message;

use std::sync::Arc;
use std::task::{Context, Poll};

use http::Request;
use throttle_fleet_tower::ConfigError;
use throttle_fleet_tower::body_timeout::BodyTimeout;
use tower_layer::Layer;
use tower_service::Service;

pub use body::CallBody;

use crate::extract::split_method;
use crate::grpc_responder::GrpcProtocol;

/// Times the requests of the calls it serves, so that a client that opens
/// calls and sends nothing cannot hold the slots of a concurrency rule
/// (or anything else a call holds) for as long as it likes.
///
/// A gRPC call holds what the [`ThrottleLayer`](crate::ThrottleLayer)
/// gave it (a concurrency rule's slots) until its response ends, and tonic
/// calls a unary method's handler only once the request's message, and the
/// end of the request stream after it, have come. A client that sends a
/// call's headers and no message holds the slots for as long as its
/// connection lives. tonic's `Server::builder().timeout(..)` bounds a
/// whole call, streaming ones included, which cuts the long streams a
/// service exists to serve; this layer bounds only the wait for the
/// client's bytes, under the
/// [`BodyTimeout`](crate::body_timeout::BodyTimeout) formula (a wait of at
/// most its `timeout`, 60 s by default, and past that grace a rate of at
/// least `min_bytes_per_sec`, 500).
///
/// **What is timed.** A gRPC request is one stream of messages, and
/// nothing in it says whether the method is unary or streaming: only the
/// service's definition does. So the layer times, of every gRPC call, the
/// wait for its **first message**: a call that sends headers and no
/// message, or trickles its first message, is cut. A client-streaming or
/// bidirectional call is silent by design between messages, and is not
/// cut after its first one. The methods named with
/// [`whole_request`](BodyTimeoutLayer::whole_request) are timed to the
/// **end of their request**: name the unary and server-streaming methods
/// (whose request is one message), so that a client that sends the message
/// and never ends the stream (tonic waits for the end before calling the
/// handler) is cut too. [`whole_request_always`](BodyTimeoutLayer::whole_request_always)
/// times every call to its end, for a server with no client-streaming or
/// bidirectional method. gRPC-web requests (unary and server-streaming
/// only, by the protocol) and plain HTTP requests are always timed to
/// their end.
///
/// A gRPC call cut by the bound is answered `DEADLINE_EXCEEDED`, with a
/// message that says which bound; what the call held is given back as its
/// answer ends. A plain HTTP request's body ends in the error, and its
/// handler answers what it makes of one.
///
/// ```no_run
/// use throttle_fleet_tonic::body_timeout::BodyTimeout;
/// use throttle_fleet_tonic::key::Global;
/// use throttle_fleet_tonic::prelude::*;
/// use throttle_fleet_tonic::BodyTimeoutLayer;
/// use tonic::{service::Routes, transport::Server};
///
/// # async fn serve(grpc: Routes) -> Result<(), Box<dyn std::error::Error>> {
/// let policy = Policy::new().rule(Rule::concurrency("pool", 64), Global);
/// Server::builder()
///     // Outside the throttle layer or inside it: it only wraps bodies.
///     .layer(BodyTimeoutLayer::new(BodyTimeout::default())?.whole_request([
///         "/helloworld.Greeter/SayHello",
///     ])?)
///     .layer(ThrottleLayer::new(policy, MemoryBackend::default())?)
///     .add_routes(grpc)
///     .serve("127.0.0.1:50051".parse()?)
///     .await?;
/// # Ok(())
/// # }
/// ```
///
/// Named methods, and a name that is not a method:
///
/// ```
/// use throttle_fleet_tonic::BodyTimeoutLayer;
/// use throttle_fleet_tonic::body_timeout::BodyTimeout;
///
/// let layer = BodyTimeoutLayer::new(BodyTimeout::default())?
///     .whole_request(["/helloworld.Greeter/SayHello"])?;
/// let bad = BodyTimeoutLayer::new(BodyTimeout::default())?.whole_request(["SayHello"]);
/// assert_eq!(bad.err().unwrap().field(), "whole_request");
/// # Ok::<(), throttle_fleet_tonic::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct BodyTimeoutLayer {
    bound: BodyTimeout,
    whole: Whole,
}

/// Which calls are timed to the end of their request.
#[derive(Debug, Clone)]
enum Whole {
    /// These methods (sorted); every other gRPC call to its first message.
    Methods(Arc<[Box<str>]>),
    /// Every call.
    Always,
}

impl BodyTimeoutLayer {
    /// Every call's first message under `bound` (and plain HTTP and
    /// gRPC-web requests to their end). The error names the field of
    /// `bound` that cannot work.
    pub fn new(bound: BodyTimeout) -> Result<Self, ConfigError> {
        bound.validate()?;
        Ok(Self {
            bound,
            whole: Whole::Methods(Arc::from([])),
        })
    }

    /// Times these methods (`/package.Service/Method`) to the end of their
    /// request: the unary and server-streaming ones. Added to those named
    /// before. The error names a method not of that form.
    pub fn whole_request<I, S>(self, methods: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut added = Vec::new();
        for method in methods {
            let method = method.into();
            if split_method(&method).is_none() {
                return Err(ConfigError::new(
                    "whole_request",
                    format!("{method:?} is not of the form \"/package.Service/Method\""),
                ));
            }
            added.push(method.into_boxed_str());
        }
        let Whole::Methods(named) = &self.whole else {
            // Every call is timed whole already.
            return Ok(self);
        };
        let mut all: Vec<Box<str>> = named.iter().cloned().chain(added).collect();
        all.sort_unstable();
        all.dedup();
        Ok(Self {
            whole: Whole::Methods(all.into()),
            ..self
        })
    }

    /// Times every call to the end of its request: for a server with no
    /// client-streaming or bidirectional method, or one whose streams
    /// must not be silent for longer than the bound either.
    #[must_use]
    pub fn whole_request_always(self) -> Self {
        Self {
            whole: Whole::Always,
            ..self
        }
    }
}

impl<S> Layer<S> for BodyTimeoutLayer {
    type Service = BodyTimeoutService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BodyTimeoutService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`BodyTimeoutLayer`]: hands `inner` each request with
/// its body timed ([`CallBody`]).
#[derive(Debug, Clone)]
pub struct BodyTimeoutService<S> {
    inner: S,
    layer: BodyTimeoutLayer,
}

impl<S, B> Service<Request<B>> for BodyTimeoutService<S>
where
    S: Service<Request<CallBody<B>>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let protocol = GrpcProtocol::of(req.headers());
        let first_only = protocol == Some(GrpcProtocol::Grpc)
            && match &self.layer.whole {
                Whole::Always => false,
                Whole::Methods(named) => named
                    .binary_search_by(|m| (**m).cmp(req.uri().path()))
                    .is_err(),
            };
        let bound = self.layer.bound;
        let req = req.map(|body| CallBody::new(body, bound, first_only, protocol.is_some()));
        self.inner.call(req)
    }
}
