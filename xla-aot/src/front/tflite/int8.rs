//! TFLite's integer kernels, as TFLite Micro's reference kernels compute them: int8 (and uint8)
//! activations with affine quantization, int8 weights symmetric per tensor or per channel, int32
//! biases.
//!
//! Contract: a quantized tensor's integers `q` are held as integer-valued f32 between operators
//! (`lower.rs`); the lowerings here compute in IR i32 (`Importer::val` converts) and the model's
//! C API passes them as `int8_t`. Each lowering reproduces TFLite Micro's arithmetic exactly
//! (`tensorflow/lite/kernels/internal/reference/integer_ops/*.h`, multipliers from
//! `kernel_util.cc`; tests/tflite.rs compares every converter-written int8 case with the
//! `tflite-micro` package's outputs, integer for integer):
//! - CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED (`int8_products.rs`): `acc = Σ w · (q − z_in)
//!   + bias`, then per output channel `multiply-q31(acc, M_c, shift_c) + z_out` clamped to the
//!   activation range.
//!   Where every partial sum provably stays within f32's exact integers (`Importer::f32_plan`,
//!   which also turns channels with one possible output into that constant) the sums, the bias
//!   and the requantization run on integer-valued f32, a register epilogue of the int8 kernels
//!   (`codegen/cpu/epilogue.rs`); else the sums go to i32 before the bias (exact while partial
//!   sums stay below 2^24, as the kernels' f32 sums are). A one-channel CONV_2D takes its
//!   horizontal taps as channels (`Importer::taps_as_channels`). `M_c`/`shift_c`
//!   are `QuantizeMultiplier(s_in · s_w[c] / s_out)`, every scale widened to double first (as
//!   the `tflite-micro` build the tests compare with computes them). Convolutions and
//!   per-channel dense layers ignore the weights' zero point; a per-tensor dense layer
//!   subtracts it (TFLite Micro's `FullyConnected`).
//! - The activation range (`CalculateActivationRangeQuantized`): the type's range, narrowed by
//!   RELU to `[z + round(0 / s), …]`, RELU6 to `[…, z + round(6 / s)]`, RELU_N1_TO_1 likewise,
//!   `round` half away from zero of the f32 quotient.
//! - AVERAGE_POOL_2D: the window's sum of raw `q` over the cells inside the input, divided by
//!   their count rounding half away from zero (C's truncating division of `sum ± count/2`),
//!   clamped; MAX_POOL_2D: the window's largest `q`, clamped.
//! - ADD and SUB (`integer_ops/add.h`): each input `((q − z) · 2^20)` scaled by
//!   `multiply-q31` with `QuantizeMultiplier(s_i / (2 · max(s_1, s_2)))`, summed (or subtracted),
//!   scaled by `QuantizeMultiplier(2 · max(s_1, s_2) / (2^20 · s_out))`, plus `z_out`, clamped.
//! - MUL, SQUARED_DIFFERENCE, BATCH_MATMUL, PRELU, MEAN, SUM and the requantizing QUANTIZE:
//!   products or sums of centred integers scaled by `multiply-q31` (each function's doc).
//! - QUANTIZE from float: `round(x / s) + z` (f32 quotient, half away from zero), saturated, and
//!   the type's minimum for NaN or `|x / s| ≥ 2^31` (x86's conversion, what the reference build
//!   runs); DEQUANTIZE: `(q − z) · s` (one rounding, as TFLite's double product cast to float).
//! - Data movement (RESHAPE, TRANSPOSE, SLICE, STRIDED_SLICE, SPLIT, PACK, CONCATENATION of
//!   inputs of the output's scale, PAD with the zero point, MAXIMUM/MINIMUM, REDUCE_MAX/MIN,
//!   RESIZE_NEAREST_NEIGHBOR, ...) moves or compares the integers unchanged.
//! - The functions of one input integer and SOFTMAX: `int8_tables.rs`; TRANSPOSE_CONV:
//!   `transpose_conv.rs` with this file's requantization.
//!
//! The other ops of an integer model (DIV, EXP, RESIZE_BILINEAR, 16x8 and hybrid operators) are
//! errors naming the operator: their fixed-point arithmetic is not written yet.

use super::lower::{Importer, R, Val};
use crate::ir::fixed_point::{QuantizedMultiplier, quantize_multiplier};
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Literal, Op, ReduceKind, Window};
use xla_aot_tflite_schema::tflite::{ActivationFunctionType, TensorType};

