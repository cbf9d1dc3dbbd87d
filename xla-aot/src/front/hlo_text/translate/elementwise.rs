//! Elementwise HLO instructions: arithmetic, comparisons and selects in f32 (with i32 indices and
//! pred masks), boolean logic, and `expm1`/`log1p` as their compositions.
//!
//! Contract: integer and boolean operations are folded when their operands are constants and are
//! an error on run-time values (xla-aot computes in f32), with a hint on how to export instead.

use super::super::syntax::RawInst;
use super::attrs::*;
use super::{TResult, Tr, err, with_hint};
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Literal, Op, Shape, UnaryOp};

impl<'m, 'b, 'w> Tr<'m, 'b, 'w> {
    /// An elementwise op: on floats it is emitted; on integers or preds (which xla-aot computes
    /// only as indices and masks) it is evaluated now when every operand is a constant.
    pub(super) fn elementwise(&mut self, inst: &RawInst, op: Op, xs: &[InstId]) -> TResult<InstId> {
        let float = |s: &Shape| s.dtype == DType::F32;
        let numeric_ok = match &op {
            Op::Select => float(self.shape(xs[1])) || self.shape(xs[1]).dtype == DType::Pred,
            _ => xs.iter().all(|&x| float(self.shape(x))),
        };
        if numeric_ok {
            return self.add(inst, op, xs);
        }
        let consts: Option<Vec<Literal>> = xs.iter().map(|&x| self.const_value(x)).collect();
        let Some(consts) = consts else {
            return with_hint(
                err(
                    inst,
                    format!(
                        "`{}` on {} values computed at run time is not supported: xla-aot computes in f32 (s32 only as indices)",
                        inst.opcode,
                        self.shape(xs[0]).dtype
                    ),
                ),
                "convert the values to float32 in the exported function",
            );
        };
        let vals: Vec<Vec<f64>> = consts.iter().map(literal_values).collect();
        let shape = self.shape(xs[xs.len() - 1]).clone();
        let n = shape.element_count();
        if vals.iter().any(|v| v.len() != n && v.len() != 1) {
            return err(
                inst,
                format!("the operands of `{}` have different shapes", inst.opcode),
            );
        }
        let at = |k: usize, i: usize| -> f64 {
            let v = &vals[k];
            if v.len() == 1 { v[0] } else { v[i] }
        };
        let (dtype, out): (DType, Vec<f64>) = match &op {
            Op::Binary(b) => {
                let int = shape.dtype != DType::F32;
                let f = |x: f64, y: f64| -> f64 {
                    match b {
                        BinaryOp::Add => x + y,
                        BinaryOp::Subtract => x - y,
                        BinaryOp::Multiply => x * y,
                        BinaryOp::Divide if int => {
                            if y == 0.0 {
                                -1.0
                            } else {
                                (x / y).trunc()
                            }
                        }
                        BinaryOp::Divide => x / y,
                        BinaryOp::Maximum => x.max(y),
                        BinaryOp::Minimum => x.min(y),
                        BinaryOp::Power => x.powf(y),
                    }
                };
                let wrap = |v: f64| if int { (v as i64) as i32 as f64 } else { v };
                (
                    shape.dtype,
                    (0..n).map(|i| wrap(f(at(0, i), at(1, i)))).collect(),
                )
            }
            Op::Unary(UnaryOp::Negate) => (shape.dtype, (0..n).map(|i| -at(0, i)).collect()),
            Op::Unary(UnaryOp::Abs) => (shape.dtype, (0..n).map(|i| at(0, i).abs()).collect()),
            Op::Compare(d) => {
                let f = |x: f64, y: f64| match d {
                    CompareDir::Eq => x == y,
                    CompareDir::Ne => x != y,
                    CompareDir::Lt => x < y,
                    CompareDir::Le => x <= y,
                    CompareDir::Gt => x > y,
                    CompareDir::Ge => x >= y,
                };
                let shape0 = self.shape(xs[0]).clone();
                let n = shape0.element_count();
                return Ok(self.constant(
                    &inst.name,
                    literal_from_f64(
                        DType::Pred,
                        shape0.dims,
                        &(0..n)
                            .map(|i| f(at(0, i), at(1, i)) as u8 as f64)
                            .collect::<Vec<_>>(),
                    ),
                ));
            }
            Op::Select => (
                shape.dtype,
                (0..n)
                    .map(|i| if at(0, i) != 0.0 { at(1, i) } else { at(2, i) })
                    .collect(),
            ),
            Op::Clamp => {
                let x = self.shape(xs[1]).clone();
                let n = x.element_count();
                let v: Vec<f64> = (0..n)
                    .map(|i| at(1, i).max(at(0, i)).min(at(2, i)))
                    .collect();
                return Ok(self.constant(&inst.name, literal_from_f64(x.dtype, x.dims, &v)));
            }
            _ => {
                return err(
                    inst,
                    format!(
                        "`{}` on {} values is not supported",
                        inst.opcode,
                        self.shape(xs[0]).dtype
                    ),
                );
            }
        };
        Ok(self.constant(&inst.name, literal_from_f64(dtype, shape.dims, &out)))
    }

