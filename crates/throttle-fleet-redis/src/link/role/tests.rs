use std::sync::Arc;

use super::*;
use crate::RedisConfig;
use crate::link::{Redis, Route};
use crate::schedule::TestTime;
use throttle_fleet_test_support::RedisServer;

/// A node that answers every `PING` but as a replica (a primary
/// demoted in a failover) keeps its breaker open, round after round of
/// the probe the scheduler runs; once it is a primary again, the next
/// round closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_keeps_the_breaker_open_for_a_node_answering_as_a_replica() {
    let primary = RedisServer::start();
    let port = primary.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    let time = TestTime::new(1_700_000_000_000_000);
    let interval = Duration::from_millis(100);
    let config = RedisConfig::standalone(replica.url())
        .command_timeout(Duration::from_millis(250))
        .connect_timeout(Duration::from_millis(250))
        .probe_interval(interval)
        .scheduler(time.scheduler());
    let redis = Redis::connect(config).await.unwrap();
    let Route::Single(node) = &redis.route else {
        unreachable!("a standalone URL")
    };
    let node: Arc<_> = node.clone();
    // Scripts fail on it with READONLY: three failures open the breaker.
    for _ in 0..3 {
        let e = redis::RedisError::from((
            redis::ErrorKind::Server(ServerErrorKind::ReadOnly),
            "You can't write against a read only replica.",
        ));
        assert!(is_not_writable(&e));
        redis.failed(&crate::link::Failure::Error(e), &node);
    }
    assert!(node.breaker.is_open());
    for round in 0..5 {
        time.advance(interval).await;
        assert!(
            node.breaker.is_open(),
            "round {round} closed the breaker of a node answering as a replica"
        );
    }
    replica.query(&["REPLICAOF", "NO", "ONE"]).unwrap();
    time.advance(interval).await;
    assert!(
        !node.breaker.is_open(),
        "the round after it became a primary left the breaker open"
    );
}

#[test]
fn the_role_is_read_from_either_answer() {
    let role = |name: &[u8]| {
        Value::Array(vec![
            Value::BulkString(name.to_vec()),
            Value::Int(0),
            Value::Array(vec![]),
        ])
    };
    assert_eq!(role_of_reply(&role(b"master")), Role::Primary);
    assert_eq!(role_of_reply(&role(b"slave")), Role::Other);
    assert_eq!(role_of_reply(&role(b"sentinel")), Role::Other);
    assert_eq!(role_of_reply(&Value::Nil), Role::Other);
    let info = |text: &str| Value::BulkString(text.as_bytes().to_vec());
    assert_eq!(
        role_of_info(&info(
            "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"
        )),
        Role::Primary
    );
    assert_eq!(
        role_of_info(&info(
            "# Replication\r\nrole:slave\r\nmaster_host:10.0.0.1\r\n"
        )),
        Role::Other
    );
}
