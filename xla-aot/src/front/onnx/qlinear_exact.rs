//! `com.microsoft` QLinearAdd, QLinearMul, QLinearAveragePool and QLinearSoftmax with constant
//! per-tensor scales and zero points, computed as onnxruntime's x86-64 kernels compute them, to
//! the rounding: a QDQ model's `DequantizeLinear` → `Add`/`Mul`/`AveragePool`/`Softmax` →
//! `QuantizeLinear` groups become these nodes (`qdq.rs`), as onnxruntime's graph optimiser makes
//! them, so the integers agree with its bit for bit instead of landing a step away where
//! dequantize → f32 op → quantize rounds differently.
//!
//! Contract (`a`, `b` the input integers, `c` the output's; `r_x = s_x / s_c` in f32):
//! - QLinearAdd (MLAS `MlasQLinearAddKernelAvx2Helper`, also what runs on AVX-512 machines):
//!   `c = saturate(round_half_even(fma(p, r_p, fma(q, r_q, k))))` with the fixed part
//!   `k = z_c − fma(r_p, z_p, r_q · z_q)` in f32 (the multiply-add contracted as the library's
//!   compiler did; measured against onnxruntime 1.32 on every (a, b) pair of 40 random scale
//!   sets). `p` is the operand that varies within onnxruntime's innermost broadcast span: `A`,
//!   unless `A` is broadcast along the innermost non-unit output dim (then the kernel runs
//!   with the operands swapped, `p = B`).
//! - QLinearMul (MLAS `MlasQLinearMulKernel`, SSE2): `c = saturate(round_half_even(
//!   f32((a − z_a)(b − z_b)) · m + z_c))` with `m = s_a · s_b / s_c` in f32, a separate
//!   multiply and add (symmetric in its operands).
//! - QLinearAveragePool (`qlinear_pool.cc`): the dequantized f32 window mean (sum, then a
//!   division by the count), then `saturate(round_half_even(y / s_y + z_y))`: the zero point
//!   is added *before* rounding, unlike QuantizeLinear (a half lands on the other side when
//!   `z_y` is odd).
//! - QLinearSoftmax over the last axis (`qlinear_softmax.cc`): `e(x) = T[x − max + 255]`
//!   from a table of 256 f32 values `T[i] = exp((i − 255 + k) · s_x)` computed in f64 (`k` keeps
//!   the row sum below f32's range), the row sum `S` of `e`, then
//!   `saturate(round_half_even(e · ⌊1 / s_y⌋ / S) + z_y)`. onnxruntime sums the row in index
//!   order; the compiled reduction may add in another order, a difference of a few ulps of `S`.
//!   int8 is the same computation (its table is the uint8 one indexed by `x − max + 127` as a
//!   byte); onnxruntime's int8 kernel then wraps a result above 127 instead of saturating it,
//!   which only an output zero point above `127 − ⌊1 / s_y⌋` reaches (never the `[0, 1]` range
//!   `quantize_static` gives a Softmax output); this saturates.
//!
//! The integer products are exact in f32 (8-bit operands); the rounding is
//! `quant.rs`' `saturated`. Any other such op (run-time scales, per-axis scales, 16-bit
//! types) keeps the dequantize → op → quantize form of `quant.rs`.

use super::context::{Ctx, Importer, R, Val, broadcast_dims, ty_of};
use super::elementwise::Outs;
use super::proto::{AttributeProto, data_type as dt};
use super::rewrite::{Rewrite, input_name};
use crate::ir::{BinaryOp, DType, Op};

/// Input positions of QLinearAdd/QLinearMul: A's scale and zero point, B, B's scale and zero
/// point, C's scale and zero point.
const A_SCALE: usize = 1;
const A_ZERO: usize = 2;
const B: usize = 3;
const B_SCALE: usize = 4;
const B_ZERO: usize = 5;
const C_SCALE: usize = 6;
const C_ZERO: usize = 7;

impl Importer {
    /// Whether a QLinearAdd/QLinearMul (`data` = [0, 3], `params` its scales and zero points) or
    /// a QLinearAveragePool ([0], [1, 2, 3, 4]) takes the exact path: every input present, the
    /// scales and zero points constant scalars, the data and zero points of one 8-bit type.
    pub(super) fn qlinear_exact_form(&self, cx: &Ctx, data: &[usize], params: &[usize]) -> R<bool> {
        let n = data.len() + params.len();
        if cx.n_inputs() != n || (0..n).any(|j| !cx.has_input(j)) {
            return Ok(false);
        }
        let scalar =
            |j: usize| matches!(self.input(cx, j), Ok(Val::Const(c)) if c.element_count() == 1);
        let ty = |j: usize| self.input(cx, j).map(|v| ty_of(&v));
        let ty0 = ty(0)?;
        // Scales are every other parameter (scale, zero point pairs).
        let zeros = params.iter().skip(1).step_by(2);
        let mut same = true;
        for &j in data.iter().chain(zeros) {
            same &= ty(j)? == ty0;
        }
        Ok(matches!(ty0, dt::UINT8 | dt::INT8) && same && params.iter().all(|&j| scalar(j)))
    }

