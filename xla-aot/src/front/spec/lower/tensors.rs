//! The operands of a spec op and the building helpers every lowering uses.
//!
//! Contract: [`Lowerer::input`] resolves an input name (an earlier op, an input, a constant or a
//! weight, loaded once) or says why it cannot (unknown, used before its op, a weight that does not
//! load); the `expect_*` checks point at the offending input and say whether it is a weight;
//! builder failures become shape errors of the op. numpy broadcasting of two operands is here too.

use super::{Defined, Lowerer, OpDecl, Origin, R};
use crate::front::diag::SpecErrorKind;
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, DType, InstId, Literal, Op, UnaryOp};
use crate::util::suggest::nearest;

impl<'a> Lowerer<'a> {
    /// Resolves input `j` of op `d`, loading a weight on first use.
    pub fn input(&mut self, d: &OpDecl, j: usize) -> R<InstId> {
        let name = &d.inputs[j];
        let path = format!("{}.inputs[{}]", d.path(), j);
        if let Some(def) = self.env.get(name) {
            return Ok(def.id);
        }
        if self.weights.contains(name) {
            let mut lit = self
                .weights
                .load(name)
                .map_err(|m| self.err(&path, SpecErrorKind::Weight(m)))?;
            if matches!(lit.dtype, DType::I8 | DType::U8) {
                // Quantized weights: their integers, for `dequantize` (`quant.rs`).
                let signed = lit.dtype == DType::I8;
                let v: Vec<i32> = lit
                    .bytes()
                    .unwrap_or_default()
                    .iter()
                    .map(|&b| if signed { b as i8 as i32 } else { b as i32 })
                    .collect();
                lit = Literal::from_i32(lit.dims.clone(), &v);
            }
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

    pub(super) fn origin(&self, d: &OpDecl, j: usize) -> Origin {
        self.env.get(&d.inputs[j]).map_or(Origin::Op, |x| x.origin)
    }

    pub(super) fn dims(&self, id: InstId) -> Vec<usize> {
        self.b.shape(id).dims.clone()
    }

    /// Checks that input `j` has exactly `want` dims; weights get a weight error.
    pub(super) fn expect_dims(
        &self,
        d: &OpDecl,
        j: usize,
        id: InstId,
        want: &[usize],
        role: &str,
    ) -> R<()> {
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

    pub(super) fn expect_rank(
        &self,
        d: &OpDecl,
        j: usize,
        id: InstId,
        ranks: &[usize],
        role: &str,
    ) -> R<()> {
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

    pub(super) fn expect_dtype(&self, d: &OpDecl, j: usize, id: InstId, want: DType) -> R<()> {
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
            _ => self
                .err(
                    &path,
                    SpecErrorKind::Shape {
                        op: d.name.clone(),
                        kind: d.kind.clone(),
                        detail: format!("`{}` has dtype {have}, expected {want}", d.inputs[j]),
                    },
                )
                .maybe_hint((have == DType::I32 && want == DType::F32).then(|| {
                    "integers (u8/i8 inputs and quantize results are held in i32) become f32 \
                     through `dequantize`"
                        .to_string()
                })),
        })
    }

    pub(super) fn add(&mut self, d: &OpDecl, name: &str, op: Op, operands: &[InstId]) -> R<InstId> {
        self.b
            .add(name, op, operands)
            .map_err(|m| self.shape_err(d, m))
    }

    pub(super) fn bcast(
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

    pub(super) fn reshape(
        &mut self,
        d: &OpDecl,
        name: &str,
        x: InstId,
        result: Vec<usize>,
    ) -> R<InstId> {
        self.b
            .reshape(name, x, result)
            .map_err(|m| self.shape_err(d, m))
    }

    /// A scalar constant broadcast to `dims`.
    pub(super) fn splat(&mut self, d: &OpDecl, name: &str, v: f32, dims: &[usize]) -> R<InstId> {
        let s = self.b.scalar(name, v);
        if dims.is_empty() {
            return Ok(s);
        }
        self.bcast(d, name, s, Vec::new(), dims.to_vec())
    }

    pub(super) fn unary(&mut self, d: &OpDecl, name: &str, u: UnaryOp, x: InstId) -> R<InstId> {
        self.add(d, name, Op::Unary(u), &[x])
    }

    pub(super) fn binary(
        &mut self,
        d: &OpDecl,
        name: &str,
        b: BinaryOp,
        x: InstId,
        y: InstId,
    ) -> R<InstId> {
        self.add(d, name, Op::Binary(b), &[x, y])
    }

    /// numpy broadcasting of two operands.
    pub(super) fn broadcast_pair(
        &mut self,
        d: &OpDecl,
        a: InstId,
        b: InstId,
    ) -> R<(InstId, InstId)> {
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
}

/// numpy broadcasting of two shapes (aligned at the right; equal extents or 1), or the failing
/// result dimension with both extents.
pub(super) fn numpy_broadcast(
    a: &[usize],
    b: &[usize],
) -> Result<Vec<usize>, (usize, usize, usize)> {
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

/// A scalar literal helper used by the spec front end for inline constants.
pub fn literal_from_values(dtype: DType, dims: Vec<usize>, values: &[f64]) -> Literal {
    match dtype {
        DType::I32 => {
            Literal::from_i32(dims, &values.iter().map(|&v| v as i32).collect::<Vec<_>>())
        }
        _ => Literal::from_f32(dims, &values.iter().map(|&v| v as f32).collect::<Vec<_>>()),
    }
}
