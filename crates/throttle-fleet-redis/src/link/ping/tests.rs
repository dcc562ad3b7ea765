use redis::IntoConnectionInfo;

use super::*;
use crate::RedisConfig;
use throttle_fleet_test_support::RedisServer;

/// The first round after an outage answers: the `PING` that finds a
/// connection lost dials it again and is sent once more on it, on the
/// request path's connections and the off-path one alike; after that
/// round no connection has a failure left to give its next command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_round_after_an_outage_answers_on_every_connection() {
    let server = RedisServer::start();
    let config = RedisConfig::standalone(server.url()).connections(3);
    let info = server.url().into_connection_info().unwrap();
    let node = Node::open(info, format!("127.0.0.1:{}", server.port()), &config).unwrap();
    let patience = Duration::from_secs(2);
    // Each connection by its own accessor, not by the list a round goes
    // through: three request-path ones in turn, then the off-path.
    let each = || (0..3).map(|_| node.conn()).chain([node.off_path()]);
    for conn in each() {
        assert!(ping_on(conn, patience).await);
    }
    server.kill();
    assert!(!ping_every(&node, patience).await);
    // A second of outage: every connection is left holding a failed
    // dial (a redial the round above started, or one of its own).
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.restart();
    assert!(
        ping_every(&node, patience).await,
        "the first round after Redis came back did not answer"
    );
    for mut conn in each() {
        let once = redis::cmd("PING").query_async::<String>(&mut conn).await;
        assert!(once.is_ok(), "a connection left to fail: {once:?}");
    }
}
