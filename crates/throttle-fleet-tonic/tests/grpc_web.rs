//! gRPC-web over real HTTP/1.1: a tonic server with `tonic_web`, and raw
//! gRPC-web requests as a browser client sends them. A denied call gets the
//! gRPC-web form of the same status: a Trailers-Only answer in the response
//! headers, in the request's gRPC-web content type. Both orders of the
//! throttle and gRPC-web layers are checked.

use std::net::SocketAddr;

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, StatusCode};
use prost::Message;
use throttle_fleet_test_support::grpc::SAY_HELLO;
use throttle_fleet_test_support::grpc::helloworld::{HelloReply, HelloRequest};
use throttle_fleet_test_support::http as http1;
use throttle_fleet_tonic::{GrpcMethod, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_web::GrpcWebLayer;

fn hello_once() -> ThrottleLayer {
    let policy = Policy::new().rule(
        Rule::new("hello", Quota::per_minute(1)).token_bucket(),
        GrpcMethod::full(),
    );
    ThrottleLayer::new(policy, MemoryBackend::default()).unwrap()
}

/// Serves the test services over HTTP/1.1 and HTTP/2 with gRPC-web, the
/// throttle layer outside (`throttle_first`) or inside the gRPC-web layer.
async fn serve(throttle_first: bool) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = TcpIncoming::from(listener);
    let builder = Server::builder().accept_http1(true);
    if throttle_first {
        let server = builder
            .layer(hello_once())
            .layer(GrpcWebLayer::new())
            .add_routes(throttle_fleet_test_support::grpc::routes());
        tokio::spawn(server.serve_with_incoming(incoming));
    } else {
        let server = builder
            .layer(GrpcWebLayer::new())
            .layer(hello_once())
            .add_routes(throttle_fleet_test_support::grpc::routes());
        tokio::spawn(server.serve_with_incoming(incoming));
    }
    addr
}

/// One gRPC-web message frame: flag 0, big-endian length, the message.
fn frame(msg: &impl Message) -> Bytes {
    let body = msg.encode_to_vec();
    let mut buf = BytesMut::with_capacity(5 + body.len());
    buf.put_u8(0);
    buf.put_u32(body.len() as u32);
    buf.put_slice(&body);
    buf.freeze()
}

/// Splits a gRPC-web response body into messages and the trailer block.
fn frames(mut body: &[u8]) -> (Vec<Bytes>, Option<String>) {
    let (mut messages, mut trailers) = (Vec::new(), None);
    while !body.is_empty() {
        let flag = body[0];
        let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
        let data = &body[5..5 + len];
        if flag & 0x80 != 0 {
            trailers = Some(String::from_utf8(data.to_vec()).unwrap());
        } else {
            messages.push(Bytes::copy_from_slice(data));
        }
        body = &body[5 + len..];
    }
    (messages, trailers)
}

async fn call(addr: SocketAddr, content_type: &str) -> http1::Reply {
    let hello = HelloRequest { name: "web".into() };
    let mut body = frame(&hello);
    if content_type.starts_with("application/grpc-web-text") {
        body = Bytes::from(base64(&body));
    }
    http1::send(
        addr,
        "POST",
        SAY_HELLO,
        &[
            ("content-type", content_type),
            ("x-grpc-web", "1"),
            ("accept", content_type),
        ],
        body,
    )
    .await
}

fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from_be_bytes([0, b[0], b[1], b[2]]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `grpc-message` is percent-encoded.
fn percent_decode(s: &str) -> String {
    let (mut out, b) = (Vec::new(), s.as_bytes());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap())
}

/// tonic-web answers every call in the `+proto` form of the request's
/// content type.
fn tonic_web_form(content_type: &str) -> String {
    match content_type.ends_with("+proto") {
        true => content_type.to_owned(),
        false => format!("{content_type}+proto"),
    }
}

async fn check(throttle_first: bool, content_type: &str) {
    let addr = serve(throttle_first).await;
    let ctx = format!("throttle first: {throttle_first}, {content_type}");

    let ok = call(addr, content_type).await;
    assert_eq!(ok.status, StatusCode::OK, "{ctx}");
    let allowed_form = tonic_web_form(content_type);
    assert_eq!(
        header(&ok.headers, "content-type"),
        Some(&*allowed_form),
        "{ctx}"
    );
    assert_eq!(
        header(&ok.headers, "x-ratelimit-remaining"),
        Some("0"),
        "{ctx}"
    );
    if content_type == "application/grpc-web+proto" {
        let (messages, trailers) = frames(&ok.body);
        let reply = HelloReply::decode(&messages[0][..]).unwrap();
        assert_eq!(reply.message, "Hello web!", "{ctx}");
        assert!(trailers.unwrap().contains("grpc-status:0"), "{ctx}");
    }

    let denied = call(addr, content_type).await;
    assert_eq!(denied.status, StatusCode::OK, "{ctx}");
    // Outside tonic-web the limiter answers in the request's own content
    // type; inside, tonic-web rewrites it to its `+proto` form.
    let denied_form = match throttle_first {
        true => content_type.to_owned(),
        false => allowed_form,
    };
    assert_eq!(
        header(&denied.headers, "content-type"),
        Some(&*denied_form),
        "{ctx}"
    );
    assert_eq!(header(&denied.headers, "grpc-status"), Some("8"), "{ctx}");
    let message = percent_decode(header(&denied.headers, "grpc-message").unwrap());
    assert_eq!(
        message, "Quota exceeded for hello. Please retry after 60 seconds.",
        "{ctx}"
    );
    assert!(
        header(&denied.headers, "grpc-status-details-bin").is_some(),
        "{ctx}"
    );
    assert_eq!(header(&denied.headers, "retry-after"), Some("60"), "{ctx}");
    assert!(denied.body.is_empty(), "{ctx}: {:?}", denied.body);
}

#[tokio::test]
async fn throttle_outside_grpc_web_answers_in_the_requests_content_type() {
    for ct in [
        "application/grpc-web",
        "application/grpc-web+proto",
        "application/grpc-web-text",
        "application/grpc-web-text+proto",
    ] {
        check(true, ct).await;
    }
}

#[tokio::test]
async fn throttle_inside_grpc_web_is_translated_by_tonic_web() {
    for ct in [
        "application/grpc-web",
        "application/grpc-web+proto",
        "application/grpc-web-text",
        "application/grpc-web-text+proto",
    ] {
        check(false, ct).await;
    }
}
