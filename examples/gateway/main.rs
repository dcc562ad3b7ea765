//! A rate-limited API gateway driven by a configuration file:
//!
//! ```sh
//! cargo run -p throttle-fleet-suite --example gateway -- --config examples/gateway.toml
//! ```
//!
//! Serves `GET /search`, `GET /items/{id}`, `POST /checkout`, `POST /login`, `GET
//! /slow?ms=N` (answers after N milliseconds, at most 10,000: a slow
//! endpoint for a concurrency rule) and a fallback (200 with a small JSON
//! body) under the file's rules, reloads the file
//! when it changes (`throttle_fleet_config::reload`), bounds what slow and idle
//! clients hold (`[server]`), and stops cleanly on SIGINT or SIGTERM. An
//! invalid file makes it exit with status 2 and the error (file, line,
//! column, rule, field).
//!
//! With `[metrics] listen` set, Prometheus text is served at `/metrics`
//! there. With `[tls]` it serves HTTPS (HTTP/1.1) instead of HTTP, and
//! reads each client's TLS ClientHello fingerprint (JA4) for
//! `tls-fingerprint` keys; `examples/gateway-tls.toml` tries it with a
//! self-signed certificate:
//!
//! ```sh
//! cargo run -p throttle-fleet-suite --example gateway -- --config examples/gateway-tls.toml
//! curl -k https://127.0.0.1:8443/
//! ```
//!
//! With `[admin]` it serves the admin API (inspect, reset, block, unblock,
//! penalize and reward a rule's key; list a rule's blocked keys) on its own
//! address, for requests bearing the token (`admin.rs`; the guide's chapter
//! "Operating on keys"), under limits of its own (64 connections, 8 a
//! client), not `[server]`'s. The public listener answers 404 for every
//! path that names `/admin`, however it is written (`admin_path.rs`).
//!
//! Options: `--config FILE` (default `examples/gateway.toml`), `--listen
//! ADDR`, `--metrics-listen ADDR` and `--admin-listen ADDR` (override the
//! file's; the last needs `[admin]` for its token), and
//! `--server-timing` (a `Server-Timing` header on every response: how long
//! the gateway took over it).

mod admin;
mod admin_path;
#[cfg(test)]
mod admin_tests;
mod json;
#[path = "../support/logs.rs"]
mod logs;
#[path = "../support/metrics.rs"]
mod metrics;
mod server;
#[path = "../support/signal.rs"]
mod signal;
#[cfg(test)]
mod tests;
mod timing;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Request};
use axum::http::{StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use throttle_fleet_axum::from_config;
use throttle_fleet_config::reload::Reloader;
use throttle_fleet_config::{BuiltBackend, GatewayConfig};
use tokio::sync::watch;

struct Args {
    config: PathBuf,
    listen: Option<SocketAddr>,
    metrics_listen: Option<SocketAddr>,
    admin_listen: Option<SocketAddr>,
    server_timing: bool,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        config: PathBuf::from("examples/gateway.toml"),
        listen: None,
        metrics_listen: None,
        admin_listen: None,
        server_timing: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--config" => args.config = value("--config")?.into(),
            "--listen" => {
                let v = value("--listen")?;
                args.listen = Some(
                    v.parse()
                        .map_err(|_| format!("--listen: {v:?} is not an address"))?,
                );
            }
            "--metrics-listen" => {
                let v = value("--metrics-listen")?;
                args.metrics_listen = Some(
                    v.parse()
                        .map_err(|_| format!("--metrics-listen: {v:?} is not an address"))?,
                );
            }
            "--admin-listen" => {
                let v = value("--admin-listen")?;
                args.admin_listen = Some(
                    v.parse()
                        .map_err(|_| format!("--admin-listen: {v:?} is not an address"))?,
                );
            }
            "--server-timing" => args.server_timing = true,
            other => {
                return Err(format!(
                    "unknown argument {other:?} (use --config FILE, --listen ADDR, --metrics-listen ADDR, \
                     --admin-listen ADDR, --server-timing)"
                ));
            }
        }
    }
    Ok(args)
}

