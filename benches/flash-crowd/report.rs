//! `flash_crowd report [--check] [--csv DIR] FILE...`: the drivers' JSON
//! files as markdown tables, the goals check, and the charts of the
//! adaptive limits (one per adaptive policy through the flash crowd, one
//! through the step scenario). With `--check` the exit status says whether
//! every goal was met: 1 if not (or if the recommended policy did not
//! run), 3 if the goals missed were all missed in runs where the driver
//! fell behind its schedule (inconclusive: the check measured the
//! driver). With `--csv DIR` each run's samples are also written to DIR
//! as CSV.

use std::fmt::Write as _;
use std::process::ExitCode;

use serde_json::Value;

use crate::plot::{csv, flash_plot, step_plot};
use crate::serve::{
    ADAPTIVE_MAX, ADAPTIVE_MAX_2X, ADAPTIVE_RESERVE, ANON_PREFIX, ANON_QUOTA, FIXED, PEER_BUFFER,
    PEER_INITIAL, USER_QUOTA,
};
use crate::{ADAPTIVE, CLIENT_TIMEOUT, Options, POLICIES, POOL, RECOMMENDED, SERVICE};

/// The goals of the recommended policy.
const CRITICAL_SERVED: f64 = 99.0;
const P99_RATIO: f64 = 3.0;
const BOTS_REFUSED: f64 = 95.0;
/// The goals of the adaptive rule alone: its limit's median over the crowd
/// from the pool to 1.5 times it, the backend busy this much of the time.
pub(crate) const BAND: (f64, f64) = (POOL as f64, 1.5 * POOL as f64);
const BUSY: f64 = 90.0;
/// The step policy's: back in [`BAND`] this long after each step at most
/// (or before the phase ends, if it is shorter).
const RESETTLE_S: f64 = 10.0;

pub(crate) fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn pct(part: &Value, whole: &Value) -> f64 {
    100.0 * f(part) / f(whole)
}

fn ms(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.1}"))
}

fn median(sorted: &[f64]) -> f64 {
    if sorted.is_empty() {
        f64::NAN
    } else {
        sorted[sorted.len() / 2]
    }
}

pub(crate) fn samples(v: &Value) -> &[Value] {
    v["samples"].as_array().map_or(&[][..], |s| s.as_slice())
}

/// One policy's figures, as the tables and the goals read them.
struct Row {
    policy: String,
    genuine: f64,
    critical: f64,
    p50: Value,
    p99: Value,
    unloaded: Value,
    ratio: f64,
    genuine_p99: Value,
    genuine_unloaded: Value,
    genuine_ratio: f64,
    bots_admitted: f64,
    peak_pool: Value,
    peak_queue: Value,
    goodput: f64,
    /// The adaptive limit over the crowd (ramp and peak): median, least,
    /// most; none for a policy without one.
    limit: Option<(f64, f64, f64)>,
    /// Mean permits in use over the peak, percent of the pool.
    busy: f64,
    /// The median and the highest of the queue's 100 ms means over the
    /// peak.
    queue_median: f64,
    queue_max: f64,
    /// The driver's lateness p99 in this run, ms.
    lag: f64,
}

