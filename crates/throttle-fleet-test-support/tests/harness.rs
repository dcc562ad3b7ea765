//! Self-test of the Redis harness (`redis_server`, `cluster`, `proxy`): real
//! servers are started on free ports, stopped, resumed, killed and
//! restarted, a real cluster fails over, and a proxy delays and holds their
//! replies. If the harness lies, these fail.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use throttle_fleet_test_support::{DelayingProxy, RedisCluster, RedisServer};

fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Reads until `n` bytes arrived or the read timed out / failed.
fn read_some(stream: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0; n];
    let mut got = 0;
    while got < n {
        match stream.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => got += k,
        }
    }
    buf.truncate(got);
    buf
}

#[test]
fn standalone_server_answers_and_cleans_up() {
    let server = RedisServer::start();
    let port = server.port();
    assert_ne!(port, 6379, "the harness must never use the shared Redis");
    assert_eq!(server.url(), format!("redis://127.0.0.1:{port}"));
    assert!(server.is_running() && server.is_live());

    assert_eq!(server.cli(&["SET", "greeting", "hello"]), "OK\n");
    assert_eq!(server.cli(&["GET", "greeting"]), "hello\n");
    assert_eq!(server.cli(&["DBSIZE"]), "1\n");
    // Persistence is off.
    assert_eq!(server.cli(&["CONFIG", "GET", "save"]), "save\n\n");
    assert_eq!(
        server.cli(&["CONFIG", "GET", "appendonly"]),
        "appendonly\nno\n"
    );
    let dir = server.cli(&["CONFIG", "GET", "dir"]);
    assert!(
        dir.contains(&server.dir().to_string_lossy().into_owned()),
        "{dir}"
    );

    let pid = server.pid();
    let dir = server.dir().to_path_buf();
    assert!(process_exists(pid));
    assert!(dir.join("redis.log").exists());
    drop(server);
    assert!(!process_exists(pid), "Drop must kill and reap the process");
    assert!(!dir.exists(), "Drop must remove the temp dir");
}

#[test]
fn stopped_server_hangs_and_resumed_server_answers() {
    let server = RedisServer::start();
    server.cli(&["SET", "k", "v"]);

    // A connection opened before the stop stays open across it.
    let mut early = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    early
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();

    server.stop();
    assert!(server.is_running() && server.is_stopped() && !server.is_live());
    assert!(
        !server.ping(Duration::from_millis(500)),
        "a stopped server must not answer"
    );
    let cli = server.try_cli(&["--raw", "PING"], Duration::from_secs(1));
    assert!(
        cli.is_err(),
        "redis-cli got an answer from a stopped server: {cli:?}"
    );
    early.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_some(&mut early, 7), b"", "no answer while stopped");

    server.resume();
    assert!(server.is_live());
    assert!(server.ping(Duration::from_secs(2)));
    assert_eq!(server.cli(&["--raw", "PING"]), "PONG\n");
    // The request queued on the early connection is answered now.
    early
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert_eq!(read_some(&mut early, 7), b"+PONG\r\n");
    assert_eq!(server.cli(&["GET", "k"]), "v\n", "data survives a stop");
}

/// Every third reply (over all connections) comes at least the delay late,
/// the others are forwarded as they come; a hung proxy holds requests and
/// replies until it resumes; a killed server closes the client's side.
#[test]
fn the_proxy_delays_every_nth_reply_and_hangs_on_demand() {
    let server = RedisServer::start();
    let proxy = DelayingProxy::start(server.port());
    let mut conn = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let delay = Duration::from_millis(300);
    proxy.delay_every(3, delay);
    let mut took = Vec::new();
    for _ in 0..6 {
        let t = Instant::now();
        conn.write_all(b"PING\r\n").unwrap();
        assert_eq!(read_some(&mut conn, 7), b"+PONG\r\n");
        took.push(t.elapsed());
    }
    assert_eq!(proxy.chunks(), 6);
    assert_eq!(proxy.delayed(), vec![b"+PONG\r\n".to_vec(); 2]);
    for (i, took) in took.iter().enumerate() {
        // Only the lower bound is sure on a busy machine.
        if i % 3 == 2 {
            assert!(*took >= delay, "reply {i} was not delayed: {took:?}");
        }
    }

    proxy.delay_every(0, Duration::ZERO);
    proxy.hang();
    conn.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    conn.write_all(b"SET k v\r\n").unwrap();
    assert_eq!(
        read_some(&mut conn, 5),
        b"",
        "an answer through a hung proxy"
    );
    assert_eq!(
        server.cli(&["EXISTS", "k"]),
        "0\n",
        "the request went through a hung proxy"
    );
    proxy.resume();
    conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(read_some(&mut conn, 5), b"+OK\r\n");

    server.kill();
    assert_eq!(
        read_some(&mut conn, 1),
        b"",
        "the connection outlived its server"
    );
}

#[test]
fn killed_server_restarts_on_the_same_port_empty() {
    let server = RedisServer::start();
    let port = server.port();
    let first_pid = server.pid();
    server.cli(&["SET", "k", "v"]);

    server.kill();
    assert!(!server.is_running());
    assert!(!process_exists(first_pid));
    assert!(!server.ping(Duration::from_millis(300)));
    server.kill(); // idempotent

    server.restart();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), first_pid);
    assert!(server.is_live());
    assert!(server.ping(Duration::from_secs(2)));
    assert_eq!(server.cli(&["DBSIZE"]), "0\n", "nothing is persisted");
    assert_eq!(server.cli(&["GET", "k"]), "\n");

    // Stop, then restart: restart kills the stopped process first.
    server.stop();
    server.restart();
    assert!(server.is_live() && server.ping(Duration::from_secs(2)));
}

