//! The HLO text form (printer side), in the spirit of XLA's HLO text.
//!
//! Contract: [`print_module`] with default options prints every constant in full and
//! `parse::parse_module` reads the text back to an equal module (bit-exact constants: floats use
//! Rust's shortest round-trip form, NaNs other than the canonical one print their bits). With
//! `max_constant_elements`, larger constants print as `{...}`, which parses back as an elided
//! literal. The grammar is documented in `docs/hlo.md`.

use super::inst::Computation;
use super::inst::{Instruction, Op, Window};
use super::literal::{Literal, LiteralData};
use super::module::Module;
use super::shape::{DType, join};
use std::fmt::Write;

/// Options of the printer.
#[derive(Debug, Clone, Default)]
pub struct PrintOptions {
    /// Constants with more elements than this print as `{...}`; `None` prints everything.
    pub max_constant_elements: Option<usize>,
}

impl PrintOptions {
    /// Elides constants larger than [`INSPECT_CONSTANT_ELEMENTS`], for people reading the text.
    pub fn readable() -> PrintOptions {
        PrintOptions {
            max_constant_elements: Some(INSPECT_CONSTANT_ELEMENTS),
        }
    }
}

/// Constants up to this many elements stay readable on one line of `xla-aot inspect`; weights are
/// far larger and print as `{...}` unless `--print-large-constants` is given.
pub const INSPECT_CONSTANT_ELEMENTS: usize = 16;

/// Prints a module in full.
pub fn print_module(m: &Module) -> String {
    print_module_with(m, &PrintOptions::default())
}

/// Prints a module with options.
pub fn print_module_with(m: &Module, opts: &PrintOptions) -> String {
    let mut s = format!("HloModule {}", m.name);
    if m.precision != crate::ir::Precision::F32 {
        s.push_str(&format!(", precision={}", m.precision));
    }
    if !m.api.is_empty() {
        let text = m
            .api
            .text(m.entry.parameters().len(), m.entry.outputs.len());
        s.push_str(&format!(", api_types={text}"));
    }
    s.push_str("\n\n");
    // Fused computations first, in order of first use, as XLA prints them.
    let mut fused = Vec::new();
    collect_fused(&m.entry, &mut fused);
    for c in fused {
        print_computation(&mut s, c, opts, false);
        s.push('\n');
    }
    print_computation(&mut s, &m.entry, opts, true);
    s
}

fn collect_fused<'a>(c: &'a Computation, out: &mut Vec<&'a Computation>) {
    for inst in &c.instructions {
        if let Op::Fusion { computation, .. } = &inst.op {
            collect_fused(computation, out);
            out.push(computation);
        }
    }
}

fn print_computation(s: &mut String, c: &Computation, opts: &PrintOptions, entry: bool) {
    let _ = writeln!(s, "{}%{} {{", if entry { "ENTRY " } else { "" }, c.name);
    for inst in &c.instructions {
        let _ = writeln!(s, "  {}", print_instruction(c, inst, opts));
    }
    let shapes: Vec<String> = c
        .outputs
        .iter()
        .map(|o| c.inst(o.value).shape.to_string())
        .collect();
    let values: Vec<String> = c
        .outputs
        .iter()
        .map(|o| format!("%{}", c.inst(o.value).name))
        .collect();
    let names: Vec<&str> = c.outputs.iter().map(|o| o.name.as_str()).collect();
    let _ = writeln!(
        s,
        "  ROOT %outputs = ({}) tuple({}), names={{{}}}",
        shapes.join(", "),
        values.join(", "),
        names.join(",")
    );
    s.push_str("}\n");
}

/// One instruction as a line of HLO text (without indentation); used in verifier messages too.
pub fn print_instruction(c: &Computation, inst: &Instruction, opts: &PrintOptions) -> String {
    let operands: Vec<String> = inst
        .operands
        .iter()
        .map(|&o| {
            if o.index() < c.instructions.len() {
                format!("%{}", c.inst(o).name)
            } else {
                format!("%<bad operand {}>", o.0)
            }
        })
        .collect();
    let args = match &inst.op {
        Op::Parameter { index } => index.to_string(),
        Op::Constant(lit) => print_literal(lit, opts),
        _ => operands.join(", "),
    };
    let mut line = format!(
        "%{} = {} {}({})",
        inst.name,
        inst.shape,
        inst.op.opcode(),
        args
    );
    for (k, v) in attributes(&inst.op) {
        let _ = write!(line, ", {k}={v}");
    }
    line
}

fn braces(v: &[usize]) -> String {
    format!("{{{}}}", join(v))
}

