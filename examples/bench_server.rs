//! The server of the HTTP load benchmark: axum's hello world, bare or behind
//! a rate limiter, so that `benches/http/run.sh` can compare them.
//!
//! Run with `BENCH_MODE=memory cargo run --release -p throttle-fleet-suite --example bench_server`
//! (the scripts in `benches/http/` do this for every mode). Settings
//! (environment variables):
//!
//! - `BENCH_LISTEN`: the address (default `127.0.0.1:3000`).
//! - `BENCH_KEY`: what every mode keys by: `ip` (default, the peer's IP
//!   address) or `header` (the value of the `x-client` request header, so
//!   that one load generator can be many clients; tower_governor gets a
//!   custom key extractor for the same header, the naive script the same
//!   value in its Redis key). A request without the header is rejected
//!   (ours: 400; tower_governor: 500).
//! - `BENCH_RUNTIME`: `multi_thread` (default, one worker per CPU the
//!   process may run on) or `current_thread` (everything on the main
//!   thread: no idle workers that wake up and spin, which makes instruction
//!   counts under callgrind repeatable).
//! - `BENCH_MAX_KEYS`: the memory backend's bound on keys per rule (default
//!   the backend's, 1,000,000), for the key flood.
//! - `BENCH_LEASE_RETURN_AFTER_SECS`: the leased mode's
//!   `LeaseOptions::return_after` (default 1 s), so that under callgrind,
//!   where 10,000 keys take half a minute to come round, their leases are
//!   still held (warm) when they come back.
//!
//! `BENCH_MODE` is one of:
//!
//! - `bare`: no rate limiter.
//! - `governor`: `tower_governor` per peer IP, a quota so large that nothing
//!   is denied (its default: no rate-limit headers on success).
//! - `governor-headers`: the same with `use_headers()`, so successes carry
//!   `x-ratelimit-*` headers like ours do.
//! - `governor-deny`: `tower_governor` per peer IP, 1 per hour: after the
//!   first request every request is answered 429.
//! - `throttle-kit`: `throttle-kit`'s `RateLimitLayer` (GCRA, in-memory
//!   backend) per peer IP (its default `ClientIpConfig`: no trusted
//!   proxies), a quota so large that nothing is denied. It always sends
//!   `X-RateLimit-Limit`, `-Remaining` and `-Reset` on success.
//! - `throttle-kit-deny`: the same at 1 per hour: its 429 has an empty body
//!   and `retry-after: 1`.
//! - `memory`: our `ThrottleLayer` on the memory backend, a token bucket per
//!   client IP (`ClientIp`), a quota so large that nothing is denied.
//! - `memory-deny`: the same with 1 per hour: after the first request every
//!   request is answered 429 with our headers and JSON body.
//! - `memory-no-headers`: `memory` with a responder that adds no headers to
//!   allowed responses, to show what the `X-RateLimit-*` headers cost.
//! - `memory-ietf`: `memory` sending the IETF draft's `RateLimit-Policy` and
//!   `RateLimit` instead of the trio (`headers = "ietf-only"`);
//!   `memory-ietf-both`: both sets (`headers = "ietf"`).
//! - `memory-window`: `memory-ietf` with a fixed window (1e9 per second) in
//!   place of the token bucket: the algorithm and the two fields of
//!   tower-rate-limiter's modes (`benches/tower-rate-limiter`), like for
//!   like.
//! - `memory-concurrency`: a concurrency rule per client instead of the
//!   token bucket, slots enough for every request: each takes its slot and
//!   gives it back when its body has been sent.
//!
//! - `naive-pool`: the API-gateway design's Lua token bucket run on every
//!   request through a `deadpool-redis` connection checkout, as an axum
//!   middleware (the baseline the exact mode is measured against).
//! - `naive-mux`: the same script on one shared multiplexed connection.
//! - `exact`, `exact-2conn`: our exact mode (token bucket per client IP) on
//!   one or two multiplexed connections.
//! - `exact-window`: `exact` with a fixed window (1e9 per second) and the
//!   IETF fields only, as tower-rate-limiter's `trl-redis`.
//! - `approximate`: our approximate mode (fixed window per client IP).
//! - `leased`: our leased mode (token bucket per client IP, batches of 50).
//!
//! The Redis modes read `REDIS_URL` (default `redis://127.0.0.1:6379`) and
//! use quotas so large that nothing is denied. "Per peer IP" and "per client
//! IP" above become "per `x-client` header value" with `BENCH_KEY=header`.
//!
//! Every mode serves with `into_make_service_with_connect_info::<SocketAddr>()`
//! so that they differ only by the layer; with `BENCH_SERVE=hardened` they
//! serve through `throttle_fleet_axum::serve` instead (the quick start's
//! server, the per-client cap lifted), to measure what its connection
//! limits cost. The server stops on Ctrl-C or `SIGINT`.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::{Router, routing::get};
use throttle_fleet_axum::HttpResponder;
use throttle_fleet_axum::key::Header;
use throttle_fleet_axum::{ClientIp, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};
use throttle_fleet_redis::{ApproximateOptions, LeaseOptions, RedisBackend, RedisConfig};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::{GovernorError, GovernorLayer};

