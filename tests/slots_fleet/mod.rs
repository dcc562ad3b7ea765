//! A concurrency rule across a fleet, held to a perfect model: four copies
//! of an axum server (each its own Redis backend, connections and instance
//! id) on one real `redis-server`, one key, clients of each class holding
//! slow requests open over real HTTP, each sending its next request to the
//! next copy and retrying after `Retry-After` (plus up to a quarter second
//! of jitter, as clients that avoid herds do) when refused. The class is
//! read from `x-priority`; a [`Setup`] says how many slots, how many are
//! kept for each class above a request's, and how many clients of each
//! class there are (`concurrency_fleet` keeps none, `reserve_fleet` two).
//!
//! A request of class `c` is admitted only while what is held, itself
//! included, is at most `limit(c)` (`n − steps × reserve`). A slot is
//! taken before its request's handler starts and given back after it
//! ends, so the handlers see a lower bound of what Redis holds, and these
//! hold exactly, without tolerance ([`Breach`]):
//!
//! - the requests that ran both when a request arrived (outside the
//!   limiter) and when it reached its handler held their slot throughout
//!   its acquire: their number plus one is at most `limit(c)`;
//! - at every moment at most `limit(sheddable)` sheddable requests run,
//!   at most `limit(default)` default and sheddable ones, at most `n` in
//!   all;
//! - a request refused at the rule's own limit is answered 429; one
//!   refused under a lower limit (its class's share) 503
//!   `TEMPORARY_REDUCED_CAPACITY` (shed);
//! - no slot is left in Redis once every request has ended.
//!
//! And the rule does not refuse at `n` without cause: a refusal at `n` is
//! false when fewer than `n` requests held a slot or were on their way to
//! one, counting a request from its arrival (if it was admitted) to the
//! end of its answer's body (its slot's release is queued before that):
//! only a release outrun by an acquire on another copy's connection (the
//! release's trip) or a fault makes one. The events are ordered by one
//! counter, not by a clock. The measure the concurrency test used first
//! (fewer than `n` ran when the refusal arrived and 2 ms after its answer)
//! is printed too, but counts requests admitted and not yet in their
//! handler 2 ms later, which a loaded machine makes many (17 refusals of
//! one run's first burst, with the two cores oversubscribed three times).
//!
//! The copies give Redis the fault suites' patience (250 ms) and fail
//! closed: a decision Redis did not make would be outside the model (fail
//! open runs the request uncounted: with a 50 ms timeout and the cores
//! oversubscribed, 7 ran at once against a limit of 5), so an unanswered
//! acquire is refused with 503 `RATE_LIMITER_UNAVAILABLE`, retried and
//! counted.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use throttle_fleet_axum::InFlightLimit;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Extension, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::get;
use http_body::{Frame, SizeHint};
use throttle_fleet_axum::core::Class;
use throttle_fleet_axum::key::Global;
use throttle_fleet_axum::{Limit, Policy, RequestHead, Rule, ThrottleLayer};
use throttle_fleet_redis::{ExactBackend, RedisBackend, RedisConfig};
use throttle_fleet_test_support::RedisServer;
use throttle_fleet_test_support::http::client;
use throttle_fleet_test_support::http_faults::patient;

pub(crate) const COPIES: usize = 4;

/// One fleet's rule and load.
pub(crate) struct Setup {
    /// The rule's name, which refusals name as their dimension.
    pub(crate) rule: &'static str,
    /// The rule's slots.
    pub(crate) n: u64,
    /// Slots kept for each class above a request's; 0 for none (no class
    /// is read then).
    pub(crate) reserve: u64,
    /// Clients of each class, in [`Class::ALL`]'s order (critical first).
    pub(crate) clients: [usize; 3],
    /// Requests each client gets served.
    pub(crate) served_per_client: usize,
    /// A request holds its slot this long, plus up to `hold_spread_ms`.
    pub(crate) hold_ms: u64,
    pub(crate) hold_spread_ms: u64,
}

impl Setup {
    /// The most a request of `class` may find held, itself included: the
    /// model, written out (`n − steps × reserve`), not asked of the
    /// product.
    pub(crate) const fn limit(&self, class: Class) -> u64 {
        self.n - class.steps_below_critical() * self.reserve
    }

    /// The classes that have clients.
    pub(crate) fn classes(&self) -> impl Iterator<Item = Class> + '_ {
        Class::ALL
            .into_iter()
            .filter(|&class| self.clients[index(class)] > 0)
    }

    fn served(&self) -> [u64; 3] {
        self.clients.map(|n| (n * self.served_per_client) as u64)
    }
}

