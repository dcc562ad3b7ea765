//! The engine on its own, without a `Service`: a request's parts in, what
//! to do with it out.

use std::sync::Arc;

use http::Request;
use throttle_fleet_core::{Answer, Quota, Rule, clock::ManualClock, memory::MemoryBackend};

use super::{Engine, Next};
use crate::key::Global;
use crate::{HttpResponder, Policy, RequestHead};

fn request() -> Request<()> {
    Request::get("/").body(()).unwrap()
}

/// What the engine makes of one request.
fn next(engine: &Engine<HttpResponder>) -> Next {
    let req = request();
    let head = RequestHead::of(&req);
    match engine.prepare(&head) {
        Ok(Answer::Ready(checked)) => engine.next(&head, checked.decision()),
        _ => panic!("a memory backend decides at once"),
    }
}

#[test]
fn calls_with_headers_until_the_quota_then_rejects_with_429() {
    let policy = Policy::new().rule(Rule::new("global", Quota::per_minute(2)), Global);
    let backend = Arc::new(MemoryBackend::with_clock(ManualClock::new(0)));
    let (engine, carried) = Engine::build(policy, backend, HttpResponder::default(), None).unwrap();
    assert_eq!(carried.len(), 1);
    for remaining in ["1", "0"] {
        let Next::Call(headers) = next(&engine) else {
            panic!("the quota allows two")
        };
        let mut map = http::HeaderMap::new();
        headers.apply(&mut map);
        assert_eq!(map["x-ratelimit-remaining"], remaining);
    }
    let Next::Reject(response) = next(&engine) else {
        panic!("the third is over the quota")
    };
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "30");
}