/// The `key=value` attributes of an op, in print order.
fn attributes(op: &Op) -> Vec<(&'static str, String)> {
    match op {
        Op::Compare(d) => vec![("direction", d.name().to_string())],
        Op::Broadcast { dimensions } => vec![("dimensions", braces(dimensions))],
        Op::Transpose { permutation } => vec![("dimensions", braces(permutation))],
        Op::Slice {
            starts,
            limits,
            strides,
        } => {
            let parts: Vec<String> = (0..starts.len())
                .map(|i| format!("[{}:{}:{}]", starts[i], limits[i], strides[i]))
                .collect();
            vec![("slice", format!("{{{}}}", parts.join(", ")))]
        }
        Op::Pad { low, high } => {
            let parts: Vec<String> = low
                .iter()
                .zip(high)
                .map(|(l, h)| format!("{l}_{h}"))
                .collect();
            vec![("padding", parts.join("x"))]
        }
        Op::Concatenate { dimension } => vec![("dimensions", braces(&[*dimension]))],
        Op::Reduce { kind, dimensions } => vec![
            ("dimensions", braces(dimensions)),
            ("kind", kind.name().to_string()),
        ],
        Op::ReduceWindow { kind, window } => {
            vec![
                ("window", print_window(window)),
                ("kind", kind.name().to_string()),
            ]
        }
        Op::Dot(d) => {
            let mut v = Vec::new();
            if !d.lhs_batch.is_empty() {
                v.push(("lhs_batch_dims", braces(&d.lhs_batch)));
            }
            v.push(("lhs_contracting_dims", braces(&d.lhs_contracting)));
            if !d.rhs_batch.is_empty() {
                v.push(("rhs_batch_dims", braces(&d.rhs_batch)));
            }
            v.push(("rhs_contracting_dims", braces(&d.rhs_contracting)));
            v
        }
        Op::Convolution {
            window,
            feature_group_count,
        } => {
            let spatial: String = (0..window.rank()).map(|i| i.to_string()).collect();
            let mut v = vec![
                ("window", print_window(window)),
                (
                    "dim_labels",
                    format!("bf{spatial}_oi{spatial}->bf{spatial}"),
                ),
            ];
            if *feature_group_count != 1 {
                v.push(("feature_group_count", feature_group_count.to_string()));
            }
            v
        }
        Op::Argmax { dimension } => vec![("dimensions", braces(&[*dimension]))],
        Op::TopK { k, .. } => vec![("k", k.to_string())],
        Op::Fusion { kind, computation } => vec![
            ("kind", kind.name().to_string()),
            ("calls", format!("%{}", computation.name)),
        ],
        Op::Parameter { .. }
        | Op::Constant(_)
        | Op::Unary(_)
        | Op::Binary(_)
        | Op::Select
        | Op::Clamp
        | Op::Fma
        | Op::MulQ31
        | Op::Convert { .. }
        | Op::Sample
        | Op::Reshape
        | Op::Gather => Vec::new(),
    }
}

fn x_join(v: &[usize]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join("x")
}

/// Prints a window as `{size=3x3 stride=2x2 pad=1_1x1_1 rhs_dilate=2x2}`, leaving out fields at
/// their defaults (stride 1, pad 0, dilation 1) as XLA does.
pub fn print_window(w: &Window) -> String {
    let mut parts = vec![format!("size={}", x_join(&w.size))];
    if w.stride.iter().any(|&s| s != 1) {
        parts.push(format!("stride={}", x_join(&w.stride)));
    }
    if w.pad_low.iter().chain(&w.pad_high).any(|&p| p != 0) {
        let pads: Vec<String> = w
            .pad_low
            .iter()
            .zip(&w.pad_high)
            .map(|(l, h)| format!("{l}_{h}"))
            .collect();
        parts.push(format!("pad={}", pads.join("x")));
    }
    if w.dilation.iter().any(|&d| d != 1) {
        parts.push(format!("rhs_dilate={}", x_join(&w.dilation)));
    }
    if w.size.is_empty() {
        return "{}".to_string();
    }
    format!("{{{}}}", parts.join(" "))
}

/// Canonical quiet NaN bits; other NaNs print their bits so the round trip is exact.
const CANONICAL_NAN_BITS: u32 = 0x7fc0_0000;

/// Prints one f32 so that parsing it gives the same bits.
pub fn print_f32(v: f32) -> String {
    if v.is_nan() && v.to_bits() != CANONICAL_NAN_BITS {
        format!("nan(0x{:08x})", v.to_bits())
    } else {
        format!("{v:?}")
    }
}

fn print_literal(lit: &Literal, opts: &PrintOptions) -> String {
    let n = lit.element_count();
    let elide = matches!(lit.data, LiteralData::Elided)
        || opts.max_constant_elements.is_some_and(|max| n > max);
    if elide {
        return "{...}".to_string();
    }
    let items: Vec<String> = match lit.dtype {
        DType::F32 => lit
            .to_f32_vec()
            .unwrap_or_default()
            .into_iter()
            .map(print_f32)
            .collect(),
        DType::I32 => lit
            .to_i32_vec()
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.to_string())
            .collect(),
        DType::Pred => lit
            .to_pred_vec()
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.to_string())
            .collect(),
        // Other dtypes print their raw element bits until they are supported end to end.
        DType::I8
        | DType::I64
        | DType::U8
        | DType::I16
        | DType::U16
        | DType::U32
        | DType::U64
        | DType::F16
        | DType::BF16 => lit
            .bytes()
            .unwrap_or_default()
            .chunks(lit.dtype.size_bytes())
            .map(|c| {
                let mut bits = 0u64;
                for (i, b) in c.iter().enumerate() {
                    bits |= (*b as u64) << (8 * i);
                }
                format!("0x{bits:x}")
            })
            .collect(),
    };
    if lit.dims.is_empty() {
        items.into_iter().next().unwrap_or_default()
    } else {
        format!("{{{}}}", items.join(", "))
    }
}