    /// [`Self::qlinear_exact_form`] of a QLinearAdd/QLinearMul.
    pub(super) fn qlinear_binary_exact(&self, cx: &Ctx) -> R<bool> {
        self.qlinear_exact_form(
            cx,
            &[0, B],
            &[A_SCALE, A_ZERO, B_SCALE, B_ZERO, C_SCALE, C_ZERO],
        )
    }

    /// The exact QLinearAveragePool (module doc); call after [`Self::qlinear_exact_form`] with
    /// `[0], [1, 2, 3, 4]`. `attrs` are the AveragePool's.
    pub(super) fn qlinear_average_pool(
        &mut self,
        cx: &Ctx,
        rw: &mut Rewrite,
        attrs: Vec<AttributeProto>,
    ) -> R<Outs> {
        let inp = |j: usize| input_name(cx, j);
        let x = self.dq_via(cx, rw, inp(0), inp(1), inp(2), 1)?;
        let y = self.via1(cx, rw, "AveragePool", &[x], attrs)?;
        let Some(Val::Rt { id: y, .. }) = self.env.get(&y).cloned() else {
            return Err(cx.err("AveragePool of run-time data gave no run-time value"));
        };
        let (ys, zy) = (self.param(cx, 3)?, self.param(cx, 4)?);
        let dims = self.dims(y);
        let s = self.splat(cx, ys, &dims)?;
        let t = self.bin(cx, BinaryOp::Divide, y, s)?;
        let z = self.splat(cx, zy, &dims)?;
        let u = self.bin(cx, BinaryOp::Add, t, z)?;
        let out_ty = ty_of(&self.input(cx, 4)?);
        self.saturated(cx, u, None, out_ty)
    }

    /// The exact QLinearAdd (`add`) or QLinearMul (module doc); call after
    /// [`Self::qlinear_binary_exact`].
    pub(super) fn qlinear_binary(&mut self, cx: &Ctx, add: bool) -> R<Outs> {
        let (sa, za) = (self.param(cx, A_SCALE)?, self.param(cx, A_ZERO)?);
        let (sb, zb) = (self.param(cx, B_SCALE)?, self.param(cx, B_ZERO)?);
        let (sc, zc) = (self.param(cx, C_SCALE)?, self.param(cx, C_ZERO)?);
        let out_ty = ty_of(&self.input(cx, C_ZERO)?);
        let (ids, _) = self.as_f32(cx, &[0, B])?;
        let (a, b) = (ids[0], ids[1]);
        let (a_dims, b_dims) = (self.dims(a), self.dims(b));
        let dims = broadcast_dims(&[a_dims.clone(), b_dims]).ok_or_else(|| {
            cx.err("inputs A and B do not broadcast (numpy rules: equal extents or 1)")
        })?;
        // Each operand's own term is computed at its own dims and broadcast after: a
        // per-channel constant stays a per-channel constant (folded), not a full tensor.
        let t = if add {
            // onnxruntime swaps the operands when A is the one broadcast within a span.
            let swap = innermost_broadcast(&a_dims, &dims);
            let ((p, rp, zp), (q, rq, zq)) = if swap {
                ((b, sb / sc, zb), (a, sa / sc, za))
            } else {
                ((a, sa / sc, za), (b, sb / sc, zb))
            };
            let k = zc - rp.mul_add(zp, rq * zq);
            let qd = self.dims(q);
            let (rq, k) = (self.splat(cx, rq, &qd)?, self.splat(cx, k, &qd)?);
            let inner = self.add(cx, Op::Fma, &[q, rq, k])?;
            let inner = self.stretch(cx, inner, &dims)?;
            let p = self.stretch(cx, p, &dims)?;
            let rp = self.splat(cx, rp, &dims)?;
            self.add(cx, Op::Fma, &[p, rp, inner])?
        } else {
            let mut centred = Vec::new();
            for (x, z) in [(a, za), (b, zb)] {
                let z = self.splat(cx, z, &self.dims(x))?;
                let d = self.bin(cx, BinaryOp::Subtract, x, z)?;
                centred.push(self.stretch(cx, d, &dims)?);
            }
            let prod = self.bin(cx, BinaryOp::Multiply, centred[0], centred[1])?;
            let m = self.splat(cx, sa * sb / sc, &dims)?;
            let scaled = self.bin(cx, BinaryOp::Multiply, prod, m)?;
            let z = self.splat(cx, zc, &dims)?;
            self.bin(cx, BinaryOp::Add, scaled, z)?
        };
        self.saturated(cx, t, None, out_ty)
    }