impl Row {
    fn of(r: &Value) -> Self {
        let reached = &r["server"]["reached"];
        let bots_reached = f(&reached["bot_book"]) + f(&reached["bot_browse"]);
        let crowd_from = f(&r["phases_s"][0]);
        let peak_from = crowd_from + f(&r["phases_s"][1]);
        let s = samples(r);
        let mut limit: Vec<f64> = s
            .iter()
            .filter(|s| f(&s["t"]) > crowd_from)
            .filter_map(|s| s["limit"].as_f64())
            .collect();
        limit.sort_by(f64::total_cmp);
        let peak: Vec<&Value> = s.iter().filter(|s| f(&s["t"]) > peak_from).collect();
        let busy =
            peak.iter().map(|s| f(&s["in_use"])).sum::<f64>() / peak.len() as f64 / POOL as f64
                * 100.0;
        let mut queue: Vec<f64> = peak.iter().map(|s| f(&s["queue"])).collect();
        queue.sort_by(f64::total_cmp);
        Self {
            policy: r["policy"].as_str().unwrap_or("?").to_owned(),
            genuine: pct(&r["genuine"]["served"], &r["genuine"]["sent"]),
            critical: pct(&r["critical"]["served"], &r["critical"]["sent"]),
            p50: r["critical"]["p50_ms"].clone(),
            p99: r["critical"]["p99_ms"].clone(),
            unloaded: r["critical"]["unloaded_p99_ms"].clone(),
            ratio: f(&r["critical"]["p99_ms"]) / f(&r["critical"]["unloaded_p99_ms"]),
            genuine_p99: r["genuine"]["p99_ms"].clone(),
            genuine_unloaded: r["genuine"]["unloaded_p99_ms"].clone(),
            genuine_ratio: f(&r["genuine"]["p99_ms"]) / f(&r["genuine"]["unloaded_p99_ms"]),
            bots_admitted: 100.0 * bots_reached / f(&r["bots"]["sent"]),
            peak_pool: r["server"]["peak_in_use"].clone(),
            peak_queue: r["server"]["peak_queue"].clone(),
            goodput: f(&r["goodput"]),
            limit: (!limit.is_empty()).then(|| (median(&limit), limit[0], limit[limit.len() - 1])),
            busy,
            queue_median: median(&queue),
            queue_max: queue.last().copied().unwrap_or(f64::NAN),
            lag: f(&r["driver_lag"]["p99_ms"]),
        }
    }
}

pub(crate) fn main(args: &[String]) -> Result<ExitCode, String> {
    let opts = Options::parse(args, &["--check"])?;
    let mut flash = Vec::new();
    let mut step = None;
    for file in opts.positional() {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("{file}: {e}"))?;
        if v["scenario"] == "step" {
            step = Some(v);
        } else {
            flash.push(v);
        }
    }
    let order = |v: &Value| {
        POLICIES
            .iter()
            .position(|p| v["policy"] == *p)
            .unwrap_or(99)
    };
    flash.sort_by_key(order);
    if let Some(dir) = opts.get("--csv") {
        for v in flash.iter().chain(&step) {
            let name = format!(
                "{}-{}.csv",
                v["scenario"].as_str().unwrap_or("flash"),
                v["policy"].as_str().unwrap_or("unknown")
            );
            csv(&std::path::Path::new(dir).join(name), samples(v))?;
        }
    }
    let mut out = String::new();
    let rows: Vec<Row> = flash.iter().map(Row::of).collect();
    if let Some(first) = flash.first() {
        header(&mut out, first);
    }
    tables(&mut out, &rows, &flash);
    lateness(&mut out, flash.iter().chain(&step));
    let verdict = goals(&mut out, &rows, step.as_ref());
    against(&mut out, &rows);
    for v in &flash {
        flash_plot(&mut out, v);
    }
    if let Some(step) = &step {
        step_plot(&mut out, step);
    }
    print!("{out}");
    Ok(match (opts.flag("--check"), verdict) {
        (false, _) | (true, Verdict::Met) => ExitCode::SUCCESS,
        (true, Verdict::Missed) => ExitCode::from(1),
        (true, Verdict::Inconclusive) => ExitCode::from(3),
    })
}

