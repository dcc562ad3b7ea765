//! Instructions per check (callgrind), ours side by side with governor's
//! keyed limiter and throttle-kit's: the figure this shared machine does not move.
//! Beside them, a concurrency rule's meter: a slot taken (the request path)
//! and a slot taken and given back (the whole request); and the same whole
//! request through `RuleSet` under an adaptive limit (the shedding path:
//! the class's limit, the admission counted, the latency sampled).
//!
//! Run with `cargo bench -p throttle-fleet-core --bench check_instructions`
//! (needs `valgrind` on the path; a few minutes). The subjects and
//! scenarios are those of the `check` benchmark, one thread each:
//! `allowed/1`, `allowed/10k`, `allowed/1M` and `denied` (name some to run
//! only those).
//!
//! The binary starts itself again under
//! `valgrind --tool=callgrind --toggle-collect=*measured*` once per subject,
//! scenario and run: the child sets the scenario up (outside the count),
//! then makes `CHECKS` checks inside `measured`, the only function whose
//! instructions are collected. `loop` is the same loop with no check, and
//! the table subtracts it. Each figure is the least of three runs (a check
//! that reads the clock can differ by a few instructions from run to run).
//!
//! tower-rate-limiter's memory store is measured beside the first four
//! subjects, with this file's scenarios and `common`, by
//! `benches/tower-rate-limiter/run.sh check` at the workspace's root: it
//! cannot be a dependency here (every 0.1.x release declares a
//! `rust-version` above the workspace's toolchain).

#[path = "support/callgrind.rs"]
mod callgrind;
mod common;

use std::hint::black_box;

use common::{ORDER_MASK, Subject};

/// Checks made inside the counted function.
const CHECKS: usize = 200_000;
const RUNS: usize = 3;
const CHILD_VAR: &str = "THROTTLE_CHECK_INSTRUCTIONS_CHILD";
const SCENARIOS: [(&str, u64, bool); 4] = [
    ("allowed/1", 1, false),
    ("allowed/10k", 10_000, false),
    ("allowed/1M", 1_000_000, false),
    ("denied", 1, true),
];
const SUBJECTS: [&str; 8] = [
    "loop",
    "throttle",
    "throttle_ruleset",
    "governor",
    "throttle_kit",
    "throttle_concurrency",
    "throttle_concurrency_ended",
    "throttle_shedding_ended",
];

/// Nothing but the benchmark's loop: what every other subject also pays.
struct Loop;

impl Subject for Loop {
    #[inline]
    fn check(&self, key: u64) -> bool {
        key != u64::MAX
    }
}

/// The counted part: `CHECKS` checks in the shared visiting order.
#[inline(never)]
fn measured<S: Subject + ?Sized>(subject: &S, order: &[u64]) -> usize {
    let mut allowed = 0;
    for i in 0..CHECKS {
        allowed += usize::from(subject.check(black_box(order[i & ORDER_MASK])));
    }
    allowed
}

fn child(spec: &str) {
    let (scenario, subject) = spec.split_once(' ').expect("`<scenario> <subject>`");
    let &(_, keys, denied) = SCENARIOS
        .iter()
        .find(|(name, ..)| *name == scenario)
        .expect("a known scenario");
    let (subjects, order) = common::scenario(keys, denied, Some(subject));
    let allowed = match subject {
        "loop" => measured(&Loop, &order),
        "throttle" => measured(&subjects.ours, &order),
        "throttle_ruleset" => measured(&subjects.ruleset, &order),
        "governor" => measured(&subjects.governor, &order),
        "throttle_kit" => measured(&subjects.throttle_kit, &order),
        "throttle_concurrency" => measured(&subjects.concurrency, &order),
        "throttle_concurrency_ended" => measured(&subjects.concurrency_ended, &order),
        "throttle_shedding_ended" => measured(&subjects.shedding_ended, &order),
        other => panic!("unknown subject {other}"),
    };
    let expected = if denied && subject != "loop" {
        0
    } else {
        CHECKS
    };
    assert_eq!(black_box(allowed), expected, "{spec}");
}

/// Instructions collected in one child run.
fn collected(scenario: &str, subject: &str) -> u64 {
    callgrind::collected(CHILD_VAR, &format!("{scenario} {subject}"))
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_VAR) {
        child(&spec);
        return;
    }
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    println!(
        "instructions per check, least of {RUNS} callgrind runs of {CHECKS} checks, loop subtracted"
    );
    println!();
    println!(
        "| scenario | throttle | ruleset | governor | throttle-kit | ruleset / governor | ruleset / throttle-kit | concurrency: slot taken | concurrency: taken and given back | adaptive rule through the rule set: taken and given back |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (scenario, ..) in SCENARIOS {
        if !filter.is_empty() && !filter.iter().any(|f| f == scenario) {
            continue;
        }
        let per_check: Vec<f64> = SUBJECTS
            .iter()
            .map(|subject| {
                let least = (0..RUNS)
                    .map(|_| collected(scenario, subject))
                    .min()
                    .expect("at least one run");
                least as f64 / CHECKS as f64
            })
            .collect();
        let [ours, ruleset, governor, kit, concurrency, ended, shedding] =
            [1, 2, 3, 4, 5, 6, 7].map(|i| per_check[i] - per_check[0]);
        println!(
            "| {scenario} | {ours:.1} | {ruleset:.1} | {governor:.1} | {kit:.1} | {:.2} | {:.2} | {concurrency:.1} | {ended:.1} | {shedding:.1} |",
            ruleset / governor,
            ruleset / kit
        );
    }
}
