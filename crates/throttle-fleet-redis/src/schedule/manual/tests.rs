use super::super::{Every, Going};
use super::*;

/// When a job ran, on its scheduler's clock.
struct Log {
    clock: Arc<dyn Clock>,
    ran: Mutex<Vec<u64>>,
}

/// Starts on `scheduler` a job every `every` µs from `first` that logs
/// when it ran.
fn every(scheduler: &Scheduler, every: u64, first: u64) -> Arc<Log> {
    let log = Arc::new(Log {
        clock: scheduler.clock(),
        ran: Mutex::default(),
    });
    let job = Every::new(
        &log,
        first,
        Duration::from_micros(every),
        |log: Arc<Log>| {
            Box::pin(async move {
                log.ran.lock().push(log.clock.now_us());
                Going::On
            })
        },
    );
    scheduler.start(job);
    log
}

#[tokio::test]
async fn jobs_run_in_time_order_at_their_time_on_their_clock() {
    let time = TestTime::new(1_000);
    let a = every(&time.scheduler(), 300, 1_300);
    // 100 µs ahead: its 1,500 is the test's 1,400; and 50 µs late.
    let late = Lateness {
        timer: Duration::from_micros(50),
        signal: Duration::ZERO,
    };
    let b = every(&time.instance(100, late), 500, 1_500);
    time.advance_to(2_500).await;
    assert_eq!(*a.ran.lock(), [1_300, 1_600, 1_900, 2_200, 2_500]);
    // Local times, each run 50 µs late, in step with the first.
    assert_eq!(*b.ran.lock(), [1_550, 2_050, 2_550]);
    assert_eq!(time.now_us(), 2_500);
    // A job whose owner is gone is over.
    drop(a);
    time.advance_to(3_000).await;
    assert_eq!(time.inner.state.lock().jobs.len(), 1);
}

#[tokio::test]
async fn a_sleep_ends_when_time_reaches_it() {
    let time = TestTime::new(0);
    let sleep = time.scheduler().sleep(Duration::from_micros(10));
    let waiter = tokio::spawn(sleep);
    time.advance_to(9).await;
    tokio::task::yield_now().await;
    assert!(!waiter.is_finished());
    time.advance_to(10).await;
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the sleep did not end")
        .unwrap();
}