/// Bits every ADD/SUB input is shifted left by before scaling (`add.cc`: 20 for int8 and uint8,
/// so that the scaled inputs keep 20 fractional bits).
const ADD_LEFT_SHIFT: i32 = 20;

impl Importer<'_, '_> {
    /// Whether tensor `t` holds quantized integers (int8, uint8, int16 with a scale).
    pub fn is_quantized(&self, t: usize) -> bool {
        let tensor = self.tensor(t);
        matches!(
            tensor.dtype,
            TensorType::Int8 | TensorType::Uint8 | TensorType::Int16
        ) && tensor.quant.is_some()
    }

    /// An error for an integer-model op whose arithmetic is not written yet.
    pub fn integer_not_yet(&self) -> crate::front::diag::SpecError {
        self.err(format!(
            "{} of quantized integers is not supported yet: TFLite's fixed-point arithmetic for it is not written",
            self.op().name
        ))
        .hint("docs/import.md lists the integer TFLite ops that import; the float version of the model imports")
    }

    /// The per-tensor scale and zero point of quantized tensor `t`, and its integer range.
    pub fn q_scalar(&self, t: usize) -> R<(f32, i32, i32, i32)> {
        let tensor = self.tensor(t);
        let (lo, hi) = match tensor.dtype {
            TensorType::Int8 => (-128, 127),
            TensorType::Uint8 => (0, 255),
            TensorType::Int16 => (-32768, 32767),
            other => {
                return Err(self.err(format!(
                    "{} is {other:?}; a quantized int8, uint8 or int16 tensor was expected",
                    self.tensor_name(t)
                )));
            }
        };
        if tensor.dtype == TensorType::Int16 {
            return Err(self.integer_not_yet());
        }
        let q = tensor.quant.as_ref().ok_or_else(|| {
            self.err(format!(
                "{} has no quantization parameters",
                self.tensor_name(t)
            ))
        })?;
        if q.scale.len() != 1 {
            return Err(self.err(format!(
                "{} has {} scales; an activation has one",
                self.tensor_name(t),
                q.scale.len()
            )));
        }
        let z = q.zero_point.first().copied().unwrap_or(0);
        let z = i32::try_from(z)
            .ok()
            .filter(|z| (lo..=hi).contains(z))
            .ok_or_else(|| {
                self.err(format!(
                    "{} has the zero point {z}, outside its type",
                    self.tensor_name(t)
                ))
            })?;
        let s = q.scale[0];
        if !(s.is_finite() && s > 0.0) {
            return Err(self.err(format!("{} has the scale {s}", self.tensor_name(t))));
        }
        Ok((s, z, lo, hi))
    }

    /// The integers of constant tensor `t` (int8, uint8, int16, int32), in TFLite order.
    pub fn int_data(&self, t: usize) -> R<Vec<i32>> {
        let tensor = self.tensor(t);
        let Some(data) = tensor.data else {
            return Err(self.err(format!(
                "{} must be a constant (weights and biases of integer kernels are)",
                self.tensor_name(t)
            )));
        };
        Ok(match tensor.dtype {
            TensorType::Int8 => data.iter().map(|&b| i32::from(b as i8)).collect(),
            TensorType::Uint8 => data.iter().map(|&b| i32::from(b)).collect(),
            TensorType::Int16 => data
                .chunks_exact(2)
                .map(|c| i32::from(i16::from_le_bytes([c[0], c[1]])))
                .collect(),
            TensorType::Int32 => super::lower::i32s(data),
            other => {
                return Err(self.err(format!(
                    "{} is {other:?}; integer weights were expected",
                    self.tensor_name(t)
                )));
            }
        })
    }

    /// TFLite's `Quantize` of `f`: `z + round(f / s)`, the quotient in f32, half away from zero.
    pub(super) fn quantize_value(f: f32, s: f32, z: i32) -> i32 {
        z.saturating_add((f / s).round() as i32)
    }

    /// `CalculateActivationRangeQuantized` for output tensor `t`.
    pub fn activation_range(&self, t: usize, act: ActivationFunctionType) -> R<(i32, i32)> {
        let (s, z, lo, hi) = self.q_scalar(t)?;
        let q = |f: f32| Self::quantize_value(f, s, z);
        Ok(match act {
            ActivationFunctionType::None => (lo, hi),
            ActivationFunctionType::Relu => (lo.max(q(0.0)), hi),
            ActivationFunctionType::Relu6 => (lo.max(q(0.0)), hi.min(q(6.0))),
            ActivationFunctionType::ReluN1To1 => (lo.max(q(-1.0)), hi.min(q(1.0))),
            other => {
                return Err(self.err(format!(
                    "the fused activation {other:?} of an integer operator is not supported"
                )));
            }
        })
    }