/// The request header that names the client with `BENCH_KEY=header`.
const CLIENT_HEADER: &str = "x-client";

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// What every mode keys by (`BENCH_KEY`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keying {
    /// The peer's IP address.
    Ip,
    /// The `x-client` header.
    Header,
}

impl Keying {
    fn from_env() -> Result<Self, String> {
        match std::env::var("BENCH_KEY").as_deref() {
            Err(_) | Ok("ip") => Ok(Self::Ip),
            Ok("header") => Ok(Self::Header),
            Ok(other) => Err(format!("unknown BENCH_KEY {other:?}: use ip or header")),
        }
    }

    /// The name of the rule keyed this way.
    fn rule_name(self) -> &'static str {
        match self {
            Self::Ip => "ip",
            Self::Header => "client",
        }
    }

    /// A policy of the one rule `rule`, keyed this way.
    fn policy(self, rule: Rule) -> Policy {
        match self {
            Self::Ip => Policy::new().rule(rule, ClientIp::default()),
            Self::Header => Policy::new().rule(rule, Header::new(CLIENT_HEADER)),
        }
    }
}

/// tower_governor keyed by the `x-client` header: the header's value as it
/// came (a cheap clone of the parsed bytes, no allocation), the best case
/// for a custom key extractor.
#[derive(Clone)]
struct GovernorClientHeader;

impl tower_governor::key_extractor::KeyExtractor for GovernorClientHeader {
    type Key = http::HeaderValue;

    fn extract<T>(&self, req: &http::Request<T>) -> Result<Self::Key, GovernorError> {
        req.headers()
            .get(CLIENT_HEADER)
            .cloned()
            .ok_or(GovernorError::UnableToExtractKey)
    }
}

/// A governor layer on `$app`, keyed by `$keying`, from a builder
/// expression `$config` (the key extractor's type is part of the layer's).
macro_rules! with_governor {
    ($app:expr, $keying:expr, |$b:ident| $config:expr) => {
        match $keying {
            Keying::Ip => {
                let mut $b = GovernorConfigBuilder::default();
                let config = $config.finish().ok_or("invalid governor config")?;
                $app.layer(GovernorLayer::new(config))
            }
            Keying::Header => {
                let mut $b = GovernorConfigBuilder::default().key_extractor(GovernorClientHeader);
                let config = $config.finish().ok_or("invalid governor config")?;
                $app.layer(GovernorLayer::new(config))
            }
        }
    };
}

/// throttle-kit's layer at `quota`, keyed by `keying`. Its custom key
/// extractor returns a `String`: one allocation per request by its API.
fn throttle_kit_layer(
    keying: Keying,
    quota: throttle_kit::Quota,
) -> throttle_kit::RateLimitLayer<throttle_kit::InMemoryBackend> {
    let layer = throttle_kit::RateLimitLayer::new(quota, throttle_kit::InMemoryBackend::new());
    match keying {
        Keying::Ip => layer,
        Keying::Header => layer.with_key_extractor(std::sync::Arc::new(|headers, _| {
            headers
                .get(CLIENT_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        })),
    }
}

/// The memory backend, with `BENCH_MAX_KEYS` if set.
fn memory_backend() -> Result<MemoryBackend, Box<dyn std::error::Error>> {
    Ok(match std::env::var("BENCH_MAX_KEYS") {
        Ok(n) => MemoryBackend::default().max_keys(n.parse()?),
        Err(_) => MemoryBackend::default(),
    })
}

/// A token bucket per client with `quota`, on the memory backend.
fn ours(keying: Keying, quota: Quota) -> Result<ThrottleLayer, Box<dyn std::error::Error>> {
    let policy = keying.policy(Rule::new(keying.rule_name(), quota).token_bucket());
    Ok(ThrottleLayer::new(policy, memory_backend()?)?)
}

/// The IETF fields only (`headers = "ietf-only"`): on every answer the
/// same `RateLimit-Policy` and `RateLimit` as tower-rate-limiter's default.
fn ietf_only() -> HttpResponder {
    HttpResponder::new()
        .ietf_headers(true)
        .x_ratelimit_headers(false)
}

/// The token bucket script of the API-gateway design, verbatim.
const SEED_TOKEN_BUCKET: &str = r#"
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local refill_rate = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])

