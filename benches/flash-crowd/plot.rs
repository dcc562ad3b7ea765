//! The samples over time (the driver's reads of `/_limit` every 100 ms):
//! the charts of the adaptive limits in the report, how long the limit
//! took to settle after each step of the step scenario, and the samples as
//! CSV for a plotting tool.

use std::fmt::Write as _;

use serde_json::Value;

use crate::POOL;
use crate::report::{BAND, f, samples};

const WIDTH: usize = 60;
const HEIGHT: usize = 15;

/// Draws the adaptive limit (`*`) and the sample field `other` (`o`) over
/// `length` seconds, `#` where both fall, the pool's size as a row of `.`
/// and each of `marks` (seconds) as a `|` on the time axis.
fn chart(out: &mut String, samples: &[Value], length: f64, marks: &[f64], other: &str) {
    let mut limit = vec![(0.0, 0usize); WIDTH];
    let mut second = vec![(0.0, 0usize); WIDTH];
    for s in samples {
        let col = ((f(&s["t"]) / length * WIDTH as f64) as usize).min(WIDTH - 1);
        if let Some(l) = s["limit"].as_f64() {
            limit[col].0 += l;
            limit[col].1 += 1;
        }
        if let Some(v) = s[other].as_f64() {
            second[col].0 += v;
            second[col].1 += 1;
        }
    }
    let mean = |(sum, n): (f64, usize)| (n > 0).then(|| sum / n as f64);
    let limit: Vec<Option<f64>> = limit.into_iter().map(mean).collect();
    let second: Vec<Option<f64>> = second.into_iter().map(mean).collect();
    let top = limit
        .iter()
        .chain(&second)
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
        if let Some(u) = second[col] {
            grid[row_of(u)][col] = 'o';
        }
        if let Some(l) = limit[col] {
            let r = row_of(l);
            grid[r][col] = if grid[r][col] == 'o' { '#' } else { '*' };
        }
    }
    out.push_str("```\n");
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
    for m in marks.iter().filter(|m| **m > 0.0) {
        axis[((m / length * WIDTH as f64) as usize).min(WIDTH - 1)] = '|';
    }
    let _ = writeln!(out, "     +{}", axis.iter().collect::<String>());
    let _ = writeln!(
        out,
        "      0 s{:>w$}",
        format!("{length:.0} s"),
        w = WIDTH - 3
    );
    out.push_str("```\n");
}