    /// An i32 scalar broadcast to the shape of `like`.
    pub fn splat_i32(&mut self, v: i32, like: InstId) -> R<InstId> {
        let dims = self.b.shape(like).dims.clone();
        let s = self
            .b
            .constant(&self.name("c"), Literal::from_i32(vec![], &[v]));
        if dims.is_empty() {
            return Ok(s);
        }
        let name = self.name("c");
        self.b
            .broadcast(&name, s, Vec::new(), dims)
            .map_err(self.ir())
    }

    /// `x` converted to `to`.
    pub fn convert(&mut self, x: InstId, to: DType, part: &str) -> R<InstId> {
        let name = self.name(part);
        self.b
            .add(&name, Op::Convert { to }, &[x])
            .map_err(self.ir())
    }

    /// `clamp(x, lo, hi)` of i32 `x`.
    pub(super) fn clamp_i32(&mut self, x: InstId, lo: i32, hi: i32) -> R<InstId> {
        let l = self.splat_i32(lo, x)?;
        let y = self.binary("act_min", BinaryOp::Maximum, x, l)?;
        let h = self.splat_i32(hi, y)?;
        self.binary("act_max", BinaryOp::Minimum, y, h)
    }

    /// `multiply-q31(x, m, shift)` with one multiplier, or one per index of IR dim `dim`.
    pub(super) fn mul_q31(
        &mut self,
        x: InstId,
        m: &[QuantizedMultiplier],
        dim: usize,
        part: &str,
    ) -> R<InstId> {
        let dims = self.b.shape(x).dims.clone();
        let column = |me: &mut Self, v: Vec<i32>, what: &str| -> R<InstId> {
            let n = v.len();
            let c =
                me.b.constant(&me.name(what), Literal::from_i32(vec![n], &v));
            let name = me.name(what);
            if n == 1 {
                let s = me.b.reshape(&name, c, vec![]).map_err(me.ir())?;
                me.b.broadcast(&name, s, vec![], dims.clone())
                    .map_err(me.ir())
            } else {
                me.b.broadcast(&name, c, vec![dim], dims.clone())
                    .map_err(me.ir())
            }
        };
        let ms = column(
            self,
            m.iter().map(|q| q.significand).collect(),
            "multiplier",
        )?;
        let ss = column(self, m.iter().map(|q| q.shift).collect(), "shift")?;
        let name = self.name(part);
        self.b
            .add(&name, Op::MulQ31, &[x, ms, ss])
            .map_err(self.ir())
    }

    /// The requantization tail of a product: `acc` scaled per channel along IR dim `dim`, plus
    /// `z_out`, clamped to `[lo, hi]`; in i32 for an i32 `acc`, else on integer-valued f32 (every
    /// value and step exact: the caller checked [`Importer::f32_plan`]).
    pub(super) fn requantize_acc(
        &mut self,
        acc: InstId,
        m: &[QuantizedMultiplier],
        dim: usize,
        z_out: i32,
        (lo, hi): (i32, i32),
    ) -> R<InstId> {
        let scaled = self.mul_q31(acc, m, dim, "scaled")?;
        if self.b.dtype(scaled) == DType::F32 {
            let z = self.splat(z_out as f32, scaled)?;
            let y = self.binary("offset", BinaryOp::Add, scaled, z)?;
            return self.clamp(y, lo as f32, hi as f32);
        }
        let z = self.splat_i32(z_out, scaled)?;
        let y = self.binary("offset", BinaryOp::Add, scaled, z)?;
        self.clamp_i32(y, lo, hi)
    }

    /// `q − z` of i32 `q` as integer-valued f32.
    pub(super) fn centered(&mut self, q: InstId, z: i32) -> R<InstId> {
        let f = self.convert(q, DType::F32, "as_f32")?;
        if z == 0 {
            return Ok(f);
        }
        let zf = self.splat(z as f32, f)?;
        self.binary("centered", BinaryOp::Subtract, f, zf)
    }

