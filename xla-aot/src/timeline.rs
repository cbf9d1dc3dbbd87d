//! The timeline picture of one profiled run (`xla-aot profile --dump-to FILE.svg`): an SVG with
//! a time axis in microseconds, one row of bars for the kernels (one bar per kernel call, on the
//! thread that runs the model) and, with threads, one row per thread with a bar per task of the
//! kernels split through the parallel-for hook.
//!
//! Contract: [`svg`] is a pure function of the report: the same report gives the same bytes
//! (numbers printed with fixed decimals, bars in manifest order, then by thread and start), and
//! it needs nothing outside this crate. Every bar carries a `<title>` tooltip (kernel index,
//! name, ops, start and duration in µs); kernel bars wide enough for text are labelled with the
//! kernel's index. Times start at the run's first kernel; kernels the run did not call (another
//! batch bucket's) are left out. Colours cycle through a fixed palette
//! by kernel index, so a task has its kernel's colour.

use crate::profile::ProfileReport;
use std::fmt::Write as _;

/// Width of the time axis in pixels (a 1600-pixel picture with the row labels).
const AXIS_PX: f64 = 1500.0;
/// Left margin holding the row labels.
const LABEL_PX: f64 = 90.0;
/// Height of one row of bars, and the gap under it.
const ROW_PX: f64 = 22.0;
const GAP_PX: f64 = 6.0;
/// Height of the title and of the axis with its tick labels.
const TITLE_PX: f64 = 28.0;
const AXIS_H_PX: f64 = 30.0;
/// Narrowest bar that gets a text label (pixels; a digit is about 7).
const LABEL_MIN_PX: f64 = 24.0;
/// Ticks on the time axis.
const TICKS: usize = 10;
/// Bar colours, by kernel index (a qualitative palette).
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// Escapes text for an SVG attribute or element.
fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The SVG timeline of `r`'s last profiled run.
pub fn svg(r: &ProfileReport) -> String {
    let tr = &r.trace;
    // Kernels the run called (a batch bucket's kernels other than the run's are never called
    // and keep (0, 0)), with their manifest index.
    let called: Vec<(usize, (u64, u64))> = tr
        .kernels
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, (a, b))| *b > 0 && a <= b)
        .collect();
    let origin = called.iter().map(|(_, k)| k.0).min().unwrap_or(0);
    let end = called
        .iter()
        .map(|(_, k)| k.1)
        .chain(tr.tasks.iter().map(|t| t.end))
        .max()
        .unwrap_or(origin)
        .max(origin + 1);
    let span_us = (end - origin) as f64 / 1e3;
    let x = |ns: u64| LABEL_PX + AXIS_PX * (ns.saturating_sub(origin)) as f64 / 1e3 / span_us;
    let us = |ns: u64| ns.saturating_sub(origin) as f64 / 1e3;
    let threaded = tr.threads > 1;
    let rows = 1 + if threaded { tr.threads } else { 0 };
    let row_y = |row: usize| TITLE_PX + row as f64 * (ROW_PX + GAP_PX);
    let height = row_y(rows) + AXIS_H_PX;
    let width = LABEL_PX + AXIS_PX + 20.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" font-family=\"monospace\" font-size=\"12\">"
    );
    let _ = writeln!(
        s,
        "<text x=\"{LABEL_PX:.0}\" y=\"18\">{}: one profiled run, {} kernel call(s), {} \
         thread(s), {span_us:.2} µs</text>",
        esc(&r.model),
        called.len(),
        r.threads
    );
    // Row labels.
    let label = |s: &mut String, row: usize, text: &str| {
        let _ = writeln!(
            s,
            "<text x=\"4\" y=\"{:.1}\">{text}</text>",
            row_y(row) + ROW_PX * 0.7
        );
    };
    label(&mut s, 0, "kernels");
    if threaded {
        for t in 0..tr.threads {
            label(&mut s, 1 + t, &format!("thread {t}"));
        }
    }
    let kernel_at = |ns: u64| {
        called
            .iter()
            .find(|(_, (a, b))| *a <= ns && ns <= *b)
            .map_or(usize::MAX, |(k, _)| *k)
    };
    let bar = |s: &mut String, row: usize, k: usize, a: u64, b: u64, tip: &str, text: bool| {
        let (x0, x1) = (x(a), x(b));
        let w = (x1 - x0).max(0.5);
        let fill = PALETTE.get(k % PALETTE.len()).copied().unwrap_or("#888888");
        let y = row_y(row);
        let _ = write!(
            s,
            "<rect x=\"{x0:.2}\" y=\"{y:.1}\" width=\"{w:.2}\" height=\"{ROW_PX:.0}\" \
             fill=\"{fill}\" stroke=\"#333333\" stroke-width=\"0.3\"><title>{}</title></rect>",
            esc(tip)
        );
        if text && w >= LABEL_MIN_PX {
            let _ = write!(
                s,
                "<text x=\"{:.2}\" y=\"{:.1}\" fill=\"#ffffff\">{k}</text>",
                x0 + 3.0,
                y + ROW_PX * 0.7
            );
        }
        s.push('\n');
    };
    for &(k, (a, b)) in &called {
        let (name, ops) = r
            .kernels
            .get(k)
            .map(|l| (l.name.as_str(), l.ops.join(",")))
            .unwrap_or(("?", String::new()));
        let tip = format!(
            "#{k} {name} [{ops}]: {:.2} µs at {:.2} µs",
            us(b) - us(a),
            us(a)
        );
        bar(&mut s, 0, k, a, b, &tip, true);
    }
    if threaded {
        for t in &tr.tasks {
            let k = kernel_at(t.start);
            let name = r.kernels.get(k).map(|l| l.name.as_str()).unwrap_or("?");
            let tip = format!(
                "task of #{k} {name} on thread {}: {:.2} µs at {:.2} µs",
                t.thread,
                us(t.end) - us(t.start),
                us(t.start)
            );
            bar(&mut s, 1 + t.thread, k, t.start, t.end, &tip, false);
        }
    }
    // The time axis.
    let ay = row_y(rows) + 4.0;
    let _ = writeln!(
        s,
        "<line x1=\"{LABEL_PX:.0}\" y1=\"{ay:.1}\" x2=\"{:.0}\" y2=\"{ay:.1}\" stroke=\"#333333\"/>",
        LABEL_PX + AXIS_PX
    );
    for i in 0..=TICKS {
        let tx = LABEL_PX + AXIS_PX * i as f64 / TICKS as f64;
        let _ = writeln!(
            s,
            "<line x1=\"{tx:.1}\" y1=\"{ay:.1}\" x2=\"{tx:.1}\" y2=\"{:.1}\" stroke=\"#333333\"/>\
             <text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{:.1} µs</text>",
            ay + 5.0,
            ay + 18.0,
            span_us * i as f64 / TICKS as f64
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::cpu::pool::TaskSpan;
    use crate::profile::{KernelLine, Trace};

    fn report(threads: usize) -> ProfileReport {
        let line = |index: usize, name: &str| KernelLine {
            index,
            name: name.to_string(),
            ops: vec!["a<b".to_string(), "c".to_string()],
            median_us: 1.0,
            min_us: 1.0,
            flops: 0,
            bytes: 0,
        };
        ProfileReport {
            model: "m&n".to_string(),
            runs: 1,
            kernels: vec![line(0, "m_k0_x"), line(1, "m_k1_y"), line(2, "m_k2_z")],
            call_median_us: 3.0,
            call_min_us: 3.0,
            profiled_call_median_us: 3.0,
            peak_gflops: 1.0,
            by_min: false,
            threads,
            trace: Trace {
                threads,
                kernels: vec![(1000, 3000), (3000, 9000), (0, 0)],
                tasks: vec![
                    TaskSpan {
                        thread: 0,
                        start: 3100,
                        end: 6000,
                    },
                    TaskSpan {
                        thread: 1,
                        start: 3200,
                        end: 8900,
                    },
                ],
            },
        }
    }

    #[test]
    fn the_picture_is_deterministic_escaped_and_scaled() {
        let a = svg(&report(2));
        assert_eq!(a, svg(&report(2)));
        // Times from the first kernel: kernel 1 starts at 2 µs and lasts 6; the axis spans 8.
        assert!(
            a.contains("<title>#1 m_k1_y [a&lt;b,c]: 6.00 µs at 2.00 µs</title>"),
            "{a}"
        );
        assert!(
            a.contains("task of #1 m_k1_y on thread 1: 5.70 µs at 2.20 µs"),
            "{a}"
        );
        assert!(a.contains("m&amp;n: one profiled run, 2 kernel call(s), 2 thread(s), 8.00 µs"));
        assert!(a.contains(">8.0 µs</text>") && a.contains(">thread 1</text>"));
        // Kernel 1 spans three quarters of the axis.
        assert!(
            a.contains("<rect x=\"465.00\" y=\"28.0\" width=\"1125.00\""),
            "{a}"
        );
        assert!(!a.contains("m_k2_z"), "an uncalled kernel is drawn: {a}");
        let one = svg(&report(1));
        assert!(
            !one.contains("thread 0") && !one.contains("task of"),
            "{one}"
        );
    }
}
