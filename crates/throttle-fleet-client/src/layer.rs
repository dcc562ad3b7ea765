//! [`ClientLayer`]: its builder, which makes the settings and the state
//! every service it makes shares (`settings.rs`).

use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use tower_layer::Layer;

use crate::budget::Budget;
use crate::partitions::{Partition, Partitions};
use crate::retry::Retries;
use crate::service::ClientService;
use crate::settings::{Settings, State};
use throttle_fleet_core::ConfigError;

/// A Tower layer for HTTP and gRPC clients that waits when a server says
/// so and retries within a budget: see the crate's docs.
///
/// ```
/// use std::time::Duration;
/// use throttle_fleet_client::{Budget, ClientLayer};
///
/// let layer = ClientLayer::new()
///     .group("billing-api")
///     .deadline(Duration::from_secs(5))
///     .max_retries(2)
///     .budget(Budget::new(Duration::from_secs(10), 5, 0.1)?);
/// # Ok::<(), throttle_fleet_client::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct ClientLayer {
    settings: Arc<Settings>,
    state: Arc<State>,
}

/// The default ceiling on any one wait.
const CEILING: Duration = Duration::from_secs(60);
/// The default limit of a body kept for replay.
const REPLAY_LIMIT: usize = 64 * 1024;
/// The default number of partitions tracked.
const MAX_PARTITIONS: usize = 10_000;
/// gRPC `UNAVAILABLE`, the one code retried by default.
const UNAVAILABLE_BIT: u32 = 1 << crate::grpc::UNAVAILABLE;

impl ClientLayer {
    /// Waits when told (up to a minute for any one wait), retries up to 3
    /// times within [`Budget::default`], replays bodies of up to 64 KiB,
    /// partitions by the request's scheme and authority (group
    /// `"default"`) and retries gRPC `UNAVAILABLE`; full-jitter backoff
    /// from 100 ms to 10 s where the server gave no wait.
    pub fn new() -> Self {
        Self {
            settings: Arc::new(Settings {
                group: "default",
                partition_by: None,
                fail_fast: false,
                ceiling: CEILING,
                deadline: None,
                retries: Retries {
                    max: 3,
                    grpc_codes: UNAVAILABLE_BIT,
                    base: Duration::from_millis(100),
                    cap: Duration::from_secs(10),
                },
                replay_limit: REPLAY_LIMIT,
            }),
            state: Arc::new(State {
                partitions: Partitions::new(MAX_PARTITIONS),
                budget: Budget::default(),
            }),
        }
    }

    fn settings(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.settings)
    }

    /// The group of the default partitions (one per scheme and
    /// authority), the label of their metrics. A request with no
    /// authority (tonic's, before its `Channel` adds one) counts under
    /// one partition of this group.
    #[must_use]
    pub fn group(mut self, group: &'static str) -> Self {
        self.settings().group = group;
        self
    }

    /// Partitions by a function of the request's head instead.
    #[must_use]
    pub fn partition_by<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Partition + Send + Sync + 'static,
    {
        self.settings().partition_by = Some(Arc::new(f));
        self
    }

    /// Fails a call at once with [`Throttled`](crate::Throttled) when its
    /// partition is told to wait, instead of waiting; a refusal that says
    /// to wait is returned as it came rather than retried after the wait.
    /// Calls still wait for an answer in flight when the partition has
    /// nothing left (a round trip, not a server's wait).
    #[must_use]
    pub fn fail_fast(mut self) -> Self {
        self.settings().fail_fast = true;
        self
    }

    /// The longest any one wait may be (default 60 s): a server's longer
    /// one is cut to it.
    #[must_use]
    pub fn max_wait(mut self, ceiling: Duration) -> Self {
        self.settings().ceiling = ceiling;
        self
    }

    /// How long a call may take, waits and retries included, unless the
    /// request carries a sooner [`Deadline`](crate::Deadline) or `grpc-timeout`.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.settings().deadline = Some(deadline);
        self
    }

    /// At most this many retries of one call (default 3; 0: none).
    #[must_use]
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.settings().retries.max = retries;
        self
    }

    /// The gRPC codes (1 to 16) to retry besides a limiter's refusals
    /// (default `UNAVAILABLE`, 14); empty for none.
    pub fn retry_grpc_codes(
        mut self,
        codes: impl IntoIterator<Item = u32>,
    ) -> Result<Self, ConfigError> {
        let mut bits = 0;
        for code in codes {
            if !(1..=16).contains(&code) {
                return Err(ConfigError::new(
                    "retry_grpc_codes",
                    "a gRPC error code is from 1 to 16",
                ));
            }
            bits |= 1 << code;
        }
        self.settings().retries.grpc_codes = bits;
        Ok(self)
    }

    /// The full-jitter backoff where a server gave no wait: a wait drawn
    /// from zero to `min(cap, base * 2^retry)`.
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Result<Self, ConfigError> {
        if base.is_zero() || base > cap {
            return Err(ConfigError::new(
                "backoff",
                "base must be above zero and at most cap",
            ));
        }
        let retries = &mut self.settings().retries;
        retries.base = base;
        retries.cap = cap;
        Ok(self)
    }

    /// Bodies up to this many bytes are kept to be sent again (default
    /// 64 KiB; 0: none is, so only bodiless requests are retried).
    #[must_use]
    pub fn replay_limit(mut self, bytes: usize) -> Self {
        self.settings().replay_limit = bytes;
        self
    }

    /// The retry budget the layer's services share.
    #[must_use]
    pub fn budget(mut self, budget: Budget) -> Self {
        self.state = Arc::new(State {
            partitions: Partitions::new(self.state.partitions.max()),
            budget,
        });
        self
    }

    /// At most this many partitions tracked at once (default 10,000).
    #[must_use]
    pub fn max_partitions(mut self, max: usize) -> Self {
        self.state = Arc::new(State {
            partitions: Partitions::new(max.max(1)),
            budget: self.state.budget.renewed(),
        });
        self
    }
}

impl Default for ClientLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ClientLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientLayer")
            .field("group", &self.settings.group)
            .field("fail_fast", &self.settings.fail_fast)
            .field("max_wait", &self.settings.ceiling)
            .field("deadline", &self.settings.deadline)
            .field("retries", &self.settings.retries)
            .field("replay_limit", &self.settings.replay_limit)
            .field("budget", &self.state.budget)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for ClientLayer {
    type Service = ClientService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientService::new(inner, self.settings.clone(), self.state.clone())
    }
}
