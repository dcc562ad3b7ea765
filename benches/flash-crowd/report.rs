//! `flash_crowd report [--check] FILE...`: the drivers' JSON files as one
//! markdown table per question, the goals check of the recommended policy,
//! and the plot of the step scenario. With `--check` the exit status says
//! whether the recommended policy met every goal (1 if not, or if it did
//! not run).

use std::fmt::Write as _;
use std::process::ExitCode;

use serde_json::Value;

use crate::serve::{
    ACC_BUFFER, ADAPTIVE_MAX, ADAPTIVE_RESERVE, ANON_PREFIX, ANON_QUOTA, FIXED, USER_QUOTA,
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
    let mut skipped = Vec::new();
    let mut step = None;
    for file in opts.positional() {
        let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| format!("{file}: {e}"))?;
        if v.get("skipped").is_some() {
            skipped.push(v);
        } else if v["scenario"] == "step" {
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
    for s in &skipped {
        let _ = writeln!(
            out,
            "\n`{}` did not run: {}",
            s["policy"].as_str().unwrap_or("?"),
            s["skipped"].as_str().unwrap_or("?")
        );
    }
    let met = goals(&mut out, &rows);
    if let Some(step) = &step {
        plot(&mut out, step);
    }
    print!("{out}");
    Ok(if opts.flag("--check") && !met {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn header(out: &mut String, first: &Value) {
    let phases = &first["phases_s"];
    let _ = writeln!(
        out,
        "Flash crowd{}: {} s at 150 genuine req/s, a {} s ramp to 900 genuine + 2,100 bot req/s, held {} s. \
         Backend: {POOL} permits x {} ms (640 req/s), waiters unbounded; client timeout {} s.\n\
         Rules: `user` token bucket {}/s burst {} per JWT `sub`; `anon` token bucket {}/s burst {} per /{ANON_PREFIX} + \
         User-Agent hash (requests without a valid token); `rate+fixed` adds `backend` concurrency {FIXED} (Global); \
         `rate+adaptive+reserve` adds `backend` concurrency {ADAPTIVE_MAX}, reserve {ADAPTIVE_RESERVE}, adaptive (Gradient2), \
         `/book` critical, `/browse` sheddable; `tower-cl+shed` is ConcurrencyLimit({POOL}) + LoadShed; \
         `tower-acc` is Gradient2 (initial 20, min 1, max {ADAPTIVE_MAX}) behind Buffer({ACC_BUFFER}) + LoadShed.\n",
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
        "\nStep scenario (`{}`, {} genuine req/s; service time {} ms from {} s): `*` adaptive limit, `o` mean pool use, \
         `#` both, `.` pool size {POOL}; `|` a step.\n\n```",
        step["policy"].as_str().unwrap_or("?"),
        crate::traffic::STEP_RATE,
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
        let label = if i == HEIGHT - 1 || i == 0 || i == pool_row {
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
/// how long after the phase began the limit stayed within a band of it.
fn settling(out: &mut String, samples: &[Value], steps: &[f64], length: f64) {
    let mut parts = Vec::new();
    for (i, &from) in steps.iter().enumerate() {
        let to = steps.get(i + 1).copied().unwrap_or(length);
        let phase: Vec<(f64, f64)> = samples
            .iter()
            .filter_map(|s| Some((f(&s["t"]), s["limit"].as_f64()?)))
            .filter(|(t, _)| *t >= from && *t < to)
            .collect();
        let tail: Vec<f64> = phase
            .iter()
            .filter(|(t, _)| *t >= to - 3.0)
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
        let _ = writeln!(out, "Settling: {}.", parts.join("; "));
    }
}
