//! What the test binaries share: a limiter clock that follows tokio's
//! (paused) time, and throttle's axum layer served over TCP with a
//! handler that counts what reaches it.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::any;
use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use throttle_fleet_axum::HttpResponder;
use throttle_fleet_axum::prelude::*;
use throttle_fleet_client::{ClientLayer, ClientService, ReplayBody};
pub(crate) use throttle_fleet_test_support::tokio_clock::TokioClock;

/// How many requests reached the handler.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reached(Arc<AtomicU64>);

impl Reached {
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Serves `router` on an ephemeral loopback port.
pub(crate) async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// What reached the server: every request, and those that passed the
/// layer to the handler.
#[derive(Debug, Clone, Default)]
pub(crate) struct Counts {
    pub(crate) arrived: Reached,
    pub(crate) handled: Reached,
}

/// A handler on every path that echoes the request body, behind `layer`.
pub(crate) fn echo_behind(layer: ThrottleLayer) -> (Router, Counts) {
    let counts = Counts::default();
    let (handled, arrived) = (counts.handled.0.clone(), counts.arrived.0.clone());
    let router = Router::new()
        .route(
            "/{*path}",
            any(move |body: Bytes| {
                let handled = handled.clone();
                async move {
                    handled.fetch_add(1, Ordering::SeqCst);
                    body
                }
            }),
        )
        .layer(layer)
        .layer(tower::util::MapRequestLayer::new(move |req| {
            arrived.fetch_add(1, Ordering::SeqCst);
            req
        }));
    (router, counts)
}

/// `limit` requests per `period` for each `x-client` header value, token
/// bucket with a burst of `limit`, counted on tokio's clock.
pub(crate) fn layer(limit: u64, period: Duration, responder: HttpResponder) -> ThrottleLayer {
    bucket(Quota::new(limit, period).with_burst(limit), responder)
}

/// `quota` for each `x-client` header value, token bucket, counted on
/// tokio's clock.
pub(crate) fn bucket(quota: Quota, responder: HttpResponder) -> ThrottleLayer {
    let policy = Policy::new().rule(
        Rule::new("client", quota).token_bucket(),
        Header::new("x-client"),
    );
    ThrottleLayer::with_responder(
        policy,
        MemoryBackend::with_clock(TokioClock::from_wall()),
        responder,
    )
    .unwrap()
}

/// hyper-util's client, built for the bodies the layer passes on.
pub(crate) fn hyper_client() -> Client<HttpConnector, ReplayBody<Full<Bytes>>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// hyper-util's client behind `layer`.
pub(crate) fn through(
    layer: ClientLayer,
) -> ClientService<Client<HttpConnector, ReplayBody<Full<Bytes>>>> {
    tower::Layer::layer(&layer, hyper_client())
}