    /// The integer AVERAGE_POOL_2D / MAX_POOL_2D over NCHW i32 `xi` with `window`; `counts` the
    /// cells of each window inside the input (`[OH·OW]`, row-major).
    pub fn pool_i8(
        &mut self,
        xi: InstId,
        window: Window,
        max: bool,
        counts: &[i32],
        act: ActivationFunctionType,
    ) -> R<()> {
        let xt = self.need(0)?;
        let out = self.output_index(0)?;
        let (s_in, z_in, _, _) = self.q_scalar(xt)?;
        let (s_out, z_out, _, _) = self.q_scalar(out)?;
        if s_in != s_out || z_in != z_out {
            return Err(self.err(format!(
                "the input and output quantization differ ({s_in}, {z_in} and {s_out}, {z_out}); TFLite's integer pools keep it"
            )));
        }
        let range = self.activation_range(out, act)?;
        let xf = self.convert(xi, DType::F32, "as_f32")?;
        let kind = if max {
            ReduceKind::Max
        } else {
            ReduceKind::Add
        };
        let name = self.name(if max { "max" } else { "sum" });
        let r = self
            .b
            .add(&name, Op::ReduceWindow { kind, window }, &[xf])
            .map_err(self.ir())?;
        let y = if max {
            self.convert(r, DType::I32, "as_i32")?
        } else {
            // (sum ± ⌊count/2⌋) / count, truncated: exact in f32 for sums of int8 (|sum| < 2^24
            // and a quotient within 1/count of an integer is never rounded onto it).
            let dims = self.b.shape(r).dims.clone();
            let per_pos =
                |f: &dyn Fn(i32) -> f32| counts.iter().map(|&c| f(c)).collect::<Vec<f32>>();
            let table = |me: &mut Self, v: Vec<f32>, what: &str| -> R<InstId> {
                let c = me.b.constant(
                    &me.name(what),
                    Literal::from_f32(vec![dims[2], dims[3]], &v),
                );
                let name = me.name(what);
                me.b.broadcast(&name, c, vec![2, 3], dims.clone())
                    .map_err(me.ir())
            };
            let half = table(self, per_pos(&|c| (c / 2) as f32), "half")?;
            let count = table(self, per_pos(&|c| c as f32), "count")?;
            let zero = self.splat(0.0, r)?;
            let name = self.name("positive");
            let pos = self
                .b
                .add(&name, Op::Compare(CompareDir::Gt), &[r, zero])
                .map_err(self.ir())?;
            let up = self.binary("up", BinaryOp::Add, r, half)?;
            let down = self.binary("down", BinaryOp::Subtract, r, half)?;
            let name = self.name("nudged");
            let n = self
                .b
                .add(&name, Op::Select, &[pos, up, down])
                .map_err(self.ir())?;
            let d = self.binary("quotient", BinaryOp::Divide, n, count)?;
            self.convert(d, DType::I32, "as_i32")?
        };
        let y = self.clamp_i32(y, range.0, range.1)?;
        self.set_nchw(out, y);
        Ok(())
    }

    /// Inputs 0 and 1 brought to one scale as ADD, SUB and SQUARED_DIFFERENCE do: each
    /// `(q − z) · 2^shift` scaled by `QuantizeMultiplier(s_i / (2 · max(s_1, s_2)))`, broadcast to
    /// their common shape; the scaled values, `2 · max(s_1, s_2)` and the layout they are held in.
    fn common_scale_inputs(&mut self, shift: i32) -> R<(Vec<InstId>, f64, Vec<usize>)> {
        let (at, bt) = (self.need(0)?, self.need(1)?);
        let (s1, z1, _, _) = self.q_scalar(at)?;
        let (s2, z2, _, _) = self.q_scalar(bt)?;
        let twice_max = 2.0 * f64::from(s1.max(s2));
        let m1 = quantize_multiplier(f64::from(s1) / twice_max);
        let m2 = quantize_multiplier(f64::from(s2) / twice_max);
        let (a, b) = (self.val(at)?, self.val(bt)?);
        let out_dims = self.broadcast_dims(&self.dims(&a), &self.dims(&b))?;
        let perm = self.common_layout(&[&a, &b], &out_dims);
        let mut scaled = Vec::new();
        for (v, z, m) in [(&a, z1, m1), (&b, z2, m2)] {
            let x = self.broadcast_to(v, &out_dims, &perm)?;
            let zc = self.splat_i32(z, x)?;
            let c = self.binary("centered", BinaryOp::Subtract, x, zc)?;
            let sh = self.splat_i32(1 << shift, c)?;
            let s = self.binary("shifted", BinaryOp::Multiply, c, sh)?;
            scaled.push(self.mul_q31(s, &[m], 0, "scaled")?);
        }
        Ok((scaled, twice_max, perm))
    }

