//! `flash_crowd serve --policy P --port X`: the backend behind one policy.
//!
//! The backend is a pool of [`POOL`] permits (a tokio `Semaphore`): each
//! request holds one for the service time, and past the pool requests wait
//! for a permit without bound (the queue). `/book` and `/browse` share the
//! pool. Beside them, outside every limiter: `GET /_stats` (peaks, and
//! who reached the backend), `GET /_limit` (the adaptive limit and the
//! pool's use since the last read) and `POST /_service?ms=N` (changes the
//! service time).

use std::borrow::Cow;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use throttle_fleet_axum::InFlightLimit;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use throttle_fleet_axum::key::{Extracted, Global, Jwt, UserAgentHash};
use throttle_fleet_axum::{
    ClientIp, KeyExtractor, Limit, MissingKey, Policy, Quota, RequestHead, Rule, ThrottleLayer,
};
use throttle_fleet_core::adaptive::Vegas;
use throttle_fleet_core::{Class, memory::MemoryBackend};
use tokio::sync::Semaphore;
use tower::{BoxError, ServiceBuilder};

use crate::{JWT_SECRET, Options, POOL, SERVICE, WHO};

/// The signed-in clients' rule: a token bucket per JWT subject.
pub(crate) const USER_QUOTA: Quota = Quota::per_second(5).with_burst(10);
/// The anonymous clients' rule: a token bucket per /24 and User-Agent.
pub(crate) const ANON_QUOTA: Quota = Quota::per_second(10).with_burst(20);
/// The /24 of the anonymous clients' composite key.
pub(crate) const ANON_PREFIX: u8 = 24;
/// The fixed concurrency rule's slots, and tower's `ConcurrencyLimit`'s:
/// the pool's size, which an operator of a fixed limit must know.
pub(crate) const FIXED: u64 = POOL as u64;
/// The adaptive limits' ceiling (the peers' too): four times the pool,
/// for the policies without a suffix. An adaptive limit is not told the
/// pool's size; its ceiling only has to be above it, and the algorithm
/// has to find the pool below it.
pub(crate) const ADAPTIVE_MAX: u64 = 4 * POOL as u64;
/// The ceiling of the `@2x` policies: twice the pool, which the guide
/// advised before the probe drained the queue (the queue then stays under
/// the pool whatever the algorithm does); kept to show the ceiling no
/// longer matters.
pub(crate) const ADAPTIVE_MAX_2X: u64 = 2 * POOL as u64;
/// The `+reserve` policies' reserve per class step.
pub(crate) const ADAPTIVE_RESERVE: u64 = 8;
/// Requests the peers' `Buffer` holds in front of their limit (tower-acc's
/// hyper example's size) before `LoadShed` refuses.
pub(crate) const PEER_BUFFER: usize = 16;
/// The initial limit of both peers' Vegas: tower-acc's default, and the
/// core's `Vegas::new()`'s (tower-resilience-adaptive's own is 10).
pub(crate) const PEER_INITIAL: usize = 20;

/// The pool, its queue, and what the run saw of them.
pub(crate) struct Backend {
    permits: Semaphore,
    service_us: AtomicU64,
    in_use: AtomicU64,
    waiting: AtomicU64,
    peak_in_use: AtomicU64,
    peak_waiting: AtomicU64,
    /// Requests that reached the backend: genuine /book, genuine /browse,
    /// bot /book, bot /browse.
    reached: [AtomicU64; 4],
    /// Sums of `in_use` and `waiting` sampled every 10 ms, and the samples,
    /// since `/_limit` last read them.
    sampled: Mutex<(u64, u64, u64)>,
}

impl Backend {
    fn new() -> Self {
        Self {
            permits: Semaphore::new(POOL),
            service_us: AtomicU64::new(SERVICE.as_micros() as u64),
            in_use: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            peak_in_use: AtomicU64::new(0),
            peak_waiting: AtomicU64::new(0),
            reached: Default::default(),
            sampled: Mutex::new((0, 0, 0)),
        }
    }
}

/// Adds one to `count` until dropped (a request that gives up waiting, or
/// ends, leaves the count), raising `peak`.
struct Counted<'a>(&'a AtomicU64);