fn header(out: &mut String, first: &Value) {
    let phases = &first["phases_s"];
    let _ = writeln!(
        out,
        "Flash crowd{}: {} s at 150 genuine req/s, a {} s ramp to 900 genuine + 2,100 bot req/s, held {} s. \
         Backend: {POOL} permits x {} ms (640 req/s), waiters unbounded; client timeout {} s.\n\
         Rules: `user` token bucket {}/s burst {} per JWT `sub`; `anon` token bucket {}/s burst {} per /{ANON_PREFIX} + \
         User-Agent hash (requests without a valid token); every `rate*` policy starts with them. \
         `rate+fixed` adds `backend` concurrency {FIXED} (Global); `rate+adaptive` adds `backend` concurrency \
         {ADAPTIVE_MAX} (Global), adaptive (Vegas, defaults); `+reserve` adds reserve {ADAPTIVE_RESERVE}, \
         `/book` critical, `/browse` sheddable; `@2x`: ceiling {ADAPTIVE_MAX_2X} instead of {ADAPTIVE_MAX}. \
         `tower-cl+shed` is ConcurrencyLimit({POOL}) + LoadShed; `rate+tower-acc` and `rate+resilience` are the rate \
         rules, then tower-acc's or tower-resilience-adaptive's Vegas (initial {PEER_INITIAL}, max the ceiling) behind \
         Buffer({PEER_BUFFER}) + LoadShed.\n",
        if first["quick"] == true {
            " (QUICK)"
        } else {
            ""
        },
        f(&phases[0]),
        f(&phases[1]),
        f(&phases[2]),
        SERVICE.as_millis(),
        CLIENT_TIMEOUT.as_secs(),
        USER_QUOTA.limit(),
        USER_QUOTA.burst(),
        ANON_QUOTA.limit(),
        ANON_QUOTA.burst(),
    );
}

fn tables(out: &mut String, rows: &[Row], flash: &[Value]) {
    out.push_str(
        "| policy | genuine served | critical served | critical p50 / p99 (ms) | unloaded p99 (ms) | p99 / unloaded | \
         genuine p99 (ms) | unloaded genuine p99 (ms) | genuine p99 / unloaded | bots admitted | goodput (req/s) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(
            out,
            "| `{}` | {:.1}% | {:.1}% | {} / {} | {} | {:.1}x | {} | {} | {:.1}x | {:.1}% | {:.0} |",
            r.policy,
            r.genuine,
            r.critical,
            ms(&r.p50),
            ms(&r.p99),
            ms(&r.unloaded),
            r.ratio,
            ms(&r.genuine_p99),
            ms(&r.genuine_unloaded),
            r.genuine_ratio,
            r.bots_admitted,
            r.goodput,
        );
    }
    out.push_str(
        "\nThe backend and the limit (the limit over the crowd, ramp and peak; busy and the queue's median over the peak, \
         from the 100 ms samples; peak pool and peak queue as the server counted them):\n\n\
         | policy | limit median | limit min | limit max | busy | peak pool | peak queue | queue median | queue max (100 ms) | server CPU | driver CPU |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (r, v) in rows.iter().zip(flash) {
        let (med, min, max) = r
            .limit
            .map_or(("-".into(), "-".into(), "-".into()), |(a, b, c)| {
                (format!("{a:.0}"), format!("{b:.0}"), format!("{c:.0}"))
            });
        let _ = writeln!(
            out,
            "| `{}` | {med} | {min} | {max} | {:.0}% | {} | {} | {:.1} | {:.1} | {}% | {}% |",
            r.policy,
            r.busy,
            r.peak_pool,
            r.peak_queue,
            r.queue_median,
            r.queue_max,
            v["cpu"]["server"],
            v["cpu"]["driver"],
        );
    }
    out.push_str(
        "\nAnswers, every request (genuine critical requests in brackets):\n\n\
         | policy | 200 | 429 | 503 | timeout | other |\n|---|---:|---:|---:|---:|---:|\n",
    );
    for v in flash {
        let (all, crit) = (&v["status"], &v["status_critical"]);
        let cell = |k: &str| format!("{} ({})", all[k], crit[k]);
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} |",
            v["policy"].as_str().unwrap_or("?"),
            cell("200"),
            cell("429"),
            cell("503"),
            cell("timeout"),
            cell("other"),
        );
    }
}