pub(crate) fn index(class: Class) -> usize {
    class.steps_below_critical() as usize
}

fn class_of(headers: &HeaderMap) -> Class {
    headers
        .get("x-priority")
        .and_then(|v| Class::from_name(v.to_str().ok()?))
        .unwrap_or_default()
}

/// What runs now, in the handlers of every copy.
#[derive(Default)]
struct Running {
    /// The requests in their handler, by id.
    ids: BTreeSet<u64>,
    /// How many of each class run.
    by_class: [u64; 3],
}

impl Running {
    fn total(&self) -> u64 {
        self.by_class.iter().sum()
    }
}

/// What the handlers and the `watch` middleware of every copy saw; arrays
/// are per class, in [`Class::ALL`]'s order.
#[derive(Default)]
struct Counts {
    running: Mutex<Running>,
    next_id: AtomicU64,
    served: [AtomicU64; 3],
    /// Refused for capacity: 429 at `n`, 503 shed below it.
    refused: [AtomicU64; 3],
    /// Refused because Redis did not answer in time (fail closed).
    unavailable: [AtomicU64; 3],
    /// Refused for capacity while fewer than the class's limit ran, both
    /// when the request arrived and 2 ms after it was answered (the first
    /// measure; a figure).
    refused_below_limit: [AtomicU64; 3],
    /// The most running (every class) when a request reached its handler,
    /// itself included, and how often that was above its class's limit:
    /// possible without a fault (a request admitted after it may reach its
    /// handler first), so a figure, not a bound.
    most_at_entry: [AtomicU64; 3],
    entries_over_limit: [AtomicU64; 3],
    /// The most requests that held their slot throughout a request's
    /// acquire, plus that request: bounded by its class's limit.
    most_held_at_admission: [AtomicU64; 3],
    /// The most running at once: sheddable, default + sheddable, all.
    most_running: [AtomicU64; 3],
    /// What broke the model, in words (the first few).
    violations: Mutex<Vec<String>>,
    /// How many breaches of each kind ([`Breach`]).
    breaches: [AtomicU64; 3],
    /// Orders arrivals and answers across copies.
    clock: AtomicU64,
    /// Per admitted request: when it arrived, and when its answer's body
    /// was done with (its slot's release queued before that).
    spans: Mutex<Vec<(u64, u64)>>,
    /// Per refusal at `n`: when it arrived, and when it was answered.
    refusals_at_n: Mutex<Vec<(u64, u64)>>,
}

impl Counts {
    fn violation(&self, kind: Breach, what: String) {
        self.breaches[kind as usize].fetch_add(1, Ordering::SeqCst);
        let mut v = self.violations.lock().unwrap();
        if v.len() < 20 {
            v.push(what);
        }
    }
}

/// The kinds of breach of the model.
#[derive(Clone, Copy)]
enum Breach {
    /// Admitted while its class's limit was held without it.
    Admission,
    /// More running at once than a class's limit allows.
    Running,
    /// Refused with a status or reason not its class's.
    Answer,
}

/// What `watch` hands the handler: the request's id and class, and who ran
/// when it arrived.
#[derive(Clone)]
struct Arrival {
    id: u64,
    class: Class,
    running: Arc<BTreeSet<u64>>,
}

/// A copy's state: the setup and what every copy saw.
#[derive(Clone)]
struct Shared {
    setup: &'static Setup,
    counts: Arc<Counts>,
}

async fn slow(
    State(Shared { setup, counts }): State<Shared>,
    Extension(arrival): Extension<Arrival>,
    headers: HeaderMap,
) -> &'static str {
    let (class, c) = (arrival.class, index(arrival.class));
    {
        let mut run = counts.running.lock().unwrap();
        // Ran when this request arrived and runs still: held a slot
        // throughout this request's acquire.
        let held = arrival
            .running
            .iter()
            .filter(|id| run.ids.contains(id))
            .count() as u64;
        let limit = setup.limit(class);
        if held + 1 > limit {
            let what = format!(
                "a {class} request was admitted while {held} others held their slot (its limit {limit})"
            );
            counts.violation(Breach::Admission, what);
        }
        counts.most_held_at_admission[c].fetch_max(held + 1, Ordering::SeqCst);
        run.ids.insert(arrival.id);
        run.by_class[c] += 1;
        let total = run.total();
        counts.most_at_entry[c].fetch_max(total, Ordering::SeqCst);
        if total > limit {
            counts.entries_over_limit[c].fetch_add(1, Ordering::SeqCst);
        }
        let [critical, default, sheddable] = run.by_class;
        let bounds = [
            (sheddable, setup.limit(Class::Sheddable)),
            (default + sheddable, setup.limit(Class::Default)),
            (total, setup.n),
        ];
        for (i, (now, limit)) in bounds.into_iter().enumerate() {
            counts.most_running[i].fetch_max(now, Ordering::SeqCst);
            if now > limit {
                counts.violation(
                    Breach::Running,
                    format!(
                        "{critical} critical, {default} default, {sheddable} sheddable ran at once"
                    ),
                );
            }
        }
    }
    let hold: u64 = headers["x-hold-ms"].to_str().unwrap().parse().unwrap();
    tokio::time::sleep(Duration::from_millis(hold)).await;
    {
        let mut run = counts.running.lock().unwrap();
        run.ids.remove(&arrival.id);
        run.by_class[c] -= 1;
    }
    counts.served[c].fetch_add(1, Ordering::SeqCst);
    "done"
}

