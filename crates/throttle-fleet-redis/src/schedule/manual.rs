//! Test time: a clock that moves only when a test moves it, and runs the
//! backends' jobs due on the way.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::Mutex;
use throttle_fleet_core::{clock::Clock, clock::ManualClock};

use super::{Job, Run, Scheduler, Work, micros};

/// How late a backend's jobs run after the time they asked for: a process
/// whose timers fire late, a wake-up that takes a round trip. Zero by
/// default (on time).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lateness {
    /// Added to a timer's time (a span end, a give-back, a heartbeat).
    pub timer: Duration,
    /// Added to a signal's time (a request asked for an early flush, a
    /// breaker closed).
    pub signal: Duration,
}

/// Deterministic time for a whole deployment: one clock that moves only
/// when its owner moves it (an application's own tests, a simulation), shared
/// by any number of backends ([`scheduler`](Self::scheduler),
/// [`instance`](Self::instance)). Moving it runs every job due on the way
/// (the backends' flushes, give-backs, renewals, heartbeats, probes), in
/// time order, each to its end before time moves on, and wakes what sleeps
/// on it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use std::time::Duration;
/// use throttle_fleet_redis::schedule::TestTime;
///
/// let time = TestTime::new(1_000_000);
/// time.advance(Duration::from_millis(5)).await;
/// assert_eq!(time.now_us(), 1_005_000);
/// # }
/// ```
#[derive(Clone)]
pub struct TestTime {
    inner: Arc<Inner>,
}

struct Inner {
    clock: ManualClock,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    jobs: Vec<Entry>,
    /// Sleepers by the test time (µs) each waits for and a number of its
    /// own: what `set` wakes is a range, however many wait.
    sleepers: BTreeMap<(u64, u64), Waker>,
    next_sleeper: u64,
}

struct Entry {
    job: Arc<dyn Job>,
    offset_us: i64,
    lateness: Lateness,
    /// The test time at which `due` last had nothing to do: not asked
    /// again until time moves.
    idle_at: Option<u64>,
}

impl std::fmt::Debug for TestTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestTime")
            .field("now_us", &self.now_us())
            .finish_non_exhaustive()
    }
}

impl TestTime {
    /// Test time starting at `now_us` (µs since the Unix epoch).
    pub fn new(now_us: u64) -> Self {
        Self {
            inner: Arc::new(Inner {
                clock: ManualClock::new(now_us),
                state: Mutex::default(),
            }),
        }
    }

    /// The time now (µs).
    pub fn now_us(&self) -> u64 {
        self.inner.clock.now_us()
    }

    /// The clock itself, for what reads time without being scheduled (an
    /// in-memory reference limiter beside the backends).
    pub fn clock(&self) -> ManualClock {
        self.inner.clock.clone()
    }

    /// A scheduler on this time, on time.
    pub fn scheduler(&self) -> Scheduler {
        self.instance(0, Lateness::default())
    }

    /// A scheduler for one instance of a simulated fleet: its clock reads
    /// this time plus `offset_us` (a clock apart), and its jobs run late
    /// by `lateness`.
    pub fn instance(&self, offset_us: i64, lateness: Lateness) -> Scheduler {
        Scheduler(super::Kind::Test(Handle {
            time: self.clone(),
            offset_us,
            lateness,
        }))
    }

    /// Runs the job due first, if it is due at `until` or before: sets the
    /// time to when it is due, and runs its work to its end. Returns that
    /// time, or `None` (and leaves the time) if no job is due by `until`.
    pub async fn run_next(&self, until: u64) -> Option<u64> {
        loop {
            let now = self.now_us();
            let (at, job, offset) = {
                let mut state = self.inner.state.lock();
                for e in &mut state.jobs {
                    if e.idle_at != Some(now) {
                        e.idle_at = None;
                    }
                }
                let mut first: Option<(u64, usize)> = None;
                let mut over = Vec::new();
                for (i, e) in state.jobs.iter().enumerate() {
                    if e.idle_at.is_some() {
                        continue;
                    }
                    let Some(wake) = e.job.next(local(now, e.offset_us)) else {
                        over.push(i);
                        continue;
                    };
                    let late = |at: Option<u64>, by: Duration| {
                        at.map_or(u64::MAX, |at| {
                            test_time(at, e.offset_us).saturating_add(micros(by))
                        })
                    };
                    let at = late(wake.timer, e.lateness.timer)
                        .min(late(wake.signal, e.lateness.signal))
                        .max(now);
                    if first.is_none_or(|(t, _)| at < t) {
                        first = Some((at, i));
                    }
                }
                let first =
                    first.map(|(at, i)| (at, state.jobs[i].job.clone(), state.jobs[i].offset_us));
                for i in over.into_iter().rev() {
                    state.jobs.swap_remove(i);
                }
                match first {
                    Some(f) if f.0 <= until => f,
                    _ => return None,
                }
            };
            self.set(at);
            match job.due(local(at, offset)) {
                Some(Run::Await(work) | Run::Detach(work)) => {
                    work.await;
                    return Some(at);
                }
                None => {
                    let mut state = self.inner.state.lock();
                    if let Some(e) = state.jobs.iter_mut().find(|e| Arc::ptr_eq(&e.job, &job)) {
                        e.idle_at = Some(at);
                    }
                }
            }
        }
    }

