//! `flash_crowd drive`: sends a scenario's planned requests, open loop,
//! each from its client's own loopback address, and writes what happened
//! as JSON.
//!
//! Every request is sent at its planned time whatever the answers to
//! earlier ones (a slow server does not slow the arrivals), over a
//! keep-alive connection of its client bound to the client's address, and
//! timed from its planned time until its body has been read; one not
//! answered within [`CLIENT_TIMEOUT`] counts as a timeout (not served).

use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Request, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::traffic::{Arrival, Phases, Population};
use crate::{CLIENT_TIMEOUT, JWT_SECRET, Options, WHO};

/// What became of one request.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    /// The status, or [`TIMEOUT`] or [`FAILED`].
    status: u16,
    /// From the planned time to the end of the body.
    latency: Duration,
    /// From the planned time to the moment the driver began sending: the
    /// driver's own lateness, which should stay near zero.
    lag: Duration,
}

/// Not answered within [`CLIENT_TIMEOUT`].
const TIMEOUT: u16 = 0;
/// The connection failed (refused, reset, closed early).
const FAILED: u16 = 1;

/// One client's connections and the headers its requests carry.
struct Sender {
    http: Client<HttpConnector, Empty<Bytes>>,
    user_agent: HeaderValue,
    authorization: Option<HeaderValue>,
    who: HeaderValue,
}

type Http = Client<HttpConnector, Empty<Bytes>>;

fn client(addr: Option<Ipv4Addr>) -> Http {
    let mut connector = HttpConnector::new();
    connector.set_local_address(addr.map(IpAddr::V4));
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

fn token(subject: &str) -> Result<String, String> {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_secs()
        + 3_600;
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({ "sub": subject, "exp": exp }),
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())
}

fn senders(population: &Population) -> Result<Vec<Arc<Sender>>, String> {
    population
        .identities
        .iter()
        .map(|id| {
            let authorization = match &id.subject {
                Some(sub) => Some(
                    HeaderValue::try_from(format!("Bearer {}", token(sub)?))
                        .map_err(|e| e.to_string())?,
                ),
                None => None,
            };
            Ok(Arc::new(Sender {
                http: client(Some(id.addr)),
                user_agent: HeaderValue::try_from(id.user_agent.as_str())
                    .map_err(|e| e.to_string())?,
                authorization,
                who: HeaderValue::from_static(if id.bot { "bot" } else { "genuine" }),
            }))
        })
        .collect()
}

/// Sends one request at `due` and waits for its answer, at most until
/// `due + CLIENT_TIMEOUT`.
async fn send(sender: Arc<Sender>, port: u16, book: bool, due: Instant) -> Outcome {
    tokio::time::sleep_until(due).await;
    let lag = due.elapsed();
    let path = if book { "/book" } else { "/browse" };
    let mut req = Request::get(format!("http://127.0.0.1:{port}{path}"))
        .header(header::USER_AGENT, sender.user_agent.clone())
        .header(WHO, sender.who.clone());
    if let Some(auth) = &sender.authorization {
        req = req.header(header::AUTHORIZATION, auth.clone());
    }
    let Ok(req) = req.body(Empty::new()) else {
        return Outcome {
            status: FAILED,
            latency: Duration::ZERO,
            lag,
        };
    };
    let exchange = async {
        let res = sender.http.request(req).await.map_err(|_| ())?;
        let status = res.status().as_u16();
        res.into_body().collect().await.map_err(|_| ())?;
        Ok::<_, ()>(status)
    };
    let status = match tokio::time::timeout_at(due + CLIENT_TIMEOUT, exchange).await {
        Ok(Ok(status)) => status,
        Ok(Err(())) => FAILED,
        Err(_) => TIMEOUT,
    };
    Outcome {
        status,
        latency: due.elapsed(),
        lag,
    }
}

