//! Lowering spec ops to HLO primitives.
//!
//! Contract: [`Lowerer::lower_op`] checks one spec op completely (arity, attributes, dtypes,
//! shapes, weight shapes) and appends the primitives that compute it; the last instruction it
//! appends is named after the op, so the op's result is easy to find in the HLO text. Every check
//! failure is a [`SpecError`] pointing at the offending node. The op vocabulary and its attributes
//! are documented in `docs/spec.md`; this file is its single implementation.

use crate::front::decompose::{self, CountOrder, DEFAULT_EPSILON, Emitter, GeluForm};
use crate::front::diag::{SpecError, SpecErrorKind};
use crate::front::spans::SpanIndex;
use crate::front::weights::WeightStore;
use crate::ir::shape::dims_str;
use crate::ir::{
    BinaryOp, Builder, CompareDir, DType, DotDims, InstId, Literal, Op, ReduceKind, UnaryOp, Window,
};
use crate::util::suggest::nearest;
use serde_yaml::Value;
use std::collections::HashMap;
use std::path::Path;

/// Every spec op, with the attributes it accepts and how many inputs it takes (min, max).
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
    ("sigmoid", &[], 1, 1),
    ("tanh", &[], 1, 1),
    ("gelu", &["approximate"], 1, 1),
    ("silu", &[], 1, 1),
    ("exp", &[], 1, 1),
    ("log", &[], 1, 1),
    ("sqrt", &[], 1, 1),
    ("rsqrt", &[], 1, 1),
    ("neg", &[], 1, 1),
    ("abs", &[], 1, 1),
    ("clamp", &["min", "max"], 1, 1),
    ("max_pool2d", &["kernel_size", "strides", "padding"], 1, 1),
    (
        "avg_pool2d",
        &["kernel_size", "strides", "padding", "count_include_pad"],
        1,
        1,
    ),
    ("global_avg_pool", &[], 1, 1),
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

    fn attr(&self, key: &str) -> Option<&Value> {
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
}

type R<T> = Result<T, SpecError>;

/// Op `d` as the [`Emitter`] of a shared decomposition: its parts are named `<op>.<part>`, its
/// result `<op>`, and builder failures are shape errors of the op.
struct Composite<'l, 'a> {
    lw: &'l mut Lowerer<'a>,
    d: &'l OpDecl,
}

impl Emitter for Composite<'_, '_> {
    type Error = SpecError;

    fn builder(&mut self) -> &mut Builder {
        &mut self.lw.b
    }

    fn name(&self, part: &str) -> String {
        if part.is_empty() {
            self.d.name.clone()
        } else {
            format!("{}.{part}", self.d.name)
        }
    }

