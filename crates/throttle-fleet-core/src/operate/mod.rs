//! Operating on keys: reading a key's state without spending from it,
//! resetting it, blocking it for a while, taking or giving back units, and
//! penalties that block a key which keeps being denied, longer each time.
//!
//! The operations are methods of a rule set's
//! [`Operator`](crate::rule_set::Operator) ([`RuleSet::operate`](crate::rule_set::RuleSet::operate):
//! [`inspect`](crate::rule_set::Operator::inspect), [`reset`](crate::rule_set::Operator::reset),
//! [`block`](crate::rule_set::Operator::block), [`unblock`](crate::rule_set::Operator::unblock),
//! [`blocked`](crate::rule_set::Operator::blocked), [`penalize`](crate::rule_set::Operator::penalize),
//! [`reward`](crate::rule_set::Operator::reward)). A backend shares them with the
//! other instances of a fleet through its [`KeyOps`](crate::backend::KeyOps)
//! ([`reset`](crate::backend::KeyOps::reset),
//! [`blocks`](crate::backend::KeyOps::blocks),
//! [`share_block`](crate::backend::KeyOps::share_block),
//! [`violated`](crate::backend::KeyOps::violated)): a backend without them
//! still builds, and its blocks and penalties then hold in this process
//! only.
//!
//! A blocked key is denied before its rule's backend is asked: its
//! requests cost no round trip, and are answered with `Retry-After` equal
//! to what is left of the block.

pub(crate) mod blocks;
pub(crate) mod penalty;
mod room;

use std::fmt;
use std::time::Duration;

pub use blocks::{Block, BlockCause, BlockStats, Blocks};
pub(crate) use penalty::Escalation;
pub use penalty::Penalty;

use crate::unavailable::Unavailable;

/// A key's state under one rule, read without spending from it
/// ([`Operator::inspect`](crate::rule_set::Operator::inspect)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyState {
    /// The most the key can spend at once (the rule's capacity for its
    /// tier).
    pub limit: u64,
    /// Units that would fit now. Zero while the key is blocked.
    pub remaining: u64,
    /// Time until the key is back to its full allowance.
    pub reset_after: Duration,
    /// What is left of a block on the key, if it is blocked.
    pub blocked_for: Option<Duration>,
    /// Whether the backend could not be asked and the figures are the rule's
    /// failure policy's (a fail-open rule's local counts, say).
    pub degraded: bool,
}

/// How far a block or an unblock had reached when it was answered
/// ([`Operator::block`](crate::rule_set::Operator::block),
/// [`Operator::unblock`](crate::rule_set::Operator::unblock)). It holds on this
/// instance at once in every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reach {
    /// This instance only: the rule's backend keeps no fleet (memory).
    Instance,
    /// The fleet: the backend's shared store has it, and every instance
    /// holds it once the change's message reaches it.
    Fleet,
    /// This instance now, the fleet later: the shared store could not be
    /// asked, so the change waits on this instance and is sent when the
    /// store answers again (the most recent change to a key wins, by the
    /// time it was made).
    Queued,
}

/// Why an operation on a key did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpError {
    /// The rule's backend (or algorithm) does not do this operation.
    Unsupported {
        /// The operation (`reset`, `penalize`, ...).
        operation: &'static str,
        /// Why not.
        why: &'static str,
    },
    /// The backend could not be asked (Redis down or its breaker open).
    Unavailable(Unavailable),
    /// The operation's arguments cannot work (a block of zero seconds, ...).
    Invalid(String),
}

impl OpError {
    /// `operation` is not done by this backend or algorithm, because `why`.
    pub fn unsupported(operation: &'static str, why: &'static str) -> Self {
        Self::Unsupported { operation, why }
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unsupported { operation, why } => {
                write!(f, "{operation} is not supported: {why}")
            }
            Self::Unavailable(u) => u.fmt(f),
            Self::Invalid(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for OpError {}

impl From<Unavailable> for OpError {
    fn from(u: Unavailable) -> Self {
        Self::Unavailable(u)
    }
}
