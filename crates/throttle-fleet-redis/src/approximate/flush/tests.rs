use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use throttle_fleet_core::{Answer, Key, Quota, Rule};
use throttle_fleet_test_support::{DelayingProxy, RedisServer};

use super::super::limiter::{ApproxLimiter, ApproxRule};
use super::super::options::ApproximateOptions;
use super::super::shared::Shared;
use super::replies_of;
use crate::RedisConfig;
use crate::link::Redis;

/// The flushes tried while a bucket's flush waits for a hung node (a
/// retry every probe interval, a span end) do not queue one behind the
/// other: one waits and takes the list when its turn comes, the others
/// leave their keys to it. Once the node answers the bucket takes two
/// turns (the flush that was out, the one that waited), not one per
/// flush tried, each a round trip; an early flush asked after the node
/// came back waited behind all of them. The flushes are called here as
/// the schedule calls them; the count of turns is exact (red without
/// the waiting flag: 11 turns).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushes_tried_while_one_waits_for_a_hung_node_take_one_turn() {
    let redis = RedisServer::start();
    let proxy = DelayingProxy::start(redis.port());
    let (rule, _limiter) = rule(proxy.url(), 2, Duration::from_secs(3_600)).await;
    let key = Key::from(7u64);
    let bucket = rule.layout.bucket_of(&key) as usize;
    for _ in 0..20 {
        assert!(allowed(&rule, &key), "a new key within its credit");
    }
    assert!(rule.flush().await, "Redis answers before the hang");
    let before = rule.taken[bucket].load(Ordering::SeqCst);

    proxy.hang();
    let out = tokio::spawn({
        let rule = rule.clone();
        async move { rule.flush().await }
    });
    while rule.taken[bucket].load(Ordering::SeqCst) == before {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Ten more tried while it is out (ten probe intervals, say).
    let tried: Vec<_> = (0..10)
        .map(|_| {
            let rule = rule.clone();
            tokio::spawn(async move { rule.flush().await })
        })
        .collect();
    // Each has found the one waiting by then (a spawned task is polled
    // within a millisecond or so, on a loaded machine within tens).
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.resume();
    assert!(
        out.await.unwrap(),
        "the flush out failed once the node answered"
    );
    for flush in tried {
        assert!(flush.await.unwrap(), "a flush tried during the hang failed");
    }
    let turns = rule.taken[bucket].load(Ordering::SeqCst) - before;
    assert!(
        turns <= 2,
        "the bucket took {turns} turns for 11 flushes tried while its node hung (at most \
         the one out and one waiting)"
    );
    assert_eq!(rule.unwritten(), 0, "a count was left unwritten");
}

/// A flush that waited for its turn (behind one out to a hung node)
/// writes with the time of its turn: written with the time it was
/// asked at, spans before, its claim was granted for a span already
/// over, and the request waiting for its answer was denied (a lone 429
/// to a client of a Cluster primary hung, then resumed, in
/// `http_cluster_faults`). Here the flush out is the test holding the
/// bucket's turn for three spans; red with the time read when the
/// flush is asked for (the request denied).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flush_that_waited_for_its_turn_grants_for_the_span_it_writes_in() {
    const SPAN: Duration = Duration::from_millis(400);
    let redis = RedisServer::start();
    // 1,000 spans of 400 ms: no credit (a new key's first request
    // waits for a claim).
    let (rule, _limiter) = rule(redis.url(), 1_000, SPAN).await;
    let key = Key::from(7u64);
    let bucket = rule.layout.bucket_of(&key) as usize;
    away_from_interval_end(1_000 * SPAN).await;

    let out = rule.turns[bucket].lock.lock().await;
    // Asks for a claim (no credit: it would wait for one).
    let first = rule.decide(&key, 1);
    assert!(matches!(first, Answer::Pending(_)), "no credit: it waits");
    drop(first);
    let asked = tokio::spawn({
        let rule = rule.clone();
        async move { rule.flush_asked().await }
    });
    tokio::time::sleep(3 * SPAN).await;
    // Three spans on, a request waits for that flush's answer.
    let Answer::Pending(waiting) = rule.decide(&key, 1) else {
        panic!("the key's request was decided without its claim");
    };
    let waiting = tokio::spawn(waiting);
    tokio::time::sleep(Duration::from_millis(20)).await;
    drop(out);
    assert!(asked.await.unwrap(), "the early flush failed");
    let decided = waiting.await.unwrap().unwrap();
    assert!(
        decided.step.allowed && !decided.degraded,
        "the request that waited for the claim was {}: the claim was granted for the span \
         the flush was asked in, three spans before it was written",
        if decided.step.allowed {
            "decided by the failure policy"
        } else {
            "denied"
        }
    );
    assert!(allowed(&rule, &key), "the next request waits again");
}

