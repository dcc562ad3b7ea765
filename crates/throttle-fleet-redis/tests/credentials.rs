//! ACL users with passwords on real servers: the backend authenticates as
//! the configured user on a standalone server and on every node of a
//! Cluster (the nodes it discovers included: the default user there may
//! touch no key, so a connection that did not authenticate could not
//! decide); a wrong password, or none where one is asked for, is an error
//! at startup naming the field; a Redis that is down at startup is not.

use std::time::Duration;

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{ConfigError, Key, Quota, Rule, backend::Backend};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::{RedisCluster, RedisServer, check};

const USER: &str = "throttle";
const PASSWORD: &str = "correct horse battery staple";

/// `redis-server` arguments: the user `throttle` with its password and
/// every permission, and a default user (the harness's) that may run
/// commands but touch no key.
fn acl_args() -> Vec<String> {
    let password = format!(">{PASSWORD}");
    [
        "--user",
        USER,
        "on",
        &password,
        "~*",
        "&*",
        "+@all",
        "--user",
        "default",
        "on",
        "nopass",
        "resetkeys",
        "+@all",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Five a day, in a fixed window: the exact mode aligns the window to Redis
/// `TIME`, and a wall-clock window boundary inside a key's run would admit a
/// second window's quota; a day's boundary is all but never inside it.
fn rule() -> Rule {
    Rule::new("tenant", Quota::per_day(5))
        .fixed_window()
        .fail_closed()
}

/// How many of `n` checks of `key` Redis admitted; every answer must come
/// from Redis.
async fn admitted(limiter: &dyn Limiter, key: &Key, n: u64) -> u64 {
    let mut allowed = 0;
    for _ in 0..n {
        let (result, _) = check(limiter, key).await;
        let outcome = result.expect("Redis answers the authenticated backend");
        assert!(
            !outcome.degraded,
            "decided by the failure policy, not Redis"
        );
        allowed += u64::from(outcome.step.allowed);
    }
    allowed
}

/// Clients connected as `user`, from `CLIENT LIST`.
fn clients_of(server: &RedisServer, user: &str) -> usize {
    let list = server.query_text(&["CLIENT", "LIST"]).unwrap();
    let needle = format!(" user={user} ");
    list.lines().filter(|l| l.contains(&needle)).count()
}

async fn start_acl() -> RedisServer {
    tokio::task::spawn_blocking(|| {
        let args = acl_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        RedisServer::start_with_args(&args)
    })
    .await
    .unwrap()
}

async fn refusal(config: RedisConfig) -> ConfigError {
    match RedisBackend::exact(config).await {
        Ok(_) => panic!("the backend started with credentials Redis refuses"),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_with_a_password_on_a_standalone_server() {
    let server = start_acl().await;
    // Without credentials the default user may touch no key: Redis refuses
    // the script (NOPERM), so nothing Redis decides.
    let config = RedisConfig::standalone(server.url())
        .username(USER)
        .password(PASSWORD);
    assert!(!format!("{config:?}").contains(PASSWORD));
    let backend = RedisBackend::exact(config).await.unwrap();
    let limiter = backend.limiter(&rule()).unwrap();
    assert_eq!(admitted(limiter.as_ref(), &Key::new("acme"), 8).await, 5);
    assert!(clients_of(&server, USER) >= 1, "no connection as {USER}");

    // The password in the URL works as well.
    let url = format!(
        "redis://{USER}:{}@127.0.0.1:{}",
        "correct%20horse%20battery%20staple",
        server.port()
    );
    let backend = RedisBackend::exact(RedisConfig::standalone(url))
        .await
        .unwrap();
    let limiter = backend.limiter(&rule()).unwrap();
    assert_eq!(admitted(limiter.as_ref(), &Key::new("other"), 6).await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_at_startup_is_an_error_naming_the_field() {
    let server = start_acl().await;
    let error = refusal(
        RedisConfig::standalone(server.url())
            .username(USER)
            .password("wrong"),
    )
    .await;
    assert_eq!(error.field(), "redis.password", "{error}");
    assert!(error.reason().contains("WRONGPASS"), "{error}");
    assert!(!error.to_string().contains("wrong\""), "{error}");
    // A user that does not exist is refused the same way (Redis does not
    // tell which of the two was wrong).
    let error = refusal(
        RedisConfig::standalone(server.url())
            .username("nobody")
            .password(PASSWORD),
    )
    .await;
    assert_eq!(error.field(), "redis.password", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_where_redis_asks_for_one_is_an_error_naming_the_field() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    // From here on the default user needs a password (the harness does not
    // query this server again: dropping it only kills it).
    server
        .query(&["ACL", "SETUSER", "default", "resetpass", ">s3cret"])
        .unwrap();
    let error = refusal(RedisConfig::standalone(server.url())).await;
    assert_eq!(error.field(), "redis.password", "{error}");
    assert!(error.reason().contains("NOAUTH"), "{error}");
    // And the right one is accepted.
    RedisBackend::exact(RedisConfig::standalone(server.url()).password("s3cret"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_down_at_startup_is_not_an_error_and_authenticates_when_back() {
    let server = std::sync::Arc::new(start_acl().await);
    server.kill();
    let backend = RedisBackend::exact(
        RedisConfig::standalone(server.url())
            .username(USER)
            .password(PASSWORD)
            .probe_interval(Duration::from_millis(50)),
    )
    .await
    .expect("a Redis that is down is no configuration error");
    let limiter = backend.limiter(&rule()).unwrap();
    let (refused, _) = check(limiter.as_ref(), &Key::new("acme")).await;
    assert!(refused.is_err(), "fail-closed refuses while Redis is down");
    tokio::task::spawn_blocking({
        let server = server.clone();
        move || server.restart()
    })
    .await
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        assert!(std::time::Instant::now() < deadline, "Redis never decided");
        if let (Ok(o), _) = check(limiter.as_ref(), &Key::new("acme")).await
            && !o.degraded
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(clients_of(&server, USER) >= 1);
}

/// Three primaries; the backend knows one seed and discovers the other
/// two, which it reaches with the seed's credentials: on every primary the
/// backend's connections are the user's, and Redis decides every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_on_a_cluster_authenticates_on_discovered_nodes() {
    let cluster = tokio::task::spawn_blocking(|| {
        let args = acl_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        RedisCluster::start_with_args(3, 0, Duration::from_millis(1000), &args)
    })
    .await
    .unwrap();
    let seed = cluster.nodes()[0].clone();
    let config = RedisConfig::cluster([seed])
        .username(USER)
        .password(PASSWORD)
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500));
    let backend = RedisBackend::exact(config).await.unwrap();
    let limiter = backend.limiter(&rule()).unwrap();
    // Many keys: every primary's slots.
    for i in 0..60u64 {
        assert_eq!(
            admitted(limiter.as_ref(), &Key::from(i), 6).await,
            5,
            "key {i}"
        );
    }
    for primary in cluster.primaries() {
        assert!(
            clients_of(primary, USER) >= 1,
            "primary {} has no connection as {USER}",
            primary.port()
        );
        let keys: u64 = primary.cli(&["DBSIZE"]).trim().parse().unwrap();
        assert!(keys >= 5, "primary {} holds {keys} keys", primary.port());
    }

    // A wrong password on the seed is refused at startup.
    let error = refusal(
        RedisConfig::cluster(cluster.nodes())
            .username(USER)
            .password("wrong"),
    )
    .await;
    assert_eq!(error.field(), "redis.password", "{error}");
}
