//! Instructions per check (callgrind): tower-rate-limiter's in-memory store
//! beside the subjects of `throttle-fleet-core`'s `check_instructions`
//! bench (ours bare and through `RuleSet`, governor's keyed limiter,
//! throttle-kit's), all in the same run of this binary.
//!
//! Run with `benches/tower-rate-limiter/run.sh check` (needs `valgrind`;
//! about five minutes, most of it the million keys' setup under valgrind).
//! Scenarios as there: `allowed/1`, `allowed/10k`, `allowed/1M`, `denied`
//! (name some to run only those).
//!
//! The shared subjects, their quota, the visiting order of keys and the
//! callgrind runner are the core bench's own files (`benches/common`,
//! `benches/support/callgrind.rs`), included here, so the figures are the
//! same code measured the same way: the binary starts itself again under
//! `valgrind --tool=callgrind --toggle-collect=*measured*` once per
//! subject, scenario and run; the child sets the scenario up outside the
//! count and makes `CHECKS` checks inside `measured`; `loop` (the same loop
//! with no check) is subtracted; each figure is the least of three runs.

#[path = "../../../../crates/throttle-fleet-core/benches/support/callgrind.rs"]
mod callgrind;
#[allow(dead_code)]
#[path = "../../../../crates/throttle-fleet-core/benches/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::Duration;

use common::{ORDER_MASK, Subject};
use tower_rate_limiter::{MemoryStore, Store};

/// Checks made inside the counted function.
const CHECKS: usize = 200_000;
const RUNS: usize = 3;
const CHILD_VAR: &str = "THROTTLE_TRL_CHECK_INSTRUCTIONS_CHILD";
const SCENARIOS: [(&str, u64, bool); 4] = [
    ("allowed/1", 1, false),
    ("allowed/10k", 10_000, false),
    ("allowed/1M", 1_000_000, false),
    ("denied", 1, true),
];
const SUBJECTS: [&str; 6] = [
    "loop",
    "throttle",
    "throttle_ruleset",
    "governor",
    "throttle_kit",
    "tower_rate_limiter",
];

/// Nothing but the benchmark's loop: what every other subject also pays.
struct Loop;

impl Subject for Loop {
    #[inline]
    fn check(&self, key: u64) -> bool {
        key != u64::MAX
    }
}

/// tower-rate-limiter 0.1.6's `MemoryStore`: a fixed window per key, an
/// `Entry { used, expires_at }` in a moka `sync::Cache<String, Entry>`
/// (unbounded, each entry expiring with its window). What is called is
/// its public `Store::increment(key, window)`, the one call its layer's
/// response future makes to the store for every request: moka's
/// `entry_by_ref(key).and_try_compute_with(..)` (the key's lock, the
/// entry cloned out, one added to `used`, `Op::Put` writing it back and
/// recording the write for moka's housekeeping), then `Instant::now()`
/// for the `Usage`'s reset. The verdict is the layer's own on that
/// `Usage`, `used > limit` (`Policy::is_rate_limited`).
///
/// Its future is `std::future::Ready`, taken apart with `into_inner`
/// (what polling it returns). Its keys are strings: its layer renders the
/// client key (`to_string`), then `"<policy>:<client>"` with each part
/// escaped (two `str::replace` each), and clones the policy's name into a
/// `Policy`, on every request. As for throttle-kit, each key's scoped text
/// is rendered once at setup instead, so that what is counted is the
/// store's check; the HTTP bench counts the layer's whole path.
///
/// The quota: 1 per hour for the denied scenario, as the others. For the
/// allowed ones, 3.6e12 per hour, the others' 1e9 per second as a fixed
/// window that does not end during the run: a window of one second would
/// expire under valgrind between the setup and the count (a million keys'
/// setup takes minutes there), and every check would then start a new
/// window while moka evicts the old one, which no other subject pays.
struct TowerRateLimiter {
    store: MemoryStore,
    window: Duration,
    limit: u64,
    keys: Vec<String>,
}

impl TowerRateLimiter {
    fn new(keys: u64, denied: bool) -> Self {
        let (limit, window) = if denied {
            (1, Duration::from_secs(3600))
        } else {
            (3_600 * 1_000_000_000, Duration::from_secs(3600))
        };
        Self {
            store: MemoryStore::new(),
            window,
            limit,
            // What its layer passes the store for the client `k` under a
            // policy named `bench` (`make_key`: nothing here to escape).
            keys: (0..keys.max(1)).map(|k| format!("bench:{k}")).collect(),
        }
    }
}

impl Subject for TowerRateLimiter {
    #[inline]
    fn check(&self, key: u64) -> bool {
        let usage = self
            .store
            .increment(&self.keys[key as usize], self.window)
            .into_inner()
            .expect("the memory store does not fail");
        usage.used <= self.limit
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
        "tower_rate_limiter" => {
            drop(subjects);
            let trl = TowerRateLimiter::new(keys, denied);
            // Every key tracked before the count, as `common::scenario`
            // does for the others.
            for key in 0..keys {
                assert!(trl.check(key), "tower_rate_limiter: setup check was denied");
            }
            if denied {
                assert!(
                    !trl.check(0),
                    "tower_rate_limiter: the second check must be denied"
                );
            }
            measured(&trl, &order)
        }
        other => panic!("unknown subject {other}"),
    };
    let expected = if denied && subject != "loop" {
        0
    } else {
        CHECKS
    };
    assert_eq!(black_box(allowed), expected, "{spec}");
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
        "| scenario | throttle | ruleset | governor | throttle-kit | tower-rate-limiter | tower-rate-limiter / ruleset |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (scenario, ..) in SCENARIOS {
        if !filter.is_empty() && !filter.iter().any(|f| f == scenario) {
            continue;
        }
        let per_check: Vec<f64> = SUBJECTS
            .iter()
            .map(|subject| {
                let runs: Vec<u64> = (0..RUNS)
                    .map(|_| callgrind::collected(CHILD_VAR, &format!("{scenario} {subject}")))
                    .collect();
                eprintln!("{scenario} {subject}: {runs:?}");
                *runs.iter().min().expect("at least one run") as f64 / CHECKS as f64
            })
            .collect();
        let [ours, ruleset, governor, kit, trl] =
            [1, 2, 3, 4, 5].map(|i| per_check[i] - per_check[0]);
        println!(
            "| {scenario} | {ours:.1} | {ruleset:.1} | {governor:.1} | {kit:.1} | {trl:.1} | {:.2} |",
            trl / ruleset
        );
    }
}
