//! The core of throttle: quotas, rules, keys, decisions, the five rate-limit
//! algorithms as pure state machines, the backend trait and the bounded
//! in-memory backend. No HTTP and no Redis here; `throttle-fleet-tower` and the
//! integration crates build on it.
//!
//! ```
//! use throttle_fleet_core::{Answer, Decision, Demand, Key, MemoryBackend, Quota, Rule, RuleSet};
//!
//! let mut rules = RuleSet::new();
//! let backend = MemoryBackend::default();
//! let tenant = rules.bind(Rule::new("tenant", Quota::per_second(100)).sliding_window_counter(), &backend)?;
//! let search = rules.bind(Rule::new("search", Quota::per_minute(20)).fixed_window(), &backend)?;
//!
//! let key = Key::new("acme");
//! let demands = [Demand { rule: tenant, key, cost: 1 }, Demand { rule: search, key, cost: 1 }];
//! match rules.check(&demands) {
//!     Answer::Ready(Decision::Allowed(a)) => assert_eq!(rules.rule(a.rule).name(), "search"), // fewest left
//!     other => panic!("{other:?}"),
//! }
//! # Ok::<(), throttle_fleet_core::ConfigError>(())
//! ```

// docs.rs (`--cfg docsrs`, nightly) marks each feature-gated item with
// the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod algorithm;
mod answer;
pub mod backend;
pub mod clock;
pub mod decision;
mod error;
mod key;
pub mod limits;
pub mod memory;
mod quota;
mod rule;
pub mod rule_set;
pub mod sim;
mod tier;

pub use algorithm::Algorithm;
pub use answer::Answer;
pub use backend::Backend;
pub use clock::{Clock, ManualClock, SystemClock};
pub use decision::{Allowed, Decision, Demand, Denied, Refused};
pub use error::ConfigError;
pub use key::Key;
pub use memory::MemoryBackend;
pub use quota::Quota;
pub use rule::{FailurePolicy, Rule};
pub use rule_set::RuleSet;
pub use tier::Tiers;
