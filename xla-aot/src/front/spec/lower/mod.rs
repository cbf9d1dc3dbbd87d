//! Lowering spec ops to HLO primitives.
//!
//! Contract: [`Lowerer::lower_op`] checks one spec op completely (arity, attributes, dtypes,
//! shapes, weight shapes) and appends the primitives that compute it; the last instruction it
//! appends is named after the op, so the op's result is easy to find in the HLO text. Every check
//! failure is a [`SpecError`] pointing at the offending node. The op vocabulary and its attributes
//! are documented in `docs/spec.md`; this module is its single implementation: the op table, the
//! checks every op gets and the dispatch here, attributes in `attrs`, operands and building
//! helpers in `tensors`, the op families in `nn` and `shape_ops`.

mod attrs;
mod nn;
mod quant;
mod shape_ops;
mod tensors;

pub use attrs::describe;
pub use quant::q_range;
pub use tensors::literal_from_values;

use crate::front::diag::{SpecError, SpecErrorKind};
use crate::front::spans::SpanIndex;
use crate::front::weights::WeightStore;
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, Builder, CompareDir, DType, InstId, Op, ReduceKind, UnaryOp};
use crate::util::suggest::nearest;
use serde_yaml::Value;
use std::collections::HashMap;
use std::path::Path;

/// The spec ops that are one elementwise function of the IR (`ir/inst/table.rs`): one input, no
/// attributes. Adding a unary IR op to the spec is one row here.
pub const UNARY_OPS: &[(&str, UnaryOp)] = &[
    ("sigmoid", UnaryOp::Logistic),
    ("tanh", UnaryOp::Tanh),
    ("exp", UnaryOp::Exp),
    ("log", UnaryOp::Log),
    ("sqrt", UnaryOp::Sqrt),
    ("rsqrt", UnaryOp::Rsqrt),
    ("neg", UnaryOp::Negate),
    ("abs", UnaryOp::Abs),
    ("erf", UnaryOp::Erf),
    ("softplus", UnaryOp::Softplus),
    ("sin", UnaryOp::Sine),
    ("cos", UnaryOp::Cosine),
];

/// Every other spec op, with the attributes it accepts and how many inputs it takes (min, max).
pub const OPS: &[(&str, &[&str], usize, usize)] = &[
    (
        "conv2d",
        &["strides", "padding", "dilations", "groups"],
        2,
        3,
    ),
    ("batch_norm", &["epsilon"], 5, 5),
    ("dense", &[], 2, 3),
    ("matmul", &["transpose_a", "transpose_b"], 2, 2),
    ("add", &[], 2, 2),
    ("sub", &[], 2, 2),
    ("mul", &[], 2, 2),
    ("div", &[], 2, 2),
    ("maximum", &[], 2, 2),
    ("minimum", &[], 2, 2),
    ("pow", &[], 2, 2),
    ("relu", &[], 1, 1),
    ("relu6", &[], 1, 1),
    ("leaky_relu", &["alpha"], 1, 1),
    ("gelu", &["approximate"], 1, 1),
    ("silu", &[], 1, 1),
    ("clamp", &["min", "max"], 1, 1),
    ("max_pool2d", &["kernel_size", "strides", "padding"], 1, 1),
    (
        "avg_pool2d",
        &["kernel_size", "strides", "padding", "count_include_pad"],
        1,
        1,
    ),
    ("global_avg_pool", &[], 1, 1),
    ("quantize", &["dtype", "axis"], 2, 3),
    ("dequantize", &["axis"], 2, 3),
    ("softmax", &["axis"], 1, 1),
    ("log_softmax", &["axis"], 1, 1),
    ("layer_norm", &["axis", "epsilon"], 1, 3),
    ("reduce_sum", &["axes", "keepdims"], 1, 1),
    ("reduce_mean", &["axes", "keepdims"], 1, 1),
    ("reduce_max", &["axes", "keepdims"], 1, 1),
    ("reshape", &["shape"], 1, 1),
    ("flatten", &["axis"], 1, 1),
    ("transpose", &["perm"], 1, 1),
    ("concat", &["axis"], 1, usize::MAX),
    ("slice", &["starts", "ends", "axes", "steps"], 1, 1),
    ("pad", &["pads", "value"], 1, 1),
    ("argmax", &["axis", "keepdims"], 1, 1),
    ("embedding", &[], 2, 2),
    ("top_k", &["k"], 1, 1),
    ("top_k_indices", &["k"], 1, 1),
    ("sample", &["temperature", "top_k", "top_p"], 3, 6),
];