impl<'a> Counted<'a> {
    fn enter(count: &'a AtomicU64, peak: &AtomicU64) -> Self {
        let now = count.fetch_add(1, Ordering::Relaxed) + 1;
        peak.fetch_max(now, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `/book` and `/browse`: wait for a permit, hold it for the service time.
async fn work(State(backend): State<Arc<Backend>>, uri: Uri, headers: HeaderMap) -> &'static str {
    let bot = headers.get(WHO).is_some_and(|v| v == "bot");
    let book = uri.path() == "/book";
    backend.reached[usize::from(bot) * 2 + usize::from(!book)].fetch_add(1, Ordering::Relaxed);
    let queued = Counted::enter(&backend.waiting, &backend.peak_waiting);
    let Ok(_permit) = backend.permits.acquire().await else {
        return "closed";
    };
    drop(queued);
    let _held = Counted::enter(&backend.in_use, &backend.peak_in_use);
    let service = Duration::from_micros(backend.service_us.load(Ordering::Relaxed));
    tokio::time::sleep(service).await;
    "ok"
}

/// Reads the policy's current concurrency limit, if it has an adaptive one.
type LimitFn = Arc<dyn Fn() -> Option<u64> + Send + Sync>;

#[derive(Clone)]
struct Control {
    backend: Arc<Backend>,
    limit: LimitFn,
    policy: &'static str,
}

fn json(body: String) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], body)
}

async fn stats(State(ctl): State<Control>) -> impl IntoResponse {
    let b = &ctl.backend;
    let r = |i: usize| b.reached[i].load(Ordering::Relaxed);
    json(
        serde_json::json!({
            "policy": ctl.policy,
            "peak_in_use": b.peak_in_use.load(Ordering::Relaxed),
            "peak_queue": b.peak_waiting.load(Ordering::Relaxed),
            "reached": {
                "genuine_book": r(0), "genuine_browse": r(1),
                "bot_book": r(2), "bot_browse": r(3),
            },
        })
        .to_string(),
    )
}

async fn read_limit(State(ctl): State<Control>) -> impl IntoResponse {
    let (in_use, waiting, n) = std::mem::take(
        &mut *ctl
            .backend
            .sampled
            .lock()
            .unwrap_or_else(|e| e.into_inner()),
    );
    let mean = |sum: u64| if n == 0 { 0.0 } else { sum as f64 / n as f64 };
    json(
        serde_json::json!({
            "limit": (ctl.limit)(),
            "in_use": mean(in_use),
            "queue": mean(waiting),
            "service_ms": ctl.backend.service_us.load(Ordering::Relaxed) as f64 / 1000.0,
        })
        .to_string(),
    )
}

async fn set_service(State(ctl): State<Control>, uri: Uri) -> impl IntoResponse {
    let ms = uri
        .query()
        .and_then(|q| q.strip_prefix("ms="))
        .and_then(|v| v.parse::<u64>().ok());
    match ms {
        Some(ms) if (1..=10_000).contains(&ms) => {
            ctl.backend.service_us.store(ms * 1000, Ordering::Relaxed);
            StatusCode::NO_CONTENT
        }
        _ => StatusCode::BAD_REQUEST,
    }
}

/// The anonymous clients' key: a /24 and the User-Agent's hash, for
/// requests without a token that verifies (signed-in clients are the
/// `user` rule's). A forged or expired token does not exempt a request.
struct Anonymous {
    jwt: Jwt,
    by: (ClientIp, UserAgentHash),
}

impl KeyExtractor for Anonymous {
    fn extract(&self, req: &RequestHead<'_>) -> Extracted {
        match self.jwt.extract(req) {
            Extracted::Key(_) => Extracted::Skip,
            _ => self.by.extract(req),
        }
    }

    fn validate(&self) -> Result<(), throttle_fleet_core::ConfigError> {
        self.jwt.validate()?;
        self.by.validate()
    }

    fn kind(&self) -> Cow<'static, str> {
        format!("anonymous:{}", self.by.kind()).into()
    }
}

/// The per-client rate rules every `rate*` policy starts with.
pub(crate) fn rate_limits() -> [Limit; 2] {
    let user = Limit::new(
        Rule::new("user", USER_QUOTA).token_bucket(),
        Jwt::hs256(JWT_SECRET),
    )
    .on_missing_key(MissingKey::Skip);
    let anon = Limit::new(
        Rule::new("anon", ANON_QUOTA).token_bucket(),
        Anonymous {
            jwt: Jwt::hs256(JWT_SECRET),
            by: (ClientIp::v4_prefix(ANON_PREFIX), UserAgentHash),
        },
    );
    [user, anon]
}

fn rate_policy() -> Policy {
    rate_limits().into_iter().fold(Policy::new(), Policy::limit)
}

