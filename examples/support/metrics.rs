//! Prometheus text at `/metrics` on the file's `[metrics] listen`, for the
//! examples that serve a file (the gateway, the Envoy services): the
//! recorder is installed before the rules and the backend are built, so
//! their handles register with it.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// Installs the Prometheus recorder for the whole process.
pub(crate) fn install() -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    throttle_fleet_axum::metrics::describe();
    throttle_fleet_redis::metrics::describe();
    // Histograms are drained by upkeep, which the exporter leaves to us.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// Serves `handle`'s text at `/metrics` on `listen`, in the background,
/// calling `refresh` before each scrape (for figures read rather than
/// counted, such as the keys blocked now).
pub(crate) async fn serve(
    listen: SocketAddr,
    handle: PrometheusHandle,
    refresh: impl Fn() + Send + Sync + 'static,
) -> Result<SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen} for metrics: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let refresh = std::sync::Arc::new(refresh);
    let render = move || {
        refresh();
        std::future::ready(handle.render())
    };
    let app = Router::new().route("/metrics", get(render));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(bound)
}
