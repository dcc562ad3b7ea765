//! Instructions per Envoy rate limit decision (callgrind): our RLS v3
//! service's `Rls::decide` on the memory backend next to limitador's
//! in-memory `RateLimiter`, the transport aside, the same descriptors in
//! the same order.
//!
//! ```text
//! cargo run --release --bin envoy_instructions    # needs valgrind
//! ```
//!
//! Every subject limits one descriptor, `[("user_id", "client-<i>")]` in
//! the domain (limitador: namespace) `api`, by one fixed window (limitador's
//! only algorithm): a huge quota per minute (nothing denied) or 1 per hour
//! (the key used up during setup: every decision denied).
//!
//! - `throttle_window`: `RuleSet::check` of one demand, the key built from
//!   the client's text (`Key::new`): the core alone, for reference.
//! - `rls_memory`: `Rls::decide` on a decoded `RateLimitRequest` with that
//!   descriptor, the rule `domain = "api"`, `descriptor = ["user_id"]`,
//!   `algorithm = "fixed_window"` read from TOML, the memory backend: the
//!   domain and descriptor matched, the check, and the whole response
//!   (each descriptor's status with `current_limit` and the time to reset,
//!   the `ratelimit-policy` and `ratelimit` fields, `retry-after` when
//!   denied). The future is polled once with a no-op waker (the memory
//!   backend answers at once): no runtime is counted.
//! - `limitador_memory`: `RateLimiter::check_rate_limited_and_update` on
//!   its in-memory storage, one `Limit` in namespace `api` with the
//!   variable `user_id`, the `Context` built from a map of the descriptor's
//!   entry (as `limitador_instructions` does).
//! - `limitador_rls`: what limitador's own Envoy server (limitador-server's
//!   `envoy_rls`) does per request, the transport aside: the namespace from
//!   the request's domain, every descriptor's entries into a map, the maps
//!   bound as the CEL list `descriptors` (`Context::list_binding`, the
//!   library's only descriptor-shaped entry point), the `Limit`'s variable
//!   `descriptors[0].user_id`, the same check, and a `RateLimitResponse`
//!   with the overall code (its server's default sends no headers and no
//!   per-descriptor statuses).
//!
//! The binary starts itself again under `valgrind --tool=callgrind
//! --toggle-collect=*measured*` once per subject, scenario and run; only
//! `measured` is counted, the empty loop (`loop`) is subtracted, and each
//! figure is the least of three runs.

// The core's instruction-count runner, so all count the same way.
#[path = "../../../../crates/throttle-fleet-core/benches/support/callgrind.rs"]
mod callgrind;

use std::collections::HashMap;
use std::hint::black_box;
use throttle_fleet_limitador_bench::{
    Subject, config, limitador_context, limitador_response, poll_once, request,
};

use limitador::RateLimiter;
use limitador::limit::{Context, Limit, Namespace};
use throttle_fleet_core::{Answer, decision::Demand, Key, memory::MemoryBackend, Quota, Rule, rule_set::RuleSet};
use throttle_fleet_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, rate_limit_response::Code,
};
use throttle_fleet_envoy::{EnvoyRules, Rls};

const DECISIONS: usize = 20_000;
const RUNS: usize = 3;
const CHILD_VAR: &str = "THROTTLE_ENVOY_INSTRUCTIONS_CHILD";
const SCENARIOS: [(&str, usize, bool); 3] = [
    ("allowed/1", 1, false),
    ("allowed/10k", 10_000, false),
    ("denied", 1, true),
];
const SUBJECTS: [&str; 5] = [
    "loop",
    "throttle_window",
    "rls_memory",
    "limitador_memory",
    "limitador_rls",
];

/// The requests as Envoy sends them (decoded), one per client.
fn requests(clients: usize) -> Vec<RateLimitRequest> {
    (0..clients)
        .map(|i| request(&format!("client-{i}")))
        .collect()
}

struct Loop(Vec<RateLimitRequest>);

impl Subject for Loop {
    fn decide(&self, i: usize) -> bool {
        !black_box(&self.0[i]).domain.is_empty()
    }
}

struct Core {
    rules: RuleSet,
    rule: usize,
    requests: Vec<RateLimitRequest>,
}

impl Subject for Core {
    fn decide(&self, i: usize) -> bool {
        let demand = [Demand::new(self.rule, Key::new(&self.requests[i].descriptors[0].entries[0].value), 1)];
        match self.rules.check(&demand) {
            Answer::Ready(checked) => checked.decision().is_allowed(),
            Answer::Pending(_) => unreachable!("the memory backend decides at once"),
        }
    }
}

struct RlsMemory {
    rls: Rls,
    requests: Vec<RateLimitRequest>,
}