/// How late the driver sent requests: the figures measure the policies
/// only where it kept to its schedule, so the runs in which it did not
/// are named.
fn lateness<'a>(out: &mut String, runs: impl Iterator<Item = &'a Value>) {
    let mut worst = (0.0f64, 0.0f64);
    let mut late = Vec::new();
    for v in runs {
        let (p99, max) = (f(&v["driver_lag"]["p99_ms"]), f(&v["driver_lag"]["max_ms"]));
        worst = (worst.0.max(p99), worst.1.max(max));
        if p99 > LATE_MS {
            late.push(format!(
                "`{}` {} (p99 {p99:.1} ms)",
                v["policy"].as_str().unwrap_or("?"),
                v["scenario"].as_str().unwrap_or("?")
            ));
        }
    }
    let _ = writeln!(
        out,
        "\nThe driver's lateness (planned time to sending), worst run: p99 {:.1} ms, most {:.1} ms.{}",
        worst.0,
        worst.1,
        if late.is_empty() {
            String::new()
        } else {
            format!(
                " Behind its schedule (p99 over {LATE_MS} ms), so partly measuring the driver: {} (build in release, or lighten the machine).",
                late.join(", ")
            )
        }
    );
}

/// The driver's p99 lateness past which a run does not count.
const LATE_MS: f64 = 10.0;

/// What the goals check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Met,
    /// A goal missed in a run where the driver kept to its schedule (or
    /// the recommended policy did not run).
    Missed,
    /// Goals missed, each in a run where the driver fell behind.
    Inconclusive,
}

/// One goal: what was measured against what, and whether it held.
type Check = (bool, String);

/// Prints one line of goals per policy that has some (met / NOT met each).
fn goals(out: &mut String, rows: &[Row], step: Option<&Value>) -> Verdict {
    let row = |p: &str| rows.iter().find(|r| r.policy == p);
    // (policy, its run kept to schedule, its checks)
    let mut sets: Vec<(String, bool, Vec<Check>)> = Vec::new();
    let mut recommended_ran = true;
    match row(RECOMMENDED) {
        Some(r) => sets.push((format!("`{RECOMMENDED}`"), r.lag <= LATE_MS, recommended(r))),
        None => recommended_ran = false,
    }
    if let Some(r) = row(ADAPTIVE) {
        let fixed = row("rate+fixed").map(|p| p.goodput);
        sets.push((
            format!("`{ADAPTIVE}`"),
            r.lag <= LATE_MS,
            adaptive(r, fixed),
        ));
    }
    if let Some(step) = step {
        let checks = crate::plot::resettled(step)
            .into_iter()
            .skip(1)
            .map(|p| {
                let within = RESETTLE_S.min(p.length);
                let ok = p.entered.is_some_and(|e| e <= within);
                let what = match p.entered {
                    Some(e) => format!(
                        "step at {:.0} s: back in [{:.0}, {:.0}] after {e:.1} s (<= {within:.0} s)",
                        p.from, BAND.0, BAND.1
                    ),
                    None => format!(
                        "step at {:.0} s: not back in [{:.0}, {:.0}] by the phase's end ({:.0} s; <= {within:.0} s)",
                        p.from, BAND.0, BAND.1, p.length
                    ),
                };
                (ok, what)
            })
            .collect();
        let policy = step["policy"].as_str().unwrap_or("?");
        sets.push((
            format!("`{policy}` in the step scenario"),
            f(&step["driver_lag"]["p99_ms"]) <= LATE_MS,
            checks,
        ));
    }
    out.push('\n');
    if !recommended_ran {
        let _ = writeln!(out, "Goals: `{RECOMMENDED}` did not run: NOT met.");
    }
    if row(ADAPTIVE).is_none() {
        let _ = writeln!(out, "Goals: `{ADAPTIVE}` did not run, not checked.");
    }
    let mark = |ok: bool| if ok { "met" } else { "NOT met" };
    let mut missed_on_time = !recommended_ran;
    let mut missed = !recommended_ran;
    for (policy, on_time, checks) in &sets {
        let all = checks.iter().all(|(ok, _)| *ok);
        missed |= !all;
        missed_on_time |= !all && *on_time;
        let _ = writeln!(
            out,
            "Goals of {policy}: {}. {}{}",
            checks
                .iter()
                .map(|(ok, what)| format!("{what}: {}", mark(*ok)))
                .collect::<Vec<_>>()
                .join("; "),
            if all { "All met." } else { "NOT all met." },
            if all || *on_time {
                ""
            } else {
                " Inconclusive: the driver fell behind its schedule in this run."
            }
        );
    }
    if missed_on_time {
        Verdict::Missed
    } else if missed {
        Verdict::Inconclusive
    } else {
        Verdict::Met
    }
}

