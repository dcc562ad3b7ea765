//! The timelines as one SVG figure: what the page draws on its canvases,
//! drawn once, for the guide's algorithms chapter.

use std::fmt::Write;

use throttle_fleet_core::algorithm::Algorithm;

use crate::simulation::{Lab, capacity, label};

const WIDTH: u64 = 1000;
const PLOT_X: u64 = 200;
const PLOT_W: u64 = 580;
const HEADER: u64 = 64;
const ROW: u64 = 104;
const AXIS: u64 = 36;
/// Columns of two pixels: requests are counted per column.
const BINS: u64 = PLOT_W / 2;

const ALLOWED: &str = "#1a9850";
const DENIED: &str = "#d73027";
const REMAINING: &str = "#2166ac";
const DEPARTED: &str = "#7b3294";

/// Seconds with as many decimals as needed, up to microseconds.
pub(crate) fn secs(us: u64) -> String {
    let s = format!("{}.{:06}", us / 1_000_000, us % 1_000_000);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s} s")
}

fn x_of(at_us: u64, span_us: u64) -> f64 {
    PLOT_X as f64 + PLOT_W as f64 * (at_us.min(span_us) as f64 / span_us.max(1) as f64)
}

fn bin_of(at_us: u64, span_us: u64) -> usize {
    ((u128::from(at_us) * u128::from(BINS) / u128::from(span_us.max(1))) as u64).min(BINS - 1)
        as usize
}

