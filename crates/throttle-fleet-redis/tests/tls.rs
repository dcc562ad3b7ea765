//! TLS to a real `redis-server` that speaks TLS only (`--port 0
//! --tls-port P`), with a CA made for the test: the exact mode over
//! `rediss://` verified with the CA file, by the URL's address and by its
//! host name; mutual TLS; a server the CA does not vouch for, and a client
//! certificate that is missing, refused at startup with an error naming
//! the field; files that cannot be used, named likewise.

use std::time::Duration;

use throttle_fleet_core::backend::Limiter;
use throttle_fleet_core::{ConfigError, Key, Quota, Rule, backend::Backend};
use throttle_fleet_redis::{RedisBackend, RedisConfig};
use throttle_fleet_test_support::{RedisServer, ServerTls, TlsFiles, check};

/// Patient enough for a TLS handshake on a loaded machine.
fn config(url: String) -> RedisConfig {
    RedisConfig::standalone(url)
        .command_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
}

async fn start(tls: ServerTls) -> RedisServer {
    tokio::task::spawn_blocking(move || RedisServer::start_tls(tls, &[]))
        .await
        .unwrap()
}

/// Checks `key` `n` times under a fixed window of 5 a minute: how many
/// Redis admitted; every answer must come from Redis.
async fn admitted(limiter: &dyn Limiter, key: &Key, n: u64) -> u64 {
    let mut allowed = 0;
    for _ in 0..n {
        let (result, _) = check(limiter, key).await;
        let outcome = result.expect("Redis answers over TLS");
        assert!(
            !outcome.degraded,
            "decided by the failure policy, not Redis"
        );
        allowed += u64::from(outcome.step.allowed);
    }
    allowed
}

/// Five a day, in a fixed window: the exact mode aligns the window to Redis
/// `TIME`, and a wall-clock window boundary inside the run would admit a
/// second window's quota; a day's boundary is all but never inside it.
fn rule() -> Rule {
    Rule::new("tenant", Quota::per_day(5))
        .fixed_window()
        .fail_closed()
}

async fn exact_quota_holds(config: RedisConfig, server: &RedisServer) {
    let backend = RedisBackend::exact(config).await.unwrap();
    let limiter = backend.limiter(&rule()).unwrap();
    assert_eq!(admitted(limiter.as_ref(), &Key::new("acme"), 8).await, 5);
    let stats = backend.stats();
    assert_eq!((stats.errors, stats.timeouts), (0, 0), "{stats:?}");
    // The counts are in the TLS server (its only port is the TLS one).
    let keys: u64 = server.cli(&["DBSIZE"]).trim().parse().unwrap();
    assert!(keys >= 1, "no key written over TLS");
}

async fn refusal(config: RedisConfig) -> ConfigError {
    match RedisBackend::exact(config).await {
        Ok(_) => panic!("the backend started against a server it must refuse"),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_mode_over_tls_verified_with_the_ca_file() {
    let files = TlsFiles::generate();
    let server = start(ServerTls::new(&files)).await;
    assert!(server.url().starts_with("rediss://127.0.0.1:"));
    exact_quota_holds(config(server.url()).tls_ca_file(&files.ca), &server).await;
}

/// The certificate names `localhost`: a URL by that name is verified (and
/// sent as SNI) by name rather than by address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_by_host_name_is_verified_for_that_name() {
    let files = TlsFiles::generate();
    let server = start(ServerTls::new(&files)).await;
    let url = format!("rediss://localhost:{}", server.port());
    exact_quota_holds(config(url).tls_ca_file(&files.ca), &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_a_client_certificate() {
    let files = TlsFiles::generate();
    let server = start(ServerTls::new(&files).auth_clients()).await;
    let with_cert = config(server.url())
        .tls_ca_file(&files.ca)
        .tls_client_cert(&files.client_cert, &files.client_key);
    exact_quota_holds(with_cert, &server).await;

    let without = refusal(config(server.url()).tls_ca_file(&files.ca)).await;
    assert_eq!(without.field(), "redis.tls_cert_file", "{without}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_the_ca_does_not_vouch_for_is_refused_at_startup() {
    let files = TlsFiles::generate();
    let server = start(ServerTls::new(&files)).await;
    let error = refusal(config(server.url()).tls_ca_file(&files.other_ca)).await;
    assert_eq!(error.field(), "redis.tls_ca_file", "{error}");
    assert!(error.reason().contains("UnknownIssuer"), "{error}");
    // Nor do the platform's roots vouch for a CA made for the test.
    let error = refusal(config(server.url())).await;
    assert_eq!(error.field(), "redis.tls_ca_file", "{error}");
}

/// Files that cannot be used are errors naming their field, found before
/// anything is dialled; a TLS setting on a plain URL does nothing, so it
/// is one too.
#[tokio::test]
async fn unusable_tls_settings_are_errors_naming_the_field() {
    let files = TlsFiles::generate();
    let url = "rediss://127.0.0.1:1".to_owned();
    let missing = refusal(config(url.clone()).tls_ca_file(files.ca.with_extension("none"))).await;
    assert_eq!(missing.field(), "redis.tls_ca_file", "{missing}");
    let not_a_ca = refusal(config(url.clone()).tls_ca_file(&files.client_key)).await;
    assert_eq!(not_a_ca.field(), "redis.tls_ca_file", "{not_a_ca}");
    let wrong_key = refusal(
        config(url.clone())
            .tls_ca_file(&files.ca)
            .tls_client_cert(&files.client_cert, &files.server_key),
    )
    .await;
    assert_eq!(wrong_key.field(), "redis.tls_key_file", "{wrong_key}");
    let plain = refusal(config("redis://127.0.0.1:1".to_owned()).tls_ca_file(&files.ca)).await;
    assert_eq!(plain.field(), "redis.tls_ca_file", "{plain}");
    let insecure = refusal(config(format!("{url}/#insecure"))).await;
    assert_eq!(insecure.field(), "redis.url", "{insecure}");
    // The errors name files, never what they hold.
    let text = format!("{wrong_key} {not_a_ca}");
    assert!(!text.contains("PRIVATE KEY"), "{text}");
}

/// A TLS Redis that is down at startup is no error: the rule's failure
/// policy decides until it answers, then Redis does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_redis_down_at_startup_is_not_an_error() {
    let files = TlsFiles::generate();
    let server = std::sync::Arc::new(start(ServerTls::new(&files)).await);
    server.kill();
    let backend = RedisBackend::exact(
        config(server.url())
            .tls_ca_file(&files.ca)
            .probe_interval(Duration::from_millis(50)),
    )
    .await
    .expect("down is not a configuration error");
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
}
