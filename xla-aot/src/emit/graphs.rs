//! Pictures of a compilation for `--dump-to`: the dataflow graph as Graphviz `.dot` and the arena
//! as an SVG timeline.
//!
//! Contract: both are deterministic text; neither needs any tool to be written (Graphviz only
//! renders `.dot` to `.svg` when it is installed, see `dump.rs`).

use crate::arena::BufferPlan;
use crate::ir::{Module, Op};
use std::fmt::Write;

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The entry computation as a Graphviz digraph: one node per instruction (fusions show their kind
/// and how many instructions they hold), one edge per operand.
pub fn dot_graph(m: &Module) -> String {
    let c = &m.entry;
    let mut s = format!(
        "digraph \"{}\" {{\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\", fontsize=10];\n",
        escape(&m.name)
    );
    for (i, inst) in c.instructions.iter().enumerate() {
        let (label, style) = match &inst.op {
            Op::Parameter { index } => (
                format!("{}\\nparameter({index})", inst.name),
                "shape=ellipse, style=filled, fillcolor=\"#dbe9ff\"",
            ),
            Op::Constant(_) => (
                format!("{}\\nconstant", inst.name),
                "shape=note, style=filled, fillcolor=\"#eeeeee\"",
            ),
            Op::Fusion { kind, computation } => {
                let ops: Vec<&str> = computation
                    .instructions
                    .iter()
                    .filter(|i| !matches!(i.op, Op::Parameter { .. }))
                    .map(|i| i.op.opcode())
                    .collect();
                (
                    format!(
                        "{}\\n{} fusion of {}\\n{}",
                        inst.name,
                        kind.name(),
                        ops.len(),
                        ops.join(" ")
                    ),
                    "style=\"filled,rounded\", fillcolor=\"#ffe8c2\"",
                )
            }
            op => (format!("{}\\n{}", inst.name, op.opcode()), "style=rounded"),
        };
        let _ = writeln!(
            s,
            "  n{i} [label=\"{}\\n{}\", {style}];",
            escape(&label).replace("\\\\n", "\\n"),
            inst.shape
        );
    }
    for (i, inst) in c.instructions.iter().enumerate() {
        for o in &inst.operands {
            let _ = writeln!(s, "  n{} -> n{i};", o.index());
        }
    }
    for (k, o) in c.outputs.iter().enumerate() {
        let _ = writeln!(
            s,
            "  out{k} [label=\"output {}\", shape=ellipse, style=filled, fillcolor=\"#d9f2d9\"];",
            escape(&o.name)
        );
        let _ = writeln!(s, "  n{} -> out{k};", o.value.index());
    }
    s.push_str("}\n");
    s
}

/// Plot geometry: pixels per schedule step, plot height, margins.
const STEP_PX: usize = 24;
const PLOT_HEIGHT_PX: f64 = 400.0;
const MARGIN_PX: usize = 60;

/// The buffer plan as an SVG: x is the schedule step, y the arena offset; one bar per buffer over
/// its live range. A dashed line marks the lower bound.
pub fn memory_svg(m: &Module, plan: &BufferPlan) -> String {
    let steps = m.entry.instructions.len().max(1) + 1;
    let width = steps * STEP_PX + 2 * MARGIN_PX;
    let height = PLOT_HEIGHT_PX as usize + 2 * MARGIN_PX;
    let scale = if plan.arena_size == 0 {
        0.0
    } else {
        PLOT_HEIGHT_PX / plan.arena_size as f64
    };
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"monospace\" font-size=\"10\">\n"
    );
    let _ = writeln!(
        s,
        "  <text x=\"{MARGIN_PX}\" y=\"20\">{}: arena {} bytes, lower bound {} bytes, {} buffers ({})</text>",
        m.name,
        plan.arena_size,
        plan.lower_bound,
        plan.buffers.len(),
        plan.strategy
    );
    let _ = writeln!(
        s,
        "  <rect x=\"{MARGIN_PX}\" y=\"{MARGIN_PX}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>",
        steps * STEP_PX,
        PLOT_HEIGHT_PX
    );
    let palette = [
        "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
        "#9c755f", "#bab0ac",
    ];
    for (k, b) in plan.buffers.iter().enumerate() {
        let x = MARGIN_PX + b.live[0] * STEP_PX;
        let w = (b.live[1] - b.live[0] + 1) * STEP_PX;
        let y = MARGIN_PX as f64 + b.offset as f64 * scale;
        let h = (b.size as f64 * scale).max(1.0);
        let _ = writeln!(
            s,
            "  <rect x=\"{x}\" y=\"{y:.2}\" width=\"{w}\" height=\"{h:.2}\" fill=\"{}\" fill-opacity=\"0.8\" stroke=\"#222\" stroke-width=\"0.5\"><title>%{} offset {} size {} live [{}, {}]</title></rect>",
            palette[k % palette.len()],
            b.name,
            b.offset,
            b.size,
            b.live[0],
            b.live[1]
        );
    }
    if plan.arena_size > 0 {
        let y = MARGIN_PX as f64 + plan.lower_bound as f64 * scale;
        let _ = writeln!(
            s,
            "  <line x1=\"{MARGIN_PX}\" y1=\"{y:.2}\" x2=\"{}\" y2=\"{y:.2}\" stroke=\"#c00\" stroke-dasharray=\"4 3\"/>",
            MARGIN_PX + steps * STEP_PX
        );
    }
    let _ = writeln!(
        s,
        "  <text x=\"{MARGIN_PX}\" y=\"{}\">schedule step →  (y: arena offset, 0 at the top)</text>",
        height - 20
    );
    s.push_str("</svg>\n");
    s
}
