//! When background work runs: one clock and one scheduler per backend,
//! injected through [`RedisConfig::scheduler`](crate::RedisConfig::scheduler).
//!
//! Every timer of a backend is a job (`Job`, crate-private): the
//! approximate mode's flushes (span ends, early flushes, retries while a
//! bucket is down), the leased mode's give-backs, the renewal of
//! concurrency slots, the heartbeat of the nodes (which subscribes again
//! a node whose watch ended), the operations' listener (which subscribes
//! again, and retries a read that failed), the breaker's probe and the
//! cluster's discovery. A subscription's reader waits only on its
//! connection, never on time. A job says when it wants to run next
//! (`Job::next`) and, when that time comes, moves its state on and hands
//! over the work to do (`Job::due`). Both
//! are the same code in production and in the tests; what differs is who
//! waits:
//!
//! - [`Scheduler::runtime`] (the default) reads the wall clock and sleeps
//!   on Tokio's timers, waking early when a job says its next time may
//!   have moved (`Job::changed`: a request asked for an early flush, a
//!   breaker closed). It spawns work that must not hold up the job's next
//!   turn (a flush whose node hangs) and awaits the rest.
//! - [`TestTime`] moves only when a test moves it, and runs every job due
//!   on the way, in time order, each run's work to its end before time
//!   moves on: the production timers, under test time, deterministic.
//!
//! Deadlines on I/O (a command's timeout, a connection's) stay on Tokio's
//! time: the I/O they bound is real in the tests too. A deadline on
//! something the scheduler drives (a request waiting for an early flush)
//! is on the scheduler's time.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use throttle_fleet_core::clock::Clock;

mod every;
mod manual;
mod runtime;

pub(crate) use every::{Every, Going};
pub use manual::{Lateness, TestTime};

/// The work a job hands over when it is due.
pub(crate) type Work = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// When a job wants to run next, on its backend's clock (µs): the
/// earliest of its timers (a span end, a give-back, a heartbeat) and of its
/// signals (a request asked for an early flush, a breaker closed), kept
/// apart so that [`TestTime`] can make each late by its own amount
/// ([`Lateness`]) before it picks the earlier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wake {
    pub(crate) timer: Option<u64>,
    pub(crate) signal: Option<u64>,
}

impl Wake {
    pub(crate) fn timer(at: u64) -> Self {
        Self {
            timer: Some(at),
            signal: None,
        }
    }

    pub(crate) fn signal(at: u64) -> Self {
        Self {
            timer: None,
            signal: Some(at),
        }
    }

    /// Both wakes: the earlier timer and the earlier signal.
    pub(crate) fn min(self, other: Self) -> Self {
        let earlier = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Self {
            timer: earlier(self.timer, other.timer),
            signal: earlier(self.signal, other.signal),
        }
    }

    /// The earliest time, whatever its cause.
    pub(crate) fn at(self) -> u64 {
        self.timer
            .unwrap_or(u64::MAX)
            .min(self.signal.unwrap_or(u64::MAX))
    }
}

/// What a due job does now.
pub(crate) enum Run {
    /// Work its next turn waits for (a heartbeat round, a give-back).
    Await(Work),
    /// Work its next turn does not wait for (a flush: a bucket whose node
    /// hangs holds up no early flush of another). [`TestTime`] awaits it
    /// all the same, to stay deterministic.
    Detach(Work),
}

/// A piece of background work that runs at times of its own choosing.
pub(crate) trait Job: Send + Sync + 'static {
    /// When it wants to run next (µs on its backend's clock), given that
    /// it is `now`; `None` once it is over (its owner is gone, its node
    /// answers again). Reads state only.
    fn next(&self, now: u64) -> Option<Wake>;

    /// Called at or after the time `next` gave: moves the job's state on
    /// (so that `next` gives a later time) and returns the work to do, if
    /// any is left to do now.
    fn due(&self, now: u64) -> Option<Run>;

    /// Completes when `next` may have moved earlier than it said. Only the
    /// runtime scheduler waits on it; [`TestTime`] asks `next` again at
    /// every step.
    fn changed(&self) -> Work {
        Box::pin(std::future::pending())
    }
}

/// The clock and the timers of a backend. The default reads the wall
/// clock and runs on Tokio's timers; a test gives one from [`TestTime`].
///
/// ```
/// use throttle_fleet_redis::RedisConfig;
/// use throttle_fleet_redis::schedule::{Scheduler, TestTime};
///
/// // Production: nothing to set (this is the default).
/// let config = RedisConfig::standalone("redis://127.0.0.1:6379").scheduler(Scheduler::runtime());
/// // A test: the backend's timers run when the test moves `time`.
/// let time = TestTime::new(1_700_000_000_000_000);
/// let test = RedisConfig::standalone("redis://127.0.0.1:6379").scheduler(time.scheduler());
/// # let _ = (config, test);
/// ```
#[derive(Clone, Default)]
pub struct Scheduler(Kind);

#[derive(Clone, Default)]
enum Kind {
    #[default]
    Runtime,
    Test(manual::Handle),
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Kind::Runtime => f.write_str("Scheduler::runtime"),
            Kind::Test(h) => write!(f, "Scheduler::test(offset {} µs)", h.offset_us()),
        }
    }
}

impl Scheduler {
    /// The wall clock and Tokio's timers (needs a Tokio runtime; without
    /// one no background work runs, and a warning says so). The scripts
    /// read Redis' own `TIME`, so every instance counts on one clock.
    pub fn runtime() -> Self {
        Self(Kind::Runtime)
    }

    /// The clock local decisions and schedules read.
    pub(crate) fn clock(&self) -> Arc<dyn Clock> {
        match &self.0 {
            Kind::Runtime => Arc::new(throttle_fleet_core::clock::WallClock),
            Kind::Test(h) => Arc::new(h.clock()),
        }
    }

    /// "Now" for the scripts: 0 (they read Redis `TIME`), or the test's
    /// time, so that Redis and the in-memory algorithms share a timeline.
    pub(crate) fn script_now(&self) -> u64 {
        match &self.0 {
            Kind::Runtime => 0,
            Kind::Test(h) => h.clock().now_us(),
        }
    }

    /// Starts `job`: it runs at the times it asks for until it is over.
    pub(crate) fn start(&self, job: Arc<dyn Job>) {
        match &self.0 {
            Kind::Runtime => runtime::start(job),
            Kind::Test(h) => h.start(job),
        }
    }

    /// Completes once `by` has passed on this scheduler's time.
    pub(crate) fn sleep(&self, by: Duration) -> Work {
        match &self.0 {
            Kind::Runtime => Box::pin(tokio::time::sleep(by)),
            Kind::Test(h) => h.sleep(by),
        }
    }

    /// `fut`'s output, or `None` if `by` passes first on this scheduler's
    /// time.
    pub(crate) async fn timeout<F: Future>(&self, by: Duration, fut: F) -> Option<F::Output> {
        tokio::select! {
            biased;
            out = fut => Some(out),
            () = self.sleep(by) => None,
        }
    }
}

/// `d` in whole µs (saturating).
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
