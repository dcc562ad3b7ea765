//! `flash_crowd report [--check] FILE...`: the drivers' JSON files as one
//! markdown table per question, the goals check of the recommended policy,
//! and the plot of the step scenario. With `--check` the exit status says
//! whether the recommended policy met every goal: 1 if not (or if it did
//! not run), 3 if not while the driver fell behind its schedule in that
//! run (inconclusive: the check measured the driver).

use std::fmt::Write as _;
use std::process::ExitCode;

use serde_json::Value;

use crate::serve::{
    ADAPTIVE_MAX, ADAPTIVE_MAX_2X, ADAPTIVE_RESERVE, ANON_PREFIX, ANON_QUOTA, FIXED, PEER_BUFFER,
    PEER_INITIAL, USER_QUOTA,
};
use crate::{CLIENT_TIMEOUT, Options, POLICIES, POOL, RECOMMENDED, SERVICE};

/// The goals of the recommended policy.
const CRITICAL_SERVED: f64 = 99.0;
const P99_RATIO: f64 = 3.0;
const BOTS_REFUSED: f64 = 95.0;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn pct(part: &Value, whole: &Value) -> f64 {
    100.0 * f(part) / f(whole)
}

fn ms(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.1}"))
}

/// One policy's figures, as the table and the goals read them.
struct Row {
    policy: String,
    genuine: f64,
    critical: f64,
    p50: Value,
    p99: Value,
    unloaded: Value,
    ratio: f64,
    bots_admitted: f64,
    peak_pool: Value,
    peak_queue: Value,
    goodput: f64,
}