/// Writes `samples` as CSV, `t,limit,in_use,queue` (the limit empty where
/// the policy has none), to `path`.
pub(crate) fn csv(path: &std::path::Path, samples: &[Value]) -> Result<(), String> {
    let mut text = String::from("t,limit,in_use,queue\n");
    for s in samples {
        let limit = s["limit"].as_f64().map_or(String::new(), |l| l.to_string());
        let _ = writeln!(
            text,
            "{},{limit},{},{}",
            f(&s["t"]),
            f(&s["in_use"]),
            f(&s["queue"])
        );
    }
    std::fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// The adaptive limit and the backend's queue through the flash crowd, for
/// a policy with an adaptive limit.
pub(crate) fn flash_plot(out: &mut String, v: &Value) {
    let s = samples(v);
    if !s.iter().any(|s| s["limit"].is_number()) {
        return;
    }
    let (base, ramp, hold) = (
        f(&v["phases_s"][0]),
        f(&v["phases_s"][1]),
        f(&v["phases_s"][2]),
    );
    let _ = writeln!(
        out,
        "\nFlash crowd, `{}`: `*` adaptive limit, `o` the backend's queue (100 ms means), `#` both, \
         `.` pool size {POOL}; `|` the ramp's start and the peak's.\n",
        v["policy"].as_str().unwrap_or("?"),
    );
    chart(out, s, base + ramp + hold, &[base, base + ramp], "queue");
}

/// The adaptive limit and the pool's use through the step scenario, and
/// how long the limit took to settle after each step.
pub(crate) fn step_plot(out: &mut String, step: &Value) {
    let s = samples(step);
    let length = f(&step["length_s"]);
    let steps: Vec<f64> = step["steps_s"]
        .as_array()
        .map_or(vec![], |s| s.iter().map(f).collect());
    let service: Vec<f64> = step["service_ms"]
        .as_array()
        .map_or(vec![], |s| s.iter().map(f).collect());
    let _ = writeln!(
        out,
        "\nStep scenario (`{}`, the crowd's peak mix: {} genuine + {} bot req/s; service time {} ms from {} s): \
         `*` adaptive limit, `o` mean pool use, `#` both, `.` pool size {POOL}; `|` a step.\n",
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
    chart(out, s, length, &steps, "in_use");
    settling(out, s, &steps, length);
    let parts: Vec<String> = resettled(step)
        .iter()
        .map(|p| {
            format!(
                "from {:.0} s: {}",
                p.from,
                p.entered.map_or(
                    format!("not within it at the phase's end ({:.0} s)", p.length),
                    |e| format!("{e:.1} s")
                )
            )
        })
        .collect();
    if !parts.is_empty() {
        let _ = writeln!(
            out,
            "Re-settling (the limit's trailing 1 s median entered [{:.0}, {:.0}] and stayed there to the phase's end): {}.",
            BAND.0,
            BAND.1,
            parts.join("; ")
        );
    }
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
    let median = rolling_median(&all, 5, 5);
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

/// One phase of the step scenario, against the fixed band [`BAND`].
pub(crate) struct Phase {
    pub(crate) from: f64,
    pub(crate) length: f64,
    /// Seconds after `from` when the limit's trailing 1 s median entered
    /// the band and then stayed there to the phase's end; none if it was
    /// out of the band at the end (or no limit was read).
    pub(crate) entered: Option<f64>,
}

/// Each `(time, value)` with the value replaced by the median of the
/// `before` values before it, itself and the `after` after it.
fn rolling_median(all: &[(f64, f64)], before: usize, after: usize) -> Vec<(f64, f64)> {
    (0..all.len())
        .map(|i| {
            let mut w: Vec<f64> = all[i.saturating_sub(before)..(i + after + 1).min(all.len())]
                .iter()
                .map(|(_, l)| *l)
                .collect();
            w.sort_by(f64::total_cmp);
            (all[i].0, w[w.len() / 2])
        })
        .collect()
}

/// Each phase of the step scenario: when the limit re-settled in [`BAND`].
pub(crate) fn resettled(step: &Value) -> Vec<Phase> {
    let all: Vec<(f64, f64)> = samples(step)
        .iter()
        .filter_map(|s| Some((f(&s["t"]), s["limit"].as_f64()?)))
        .collect();
    // The median of the last 1 s of reads (10 of them), this one included:
    // what was known at that time, not after it.
    let median = rolling_median(&all, 9, 0);
    let steps: Vec<f64> = step["steps_s"]
        .as_array()
        .map_or(vec![], |s| s.iter().map(f).collect());
    let length = f(&step["length_s"]);
    let inside = |l: f64| (BAND.0..=BAND.1).contains(&l);
    steps
        .iter()
        .enumerate()
        .map(|(i, &from)| {
            let to = steps.get(i + 1).copied().unwrap_or(length);
            let phase: Vec<(f64, f64)> = median
                .iter()
                .copied()
                .filter(|(t, _)| *t > from && *t <= to)
                .collect();
            // The first read of the run of reads within the band that
            // ends the phase.
            let entered = match phase.iter().rposition(|(_, l)| !inside(*l)) {
                None => phase.first().map(|(t, _)| t - from),
                Some(last) => phase.get(last + 1).map(|(t, _)| t - from),
            };
            Phase {
                from,
                length: to - from,
                entered,
            }
        })
        .collect()
}