    /// The integer ADD (`subtract` false) or SUB of two quantized tensors.
    pub fn add_i8(&mut self, subtract: bool, act: ActivationFunctionType) -> R<()> {
        let out = self.output_index(0)?;
        let (s_out, z_out, _, _) = self.q_scalar(out)?;
        let range = self.activation_range(out, act)?;
        let (scaled, twice_max, perm) = self.common_scale_inputs(ADD_LEFT_SHIFT)?;
        let mo =
            quantize_multiplier(twice_max / (f64::from(1i32 << ADD_LEFT_SHIFT) * f64::from(s_out)));
        let op = if subtract {
            BinaryOp::Subtract
        } else {
            BinaryOp::Add
        };
        let raw = self.binary("raw", op, scaled[0], scaled[1])?;
        let y = self.requantize_acc(raw, &[mo], 0, z_out, range)?;
        self.set(out, Val { id: y, perm });
        Ok(())
    }

    /// The integer MUL (`integer_ops/mul.h`): `multiply-q31((q_1 − z_1)(q_2 − z_2), M, shift)
    /// + z_out`, clamped, with `QuantizeMultiplier(s_1 · s_2 / s_out)` in double.
    pub fn mul_i8(&mut self, act: ActivationFunctionType) -> R<()> {
        let (at, bt) = (self.need(0)?, self.need(1)?);
        let out = self.output_index(0)?;
        let (s1, z1, _, _) = self.q_scalar(at)?;
        let (s2, z2, _, _) = self.q_scalar(bt)?;
        let (s_out, z_out, _, _) = self.q_scalar(out)?;
        let range = self.activation_range(out, act)?;
        let m = quantize_multiplier(f64::from(s1) * f64::from(s2) / f64::from(s_out));
        let (a, b) = (self.val(at)?, self.val(bt)?);
        let out_dims = self.broadcast_dims(&self.dims(&a), &self.dims(&b))?;
        let perm = self.common_layout(&[&a, &b], &out_dims);
        let mut centered = Vec::new();
        for (v, z) in [(&a, z1), (&b, z2)] {
            let x = self.broadcast_to(v, &out_dims, &perm)?;
            let zc = self.splat_i32(z, x)?;
            centered.push(self.binary("centered", BinaryOp::Subtract, x, zc)?);
        }
        let p = self.binary("product", BinaryOp::Multiply, centered[0], centered[1])?;
        let y = self.requantize_acc(p, &[m], 0, z_out, range)?;
        self.set(out, Val { id: y, perm });
        Ok(())
    }

    /// int8 MEAN or SUM (`reference_ops::QuantizedMeanOrSum` as TFLite Micro calls it): the raw
    /// sum over the axes, minus `z_in · N`, scaled by `QuantizeMultiplier(s_in / s_out)` (for
    /// MEAN divided by `N` inside the multiplier: `m · 2^k / N`, `k = min(⌊log2 N⌋, 32,
    /// 31 + shift)`), plus `z_out`, saturated. The sum runs in f32, exact for `N · 128 < 2^24`.
    pub fn reduce_i8(&mut self, mean: bool) -> R<()> {
        let xt = self.need(0)?;
        let out = self.output_index(0)?;
        let (s_in, z_in, _, _) = self.q_scalar(xt)?;
        let (s_out, z_out, lo, hi) = self.q_scalar(out)?;
        let x = self.val(xt)?;
        let (axes, ir_axes, keep) = self.reduction(&x)?;
        let ir_dims = self.b.shape(x.id).dims.clone();
        let n: usize = ir_axes.iter().map(|&i| ir_dims[i]).product();
        if n == 0 || n >= (1 << 16) {
            return Err(self.err(format!(
                "an int8 reduction over {n} elements: 1 to 65535 are supported (the sum stays exact in f32)"
            )));
        }
        let mut m = quantize_multiplier(f64::from(s_in) / f64::from(s_out));
        if mean {
            let k = (63 - (n as u64).leading_zeros() as i32)
                .min(32)
                .min(31 + m.shift);
            m.significand = ((i64::from(m.significand) << k) / n as i64) as i32;
            m.shift -= k;
        }
        let xf = self.convert(x.id, DType::F32, "as_f32")?;
        let sum = crate::front::decompose::reduce(self, "sum", ReduceKind::Add, xf, &ir_axes)?;
        let sum = self.convert(sum, DType::I32, "sum_i32")?;
        let off = self.splat_i32(z_in.wrapping_mul(n as i32), sum)?;
        let c = self.binary("centered", BinaryOp::Subtract, sum, off)?;
        let y = self.requantize_acc(c, &[m], 0, z_out, (lo, hi))?;
        self.set_reduced(y, &x, &axes, &ir_axes, keep)
    }

