//! An SVG of a run: throughput (ok / fail / info per second) and latency (p50 and p99 per
//! second) over time, with nemesis intervals shaded and labelled.

use std::fmt::Write;

use crate::history::{Kind, Op};
use crate::nemesis::Interval;

const W: f64 = 960.0;
const PANEL: f64 = 220.0;
const LEFT: f64 = 60.0;
const TOP: f64 = 30.0;

fn polyline(out: &mut String, pts: &[(f64, f64)], color: &str) {
    if pts.is_empty() {
        return;
    }
    let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ = writeln!(
        out,
        r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
        path.join(" ")
    );
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Renders the plot of `ops` over `seconds`, shading `intervals`.
pub fn render(title: &str, ops: &[Op], intervals: &[Interval], seconds: f64) -> String {
    let secs = seconds.max(1.0).ceil() as usize + 1;
    let mut counts = vec![[0u32; 3]; secs];
    let mut lat: Vec<Vec<f64>> = vec![Vec::new(); secs];
    for o in ops {
        let s = ((o.call as f64 / 1e9) as usize).min(secs - 1);
        match o.outcome {
            Kind::Ok => counts[s][0] += 1,
            Kind::Fail => counts[s][1] += 1,
            _ => counts[s][2] += 1,
        }
        if o.ret != u64::MAX {
            lat[s].push((o.ret - o.call) as f64 / 1e6);
        }
    }
    for l in &mut lat {
        l.sort_by(f64::total_cmp);
    }
    let max_tp = counts
        .iter()
        .flat_map(|c| c.iter())
        .copied()
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let max_lat = lat.iter().map(|l| percentile(l, 0.99)).fold(1.0, f64::max);
    let x = |s: f64| LEFT + (W - LEFT - 20.0) * s / secs as f64;
    let height = TOP + 2.0 * PANEL + 80.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="18" font-size="14">{}</text>"#,
        escape(title)
    );
    for iv in intervals {
        let (x0, x1) = (x(iv.start_s), x(iv.end_s));
        let _ = writeln!(
            out,
            r##"<rect x="{x0:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="#f4a261" fill-opacity="0.25"/><text x="{:.1}" y="{:.1}" fill="#9c4a00">{}</text>"##,
            (x1 - x0).max(1.0),
            2.0 * PANEL + 20.0,
            x0 + 2.0,
            TOP + 12.0,
            escape(&iv.fault)
        );
    }
    for (p, label, max) in [
        (0.0, "ops/s (ok, fail, info)", max_tp),
        (1.0, "latency ms (p50, p99)", max_lat),
    ] {
        let y0 = TOP + p * (PANEL + 20.0);
        let _ = writeln!(
            out,
            r##"<rect x="{LEFT}" y="{y0}" width="{:.1}" height="{PANEL}" fill="none" stroke="#888"/><text x="4" y="{:.1}">{label}</text><text x="4" y="{:.1}">{max:.0}</text>"##,
            W - LEFT - 20.0,
            y0 - 4.0 + PANEL / 2.0,
            y0 + 10.0
        );
    }
    let ty = |v: f64| TOP + PANEL - PANEL * v / max_tp;
    for (k, color) in [(0usize, "#2a9d8f"), (1, "#e76f51"), (2, "#8d6cab")] {
        let pts: Vec<(f64, f64)> = counts
            .iter()
            .enumerate()
            .map(|(s, c)| (x(s as f64 + 0.5), ty(c[k] as f64)))
            .collect();
        polyline(&mut out, &pts, color);
    }
    let ly = |v: f64| TOP + PANEL + 20.0 + PANEL - PANEL * (v / max_lat).min(1.0);
    for (p, color) in [(0.5, "#264653"), (0.99, "#e9c46a")] {
        let pts: Vec<(f64, f64)> = lat
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.is_empty())
            .map(|(s, l)| (x(s as f64 + 0.5), ly(percentile(l, p))))
            .collect();
        polyline(&mut out, &pts, color);
    }
    let axis_y = TOP + 2.0 * PANEL + 36.0;
    for s in (0..secs).step_by((secs / 10).max(1)) {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{axis_y}">{s}s</text>"#,
            x(s as f64)
        );
    }
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="{:.1}">green ok · red fail · purple info · dark p50 · yellow p99 · shaded: nemesis active</text>"##,
        axis_y + 18.0
    );
    out.push_str("</svg>\n");
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn renders_an_svg_with_intervals() {
        let ops: Vec<Op> = (0..50u64)
            .map(|i| Op {
                process: 0,
                f: "read".into(),
                key: None,
                value: Value::Null,
                outcome: if i % 7 == 0 { Kind::Fail } else { Kind::Ok },
                result: Value::Null,
                call: i * 100_000_000,
                ret: i * 100_000_000 + 2_000_000,
            })
            .collect();
        let iv = [Interval {
            fault: "kill".into(),
            start_s: 1.0,
            end_s: 3.0,
            detail: String::new(),
        }];
        let svg = render("t <1>", &ops, &iv, 5.0);
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("kill"));
        assert!(svg.contains("polyline"));
        assert!(svg.contains("t &lt;1&gt;"));
    }
}
