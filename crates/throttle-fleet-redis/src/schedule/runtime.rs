//! The production scheduler: the wall clock and Tokio's timers.

use std::sync::Arc;
use std::time::Duration;

use throttle_fleet_core::clock::Clock;
use throttle_fleet_core::clock::WallClock;

use super::{Job, Run};

/// How long a job that said it was due but had nothing to do waits before
/// it is asked again (it should not happen; this keeps it from spinning).
const IDLE: Duration = Duration::from_millis(1);

/// Runs `job` in a task of its own until it is over.
pub(super) fn start(job: Arc<dyn Job>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        tracing::error!(
            "throttle: no Tokio runtime to run the Redis backend's background work on (flushes, give-backs, \
             renewals, heartbeats, probes); it will not run"
        );
        return;
    };
    rt.spawn(async move {
        loop {
            // Before `next` reads the state: a change after the read wakes it.
            let changed = job.changed();
            let now = WallClock.now_us();
            let Some(wake) = job.next(now) else { return };
            let at = wake.at();
            if at <= now {
                match job.due(now) {
                    Some(Run::Await(work)) => work.await,
                    Some(Run::Detach(work)) => {
                        tokio::spawn(work);
                    }
                    None => tokio::time::sleep(IDLE).await,
                }
                continue;
            }
            let wait = Duration::from_micros(at - now);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = changed => {}
            }
        }
    });
}
