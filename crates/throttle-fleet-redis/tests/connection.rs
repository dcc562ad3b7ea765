//! The public connection layer on real Redis: a script and a command go to
//! the primary of their key's slot in a Cluster; a hung node's calls time
//! out, then its breaker opens (calls are `Down`, not sent) and the health
//! channel says so, while the other primaries answer; once the node is
//! resumed the probe closes the breaker and the channel says it is up.
//! Real `redis-server`, real clock: waits are on the health channel, with
//! bounds loose enough for a loaded machine.

use std::time::Duration;

use throttle_fleet_redis::RedisConfig;
use throttle_fleet_redis::connection::{CallError, Connection};
use throttle_fleet_test_support::RedisCluster;

/// Two primaries' worth of keys: `{k<n>}` for n in 0..64.
fn keys() -> Vec<String> {
    (0..64).map(|n| format!("conn:{{k{n}}}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_primary_is_down_for_its_keys_alone_and_comes_back() {
    // A long node timeout: the other primaries do not take the hung one
    // for failed (and the cluster down) while the test runs.
    let cluster = RedisCluster::start_with_node_timeout(3, 0, Duration::from_secs(60));
    let redis = Connection::connect(
        RedisConfig::cluster(cluster.nodes())
            .command_timeout(Duration::from_millis(100))
            .breaker_threshold(2)
            .probe_interval(Duration::from_millis(100)),
    )
    .await
    .unwrap();
    let script = redis::Script::new("return redis.call('INCRBY', KEYS[1], ARGV[1])");
    for key in keys() {
        let n: i64 = redis.eval(&key, script.key(&key).arg(2)).await.unwrap();
        assert_eq!(n, 2);
        // The key is on the primary its slot names, and a command finds it.
        let got: i64 = redis
            .query(&key, redis::cmd("GET").arg(&key))
            .await
            .unwrap();
        assert_eq!(got, 2);
    }
    let mut health = redis.health();
    assert!(health.borrow_and_update().is_up());

    let hung = cluster.primary_for_key(&keys()[0]);
    let hung_port = hung.port();
    let (on_hung, elsewhere): (Vec<String>, Vec<String>) = keys()
        .into_iter()
        .partition(|k| cluster.primary_for_key(k).port() == hung_port);
    assert!(!elsewhere.is_empty());
    hung.stop();
    for _ in 0..2 {
        let got = redis
            .eval::<i64>(&on_hung[0], script.key(&on_hung[0]).arg(1))
            .await;
        assert!(matches!(got, Err(CallError::Timeout)), "{got:?}");
    }
    // Two timeouts opened its breaker: not sent, and published.
    let got = redis
        .eval::<i64>(&on_hung[0], script.key(&on_hung[0]).arg(1))
        .await;
    assert!(matches!(got, Err(CallError::Down)), "{got:?}");
    tokio::time::timeout(Duration::from_secs(5), health.changed())
        .await
        .expect("the breaker's opening is published")
        .unwrap();
    let down = health.borrow_and_update().down.clone();
    assert_eq!(down, [format!("127.0.0.1:{hung_port}")]);
    for key in &elsewhere {
        let n: i64 = redis.eval(key, script.key(key).arg(1)).await.unwrap();
        assert_eq!(n, 3, "{key} on another primary");
    }

    hung.resume();
    let up = tokio::time::timeout(Duration::from_secs(10), health.wait_for(|h| h.is_up())).await;
    assert!(up.is_ok(), "the probe's closing is published");
    let n: i64 = redis
        .eval(&on_hung[0], script.key(&on_hung[0]).arg(1))
        .await
        .unwrap();
    // The two timed-out calls were queued in the hung process and ran
    // when it resumed: a timeout says nothing of whether a call ran.
    assert_eq!(n, 5);
    let stats = redis.stats();
    assert!(
        stats.timeouts >= 2 && stats.breaker_opened >= 1,
        "{stats:?}"
    );
}
