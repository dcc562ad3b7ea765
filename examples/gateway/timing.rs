//! `--server-timing`: every response says how long the gateway took over
//! it, from the parsed request to the response's head, in a
//! `Server-Timing: gateway;dur=<ms>` header. The handlers answer at once,
//! so that is the rate limiter's decision, a Redis round trip included when
//! a request waits for one: what a client cannot tell apart from its own
//! scheduling (`benches/gateway-fleet` reads it). Off by default.

use std::time::Instant;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::http::header::HeaderName;
use axum::middleware::Next;
use axum::response::Response;

const SERVER_TIMING: HeaderName = HeaderName::from_static("server-timing");

pub(crate) async fn server_timing(req: Request, next: Next) -> Response {
    let start = Instant::now();
    let mut res = next.run(req).await;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    if let Ok(v) = HeaderValue::from_str(&format!("gateway;dur={ms:.3}")) {
        res.headers_mut().insert(SERVER_TIMING, v);
    }
    res
}
