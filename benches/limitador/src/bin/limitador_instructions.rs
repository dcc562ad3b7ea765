//! Instructions per check (callgrind): our rule set on the memory backend
//! next to limitador's in-memory `RateLimiter`, library call to library
//! call, the same keys in the same order.
//!
//! ```text
//! cargo run --release --bin limitador_instructions    # needs valgrind
//! ```
//!
//! Subjects, each one rule of "a huge quota per minute per client" (nothing
//! denied) or "1 per hour" (the key used up during setup: every check
//! denied):
//!
//! - `throttle_window`: `RuleSet::check` of one demand, a fixed-window rule
//!   (limitador's algorithm) on the memory backend, the key built from the
//!   client's text (`Key::new`), as an extractor would.
//! - `throttle_bucket`: the same with the default token bucket.
//! - `limitador`: `RateLimiter::check_rate_limited_and_update` on its
//!   in-memory storage, one `Limit` with the variable `client`, the
//!   request's values given as its API takes them (a `Context` built from a
//!   map of the client's text).
//!
//! The binary starts itself again under `valgrind --tool=callgrind
//! --toggle-collect=*measured*` once per subject, scenario and run; only
//! `measured` is counted, the empty loop (`loop`) is subtracted, and each
//! figure is the least of three runs.

// The core's instruction-count runner, so both count the same way.
#[path = "../../../../crates/throttle-fleet-core/benches/support/callgrind.rs"]
mod callgrind;

use std::collections::HashMap;
use std::hint::black_box;

use limitador::RateLimiter;
use limitador::limit::{Context, Limit, Namespace};
use throttle_fleet_core::{Answer, decision::Demand, Key, memory::MemoryBackend, Quota, Rule, rule_set::RuleSet};
use throttle_fleet_limitador_bench::Subject;

const CHECKS: usize = 20_000;
const RUNS: usize = 3;
const CHILD_VAR: &str = "THROTTLE_LIMITADOR_INSTRUCTIONS_CHILD";
const SCENARIOS: [(&str, usize, bool); 3] = [
    ("allowed/1", 1, false),
    ("allowed/10k", 10_000, false),
    ("denied", 1, true),
];
const SUBJECTS: [&str; 4] = ["loop", "throttle_window", "throttle_bucket", "limitador"];

struct Loop(Vec<String>);

impl Subject for Loop {
    fn decide(&self, i: usize) -> bool {
        !black_box(&self.0[i]).is_empty()
    }
}

struct Ours {
    rules: RuleSet,
    rule: usize,
    names: Vec<String>,
}

impl Ours {
    fn new(rule: Rule, names: Vec<String>) -> Self {
        let mut rules = RuleSet::new();
        let rule = rules
            .bind(rule, &MemoryBackend::default())
            .expect("a valid rule");
        Self { rules, rule, names }
    }
}

impl Subject for Ours {
    fn decide(&self, i: usize) -> bool {
        let demand = [Demand::new(self.rule, Key::new(&self.names[i]), 1)];
        match self.rules.check(&demand) {
            Answer::Ready(checked) => checked.decision().is_allowed(),
            Answer::Pending(_) => unreachable!("the memory backend decides at once"),
        }
    }
}

struct Limitador {
    limiter: RateLimiter,
    namespace: Namespace,
    names: Vec<String>,
}

impl Limitador {
    fn new(max: u64, seconds: u64, names: Vec<String>) -> Self {
        let limiter = RateLimiter::new(100_000);
        let client = "client".try_into().expect("a valid variable");
        limiter.add_limit(Limit::new("bench", max, seconds, [], [client]));
        Self {
            limiter,
            namespace: Namespace::from("bench"),
            names,
        }
    }
}

impl Subject for Limitador {
    fn decide(&self, i: usize) -> bool {
        let values = HashMap::from([("client".to_owned(), self.names[i].clone())]);
        let ctx = Context::from(values);
        let result = self
            .limiter
            .check_rate_limited_and_update(&self.namespace, &ctx, 1)
            .expect("the in-memory storage answers");
        !result.limited
    }
}

fn subject(name: &str, clients: usize, denied: bool) -> Box<dyn Subject> {
    let names: Vec<String> = (0..clients).map(|i| format!("client-{i}")).collect();
    let (quota, max, seconds) = if denied {
        (Quota::per_hour(1), 1, 3600)
    } else {
        (Quota::per_minute(1_000_000_000_000), 1_000_000_000_000, 60)
    };
    match name {
        "loop" => Box::new(Loop(names)),
        "throttle_window" => Box::new(Ours::new(Rule::new("client", quota).fixed_window(), names)),
        "throttle_bucket" => Box::new(Ours::new(Rule::new("client", quota).token_bucket(), names)),
        "limitador" => Box::new(Limitador::new(max, seconds, names)),
        other => panic!("unknown subject {other}"),
    }
}

fn child(spec: &str) {
    throttle_fleet_limitador_bench::child(spec, &SCENARIOS, CHECKS, subject);
}

fn collected(scenario: &str, subject: &str) -> u64 {
    callgrind::collected(CHILD_VAR, &format!("{scenario} {subject}"))
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_VAR) {
        child(&spec);
        return;
    }
    println!(
        "instructions per check, least of {RUNS} callgrind runs of {CHECKS} checks, loop subtracted"
    );
    println!();
    println!(
        "| scenario | throttle, fixed window | throttle, token bucket | limitador | limitador / throttle window |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (scenario, ..) in SCENARIOS {
        let per: Vec<f64> = SUBJECTS
            .iter()
            .map(|s| {
                let least = (0..RUNS).map(|_| collected(scenario, s)).min().unwrap_or(0);
                least as f64 / CHECKS as f64
            })
            .collect();
        let [window, bucket, limitador] = [1, 2, 3].map(|i| per[i] - per[0]);
        println!(
            "| {scenario} | {window:.0} | {bucket:.0} | {limitador:.0} | {:.1} |",
            limitador / window
        );
    }
}
