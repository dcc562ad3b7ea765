//! Concurrency rules over real TCP, with the memory backend: a real axum
//! server on an ephemeral port, real hyper clients, handlers the test holds
//! open or feeds through channels. A slot is held while a request runs and
//! while its response body streams, and comes back when the body has been
//! read in full or dropped (a client that went away), whatever other rules
//! the policy holds; the 429 and the success headers say so exactly.
//!
//! Nothing here sleeps: each step waits for the event it needs (a request
//! reaching its handler, a body being dropped), bounded by a hang guard.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use throttle_fleet_axum::HttpResponder;
use throttle_fleet_axum::core::clock::ManualClock;
use throttle_fleet_axum::key::{Global, Header};
use throttle_fleet_axum::{MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
use throttle_fleet_test_support::http::{Reply, send, serve};
use throttle_fleet_test_support::unix_secs;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// What a handler tells the test when a request reaches it (so the request
/// was admitted and holds its slots): how to finish it.
enum Arrival {
    /// `GET /hold`: answers `held` when this is sent to (or dropped).
    Held(oneshot::Sender<()>),
    /// `GET /stream`: its body streams what is sent here, and ends when
    /// this is dropped.
    Streaming(mpsc::Sender<Bytes>),
}

/// The test's server: its address and the requests reaching `/hold` and
/// `/stream`, in order.
struct Server {
    addr: SocketAddr,
    arrivals: mpsc::UnboundedReceiver<Arrival>,
}

impl Server {
    /// Serves `/` (answers `ok` at once), `/hold` and `/stream` under
    /// `layer`.
    async fn start(layer: ThrottleLayer) -> Self {
        let (tx, arrivals) = mpsc::unbounded_channel();
        let held = tx.clone();
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .route(
                "/hold",
                get(move || {
                    let arrived = held.clone();
                    async move {
                        let (finish, finished) = oneshot::channel();
                        let _ = arrived.send(Arrival::Held(finish));
                        let _ = finished.await;
                        "held"
                    }
                }),
            )
            .route(
                "/stream",
                get(move || {
                    let arrived = tx.clone();
                    async move {
                        let (chunks, rx) = mpsc::channel::<Bytes>(1);
                        let _ = arrived.send(Arrival::Streaming(chunks));
                        Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
                            rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
                        }))
                    }
                }),
            )
            .layer(layer);
        Self {
            addr: serve(app, true).await,
            arrivals,
        }
    }

    /// The next request to reach `/hold`.
    async fn held(&mut self) -> oneshot::Sender<()> {
        match guard(self.arrivals.recv()).await {
            Some(Arrival::Held(finish)) => finish,
            _ => panic!("not a held request"),
        }
    }

    /// The next request to reach `/stream`.
    async fn streaming(&mut self) -> mpsc::Sender<Bytes> {
        match guard(self.arrivals.recv()).await {
            Some(Arrival::Streaming(chunks)) => chunks,
            _ => panic!("not a streaming request"),
        }
    }

    /// `GET path` with `headers`, read in full.
    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        send(self.addr, "GET", path, headers, Bytes::new()).await
    }

    /// `GET path` with `headers` on a task of its own (a request the test
    /// will hold open), read in full when it ends.
    fn spawn(
        &self,
        path: &'static str,
        headers: &'static [(&'static str, &'static str)],
    ) -> JoinHandle<Reply> {
        let addr = self.addr;
        tokio::spawn(async move { send(addr, "GET", path, headers, Bytes::new()).await })
    }

    /// `GET path` on a connection of its own, answered up to its headers;
    /// the connection's task, to abort (a client going away).
    async fn open(&self, path: &str) -> (hyper::Response<Incoming>, JoinHandle<()>) {
        let tcp = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = http::Request::get(path)
            .header("host", "localhost")
            .body(Empty::<Bytes>::new())
            .unwrap();
        (guard(sender.send_request(req)).await.unwrap(), conn)
    }
}

/// `wait`, or a failure after 10 s: a guard against a hang, never a
/// measure (each wait ends as soon as what it waits for has happened).
async fn guard<T>(wait: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .expect("waited 10 s for an event that should come at once")
}

/// The next data frame of a streaming response.
async fn next_chunk(res: &mut hyper::Response<Incoming>) -> Bytes {
    let frame = guard(res.body_mut().frame())
        .await
        .expect("the body ended early")
        .unwrap();
    frame.into_data().expect("a data frame")
}

