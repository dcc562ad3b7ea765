//! What the Envoy benchmarks share: the request every subject decides, the
//! rule as the file writes it, limitador's RLS `Context`, one poll of a
//! future that needs no runtime.

use std::collections::HashMap;
use std::pin::pin;
use std::task::{Context as TaskContext, Poll, Waker};

use limitador::limit::Context;
use throttle_fleet_config::GatewayConfig;
use throttle_fleet_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use throttle_fleet_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

/// The limit and period (seconds) of a scenario: 1 an hour, used up before
/// the count (`denied`), or a quota no run reaches.
pub fn limit(denied: bool) -> (u64, u64) {
    if denied {
        (1, 3600)
    } else {
        (1_000_000_000_000, 60)
    }
}

/// `ShouldRateLimit`'s request for `user`, decoded: domain `api`, one
/// descriptor `[("user_id", user)]`.
pub fn request(user: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "api".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user_id".to_owned(),
                value: user.to_owned(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// The file with `backend` (its `[backend]` table, or nothing for memory)
/// and the rule every Envoy subject decides by: `limit` a `period_secs`,
/// fixed window (limitador's algorithm), on `descriptor = ["user_id"]`.
pub fn config(backend: &str, limit: u64, period_secs: u64) -> GatewayConfig {
    let toml = format!(
        r#"
        {backend}

        [[rules]]
        name = "per-user"
        domain = "api"
        descriptor = ["user_id"]
        algorithm = "fixed_window"
        limit = {limit}
        period_secs = {period_secs}
        "#
    );
    GatewayConfig::parse("bench.toml", &toml, None).expect("a valid file")
}

/// limitador-server's `ShouldRateLimit` body, the transport aside: the
/// `Context` its RLS builds from a request's descriptors (the CEL list
/// `descriptors`, which its limits' variables index).
pub fn limitador_context(request: &RateLimitRequest) -> Context<'static> {
    let values: Vec<HashMap<String, String>> = request
        .descriptors
        .iter()
        .map(|d| {
            d.entries
                .iter()
                .map(|e| (e.key.clone(), e.value.clone()))
                .collect()
        })
        .collect();
    let mut ctx = Context::default();
    ctx.list_binding("descriptors".to_owned(), values);
    ctx
}

/// The future's output if it is ready at the first poll (the memory
/// backend decides without waiting: no runtime is counted).
pub fn poll_once<F: Future>(future: F) -> Option<F::Output> {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut TaskContext::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => Some(out),
        Poll::Pending => None,
    }
}