    /// int8 MAXIMUM or MINIMUM: the raw integers compared (TFLite Micro checks no scales).
    pub fn max_min_i8(&mut self, op: BinaryOp) -> R<()> {
        let (at, bt) = (self.need(0)?, self.need(1)?);
        let out = self.output_index(0)?;
        let (a, b) = (self.val(at)?, self.val(bt)?);
        let out_dims = self.broadcast_dims(&self.dims(&a), &self.dims(&b))?;
        let perm = self.common_layout(&[&a, &b], &out_dims);
        let x = self.broadcast_to(&a, &out_dims, &perm)?;
        let y = self.broadcast_to(&b, &out_dims, &perm)?;
        let r = self.binary("", op, x, y)?;
        self.set(out, Val { id: r, perm });
        Ok(())
    }

    /// int8 SQUARED_DIFFERENCE (`squared_difference.cc`): each input `(q − z) · 2^7` scaled by
    /// `QuantizeMultiplier(s_i / (2 · max(s_1, s_2)))`, the difference squared, scaled by
    /// `QuantizeMultiplier((2 · max)^2 / (s_out · 2^14))`, plus `z_out`, saturated.
    pub fn squared_difference_i8(&mut self) -> R<()> {
        /// `squared_difference.cc`'s left shift of int8 inputs.
        const LEFT_SHIFT: i32 = 7;
        let out = self.output_index(0)?;
        let (s_out, z_out, lo, hi) = self.q_scalar(out)?;
        let (scaled, twice_max, perm) = self.common_scale_inputs(LEFT_SHIFT)?;
        let mo = quantize_multiplier(twice_max * twice_max / (f64::from(s_out) * 16384.0));
        let d = self.binary("difference", BinaryOp::Subtract, scaled[0], scaled[1])?;
        let sq = self.binary("square", BinaryOp::Multiply, d, d)?;
        let y = self.requantize_acc(sq, &[mo], 0, z_out, (lo, hi))?;
        self.set(out, Val { id: y, perm });
        Ok(())
    }

    /// int8 BATCH_MATMUL: `Σ (l − z_l)(r − z_r)` per output, scaled by
    /// `QuantizeMultiplier(s_l · s_r / s_out)`, plus `z_out`, saturated (no bias, no activation).
    pub fn batch_matmul_i8(&mut self, adj_x: bool, adj_y: bool) -> R<()> {
        let (xt, yt) = (self.need(0)?, self.need(1)?);
        let out = self.output_index(0)?;
        let (s1, z1, _, _) = self.q_scalar(xt)?;
        let (s2, z2, _, _) = self.q_scalar(yt)?;
        let (s_out, z_out, lo, hi) = self.q_scalar(out)?;
        let m = quantize_multiplier(f64::from(s1) * f64::from(s2) / f64::from(s_out));
        let (x, y) = (self.tflite(xt)?, self.tflite(yt)?);
        let (xd, yd) = (self.b.shape(x).dims.clone(), self.b.shape(y).dims.clone());
        if xd.len() != yd.len() || xd.len() < 2 || xd[..xd.len() - 2] != yd[..yd.len() - 2] {
            return Err(self.err(format!(
                "int8 BATCH_MATMUL of {xd:?} and {yd:?}: equal batch dims are supported"
            )));
        }
        let n = xd.len() - 2;
        let xc = self.centered(x, z1)?;
        let yc = self.centered(y, z2)?;
        let p = self.batch_dot(xc, yc, n, adj_x, adj_y)?;
        let acc = self.convert(p, DType::I32, "acc")?;
        let q = self.requantize_acc(acc, &[m], 0, z_out, (lo, hi))?;
        self.set(out, Val::plain(q, n + 2));
        Ok(())
    }

