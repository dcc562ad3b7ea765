//! What the benchmarks share: the request every Envoy subject decides, the
//! rule as the file writes it, limitador's RLS `Context` and answer, one
//! poll of a future that needs no runtime, the child run of the
//! instruction counts, and the commands a Redis ran.

use std::collections::HashMap;
use std::pin::pin;
use std::task::{Context as TaskContext, Poll, Waker};

use limitador::limit::Context;
use throttle_fleet_config::GatewayConfig;
use throttle_fleet_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use throttle_fleet_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use throttle_fleet_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};

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

/// limitador-server's answer to `ShouldRateLimit` by default: the overall
/// code alone (no headers, no statuses).
pub fn limitador_response(limited: bool) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: if limited { Code::OverLimit } else { Code::Ok } as i32,
        ..Default::default()
    }
}

/// What the instruction-count binaries measure: one decision for the
/// client numbered `i`, allowed or not.
pub trait Subject {
    /// Decides for client `i`.
    fn decide(&self, i: usize) -> bool;
}

/// The counted part: the binaries run callgrind with
/// `--toggle-collect=*measured*`, so only this function is counted.
#[inline(never)]
pub fn measured(subject: &dyn Subject, order: &[usize]) -> usize {
    order.iter().map(|&i| usize::from(subject.decide(i))).sum()
}

/// One child run under callgrind: `spec` is `<scenario> <subject>`, a
/// scenario being `(name, clients, denied)`; `make` builds the subject.
/// Every client is decided once before the count (and so used up when
/// the scenario is denied); then `decisions` decisions over the clients,
/// which must all be allowed, or all denied (the empty `loop` allows).
pub fn child(
    spec: &str,
    scenarios: &[(&str, usize, bool)],
    decisions: usize,
    make: impl Fn(&str, usize, bool) -> Box<dyn Subject>,
) {
    let (scenario, name) = spec.split_once(' ').expect("`<scenario> <subject>`");
    let &(_, clients, denied) = scenarios
        .iter()
        .find(|(s, ..)| *s == scenario)
        .expect("a known scenario");
    let subject = make(name, clients, denied);
    for i in 0..clients {
        assert!(subject.decide(i), "{spec}: the setup decision was denied");
    }
    let order: Vec<usize> = (0..decisions).map(|n| (n * 7_919) % clients).collect();
    let allowed = measured(&*subject, &order);
    let expected = if denied && name != "loop" {
        0
    } else {
        decisions
    };
    assert_eq!(std::hint::black_box(allowed), expected, "{spec}");
}

/// The commands a Redis ran since its stats were reset (this program's own
/// `INFO` and `CONFIG` left out).
pub struct Commands {
    /// All of them.
    pub total: u64,
    /// Script calls (`EVAL`, `EVALSHA`).
    pub scripts: u64,
    /// `PING`s (our node watch's heartbeats and probes).
    pub pings: u64,
    /// Each command's calls, by name, sorted.
    pub named: Vec<(String, u64)>,
}

/// Reads [`Commands`] from `INFO commandstats`.
pub async fn redis_commands(conn: &mut redis::aio::MultiplexedConnection) -> Commands {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO answers");
    let calls = |l: &str| {
        l.split("calls=")
            .nth(1)
            .and_then(|c| c.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut commands = Commands {
        total: 0,
        scripts: 0,
        pings: 0,
        named: Vec::new(),
    };
    for l in info.lines().filter(|l| {
        l.starts_with("cmdstat_")
            && !l.starts_with("cmdstat_info")
            && !l.starts_with("cmdstat_config")
    }) {
        commands.total += calls(l);
        if let Some((name, _)) = l.trim_start_matches("cmdstat_").split_once(':') {
            commands.named.push((name.to_owned(), calls(l)));
        }
        if l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:") {
            commands.scripts += calls(l);
        }
        if l.starts_with("cmdstat_ping:") {
            commands.pings += calls(l);
        }
    }
    commands.named.sort();
    commands
}
