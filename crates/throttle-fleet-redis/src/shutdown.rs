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

/// Runs `flush` until it gets everything to Redis, three times at most,
/// 100 ms apart (a connection broken while Redis was away reconnects on
/// the first failure); returns whether it did.
pub(crate) async fn three_tries<F: Future<Output = bool>>(mut flush: impl FnMut() -> F) -> bool {
    for attempt in 0..3 {
        if flush().await {
            return true;
        }
        if attempt < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
    false
}