pub(crate) fn app(layer: throttle_fleet_axum::ThrottleLayer) -> Router {
    Router::new()
        .route("/search", get(|| async { r#"{"results":[]}"# }))
        .route(
            "/items/{id}",
            get(|Path(id): Path<String>| async move { format!(r#"{{"id":{id:?}}}"#) }),
        )
        .route("/checkout", post(|| async { r#"{"order":"accepted"}"# }))
        .route("/login", post(|| async { r#"{"login":"checked"}"# }))
        .route("/slow", get(slow))
        .fallback(fallback)
        // Inside the limits: a path that names the admin API is counted as
        // any other request, then answered 404.
        .layer(axum::middleware::from_fn(hide_admin))
        // Router::layer, so the limits see the matched route.
        .layer(layer)
}

/// Every other request: 200 with a small JSON body.
async fn fallback() -> &'static str {
    r#"{"ok":true}"#
}

/// Answers 404 to a path that names the admin API, which is never served
/// here, whatever the method and whichever route or fallback the path
/// reached (`/items/..%2Fadmin` matches `/items/{id}`, and is the admin
/// API to a proxy that decodes it): see
/// [`is_admin_path`](admin_path::is_admin_path).
async fn hide_admin(req: Request, next: Next) -> Response {
    if admin_path::is_admin_path(req.uri().path()) {
        return (StatusCode::NOT_FOUND, r#"{"error":"not found"}"#).into_response();
    }
    next.run(req).await
}

/// The longest `GET /slow` sleeps, in milliseconds.
pub(crate) const MAX_SLOW_MS: u64 = 10_000;

/// `GET /slow?ms=N`: sleeps N milliseconds, then answers 200; a missing or
/// bad `ms` is a 400 saying so.
async fn slow(uri: Uri) -> (StatusCode, String) {
    match slow_ms(uri.query()) {
        Ok(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            (StatusCode::OK, format!(r#"{{"slept_ms":{ms}}}"#))
        }
        Err(why) => (StatusCode::BAD_REQUEST, why),
    }
}

/// The `ms` of `/slow`'s query, from 0 to [`MAX_SLOW_MS`].
pub(crate) fn slow_ms(query: Option<&str>) -> Result<u64, String> {
    let usage = format!("GET /slow?ms=N, N from 0 to {MAX_SLOW_MS}");
    let value = query
        .unwrap_or("")
        .split('&')
        .find_map(|pair| pair.strip_prefix("ms="))
        .ok_or_else(|| format!("ms is missing: {usage}\n"))?;
    match value.parse::<u64>() {
        Ok(ms) if ms <= MAX_SLOW_MS => Ok(ms),
        _ => Err(format!(
            "ms={:?} is not a number of milliseconds: {usage}\n",
            value.chars().take(32).collect::<String>()
        )),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    logs::init();
    let args = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gateway: {e}");
            return ExitCode::from(2);
        }
    };
    let file = args.config.display().to_string();
    let config = match GatewayConfig::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gateway: {e}");
            return ExitCode::from(2);
        }
    };
    // The recorder first: the layer and the backend register with it.
    let metrics_listen = args.metrics_listen.or(config.metrics_listen);
    let prometheus = match metrics_listen.map(|_| metrics::install()).transpose() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("gateway: {e}");
            return ExitCode::FAILURE;
        }
    };
    let backend: BuiltBackend = match config.backend.build(&file).await {
        Ok(b) => b,
        Err(e) => {
            eprintln!("gateway: {e}");
            return ExitCode::from(2);
        }
    };
    let layer = match from_config::layer(&config, &file, backend.as_backend()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("gateway: {e}");
            return ExitCode::from(2);
        }
    };
    let tls = match config
        .tls
        .as_ref()
        .map(|t| tls::acceptor(t, &file))
        .transpose()
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("gateway: {e}");
            return ExitCode::from(2);
        }
    };
    let listen = args
        .listen
        .or(config.listen)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080)));
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("gateway: cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "gateway: {} rules from {file}; listening on {}://{}",
        config.rules.len(),
        if tls.is_some() { "https" } else { "http" },
        server::bound(&listener)
    );
    if let (Some(listen), Some(handle)) = (metrics_listen, prometheus) {
        let rules = layer.clone();
        let refresh = move || throttle_fleet_axum::metrics::report_state(&rules.rules());
        match metrics::serve(listen, handle, refresh).await {
            Ok(bound) => eprintln!("gateway: metrics at http://{bound}/metrics"),
            Err(e) => {
                eprintln!("gateway: {e}");
                return ExitCode::FAILURE;
            }
        }
    }

    let (stop_tx, stop) = watch::channel(false);
    let admin_listen = args
        .admin_listen
        .or(config.admin.as_ref().map(|a| a.listen));
    if let Some(listen) = admin_listen {
        let Some(admin) = &config.admin else {
            eprintln!("gateway: --admin-listen needs an [admin] table in {file} (for its token)");
            return ExitCode::from(2);
        };
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("gateway: cannot listen on {listen} for the admin API: {e}");
                return ExitCode::FAILURE;
            }
        };
        eprintln!(
            "gateway: admin API at http://{}/admin/rules",
            server::bound(&listener)
        );
        tokio::spawn(server::serve(
            listener,
            admin::router(layer.clone(), &admin.token),
            admin::connections(),
            None,
            stop.clone(),
            Duration::from_secs(1),
        ));
    }
    // Reload on change: an invalid file is reported, the rules stay.
    let reloader = Reloader::new(
        args.config.clone(),
        config.clone(),
        layer.clone(),
        backend.as_backend(),
        from_config::Axum,
    );
    let mut stopped = stop.clone();
    let watcher = tokio::spawn(reloader.watch(
        Duration::from_millis(250),
        async move {
            let _ = stopped.changed().await;
        },
        |event| eprintln!("gateway: {event}"),
    ));
    tokio::spawn(async move {
        signal::stop_signal().await;
        let _ = stop_tx.send(true);
    });
    let mut router = app(layer);
    if args.server_timing {
        router = router.layer(axum::middleware::from_fn(timing::server_timing));
    }
    let connections = match from_config::connections(&config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gateway: {e}");
            return ExitCode::FAILURE;
        }
    };
    server::serve(
        listener,
        router,
        connections,
        tls,
        stop,
        Duration::from_secs(5),
    )
    .await;
    let _ = watcher.await;
    match backend {
        BuiltBackend::Redis(redis) => match redis.shutdown().await {
            Ok(()) => eprintln!("gateway: stopped; every count reached Redis"),
            Err(unflushed) => eprintln!("gateway: stopped; {unflushed}"),
        },
        BuiltBackend::Memory(_) => eprintln!("gateway: stopped"),
    }
    ExitCode::SUCCESS
}