impl Row {
    fn of(r: &Value) -> Self {
        let reached = &r["server"]["reached"];
        let bots_reached = f(&reached["bot_book"]) + f(&reached["bot_browse"]);
        Self {
            policy: r["policy"].as_str().unwrap_or("?").to_owned(),
            genuine: pct(&r["genuine"]["served"], &r["genuine"]["sent"]),
            critical: pct(&r["critical"]["served"], &r["critical"]["sent"]),
            p50: r["critical"]["p50_ms"].clone(),
            p99: r["critical"]["p99_ms"].clone(),
            unloaded: r["critical"]["unloaded_p99_ms"].clone(),
            ratio: f(&r["critical"]["p99_ms"]) / f(&r["critical"]["unloaded_p99_ms"]),
            bots_admitted: 100.0 * bots_reached / f(&r["bots"]["sent"]),
            peak_pool: r["server"]["peak_in_use"].clone(),
            peak_queue: r["server"]["peak_queue"].clone(),
            goodput: f(&r["goodput"]),
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
    let mut out = String::new();
    let rows: Vec<Row> = flash.iter().map(Row::of).collect();
    if let Some(first) = flash.first() {
        header(&mut out, first);
    }
    table(&mut out, &rows, &flash);
    lateness(&mut out, flash.iter().chain(&step));
    limits(&mut out, &flash);
    let met = goals(&mut out, &rows);
    // A goal missed while the driver fell behind says nothing of the
    // policy: that check is inconclusive, not failed.
    let trusted = flash
        .iter()
        .filter(|v| v["policy"] == RECOMMENDED)
        .all(|v| f(&v["driver_lag"]["p99_ms"]) <= LATE_MS);
    if !met && !trusted {
        let _ = writeln!(
            out,
            "The check is inconclusive: the driver fell behind its schedule in `{RECOMMENDED}`'s run."
        );
    }
    if let Some(step) = &step {
        plot(&mut out, step);
    }
    print!("{out}");
    Ok(match (opts.flag("--check"), met, trusted) {
        (false, _, _) | (true, true, _) => ExitCode::SUCCESS,
        (true, false, true) => ExitCode::from(1),
        (true, false, false) => ExitCode::from(3),
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

fn table(out: &mut String, rows: &[Row], flash: &[Value]) {
    out.push_str(
        "| policy | genuine served | critical served | critical p50 / p99 (ms) | unloaded p99 (ms) | p99 / unloaded | \
         bots admitted | peak pool | peak queue | goodput (req/s) | server CPU | driver CPU |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (r, v) in rows.iter().zip(flash) {
        let _ = writeln!(
            out,
            "| `{}` | {:.1}% | {:.1}% | {} / {} | {} | {:.1}x | {:.1}% | {} | {} | {:.0} | {}% | {}% |",
            r.policy,
            r.genuine,
            r.critical,
            ms(&r.p50),
            ms(&r.p99),
            ms(&r.unloaded),
            r.ratio,
            r.bots_admitted,
            r.peak_pool,
            r.peak_queue,
            r.goodput,
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

/// The adaptive policies' limits while the crowd was at its peak, from
/// the driver's reads of `/_limit` every 100 ms.
fn limits(out: &mut String, flash: &[Value]) {
    let mut lines = Vec::new();
    for v in flash {
        let peak_from = f(&v["phases_s"][0]) + f(&v["phases_s"][1]);
        let samples = v["samples"].as_array().map_or(&[][..], |s| s.as_slice());
        let mut limit: Vec<f64> = samples
            .iter()
            .filter(|s| f(&s["t"]) >= peak_from)
            .filter_map(|s| s["limit"].as_f64())
            .collect();
        if limit.is_empty() {
            continue;
        }
        limit.sort_by(f64::total_cmp);
        let queue = samples.iter().map(|s| f(&s["queue"])).fold(0.0, f64::max);
        let ramp_from = f(&v["phases_s"][0]);
        let at_ramp = samples
            .iter()
            .find(|s| f(&s["t"]) >= ramp_from)
            .map_or(Value::Null, |s| s["limit"].clone());
        lines.push(format!(
            "`{}`: {at_ramp} when the ramp began; at the peak median {:.0}, from {:.0} to {:.0}; \
             the queue's highest 100 ms mean {queue:.1}",
            v["policy"].as_str().unwrap_or("?"),
            limit[limit.len() / 2],
            limit[0],
            limit[limit.len() - 1],
        ));
    }
    if !lines.is_empty() {
        let _ = writeln!(
            out,
            "\nAdaptive limits (read every 100 ms): {}.",
            lines.join("; ")
        );
    }
}

/// Prints the goals line and the ratios; whether every goal was met.
fn goals(out: &mut String, rows: &[Row]) -> bool {
    let Some(r) = rows.iter().find(|r| r.policy == RECOMMENDED) else {
        let _ = writeln!(
            out,
            "\nGoals: `{RECOMMENDED}` did not run, nothing to check."
        );
        return false;
    };
    let mark = |ok: bool| if ok { "met" } else { "MISSED" };
    let checks = [
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
    ];
    let all = checks.iter().all(|(ok, _)| *ok);
    let _ = writeln!(
        out,
        "\nGoals of `{RECOMMENDED}`: {}. {}",
        checks
            .iter()
            .map(|(ok, what)| format!("{what}: {}", mark(*ok)))
            .collect::<Vec<_>>()
            .join("; "),
        if all { "All met." } else { "NOT all met." }
    );
    for peer in ["tower-cl+shed", "rate"] {
        if let Some(p) = rows.iter().find(|p| p.policy == peer) {
            let _ = writeln!(
                out,
                "Against `{peer}`: critical served {:.2}x ({:.1}% vs {:.1}%), critical p99 {:.2}x ({} vs {} ms).",
                r.critical / p.critical,
                r.critical,
                p.critical,
                f(&r.p99) / f(&p.p99),
                ms(&r.p99),
                ms(&p.p99),
            );
        }
    }
    all
}

const WIDTH: usize = 60;
const HEIGHT: usize = 15;

/// The adaptive limit and the pool's mean use over the step scenario,
/// and how long the limit took to settle after each step.
fn plot(out: &mut String, step: &Value) {
    let samples = step["samples"].as_array().cloned().unwrap_or_default();
    let length = f(&step["length_s"]);
    let steps: Vec<f64> = step["steps_s"]
        .as_array()
        .map_or(vec![], |s| s.iter().map(f).collect());
    let service: Vec<f64> = step["service_ms"]
        .as_array()
        .map_or(vec![], |s| s.iter().map(f).collect());
    let mut limit = vec![(0.0, 0usize); WIDTH];
    let mut used = vec![(0.0, 0usize); WIDTH];
    for s in &samples {
        let col = ((f(&s["t"]) / length * WIDTH as f64) as usize).min(WIDTH - 1);
        if let Some(l) = s["limit"].as_f64() {
            limit[col].0 += l;
            limit[col].1 += 1;
        }
        used[col].0 += f(&s["in_use"]);
        used[col].1 += 1;
    }
    let mean = |(sum, n): (f64, usize)| (n > 0).then(|| sum / n as f64);
    let limit: Vec<Option<f64>> = limit.into_iter().map(mean).collect();
    let used: Vec<Option<f64>> = used.into_iter().map(mean).collect();
    let top = limit
        .iter()
        .chain(&used)
        .flatten()
        .fold(POOL as f64, |a, b| a.max(*b));
    let top = (top / 8.0).ceil() * 8.0;
    let row_of = |v: f64| ((v / top * (HEIGHT - 1) as f64).round() as usize).min(HEIGHT - 1);
    let mut grid = vec![vec![' '; WIDTH]; HEIGHT];
    let pool_row = row_of(POOL as f64);
    for c in grid[pool_row].iter_mut() {
        *c = '.';
    }
    for col in 0..WIDTH {
        if let Some(u) = used[col] {
            grid[row_of(u)][col] = 'o';
        }
        if let Some(l) = limit[col] {
            let r = row_of(l);
            grid[r][col] = if grid[r][col] == 'o' { '#' } else { '*' };
        }
    }
    let _ = writeln!(
        out,
        "\nStep scenario (`{}`, the crowd's peak mix: {} genuine + {} bot req/s; service time {} ms from {} s): \
         `*` adaptive limit, `o` mean pool use, `#` both, `.` pool size {POOL}; `|` a step.\n\n```",
        step["policy"].as_str().unwrap_or("?"),
        crate::traffic::GENUINE_PEAK,
        crate::traffic::BOTS_PEAK,
        service
            .iter()
            .map(|s| format!("{s:.0}"))
            .collect::<Vec<_>>()
            .join(" -> "),
        steps
            .iter()
            .map(|s| format!("{s:.0}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    for (i, line) in grid.iter().enumerate().rev() {
        let label = if i == pool_row {
            format!("{POOL:>4}")
        } else if i == HEIGHT - 1 || i == 0 {
            format!("{:>4.0}", i as f64 / (HEIGHT - 1) as f64 * top)
        } else {
            "    ".into()
        };
        let _ = writeln!(out, "{label} |{}", line.iter().collect::<String>());
    }
    let mut axis = vec!['-'; WIDTH];
    for s in steps.iter().skip(1) {
        axis[((s / length * WIDTH as f64) as usize).min(WIDTH - 1)] = '|';
    }
    let _ = writeln!(out, "     +{}", axis.iter().collect::<String>());
    let _ = writeln!(
        out,
        "      0 s{:>w$}",
        format!("{length:.0} s"),
        w = WIDTH - 3
    );
    out.push_str("```\n");
    settling(out, &samples, &steps, length);
}

/// For each phase: the limit it settled at (the mean of its last 3 s) and
/// how long after the phase began the limit's 1 s median stayed within a
/// band of it. The median leaves out the probes (one 100 ms window at half
/// the limit every 2.5 to 5 s), which are the algorithm's by design.
fn settling(out: &mut String, samples: &[Value], steps: &[f64], length: f64) {
    let all: Vec<(f64, f64)> = samples
        .iter()
        .filter_map(|s| Some((f(&s["t"]), s["limit"].as_f64()?)))
        .collect();
    let median: Vec<(f64, f64)> = (0..all.len())
        .map(|i| {
            let mut w: Vec<f64> = all[i.saturating_sub(5)..(i + 6).min(all.len())]
                .iter()
                .map(|(_, l)| *l)
                .collect();
            w.sort_by(f64::total_cmp);
            (all[i].0, w[w.len() / 2])
        })
        .collect();
    let mut parts = Vec::new();
    for (i, &from) in steps.iter().enumerate() {
        let to = steps.get(i + 1).copied().unwrap_or(length);
        let phase: Vec<(f64, f64)> = median
            .iter()
            .copied()
            .filter(|(t, _)| *t >= from && *t < to)
            .collect();
        let tail: Vec<f64> = all
            .iter()
            .filter(|(t, _)| *t >= to - 3.0 && *t < to)
            .map(|(_, l)| *l)
            .collect();
        if tail.is_empty() {
            continue;
        }
        let settled = tail.iter().sum::<f64>() / tail.len() as f64;
        let band = (settled * 0.2).max(2.0);
        let last_out = phase
            .iter()
            .filter(|(_, l)| (l - settled).abs() > band)
            .map(|(t, _)| *t)
            .fold(from, f64::max);
        parts.push(format!(
            "from {from:.0} s: settled at {settled:.1} (+-{band:.1}) after {:.1} s",
            last_out - from
        ));
    }
    if parts.is_empty() {
        out.push_str("No adaptive limit was read.\n");
    } else {
        let _ = writeln!(
            out,
            "Settling (the limit's 1 s median within the band): {}.",
            parts.join("; ")
        );
    }
}
