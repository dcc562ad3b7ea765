//! The breaker's log lines name the node they are about: a standalone
//! Redis by its URL's `host:port`, without the URL's credentials, as a
//! cluster names its nodes.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use throttle_fleet_core::backend::Backend as _;
use throttle_fleet_core::{Key, Quota, Rule};
use throttle_fleet_redis::schedule::TestTime;
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::{RedisServer, check};

const PASSWORD: &str = "s3cret-in-the-url";
const PROBE: Duration = Duration::from_millis(250);

/// Collects what the log prints on this thread.
#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The log's lines so far that contain `what`.
fn lines(logs: &Mutex<Vec<u8>>, what: &str) -> Vec<String> {
    String::from_utf8_lossy(&logs.lock().unwrap())
        .lines()
        .filter(|l| l.contains(what))
        .map(str::to_owned)
        .collect()
}

/// A user with a password, whom the backend connects as (the harness's own
/// commands go as the default user).
fn add_user(server: &RedisServer) {
    let password = format!(">{PASSWORD}");
    server.cli(&[
        "ACL", "SETUSER", "throttle", "on", &password, "~*", "&*", "+@all",
    ]);
}

// On the current thread's runtime: the calls, the breaker and its probe
// (a job of the test's scheduler) all log on the thread the subscriber is
// set for.
#[tokio::test]
async fn the_breakers_log_lines_name_a_standalone_node_by_its_address() {
    let logs = Arc::new(Mutex::new(Vec::new()));
    let sink = Sink(logs.clone());
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let server = RedisServer::start();
    add_user(&server);
    let node = format!("node=127.0.0.1:{}", server.port());
    let time = TestTime::new(1_800_000_000_000_000);
    let url = format!("redis://throttle:{PASSWORD}@127.0.0.1:{}", server.port());
    let config = RedisConfig::standalone(url)
        .scheduler(time.scheduler())
        .probe_interval(PROBE);
    let backend = RedisBackend::exact(config).await.unwrap();
    let rule = Rule::new("ip", Quota::per_second(1_000)).fail_open();
    let limiter = backend.limiter(&rule).unwrap();
    let key = Key::new("k");
    assert!(check(&*limiter, &key).await.0.is_ok());

    server.kill();
    for _ in 0..100 {
        if backend.stats().breaker_open {
            break;
        }
        let _ = check(&*limiter, &key).await;
    }
    assert!(backend.stats().breaker_open, "the breaker did not open");
    let opened = lines(&logs, "circuit breaker opened");
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert!(opened[0].contains(&node), "{}", opened[0]);

    server.restart();
    add_user(&server);
    for _ in 0..100 {
        if !backend.stats().breaker_open {
            break;
        }
        time.advance(PROBE).await;
    }
    assert!(!backend.stats().breaker_open, "the breaker did not close");
    let closed = lines(&logs, "circuit breaker closed");
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert!(closed[0].contains(&node), "{}", closed[0]);
    assert!(lines(&logs, PASSWORD).is_empty(), "the password was logged");
}