/// A request waiting for a claim waits for the flush that took its key,
/// not for any flush numbered after it: here one that took the list
/// just before the key was listed (nothing written) is over, and the
/// one that took the key is out to a hung node when something wakes
/// the request (another bucket's answer). Red with the wait ended on
/// the first: the request decided before its claim came, and denied
/// (a lone 429 beside a hung Cluster primary, whose retries every
/// probe interval make such flushes overlap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waits_for_the_flush_that_took_its_key() {
    const SPAN: Duration = Duration::from_millis(400);
    let redis = RedisServer::start();
    let proxy = DelayingProxy::start(redis.port());
    let (rule, _limiter) = rule(proxy.url(), 1_000, SPAN).await;
    let key = Key::from(7u64);
    let bucket = rule.layout.bucket_of(&key);
    let b = bucket as usize;
    away_from_interval_end(1_000 * SPAN).await;
    // Every connection dialled before the hang.
    assert!(rule.redis.ping_slot(rule.layout.slot(bucket)).await);

    let Answer::Pending(waiting) = rule.decide(&key, 1) else {
        panic!("no credit: the first request waits for a claim");
    };
    // A flush that took the list before the key was listed, and is over.
    let empty = rule.taken[b].fetch_add(1, Ordering::SeqCst) + 1;
    rule.answered(bucket, empty);
    let waiting = tokio::spawn(waiting);
    proxy.hang();
    let asked = tokio::spawn({
        let rule = rule.clone();
        async move { rule.flush_asked().await }
    });
    while rule.taken[b].load(Ordering::SeqCst) == empty {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Another bucket's answer wakes every waiting request.
    rule.answers.notify_waiters();
    tokio::time::sleep(Duration::from_millis(50)).await;
    proxy.resume();
    assert!(asked.await.unwrap(), "the early flush failed");
    let decided = waiting.await.unwrap().unwrap();
    assert!(
        decided.step.allowed && !decided.degraded,
        "the request that waited for a claim was {} before the flush that took its key \
         answered",
        if decided.step.allowed {
            "decided by the failure policy"
        } else {
            "denied"
        }
    );
}

/// Sleeps past the end of the interval of `period` if it is less than
/// 10 s away (the counts start over there).
async fn away_from_interval_end(period: Duration) {
    let into = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros()
        % period.as_micros();
    let left = (period.as_micros() - into) as u64;
    if left < 10_000_000 {
        tokio::time::sleep(Duration::from_micros(left + 10_000)).await;
    }
}

/// A fail-open rule of 1,000 per `spans` x `span` on `url`, and its
/// limiter (kept: dropping it retires the rule).
async fn rule(url: String, spans: u32, span: Duration) -> (Arc<ApproxRule>, ApproxLimiter) {
    // A request waits up to a second for a claim.
    let config = RedisConfig::standalone(url).command_timeout(Duration::from_secs(1));
    let redis = Redis::connect(config).await.unwrap();
    // The flush out waits for the node as long as a test needs.
    let options = ApproximateOptions::default()
        .spans(spans)
        .flush_timeout(Duration::from_secs(30));
    let shared = Arc::new(Shared::new(options));
    let period = span * spans;
    let rule = Rule::new("ip", Quota::new(1_000, period))
        .fixed_window()
        .fail_open();
    let limiter = ApproxLimiter::new(redis, shared, Arc::default(), &rule).unwrap();
    (limiter.rule().clone(), limiter)
}

fn allowed(rule: &Arc<ApproxRule>, key: &Key) -> bool {
    matches!(rule.decide(key, 1), Answer::Ready(Ok(o)) if o.step.allowed)
}

#[test]
fn a_flush_answer_is_one_reply_per_key() {
    let answer = "12:15:100:3:40:20:9:4 S 1:2:3:4:5:6:7:8";
    assert_eq!(
        replies_of(answer).collect::<Vec<_>>(),
        ["12:15:100:3:40:20:9:4", "S", "1:2:3:4:5:6:7:8"]
    );
    assert_eq!(replies_of("").count(), 0);
}
