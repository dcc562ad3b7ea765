//! The common parts of the HTTP fault suites (the root tests `http_faults`
//! and `http_cluster_faults`): an app per mode and failure policy, bursts
//! of concurrent clients, and the policy's promise checked on what they
//! saw.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::{Router, routing::get};
use http::StatusCode;
use throttle_fleet_axum::{ClientIp, Policy, Quota, Rule, ThrottleLayer};
use throttle_fleet_redis::{ApproximateOptions, LeaseOptions, RedisBackend, RedisConfig};

use crate::http::{HttpClient, serve};

/// The command timeout; the tolerance on a request's time is twice this.
pub const TIMEOUT: Duration = Duration::from_millis(250);

/// Which Redis backend mode the app's limiter uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `RedisBackend::exact`.
    Exact,
    /// `RedisBackend::approximate`.
    Approximate,
    /// `RedisBackend::leased`.
    Leased,
}

/// The rule's failure policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fail {
    /// `fail_open`: allow while Redis is away.
    Open,
    /// `fail_closed`: refuse with 503 while Redis is away.
    Closed,
    /// `local_fallback`: limit in memory while Redis is away.
    Local,
}

/// The patience every suite gives Redis, on `config`.
pub fn patient(config: RedisConfig) -> RedisConfig {
    config
        .command_timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .probe_interval(Duration::from_millis(100))
}

/// What one instance admits per client and minute under local fallback.
pub const LOCAL_SHARE: u64 = 10;

/// An axum app on a free port limiting per client IP in `mode` with the
/// `fail` policy.
///
/// Under local fallback the configured fleet is large enough that each
/// instance's share of the quota is [`LOCAL_SHARE`] per client and minute,
/// so that the fallback's limit shows within a phase.
///
/// The approximate mode flushes `spans` times a minute; a claim holds for
/// two spans.
pub async fn app(
    config: RedisConfig,
    mode: Mode,
    fail: Fail,
    spans: u32,
) -> (SocketAddr, RedisBackend) {
    let limit = if mode == Mode::Leased { 6_400 } else { 100_000 };
    let mut config = patient(config);
    if fail == Fail::Local {
        config = config.fleet_size((limit / LOCAL_SHARE) as u32);
    }
    // Generous: during the phases nobody is over it, so what the answers
    // show is the failure policy, not the quota.
    let quota = Quota::per_minute(limit);
    let (backend, rule): (RedisBackend, Rule) = match mode {
        Mode::Exact => (
            RedisBackend::exact(config).await.unwrap().into(),
            Rule::new("ip", quota).fixed_window(),
        ),
        Mode::Approximate => (
            RedisBackend::approximate(config, ApproximateOptions::default().spans(spans))
                .await
                .unwrap()
                .into(),
            Rule::new("ip", quota).fixed_window(),
        ),
        // Batches of at most 100 (1/64 of the bucket), so that a client's
        // leased tokens run out during a phase and the policy shows.
        Mode::Leased => (
            RedisBackend::leased(config, LeaseOptions::default().batch(20).low_water(5))
                .await
                .unwrap()
                .into(),
            Rule::new("ip", quota).token_bucket(),
        ),
    };
    let rule = match fail {
        Fail::Open => rule.fail_open(),
        Fail::Closed => rule.fail_closed(),
        Fail::Local => rule.local_fallback(),
    };
    let policy = Policy::new().rule(rule, ClientIp::default());
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(ThrottleLayer::new(policy, backend.clone()).unwrap());
    (serve(router, true).await, backend)
}

/// What a burst of concurrent requests got.
#[derive(Debug, Default)]
pub struct Seen {
    /// 200 answers.
    pub ok: u64,
    /// 429 answers.
    pub limited: u64,
    /// 503 answers.
    pub unavailable: u64,
    /// Any other status.
    pub other: u64,
    /// Allowed answers carrying `X-RateLimit-Remaining` (decided by Redis).
    pub counted: u64,
    /// The longest any request took.
    pub slowest: Duration,
}