/// The rate rules' layer, alone (`rate`) or outside a peer's stack.
fn rate_layer() -> Result<ThrottleLayer, String> {
    ThrottleLayer::new(rate_policy(), MemoryBackend::default()).map_err(|e| e.to_string())
}

/// What answers `/book` and `/browse` under `policy`, and how to read its
/// adaptive limit. A policy ending in `@2x` is its namesake with the
/// ceiling [`ADAPTIVE_MAX_2X`] instead of [`ADAPTIVE_MAX`].
fn limited(policy: &str, backend: Arc<Backend>) -> Result<(Router, LimitFn), String> {
    let routes = Router::new()
        .route("/book", get(work))
        .route("/browse", get(work))
        .with_state(backend);
    let none: LimitFn = Arc::new(|| None);
    let shed = |_: BoxError| async { StatusCode::SERVICE_UNAVAILABLE };
    let (base, max) = match policy.strip_suffix("@2x") {
        Some(base) => (base, ADAPTIVE_MAX_2X),
        None => (policy, ADAPTIVE_MAX),
    };
    Ok(match base {
        "none" => (routes, none),
        "rate" => (routes.layer(rate_layer()?), none),
        "rate+fixed" => {
            let policy = rate_policy().rule(Rule::concurrency("backend", FIXED), Global);
            let layer =
                ThrottleLayer::new(policy, MemoryBackend::default()).map_err(|e| e.to_string())?;
            (routes.layer(layer), none)
        }
        "rate+adaptive" => adaptive(routes, max, false)?,
        "rate+adaptive+reserve" => adaptive(routes, max, true)?,
        "tower-cl+shed" => {
            // Around the whole router, so every route shares one semaphore
            // (`ConcurrencyLimitLayer` makes one per `layer` call).
            let stack = ServiceBuilder::new()
                .layer(HandleErrorLayer::new(shed))
                .load_shed()
                .concurrency_limit(POOL)
                .service(routes);
            (Router::new().fallback_service(stack), none)
        }
        "rate+tower-acc" => {
            let seen = Arc::new(AtomicU64::new(0));
            let algorithm = Observed {
                // Its README's quick start and usage; the initial limit is
                // its default, the ceiling ours.
                inner: tower_acc::Vegas::builder()
                    .initial_limit(PEER_INITIAL)
                    .max_limit(max as usize)
                    .build(),
                seen: seen.clone(),
            };
            seen.store(
                tower_acc::Algorithm::max_concurrency(&algorithm) as u64,
                Ordering::Relaxed,
            );
            // As tower-acc's hyper example stacks it: shed when the buffer
            // in front of the adaptive limit is full; the rate rules
            // outside, as in front of ours.
            let stack = ServiceBuilder::new()
                .layer(HandleErrorLayer::new(shed))
                .load_shed()
                .buffer(PEER_BUFFER)
                .layer(tower_acc::ConcurrencyLimitLayer::new(algorithm))
                .service(routes);
            let read: LimitFn = Arc::new(move || Some(seen.load(Ordering::Relaxed)));
            (
                Router::new().fallback_service(stack).layer(rate_layer()?),
                read,
            )
        }
        "rate+resilience" => {
            // Its Vegas with its defaults (alpha 3, beta 6, min 1) but the
            // ceiling ours and the initial limit tower-acc's.
            let vegas = Arc::new(
                tower_resilience_adaptive::Vegas::builder()
                    .initial_limit(PEER_INITIAL)
                    .max_limit(max as usize)
                    .build(),
            );
            // Stacked as its docs say (`AdaptiveLimiterLayer` on the
            // service). At its limit it does not refuse: `poll_ready` stays
            // pending (it never returns its `LimitReached`), so, as for
            // tower-acc, a `Buffer` in front and `LoadShed` answer 503 when
            // the buffer is full.
            let stack = ServiceBuilder::new()
                .layer(HandleErrorLayer::new(shed))
                .load_shed()
                .buffer(PEER_BUFFER)
                .layer(tower_resilience_adaptive::AdaptiveLimiterLayer::new(
                    Shared(vegas.clone()),
                ))
                .service(routes);
            let read: LimitFn = Arc::new(move || {
                Some(tower_resilience_adaptive::ConcurrencyAlgorithm::limit(&*vegas) as u64)
            });
            (
                Router::new().fallback_service(stack).layer(rate_layer()?),
                read,
            )
        }
        _ => {
            return Err(format!(
                "--policy: {policy:?} is not one of {:?}",
                crate::POLICIES
            ));
        }
    })
}

