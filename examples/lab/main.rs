//! The rate limiting laboratory: the five algorithms against steady
//! traffic, window-edge bursts, bot swarms and traffic of your own, side by
//! side on one time axis, in a browser.
//!
//! Run with `cargo run -p throttle-fleet-suite --example lab`, then open <http://127.0.0.1:3000/>
//! (or the address in `THROTTLE_LISTEN`).
//!
//! The page is a thin view: every timeline it draws comes from
//! `GET /api/simulate?pattern=..&limit=..&period_ms=..&burst=..` (plus
//! `seed` for a swarm, and `rate`, `duration_ms`, `burst_size`,
//! `jitter_ms`, `seed` for custom traffic), which runs
//! `throttle_fleet_test_support::sim::simulate`: the library's own algorithms, through the
//! memory backend on a manual clock, not a JavaScript copy. A bad parameter
//! gets `400` with a message naming it; one simulation sends at most 20,000
//! requests. The endpoint is itself rate limited per client IP by throttle.
//!
//! `cargo run -p throttle-fleet-suite --example lab -- --svg docs/lab-boundary.svg` writes the
//! boundary attack's timelines as the guide's SVG figure instead
//! (`--query 'pattern=bot_swarm&limit=20'` draws another scenario).

#[path = "../support/logs.rs"]
mod logs;
mod params;
mod simulation;
mod svg;

use std::net::SocketAddr;

use axum::Router;
use axum::extract::RawQuery;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use throttle_fleet_axum::{ClientIp, MemoryBackend, Policy, Quota, Rule, ThrottleLayer};

use params::{BadParam, Scenario};
use simulation::Lab;

const INDEX: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/lab.js");
const STYLE: &str = include_str!("page/lab.css");

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    logs::init();
    let mut args = std::env::args().skip(1);
    let (mut svg_path, mut query) = (None, String::new());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--svg" => svg_path = Some(args.next().ok_or("--svg needs a file name")?),
            "--query" => query = args.next().ok_or("--query needs a query string")?,
            "-h" | "--help" => {
                println!(
                    "usage: lab                       serve the laboratory on THROTTLE_LISTEN (default 127.0.0.1:3000)\n       \
                     lab --svg FILE [--query Q]  write the timelines of Q (default: the boundary attack) as SVG"
                );
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}; try --help").into()),
        }
    }
    if let Some(path) = svg_path {
        let scenario = if query.is_empty() {
            Scenario::boundary_attack()
        } else {
            params::parse(&query).map_err(|e| e.to_string())?
        };
        let lab = Lab::run(scenario).map_err(|e| e.to_string())?;
        std::fs::write(&path, svg::render(&lab))?;
        println!("wrote {path}");
        return Ok(());
    }

    let addr = std::env::var("THROTTLE_LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    // Each simulation is real work: 20 per second per client, 40 at once.
    let policy = Policy::new().rule(
        Rule::new("ip", Quota::per_second(20).with_burst(40)).token_bucket(),
        ClientIp::default(),
    );
    let api = Router::new()
        .route("/api/simulate", get(simulate))
        .layer(ThrottleLayer::new(policy, MemoryBackend::default())?);
    let app = Router::new()
        .route(
            "/",
            get(|| async { asset("text/html; charset=utf-8", INDEX) }),
        )
        .route(
            "/lab.js",
            get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }),
        )
        .route(
            "/lab.css",
            get(|| async { asset("text/css; charset=utf-8", STYLE) }),
        )
        .merge(api);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("the laboratory: http://{}/", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn simulate(RawQuery(query): RawQuery) -> Response {
    let scenario = match params::parse(query.as_deref().unwrap_or("")) {
        Ok(s) => s,
        Err(e) => return bad_request(&e),
    };
    // A few milliseconds of work at most: off the async workers anyway.
    match tokio::task::spawn_blocking(move || {
        Lab::run(scenario).map(|lab| lab.to_json().to_string())
    })
    .await
    {
        Ok(Ok(body)) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Ok(Err(e)) => bad_request(&e),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "the simulation failed").into_response(),
    }
}

fn bad_request(e: &BadParam) -> Response {
    let body = serde_json::json!({ "error": e.to_string(), "field": e.field });
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