/// The recommended policy's goals: the genuine buyers served, quickly,
/// the bots kept out, the backend's queue short.
fn recommended(r: &Row) -> Vec<Check> {
    vec![
        (
            r.critical >= CRITICAL_SERVED,
            format!("critical served {:.2}% (>= {CRITICAL_SERVED}%)", r.critical),
        ),
        (
            r.ratio <= P99_RATIO,
            format!(
                "critical p99 {} ms = {:.2}x unloaded {} ms (<= {P99_RATIO}x)",
                ms(&r.p99),
                r.ratio,
                ms(&r.unloaded)
            ),
        ),
        (
            f(&r.peak_queue) <= POOL as f64,
            format!("peak queue {} (<= {POOL})", r.peak_queue),
        ),
        (
            100.0 - r.bots_admitted >= BOTS_REFUSED,
            format!(
                "bots refused {:.1}% (>= {BOTS_REFUSED}%)",
                100.0 - r.bots_admitted
            ),
        ),
    ]
}

/// The adaptive rule's goals: its limit finds the pool, the queue stays
/// short, the backend stays busy, and it serves at least what the fixed
/// limit (which was told the pool's size) serves, quickly.
fn adaptive(r: &Row, fixed_goodput: Option<f64>) -> Vec<Check> {
    let median = r.limit.map_or(f64::NAN, |l| l.0);
    let mut checks = vec![
        (
            (BAND.0..=BAND.1).contains(&median),
            format!(
                "limit median over the crowd {median:.0} (in [{:.0}, {:.0}])",
                BAND.0, BAND.1
            ),
        ),
        (
            f(&r.peak_queue) <= POOL as f64,
            format!("peak queue {} (<= {POOL})", r.peak_queue),
        ),
        (
            r.busy >= BUSY,
            format!("busy {:.1}% of the pool over the peak (>= {BUSY}%)", r.busy),
        ),
    ];
    if let Some(fixed) = fixed_goodput {
        checks.push((
            r.goodput >= fixed,
            format!(
                "goodput {:.0} req/s (>= `rate+fixed`'s {fixed:.0})",
                r.goodput
            ),
        ));
    }
    checks.push((
        r.genuine_ratio <= P99_RATIO,
        format!(
            "genuine p99 {} ms = {:.2}x unloaded {} ms (<= {P99_RATIO}x)",
            ms(&r.genuine_p99),
            r.genuine_ratio,
            ms(&r.genuine_unloaded)
        ),
    ));
    checks
}

/// The recommended policy against two others, as ratios.
fn against(out: &mut String, rows: &[Row]) {
    let Some(r) = rows.iter().find(|r| r.policy == RECOMMENDED) else {
        return;
    };
    for peer in ["tower-cl+shed", "rate"] {
        if let Some(p) = rows.iter().find(|p| p.policy == peer) {
            let _ = writeln!(
                out,
                "`{RECOMMENDED}` against `{peer}`: critical served {:.2}x ({:.1}% vs {:.1}%), critical p99 {:.2}x ({} vs {} ms).",
                r.critical / p.critical,
                r.critical,
                p.critical,
                f(&r.p99) / f(&p.p99),
                ms(&r.p99),
                ms(&p.p99),
            );
        }
    }
}