/// The rate rules, then an adaptive concurrency rule (`Vegas::new()`, the
/// core's defaults) of ceiling `max`; with `reserve`, slots kept for
/// `/book` (critical) over `/browse` (sheddable).
fn adaptive(routes: Router, max: u64, reserve: bool) -> Result<(Router, LimitFn), String> {
    let mut in_flight = InFlightLimit {
        adaptive: Some(Vegas::new()),
        ..InFlightLimit::new(max)
    };
    let mut backend;
    if reserve {
        in_flight.reserve = ADAPTIVE_RESERVE;
        backend = Limit::new(Rule::concurrency("backend", in_flight), Global);
        backend = backend.class_by(|req: &RequestHead<'_>| {
            if req.uri.path() == "/book" {
                Class::Critical
            } else {
                Class::Sheddable
            }
        });
    } else {
        backend = Limit::new(Rule::concurrency("backend", in_flight), Global);
    }
    let layer = ThrottleLayer::new(rate_policy().limit(backend), MemoryBackend::default())
        .map_err(|e| e.to_string())?;
    let rules = layer.clone();
    let index = rules.rules().index_of("backend").ok_or("no backend rule")?;
    let read: LimitFn = Arc::new(move || rules.rules().adaptive_limit(index));
    Ok((routes.layer(layer), read))
}

/// tower-acc's algorithm, its current limit copied out after each update
/// (tower-acc keeps it private).
#[derive(Clone)]
struct Observed<A> {
    inner: A,
    seen: Arc<AtomicU64>,
}

impl<A: tower_acc::Algorithm> tower_acc::Algorithm for Observed<A> {
    fn max_concurrency(&self) -> usize {
        self.inner.max_concurrency()
    }

    fn update(&mut self, rtt: Duration, inflight: usize, error: bool, canceled: bool) {
        self.inner.update(rtt, inflight, error, canceled);
        self.seen
            .store(self.inner.max_concurrency() as u64, Ordering::Relaxed);
    }
}

/// tower-resilience-adaptive's algorithm, shared with the server so that
/// its limit can be read (`ConcurrencyAlgorithm::limit` is public, but
/// `AdaptiveLimiterLayer` keeps the algorithm it is given).
struct Shared<A>(Arc<A>);

impl<A: tower_resilience_adaptive::ConcurrencyAlgorithm>
    tower_resilience_adaptive::ConcurrencyAlgorithm for Shared<A>
{
    fn record_success(&self, latency: Duration) {
        self.0.record_success(latency);
    }

    fn record_failure(&self) {
        self.0.record_failure();
    }

    fn record_dropped(&self) {
        self.0.record_dropped();
    }

    fn limit(&self) -> usize {
        self.0.limit()
    }

    fn min_limit(&self) -> usize {
        self.0.min_limit()
    }

    fn max_limit(&self) -> usize {
        self.0.max_limit()
    }
}

pub(crate) fn main(args: &[String]) -> Result<ExitCode, String> {
    let opts = Options::parse(args, &[])?;
    let policy = opts.get("--policy").ok_or("needs --policy")?;
    let policy = *crate::POLICIES
        .iter()
        .find(|p| **p == policy)
        .ok_or(format!(
            "--policy: {policy:?} is not one of {:?}",
            crate::POLICIES
        ))?;
    let port: u16 = opts.parsed("--port", 0)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let backend = Arc::new(Backend::new());
        let (limited, limit) = limited(policy, backend.clone())?;
        let sampler = backend.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(10));
            loop {
                every.tick().await;
                let mut s = sampler.sampled.lock().unwrap_or_else(|e| e.into_inner());
                s.0 += sampler.in_use.load(Ordering::Relaxed);
                s.1 += sampler.waiting.load(Ordering::Relaxed);
                s.2 += 1;
            }
        });
        let control = Control {
            backend,
            limit,
            policy,
        };
        let app = Router::new()
            .route("/_stats", get(stats))
            .route("/_limit", get(read_limit))
            .route("/_service", post(set_service))
            .with_state(control)
            .fallback_service(limited);
        let listener = tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
            .await
            .map_err(|e| format!("binding 127.0.0.1:{port}: {e}"))?;
        eprintln!(
            "flash_crowd serve: {policy} on {}",
            listener.local_addr().map_err(|e| e.to_string())?
        );
        throttle_fleet_axum::serve::serve(listener, app)
            .with_graceful_shutdown(crate::signal::stop_signal())
            .await
            .map_err(|e| e.to_string())?;
        Ok(ExitCode::SUCCESS)
    })
}