    /// int8 PRELU (`reference_ops::BroadcastPrelu4DSlow`): `d = q − z_in`; `d ≥ 0`:
    /// `multiply-q31(d, QM(s_in / s_out))`, else `multiply-q31(d · (α − z_α), QM(s_in · s_α /
    /// s_out))`; plus `z_out`, saturated. α broadcasts against the input.
    pub fn prelu_i8(&mut self) -> R<()> {
        let (xt, at) = (self.need(0)?, self.need(1)?);
        let out = self.output_index(0)?;
        let (s_in, z_in, _, _) = self.q_scalar(xt)?;
        let (s_a, z_a, _, _) = self.q_scalar(at)?;
        let (s_out, z_out, lo, hi) = self.q_scalar(out)?;
        let m1 = quantize_multiplier(f64::from(s_in) / f64::from(s_out));
        let m2 = quantize_multiplier(f64::from(s_in) * f64::from(s_a) / f64::from(s_out));
        let (x, a) = (self.val(xt)?, self.val(at)?);
        let out_dims = self.broadcast_dims(&self.dims(&x), &self.dims(&a))?;
        let perm = self.common_layout(&[&x, &a], &out_dims);
        let xb = self.broadcast_to(&x, &out_dims, &perm)?;
        let ab = self.broadcast_to(&a, &out_dims, &perm)?;
        let zc = self.splat_i32(z_in, xb)?;
        let d = self.binary("centered", BinaryOp::Subtract, xb, zc)?;
        let za = self.splat_i32(z_a, ab)?;
        let ac = self.binary("alpha", BinaryOp::Subtract, ab, za)?;
        let pos = self.mul_q31(d, &[m1], 0, "positive_part")?;
        let prod = self.binary("scaled_input", BinaryOp::Multiply, d, ac)?;
        let neg = self.mul_q31(prod, &[m2], 0, "negative_part")?;
        let zero = self.splat_i32(0, d)?;
        let name = self.name("non_negative");
        let ge = self
            .b
            .add(&name, Op::Compare(CompareDir::Ge), &[d, zero])
            .map_err(self.ir())?;
        let name = self.name("chosen");
        let v = self
            .b
            .add(&name, Op::Select, &[ge, pos, neg])
            .map_err(self.ir())?;
        let zo = self.splat_i32(z_out, v)?;
        let y = self.binary("offset", BinaryOp::Add, v, zo)?;
        let y = self.clamp_i32(y, lo, hi)?;
        self.set(out, Val { id: y, perm });
        Ok(())
    }

    /// int8 REDUCE_MAX / REDUCE_MIN: the raw integers (TFLite Micro requires one quantization).
    pub fn reduce_max_min_i8(&mut self, kind: ReduceKind) -> R<()> {
        let (xt, out) = (self.need(0)?, self.output_index(0)?);
        let (s, z, _, _) = self.q_scalar(xt)?;
        let (so, zo, _, _) = self.q_scalar(out)?;
        if (s, z) != (so, zo) {
            return Err(self.err(format!(
                "input quantization ({s}, {z}) and output ({so}, {zo}) differ; TFLite Micro's int8 REDUCE_MAX/MIN takes one"
            )));
        }
        // The float lowering on integer-valued f32 is exact; back to i32 after it.
        self.reduce_generic(kind, false, true)
    }