    /// `and`, `or`, `xor`, `not` on pred values as selects (on constants: evaluated).
    pub(super) fn logical(&mut self, inst: &RawInst, xs: &[InstId]) -> TResult<InstId> {
        let dtype = self.shape(xs[0]).dtype;
        let dims = self.shape(xs[0]).dims.clone();
        if let Some(c) = xs
            .iter()
            .map(|&x| self.const_value(x))
            .collect::<Option<Vec<_>>>()
        {
            let v: Vec<Vec<f64>> = c.iter().map(literal_values).collect();
            let n: usize = dims.iter().product();
            if v.iter().any(|w| w.len() != n) {
                return err(
                    inst,
                    format!("the operands of `{}` have different shapes", inst.opcode),
                );
            }
            let int = dtype == DType::I32;
            let out: Vec<f64> = (0..n)
                .map(|i| {
                    let a = v[0][i];
                    let b = v.get(1).map_or(0.0, |w| w[i]);
                    if int {
                        let (a, b) = (a as i32, b as i32);
                        (match inst.opcode.as_str() {
                            "and" => a & b,
                            "or" => a | b,
                            "xor" => a ^ b,
                            _ => !a,
                        }) as f64
                    } else {
                        let (a, b) = (a != 0.0, b != 0.0);
                        (match inst.opcode.as_str() {
                            "and" => a && b,
                            "or" => a || b,
                            "xor" => a != b,
                            _ => !a,
                        }) as u8 as f64
                    }
                })
                .collect();
            return Ok(self.constant(&inst.name, literal_from_f64(dtype, dims, &out)));
        }
        if dtype != DType::Pred {
            return err(
                inst,
                format!(
                    "`{}` on run-time {dtype} values is not supported (only pred)",
                    inst.opcode
                ),
            );
        }
        let t = self.splat(inst, DType::Pred, 1.0, &dims)?;
        let f = self.splat(inst, DType::Pred, 0.0, &dims)?;
        let ops: [InstId; 3] = match inst.opcode.as_str() {
            "and" => [xs[0], xs[1], f],
            "or" => [xs[0], t, xs[1]],
            "not" => [xs[0], f, t],
            _ => {
                let nb = self.add(inst, Op::Select, &[xs[1], f, t])?;
                [xs[0], nb, xs[1]]
            }
        };
        self.add(inst, Op::Select, &ops)
    }

    /// `exp(x) - 1` and `log(1 + x)` without cancellation near 0 (Kahan's formulas: with
    /// `u = e^x` (or `1 + x`) rounded, `(u - 1) * x / log(u)` (or `log(u) * x / (u - 1)`) is
    /// accurate to a few ulps; `u == 1` means `x` itself is the answer).
    pub(super) fn expm1_log1p(&mut self, inst: &RawInst, x: InstId) -> TResult<InstId> {
        if self.shape(x).dtype != DType::F32 {
            return err(inst, format!("`{}` needs f32 operands", inst.opcode));
        }
        let dims = self.shape(x).dims.clone();
        let one = self.splat(inst, DType::F32, 1.0, &dims)?;
        let add = |t: &mut Self, op: Op, o: &[InstId]| t.add(inst, op, o);
        let expm1 = inst.opcode == "exponential-minus-one";
        let u = if expm1 {
            add(self, Op::Unary(UnaryOp::Exp), &[x])?
        } else {
            add(self, Op::Binary(BinaryOp::Add), &[one, x])?
        };
        let um1 = add(self, Op::Binary(BinaryOp::Subtract), &[u, one])?;
        let lu = add(self, Op::Unary(UnaryOp::Log), &[u])?;
        let r = if expm1 {
            let q = add(self, Op::Binary(BinaryOp::Divide), &[x, lu])?;
            add(self, Op::Binary(BinaryOp::Multiply), &[um1, q])?
        } else {
            let q = add(self, Op::Binary(BinaryOp::Divide), &[x, um1])?;
            add(self, Op::Binary(BinaryOp::Multiply), &[lu, q])?
        };
        let is_one = add(self, Op::Compare(CompareDir::Eq), &[u, one])?;
        let r = add(self, Op::Select, &[is_one, x, r])?;
        if expm1 {
            // e^x rounds to 0 for x < -88: the answer is -1 (the formula would give 0/0 or -inf/-inf);
            // e^x = inf for x > 88: the answer is inf.
            let zero = self.splat(inst, DType::F32, 0.0, &dims)?;
            let m1 = self.splat(inst, DType::F32, -1.0, &dims)?;
            let under = add(self, Op::Compare(CompareDir::Eq), &[u, zero])?;
            let r = add(self, Op::Select, &[under, m1, r])?;
            let inf = self.splat(inst, DType::F32, f64::INFINITY, &dims)?;
            let over = add(self, Op::Compare(CompareDir::Eq), &[u, inf])?;
            add(self, Op::Select, &[over, inf, r])
        } else {
            // 1 + x = inf: log1p is inf too.
            let inf = self.splat(inst, DType::F32, f64::INFINITY, &dims)?;
            let over = add(self, Op::Compare(CompareDir::Eq), &[u, inf])?;
            add(self, Op::Select, &[over, inf, r])
        }
    }
}
