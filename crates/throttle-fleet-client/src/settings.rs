//! What every call of a layer's services reads: the settings the builder
//! made, and the state they share (the partitions and the retry budget).

use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;

use crate::budget::Budget;
use crate::partitions::{Partition, Partitions};
use crate::retry::Retries;

/// What a service reads for every call.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) group: &'static str,
    pub(crate) partition_by: Option<Arc<PartitionFn>>,
    pub(crate) fail_fast: bool,
    pub(crate) ceiling: Duration,
    pub(crate) deadline: Option<Duration>,
    pub(crate) retries: Retries,
    pub(crate) replay_limit: usize,
}

type PartitionFn = dyn Fn(&Parts) -> Partition + Send + Sync;

/// What the services of one layer share.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) partitions: Partitions,
    pub(crate) budget: Budget,
}
