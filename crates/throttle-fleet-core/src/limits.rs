//! The bounds the core enforces, each checked when a rule or key is made
//! (the error names the field).

pub use crate::key::MAX_KEY_LEN;
pub use crate::operate::blocks::MAX_BLOCKED_KEYS;
pub use crate::operate::penalty::MAX_TRACKED_KEYS;
pub use crate::quota::{MAX_LIMIT, MAX_PERIOD, MIN_PERIOD};
pub use crate::rule::{DEFAULT_SLOT_TTL, MAX_RULE_NAME_LEN, MAX_SLOT_TTL, MIN_SLOT_TTL};
pub use crate::rule_set::operate::MAX_BLOCK;
pub use crate::tier::MAX_TIER_QUOTAS;

/// How many rules of a policy may be shadow rules (the first ones).
pub const MAX_SHADOW_RULES: usize = crate::decision::ShadowDenials::CAPACITY;

/// How many rules a rule set may hold (a decision names its rule in 16
/// bits).
pub const MAX_RULES: usize = u16::MAX as usize;

/// The default bound on keys tracked per rule (the memory backend's, and
/// the Redis modes' local tables).
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;