    /// QUANTIZE of a float tensor: `saturate(round(x / s) + z)`, half away from zero.
    pub fn quantize_from_float(&mut self) -> R<()> {
        let xt = self.need(0)?;
        let out = self.output_index(0)?;
        let (s, z, lo, hi) = self.q_scalar(out)?;
        let x = self.val(xt)?;
        let sc = self.splat(s, x.id)?;
        let y = self.binary("scaled", BinaryOp::Divide, x.id, sc)?;
        // x86's conversion (`cvttss2si`, what the reference build runs) makes NaN, ±inf and any
        // |x / s| ≥ 2^31 the integer minimum, which saturates to the type's minimum (+1e10 gives
        // −128); every other value beyond ±2^24 saturates anyway, and bounding it keeps the
        // rounding step below from wrapping.
        let big = self.splat(2_147_483_648.0, y)?;
        let name = self.name("abs");
        let ay = self
            .b
            .add(&name, Op::Unary(crate::ir::UnaryOp::Abs), &[y])
            .map_err(self.ir())?;
        let name = self.name("in_range");
        let in_range = self
            .b
            .add(&name, Op::Compare(CompareDir::Lt), &[ay, big])
            .map_err(self.ir())?;
        let y = self.clamp(y, -16_777_216.0, 16_777_216.0)?;
        // round half away from zero: t = trunc(y); t + sign(y) where |y − t| ≥ 0.5 (exact: y − t
        // is exact in f32).
        let t = self.convert(y, DType::I32, "trunc")?;
        let tf = self.convert(t, DType::F32, "trunc_f32")?;
        let frac = self.binary("frac", BinaryOp::Subtract, y, tf)?;
        let name = self.name("abs_frac");
        let af = self
            .b
            .add(&name, Op::Unary(crate::ir::UnaryOp::Abs), &[frac])
            .map_err(self.ir())?;
        let half = self.splat(0.5, af)?;
        let name = self.name("away");
        let away = self
            .b
            .add(&name, Op::Compare(CompareDir::Ge), &[af, half])
            .map_err(self.ir())?;
        let zero = self.splat(0.0, y)?;
        let name = self.name("negative");
        let neg = self
            .b
            .add(&name, Op::Compare(CompareDir::Lt), &[y, zero])
            .map_err(self.ir())?;
        let one = self.splat_i32(1, t)?;
        let minus = self.splat_i32(-1, t)?;
        let name = self.name("sign");
        let sign = self
            .b
            .add(&name, Op::Select, &[neg, minus, one])
            .map_err(self.ir())?;
        let stepped = self.binary("stepped", BinaryOp::Add, t, sign)?;
        let name = self.name("rounded");
        let r = self
            .b
            .add(&name, Op::Select, &[away, stepped, t])
            .map_err(self.ir())?;
        let zc = self.splat_i32(z, r)?;
        let q = self.binary("offset", BinaryOp::Add, r, zc)?;
        let q = self.clamp_i32(q, lo, hi)?;
        let low = self.splat_i32(lo, q)?;
        let name = self.name("overflow");
        let q = self
            .b
            .add(&name, Op::Select, &[in_range, q, low])
            .map_err(self.ir())?;
        self.set(
            out,
            Val {
                id: q,
                perm: x.perm,
            },
        );
        Ok(())
    }

    /// QUANTIZE of a quantized tensor (TFLite's `Requantize`): `multiply-q31(q − z_in, M, shift)
    /// + z_out`, saturated, with `QuantizeMultiplier(s_in / s_out)` in double.
    pub fn requantize(&mut self) -> R<()> {
        let xt = self.need(0)?;
        let out = self.output_index(0)?;
        let (s_in, z_in, _, _) = self.q_scalar(xt)?;
        let (s_out, z_out, lo, hi) = self.q_scalar(out)?;
        let m = quantize_multiplier(f64::from(s_in) / f64::from(s_out));
        let x = self.val(xt)?;
        let z = self.splat_i32(z_in, x.id)?;
        let c = self.binary("centered", BinaryOp::Subtract, x.id, z)?;
        let y = self.requantize_acc(c, &[m], 0, z_out, (lo, hi))?;
        self.set(
            out,
            Val {
                id: y,
                perm: x.perm,
            },
        );
        Ok(())
    }

    /// QUANTIZE: from float or between quantizations.
    pub fn quantize(&mut self) -> R<()> {
        let xt = self.need(0)?;
        if self.is_quantized(xt) {
            self.requantize()
        } else {
            self.check_float(xt)?;
            self.quantize_from_float()
        }
    }

    /// DEQUANTIZE: of a constant (float16 or int8 weights) or of run-time integers.
    pub fn dequantize(&mut self) -> R<()> {
        let xt = self.need(0)?;
        if self.tensor(xt).data.is_some() {
            self.dequantize_constant()
        } else {
            self.dequantize_runtime()
        }
    }

    /// DEQUANTIZE of a run-time quantized tensor: `(q − z) · s`.
    pub fn dequantize_runtime(&mut self) -> R<()> {
        let xt = self.need(0)?;
        let out = self.output_index(0)?;
        let (s, z, _, _) = self.q_scalar(xt)?;
        let x = self.val(xt)?;
        let c = self.centered(x.id, z)?;
        let sc = self.splat(s, c)?;
        let y = self.binary("", BinaryOp::Multiply, c, sc)?;
        self.set(
            out,
            Val {
                id: y,
                perm: x.perm,
            },
        );
        Ok(())
    }
}