    fn shape_error(&self, message: String) -> SpecError {
        self.lw.shape_err(self.d, message)
    }
}

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

    // ---- attributes -------------------------------------------------------------------------

    fn int_of(&self, d: &OpDecl, attr: &str, v: &Value, what: &str) -> R<i64> {
        v.as_i64().ok_or_else(|| {
            self.attr_err(d, attr, format!("expected {what}, found {}", describe(v)))
        })
    }

    fn attr_int(&self, d: &OpDecl, attr: &str) -> R<Option<i64>> {
        d.attr(attr)
            .map(|v| self.int_of(d, attr, v, "an integer"))
            .transpose()
    }

    fn attr_float(&self, d: &OpDecl, attr: &str) -> R<Option<f64>> {
        d.attr(attr)
            .map(|v| {
                v.as_f64()
                    .filter(|x| x.is_finite() || v.is_f64())
                    .ok_or_else(|| {
                        self.attr_err(d, attr, format!("expected a number, found {}", describe(v)))
                    })
            })
            .transpose()
    }

    fn attr_bool(&self, d: &OpDecl, attr: &str) -> R<Option<bool>> {
        d.attr(attr)
            .map(|v| {
                v.as_bool().ok_or_else(|| {
                    self.attr_err(
                        d,
                        attr,
                        format!("expected true or false, found {}", describe(v)),
                    )
                })
            })
            .transpose()
    }

    fn attr_ints(&self, d: &OpDecl, attr: &str) -> R<Option<Vec<i64>>> {
        let Some(v) = d.attr(attr) else {
            return Ok(None);
        };
        let Some(seq) = v.as_sequence() else {
            return Err(self.attr_err(
                d,
                attr,
                format!("expected a list of integers, found {}", describe(v)),
            ));
        };
        seq.iter()
            .enumerate()
            .map(|(i, x)| {
                x.as_i64().ok_or_else(|| {
                    self.err(
                        &format!("{}.{}[{}]", d.path(), attr, i),
                        SpecErrorKind::BadAttribute {
                            op: d.name.clone(),
                            attr: attr.to_string(),
                            detail: format!("expected an integer, found {}", describe(x)),
                        },
                    )
                })
            })
            .collect::<R<Vec<i64>>>()
            .map(Some)
    }

    /// A list of non-negative (or, with `positive`, strictly positive) integers of a given length.
    fn attr_sizes(
        &self,
        d: &OpDecl,
        attr: &str,
        lens: &[usize],
        positive: bool,
    ) -> R<Option<Vec<usize>>> {
        let Some(v) = self.attr_ints(d, attr)? else {
            return Ok(None);
        };
        if !lens.contains(&v.len()) {
            let want: Vec<String> = lens.iter().map(|l| l.to_string()).collect();
            return Err(self.attr_err(
                d,
                attr,
                format!("expected {} value(s), found {}", want.join(" or "), v.len()),
            ));
        }
        let min = i64::from(positive);
        if let Some(bad) = v.iter().find(|&&x| x < min) {
            return Err(self.attr_err(d, attr, format!("expected values >= {min}, found {bad}")));
        }
        Ok(Some(v.into_iter().map(|x| x as usize).collect()))
    }

    fn required<T>(&self, d: &OpDecl, attr: &str, v: Option<T>) -> R<T> {
        v.ok_or_else(|| {
            self.err_key(
                &d.path(),
                "op",
                SpecErrorKind::MissingAttribute {
                    op: d.name.clone(),
                    kind: d.kind.clone(),
                    attr: attr.to_string(),
                },
            )
        })
    }

    /// A possibly negative axis into `rank` dims.
    fn axis(&self, d: &OpDecl, attr: &str, axis: i64, rank: usize) -> R<usize> {
        let r = rank as i64;
        if axis < -r || axis >= r {
            return Err(self.attr_err(
                d,
                attr,
                format!(
                    "axis {axis} is out of range for a tensor of rank {rank} (valid: {} to {})",
                    -r,
                    r - 1
                ),
            ));
        }
        Ok(if axis < 0 {
            (axis + r) as usize
        } else {
            axis as usize
        })
    }

    /// 2-D padding as (top, left, bottom, right).
    fn padding2d(&self, d: &OpDecl) -> R<[usize; 4]> {
        Ok(match self.attr_sizes(d, "padding", &[1, 2, 4], false)? {
            None => [0; 4],
            Some(p) if p.len() == 1 => [p[0]; 4],
            Some(p) if p.len() == 2 => [p[0], p[1], p[0], p[1]],
            Some(p) => [p[0], p[1], p[2], p[3]],
        })
    }

    // ---- tensors ------------------------------------------------------------------------------

    /// Resolves input `j` of op `d`, loading a weight on first use.
    pub fn input(&mut self, d: &OpDecl, j: usize) -> R<InstId> {
        let name = &d.inputs[j];
        let path = format!("{}.inputs[{}]", d.path(), j);
        if let Some(def) = self.env.get(name) {
            return Ok(def.id);
        }
        if self.weights.contains(name) {
            let lit = self
                .weights
                .load(name)
                .map_err(|m| self.err(&path, SpecErrorKind::Weight(m)))?;
            if !lit.dtype.is_supported() || lit.dtype == DType::Pred {
                return Err(self
                    .err(
                        &path,
                        SpecErrorKind::Weight(format!(
                            "weight `{name}` has dtype {}, which is not supported yet",
                            lit.dtype
                        )),
                    )
                    .hint("store weights as float32"));
            }
            let line = self.spans.find(&path).map_or(0, |p| p.line);
            let id = self.b.constant(name, lit);
            self.env.insert(
                name.clone(),
                Defined {
                    id,
                    origin: Origin::Weight,
                    line,
                },
            );
            return Ok(id);
        }
        if let Some(&idx) = self.later_ops.get(name) {
            let line = self
                .spans
                .find(&format!("ops[{idx}]"))
                .map_or(0, |p| p.line);
            let kind = if idx == d.index {
                SpecErrorKind::Invalid(format!(
                    "op `{name}` uses its own result as an input (a cycle)"
                ))
            } else {
                SpecErrorKind::UseBeforeDefinition {
                    name: name.clone(),
                    line,
                }
            };
            return Err(self.err(&path, kind)
                .hint("list ops in dependency order: an op may only use inputs, constants, weights and earlier ops; a cycle cannot be computed"));
        }
        let known: Vec<&str> = self
            .env
            .keys()
            .map(String::as_str)
            .chain(self.weights.names())
            .collect();
        let mut sorted = known.clone();
        sorted.sort();
        let hint = nearest(name, sorted.iter().copied()).map(|s| format!("did you mean `{s}`?"));
        let expected = if self.weights.path().as_os_str().is_empty() {
            "a model input, a constant or an earlier op (this spec has no `params`)".to_string()
        } else {
            format!(
                "a model input, a constant, an earlier op or a tensor in `{}`",
                self.weights.path().display()
            )
        };
        Err(self
            .err(&path, SpecErrorKind::UnknownTensor(name.clone()))
            .expected(expected)
            .maybe_hint(hint))
    }

    fn origin(&self, d: &OpDecl, j: usize) -> Origin {
        self.env.get(&d.inputs[j]).map_or(Origin::Op, |x| x.origin)
    }

    fn dims(&self, id: InstId) -> Vec<usize> {
        self.b.shape(id).dims.clone()
    }

    /// Checks that input `j` has exactly `want` dims; weights get a weight error.
    fn expect_dims(&self, d: &OpDecl, j: usize, id: InstId, want: &[usize], role: &str) -> R<()> {
        let have = self.dims(id);
        if have == want {
            return Ok(());
        }
        let path = format!("{}.inputs[{}]", d.path(), j);
        let msg = format!(
            "`{}` has shape {} but op `{}` ({}) needs {} for its {}",
            d.inputs[j],
            dims_str(&have),
            d.name,
            d.kind,
            dims_str(want),
            role
        );
        Err(match self.origin(d, j) {
            Origin::Weight => self.err(&path, SpecErrorKind::Weight(format!("weight {msg}"))),
            _ => self.err(
                &path,
                SpecErrorKind::Shape {
                    op: d.name.clone(),
                    kind: d.kind.clone(),
                    detail: msg,
                },
            ),
        })
    }

    fn expect_rank(&self, d: &OpDecl, j: usize, id: InstId, ranks: &[usize], role: &str) -> R<()> {
        let have = self.dims(id);
        if ranks.contains(&have.len()) {
            return Ok(());
        }
        let want: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
        Err(self.err(
            &format!("{}.inputs[{}]", d.path(), j),
            SpecErrorKind::Shape {
                op: d.name.clone(),
                kind: d.kind.clone(),
                detail: format!(
                    "its {} `{}` has shape {} (rank {}), expected rank {}",
                    role,
                    d.inputs[j],
                    dims_str(&have),
                    have.len(),
                    want.join(" or ")
                ),
            },
        ))
    }

    fn expect_dtype(&self, d: &OpDecl, j: usize, id: InstId, want: DType) -> R<()> {
        let have = self.b.dtype(id);
        if have == want {
            return Ok(());
        }
        let path = format!("{}.inputs[{}]", d.path(), j);
        Err(match self.origin(d, j) {
            Origin::Weight => self
                .err(
                    &path,
                    SpecErrorKind::Weight(format!(
                        "weight `{}` has dtype {have}, but op `{}` ({}) needs {want}",
                        d.inputs[j], d.name, d.kind
                    )),
                )
                .hint("store the weight as float32"),
            _ => self.err(
                &path,
                SpecErrorKind::Shape {
                    op: d.name.clone(),
                    kind: d.kind.clone(),
                    detail: format!("`{}` has dtype {have}, expected {want}", d.inputs[j]),
                },
            ),
        })
    }

    // ---- building helpers ---------------------------------------------------------------------

    fn add(&mut self, d: &OpDecl, name: &str, op: Op, operands: &[InstId]) -> R<InstId> {
        self.b
            .add(name, op, operands)
            .map_err(|m| self.shape_err(d, m))
    }

    fn bcast(
        &mut self,
        d: &OpDecl,
        name: &str,
        x: InstId,
        dims: Vec<usize>,
        result: Vec<usize>,
    ) -> R<InstId> {
        self.b
            .broadcast(name, x, dims, result)
            .map_err(|m| self.shape_err(d, m))
    }

    fn reshape(&mut self, d: &OpDecl, name: &str, x: InstId, result: Vec<usize>) -> R<InstId> {
        self.b
            .reshape(name, x, result)
            .map_err(|m| self.shape_err(d, m))
    }

    /// A scalar constant broadcast to `dims`.
    fn splat(&mut self, d: &OpDecl, name: &str, v: f32, dims: &[usize]) -> R<InstId> {
        let s = self.b.scalar(name, v);
        if dims.is_empty() {
            return Ok(s);
        }
        self.bcast(d, name, s, Vec::new(), dims.to_vec())
    }

    fn unary(&mut self, d: &OpDecl, name: &str, u: UnaryOp, x: InstId) -> R<InstId> {
        self.add(d, name, Op::Unary(u), &[x])
    }

    fn binary(&mut self, d: &OpDecl, name: &str, b: BinaryOp, x: InstId, y: InstId) -> R<InstId> {
        self.add(d, name, Op::Binary(b), &[x, y])
    }

    /// numpy broadcasting of two operands.
    fn broadcast_pair(&mut self, d: &OpDecl, a: InstId, b: InstId) -> R<(InstId, InstId)> {
        let (da, db) = (self.dims(a), self.dims(b));
        if da == db {
            return Ok((a, b));
        }
        let out = numpy_broadcast(&da, &db).map_err(|(i, x, y)| {
            self.shape_err(
                d,
                format!(
                    "cannot broadcast `{}` of shape {} with `{}` of shape {} (dimension {} is {} vs {}; numpy broadcasting needs equal extents or 1)",
                    d.inputs[0],
                    dims_str(&da),
                    d.inputs[1],
                    dims_str(&db),
                    i,
                    x,
                    y
                ),
            )
        })?;
        let rank = out.len();
        let stretch = |me: &mut Self, v: InstId, dv: &[usize], tag: &str| -> R<InstId> {
            if dv == out.as_slice() {
                return Ok(v);
            }
            let map: Vec<usize> = (rank - dv.len()..rank).collect();
            me.bcast(d, &format!("{}.{tag}", d.name), v, map, out.clone())
        };
        let a2 = stretch(self, a, &da, "lhs")?;
        let b2 = stretch(self, b, &db, "rhs")?;
        Ok((a2, b2))
    }

    // ---- the ops ------------------------------------------------------------------------------

    /// Checks and lowers one op; returns the id of its result.
    pub fn lower_op(&mut self, d: &OpDecl) -> R<InstId> {
        let Some(&(_, allowed, min, max)) = OPS.iter().find(|o| o.0 == d.kind) else {
            let hint =
                nearest(&d.kind, OPS.iter().map(|o| o.0)).map(|s| format!("did you mean `{s}`?"));
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
            let exempt = (d.kind == "embedding" && j == 0) || (d.kind == "sample" && j > 0);
            if !exempt {
                self.expect_dtype(d, j, id, DType::F32)?;
            }
        }
        let name = d.name.as_str();
        let x = ins[0];
        let xd = self.dims(x);
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
                let alpha = self.attr_float(d, "alpha")?.unwrap_or(DEFAULT_LEAKY_ALPHA) as f32;
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
            "sigmoid" => self.unary(d, name, UnaryOp::Logistic, x),
            "tanh" => self.unary(d, name, UnaryOp::Tanh, x),
            "exp" => self.unary(d, name, UnaryOp::Exp, x),
            "log" => self.unary(d, name, UnaryOp::Log, x),
            "sqrt" => self.unary(d, name, UnaryOp::Sqrt, x),
            "rsqrt" => self.unary(d, name, UnaryOp::Rsqrt, x),
            "neg" => self.unary(d, name, UnaryOp::Negate, x),
            "abs" => self.unary(d, name, UnaryOp::Abs, x),
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
                let value = self.attr_float(d, "value")?.unwrap_or(0.0) as f32;
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
            "embedding" => {
                self.expect_dtype(d, 0, ins[0], DType::I32)?;
                self.expect_rank(d, 1, ins[1], &[2], "table [vocabulary, features]")?;
                self.add(d, name, Op::Gather, &[ins[1], ins[0]])
            }
            other => Err(self.err(&d.path(), SpecErrorKind::UnknownOp(other.to_string()))),
        }
    }

    fn conv2d(&mut self, d: &OpDecl, ins: &[InstId]) -> R<InstId> {
        let (x, w) = (ins[0], ins[1]);
        self.expect_rank(d, 0, x, &[4], "input [N, C, H, W]")?;
        self.expect_rank(d, 1, w, &[4], "weight [O, C/groups, kH, kW]")?;
        let (xd, wd) = (self.dims(x), self.dims(w));
        let strides = self
            .attr_sizes(d, "strides", &[2], true)?
            .unwrap_or(vec![1, 1]);
        let dil = self
            .attr_sizes(d, "dilations", &[2], true)?
            .unwrap_or(vec![1, 1]);
        let groups = self.attr_int(d, "groups")?.unwrap_or(1);
        if groups < 1 {
            return Err(self.attr_err(
                d,
                "groups",
                format!("expected a positive integer, found {groups}"),
            ));
        }
        let groups = groups as usize;
        let c = xd[1];
        if c % groups != 0 || wd[0] % groups != 0 {
            return Err(self.attr_err(d, "groups", format!(
                "groups = {groups} must divide the input channels ({c}) and the output channels ({})",
                wd[0]
            )));
        }
        let want = [wd[0], c / groups, wd[2], wd[3]];
        self.expect_dims(
            d,
            1,
            w,
            &want,
            &format!("weight (input has {c} channels, groups = {groups})"),
        )?;
        let [top, left, bottom, right] = self.padding2d(d)?;
        let window = Window {
            size: vec![wd[2], wd[3]],
            stride: strides,
            pad_low: vec![top, left],
            pad_high: vec![bottom, right],
            dilation: dil,
        };
        for i in 0..2 {
            if window.output_extent(i, xd[2 + i]).is_none() {
                return Err(self.shape_err(
                    d,
                    format!(
                        "the {}x{} kernel (dilation {:?}) does not fit the padded {}x{} input",
                        wd[2],
                        wd[3],
                        window.dilation,
                        xd[2] + top + bottom,
                        xd[3] + left + right
                    ),
                ));
            }
        }
        let name = &d.name;
        let has_bias = ins.len() == 3;
        let conv_name = if has_bias {
            format!("{name}.conv")
        } else {
            name.clone()
        };
        let conv = self.add(
            d,
            &conv_name,
            Op::Convolution {
                window,
                feature_group_count: groups,
            },
            &[x, w],
        )?;
        if !has_bias {
            return Ok(conv);
        }
        self.expect_dims(d, 2, ins[2], &[wd[0]], "bias")?;
        let od = self.dims(conv);
        let bias = self.bcast(d, &format!("{name}.bias"), ins[2], vec![1], od)?;
        self.binary(d, name, BinaryOp::Add, conv, bias)
    }

    fn batch_norm(&mut self, d: &OpDecl, ins: &[InstId]) -> R<InstId> {
        let x = ins[0];
        let xd = self.dims(x);
        if xd.len() < 2 {
            return Err(self.shape_err(
                d,
                format!(
                    "input `{}` has shape {}; batch_norm needs [N, C, ...]",
                    d.inputs[0],
                    dims_str(&xd)
                ),
            ));
        }
        let c = xd[1];
        for (j, role) in [(1, "gamma"), (2, "beta"), (3, "mean"), (4, "var")] {
            self.expect_dims(
                d,
                j,
                ins[j],
                &[c],
                &format!("{role} (one per channel, C = {c})"),
            )?;
        }
        let eps = self.epsilon(d)?;
        let stats = [ins[1], ins[2], ins[3], ins[4]];
        decompose::batch_norm(&mut self.composite(d), x, stats, eps)
    }

    /// The `epsilon` attribute of a normalisation: a non-negative number, by default
    /// [`DEFAULT_EPSILON`].
    fn epsilon(&self, d: &OpDecl) -> R<f32> {
        let eps = self
            .attr_float(d, "epsilon")?
            .unwrap_or(f64::from(DEFAULT_EPSILON));
        if eps < 0.0 {
            return Err(self.attr_err(
                d,
                "epsilon",
                format!("expected a non-negative number, found {eps}"),
            ));
        }
        Ok(eps as f32)
    }

    fn composite<'l>(&'l mut self, d: &'l OpDecl) -> Composite<'l, 'a> {
        Composite { lw: self, d }
    }

    fn dense(&mut self, d: &OpDecl, ins: &[InstId]) -> R<InstId> {
        let (x, w) = (ins[0], ins[1]);
        let xd = self.dims(x);
        if xd.is_empty() {
            return Err(self.shape_err(
                d,
                format!(
                    "input `{}` is a scalar; dense needs [..., in_features]",
                    d.inputs[0]
                ),
            ));
        }
        self.expect_rank(d, 1, w, &[2], "weight [out_features, in_features]")?;
        let wd = self.dims(w);
        let k = xd[xd.len() - 1];
        self.expect_dims(
            d,
            1,
            w,
            &[wd[0], k],
            &format!("weight [out_features, in_features] (the input's last dim is {k})"),
        )?;
        let name = &d.name;
        let has_bias = ins.len() == 3;
        let dot_name = if has_bias {
            format!("{name}.dot")
        } else {
            name.clone()
        };
        let dot = self.add(
            d,
            &dot_name,
            Op::Dot(DotDims {
                lhs_contracting: vec![xd.len() - 1],
                rhs_contracting: vec![1],
                ..DotDims::default()
            }),
            &[x, w],
        )?;
        if !has_bias {
            return Ok(dot);
        }
        self.expect_dims(d, 2, ins[2], &[wd[0]], "bias [out_features]")?;
        let od = self.dims(dot);
        let bias = self.bcast(d, &format!("{name}.bias"), ins[2], vec![od.len() - 1], od)?;
        self.binary(d, name, BinaryOp::Add, dot, bias)
    }

    fn matmul(&mut self, d: &OpDecl, ins: &[InstId]) -> R<InstId> {
        let (a, b) = (ins[0], ins[1]);
        self.expect_rank(d, 0, a, &[2, 3, 4, 5, 6], "input a")?;
        self.expect_rank(d, 1, b, &[2, 3, 4, 5, 6], "input b")?;
        let ta = self.attr_bool(d, "transpose_a")?.unwrap_or(false);
        let tb = self.attr_bool(d, "transpose_b")?.unwrap_or(false);
        let (ad, bd) = (self.dims(a), self.dims(b));
        let (ra, rb) = (ad.len(), bd.len());
        let (m, ka) = if ta {
            (ad[ra - 1], ad[ra - 2])
        } else {
            (ad[ra - 2], ad[ra - 1])
        };
        let (kb, n) = if tb {
            (bd[rb - 1], bd[rb - 2])
        } else {
            (bd[rb - 2], bd[rb - 1])
        };
        if ka != kb {
            return Err(self.shape_err(d, format!(
                "inner dimensions differ: `{}` {} gives [{m}, {ka}]{} and `{}` {} gives [{kb}, {n}]{}",
                d.inputs[0], dims_str(&ad), if ta { " after transpose_a" } else { "" },
                d.inputs[1], dims_str(&bd), if tb { " after transpose_b" } else { "" }
            )));
        }
        // Batch dims: numpy broadcasting of the leading dims.
        let (ba, bb) = (&ad[..ra - 2], &bd[..rb - 2]);
        let batch = numpy_broadcast(ba, bb).map_err(|(_, x, y)| {
            self.shape_err(
                d,
                format!(
                    "batch dimensions of `{}` {} and `{}` {} do not broadcast ({x} vs {y})",
                    d.inputs[0],
                    dims_str(&ad),
                    d.inputs[1],
                    dims_str(&bd)
                ),
            )
        })?;
        let nb = batch.len();
        let name = d.name.clone();
        let widen = |me: &mut Self, v: InstId, dv: &[usize], tag: &str| -> R<InstId> {
            let mut full = batch.clone();
            full.extend_from_slice(&dv[dv.len() - 2..]);
            if full == dv {
                return Ok(v);
            }
            let map: Vec<usize> = (nb + 2 - dv.len()..nb + 2).collect();
            me.bcast(d, &format!("{name}.{tag}"), v, map, full)
        };
        let a2 = widen(self, a, &ad, "a")?;
        let b2 = widen(self, b, &bd, "b")?;
        let batch_dims: Vec<usize> = (0..nb).collect();
        let dims = DotDims {
            lhs_batch: batch_dims.clone(),
            lhs_contracting: vec![if ta { nb } else { nb + 1 }],
            rhs_batch: batch_dims,
            rhs_contracting: vec![if tb { nb + 1 } else { nb }],
        };
        self.add(d, &name, Op::Dot(dims), &[a2, b2])
    }

    fn gelu(&mut self, d: &OpDecl, x: InstId) -> R<InstId> {
        let approx = match d.attr("approximate") {
            None => "none".to_string(),
            Some(v) => v.as_str().map(str::to_string).ok_or_else(|| {
                self.attr_err(
                    d,
                    "approximate",
                    format!("expected `none` or `tanh`, found {}", describe(v)),
                )
            })?,
        };
        let Some(form) = GeluForm::from_approximate(&approx) else {
            return Err(self.attr_err(
                d,
                "approximate",
                format!("expected `none` or `tanh`, found `{approx}`"),
            ));
        };
        decompose::gelu(&mut self.composite(d), x, form)
    }

    fn pool2d(&mut self, d: &OpDecl, x: InstId) -> R<InstId> {
        self.expect_rank(d, 0, x, &[4], "input [N, C, H, W]")?;
        let xd = self.dims(x);
        let k = self.attr_sizes(d, "kernel_size", &[2], true)?;
        let k = self.required(d, "kernel_size", k)?;
        let s = self
            .attr_sizes(d, "strides", &[2], true)?
            .unwrap_or(k.clone());
        let [top, left, bottom, right] = self.padding2d(d)?;
        if top >= k[0] || bottom >= k[0] || left >= k[1] || right >= k[1] {
            return Err(self.attr_err(d, "padding", format!(
                "padding [{top}, {left}, {bottom}, {right}] must be smaller than the kernel {}x{} on each side, or some windows would see only padding",
                k[0], k[1]
            )));
        }
        let window = Window {
            size: vec![1, 1, k[0], k[1]],
            stride: vec![1, 1, s[0], s[1]],
            pad_low: vec![0, 0, top, left],
            pad_high: vec![0, 0, bottom, right],
            dilation: vec![1; 4],
        };
        for i in 2..4 {
            if window.output_extent(i, xd[i]).is_none() {
                return Err(self.shape_err(
                    d,
                    format!(
                        "the {}x{} window does not fit the padded {}x{} input",
                        k[0],
                        k[1],
                        xd[2] + top + bottom,
                        xd[3] + left + right
                    ),
                ));
            }
        }
        let name = d.name.clone();
        if d.kind == "max_pool2d" {
            return self.add(
                d,
                &name,
                Op::ReduceWindow {
                    kind: ReduceKind::Max,
                    window,
                },
                &[x],
            );
        }
        let include = self.attr_bool(d, "count_include_pad")?.unwrap_or(false);
        let sum = self.add(
            d,
            &format!("{name}.sum"),
            Op::ReduceWindow {
                kind: ReduceKind::Add,
                window: window.clone(),
            },
            &[x],
        )?;
        let od = self.dims(sum);
        let padded = top + left + bottom + right > 0;
        let count = if include || !padded {
            self.splat(d, &format!("{name}.count"), (k[0] * k[1]) as f32, &od)?
        } else {
            // Cells per window that are not padding: the same window summed over ones. A constant
            // subgraph, folded at compile time.
            let ones = self.splat(d, &format!("{name}.ones"), 1.0, &xd)?;
            self.add(
                d,
                &format!("{name}.count"),
                Op::ReduceWindow {
                    kind: ReduceKind::Add,
                    window,
                },
                &[ones],
            )?
        };
        self.binary(d, &name, BinaryOp::Divide, sum, count)
    }

    fn softmax(&mut self, d: &OpDecl, x: InstId) -> R<InstId> {
        let xd = self.dims(x);
        if xd.is_empty() {
            return Err(self.shape_err(d, format!("{} needs a tensor of rank >= 1", d.kind)));
        }
        let axis = self.attr_int(d, "axis")?.unwrap_or(-1);
        let axis = self.axis(d, "axis", axis, xd.len())?;
        decompose::softmax(&mut self.composite(d), x, axis, d.kind == "log_softmax")
    }

    fn layer_norm(&mut self, d: &OpDecl, ins: &[InstId]) -> R<InstId> {
        let x = ins[0];
        let xd = self.dims(x);
        if xd.is_empty() {
            return Err(self.shape_err(d, "layer_norm needs a tensor of rank >= 1".into()));
        }
        let axis = self.attr_int(d, "axis")?.unwrap_or(-1);
        let axis = self.axis(d, "axis", axis, xd.len())?;
        let eps = self.epsilon(d)?;
        let axes: Vec<usize> = (axis..xd.len()).collect();
        let normalized = &xd[axis..];
        for (j, role) in [(1usize, "gamma"), (2, "beta")] {
            if j < ins.len() {
                self.expect_dims(
                    d,
                    j,
                    ins[j],
                    normalized,
                    &format!("{role} (the normalised dims x.shape[{axis}:])"),
                )?;
            }
        }
        let name = d.name.clone();
        let (mut y, _) = {
            let last = ins.len() == 1;
            let mut g = self.composite(d);
            decompose::normalize(&mut g, x, &axes, eps, CountOrder::BeforeSum, last)?
        };
        let map: Vec<usize> = axes.clone();
        if ins.len() >= 2 {
            let g = self.bcast(
                d,
                &format!("{name}.gamma_b"),
                ins[1],
                map.clone(),
                xd.clone(),
            )?;
            let nm = if ins.len() == 2 {
                name.clone()
            } else {
                format!("{name}.scaled")
            };
            y = self.binary(d, &nm, BinaryOp::Multiply, y, g)?;
        }
        if ins.len() == 3 {
            let bb = self.bcast(d, &format!("{name}.beta_b"), ins[2], map, xd)?;
            y = self.binary(d, &name, BinaryOp::Add, y, bb)?;
        }
        Ok(y)
    }

    fn reduce(&mut self, d: &OpDecl, x: InstId) -> R<InstId> {
        let xd = self.dims(x);
        let mut axes: Vec<usize> = match self.attr_ints(d, "axes")? {
            None => (0..xd.len()).collect(),
            Some(list) => list
                .iter()
                .map(|&a| self.axis(d, "axes", a, xd.len()))
                .collect::<R<_>>()?,
        };
        axes.sort();
        if axes.windows(2).any(|w| w[0] == w[1]) {
            return Err(self.attr_err(d, "axes", "an axis is listed twice".into()));
        }
        let keep = self.attr_bool(d, "keepdims")?.unwrap_or(false);
        let name = d.name.clone();
        let kind = if d.kind == "reduce_max" {
            ReduceKind::Max
        } else {
            ReduceKind::Add
        };
        let mean = d.kind == "reduce_mean";
        let last_is_reduce = !mean && !keep;
        let rname = if last_is_reduce {
            name.clone()
        } else {
            format!("{name}.reduce")
        };
        let mut r = self.add(
            d,
            &rname,
            Op::Reduce {
                kind,
                dimensions: axes.clone(),
            },
            &[x],
        )?;
        if mean {
            let count: usize = axes.iter().map(|&a| xd[a]).product();
            let rd = self.dims(r);
            let c = self.splat(d, &format!("{name}.count"), count as f32, &rd)?;
            let mname = if keep {
                format!("{name}.mean")
            } else {
                name.clone()
            };
            r = self.binary(d, &mname, BinaryOp::Divide, r, c)?;
        }
        if keep {
            let kd: Vec<usize> = (0..xd.len())
                .map(|i| if axes.contains(&i) { 1 } else { xd[i] })
                .collect();
            r = self.reshape(d, &name, r, kd)?;
        }
        Ok(r)
    }

    fn infer_reshape(&self, d: &OpDecl, xd: &[usize], shape: &[i64]) -> R<Vec<usize>> {
        let total: usize = xd.iter().product();
        let mut infer = None;
        let mut known: usize = 1;
        for (i, &s) in shape.iter().enumerate() {
            if s == -1 {
                if infer.is_some() {
                    return Err(self.attr_err(d, "shape", "only one dimension may be -1".into()));
                }
                infer = Some(i);
            } else if s <= 0 {
                return Err(self.attr_err(
                    d,
                    "shape",
                    format!("dimension {s} is not positive (use -1 for one inferred dimension)"),
                ));
            } else {
                known = known.checked_mul(s as usize).ok_or_else(|| {
                    self.err(
                        &format!("{}.shape", d.path()),
                        SpecErrorKind::DimensionOverflow(format!(
                            "reshape target {shape:?} is too large"
                        )),
                    )
                })?;
            }
        }
        let mut dims: Vec<usize> = shape.iter().map(|&s| s.max(0) as usize).collect();
        if let Some(i) = infer {
            if known == 0 || total % known != 0 {
                return Err(self.attr_err(
                    d,
                    "shape",
                    format!(
                        "cannot infer -1: {} elements of {} are not a multiple of {known}",
                        total,
                        dims_str(xd)
                    ),
                ));
            }
            dims[i] = total / known;
        } else if known != total {
            return Err(self.attr_err(
                d,
                "shape",
                format!(
                    "{shape:?} holds {known} elements but `{}` {} holds {total}",
                    d.inputs[0],
                    dims_str(xd)
                ),
            ));
        }
        Ok(dims)
    }

    fn slice(&mut self, d: &OpDecl, x: InstId) -> R<InstId> {
        let xd = self.dims(x);
        let starts = self.required(d, "starts", self.attr_ints(d, "starts")?)?;
        let ends = self.required(d, "ends", self.attr_ints(d, "ends")?)?;
        let n = starts.len();
        if ends.len() != n {
            return Err(self.attr_err(
                d,
                "ends",
                format!("has {} entries but starts has {n}", ends.len()),
            ));
        }
        let axes: Vec<usize> = match self.attr_ints(d, "axes")? {
            None => {
                if n > xd.len() {
                    return Err(self.attr_err(
                        d,
                        "starts",
                        format!("{n} entries for a tensor of rank {}", xd.len()),
                    ));
                }
                (0..n).collect()
            }
            Some(a) => {
                if a.len() != n {
                    return Err(self.attr_err(
                        d,
                        "axes",
                        format!("has {} entries but starts has {n}", a.len()),
                    ));
                }
                a.iter()
                    .map(|&v| self.axis(d, "axes", v, xd.len()))
                    .collect::<R<_>>()?
            }
        };
        let steps = match self.attr_ints(d, "steps")? {
            None => vec![1; n],
            Some(s) => {
                if s.len() != n {
                    return Err(self.attr_err(
                        d,
                        "steps",
                        format!("has {} entries but starts has {n}", s.len()),
                    ));
                }
                if let Some(bad) = s.iter().find(|&&v| v <= 0) {
                    return Err(self.attr_err(
                        d,
                        "steps",
                        format!("step {bad} is not supported; steps must be positive"),
                    ));
                }
                s
            }
        };
        let mut lo: Vec<usize> = vec![0; xd.len()];
        let mut hi = xd.clone();
        let mut st = vec![1; xd.len()];
        for i in 0..n {
            let ax = axes[i];
            if axes[..i].contains(&ax) {
                return Err(self.attr_err(d, "axes", format!("axis {ax} is listed twice")));
            }
            let dim = xd[ax] as i64;
            let norm = |v: i64| -> i64 { if v < 0 { (v + dim).max(0) } else { v.min(dim) } };
            let (s, e) = (norm(starts[i]), norm(ends[i]));
            if e <= s {
                return Err(self.attr_err(d, "starts", format!(
                    "the slice [{}:{}] of axis {ax} (extent {dim}) is empty; empty tensors are not supported",
                    starts[i], ends[i]
                )));
            }
            lo[ax] = s as usize;
            hi[ax] = e as usize;
            st[ax] = steps[i] as usize;
        }
        self.add(
            d,
            &d.name,
            Op::Slice {
                starts: lo,
                limits: hi,
                strides: st,
            },
            &[x],
        )
    }
}