    /// Runs every job due by `until`, in time order, then sets the time to
    /// `until` (time never goes back: an earlier `until` runs nothing).
    pub async fn advance_to(&self, until: u64) {
        while self.run_next(until).await.is_some() {}
        self.set(until);
    }

    /// [`advance_to`](Self::advance_to) `by` from now.
    pub async fn advance(&self, by: Duration) {
        self.advance_to(self.now_us().saturating_add(micros(by)))
            .await;
    }

    /// Sets the time (never back) and wakes the sleepers it reached.
    fn set(&self, now_us: u64) {
        self.inner.clock.set(now_us);
        let now = self.now_us();
        let woken: Vec<Waker> = {
            let mut state = self.inner.state.lock();
            let later = state.sleepers.split_off(&(now + 1, 0));
            std::mem::replace(&mut state.sleepers, later)
                .into_values()
                .collect()
        };
        for waker in woken {
            waker.wake();
        }
    }
}

/// A backend's view of a [`TestTime`]: its offset and lateness.
#[derive(Clone)]
pub(super) struct Handle {
    time: TestTime,
    offset_us: i64,
    lateness: Lateness,
}

impl Handle {
    pub(super) fn offset_us(&self) -> i64 {
        self.offset_us
    }

    pub(super) fn clock(&self) -> OffsetClock {
        OffsetClock {
            base: self.time.inner.clock.clone(),
            offset_us: self.offset_us,
        }
    }

    pub(super) fn start(&self, job: Arc<dyn Job>) {
        self.time.inner.state.lock().jobs.push(Entry {
            job,
            offset_us: self.offset_us,
            lateness: self.lateness,
            idle_at: None,
        });
    }

    pub(super) fn sleep(&self, by: Duration) -> Work {
        Box::pin(Sleep {
            time: self.time.clone(),
            until: self.time.now_us().saturating_add(micros(by)),
            id: None,
        })
    }
}

/// The test time plus an instance's offset.
#[derive(Debug, Clone)]
pub(super) struct OffsetClock {
    base: ManualClock,
    offset_us: i64,
}

impl Clock for OffsetClock {
    fn now_us(&self) -> u64 {
        local(self.base.now_us(), self.offset_us)
    }
}

/// Completes when the test time reaches `until`.
struct Sleep {
    time: TestTime,
    until: u64,
    /// Its number among the sleepers, once it waits.
    id: Option<u64>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.time.now_us() >= self.until {
            return Poll::Ready(());
        }
        let time = self.time.clone();
        let mut state = time.inner.state.lock();
        // Checked again under the lock `set` takes: no wake is lost.
        if self.time.now_us() >= self.until {
            return Poll::Ready(());
        }
        let id = *self.id.get_or_insert_with(|| {
            state.next_sleeper += 1;
            state.next_sleeper
        });
        state.sleepers.insert((self.until, id), cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.time
                .inner
                .state
                .lock()
                .sleepers
                .remove(&(self.until, id));
        }
    }
}

/// A test time read on a clock `offset_us` apart.
fn local(test_us: u64, offset_us: i64) -> u64 {
    test_us.saturating_add_signed(offset_us)
}

/// A time on a clock `offset_us` apart, in test time.
fn test_time(local_us: u64, offset_us: i64) -> u64 {
    local_us.saturating_add_signed(-offset_us)
}

#[cfg(test)]
mod tests;
