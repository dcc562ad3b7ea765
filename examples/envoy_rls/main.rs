//! Envoy's rate limit services from a configuration file: RLS v3
//! (`envoy.filters.http.ratelimit` asks it per request) and the quota
//! service, RLQS (`envoy.filters.http.rate_limit_quota` streams its usage
//! and gets token buckets back), on one gRPC port.
//!
//! ```sh
//! cargo run -p throttle-fleet-suite --example envoy_rls -- --config examples/envoy_rls.toml
//! ```
//!
//! Listens where the file's `[rls] listen` says (default
//! `127.0.0.1:8081`; `--listen ADDR` overrides it) under the table's
//! connection, stream and keep-alive bounds, and prints `envoy_rls
//! listening on ADDR` once it serves; serves Prometheus text at
//! `/metrics` on `[metrics] listen`; reloads the file's rules when it
//! changes, keeping counts; stops on SIGINT or SIGTERM. An invalid file (or
//! a rule Envoy cannot be served, such as a leaky bucket) makes it exit
//! with status 2 and the error naming the rule and field.

mod incoming;
#[path = "../support/logs.rs"]
mod logs;
#[path = "../support/metrics.rs"]
mod metrics;
#[path = "../support/signal.rs"]
mod signal;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use throttle_fleet_config::reload::Reloader;
use throttle_fleet_config::{BuiltBackend, GatewayConfig, RlsConfig};
use throttle_fleet_envoy::{EnvoyRules, Rlqs, RlqsOptions, Rls};
use tokio::sync::watch;

struct Args {
    config: PathBuf,
    listen: Option<SocketAddr>,
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        config: PathBuf::from("examples/envoy_rls.toml"),
        listen: None,
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
            other => {
                return Err(format!(
                    "unknown argument {other:?} (use --config FILE, --listen ADDR)"
                ));
            }
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> ExitCode {
    logs::init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, message)) => {
            eprintln!("envoy_rls: {message}");
            ExitCode::from(code)
        }
    }
}

/// What went wrong: the exit status (2 for a bad file) and why.
type Failure = (u8, String);

async fn run() -> Result<(), Failure> {
    let bad = |e: &dyn std::fmt::Display| (2, e.to_string());
    let args = args().map_err(|e| (2, e))?;
    let file = args.config.display().to_string();
    let config = GatewayConfig::load(&args.config).map_err(|e| bad(&e))?;
    let rls_config = config.rls.unwrap_or_default();
    // The recorder first: the rules and the backend register with it.
    let prometheus = config
        .metrics_listen
        .map(|_| metrics::install())
        .transpose()
        .map_err(|e| (1, e))?;
    let backend: BuiltBackend = config.backend.build(&file).await.map_err(|e| bad(&e))?;
    let rules = EnvoyRules::new(&config, &file, backend.as_backend()).map_err(|e| bad(&e))?;
    let rlqs = Rlqs::new(rules.clone(), rlqs_options(&config, rls_config))
        .await
        .map_err(|e| bad(&e))?;
    let listen = args.listen.unwrap_or(rls_config.listen);
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| (1, format!("cannot listen on {listen}: {e}")))?;
    let bound = listener.local_addr().map_err(|e| (1, e.to_string()))?;
    let connections = incoming::incoming(listener, &rls_config).map_err(|e| (2, e))?;
    if let (Some(listen), Some(handle)) = (config.metrics_listen, prometheus) {
        let at = metrics::serve(listen, handle, || {})
            .await
            .map_err(|e| (1, e))?;
        eprintln!("envoy_rls: metrics at http://{at}/metrics");
    }
    eprintln!("envoy_rls: {} rules from {file}", config.rules.len());
    println!("envoy_rls listening on {bound}");

    let (stop_tx, stop) = watch::channel(false);
    let reloader = Reloader::with_target(args.config.clone(), config.clone(), rules.clone());
    let mut stopped = stop.clone();
    let watcher = tokio::spawn(reloader.watch(
        Duration::from_millis(250),
        async move {
            let _ = stopped.changed().await;
        },
        |event| eprintln!("envoy_rls: {event}"),
    ));
    tokio::spawn(async move {
        signal::stop_signal().await;
        let _ = stop_tx.send(true);
    });
    let mut stopped = stop.clone();
    let served = throttle_fleet_envoy::server(&rls_config)
        .add_service(Rls::new(rules).into_server())
        .add_service(rlqs.into_server())
        .serve_with_incoming_shutdown(connections, async move {
            let _ = stopped.changed().await;
        })
        .await;
    let _ = watcher.await;
    if let Err(e) = served {
        return Err((1, format!("the server stopped: {e}")));
    }
    match backend {
        BuiltBackend::Redis(redis) => match redis.shutdown().await {
            Ok(()) => eprintln!("envoy_rls: stopped; every count reached Redis"),
            Err(unflushed) => eprintln!("envoy_rls: stopped; {unflushed}"),
        },
        BuiltBackend::Memory(_) => eprintln!("envoy_rls: stopped"),
    }
    Ok(())
}

/// The quota service's settings from the file: the Envoys' report
/// interval, the bounds, and Redis for the shares (under the backend's key
/// prefix) when the backend is Redis: its `url`, or its `cluster` nodes.
/// The backend's `fleet_size`, when set, is the replicas a `local` rule's
/// rate is split between while Redis cannot answer.
fn rlqs_options(config: &GatewayConfig, rls: RlsConfig) -> RlqsOptions {
    let mut options = RlqsOptions::from_config(&rls);
    if let Some(prefix) = &config.backend.key_prefix {
        options = options.key_prefix(prefix.clone());
    }
    if let Some(n) = config.backend.fleet_size {
        options = options.replicas(n);
    }
    let backend = &config.backend;
    if backend.kind == throttle_fleet_config::BackendKind::Memory {
        return options;
    }
    match &backend.url {
        _ if !backend.cluster.is_empty() => options.redis_cluster(backend.cluster.clone()),
        Some(url) => options.redis(url.clone()),
        None => options,
    }
}
