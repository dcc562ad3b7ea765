//! The HTTP bench server's tower-rate-limiter modes: the same axum hello
//! world as `examples/bench_server.rs`, served the same way, behind
//! tower-rate-limiter 0.1.6's `RateLimitLayer`. `benches/http/callgrind.sh`
//! runs this binary for the modes whose names start with `trl` (see
//! `benches/tower-rate-limiter/run.sh`), beside the workspace server's
//! modes in the same run.
//!
//! It is a binary of its own because tower-rate-limiter cannot be a
//! dependency of the workspace (see this package's `Cargo.toml`); `trl-bare`
//! is bare axum built here, to show that the two binaries serve at the same
//! cost before any layer.
//!
//! `BENCH_MODE` is one of:
//!
//! - `trl-bare`: no rate limiter.
//! - `trl`: its layer with its `MemoryStore`, keyed by the peer's IP
//!   (`IpKeyExtractor`, axum's `ConnectInfo`), a quota so large that
//!   nothing is denied (1e9 per one-second window), its default fields:
//!   the IETF draft 11 `RateLimit-Policy` and `RateLimit` on every answer.
//! - `trl-no-headers`: the same with `RateLimitFields::Disabled`.
//! - `trl-deny`: 1 per hour: after the first request every request is
//!   answered 429 (an empty body, its two fields and `Retry-After`).
//! - `trl-redis`: `trl` on its `RedisStore` (one multiplexed connection to
//!   `REDIS_URL`; its default build, one `MULTI`/`SET NX PX`/`INCR`/`PTTL`/
//!   `EXEC` pipeline per request).
//!
//! `BENCH_LISTEN`, `BENCH_KEY` (`ip` or `header`: the `x-client` header)
//! and `BENCH_RUNTIME` as in `examples/bench_server.rs`.

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use axum::{Router, routing::get};
use tower_rate_limiter::{
    IpKeyExtractor, KeyExtractor, MemoryStore, RateLimitError, RateLimitFields, RateLimitLayer,
    RedisStore, Store,
};

/// The request header that names the client with `BENCH_KEY=header`.
const CLIENT_HEADER: &str = "x-client";

/// The `x-client` header's value as it came (a cheap clone of the parsed
/// bytes), shown as text when the layer renders it: the best case for a
/// custom key extractor, as the workspace server's governor one.
#[derive(Clone, Copy)]
struct ClientHeader;

struct ClientKey(http::HeaderValue);

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.to_str().unwrap_or_default())
    }
}

impl KeyExtractor for ClientHeader {
    type Key = ClientKey;

    fn extract<T>(&self, request: &http::Request<T>) -> Result<Self::Key, RateLimitError> {
        request
            .headers()
            .get(CLIENT_HEADER)
            .cloned()
            .map(ClientKey)
            .ok_or_else(|| RateLimitError::Key("no_client".into(), "no x-client header".into()))
    }
}

/// `app` behind its layer on `store`: `limit` per `window`, `fields`.
fn limited<S>(
    app: Router,
    header: bool,
    store: S,
    limit: u64,
    window: Duration,
    fields: RateLimitFields,
) -> Result<Router, Box<dyn std::error::Error>>
where
    S: Store + Send + Sync + 'static,
    S::Future: Send + 'static,
{
    Ok(if header {
        app.layer(
            RateLimitLayer::builder(ClientHeader)
                .policy_name("client")
                .limit(limit)
                .window(window)
                .rate_limit_fields(fields)
                .with_store(store)
                .build()?,
        )
    } else {
        app.layer(
            RateLimitLayer::builder(IpKeyExtractor::new())
                .policy_name("ip")
                .limit(limit)
                .window(window)
                .rate_limit_fields(fields)
                .with_store(store)
                .build()?,
        )
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = match std::env::var("BENCH_RUNTIME").as_deref() {
        Err(_) | Ok("multi_thread") => tokio::runtime::Builder::new_multi_thread(),
        Ok("current_thread") => tokio::runtime::Builder::new_current_thread(),
        Ok(other) => return Err(format!("unknown BENCH_RUNTIME {other:?}").into()),
    }
    .enable_all()
    .build()?;
    runtime.block_on(serve())
}

async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let mode = std::env::var("BENCH_MODE").unwrap_or_else(|_| "trl".to_owned());
    let addr = std::env::var("BENCH_LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let header = match std::env::var("BENCH_KEY").as_deref() {
        Err(_) | Ok("ip") => false,
        Ok("header") => true,
        Ok(other) => return Err(format!("unknown BENCH_KEY {other:?}").into()),
    };

    let huge = 1_000_000_000;
    let second = Duration::from_secs(1);
    let app = Router::new().route("/", get(|| async { "Hello, world!" }));
    let app = match mode.as_str() {
        "trl-bare" => app,
        "trl" => limited(
            app,
            header,
            MemoryStore::new(),
            huge,
            second,
            RateLimitFields::Draft11,
        )?,
        "trl-no-headers" => limited(
            app,
            header,
            MemoryStore::new(),
            huge,
            second,
            RateLimitFields::Disabled,
        )?,
        "trl-deny" => limited(
            app,
            header,
            MemoryStore::new(),
            1,
            Duration::from_secs(3600),
            RateLimitFields::Draft11,
        )?,
        "trl-redis" => {
            let url =
                std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
            let connection = redis::Client::open(url)?
                .get_multiplexed_async_connection()
                .await?;
            limited(
                app,
                header,
                RedisStore::new(connection),
                huge,
                second,
                RateLimitFields::Draft11,
            )?
        }
        other => {
            return Err(format!(
                "unknown BENCH_MODE {other:?}: use trl-bare, trl, trl-no-headers, trl-deny or trl-redis"
            )
            .into());
        }
    };

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!(
        "{mode}: listening on http://{} (BENCH_KEY={})",
        listener.local_addr()?,
        if header { "header" } else { "ip" }
    );
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(stop)
    .await?;
    Ok(())
}