#[test]
fn restart_retries_while_the_port_is_taken() {
    let server = RedisServer::start();
    let port = server.port();
    server.kill();
    // Someone else holds the port for a while: redis-server fails with
    // "Address already in use" and restart() must try again, not give up.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let release = thread::spawn(move || {
        thread::sleep(Duration::from_millis(800));
        drop(squatter);
    });
    server.restart();
    release.join().unwrap();
    assert!(server.ping(Duration::from_secs(2)));
    assert_eq!(server.port(), port);
    let log = server.log_tail(200);
    assert!(log.contains("Address already in use"), "{log}");
}

#[test]
fn command_count_reads_commandstats() {
    let server = RedisServer::start();
    assert_eq!(server.command_count("evalsha"), 0);
    let sha = server.cli(&["SCRIPT", "LOAD", "return redis.call('INCR', KEYS[1])"]);
    let sha = sha.trim();
    assert_eq!(sha.len(), 40, "{sha:?}");
    for expected in 1..=3 {
        assert_eq!(
            server.cli(&["EVALSHA", sha, "1", "counter"]),
            format!("{expected}\n")
        );
    }
    assert_eq!(server.command_count("evalsha"), 3);
    assert_eq!(server.command_count("EVALSHA"), 3);
    assert_eq!(
        server.command_count("incr"),
        3,
        "commands inside scripts count"
    );
    assert_eq!(server.command_count("script|load"), 1);
    assert_eq!(server.command_count("hgetall"), 0);
    server.cli(&["CONFIG", "RESETSTAT"]);
    assert_eq!(server.command_count("evalsha"), 0);
}

#[test]
fn parallel_starts_get_distinct_ports() {
    let servers: Vec<RedisServer> = (0..6)
        .map(|_| thread::spawn(RedisServer::start))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let ports: HashSet<u16> = servers.iter().map(RedisServer::port).collect();
    let pids: HashSet<u32> = servers.iter().map(RedisServer::pid).collect();
    assert_eq!(ports.len(), servers.len());
    assert_eq!(pids.len(), servers.len());
    for (i, server) in servers.iter().enumerate() {
        server.cli(&["SET", "who", &i.to_string()]);
    }
    for (i, server) in servers.iter().enumerate() {
        assert_eq!(server.cli(&["GET", "who"]), format!("{i}\n"));
    }
}

#[test]
fn cluster_fails_over_to_a_replica() {
    let cluster = RedisCluster::start(3, 1);
    assert_eq!(cluster.nodes().len(), 6);
    assert!(
        cluster
            .nodes()
            .iter()
            .all(|u| u.starts_with("redis://127.0.0.1:"))
    );
    assert_eq!(cluster.primaries().len(), 3);
    let replicas_before: HashSet<u16> = cluster.replicas().iter().map(|n| n.port()).collect();
    assert_eq!(replicas_before.len(), 3);
    for server in cluster.servers() {
        let info = server.cli(&["CLUSTER", "INFO"]);
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_ok:16384"), "{info}");
    }

    let key = "user:42";
    assert_eq!(cluster.node(0).cli(&["-c", "SET", key, "hello"]), "OK\n");
    for server in cluster.servers() {
        assert_eq!(server.cli(&["-c", "GET", key]), "hello\n");
    }
    let primary = cluster.primary_for_key(key);
    let slot = cluster.keyslot(key);
    assert_eq!(
        primary.cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]),
        "1\n"
    );
    primary.wait_replicated();

    let killed_port = primary.port();
    primary.kill();
    let promoted = cluster.wait_for_failover(killed_port);
    assert_ne!(promoted.port(), killed_port);
    assert!(
        replicas_before.contains(&promoted.port()),
        "a former replica must serve the slots"
    );
    assert_eq!(cluster.primary_for_key(key).port(), promoted.port());
    assert_eq!(cluster.primaries().len(), 3);
    assert_eq!(cluster.replicas().len(), 2);
    for server in cluster.servers().iter().filter(|s| s.is_live()) {
        let info = server.cli(&["CLUSTER", "INFO"]);
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert_eq!(server.cli(&["-c", "GET", key]), "hello\n");
    }

    // The old primary comes back as a replica of the promoted node.
    cluster.node_by_port(killed_port).restart();
    cluster.wait_ready();
    assert_eq!(cluster.primaries().len(), 3);
    assert_eq!(cluster.replicas().len(), 3);
    assert_eq!(cluster.primary_for_key(key).port(), promoted.port());
}

#[test]
fn small_cluster_is_built_by_hand() {
    // `redis-cli --cluster create` needs 3 primaries; one is built by hand.
    let cluster = RedisCluster::start(1, 1);
    assert_eq!(cluster.primaries().len(), 1);
    assert_eq!(cluster.replicas().len(), 1);
    let primary = cluster.primary_for_key("anything");
    assert_eq!(cluster.primaries()[0].port(), primary.port());
    assert_eq!(primary.cli(&["-c", "SET", "a", "1"]), "OK\n");
    assert_eq!(cluster.replicas()[0].cli(&["-c", "GET", "a"]), "1\n");
}
