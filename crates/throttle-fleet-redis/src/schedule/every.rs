//! The job most timers are: a round every so often, for as long as its
//! owner lives and the round says to go on.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{Job, Run, Wake, micros};

/// A round: given its owner, it answers whether to go on.
pub(crate) type Round<T> =
    Box<dyn Fn(Arc<T>) -> Pin<Box<dyn Future<Output = Going> + Send>> + Send + Sync>;

/// What a round says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Going {
    On,
    Over,
}

impl Going {
    /// `Over` once `done`, else `On`.
    pub(crate) fn over_if(done: bool) -> Self {
        if done { Self::Over } else { Self::On }
    }
}

/// A round every `every`, the first at `first` (µs on the backend's
/// clock), the next due `every` after the last was due (after it ran, if
/// it ran a whole period late), and waiting for the last to end; over when
/// its owner is dropped or a round says so.
pub(crate) struct Every<T> {
    owner: Weak<T>,
    every_us: u64,
    next: AtomicU64,
    over: Arc<AtomicBool>,
    round: Round<T>,
}

impl<T: Send + Sync + 'static> Every<T> {
    pub(crate) fn new(
        owner: &Arc<T>,
        first: u64,
        every: Duration,
        round: impl Fn(Arc<T>) -> Pin<Box<dyn Future<Output = Going> + Send>> + Send + Sync + 'static,
    ) -> Arc<Self> {
        Arc::new(Self {
            owner: Arc::downgrade(owner),
            every_us: micros(every).max(1),
            next: AtomicU64::new(first),
            over: Arc::default(),
            round: Box::new(round),
        })
    }
}

impl<T: Send + Sync + 'static> Job for Every<T> {
    fn next(&self, _now: u64) -> Option<Wake> {
        if self.over.load(Ordering::Acquire) || self.owner.strong_count() == 0 {
            return None;
        }
        Some(Wake::timer(self.next.load(Ordering::Relaxed)))
    }

    fn due(&self, now: u64) -> Option<Run> {
        let owner = self.owner.upgrade()?;
        // In step with the first round (a late round does not move the
        // next), unless a whole period was missed: no rounds to catch up.
        let next = self.next.load(Ordering::Relaxed) + self.every_us;
        let next = if next > now {
            next
        } else {
            now + self.every_us
        };
        self.next.store(next, Ordering::Relaxed);
        let (round, over) = ((self.round)(owner), self.over.clone());
        Some(Run::Await(Box::pin(async move {
            if round.await == Going::Over {
                over.store(true, Ordering::Release);
            }
        })))
    }
}