/// Outside the limiter: notes who runs when a request arrives, checks a
/// refusal's status and reason against the request's class, and counts a
/// refusal made while fewer than the class's limit ran.
async fn watch(
    State(Shared { setup, counts }): State<Shared>,
    mut req: Request,
    next: Next,
) -> Response {
    let class = class_of(req.headers());
    let c = index(class);
    let arrived = counts.clock.fetch_add(1, Ordering::SeqCst);
    let (running, before) = {
        let run = counts.running.lock().unwrap();
        (Arc::new(run.ids.clone()), run.total())
    };
    req.extensions_mut().insert(Arrival {
        id: counts.next_id.fetch_add(1, Ordering::SeqCst),
        class,
        running,
    });
    let res = next.run(req).await;
    let answered = counts.clock.fetch_add(1, Ordering::SeqCst);
    let status = res.status().as_u16();
    if status == 200 {
        let end = Ended {
            counts: counts.clone(),
            arrived,
        };
        return res.map(|inner| Body::new(Watched { inner, _end: end }));
    }
    let (parts, body) = res.into_parts();
    let body = axum::body::to_bytes(body, 4096).await.unwrap();
    let reason: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let reason = reason["error"].as_str().unwrap_or_default().to_owned();
    let limit = setup.limit(class);
    let expected = if limit < setup.n {
        (503, "TEMPORARY_REDUCED_CAPACITY")
    } else {
        (429, "RATE_LIMIT_EXCEEDED")
    };
    let capacity = match (status, reason.as_str()) {
        (503, "RATE_LIMITER_UNAVAILABLE") => {
            counts.unavailable[c].fetch_add(1, Ordering::SeqCst);
            false
        }
        answer if answer == expected => true,
        _ => {
            counts.violation(
                Breach::Answer,
                format!("a {class} request was refused with {status} {reason}"),
            );
            true
        }
    };
    if capacity {
        counts.refused[c].fetch_add(1, Ordering::SeqCst);
        if limit == setup.n {
            let refusal = (arrived, answered);
            counts.refusals_at_n.lock().unwrap().push(refusal);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        let after = counts.running.lock().unwrap().total();
        if before < limit && after < limit {
            counts.refused_below_limit[c].fetch_add(1, Ordering::SeqCst);
        }
    }
    Response::from_parts(parts, Body::from(body))
}

/// An admitted request's body, which notes when it is done with: after
/// its inner body (the limiter's, which queues the slot's release at its
/// last frame, or when dropped) is dropped.
struct Watched {
    inner: Body,
    /// Dropped after `inner`.
    _end: Ended,
}

struct Ended {
    counts: Arc<Counts>,
    arrived: u64,
}

impl Drop for Ended {
    fn drop(&mut self) {
        let ended = self.counts.clock.fetch_add(1, Ordering::SeqCst);
        let span = (self.arrived, ended);
        self.counts.spans.lock().unwrap().push(span);
    }
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

async fn copy(server: &RedisServer, shared: &Shared) -> (SocketAddr, ExactBackend) {
    let setup = shared.setup;
    let backend = RedisBackend::exact(patient(RedisConfig::standalone(server.url())))
        .await
        .unwrap();
    let slots = InFlightLimit {
        slot_ttl: Duration::from_secs(2),
        reserve: setup.reserve,
        ..InFlightLimit::new(setup.n)
    };
    let rule = Rule::concurrency(setup.rule, slots).fail_closed();
    let limit = if setup.reserve > 0 {
        Limit::new(rule, Global).class_by(|req: &RequestHead<'_>| class_of(req.headers))
    } else {
        Limit::new(rule, Global)
    };
    let app = Router::new()
        .route("/slow", get(slow))
        .layer(ThrottleLayer::new(Policy::new().limit(limit), backend.clone()).unwrap())
        .layer(axum::middleware::from_fn_with_state(shared.clone(), watch))
        .with_state(shared.clone());
    (
        throttle_fleet_test_support::http::serve(app, true).await,
        backend,
    )
}

/// Client `c` of `class`: `served_per_client` requests served, each sent
/// to the next copy, retried after `Retry-After` plus jitter when refused
/// (`watch` checks the refusals).
async fn client_loop(setup: &'static Setup, c: usize, class: Class, addrs: Vec<SocketAddr>) {
    let http = client();
    let (mut served, mut attempt) = (0, c);
    while served < setup.served_per_client {
        let spread = (c as u64 * 7_919 + served as u64 * 6_151) % setup.hold_spread_ms.max(1);
        let hold = (setup.hold_ms + spread).to_string();
        let headers = [("x-priority", class.name()), ("x-hold-ms", hold.as_str())];
        let reply = http.get(addrs[attempt % COPIES], "/slow", &headers).await;
        attempt += 1;
        match reply.status.as_u16() {
            200 => served += 1,
            429 | 503 => {
                assert_eq!(reply.json()["dimension"], setup.rule, "{reply:?}");
                let wait = reply.header_u64("retry-after");
                assert_eq!(wait, 1);
                let jitter = (c as u64 * 7_919 + attempt as u64 * 104_729) % 250;
                tokio::time::sleep(Duration::from_secs(wait) + Duration::from_millis(jitter)).await;
            }
            other => panic!("a {class} request answered {other}: {reply:?}"),
        }
    }
}

/// One run's figures, per class where an array.
struct Figures {
    served: [u64; 3],
    refused: [u64; 3],
    unavailable: [u64; 3],
    refused_below_limit: [u64; 3],
    /// Refusals at `n` made while fewer than `n` requests held a slot or
    /// were on their way to one: those that had arrived before the refusal
    /// was answered and whose answer was not done with when it arrived.
    refused_below_held: u64,
    /// Refusals at `n`, all of them.
    refused_at_n: u64,
    most_at_entry: [u64; 3],
    entries_over_limit: [u64; 3],
    most_held_at_admission: [u64; 3],
    most_running: [u64; 3],
    violations: Vec<String>,
    breaches: [u64; 3],
}

async fn one_run(setup: &'static Setup, run: usize) -> Figures {
    let server = RedisServer::start();
    let shared = Shared {
        setup,
        counts: Arc::new(Counts::default()),
    };
    let counts = &shared.counts;
    let mut copies = Vec::new();
    for _ in 0..COPIES {
        copies.push(copy(&server, &shared).await);
    }
    let addrs: Vec<_> = copies.iter().map(|(a, _)| *a).collect();
    let mut clients = Vec::new();
    for class in Class::ALL {
        for _ in 0..setup.clients[index(class)] {
            let c = clients.len();
            clients.push(tokio::spawn(client_loop(setup, c, class, addrs.clone())));
        }
    }
    for c in clients {
        c.await.unwrap();
    }
    // Every request has ended: once the releases have landed, Redis holds
    // no slot. The wait for the background releases ends before a slot
    // left behind could leave by itself: its member expires after the
    // slot lifetime (2 s) but its keys live a second longer, counted from
    // the last acquire, which was at least one hold before now.
    let waited = std::time::Instant::now();
    let mut keys = server.cli(&["DBSIZE"]).trim().to_owned();
    while keys != "0" && waited.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(5)).await;
        keys = server.cli(&["DBSIZE"]).trim().to_owned();
    }
    assert_eq!(
        keys, "0",
        "run {run}: slots left in Redis after every request ended"
    );
    for (_, backend) in &copies {
        let stats = backend.slot_stats();
        assert_eq!(stats.held, 0);
        // No slot expired while its request ran (a renewal that meets a
        // slot released after it listed it does not count it: the unit
        // test of `slots::held`).
        assert_eq!(stats.lost, 0, "run {run}: slots lost: {stats:?}");
    }
    // Every admitted request's body has been done with.
    let served: u64 = setup.served().iter().sum();
    for _ in 0..400 {
        if counts.spans.lock().unwrap().len() as u64 == served {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let spans = std::mem::take(&mut *counts.spans.lock().unwrap());
    assert_eq!(spans.len() as u64, served);
    let refusals_at_n = std::mem::take(&mut *counts.refusals_at_n.lock().unwrap());
    let refused_below_held = refusals_at_n
        .iter()
        .filter(|&&(arrived, answered)| {
            let held = spans
                .iter()
                .filter(|&&(a, end)| a < answered && end > arrived)
                .count();
            (held as u64) < setup.n
        })
        .count() as u64;
    let get = |a: &[AtomicU64; 3]| a.each_ref().map(|a| a.load(Ordering::SeqCst));
    let figures = Figures {
        served: get(&counts.served),
        refused: get(&counts.refused),
        unavailable: get(&counts.unavailable),
        refused_below_limit: get(&counts.refused_below_limit),
        refused_below_held,
        refused_at_n: refusals_at_n.len() as u64,
        most_at_entry: get(&counts.most_at_entry),
        entries_over_limit: get(&counts.entries_over_limit),
        most_held_at_admission: get(&counts.most_held_at_admission),
        most_running: get(&counts.most_running),
        violations: std::mem::take(&mut *counts.violations.lock().unwrap()),
        breaches: get(&counts.breaches),
    };
    assert_eq!(figures.served, setup.served());
    figures
}

/// The runs' figures added up.
#[derive(Default)]
pub(crate) struct Totals {
    /// Refusals for capacity, per class.
    pub(crate) refused: [u64; 3],
    /// Refusals at `n`, and those made while fewer than `n` held a slot or
    /// were on their way to one.
    pub(crate) refused_at_n: u64,
    pub(crate) refused_below_held: u64,
    /// Refusals at `n` made while fewer than `n` ran at the arrival and
    /// 2 ms after the answer (the first measure).
    pub(crate) refused_at_n_below_running: u64,
    pub(crate) unavailable: u64,
    pub(crate) breaches: [u64; 3],
    pub(crate) violations: Vec<String>,
}

impl Totals {
    /// The share of refusals at `n` made while fewer than `n` held a slot.
    pub(crate) fn false_share(&self) -> f64 {
        self.refused_below_held as f64 / self.refused_at_n.max(1) as f64
    }
}

/// `FLEET_RUNS` runs (one by default) of `setup`, each printed.
pub(crate) async fn runs(setup: &'static Setup) -> Totals {
    let runs: usize = std::env::var("FLEET_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut t = Totals::default();
    let n = setup.n;
    for run in 0..runs {
        let f = one_run(setup, run).await;
        for class in setup.classes() {
            let c = index(class);
            println!(
                "run {run}: {:>9}: served {}, refused {} ({} while fewer than its limit {} ran), unavailable {}; most running at its entry {} ({} entries above its limit), most holding a slot at its admission {}",
                class.name(),
                f.served[c],
                f.refused[c],
                f.refused_below_limit[c],
                setup.limit(class),
                f.unavailable[c],
                f.most_at_entry[c],
                f.entries_over_limit[c],
                f.most_held_at_admission[c],
            );
            t.refused[c] += f.refused[c];
            if setup.limit(class) == n {
                t.refused_at_n_below_running += f.refused_below_limit[c];
            }
        }
        let [sheddable, lower, all] = f.most_running;
        println!(
            "run {run}: most running at once: {sheddable} sheddable (of {}), {lower} default + sheddable (of {}), {all} in all (of {n})",
            setup.limit(Class::Sheddable),
            setup.limit(Class::Default),
        );
        println!(
            "run {run}: refusals at {n} made while fewer than {n} held a slot or were on their way to one: {} of {}",
            f.refused_below_held, f.refused_at_n
        );
        t.refused_at_n += f.refused_at_n;
        t.refused_below_held += f.refused_below_held;
        t.unavailable += f.unavailable.iter().sum::<u64>();
        for (all, run) in t.breaches.iter_mut().zip(f.breaches) {
            *all += run;
        }
        t.violations
            .extend(f.violations.into_iter().map(|v| format!("run {run}: {v}")));
    }
    println!(
        "{runs} runs: {} of {} refusals at {n} ({:.2}%) made while fewer than {n} held a slot or were on their way to one; {} ({:.2}%) while fewer than {n} ran (at arrival and 2 ms after the answer); {} refused for Redis's silence; breaches of the model: {} admissions above a class's limit, {} times more running than a class's limit, {} refusals with another class's answer",
        t.refused_below_held,
        t.refused_at_n,
        100.0 * t.false_share(),
        t.refused_at_n_below_running,
        100.0 * t.refused_at_n_below_running as f64 / t.refused_at_n.max(1) as f64,
        t.unavailable,
        t.breaches[Breach::Admission as usize],
        t.breaches[Breach::Running as usize],
        t.breaches[Breach::Answer as usize],
    );
    t
}
