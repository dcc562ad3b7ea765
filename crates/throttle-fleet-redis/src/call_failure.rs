//! What went wrong with a call to Redis (a leaf: the connections, the
//! metrics and the modes all name it, and it names none of them).

/// What went wrong with a call.
#[derive(Debug)]
pub(crate) enum Failure {
    Timeout,
    Error(redis::RedisError),
    /// A cluster slot no known primary serves (the table is being read).
    Unrouted,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => f.write_str("redis command timed out"),
            Self::Error(e) => write!(f, "redis error: {e}"),
            Self::Unrouted => f.write_str("no known primary serves the slot (a Cluster's table or a Sentinel's answer is awaited)"),
        }
    }
}