/// numpy broadcasting of two shapes (aligned at the right; equal extents or 1), or the failing
/// result dimension with both extents.
fn numpy_broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>, (usize, usize, usize)> {
    let rank = a.len().max(b.len());
    let at = |v: &[usize], i: usize| {
        if i + v.len() >= rank {
            v[i + v.len() - rank]
        } else {
            1
        }
    };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            (x, y) => Err((i, x, y)),
        })
        .collect()
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
        "concat" => "inputs: one or more tensors".into(),
        "add" | "sub" | "mul" | "div" | "maximum" | "minimum" | "pow" => "inputs: [a, b]".into(),
        _ => "inputs: [x]".into(),
    }
}

/// A short description of a YAML value for "found ..." messages.
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("`{b}`"),
        Value::Number(n) => format!("`{n}`"),
        Value::String(s) => format!("the string `{s}`"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}

/// A scalar literal helper used by the spec front end for inline constants.
pub fn literal_from_values(dtype: DType, dims: Vec<usize>, values: &[f64]) -> Literal {
    match dtype {
        DType::I32 => {
            Literal::from_i32(dims, &values.iter().map(|&v| v as i32).collect::<Vec<_>>())
        }
        _ => Literal::from_f32(dims, &values.iter().map(|&v| v as f32).collect::<Vec<_>>()),
    }
}