    /// Whether a QLinearSoftmax takes the exact path: 8-bit data, constant scalar scales and zero
    /// points, and a softmax over the last axis only (opset ≥ 13's `axis`, or the 2-D coercion at
    /// the last axis before).
    pub(super) fn qlinear_softmax_exact(&self, cx: &Ctx) -> R<bool> {
        if !self.qlinear_exact_form(cx, &[0], &[1, 2, 3, 4])?
            || !matches!(ty_of(&self.input(cx, 0)?), dt::UINT8 | dt::INT8)
        {
            return Ok(false);
        }
        let rank = self.in_dims(cx, 0)?.len() as i64;
        let before_13 = cx.attr_i_or("opset", 13)? < 13;
        let axis = cx.attr_i_or("axis", if before_13 { 1 } else { -1 })?;
        let axis = if axis < 0 { axis + rank } else { axis };
        Ok(rank > 0 && axis == rank - 1)
    }

    /// The exact QLinearSoftmax (module doc); call after [`Self::qlinear_softmax_exact`].
    pub(super) fn qlinear_softmax(&mut self, cx: &Ctx) -> R<Outs> {
        let (xs, ys, zy) = (self.param(cx, 1)?, self.param(cx, 3)?, self.param(cx, 4)?);
        let ty = ty_of(&self.input(cx, 0)?);
        let (x, _) = self.as_f32(cx, &[0])?;
        let x = x[0];
        let dims = self.dims(x);
        let last = dims.len() - 1;
        let row = dims[last].max(1) as f64;
        // The table's shift keeps a row's sum of up to `row` values below f32::MAX with 5 bits
        // to spare (onnxruntime's `QlinearBuildLookupTableUint32`).
        let shift = ((f32::MAX as f64 / row).ln() - 5.0).max(0.0) / xs as f64;
        let table: Vec<f32> = (0..256)
            .map(|i| ((i as f64 - 255.0 + shift) * xs as f64).exp() as f32)
            .collect();
        let table = self.b.constant(
            "softmax_table",
            crate::ir::Literal::from_f32(vec![256], &table),
        );
        let keep: Vec<usize> = (0..last).collect();
        let max = self.reduce_raw(cx, crate::ir::ReduceKind::Max, x, &[last])?;
        let max = self.bcast(cx, max, keep.clone(), dims.clone())?;
        let d = self.bin(cx, BinaryOp::Subtract, x, max)?;
        let top = self.splat(cx, 255.0, &dims)?;
        let at = self.bin(cx, BinaryOp::Add, d, top)?;
        let at = self.convert(cx, at, DType::I32)?;
        let e = self.add(cx, Op::Gather, &[table, at])?;
        let sum = self.reduce_raw(cx, crate::ir::ReduceKind::Add, e, &[last])?;
        let sum = self.bcast(cx, sum, keep, dims.clone())?;
        let m = self.splat(cx, (1.0 / ys).floor(), &dims)?;
        let scaled = self.bin(cx, BinaryOp::Multiply, e, m)?;
        let t = self.bin(cx, BinaryOp::Divide, scaled, sum)?;
        let z = self.splat(cx, zy, &dims)?;
        self.saturated(cx, t, Some(z), ty)
    }

    /// Input `j`, a constant scalar scale or zero point (checked by
    /// [`Self::qlinear_exact_form`]), as f32.
    fn param(&self, cx: &Ctx, j: usize) -> R<f32> {
        Ok(self.konst(cx, j, "a scale or zero point")?.as_f64()[0] as f32)
    }
}

/// Whether an operand of dims `x` is broadcast along the innermost output dim (of `out`) whose
/// extent is not 1: the dim onnxruntime's broadcast loop runs its spans along.
fn innermost_broadcast(x: &[usize], out: &[usize]) -> bool {
    let Some(d) = (0..out.len()).rev().find(|&d| out[d] != 1) else {
        // One element: onnxruntime takes A as the scalar.
        return true;
    };
    // Right-aligned (numpy): a missing leading dim is 1.
    let back = out.len() - d;
    x.len() < back || x[x.len() - back] == 1
}

#[cfg(test)]
mod tests {
    use super::innermost_broadcast;

    #[test]
    fn the_broadcast_operand_is_found_along_the_innermost_non_unit_dim() {
        // A per-channel operand against an NCHW tensor.
        assert!(innermost_broadcast(&[1, 64, 1, 1], &[1, 64, 8, 8]));
        assert!(!innermost_broadcast(&[1, 64, 8, 8], &[1, 64, 8, 8]));
        // A row vector repeats along the outer dim only.
        assert!(!innermost_broadcast(&[8], &[4, 8]));
        assert!(innermost_broadcast(&[4, 1], &[4, 8]));
        // Trailing unit dims of the output are skipped.
        assert!(innermost_broadcast(&[1, 1, 1], &[1, 3, 1]));
        assert!(!innermost_broadcast(&[3, 1], &[1, 3, 1]));
        assert!(innermost_broadcast(&[], &[1]));
    }
}
