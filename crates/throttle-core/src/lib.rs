//! The core of throttle: quotas, rules, keys, decisions, the five rate-limit
//! algorithms as pure state machines, the backend trait and the bounded
//! in-memory backend. No HTTP and no Redis here; `throttle-tower` and the
//! integration crates build on it.
//!
//! ```
//! use throttle_core::{Answer, Decision, Demand, Key, MemoryBackend, Quota, Rule, RuleSet};
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
//! # Ok::<(), throttle_core::ConfigError>(())
//! ```

pub mod algorithm;
mod backend;
mod clock;
mod decision;
mod error;
mod key;
mod memory;
mod quota;
mod rule;
mod rule_set;
pub mod sim;
mod tier;

pub use algorithm::{Algorithm, Meter, Step};
pub use backend::{Acquire, Backend, Limiter, Outcome, Pending<Result<Outcome, Unavailable>>, Unavailable};
pub use clock::{Clock, ManualClock, SystemClock, WallClock, unix_now_us};
pub use decision::{Allowed, Charged, Check, Decision, Demand, Denied, Refused, ShadowDenials};
pub use error::ConfigError;
pub use key::{Key, MAX_KEY_LEN};
pub use memory::{DEFAULT_MAX_KEYS, MemoryBackend, MemoryLimiter, MemoryStats};
pub use quota::{MAX_LIMIT, MAX_PERIOD, MIN_PERIOD, Quota};
pub use rule::{FailurePolicy, MAX_RULE_NAME_LEN, MeterVisitor, Rule};
pub use rule_set::{Carried, RuleSet};
pub use tier::{MAX_TIER_QUOTAS, Tiers};