/// Sends `arrivals` from `start` on; their outcomes in the same order.
async fn run(
    senders: &[Arc<Sender>],
    port: u16,
    arrivals: &[Arrival],
    start: Instant,
) -> Vec<Outcome> {
    let mut handles = Vec::with_capacity(arrivals.len());
    for a in arrivals {
        let due = start + a.at;
        // Spawned a little ahead of time, each task sleeps to its own
        // instant: the schedule does not wait on the spawning loop.
        tokio::time::sleep_until(due - Duration::from_millis(2).min(a.at)).await;
        let sender = senders[a.client as usize].clone();
        handles.push(tokio::spawn(send(sender, port, a.book, due)));
    }
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.unwrap_or(Outcome {
            status: FAILED,
            latency: Duration::ZERO,
            lag: Duration::ZERO,
        }));
    }
    out
}

/// User and system time of process `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// CPU use of `pid` between two readings, percent of one core.
fn cpu_percent(before: Option<u64>, after: Option<u64>, wall: Duration, clk_tck: f64) -> Value {
    match (before, after) {
        (Some(b), Some(a)) => json!(round1(
            (a - b) as f64 / clk_tck / wall.as_secs_f64() * 100.0
        )),
        _ => Value::Null,
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// The `p` quantile of `sorted`, in milliseconds (nearest rank).
fn quantile_ms(sorted: &[Duration], p: f64) -> Value {
    if sorted.is_empty() {
        return Value::Null;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    json!(round1(sorted[rank - 1].as_secs_f64() * 1000.0))
}

async fn get_json(http: &Http, port: u16, path: &str) -> Result<Value, String> {
    let req = Request::get(format!("http://127.0.0.1:{port}{path}"))
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    let res = http
        .request(req)
        .await
        .map_err(|e| format!("{path}: {e}"))?;
    let body = res.into_body().collect().await.map_err(|e| e.to_string())?;
    serde_json::from_slice(&body.to_bytes()).map_err(|e| format!("{path}: {e}"))
}

async fn set_service(http: &Http, port: u16, ms: u64) -> Result<(), String> {
    let req = Request::post(format!("http://127.0.0.1:{port}/_service?ms={ms}"))
        .body(Empty::new())
        .map_err(|e| e.to_string())?;
    let res = http
        .request(req)
        .await
        .map_err(|e| format!("/_service: {e}"))?;
    if !res.status().is_success() {
        return Err(format!("/_service?ms={ms}: {}", res.status()));
    }
    Ok(())
}

/// The driver's lateness in sending `outcomes`: p99 and most, ms.
fn lag(outcomes: &[Outcome]) -> Value {
    let mut l: Vec<Duration> = outcomes.iter().map(|o| o.lag).collect();
    l.sort();
    json!({ "p99_ms": quantile_ms(&l, 0.99), "max_ms": quantile_ms(&l, 1.0) })
}

/// Counts of the answers `outcomes` got.
/// The outcomes of the arrivals that `f` picks, in order.
fn pick(arrivals: &[Arrival], outcomes: &[Outcome], f: &dyn Fn(&Arrival) -> bool) -> Vec<Outcome> {
    arrivals
        .iter()
        .zip(outcomes)
        .filter(|(a, _)| f(a))
        .map(|(_, o)| *o)
        .collect()
}

fn statuses(outcomes: &[Outcome]) -> Value {
    let count = |f: &dyn Fn(u16) -> bool| outcomes.iter().filter(|o| f(o.status)).count();
    json!({
        "200": count(&|s| s == 200),
        "429": count(&|s| s == 429),
        "503": count(&|s| s == 503),
        "timeout": count(&|s| s == TIMEOUT),
        "other": count(&|s| ![200, 429, 503, TIMEOUT].contains(&s)),
    })
}

pub(crate) fn main(args: &[String]) -> Result<ExitCode, String> {
    let opts = Options::parse(args, &["--quick"])?;
    let port: u16 = opts.parsed("--port", 0)?;
    if port == 0 {
        return Err("needs --port".into());
    }
    let policy = opts.get("--policy").ok_or("needs --policy")?.to_owned();
    let out = opts.get("--out").ok_or("needs --out")?.to_owned();
    let scenario = opts.get("--scenario").unwrap_or("flash").to_owned();
    let quick = opts.flag("--quick");
    let seed: u64 = opts.parsed("--seed", 1)?;
    let server_pid: u32 = opts.parsed("--server-pid", 0)?;
    let clk_tck: f64 = opts.parsed("--clk-tck", 100.0)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let report = runtime.block_on(async {
        let population = Population::new();
        let senders = senders(&population)?;
        let control = client(None);
        let ctx = Ctx {
            population: &population,
            senders: &senders,
            control: &control,
            port,
            seed,
            quick,
            server_pid,
            clk_tck,
        };
        match scenario.as_str() {
            "flash" => flash(&ctx).await,
            "step" => step(&ctx).await,
            other => Err(format!("--scenario: {other:?} is not flash or step")),
        }
    })?;
    let mut report = report;
    report["policy"] = json!(policy);
    report["scenario"] = json!(scenario);
    report["quick"] = json!(quick);
    std::fs::write(&out, report.to_string()).map_err(|e| format!("writing {out}: {e}"))?;
    Ok(ExitCode::SUCCESS)
}

struct Ctx<'a> {
    population: &'a Population,
    senders: &'a [Arc<Sender>],
    control: &'a Http,
    port: u16,
    seed: u64,
    quick: bool,
    server_pid: u32,
    clk_tck: f64,
}

impl Ctx<'_> {
    /// Runs `arrivals` from `start` on, with CPU use measured around
    /// them and the server's `/_limit` read every 100 ms for `length`.
    async fn timed(
        &self,
        arrivals: &[Arrival],
        start: Instant,
        length: Duration,
    ) -> Result<(Vec<Outcome>, Value, Vec<Value>), String> {
        let me = std::process::id();
        let (server0, driver0, t0) = (cpu_ticks(self.server_pid), cpu_ticks(me), Instant::now());
        let traffic = run(self.senders, self.port, arrivals, start);
        let (outcomes, samples) = tokio::join!(traffic, self.samples(start, length));
        let wall = t0.elapsed();
        let cpu = json!({
            "server": cpu_percent(server0, cpu_ticks(self.server_pid), wall, self.clk_tck),
            "driver": cpu_percent(driver0, cpu_ticks(me), wall, self.clk_tck),
            "wall_s": round1(wall.as_secs_f64()),
        });
        Ok((outcomes, cpu, samples?))
    }

    /// The server's adaptive limit and the pool's mean use and queue, every
    /// 100 ms from `start` for `length`.
    async fn samples(&self, start: Instant, length: Duration) -> Result<Vec<Value>, String> {
        let mut out = Vec::new();
        let mut every = tokio::time::interval_at(start, Duration::from_millis(100));
        // Forgets what the pool did before the start.
        get_json(self.control, self.port, "/_limit").await?;
        while start.elapsed() < length {
            every.tick().await;
            let v = get_json(self.control, self.port, "/_limit").await?;
            out.push(json!({
                "t": (start.elapsed().as_secs_f64() * 100.0).round() / 100.0,
                "limit": v["limit"], "in_use": v["in_use"], "queue": v["queue"],
                "service_ms": v["service_ms"],
            }));
        }
        Ok(out)
    }
}

async fn flash(ctx: &Ctx<'_>) -> Result<Value, String> {
    let phases = if ctx.quick {
        Phases::QUICK
    } else {
        Phases::FULL
    };
    let arrivals = ctx.population.flash_crowd(phases, ctx.seed);
    let start = Instant::now() + Duration::from_millis(200);
    let (outcomes, cpu, samples) = ctx.timed(&arrivals, start, phases.total()).await?;
    let server = get_json(ctx.control, ctx.port, "/_stats").await?;

    let bot = |a: &Arrival| ctx.population.identities[a.client as usize].bot;
    let pick = |f: &dyn Fn(&Arrival) -> bool| pick(&arrivals, &outcomes, f);
    let served = |list: &[Outcome]| list.iter().filter(|o| o.status == 200).count();
    let latencies = |list: &[Outcome]| {
        let mut l: Vec<Duration> = list
            .iter()
            .filter(|o| o.status == 200)
            .map(|o| o.latency)
            .collect();
        l.sort();
        l
    };
    let genuine = pick(&|a| !bot(a));
    let critical = pick(&|a| !bot(a) && a.book);
    let critical_loaded = latencies(&pick(&|a| !bot(a) && a.book && phases.of(a.at) > 0));
    let critical_unloaded = latencies(&pick(&|a| !bot(a) && a.book && phases.of(a.at) == 0));
    let genuine_loaded = latencies(&pick(&|a| !bot(a) && phases.of(a.at) > 0));
    let genuine_unloaded = latencies(&pick(&|a| !bot(a) && phases.of(a.at) == 0));
    // Genuine requests answered 200 while the peak lasted, whenever they
    // arrived: what the backend delivered per second.
    let peak = (phases.base + phases.ramp)..phases.total();
    let goodput = arrivals
        .iter()
        .zip(&outcomes)
        .filter(|(a, o)| !bot(a) && o.status == 200 && peak.contains(&(a.at + o.latency)))
        .count();
    let bots = pick(&|a| bot(a));
    Ok(json!({
        "phases_s": [phases.base.as_secs_f64(), phases.ramp.as_secs_f64(), phases.hold.as_secs_f64()],
        "genuine": { "sent": genuine.len(), "served": served(&genuine),
                     "p50_ms": quantile_ms(&genuine_loaded, 0.5), "p99_ms": quantile_ms(&genuine_loaded, 0.99),
                     "unloaded_p99_ms": quantile_ms(&genuine_unloaded, 0.99) },
        "critical": { "sent": critical.len(), "served": served(&critical),
                      "p50_ms": quantile_ms(&critical_loaded, 0.5), "p99_ms": quantile_ms(&critical_loaded, 0.99),
                      "unloaded_p99_ms": quantile_ms(&critical_unloaded, 0.99) },
        "goodput": goodput as f64 / phases.hold.as_secs_f64(),
        "bots": { "sent": bots.len(), "answered_200": served(&bots) },
        "status": statuses(&outcomes),
        "driver_lag": lag(&outcomes),
        "status_genuine": statuses(&genuine),
        "status_critical": statuses(&critical),
        "status_bots": statuses(&bots),
        "server": server,
        "cpu": cpu,
        "samples": samples,
    }))
}

/// The service time steps: 25 ms, then 75 ms, then 25 ms again, under
/// the crowd's peak mix throughout (the overload the flash crowd ends in).
const STEP_MS: [u64; 3] = [25, 75, 25];

async fn step(ctx: &Ctx<'_>) -> Result<Value, String> {
    let lengths = if ctx.quick { [4, 8, 8] } else { [10, 15, 15] }.map(Duration::from_secs);
    let total: Duration = lengths.iter().sum();
    let arrivals = ctx.population.peak_mix(total, ctx.seed);
    let start = Instant::now() + Duration::from_millis(200);
    set_service(ctx.control, ctx.port, STEP_MS[0]).await?;
    let steps = async {
        let mut at = start;
        for i in 1..lengths.len() {
            at += lengths[i - 1];
            tokio::time::sleep_until(at).await;
            set_service(ctx.control, ctx.port, STEP_MS[i]).await?;
        }
        Ok::<_, String>(())
    };
    let (timed, steps) = tokio::join!(ctx.timed(&arrivals, start, total), steps);
    steps?;
    let (outcomes, cpu, samples) = timed?;
    let bot = |a: &Arrival| ctx.population.identities[a.client as usize].bot;
    let pick = |f: &dyn Fn(&Arrival) -> bool| pick(&arrivals, &outcomes, f);
    let genuine = pick(&|a| !bot(a));
    let critical = pick(&|a| !bot(a) && a.book);
    let bots = pick(&|a| bot(a));
    Ok(json!({
        "steps_s": [0.0, lengths[0].as_secs_f64(), (lengths[0] + lengths[1]).as_secs_f64()],
        "service_ms": STEP_MS,
        "length_s": total.as_secs_f64(),
        "status": statuses(&outcomes),
        "driver_lag": lag(&outcomes),
        "status_genuine": statuses(&genuine),
        "status_critical": statuses(&critical),
        "status_bots": statuses(&bots),
        "samples": samples,
        "cpu": cpu,
        "server": get_json(ctx.control, ctx.port, "/_stats").await?,
    }))
}
