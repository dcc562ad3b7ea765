//! What a graceful shutdown could not write.

/// What [`RedisBackend::shutdown`](crate::RedisBackend::shutdown) could not
/// get to Redis, after three tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unflushed {
    /// Approximate mode: admitted requests whose counts are not in Redis
    /// (the other instances will not see them).
    pub counts: u64,
    /// Leased mode: tokens of idle keys could not be given back (the bucket
    /// gets them again as it refills; nothing is admitted twice).
    pub tokens_kept: bool,
}

impl std::fmt::Display for Unflushed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "throttle: {} admitted requests not counted in Redis",
            self.counts
        )?;
        if self.tokens_kept {
            f.write_str("; leased tokens not given back")?;
        }
        Ok(())
    }
}

impl std::error::Error for Unflushed {}
