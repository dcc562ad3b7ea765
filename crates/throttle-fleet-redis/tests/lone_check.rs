//! The exact mode's lone check: with no call out, a check sends its own call
//! from its own future, holding the sending role meanwhile. Checks that
//! arrive meanwhile queue for the next call, which must still go out when
//! the lone check's future is dropped mid-call (a client gone away), and a
//! lone check's future dropped before it was ever polled must not keep the
//! role.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{Answer, Key, Quota, Rule, backend::Backend};
use throttle_fleet_redis::{ExactBackend, RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;

/// A Redis of its own, the exact backend on it with a 5 s command timeout,
/// and a token bucket of 1,000 per second.
async fn exact_token_bucket() -> (RedisServer, ExactBackend, Arc<dyn Limiter>) {
    let server = RedisServer::start();
    let config = RedisConfig::standalone(server.url()).command_timeout(Duration::from_secs(5));
    let backend = RedisBackend::exact(config).await.unwrap();
    let limiter = backend
        .limiter(&Rule::new("ip", Quota::per_second(1_000)).token_bucket())
        .unwrap();
    (server, backend, limiter)
}

// One thread: nothing else runs (no reply is read) while the test polls.
#[tokio::test(flavor = "current_thread")]
async fn a_lone_check_dropped_mid_call_hands_the_queued_checks_on() {
    let (_server, backend, limiter) = exact_token_bucket().await;
    let key = Key::new("198.51.100.7");

    let Answer::Pending(mut lone) = limiter.acquire(&key, 1, u64::MAX) else {
        panic!("an exact check waits for Redis");
    };
    // Polled once, the lone check has sent its call and waits for the reply.
    poll_fn(|cx| {
        if let Poll::Ready(r) = lone.as_mut().poll(cx) {
            panic!("answered before any I/O: {r:?}");
        }
        Poll::Ready(())
    })
    .await;
    // Its call is out: this one queues for the next.
    let Answer::Pending(queued) = limiter.acquire(&key, 1, u64::MAX) else {
        panic!("an exact check waits for Redis");
    };
    drop(lone);

    let outcome = tokio::time::timeout(Duration::from_secs(30), queued)
        .await
        .expect("the queued check is answered")
        .expect("decided");
    assert!(
        !outcome.degraded,
        "the queued check waited for nobody and fell to the failure policy: {:?}",
        backend.stats()
    );
    assert!(outcome.step.allowed);
    assert_eq!(backend.stats().degraded, 0);
}

#[tokio::test(flavor = "current_thread")]
async fn a_lone_check_dropped_before_its_first_poll_gives_the_role_back() {
    let (_server, backend, limiter) = exact_token_bucket().await;
    let key = Key::new("198.51.100.8");

    let Answer::Pending(never_polled) = limiter.acquire(&key, 1, u64::MAX) else {
        panic!("an exact check waits for Redis");
    };
    drop(never_polled);

    let Answer::Pending(next) = limiter.acquire(&key, 1, u64::MAX) else {
        panic!("an exact check waits for Redis");
    };
    let outcome = tokio::time::timeout(Duration::from_secs(30), next)
        .await
        .expect("the next check is answered")
        .expect("decided");
    assert!(
        !outcome.degraded,
        "the next check found the role held by nobody and fell to the failure policy: {:?}",
        backend.stats()
    );
    assert_eq!(backend.stats().degraded, 0);
}
