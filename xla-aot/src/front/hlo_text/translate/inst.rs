//! The opcode dispatch: one HLO instruction, its operands already translated, becomes IR.
//!
//! Contract: [`Tr::inst`] checks the instruction's attributes against what the opcode allows,
//! translates it (or folds it, for integer index arithmetic on constants) and checks the result
//! shape against the one XLA printed; tuples, `call` and `fusion` are inlined as values.

use super::super::syntax::RawInst;
use super::attrs::*;
use super::{MAX_FOLD_ELEMENTS, TResult, Tr, Val, err, err_at, supported, with_hint};
use crate::ir::{BinaryOp, CompareDir, DotDims, InstId, Op, UnaryOp};

impl<'m, 'b, 'w> Tr<'m, 'b, 'w> {
    pub(super) fn inst(&mut self, inst: &RawInst, ops: Vec<Val>) -> TResult<Val> {
        let tensor = |k: usize| -> TResult<InstId> {
            match ops.get(k) {
                Some(Val::T(id)) => Ok(*id),
                Some(Val::Tuple(_)) => err_at(
                    inst.line,
                    inst.operands[k].1,
                    format!(
                        "operand `{}` is a tuple; take an element with get-tuple-element",
                        inst.operands[k].0
                    ),
                ),
                None => err(
                    inst,
                    format!("`{}` needs at least {} operand(s)", inst.opcode, k + 1),
                ),
            }
        };
        let arity = |n: usize| -> TResult<()> {
            if ops.len() != n {
                return err(
                    inst,
                    format!(
                        "`{}` takes {n} operand(s), found {}",
                        inst.opcode,
                        ops.len()
                    ),
                );
            }
            Ok(())
        };
        let op = inst.opcode.as_str();
        let unary = |o: &str| -> Option<UnaryOp> { UnaryOp::all().find(|u| u.info().opcode == o) };
        let binary =
            |o: &str| -> Option<BinaryOp> { BinaryOp::all().find(|b| b.info().opcode == o) };
        let id = match op {
            "tuple" => {
                self.check_attrs(inst, &[])?;
                if ops.iter().map(Val::depth).max().unwrap_or(0)
                    >= super::super::syntax::MAX_TUPLE_DEPTH
                {
                    return err(inst, "tuples nest too deeply");
                }
                return Ok(Val::Tuple(ops));
            }
            "get-tuple-element" => {
                self.check_attrs(inst, &["index"])?;
                arity(1)?;
                let a = self.need_attr(inst, "index")?;
                let k: usize = a
                    .value
                    .trim()
                    .parse()
                    .or_else(|_| err_at(inst.line, a.column, "`index` must be a number"))?;
                return match &ops[0] {
                    Val::Tuple(elems) if k < elems.len() => Ok(elems[k].clone()),
                    _ => err(inst, format!("get-tuple-element index {k} is out of range")),
                };
            }
            "call" | "fusion" => {
                let key = if op == "call" { "to_apply" } else { "calls" };
                self.check_attrs(inst, &[key, "kind"])?;
                let c = self.computation(inst, key)?;
                return self.call(inst, c, ops);
            }
            "constant" => {
                self.check_attrs(inst, &[])?;
                let shape = array_shape(inst, &inst.shape)?;
                let lit = parse_literal(inst, &shape)?;
                self.constant(&inst.name, lit)
            }
            "iota" => {
                self.check_attrs(inst, &["iota_dimension"])?;
                let shape = array_shape(inst, &inst.shape)?;
                let d = usize_list(inst, self.need_attr(inst, "iota_dimension")?)?;
                let d = match d.as_slice() {
                    [d] if *d < shape.rank() => *d,
                    _ => {
                        return err(
                            inst,
                            "`iota_dimension` must name one dimension of the result",
                        );
                    }
                };
                let n = shape.element_count();
                if n > MAX_FOLD_ELEMENTS {
                    return err(
                        inst,
                        format!(
                            "iota of {n} elements is larger than xla-aot folds ({MAX_FOLD_ELEMENTS})"
                        ),
                    );
                }
                let stride: usize = shape.dims[d + 1..].iter().product();
                let v: Vec<f64> = (0..n)
                    .map(|i| ((i / stride) % shape.dims[d]) as f64)
                    .collect();
                self.constant(
                    &inst.name,
                    literal_from_f64(shape.dtype, shape.dims.clone(), &v),
                )
            }
            "copy" => {
                self.check_attrs(inst, &[])?;
                arity(1)?;
                tensor(0)?
            }
            "convert" => {
                self.check_attrs(inst, &[])?;
                arity(1)?;
                let x = tensor(0)?;
                let to = array_shape(inst, &inst.shape)?.dtype;
                if self.shape(x).dtype == to {
                    x
                } else {
                    self.add(inst, Op::Convert { to }, &[x])?
                }
            }
            "broadcast" => {
                self.check_attrs(inst, &["dimensions"])?;
                arity(1)?;
                let mut x = tensor(0)?;
                let mut dims = usize_list(inst, self.need_attr(inst, "dimensions")?)?;
                let want = array_shape(inst, &inst.shape)?;
                if dims.windows(2).any(|w| w[0] >= w[1]) {
                    // XLA allows any order; ours is increasing: transpose the operand first.
                    let mut perm: Vec<usize> = (0..dims.len()).collect();
                    perm.sort_by_key(|&i| dims[i]);
                    x = self.add(
                        inst,
                        Op::Transpose {
                            permutation: perm.clone(),
                        },
                        &[x],
                    )?;
                    dims = perm.iter().map(|&i| dims[i]).collect();
                }
                self.b
                    .broadcast(&inst.name, x, dims, want.dims)
                    .or_else(|m| err(inst, format!("`broadcast`: {m}")))?
            }
            "reshape" => {
                self.check_attrs(inst, &[])?;
                arity(1)?;
                let want = array_shape(inst, &inst.shape)?;
                return self.reshape_val(inst, tensor(0)?, want.dims);
            }
            "transpose" => {
                self.check_attrs(inst, &["dimensions"])?;
                arity(1)?;
                let permutation = usize_list(inst, self.need_attr(inst, "dimensions")?)?;
                self.add(inst, Op::Transpose { permutation }, &[tensor(0)?])?
            }
            "slice" => {
                self.check_attrs(inst, &["slice"])?;
                arity(1)?;
                let a = self.need_attr(inst, "slice")?;
                let (starts, limits, strides) = parse_slice(inst, a)?;
                self.add(
                    inst,
                    Op::Slice {
                        starts,
                        limits,
                        strides,
                    },
                    &[tensor(0)?],
                )?
            }
            "dynamic-slice" => {
                self.check_attrs(inst, &["dynamic_slice_sizes"])?;
                let x = tensor(0)?;
                let sizes = usize_list(inst, self.need_attr(inst, "dynamic_slice_sizes")?)?;
                let rank = self.shape(x).rank();
                if ops.len() != rank + 1 || sizes.len() != rank {
                    return err(
                        inst,
                        format!(
                            "dynamic-slice of a rank-{rank} operand needs {rank} start indices and sizes"
                        ),
                    );
                }
                let mut starts = Vec::new();
                for (k, &size) in sizes.iter().enumerate() {
                    let s = tensor(k + 1)?;
                    let Some(v) = self.const_value(s) else {
                        return with_hint(
                            err_at(
                                inst.line,
                                inst.operands[k + 1].1,
                                "dynamic-slice with a start index computed at run time is not supported",
                            ),
                            "xla-aot compiles static shapes and offsets; make the start index a Python constant",
                        );
                    };
                    let dim = self.shape(x).dims[k];
                    if size > dim {
                        return err(
                            inst,
                            format!("slice size {size} exceeds dimension {k} ({dim})"),
                        );
                    }
                    // XLA clamps the start so the slice stays in bounds.
                    let start = literal_values(&v).first().copied().unwrap_or(0.0);
                    starts.push((start.max(0.0) as usize).min(dim - size));
                }
                let limits: Vec<usize> = starts.iter().zip(&sizes).map(|(s, z)| s + z).collect();
                self.add(
                    inst,
                    Op::Slice {
                        starts,
                        limits,
                        strides: vec![1; rank],
                    },
                    &[x],
                )?
            }
            "concatenate" => {
                self.check_attrs(inst, &["dimensions"])?;
                let d = usize_list(inst, self.need_attr(inst, "dimensions")?)?;
                let [dimension] = d[..] else {
                    return err(inst, "`dimensions` of concatenate must name one dimension");
                };
                let xs = (0..ops.len()).map(&tensor).collect::<TResult<Vec<_>>>()?;
                self.add(inst, Op::Concatenate { dimension }, &xs)?
            }
            "pad" => {
                self.check_attrs(inst, &["padding"])?;
                arity(2)?;
                let a = self.need_attr(inst, "padding")?;
                let (low, high) = parse_padding(inst, a)?;
                self.add(inst, Op::Pad { low, high }, &[tensor(0)?, tensor(1)?])?
            }
            "select" => {
                self.check_attrs(inst, &[])?;
                arity(3)?;
                let (mut p, t, f) = (tensor(0)?, tensor(1)?, tensor(2)?);
                let dims = self.shape(t).dims.clone();
                if self.shape(p).rank() == 0 && !dims.is_empty() {
                    p = self
                        .b
                        .broadcast(&inst.name, p, vec![], dims)
                        .or_else(|m| err(inst, m))?;
                }
                self.elementwise(inst, Op::Select, &[p, t, f])?
            }
            "clamp" => {
                self.check_attrs(inst, &[])?;
                arity(3)?;
                self.elementwise(inst, Op::Clamp, &[tensor(0)?, tensor(1)?, tensor(2)?])?
            }
            "compare" => {
                self.check_attrs(inst, &["direction", "type"])?;
                arity(2)?;
                if let Some(t) = inst.attr("type") {
                    if !matches!(t.value.trim(), "FLOAT" | "SIGNED" | "UNSIGNED") {
                        return err_at(
                            inst.line,
                            t.column,
                            format!(
                                "comparison type `{}` is not supported (FLOAT, SIGNED, UNSIGNED)",
                                t.value.trim()
                            ),
                        );
                    }
                }
                let a = self.need_attr(inst, "direction")?;
                let dir = CompareDir::ALL
                    .into_iter()
                    .find(|d| d.name() == a.value.trim())
                    .map_or_else(
                        || {
                            err_at(
                                inst.line,
                                a.column,
                                format!("unknown comparison direction `{}`", a.value),
                            )
                        },
                        Ok,
                    )?;
                self.elementwise(inst, Op::Compare(dir), &[tensor(0)?, tensor(1)?])?
            }
            "and" | "or" | "xor" | "not" => {
                self.check_attrs(inst, &[])?;
                let xs = (0..ops.len()).map(&tensor).collect::<TResult<Vec<_>>>()?;
                arity(if op == "not" { 1 } else { 2 })?;
                self.logical(inst, &xs)?
            }
            "exponential-minus-one" | "log-plus-one" => {
                self.check_attrs(inst, &[])?;
                arity(1)?;
                self.expm1_log1p(inst, tensor(0)?)?
            }
            _ if unary(op).is_some() => {
                self.check_attrs(inst, &[])?;
                arity(1)?;
                self.elementwise(inst, Op::Unary(unary(op).expect("checked")), &[tensor(0)?])?
            }
            _ if binary(op).is_some() => {
                self.check_attrs(inst, &[])?;
                arity(2)?;
                let o = Op::Binary(binary(op).expect("checked"));
                self.elementwise(inst, o, &[tensor(0)?, tensor(1)?])?
            }
            "dot" => {
                self.check_attrs(
                    inst,
                    &[
                        "lhs_batch_dims",
                        "lhs_contracting_dims",
                        "rhs_batch_dims",
                        "rhs_contracting_dims",
                    ],
                )?;
                arity(2)?;
                let list = |k: &str| -> TResult<Vec<usize>> {
                    match inst.attr(k) {
                        Some(a) => usize_list(inst, a),
                        None => Ok(vec![]),
                    }
                };
                let d = DotDims {
                    lhs_batch: list("lhs_batch_dims")?,
                    lhs_contracting: list("lhs_contracting_dims")?,
                    rhs_batch: list("rhs_batch_dims")?,
                    rhs_contracting: list("rhs_contracting_dims")?,
                };
                self.add(inst, Op::Dot(d), &[tensor(0)?, tensor(1)?])?
            }
            "convolution" => {
                self.check_attrs(
                    inst,
                    &[
                        "window",
                        "dim_labels",
                        "feature_group_count",
                        "batch_group_count",
                    ],
                )?;
                arity(2)?;
                self.convolution(inst, tensor(0)?, tensor(1)?)?
            }
            "reduce" => {
                self.check_attrs(inst, &["dimensions", "to_apply"])?;
                return self.reduce(inst, &ops);
            }
            "reduce-window" => {
                self.check_attrs(inst, &["window", "to_apply"])?;
                arity(2)?;
                self.reduce_window(inst, tensor(0)?, tensor(1)?)?
            }
            "parameter" => return err(inst, "parameter outside the start of a computation"),
            _ => {
                return with_hint(
                    err(
                        inst,
                        format!("opcode `{op}` is not supported by the HLO importer"),
                    ),
                    &format!("supported opcodes: {}", supported().join(", ")),
                );
            }
        };
        Ok(Val::T(id))
    }

    pub(super) fn reshape_val(
        &mut self,
        inst: &RawInst,
        x: InstId,
        dims: Vec<usize>,
    ) -> TResult<Val> {
        if self.shape(x).dims == dims {
            return Ok(Val::T(x));
        }
        self.b
            .reshape(&inst.name, x, dims)
            .map(Val::T)
            .or_else(|m| err(inst, format!("`reshape`: {m}")))
    }
}
