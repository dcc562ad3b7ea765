use throttle_fleet_test_support::RedisServer;

use super::super::shares::MemoryShares;
use super::*;

/// One step of a sequence: who reports (or gives up) when, and until
/// when the assignment made holds.
enum Step {
    Report(&'static str, u64, u64),
    Release(&'static str),
}

fn report(envoy: &str, now_ms: u64, expires_ms: u64) -> Report<'_> {
    Report {
        envoy,
        demand: 10.0,
        capacity: 10.0,
        now_ms,
        expires_ms,
    }
}

/// Reports with the expiries a review gives (earlier than a report's)
/// and a release: Redis and this process hold the same shares at each
/// step, and an early expiry never shortens the others' holding.
#[tokio::test]
async fn expiries_and_releases_hold_the_same_shares_in_redis_and_in_memory() {
    use Step::{Release, Report as R};
    let steps = [
        R("a", 0, 15_000),
        // A review-like expiry, earlier than `a`'s.
        R("b", 1_000, 2_000),
        R("b", 3_000, 4_000),
        // `b`'s hold expired; `a` still holds it all.
        R("b", 5_000, 20_000),
        // Past `a`'s: `b` takes what it let go.
        R("b", 15_000, 30_000),
        R("a", 15_001, 30_001),
        Release("b"),
        R("a", 15_002, 30_002),
    ];
    let redis = RedisServer::start();
    let store = RedisShares::connect(RedisConfig::standalone(redis.url()), "t:")
        .await
        .unwrap();
    let memory = MemoryShares::default();
    let (mut in_redis, mut in_memory) = (Vec::new(), Vec::new());
    for step in &steps {
        match *step {
            R(envoy, now, expires) => {
                in_redis.push(
                    store
                        .report("k", report(envoy, now, expires))
                        .await
                        .unwrap(),
                );
                in_memory.push(memory.report("k", report(envoy, now, expires)));
            }
            Release(envoy) => {
                store.release("k", envoy).await.unwrap();
                memory.release("k", envoy);
            }
        }
        let key = store.key("k");
        let ttl: i64 = store
            .conn
            .query(&key, redis::cmd("PTTL").arg(&key))
            .await
            .unwrap();
        // Twice the longest lifetime given, less the test's own time.
        assert!(ttl > 20_000, "the key's TTL went down to {ttl} ms");
    }
    assert_eq!(in_redis, in_memory, "Redis and memory differ");
    assert_eq!(in_memory, [STEPS, 0, 0, 0, STEPS, 0, STEPS]);
}