/// Escapes text for an SVG text node.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The figure. Deterministic: the same lab gives the same bytes.
pub(crate) fn render(lab: &Lab) -> String {
    let q = lab.scenario.quota;
    let span = lab.span_us.max(1);
    let period = q.period().as_micros() as u64;
    let height = HEADER + ROW * lab.runs.len() as u64 + AXIS;
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="system-ui, -apple-system, Segoe UI, sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        w,
        r##"<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        w,
        r##"<text x="16" y="24" font-size="16" font-weight="600" fill="#111">{} against {} per {}, burst {}: the five algorithms</text>"##,
        esc(&lab.scenario.pattern.name().replace('_', " ")),
        q.limit(),
        secs(period),
        q.burst()
    );
    // Legend.
    let legend = [
        (ALLOWED, "allowed (bars up, per column)"),
        (DENIED, "denied (bars down)"),
        (REMAINING, "remaining quota"),
        (DEPARTED, "leaky bucket: when admitted requests leave"),
    ];
    let mut lx = 16;
    for (colour, text) in legend {
        let _ = writeln!(
            w,
            r#"<rect x="{lx}" y="38" width="10" height="10" fill="{colour}"/>"#
        );
        let _ = writeln!(
            w,
            r##"<text x="{}" y="47" fill="#333">{}</text>"##,
            lx + 14,
            esc(text)
        );
        lx += 24 + 7 * text.len() as u64;
    }

    // The same scale for every row: the busiest column of arrivals.
    let mut arrivals = vec![0u64; BINS as usize];
    for (e, _) in &lab.runs[0].run.steps {
        arrivals[bin_of(e.at_us, span)] += e.cost;
    }
    let busiest = arrivals.iter().copied().max().unwrap_or(1).max(1) as f64;
    let bar = |count: u64, max_h: f64| (count as f64 / busiest).sqrt() * max_h;

    for (row, run) in lab.runs.iter().enumerate() {
        let y0 = HEADER + ROW * row as u64;
        let (line_top, line_bottom) = (y0 as f64 + 10.0, y0 as f64 + 46.0);
        let base = y0 as f64 + 74.0;
        let _ = writeln!(w, r#"<g id="{}">"#, run.algorithm.name());
        let _ = writeln!(
            w,
            r##"<rect x="{PLOT_X}" y="{}" width="{PLOT_W}" height="{}" fill="#f7f7f7" stroke="#ddd"/>"##,
            y0 + 4,
            ROW - 8
        );
        let _ = writeln!(
            w,
            r##"<text x="16" y="{}" font-size="13" font-weight="600" fill="#111">{}</text>"##,
            y0 + 30,
            label(run.algorithm)
        );
        let _ = writeln!(
            w,
            r##"<text x="16" y="{}" fill="#555">capacity {}</text>"##,
            y0 + 48,
            capacity(run)
        );
        // Window boundaries: strong where the algorithm counts in them.
        let windows = matches!(
            run.algorithm,
            Algorithm::FixedWindow | Algorithm::SlidingWindowCounter
        );
        let (stroke, dash) = if windows {
            ("#888", "4 3")
        } else {
            ("#ccc", "2 4")
        };
        let mut t = period;
        while t < span {
            let x = x_of(t, span);
            let _ = writeln!(
                w,
                r#"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="{stroke}" stroke-dasharray="{dash}"/>"#,
                y0 + 4,
                y0 + ROW - 4
            );
            t += period;
        }
        // Allowed up, denied down, per column.
        let (mut up, mut down, mut left) = (
            vec![0u64; BINS as usize],
            vec![0u64; BINS as usize],
            vec![0u64; BINS as usize],
        );
        for (e, s) in &run.run.steps {
            let b = bin_of(e.at_us, span);
            if s.allowed {
                up[b] += e.cost;
                if run.algorithm == Algorithm::LeakyBucket && e.at_us + s.delay_us < span {
                    left[bin_of(e.at_us + s.delay_us, span)] += e.cost;
                }
            } else {
                down[b] += e.cost;
            }
        }
        let _ = writeln!(
            w,
            r##"<line x1="{PLOT_X}" y1="{base}" x2="{}" y2="{base}" stroke="#bbb"/>"##,
            PLOT_X + PLOT_W
        );
        for b in 0..BINS as usize {
            let x = PLOT_X + 2 * b as u64;
            if up[b] > 0 {
                let h = bar(up[b], 22.0).max(1.0);
                let _ = writeln!(
                    w,
                    r#"<rect x="{x}" y="{:.1}" width="2" height="{h:.1}" fill="{ALLOWED}"/>"#,
                    base - h
                );
            }
            if down[b] > 0 {
                let h = bar(down[b], 22.0).max(1.0);
                let _ = writeln!(
                    w,
                    r#"<rect x="{x}" y="{base}" width="2" height="{h:.1}" fill="{DENIED}"/>"#
                );
            }
            if left[b] > 0 {
                let _ = writeln!(
                    w,
                    r#"<rect x="{x}" y="{:.1}" width="2" height="4" fill="{DEPARTED}"/>"#,
                    line_bottom + 2.0
                );
            }
        }
        // Remaining quota after each request, as steps, from full.
        let cap = capacity(run).max(1) as f64;
        let y_of = |rem: u64| line_bottom - (line_bottom - line_top) * (rem as f64 / cap).min(1.0);
        let mut points = format!("{PLOT_X},{:.1}", y_of(capacity(run)));
        let mut last_y = y_of(capacity(run));
        for (e, s) in &run.run.steps {
            let x = x_of(e.at_us, span);
            let y = y_of(s.remaining);
            let _ = write!(points, " {x:.1},{last_y:.1} {x:.1},{y:.1}");
            last_y = y;
        }
        let _ = writeln!(
            w,
            r#"<polyline points="{points}" fill="none" stroke="{REMAINING}" stroke-width="1.5"/>"#
        );
        // The numbers.
        let s = &run.summary;
        let tx = PLOT_X + PLOT_W + 16;
        let over = if s.worst_window > s.limit {
            DENIED
        } else {
            "#111"
        };
        let _ = writeln!(
            w,
            r##"<text x="{tx}" y="{}" fill="#111">admitted {} · denied {}</text>"##,
            y0 + 26,
            s.admitted,
            s.denied
        );
        let _ = writeln!(
            w,
            r#"<text x="{tx}" y="{}" fill="{over}">worst {} window: {} of {}</text>"#,
            y0 + 46,
            secs(period),
            s.worst_window,
            s.limit
        );
        let first = s.first_denial_us.map_or_else(|| "none".to_owned(), secs);
        let _ = writeln!(
            w,
            r##"<text x="{tx}" y="{}" fill="#555">first denial: {first}</text>"##,
            y0 + 66
        );
        let _ = writeln!(w, "</g>");
    }

    // The shared time axis.
    let ya = HEADER + ROW * lab.runs.len() as u64;
    let ticks = 10;
    for i in 0..=ticks {
        let t = span * i / ticks;
        let x = x_of(t, span);
        let _ = writeln!(
            w,
            r##"<line x1="{x:.1}" y1="{ya}" x2="{x:.1}" y2="{}" stroke="#666"/>"##,
            ya + 5
        );
        let _ = writeln!(
            w,
            r##"<text x="{x:.1}" y="{}" fill="#333" text-anchor="middle">{}</text>"##,
            ya + 18,
            secs(t)
        );
    }
    let _ = writeln!(
        w,
        r##"<text x="{}" y="{}" fill="#555" text-anchor="middle">time (dashed lines: window boundaries)</text>"##,
        PLOT_X + PLOT_W / 2,
        ya + 32
    );
    let _ = writeln!(w, "</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Scenario;

    #[test]
    fn seconds_read_as_written() {
        assert_eq!(secs(0), "0 s");
        assert_eq!(secs(10_000_000), "10 s");
        assert_eq!(secs(9_500_000), "9.5 s");
        assert_eq!(secs(1), "0.000001 s");
    }

    /// The guide's figure is what the code draws today: regenerate it
    /// with `cargo run -p throttle-fleet-suite --example lab -- --svg docs/lab-boundary.svg`.
    #[test]
    fn the_committed_figure_is_up_to_date() {
        let lab = Lab::run(Scenario::boundary_attack()).unwrap();
        let svg = render(&lab);
        assert_eq!(svg, render(&lab), "deterministic");
        assert!(svg.contains(r#"<g id="fixed_window">"#));
        assert!(
            svg.contains("worst 10 s window: 20 of 10"),
            "the fixed window's 2x"
        );
        assert!(
            svg.contains("worst 10 s window: 11 of 10"),
            "the counter's one more"
        );
        assert_eq!(
            svg,
            include_str!("../../docs/lab-boundary.svg"),
            "docs/lab-boundary.svg is stale: cargo run -p throttle-fleet-suite --example lab -- --svg docs/lab-boundary.svg"
        );
    }
}