/// Every spec op kind: [`OPS`], then [`UNARY_OPS`].
pub fn op_kinds() -> impl Iterator<Item = &'static str> {
    OPS.iter().map(|o| o.0).chain(UNARY_OPS.iter().map(|u| u.0))
}

/// The attributes an op kind accepts and how many inputs it takes (min, max).
fn signature(kind: &str) -> Option<(&'static [&'static str], usize, usize)> {
    match OPS.iter().find(|o| o.0 == kind) {
        Some(&(_, allowed, min, max)) => Some((allowed, min, max)),
        None => UNARY_OPS
            .iter()
            .any(|u| u.0 == kind)
            .then_some((&[][..], 1, 1)),
    }
}

/// Default slope of `leaky_relu` (PyTorch's default).
const DEFAULT_LEAKY_ALPHA: f64 = 0.01;

/// A spec op being lowered: where it is and what it says.
pub struct OpDecl {
    /// Index in `ops`.
    pub index: usize,
    /// Op (and result tensor) name.
    pub name: String,
    /// The op kind (`conv2d`).
    pub kind: String,
    /// Input tensor names.
    pub inputs: Vec<String>,
    /// Attributes, in file order.
    pub attrs: Vec<(String, Value)>,
}

impl OpDecl {
    fn path(&self) -> String {
        format!("ops[{}]", self.index)
    }

    pub fn attr(&self, key: &str) -> Option<&Value> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// Where a tensor name came from, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Input,
    Constant,
    Weight,
    Op,
}

/// A defined tensor.
#[derive(Debug, Clone, Copy)]
pub struct Defined {
    pub id: InstId,
    pub origin: Origin,
    pub line: usize,
}

/// Lowers a spec into a builder; owns the name environment.
pub struct Lowerer<'a> {
    pub file: &'a Path,
    pub source: &'a str,
    pub spans: &'a SpanIndex,
    pub weights: &'a WeightStore,
    pub b: Builder,
    pub env: HashMap<String, Defined>,
    /// Op names with their index, for "used before definition" errors.
    pub later_ops: HashMap<String, usize>,
    /// `dequantize` results: their centred integers, scale and axis (`quant.rs`).
    pub dequantized: HashMap<InstId, quant::Dequantized>,
}

type R<T> = Result<T, SpecError>;

impl<'a> Lowerer<'a> {
    /// An error at a node path.
    pub fn err(&self, path: &str, kind: SpecErrorKind) -> SpecError {
        SpecError::new(self.file, kind).at(self.spans.find(path), self.source)
    }

    /// An error at the key `key` of the mapping at `path`.
    pub fn err_key(&self, path: &str, key: &str, kind: SpecErrorKind) -> SpecError {
        SpecError::new(self.file, kind).at(self.spans.find_key(path, key), self.source)
    }

    /// A shape error of the op as a whole points at its input list.
    fn shape_err(&self, d: &OpDecl, detail: String) -> SpecError {
        self.err(
            &format!("{}.inputs", d.path()),
            SpecErrorKind::Shape {
                op: d.name.clone(),
                kind: d.kind.clone(),
                detail,
            },
        )
    }

    fn attr_err(&self, d: &OpDecl, attr: &str, detail: String) -> SpecError {
        self.err(
            &format!("{}.{}", d.path(), attr),
            SpecErrorKind::BadAttribute {
                op: d.name.clone(),
                attr: attr.to_string(),
                detail,
            },
        )
    }