impl Subject for RlsMemory {
    fn decide(&self, i: usize) -> bool {
        let response = poll_once(self.rls.decide(&self.requests[i]))
            .expect("the memory backend answers at once")
            .expect("a valid request");
        response.overall_code == Code::Ok as i32
    }
}

fn rls_memory(limit: u64, period_secs: u64, requests: Vec<RateLimitRequest>) -> RlsMemory {
    let config = config("", limit, period_secs);
    let rules =
        EnvoyRules::new(&config, "bench.toml", MemoryBackend::default()).expect("valid rules");
    RlsMemory {
        rls: Rls::new(rules),
        requests,
    }
}

struct LimitadorMemory {
    limiter: RateLimiter,
    namespace: Namespace,
    requests: Vec<RateLimitRequest>,
}

impl Subject for LimitadorMemory {
    fn decide(&self, i: usize) -> bool {
        let entry = &self.requests[i].descriptors[0].entries[0];
        let values = HashMap::from([(entry.key.clone(), entry.value.clone())]);
        let ctx = Context::from(values);
        let result = self
            .limiter
            .check_rate_limited_and_update(&self.namespace, &ctx, 1)
            .expect("the in-memory storage answers");
        !result.limited
    }
}

struct LimitadorRls {
    limiter: RateLimiter,
    requests: Vec<RateLimitRequest>,
}

impl Subject for LimitadorRls {
    fn decide(&self, i: usize) -> bool {
        let request = &self.requests[i];
        let namespace = Namespace::from(request.domain.clone());
        let hits = u64::from(request.hits_addend.max(1));
        let ctx = limitador_context(request);
        let result = self
            .limiter
            .check_rate_limited_and_update(&namespace, &ctx, hits)
            .expect("the in-memory storage answers");
        black_box(limitador_response(result.limited)).overall_code == Code::Ok as i32
    }
}

fn limitador(max: u64, seconds: u64, variable: &str) -> RateLimiter {
    let limiter = RateLimiter::new(100_000);
    let variable = variable.try_into().expect("a valid variable");
    limiter.add_limit(Limit::new("api", max, seconds, [], [variable]));
    limiter
}

fn subject(name: &str, clients: usize, denied: bool) -> Box<dyn Subject> {
    let requests = requests(clients);
    let (max, seconds) = if denied {
        (1, 3600)
    } else {
        (1_000_000_000_000, 60)
    };
    match name {
        "loop" => Box::new(Loop(requests)),
        "throttle_window" => {
            let mut rules = RuleSet::new();
            let rule = rules
                .bind(
                    Rule::new(
                        "per-user",
                        Quota::new(max, std::time::Duration::from_secs(seconds)),
                    )
                    .fixed_window(),
                    &MemoryBackend::default(),
                )
                .expect("a valid rule");
            Box::new(Core {
                rules,
                rule,
                requests,
            })
        }
        "rls_memory" => Box::new(rls_memory(max, seconds, requests)),
        "limitador_memory" => Box::new(LimitadorMemory {
            limiter: limitador(max, seconds, "user_id"),
            namespace: Namespace::from("api"),
            requests,
        }),
        "limitador_rls" => Box::new(LimitadorRls {
            limiter: limitador(max, seconds, "descriptors[0].user_id"),
            requests,
        }),
        other => panic!("unknown subject {other}"),
    }
}

fn child(spec: &str) {
    throttle_fleet_limitador_bench::child(spec, &SCENARIOS, DECISIONS, subject);
}

fn collected(scenario: &str, subject: &str) -> u64 {
    callgrind::collected(CHILD_VAR, &format!("{scenario} {subject}"))
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_VAR) {
        child(&spec);
        return;
    }
    // `ENVOY_ONLY=<subject>`: that subject alone (with the loop), for a
    // quick look.
    let only = std::env::var("ENVOY_ONLY").unwrap_or_default();
    println!(
        "instructions per decision, least of {RUNS} callgrind runs of {DECISIONS} decisions, loop subtracted"
    );
    println!();
    println!(
        "| scenario | throttle RuleSet, fixed window | throttle Rls::decide, memory | limitador, Context of user_id | limitador, its RLS's descriptors Context | limitador RLS / Rls::decide |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (scenario, ..) in SCENARIOS {
        let per: Vec<f64> = SUBJECTS
            .iter()
            .map(|s| {
                if *s != "loop" && !only.is_empty() && *s != only {
                    return f64::NAN;
                }
                let least = (0..RUNS).map(|_| collected(scenario, s)).min().unwrap_or(0);
                least as f64 / DECISIONS as f64
            })
            .collect();
        let [core, rls, memory, descriptors] = [1, 2, 3, 4].map(|i| per[i] - per[0]);
        println!(
            "| {scenario} | {core:.0} | {rls:.0} | {memory:.0} | {descriptors:.0} | {:.1} |",
            descriptors / rls
        );
    }
}