/// A layer of `policy` on the memory backend, answering with `responder`.
fn layer(policy: Policy, responder: HttpResponder) -> ThrottleLayer {
    ThrottleLayer::with_responder(policy, MemoryBackend::default(), responder).unwrap()
}

/// `n` requests in flight at once, all clients together.
fn inflight(n: u64) -> Policy {
    Policy::new().rule(Rule::concurrency("inflight", n), Global)
}

/// Asserts `reply` is the concurrency rule's 429 (`X-RateLimit-*` style).
fn assert_denied_by(reply: &Reply, rule: &str, limit: u64) {
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{reply:?}");
    assert_eq!(reply.header("retry-after"), Some("1"));
    assert_eq!(reply.header_u64("x-ratelimit-limit"), limit);
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("0"));
    let body = reply.json();
    assert_eq!(body["error"], "RATE_LIMIT_EXCEEDED");
    assert_eq!(body["dimension"], rule);
    assert_eq!(body["retry_after_seconds"], 1);
}

/// Asserts `reply` is a 429 naming `rule` (a rate rule's: its wait is its
/// own).
fn assert_rate_denied_by(reply: &Reply, rule: &str) {
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{reply:?}");
    assert_eq!(reply.json()["dimension"], rule);
}

#[tokio::test]
async fn two_held_requests_fill_two_slots_until_one_is_read_in_full() {
    let mut server = Server::start(layer(inflight(2), HttpResponder::new())).await;
    let first = server.spawn("/hold", &[]);
    let finish_first = server.held().await;
    let second = server.spawn("/hold", &[]);
    let finish_second = server.held().await;

    let before = unix_secs();
    let denied = server.get("/", &[]).await;
    assert_denied_by(&denied, "inflight", 2);
    let reset = denied.header_u64("x-ratelimit-reset");
    assert!(
        (before + 1..=unix_secs() + 2).contains(&reset),
        "Reset is a second from now, rounded up: {reset}"
    );
    // A denial takes no slot, however many there are.
    assert_denied_by(&server.get("/", &[]).await, "inflight", 2);

    finish_first.send(()).unwrap();
    let reply = guard(first).await.unwrap();
    assert_eq!(
        (reply.status, &reply.body[..]),
        (StatusCode::OK, &b"held"[..])
    );
    // One slot free: taken by this request, so none left while it runs.
    let admitted = server.get("/", &[]).await;
    assert_eq!(admitted.status, StatusCode::OK);
    assert_eq!(admitted.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(admitted.header("x-ratelimit-remaining"), Some("0"));
    // ...and given back once read: the next is admitted as well.
    assert_eq!(server.get("/", &[]).await.status, StatusCode::OK);

    drop(finish_second); // a handler that ends without being told
    assert_eq!(guard(second).await.unwrap().status, StatusCode::OK);
    let idle = server.get("/", &[]).await;
    assert_eq!(idle.header("x-ratelimit-remaining"), Some("1"));
}

#[tokio::test]
async fn a_streaming_response_holds_its_slot_until_its_last_chunk_is_read() {
    let mut server = Server::start(layer(inflight(1), HttpResponder::new())).await;
    let (mut res, _conn) = server.open("/stream").await;
    let chunks = server.streaming().await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["x-ratelimit-remaining"], "0");

    // Headers sent, body still streaming: the slot is held.
    chunks.send(Bytes::from_static(b"one")).await.unwrap();
    assert_eq!(next_chunk(&mut res).await, "one");
    assert_denied_by(&server.get("/", &[]).await, "inflight", 1);
    chunks.send(Bytes::from_static(b"two")).await.unwrap();
    assert_eq!(next_chunk(&mut res).await, "two");
    assert_denied_by(&server.get("/", &[]).await, "inflight", 1);

    // The stream ends and the client reads the end: the slot is free.
    drop(chunks);
    let rest = guard(res.into_body().collect()).await.unwrap().to_bytes();
    assert!(rest.is_empty(), "{rest:?}");
    assert_eq!(server.get("/", &[]).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_gives_its_slot_back() {
    let mut server = Server::start(layer(inflight(1), HttpResponder::new())).await;
    let (mut res, conn) = server.open("/stream").await;
    let chunks = server.streaming().await;
    chunks.send(Bytes::from_static(b"one")).await.unwrap();
    assert_eq!(next_chunk(&mut res).await, "one");
    assert_denied_by(&server.get("/", &[]).await, "inflight", 1);

    // The client goes away mid-stream: the server drops the body.
    conn.abort();
    drop(res);
    guard(chunks.closed()).await;
    assert_eq!(server.get("/", &[]).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_client_that_leaves_before_the_answer_gives_its_slot_back() {
    let mut server = Server::start(layer(inflight(1), HttpResponder::new())).await;
    let request = server.spawn("/hold", &[]);
    let finish = server.held().await;
    assert_denied_by(&server.get("/", &[]).await, "inflight", 1);

    // The client goes away while the handler runs: its future is dropped.
    request.abort();
    let _ = request.await;
    let mut finish = finish;
    guard(finish.closed()).await;
    assert_eq!(server.get("/", &[]).await.status, StatusCode::OK);
}

/// A frozen clock: the rate rules below must not refill between requests.
fn frozen() -> MemoryBackend<ManualClock> {
    MemoryBackend::with_clock(ManualClock::new(1_000_000))
}

/// `limit` requests a minute per `x-user`.
fn per_user(limit: u64) -> Rule {
    Rule::new("per-user", Quota::per_minute(limit).with_burst(limit)).token_bucket()
}

#[tokio::test]
async fn a_rate_denial_after_the_concurrency_rule_gives_the_slot_back() {
    // The concurrency rule is asked first, so it has taken its slot when
    // the rate rule denies.
    let policy = inflight(1).rule(per_user(1), Header::new("x-user"));
    let layer = ThrottleLayer::with_responder(policy, frozen(), HttpResponder::new()).unwrap();
    let mut server = Server::start(layer).await;
    assert_eq!(
        server.get("/", &[("x-user", "a")]).await.status,
        StatusCode::OK
    );
    for _ in 0..3 {
        assert_rate_denied_by(&server.get("/", &[("x-user", "a")]).await, "per-user");
    }
    // No slot leaked: another user is admitted, and the bound still holds.
    let held = server.spawn("/hold", &[("x-user", "b")]);
    let finish = server.held().await;
    assert_denied_by(&server.get("/", &[("x-user", "c")]).await, "inflight", 1);
    finish.send(()).unwrap();
    assert_eq!(guard(held).await.unwrap().status, StatusCode::OK);
    assert_eq!(
        server.get("/", &[("x-user", "d")]).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_concurrency_denial_after_the_rate_rule_gives_the_cost_back() {
    // The rate rule is asked first, so it has counted the request when the
    // concurrency rule denies.
    let policy = Policy::new()
        .rule(per_user(2), Header::new("x-user"))
        .rule(Rule::concurrency("inflight", 1), Global);
    let layer = ThrottleLayer::with_responder(policy, frozen(), HttpResponder::new()).unwrap();
    let mut server = Server::start(layer).await;
    let held = server.spawn("/hold", &[("x-user", "a")]); // a: 1 of 2
    let finish = server.held().await;
    for _ in 0..3 {
        assert_denied_by(&server.get("/", &[("x-user", "a")]).await, "inflight", 1);
    }
    finish.send(()).unwrap();
    assert_eq!(guard(held).await.unwrap().status, StatusCode::OK);
    // The three denials cost a nothing: its second request passes...
    let second = server.get("/", &[("x-user", "a")]).await;
    assert_eq!(second.status, StatusCode::OK, "{second:?}");
    // ...and its third meets the rate rule.
    assert_rate_denied_by(&server.get("/", &[("x-user", "a")]).await, "per-user");
}

#[tokio::test]
async fn success_and_denial_headers_of_a_concurrency_rule_with_ietf_fields() {
    let mut server =
        Server::start(layer(inflight(3), HttpResponder::new().ietf_headers(true))).await;
    let policy_field = r#""inflight";q=3;qu="concurrent-requests""#;
    let first = server.spawn("/hold", &[]);
    let finish_first = server.held().await;

    let before = unix_secs();
    let ok = server.get("/", &[]).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(ok.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(ok.header("x-ratelimit-remaining"), Some("1"));
    let reset = ok.header_u64("x-ratelimit-reset");
    assert!(
        (before..=unix_secs() + 1).contains(&reset),
        "Reset is now, rounded up: {reset}"
    );
    assert_eq!(ok.header("ratelimit-policy"), Some(policy_field));
    assert_eq!(ok.header("ratelimit"), Some(r#""inflight";r=1"#));

    let second = server.spawn("/hold", &[]);
    let finish_second = server.held().await;
    let third = server.spawn("/hold", &[]);
    let finish_third = server.held().await;
    let denied = server.get("/", &[]).await;
    assert_denied_by(&denied, "inflight", 3);
    assert_eq!(denied.header("ratelimit-policy"), Some(policy_field));
    assert_eq!(denied.header("ratelimit"), Some(r#""inflight";r=0"#));

    for (finish, request) in [
        (finish_first, first),
        (finish_second, second),
        (finish_third, third),
    ] {
        finish.send(()).unwrap();
        assert_eq!(guard(request).await.unwrap().status, StatusCode::OK);
    }
    let idle = server.get("/", &[]).await;
    assert_eq!(idle.header("ratelimit"), Some(r#""inflight";r=2"#));
}

#[tokio::test]
async fn ietf_only_headers_of_a_concurrency_rule() {
    let responder = HttpResponder::new()
        .ietf_headers(true)
        .x_ratelimit_headers(false);
    let mut server = Server::start(layer(inflight(2), responder)).await;
    let ok = server.get("/", &[]).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(
        ok.header("ratelimit-policy"),
        Some(r#""inflight";q=2;qu="concurrent-requests""#)
    );
    assert_eq!(ok.header("ratelimit"), Some(r#""inflight";r=1"#));
    for legacy in [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ] {
        assert_eq!(ok.header(legacy), None, "{legacy}");
    }

    let first = server.spawn("/hold", &[]);
    let finish_first = server.held().await;
    let second = server.spawn("/hold", &[]);
    let finish_second = server.held().await;
    let denied = server.get("/", &[]).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.header("retry-after"), Some("1"));
    assert_eq!(denied.header("ratelimit"), Some(r#""inflight";r=0"#));
    assert_eq!(denied.header("x-ratelimit-remaining"), None);
    assert_eq!(denied.json()["dimension"], "inflight");
    drop((finish_first, finish_second));
    assert_eq!(guard(first).await.unwrap().status, StatusCode::OK);
    assert_eq!(guard(second).await.unwrap().status, StatusCode::OK);
}

#[tokio::test]
async fn a_shadow_concurrency_rule_never_refuses_and_leaks_nothing() {
    let policy = Policy::new()
        .rule(Rule::concurrency("shadow-inflight", 1).shadow(), Global)
        .shadow_header(true);
    let mut server = Server::start(layer(policy, HttpResponder::new())).await;
    let first = server.spawn("/hold", &[]);
    let finish_first = server.held().await;
    // Over the limit: admitted, and reported.
    let over = server.get("/", &[]).await;
    assert_eq!(over.status, StatusCode::OK);
    assert_eq!(over.header("x-ratelimit-shadow"), Some("shadow-inflight"));
    assert_eq!(
        over.header("x-ratelimit-limit"),
        None,
        "shadow rules are not told"
    );
    let second = server.spawn("/hold", &[]);
    let finish_second = server.held().await; // admitted while the slot is held
    finish_first.send(()).unwrap();
    finish_second.send(()).unwrap();
    assert_eq!(guard(first).await.unwrap().status, StatusCode::OK);
    assert_eq!(guard(second).await.unwrap().status, StatusCode::OK);

    // Everything ended: nothing in flight (no slot kept, none given back
    // twice), so one request fits, and a second beside it would not.
    assert_eq!(
        server.get("/", &[]).await.header("x-ratelimit-shadow"),
        None
    );
    let third = server.spawn("/hold", &[]);
    let finish_third = server.held().await;
    let beside = server.get("/", &[]).await;
    assert_eq!(beside.status, StatusCode::OK);
    assert_eq!(beside.header("x-ratelimit-shadow"), Some("shadow-inflight"));
    finish_third.send(()).unwrap();
    assert_eq!(guard(third).await.unwrap().status, StatusCode::OK);
    assert_eq!(
        server.get("/", &[]).await.header("x-ratelimit-shadow"),
        None
    );
}