    /// Checks and lowers one op; returns the id of its result.
    pub fn lower_op(&mut self, d: &OpDecl) -> R<InstId> {
        let Some((allowed, min, max)) = signature(&d.kind) else {
            let hint = nearest(&d.kind, op_kinds()).map(|s| format!("did you mean `{s}`?"));
            return Err(self
                .err(
                    &format!("{}.op", d.path()),
                    SpecErrorKind::UnknownOp(d.kind.clone()),
                )
                .expected("one of the ops listed in docs/spec.md")
                .maybe_hint(hint));
        };
        for (k, _) in &d.attrs {
            if !allowed.contains(&k.as_str()) {
                let hint = match nearest(k, allowed.iter().copied()) {
                    Some(s) => Some(format!("did you mean `{s}`?")),
                    None if allowed.is_empty() => Some(format!("`{}` takes no attributes", d.kind)),
                    None => Some(format!("`{}` takes: {}", d.kind, allowed.join(", "))),
                };
                return Err(self
                    .err_key(
                        &d.path(),
                        k,
                        SpecErrorKind::UnknownAttribute {
                            op: d.name.clone(),
                            kind: d.kind.clone(),
                            attr: k.clone(),
                        },
                    )
                    .maybe_hint(hint));
            }
        }
        let n = d.inputs.len();
        if n < min || n > max {
            let expected = if min == max {
                min.to_string()
            } else if max == usize::MAX {
                format!("at least {min}")
            } else {
                format!("{min} to {max}")
            };
            return Err(self
                .err_key(
                    &d.path(),
                    "inputs",
                    SpecErrorKind::Arity {
                        op: d.name.clone(),
                        kind: d.kind.clone(),
                        expected,
                        found: n,
                    },
                )
                .hint(arity_hint(&d.kind)));
        }
        let ins: Vec<InstId> = (0..n).map(|j| self.input(d, j)).collect::<R<_>>()?;
        // Every op takes f32 tensors except the indices of `embedding` and the scalars of
        // `sample` (checked there).
        for (j, &id) in ins.iter().enumerate() {
            let exempt = (d.kind == "embedding" && j == 0)
                || (d.kind == "sample" && j > 0)
                || (d.kind == "dequantize" && j == 0)
                || (matches!(d.kind.as_str(), "quantize" | "dequantize") && j == 2);
            if !exempt {
                self.expect_dtype(d, j, id, DType::F32)?;
            }
        }
        let name = d.name.as_str();
        let x = ins[0];
        let xd = self.dims(x);
        if let Some(&(_, u)) = UNARY_OPS.iter().find(|u| u.0 == d.kind) {
            return self.unary(d, name, u, x);
        }
        match d.kind.as_str() {
            "conv2d" => self.conv2d(d, &ins),
            "batch_norm" => self.batch_norm(d, &ins),
            "dense" => self.dense(d, &ins),
            "matmul" => self.matmul(d, &ins),
            "add" | "sub" | "mul" | "div" | "maximum" | "minimum" | "pow" => {
                let op = match d.kind.as_str() {
                    "add" => BinaryOp::Add,
                    "sub" => BinaryOp::Subtract,
                    "mul" => BinaryOp::Multiply,
                    "div" => BinaryOp::Divide,
                    "maximum" => BinaryOp::Maximum,
                    "minimum" => BinaryOp::Minimum,
                    _ => BinaryOp::Power,
                };
                let (a, b) = self.broadcast_pair(d, ins[0], ins[1])?;
                self.binary(d, name, op, a, b)
            }
            "relu" => {
                let zero = self.splat(d, &format!("{name}.zero"), 0.0, &xd)?;
                self.binary(d, name, BinaryOp::Maximum, x, zero)
            }
            "relu6" => {
                let lo = self.b.scalar(&format!("{name}.lo"), 0.0);
                let hi = self.b.scalar(&format!("{name}.hi"), 6.0);
                self.add(d, name, Op::Clamp, &[lo, x, hi])
            }
            "leaky_relu" => {
                let alpha = self.attr_finite(d, "alpha")?.unwrap_or(DEFAULT_LEAKY_ALPHA) as f32;
                let zero = self.splat(d, &format!("{name}.zero"), 0.0, &xd)?;
                let pos = self.add(
                    d,
                    &format!("{name}.positive"),
                    Op::Compare(CompareDir::Gt),
                    &[x, zero],
                )?;
                let a = self.splat(d, &format!("{name}.alpha"), alpha, &xd)?;
                let scaled = self.binary(d, &format!("{name}.scaled"), BinaryOp::Multiply, x, a)?;
                self.add(d, name, Op::Select, &[pos, x, scaled])
            }
            "silu" => {
                let s = self.unary(d, &format!("{name}.sigmoid"), UnaryOp::Logistic, x)?;
                self.binary(d, name, BinaryOp::Multiply, x, s)
            }
            "gelu" => self.gelu(d, x),
            "clamp" => {
                let lo = self.attr_float(d, "min")?;
                let hi = self.attr_float(d, "max")?;
                if lo.is_none() && hi.is_none() {
                    return Err(self
                        .required(d, "min", None::<()>)
                        .unwrap_err()
                        .hint("clamp needs `min`, `max` or both"));
                }
                if let (Some(l), Some(h)) = (lo, hi) {
                    if l > h {
                        return Err(self.attr_err(
                            d,
                            "min",
                            format!("min {l} is greater than max {h}"),
                        ));
                    }
                }
                let lo = self.b.scalar(
                    &format!("{name}.min"),
                    lo.map_or(f32::NEG_INFINITY, |v| v as f32),
                );
                let hi = self.b.scalar(
                    &format!("{name}.max"),
                    hi.map_or(f32::INFINITY, |v| v as f32),
                );
                self.add(d, name, Op::Clamp, &[lo, x, hi])
            }
            "max_pool2d" | "avg_pool2d" => self.pool2d(d, x),
            "global_avg_pool" => {
                self.expect_rank(d, 0, x, &[4], "input")?;
                let sum = self.add(
                    d,
                    &format!("{name}.sum"),
                    Op::Reduce {
                        kind: ReduceKind::Add,
                        dimensions: vec![2, 3],
                    },
                    &[x],
                )?;
                let count = self.splat(
                    d,
                    &format!("{name}.count"),
                    (xd[2] * xd[3]) as f32,
                    &xd[..2],
                )?;
                let mean = self.binary(d, &format!("{name}.mean"), BinaryOp::Divide, sum, count)?;
                self.reshape(d, name, mean, vec![xd[0], xd[1], 1, 1])
            }
            "softmax" | "log_softmax" => self.softmax(d, x),
            "layer_norm" => self.layer_norm(d, &ins),
            "reduce_sum" | "reduce_mean" | "reduce_max" => self.reduce(d, x),
            "reshape" => {
                let shape = self.required(d, "shape", self.attr_ints(d, "shape")?)?;
                let dims = self.infer_reshape(d, &xd, &shape)?;
                self.reshape(d, name, x, dims)
            }
            "flatten" => {
                let axis = self.attr_int(d, "axis")?.unwrap_or(1);
                let r = xd.len() as i64;
                if axis < -r || axis > r {
                    return Err(self.attr_err(
                        d,
                        "axis",
                        format!(
                            "axis {axis} is out of range for rank {r} (valid: {} to {r})",
                            -r
                        ),
                    ));
                }
                let axis = if axis < 0 { axis + r } else { axis } as usize;
                let outer = xd[..axis].iter().product();
                let inner = xd[axis..].iter().product();
                self.reshape(d, name, x, vec![outer, inner])
            }
            "transpose" => {
                let perm = match self.attr_ints(d, "perm")? {
                    None => (0..xd.len()).rev().collect(),
                    Some(p) => {
                        let mut seen = vec![false; xd.len()];
                        let mut out = Vec::new();
                        for &a in &p {
                            let ax = if p.len() == xd.len() {
                                self.axis(d, "perm", a, xd.len())?
                            } else {
                                usize::MAX
                            };
                            if ax == usize::MAX || seen[ax] {
                                return Err(self.attr_err(
                                    d,
                                    "perm",
                                    format!(
                                        "{:?} is not a permutation of the {} axes of `{}` {}",
                                        p,
                                        xd.len(),
                                        d.inputs[0],
                                        dims_str(&xd)
                                    ),
                                ));
                            }
                            seen[ax] = true;
                            out.push(ax);
                        }
                        out
                    }
                };
                self.add(d, name, Op::Transpose { permutation: perm }, &[x])
            }
            "concat" => {
                let axis = self.required(d, "axis", self.attr_int(d, "axis")?)?;
                let axis = self.axis(d, "axis", axis, xd.len())?;
                for (j, &id) in ins.iter().enumerate().skip(1) {
                    let dj = self.dims(id);
                    let ok =
                        dj.len() == xd.len() && (0..xd.len()).all(|i| i == axis || dj[i] == xd[i]);
                    if !ok {
                        return Err(self.err(&format!("{}.inputs[{}]", d.path(), j), SpecErrorKind::Shape {
                            op: d.name.clone(),
                            kind: d.kind.clone(),
                            detail: format!(
                                "`{}` has shape {} and `{}` has shape {}; they must match on every axis but {}",
                                d.inputs[0], dims_str(&xd), d.inputs[j], dims_str(&dj), axis
                            ),
                        }));
                    }
                }
                self.add(d, name, Op::Concatenate { dimension: axis }, &ins)
            }
            "slice" => self.slice(d, x),
            "pad" => {
                let pads = self.required(
                    d,
                    "pads",
                    self.attr_sizes(d, "pads", &[2 * xd.len()], false)?,
                )?;
                let value = self.attr_float_any(d, "value")?.unwrap_or(0.0) as f32;
                let v = self.b.scalar(&format!("{name}.value"), value);
                let r = xd.len();
                self.add(
                    d,
                    name,
                    Op::Pad {
                        low: pads[..r].to_vec(),
                        high: pads[r..].to_vec(),
                    },
                    &[x, v],
                )
            }
            "argmax" => {
                let axis = self.attr_int(d, "axis")?.unwrap_or(-1);
                if xd.is_empty() {
                    return Err(self.shape_err(d, "argmax needs a tensor of rank >= 1".into()));
                }
                let axis = self.axis(d, "axis", axis, xd.len())?;
                let keep = self.attr_bool(d, "keepdims")?.unwrap_or(false);
                if keep {
                    let am = self.add(
                        d,
                        &format!("{name}.index"),
                        Op::Argmax { dimension: axis },
                        &[x],
                    )?;
                    let mut kd = xd.clone();
                    kd[axis] = 1;
                    self.reshape(d, name, am, kd)
                } else {
                    self.add(d, name, Op::Argmax { dimension: axis }, &[x])
                }
            }
            "top_k" | "top_k_indices" => {
                let Some(k) = self.attr_int(d, "k")? else {
                    return Err(self.err(
                        &d.path(),
                        SpecErrorKind::MissingAttribute {
                            op: d.name.clone(),
                            kind: d.kind.clone(),
                            attr: "k".into(),
                        },
                    ));
                };
                let last = xd.last().copied().unwrap_or(0) as i64;
                if k < 1 || k > last {
                    return Err(self.attr_err(
                        d,
                        "k",
                        format!("must be between 1 and the last dimension ({last}) of the input"),
                    ));
                }
                let indices = d.kind == "top_k_indices";
                self.add(
                    d,
                    name,
                    Op::TopK {
                        k: k as usize,
                        indices,
                    },
                    &[x],
                )
            }
            "sample" => {
                self.expect_dtype(d, 0, x, DType::F32)?;
                if xd.is_empty() {
                    return Err(self.shape_err(d, "sample needs logits of rank >= 1".into()));
                }
                for (j, want) in [(1, DType::I32), (2, DType::I32)] {
                    self.expect_dtype(d, j, ins[j], want)?;
                    self.expect_rank(d, j, ins[j], &[0], if j == 1 { "seed" } else { "step" })?;
                }
                let knobs = if ins.len() == 6 {
                    for attr in ["temperature", "top_k", "top_p"] {
                        if d.attrs.iter().any(|(k, _)| k == attr) {
                            return Err(self.attr_err(
                                d,
                                attr,
                                "is also given as an input (inputs 4-6 are temperature, top_k, top_p); give one or the other".into(),
                            ));
                        }
                    }
                    for (j, want, role) in [
                        (3, DType::F32, "temperature"),
                        (4, DType::I32, "top_k"),
                        (5, DType::F32, "top_p"),
                    ] {
                        self.expect_dtype(d, j, ins[j], want)?;
                        self.expect_rank(d, j, ins[j], &[0], role)?;
                    }
                    [ins[3], ins[4], ins[5]]
                } else if ins.len() == 3 {
                    let t = self.attr_float(d, "temperature")?.unwrap_or(1.0);
                    let k = self.attr_int(d, "top_k")?.unwrap_or(0);
                    let p = self.attr_float(d, "top_p")?.unwrap_or(1.0);
                    if k < 0 || k > i32::MAX as i64 {
                        return Err(self.attr_err(
                            d,
                            "top_k",
                            "must be >= 0 (0: no top-k filter)".into(),
                        ));
                    }
                    if !(0.0..=1.0).contains(&p) {
                        return Err(self.attr_err(
                            d,
                            "top_p",
                            "must be in [0, 1] (1: no top-p filter)".into(),
                        ));
                    }
                    if !t.is_finite() || t < 0.0 {
                        return Err(self.attr_err(
                            d,
                            "temperature",
                            "must be >= 0 (0: greedy)".into(),
                        ));
                    }
                    let tc = self.b.scalar(&format!("{name}.temperature"), t as f32);
                    let kc = self.b.constant(
                        &format!("{name}.top_k"),
                        crate::ir::Literal::from_i32(vec![], &[k as i32]),
                    );
                    let pc = self.b.scalar(&format!("{name}.top_p"), p as f32);
                    [tc, kc, pc]
                } else {
                    return Err(self.err(
                        &d.path(),
                        SpecErrorKind::Arity {
                            op: d.name.clone(),
                            kind: d.kind.clone(),
                            expected:
                                "3 (logits, seed, step) or 6 (with temperature, top_k, top_p)"
                                    .into(),
                            found: ins.len(),
                        },
                    ));
                };
                self.add(
                    d,
                    name,
                    Op::Sample,
                    &[x, ins[1], ins[2], knobs[0], knobs[1], knobs[2]],
                )
            }
            "quantize" => self.quantize(d, &ins),
            "dequantize" => self.dequantize(d, &ins),
            "embedding" => {
                self.expect_dtype(d, 0, ins[0], DType::I32)?;
                self.expect_rank(d, 1, ins[1], &[2], "table [vocabulary, features]")?;
                self.add(d, name, Op::Gather, &[ins[1], ins[0]])
            }
            other => Err(self.err(&d.path(), SpecErrorKind::UnknownOp(other.to_string()))),
        }
    }
}

fn arity_hint(kind: &str) -> String {
    match kind {
        "conv2d" => "inputs: [x, weight] or [x, weight, bias]".into(),
        "batch_norm" => "inputs: [x, gamma, beta, mean, var]".into(),
        "dense" => "inputs: [x, weight] or [x, weight, bias]".into(),
        "layer_norm" => "inputs: [x], [x, gamma] or [x, gamma, beta]".into(),
        "embedding" => "inputs: [ids, weight]".into(),
        "sample" => {
            "inputs: [logits, seed, step] or [logits, seed, step, temperature, top_k, top_p]".into()
        }
        "matmul" => "inputs: [a, b]".into(),
        "quantize" | "dequantize" => "inputs: [x, scale] or [x, scale, zero_point]".into(),
        "concat" => "inputs: one or more tensors".into(),
        "add" | "sub" | "mul" | "div" | "maximum" | "minimum" | "pow" => "inputs: [a, b]".into(),
        _ => "inputs: [x]".into(),
    }
}
