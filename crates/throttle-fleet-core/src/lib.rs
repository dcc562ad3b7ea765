//! The core of throttle: quotas, rules, keys, decisions, the five rate-limit
//! algorithms as pure state machines, the backend trait and the bounded
//! in-memory backend. No HTTP and no Redis here; `throttle-fleet-tower` and the
//! integration crates build on it.
//!
//! ```
//! use throttle_fleet_core::{Answer, decision::Demand, Key, memory::MemoryBackend, Quota, Rule, rule_set::RuleSet};
//!
//! let mut rules = RuleSet::new();
//! let backend = MemoryBackend::default();
//! let tenant = rules.bind(Rule::new("tenant", Quota::per_second(100)).sliding_window_counter(), &backend)?;
//! let search = rules.bind(Rule::new("search", Quota::per_minute(20)).fixed_window(), &backend)?;
//!
//! let key = Key::new("acme");
//! let demands = [Demand::new(tenant, key, 1), Demand::new(search, key, 1)];
//! let Answer::Ready(checked) = rules.check(&demands) else { unreachable!("memory decides at once") };
//! let decision = checked.decision();
//! assert!(decision.is_allowed());
//! assert_eq!(rules.rule(decision.rule().unwrap()).name(), "search"); // fewest left
//! # Ok::<(), throttle_fleet_core::ConfigError>(())
//! ```

// docs.rs (`--cfg docsrs`, nightly) marks each feature-gated item with
// the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod adaptive;
pub mod algorithm;
mod answer;
pub mod backend;
mod class;
pub mod clock;
pub mod decision;
mod error;
pub mod fields;
mod key;
pub mod limits;
pub mod memory;
pub mod operate;
mod quota;
mod rule;
pub mod rule_set;
mod tier;
mod unavailable;

pub use answer::Answer;
pub use class::Class;
pub use error::ConfigError;
pub use key::Key;
pub use quota::Quota;
pub use rule::{FailurePolicy, InFlightLimit, Rule};
pub use tier::Tiers;

// The crate's own short paths to items whose one public path is their
// module's.
pub(crate) use backend::Backend;
pub(crate) use clock::{Clock, SystemClock};
pub(crate) use decision::Decision;
pub(crate) use rule_set::Checked;