/// 8 clients, each `n` requests in a row, concurrently.
pub async fn burst(addr: SocketAddr, clients: &[Arc<HttpClient>], n: usize) -> Seen {
    let tasks = clients.iter().map(|c| {
        let c = c.clone();
        tokio::spawn(async move {
            let mut seen = Seen::default();
            for _ in 0..n {
                let t = Instant::now();
                let reply = c.get(addr, "/", &[]).await;
                seen.slowest = seen.slowest.max(t.elapsed());
                match reply.status {
                    StatusCode::OK => {
                        seen.ok += 1;
                        seen.counted += u64::from(reply.header("x-ratelimit-remaining").is_some());
                    }
                    StatusCode::TOO_MANY_REQUESTS => seen.limited += 1,
                    StatusCode::SERVICE_UNAVAILABLE => seen.unavailable += 1,
                    _ => seen.other += 1,
                }
            }
            seen
        })
    });
    let mut all = Seen::default();
    for s in futures_util::future::join_all(tasks).await {
        let s = s.unwrap();
        all.ok += s.ok;
        all.limited += s.limited;
        all.unavailable += s.unavailable;
        all.other += s.other;
        all.counted += s.counted;
        all.slowest = all.slowest.max(s.slowest);
    }
    all
}

/// The requests sent while Redis is away: enough for each mode to need
/// Redis. The exact mode asks it on every request; a leased client spends
/// its held tokens first; an approximate one its claim, which holds for two
/// spans and is then gone (`claim` is longer than that).
pub async fn away(
    addr: SocketAddr,
    clients: &[Arc<HttpClient>],
    mode: Mode,
    claim: Duration,
) -> Seen {
    match mode {
        Mode::Exact => burst(addr, clients, 20).await,
        Mode::Leased => burst(addr, clients, 150).await,
        Mode::Approximate => {
            let mut seen = burst(addr, clients, 20).await;
            tokio::time::sleep(claim).await;
            let later = burst(addr, clients, 40).await;
            seen.ok += later.ok;
            seen.limited += later.limited;
            seen.unavailable += later.unavailable;
            seen.other += later.other;
            seen.counted += later.counted;
            seen.slowest = seen.slowest.max(later.slowest);
            seen
        }
    }
}

/// Checks the policy's promise for what was seen while Redis was away.
pub fn promise(mode: Mode, fail: Fail, during: &Seen, what: &str) {
    let label = format!("{mode:?}/{fail:?}, Redis {what}: {during:?}");
    assert_eq!(during.other, 0, "{label}");
    assert!(
        during.slowest <= 2 * TIMEOUT,
        "{label}: a request took {:?}",
        during.slowest
    );
    match fail {
        Fail::Open => {
            assert_eq!(during.limited + during.unavailable, 0, "{label}");
        }
        Fail::Closed => {
            assert_eq!(during.limited, 0, "{label}");
            assert!(during.unavailable > 0, "{label}: never refused");
        }
        Fail::Local => {
            assert_eq!(during.unavailable, 0, "{label}");
            // Every client sent more than its local share: the fallback
            // limited them (and admitted some: it is a limit, not a wall,
            // unless an earlier phase of the minute used the share up).
            assert!(
                during.limited > 0,
                "{label}: the local fallback never limited"
            );
        }
    }
}

/// Polls until an answer shows Redis decided again; returns how long it
/// took. Redis allows everything here (the quota is generous), and an
/// answer it allowed carries the fleet's remaining count: a 200 without it
/// is fail-open, a 429 is the local fallback's (which counts too), a 503
/// fail-closed.
pub async fn recovery(addr: SocketAddr, client: &HttpClient) -> Duration {
    let t = Instant::now();
    loop {
        let reply = client.get(addr, "/", &[]).await;
        let back =
            reply.status == StatusCode::OK && reply.header("x-ratelimit-remaining").is_some();
        if back {
            return t.elapsed();
        }
        assert!(t.elapsed() < Duration::from_secs(5), "not back after 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