local data = redis.call('HMGET', key, 'tokens', 'last_updated')
local tokens = tonumber(data[1])
local last_updated = tonumber(data[2])

if tokens == nil then
    tokens = capacity
    last_updated = now
else
    local delta = math.max(0, now - last_updated)
    tokens = math.min(capacity, tokens + delta * refill_rate)
    last_updated = now
end

if tokens >= cost then
    tokens = tokens - cost
    redis.call('HMSET', key, 'tokens', tokens, 'last_updated', last_updated)
    local ttl = math.ceil(capacity / refill_rate / 1000) * 2
    redis.call('EXPIRE', key, math.max(60, ttl))
    return { 1, math.floor(tokens) }
else
    redis.call('HMSET', key, 'tokens', tokens, 'last_updated', last_updated)
    return { 0, math.floor(tokens) }
end
"#;

/// Where the naive middleware gets its connection.
#[derive(Clone)]
enum NaiveConn {
    Pool(deadpool_redis::Pool),
    Mux(redis::aio::ConnectionManager),
}

struct Naive {
    conn: NaiveConn,
    script: redis::Script,
    keying: Keying,
}

/// The naive middleware: one script call per request, nothing else.
async fn naive(
    State(naive): State<std::sync::Arc<Naive>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> axum::response::Response {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let key = match naive.keying {
        Keying::Ip => format!("rl:naive:{}", peer.ip()),
        Keying::Header => match req.headers().get(CLIENT_HEADER) {
            Some(v) => format!("rl:naive:{}", String::from_utf8_lossy(v.as_bytes())),
            None => return http::StatusCode::BAD_REQUEST.into_response(),
        },
    };
    let mut inv = naive.script.prepare_invoke();
    inv.key(key)
        .arg(1_000_000_000u64)
        .arg(1_000_000u64)
        .arg(now_ms)
        .arg(1);
    let reply: redis::RedisResult<Vec<i64>> = match &naive.conn {
        NaiveConn::Pool(pool) => match pool.get().await {
            Ok(mut conn) => inv.invoke_async(&mut conn).await,
            Err(e) => Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "pool",
                e.to_string(),
            ))),
        },
        NaiveConn::Mux(conn) => inv.invoke_async(&mut conn.clone()).await,
    };
    match reply {
        Ok(r) if r.first() == Some(&1) => next.run(req).await,
        Ok(_) => http::StatusCode::TOO_MANY_REQUESTS.into_response(),
        Err(_) => http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// A per-client rule on a Redis backend.
fn redis_layer(
    keying: Keying,
    backend: RedisBackend,
    rule: Rule,
) -> Result<ThrottleLayer, Box<dyn std::error::Error>> {
    Ok(ThrottleLayer::new(keying.policy(rule), backend)?)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = match std::env::var("BENCH_RUNTIME").as_deref() {
        Err(_) | Ok("multi_thread") => tokio::runtime::Builder::new_multi_thread(),
        Ok("current_thread") => tokio::runtime::Builder::new_current_thread(),
        Ok(other) => {
            return Err(format!(
                "unknown BENCH_RUNTIME {other:?}: use multi_thread or current_thread"
            )
            .into());
        }
    }
    .enable_all()
    .build()?;
    runtime.block_on(serve())
}

async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let mode = std::env::var("BENCH_MODE").unwrap_or_else(|_| "bare".to_owned());
    let addr = std::env::var("BENCH_LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let keying = Keying::from_env()?;

    // One token per nanosecond, a burst of a billion: nothing is denied.
    let (huge_period, huge_burst) = (Duration::from_nanos(1), 1_000_000_000);
    let app = Router::new().route("/", get(|| async { "Hello, world!" }));
    let app = match mode.as_str() {
        "bare" => app,
        "governor" => with_governor!(app, keying, |b| b
            .period(huge_period)
            .burst_size(huge_burst)),
        "governor-headers" => with_governor!(app, keying, |b| b
            .period(huge_period)
            .burst_size(huge_burst)
            .use_headers()),
        "governor-deny" => with_governor!(app, keying, |b| b
            .period(Duration::from_secs(3600))
            .burst_size(1)),
        "throttle-kit" => app.layer(throttle_kit_layer(
            keying,
            throttle_kit::Quota::per_second(1_000_000_000),
        )),
        "throttle-kit-deny" => {
            app.layer(throttle_kit_layer(keying, throttle_kit::Quota::per_hour(1)))
        }
        "memory" => app.layer(ours(keying, Quota::per_second(1_000_000_000))?),
        "memory-deny" => app.layer(ours(keying, Quota::per_hour(1))?),
        "memory-window" => app.layer(ThrottleLayer::with_responder(
            keying.policy(
                Rule::new(keying.rule_name(), Quota::per_second(1_000_000_000)).fixed_window(),
            ),
            memory_backend()?,
            ietf_only(),
        )?),
        "memory-concurrency" => app.layer(ThrottleLayer::new(
            keying.policy(Rule::concurrency(keying.rule_name(), 1_000_000_000)),
            memory_backend()?,
        )?),
        "memory-ietf" | "memory-ietf-both" => {
            let policy = keying.policy(
                Rule::new(keying.rule_name(), Quota::per_second(1_000_000_000)).token_bucket(),
            );
            let responder = HttpResponder::new()
                .ietf_headers(true)
                .x_ratelimit_headers(mode == "memory-ietf-both");
            app.layer(ThrottleLayer::with_responder(
                policy,
                memory_backend()?,
                responder,
            )?)
        }
        "memory-no-headers" => {
            let policy = keying.policy(
                Rule::new(keying.rule_name(), Quota::per_second(1_000_000_000)).token_bucket(),
            );
            app.layer(ThrottleLayer::with_responder(
                policy,
                memory_backend()?,
                HttpResponder::new().success_headers(false),
            )?)
        }
        "naive-pool" | "naive-mux" => {
            let conn = if mode == "naive-pool" {
                let pool = deadpool_redis::Config::from_url(redis_url())
                    .create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
                NaiveConn::Pool(pool)
            } else {
                NaiveConn::Mux(
                    redis::aio::ConnectionManager::new(redis::Client::open(redis_url())?).await?,
                )
            };
            let state = std::sync::Arc::new(Naive {
                conn,
                script: redis::Script::new(SEED_TOKEN_BUCKET),
                keying,
            });
            app.layer(axum::middleware::from_fn_with_state(state, naive))
        }
        "exact" | "exact-2conn" | "exact-window" => {
            let connections = if mode == "exact-2conn" { 2 } else { 1 };
            let backend =
                RedisBackend::exact(RedisConfig::standalone(redis_url()).connections(connections))
                    .await?;
            let rule = Rule::new(keying.rule_name(), Quota::per_second(1_000_000_000));
            if mode == "exact-window" {
                app.layer(ThrottleLayer::with_responder(
                    keying.policy(rule.fixed_window()),
                    RedisBackend::from(backend),
                    ietf_only(),
                )?)
            } else {
                app.layer(redis_layer(keying, backend.into(), rule.token_bucket())?)
            }
        }
        "approximate" => {
            let backend = RedisBackend::approximate(
                RedisConfig::standalone(redis_url()),
                ApproximateOptions::default(),
            )
            .await?;
            app.layer(redis_layer(
                keying,
                backend.into(),
                Rule::new(keying.rule_name(), Quota::per_second(1_000_000_000)).fixed_window(),
            )?)
        }
        "leased" => {
            let mut options = LeaseOptions::default();
            if let Ok(secs) = std::env::var("BENCH_LEASE_RETURN_AFTER_SECS") {
                options = options.return_after(Duration::from_secs(secs.parse()?));
            }
            let backend =
                RedisBackend::leased(RedisConfig::standalone(redis_url()), options).await?;
            app.layer(redis_layer(
                keying,
                backend.into(),
                Rule::new(keying.rule_name(), Quota::per_second(1_000_000_000)).token_bucket(),
            )?)
        }
        other => {
            return Err(format!(
                "unknown BENCH_MODE {other:?}: use bare, governor, governor-headers, \
                 governor-deny, throttle-kit, throttle-kit-deny, memory, memory-deny, memory-no-headers, \
                 memory-ietf, memory-ietf-both, memory-window, naive-pool, naive-mux, \
                 exact, exact-2conn, exact-window, approximate or leased"
            )
            .into());
        }
    };

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!(
        "{mode}: listening on http://{} (BENCH_KEY={})",
        listener.local_addr()?,
        if keying == Keying::Ip { "ip" } else { "header" }
    );
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    if std::env::var("BENCH_SERVE").as_deref() == Ok("hardened") {
        // The quick start's server: connection caps, header and idle
        // timeouts (the per-client cap lifted for load from one address).
        let limits = throttle_fleet_axum::serve::ServeLimits {
            max_connections_per_client: 1_000_000,
            ..Default::default()
        };
        throttle_fleet_axum::serve::serve(listener, app)
            .limits(limits)
            .with_graceful_shutdown(stop)
            .await?;
    } else {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(stop)
        .await?;
    }
    Ok(())
}
