//! Quantized ONNX: QuantizeLinear and DequantizeLinear (per tensor, per axis and blocked), Round,
//! and the QOperator ops (QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger,
//! DynamicQuantizeLinear) rewritten as dequantize → float op → quantize.
//!
//! Contract: a quantized tensor is an ONNX integer value (int8, uint8, int16, uint16; int32 for
//! biases), held in i32 like every ONNX integer; its values are exactly the ones onnxruntime
//! computes. `QuantizeLinear` is `saturate(round_half_even(x / scale) + zero_point)` with the
//! division and rounding in f32 as the spec writes them; `DequantizeLinear` is
//! `(x - zero_point) · scale` with the subtraction exact (integers below 2^24) and one f32
//! multiply. Both fold at import time when their inputs are constants (the int8 weights of a QDQ
//! model become f32 weights, so convolutions keep their packed-weight kernels). Everything
//! between dequantize and quantize is written in f32, the exact reference; on AVX-512 VNNI and
//! aarch64 dotprod the products of QLinearConv / QLinearMatMul's integers take `vpdpbusd` /
//! `sdot` kernels with the same sums (`cpu/gemm_i8.rs`, `cpu/conv/int8.rs`, docs/import.md). float8 and 4-bit types are
//! refused with an error naming the node.

use super::context::{Ctx, Importer, R, Val, ty_of};
use super::elementwise::{Outs, konst, rt};
use super::proto::{AttributeProto, data_type as dt};
use super::rewrite::{Rewrite, attr_i, input_name};
use super::tensor::{ConstTensor, F32_BYTES_FROM, Values, is_float_type};
use crate::ir::value_range::ROUND_SHIFT;
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Op, ReduceKind, UnaryOp};
use std::sync::Arc;

/// From 2^23 on every f32 is an integer; below it, `(|x| + 2^23) - 2^23` rounds `|x|` to the
/// nearest integer, ties to even, in one f32 add (the sum lies in [2^23, 2^24), whose spacing
/// is 1).
const ROUND_MAGIC: f32 = 8_388_608.0;

/// The integer range of a quantized ONNX type, if we hold it.
fn q_range(ty: i32) -> Option<(f64, f64)> {
    match ty {
        dt::UINT4 => Some((0.0, 15.0)),
        dt::INT4 => Some((-8.0, 7.0)),
        dt::UINT8 => Some((0.0, 255.0)),
        dt::INT8 => Some((-128.0, 127.0)),
        dt::UINT16 => Some((0.0, 65535.0)),
        dt::INT16 => Some((-32768.0, 32767.0)),
        dt::INT32 => Some((-2147483648.0, 2147483647.0)),
        _ => None,
    }
}

/// Round half to even of an f32, as the f32 arithmetic above computes it (the constant folds).
fn round_even_f32(x: f32) -> f32 {
    if x.abs() < ROUND_MAGIC {
        let r = (x.abs() + ROUND_MAGIC) - ROUND_MAGIC;
        if x < 0.0 { -r } else { r }
    } else {
        x
    }
}

/// The integer products [`Importer::qlinear_exact`] computes exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum QKind {
    /// `QLinearConv`.
    Conv,
    /// `QLinearMatMul`.
    MatMul,
    /// `com.microsoft` `QGemm` (2-D, `transB` either way).
    Gemm,
}

impl QKind {
    fn of(op: &str) -> QKind {
        match op {
            "QLinearConv" => QKind::Conv,
            "QGemm" => QKind::Gemm,
            _ => QKind::MatMul,
        }
    }

    /// The input positions after the two operands' triples: the output scale (the zero point
    /// follows it) and the int32 bias, where the op has one.
    fn late_inputs(self) -> (usize, Option<usize>) {
        match self {
            QKind::Conv => (6, Some(8)),
            QKind::MatMul => (6, None),
            QKind::Gemm => (7, Some(6)),
        }
    }
}

/// How a scale or zero point lines up with the tensor it applies to.
#[derive(Debug, Clone, Copy)]
struct Axis {
    /// The axis of per-axis and blocked quantization (`None`: out of range, an error only when a
    /// scale or zero point is not a scalar).
    axis: Option<usize>,
    /// Elements per block along `axis` (0: per tensor or per axis).
    block: usize,
}

impl Importer {
    /// `QuantizeLinear(x, y_scale, y_zero_point?)`: attributes `axis`, `block_size`,
    /// `output_dtype` (opset 21) and `saturate` (float8 only).
    pub fn quantize_linear(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 3)?;
        let x = self.input(cx, 0)?;
        if !is_float_type(ty_of(&x)) {
            return Err(cx.err(format!(
                "input 0 has element type {}; QuantizeLinear quantizes float tensors",
                dt::name(ty_of(&x))
            )));
        }
        let zp = if cx.has_input(2) {
            Some(self.input(cx, 2)?)
        } else {
            None
        };
        let out_ty = match (&zp, cx.attr_i("output_dtype")?) {
            (Some(z), _) => ty_of(z),
            (None, Some(t)) if t != 0 => t as i32,
            (None, _) => dt::UINT8,
        };
        let (lo, hi) = self.q_type(cx, out_ty)?;
        let dims = self.dims_of(&x);
        let ax = self.q_axis(cx, dims.len())?;
        let scale = self.input(cx, 1)?;
        if let (Val::Const(xc), Val::Const(sc)) = (&x, &scale) {
            let zc = match &zp {
                None => None,
                Some(Val::Const(z)) => Some(z.clone()),
                Some(Val::Rt { .. }) => return self.quantize_rt(cx, &dims, ax, out_ty),
            };
            let s = self.q_param(cx, sc, &dims, ax, "y_scale")?;
            let z = match zc {
                Some(z) => self.q_param(cx, &z, &dims, ax, "y_zero_point")?,
                None => vec![0.0; s.len()],
            };
            let q: Vec<i64> = xc
                .as_f64()
                .iter()
                .zip(s.iter().zip(&z))
                .map(|(&v, (&s, &z))| {
                    let t = round_even_f32(v as f32 / s as f32) as f64 + z;
                    if t.is_nan() {
                        0
                    } else {
                        t.clamp(lo, hi) as i64
                    }
                })
                .collect();
            return Ok(konst(ConstTensor {
                ty: out_ty,
                dims,
                values: Values::I(q),
            }));
        }
        self.quantize_rt(cx, &dims, ax, out_ty)
    }

    /// The run-time form of [`Self::quantize_linear`].
    fn quantize_rt(&mut self, cx: &Ctx, dims: &[usize], ax: Axis, out_ty: i32) -> R<Outs> {
        let (x, _) = self.rt(cx, 0)?;
        let x = self.convert(cx, x, DType::F32)?;
        let s = self.q_operand(cx, 1, dims, ax)?;
        let t = self.bin(cx, BinaryOp::Divide, x, s)?;
        let z = if cx.has_input(2) {
            Some(self.q_operand(cx, 2, dims, ax)?)
        } else {
            None
        };
        self.saturated(cx, t, z, out_ty)
    }

    /// [`Self::saturate_round`] to the range of quantized type `ty`, as the integers of `ty`.
    pub(super) fn saturated(&mut self, cx: &Ctx, t: InstId, z: Option<InstId>, ty: i32) -> R<Outs> {
        let (lo, hi) = self.q_type(cx, ty)?;
        let y = self.saturate_round(cx, t, z, lo, hi)?;
        let q = self.convert(cx, y, DType::I32)?;
        Ok(rt(q, ty))
    }

    /// `clamp(t, lo − z, hi − z)` rounded half to even, plus `z` (the zero point, f32 of `t`'s
    /// dims; none is 0): `saturate(round(t) + z)` in the order `MlasQuantizeLinear` and
    /// `MlasRequantizeOutput` use. The clamped value lies within 2^22 of zero, so adding and
    /// subtracting 1.5·2^23 rounds it (the sum lies in [2^23, 2^24), spaced 1) and `t` is read
    /// once: chained quantizations fused into one loop stay linear in size (the general
    /// [`Self::round_even`] reads its input three times).
    fn saturate_round(
        &mut self,
        cx: &Ctx,
        t: InstId,
        z: Option<InstId>,
        lo: f64,
        hi: f64,
    ) -> R<InstId> {
        let d = self.dims(t);
        let (lo_b, hi_b) = match z {
            None => (
                self.b.scalar("constant", lo as f32),
                self.b.scalar("constant", hi as f32),
            ),
            Some(z) => {
                let l = self.splat(cx, lo as f32, &d)?;
                let h = self.splat(cx, hi as f32, &d)?;
                (
                    self.bin(cx, BinaryOp::Subtract, l, z)?,
                    self.bin(cx, BinaryOp::Subtract, h, z)?,
                )
            }
        };
        let c = self.add(cx, Op::Clamp, &[lo_b, t, hi_b])?;
        let k = self.splat(cx, ROUND_SHIFT, &d)?;
        let up = self.bin(cx, BinaryOp::Add, c, k)?;
        let r = self.bin(cx, BinaryOp::Subtract, up, k)?;
        match z {
            None => Ok(r),
            Some(z) => self.bin(cx, BinaryOp::Add, r, z),
        }
    }

    /// `DequantizeLinear(x, x_scale, x_zero_point?)`: attributes `axis`, `block_size`.
    pub fn dequantize_linear(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 3)?;
        let x = self.input(cx, 0)?;
        let ty = ty_of(&x);
        self.q_type(cx, ty)?;
        let dims = self.dims_of(&x);
        let ax = self.q_axis(cx, dims.len())?;
        let scale = self.input(cx, 1)?;
        let zp = if cx.has_input(2) {
            Some(self.input(cx, 2)?)
        } else {
            None
        };
        if let (Val::Const(xc), Val::Const(sc)) = (&x, &scale) {
            let zc = match &zp {
                None => None,
                Some(Val::Const(z)) => Some(z.clone()),
                Some(Val::Rt { .. }) => return self.dequantize_rt(cx, &dims, ax),
            };
            let s = self.q_param(cx, sc, &dims, ax, "x_scale")?;
            let z = match zc {
                Some(z) => self.q_param(cx, &z, &dims, ax, "x_zero_point")?,
                None => vec![0.0; s.len()],
            };
            let q = xc.as_i64();
            let f = |i: usize| ((q[i] as f64 - z[i]) as f32) * s[i] as f32;
            let n = q.len();
            let values = if n >= F32_BYTES_FROM {
                let mut bytes = Vec::with_capacity(n * 4);
                for i in 0..n {
                    bytes.extend_from_slice(&f(i).to_le_bytes());
                }
                Values::F32(Arc::new(bytes))
            } else {
                Values::F((0..n).map(|i| f(i) as f64).collect())
            };
            return Ok(konst(ConstTensor {
                ty: dt::FLOAT,
                dims,
                values,
            }));
        }
        self.dequantize_rt(cx, &dims, ax)
    }

    /// The run-time form of [`Self::dequantize_linear`].
    fn dequantize_rt(&mut self, cx: &Ctx, dims: &[usize], ax: Axis) -> R<Outs> {
        let (x, _) = self.rt(cx, 0)?;
        let x = self.convert(cx, x, DType::F32)?;
        let x = if cx.has_input(2) {
            let z = self.q_operand(cx, 2, dims, ax)?;
            self.bin(cx, BinaryOp::Subtract, x, z)?
        } else {
            x
        };
        let s = self.q_operand(cx, 1, dims, ax)?;
        let y = self.bin(cx, BinaryOp::Multiply, x, s)?;
        Ok(rt(y, dt::FLOAT))
    }

    /// `Round` (half to even) of a float tensor.
    pub fn round_op(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        let x = self.rt_f32(cx, 0)?;
        let r = self.round_even(cx, x)?;
        Ok(rt(r, dt::FLOAT))
    }

    /// Round half to even of f32 `x`: `±((|x| + 2^23) − 2^23)` below 2^23, `x` itself from there
    /// (and for NaN and infinities). A zero result is negative when `x < 0` (`Round(-0.4) = -0`);
    /// `Round(-0.0)` gives `+0`.
    pub(super) fn round_even(&mut self, cx: &Ctx, x: InstId) -> R<InstId> {
        let d = self.dims(x);
        let a = self.add(cx, Op::Unary(UnaryOp::Abs), &[x])?;
        let m = self.splat(cx, ROUND_MAGIC, &d)?;
        let up = self.bin(cx, BinaryOp::Add, a, m)?;
        let r = self.bin(cx, BinaryOp::Subtract, up, m)?;
        let neg_r = self.add(cx, Op::Unary(UnaryOp::Negate), &[r])?;
        let z = self.splat(cx, 0.0, &d)?;
        let neg = self.add(cx, Op::Compare(CompareDir::Lt), &[x, z])?;
        let signed = self.select(cx, neg, neg_r, r)?;
        let small = self.add(cx, Op::Compare(CompareDir::Lt), &[a, m])?;
        self.select(cx, small, signed, x)
    }

    /// The range of quantized type `ty`, or an error naming it.
    fn q_type(&self, cx: &Ctx, ty: i32) -> R<(f64, f64)> {
        q_range(ty).ok_or_else(|| {
            cx.err(format!(
                "quantized type {} is not supported (int4, uint4, int8, uint8, int16, uint16 and int32 are)",
                dt::name(ty)
            ))
            .hint("re-quantize the model to 8-bit integers (onnxruntime.quantization writes int8/uint8)")
        })
    }

    /// The node's `axis` and `block_size` for a tensor of `rank`.
    fn q_axis(&self, cx: &Ctx, rank: usize) -> R<Axis> {
        let raw = cx.attr_i_or("axis", 1)?;
        let block = cx.attr_i_or("block_size", 0)?;
        if block < 0 {
            return Err(cx.attr_err("block_size", format!("must be >= 0, found {block}")));
        }
        // A per-tensor scale ignores `axis` (so it is checked only where it is used).
        let r = rank as i64;
        let axis = (-r..r)
            .contains(&raw)
            .then(|| raw.rem_euclid(r.max(1)) as usize);
        Ok(Axis {
            axis,
            block: block as usize,
        })
    }

    /// A scale or zero point (constant `c`) expanded to one value per element of `dims`.
    fn q_param(
        &self,
        cx: &Ctx,
        c: &ConstTensor,
        dims: &[usize],
        ax: Axis,
        what: &str,
    ) -> R<Vec<f64>> {
        let v = c.as_f64();
        let n: usize = dims.iter().product();
        let map = self.q_map(cx, &c.dims, dims, ax, what)?;
        Ok((0..n).map(|i| v[map(i)]).collect())
    }

    /// The index into a scale/zero point of `pdims` for each row-major element of `dims`.
    fn q_map(
        &self,
        cx: &Ctx,
        pdims: &[usize],
        dims: &[usize],
        ax: Axis,
        what: &str,
    ) -> R<Box<dyn Fn(usize) -> usize>> {
        let count: usize = pdims.iter().product();
        if count == 1 {
            return Ok(Box::new(|_| 0));
        }
        let Some(axis) = ax.axis else {
            return Err(cx.attr_err(
                "axis",
                format!(
                    "is out of range for a tensor of rank {} with a per-axis {what}",
                    dims.len()
                ),
            ));
        };
        let inner: usize = dims[axis + 1..].iter().product();
        let d = dims[axis];
        if ax.block == 0 {
            if pdims.len() != 1 || pdims[0] != d {
                return Err(cx.err(format!(
                    "{what} has dims [{}]; per-axis quantization along axis {axis} needs [{d}]",
                    crate::ir::shape::dims_str(pdims)
                )));
            }
            return Ok(Box::new(move |i| (i / inner) % d));
        }
        let b = ax.block;
        let mut want = dims.to_vec();
        want[axis] = d.div_ceil(b);
        if pdims != want.as_slice() {
            return Err(cx.err(format!(
                "{what} has dims [{}]; blocked quantization (block_size {b}) along axis {axis} needs [{}]",
                crate::ir::shape::dims_str(pdims),
                crate::ir::shape::dims_str(&want)
            )));
        }
        let nb = want[axis];
        Ok(Box::new(move |i| {
            let outer = i / (inner * d);
            let a = (i / inner) % d;
            (outer * nb + a / b) * inner + i % inner
        }))
    }

    /// Input `j` (a scale or zero point) as f32 of `dims`: a scalar splat, a per-axis vector
    /// broadcast along the axis, or blocks repeated along it.
    fn q_operand(&mut self, cx: &Ctx, j: usize, dims: &[usize], ax: Axis) -> R<InstId> {
        let (p, _) = self.rt(cx, j)?;
        let p = self.convert(cx, p, DType::F32)?;
        let pdims = self.dims(p);
        // Checks the dims (the index map itself is only for constants).
        let what = if j == 1 {
            "the scale"
        } else {
            "the zero point"
        };
        let _ = self.q_map(cx, &pdims, dims, ax, what)?;
        let count: usize = pdims.iter().product();
        if count == 1 {
            let s = self.reshape(cx, p, Vec::new())?;
            return self.bcast(cx, s, Vec::new(), dims.to_vec());
        }
        let axis = ax.axis.expect("q_map checked the axis");
        if ax.block == 0 {
            return self.bcast(cx, p, vec![axis], dims.to_vec());
        }
        // [.., nb, ..] → [.., nb, B, ..] → [.., nb·B, ..] → the first d along the axis.
        let b = ax.block;
        let mut wide = pdims.clone();
        wide.insert(axis + 1, b);
        let map: Vec<usize> = (0..pdims.len())
            .map(|k| if k <= axis { k } else { k + 1 })
            .collect();
        let e = self.bcast(cx, p, map, wide)?;
        let mut merged = pdims.clone();
        merged[axis] *= b;
        let e = self.reshape(cx, e, merged.clone())?;
        if merged[axis] == dims[axis] {
            return Ok(e);
        }
        let starts = vec![0; dims.len()];
        self.crop(cx, e, starts, dims.to_vec())
    }

    /// The default-domain QOperator ops, rewritten through DequantizeLinear / QuantizeLinear.
    pub fn qoperator(&mut self, cx: &Ctx) -> R<Outs> {
        let op = cx.node.op_type.as_str();
        let mut rw = Rewrite {
            node: cx.node,
            index: cx.index,
            next: 0,
        };
        let inp = |j: usize| input_name(cx, j);
        let kept: Vec<AttributeProto> = cx.node.attribute.clone();
        match op {
            "QLinearConv" | "QLinearMatMul" if self.integer_exact(cx)? => {
                self.qlinear_exact(cx, &mut rw, QKind::of(op))
            }
            "QLinearConv" => {
                cx.arity(8, 9)?;
                let x = self.dq_via(cx, &mut rw, inp(0), inp(1), inp(2), 1)?;
                let w = self.dq_via(cx, &mut rw, inp(3), inp(4), inp(5), 0)?;
                let mut ins = vec![x, w];
                if cx.has_input(8) {
                    // The int32 bias's scale is x_scale · w_scale (per output channel).
                    let s = match (self.input(cx, 1)?, self.input(cx, 4)?) {
                        (Val::Const(a), Val::Const(b)) if a.element_count() == 1 => {
                            let a = a.as_f64()[0] as f32;
                            let v: Vec<f32> = b.as_f64().iter().map(|&w| a * w as f32).collect();
                            self.const_f32s(&mut rw, vec![v.len()], v)
                        }
                        _ => self.via1(cx, &mut rw, "Mul", &[inp(1), inp(4)], vec![])?,
                    };
                    ins.push(self.dq_via(cx, &mut rw, inp(8), s, String::new(), 0)?);
                }
                let y = self.via1(cx, &mut rw, "Conv", &ins, kept)?;
                self.requantize(cx, &mut rw, y, inp(6), inp(7))
            }
            "QLinearMatMul" => {
                cx.arity(8, 8)?;
                // a: per row (axis -2); b: per column (axis -1).
                let a = self.dq_via(cx, &mut rw, inp(0), inp(1), inp(2), -2)?;
                let b = self.dq_via(cx, &mut rw, inp(3), inp(4), inp(5), -1)?;
                let y = self.via1(cx, &mut rw, "MatMul", &[a, b], vec![])?;
                self.requantize(cx, &mut rw, y, inp(6), inp(7))
            }
            "MatMulInteger" | "ConvInteger" => {
                cx.arity(2, 4)?;
                let one = self.const_f32(&mut rw, 1.0);
                let (a_axis, b_axis) = if op == "ConvInteger" {
                    (1, 0)
                } else {
                    (-2, -1)
                };
                let a = self.dq_via(cx, &mut rw, inp(0), one.clone(), inp(2), a_axis)?;
                let b = self.dq_via(cx, &mut rw, inp(1), one, inp(3), b_axis)?;
                let (inner, attrs) = if op == "ConvInteger" {
                    ("Conv", kept)
                } else {
                    ("MatMul", vec![])
                };
                let y = self.via1(cx, &mut rw, inner, &[a, b], attrs)?;
                self.via(
                    cx,
                    &mut rw,
                    "Cast",
                    &[y],
                    1,
                    vec![attr_i("to", dt::INT32 as i64)],
                )
            }
            "DynamicQuantizeLinear" => {
                cx.arity(1, 1)?;
                self.dynamic_quantize(cx)
            }
            _ => unreachable!("qoperator is dispatched for its own ops"),
        }
    }

    /// The `com.microsoft` QOperator ops onnxruntime's `quantize_static` writes (QLinearAdd,
    /// QLinearMul, QLinearConcat, QLinearGlobalAveragePool, QLinearAveragePool, QLinearSoftmax,
    /// QLinearSigmoid, QLinearLeakyRelu, QGemm, and its QuantizeLinear/DequantizeLinear), each
    /// rewritten as dequantize → the float op → quantize.
    pub(super) fn qcontrib(&mut self, cx: &Ctx, rw: &mut Rewrite) -> R<Outs> {
        let op = cx.node.op_type.as_str();
        let inp = |j: usize| input_name(cx, j);
        let channels_last = cx.attr_i_or("channels_last", 0)? != 0;
        if channels_last {
            return Err(cx.attr_err(
                "channels_last",
                "only 0 (NCHW, what onnxruntime's quantizer writes) is supported",
            ));
        }
        let unary = |me: &mut Self, rw: &mut Rewrite, inner: &str, attrs| -> R<Outs> {
            cx.arity(4, 5)?;
            let x = me.dq_via(cx, rw, inp(0), inp(1), inp(2), 1)?;
            let y = me.via1(cx, rw, inner, &[x], attrs)?;
            me.requantize(cx, rw, y, inp(3), inp(4))
        };
        match op {
            "QuantizeLinear" => self.quantize_linear(cx),
            "DequantizeLinear" => self.dequantize_linear(cx),
            "QLinearAdd" | "QLinearMul" if self.qlinear_binary_exact(cx)? => {
                self.qlinear_binary(cx, op == "QLinearAdd")
            }
            "QLinearAdd" | "QLinearMul" => {
                cx.arity(7, 8)?;
                let a = self.dq_via(cx, rw, inp(0), inp(1), inp(2), 1)?;
                let b = self.dq_via(cx, rw, inp(3), inp(4), inp(5), 1)?;
                let inner = if op == "QLinearAdd" { "Add" } else { "Mul" };
                let y = self.via1(cx, rw, inner, &[a, b], vec![])?;
                self.requantize(cx, rw, y, inp(6), inp(7))
            }
            "QLinearConcat" => {
                let n = cx.n_inputs();
                if n < 5 || (n - 2) % 3 != 0 {
                    return Err(cx.err(format!(
                        "QLinearConcat takes Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples; found {n} inputs"
                    )));
                }
                let mut xs = Vec::new();
                for t in 0..(n - 2) / 3 {
                    let j = 2 + 3 * t;
                    xs.push(self.dq_via(cx, rw, inp(j), inp(j + 1), inp(j + 2), 1)?);
                }
                let axis = cx
                    .attr_i("axis")?
                    .ok_or_else(|| cx.attr_err("axis", "is required"))?;
                let y = self.via1(cx, rw, "Concat", &xs, vec![attr_i("axis", axis)])?;
                self.requantize(cx, rw, y, inp(0), inp(1))
            }
            "QLinearGlobalAveragePool" => unary(self, rw, "GlobalAveragePool", vec![]),
            "QLinearSigmoid" => unary(self, rw, "Sigmoid", vec![]),
            "QLinearLeakyRelu" => {
                let alpha = cx.attr_f_or("alpha", 0.01)?;
                unary(
                    self,
                    rw,
                    "LeakyRelu",
                    vec![super::rewrite::attr_f("alpha", alpha)],
                )
            }
            "QLinearAveragePool" => {
                let attrs: Vec<AttributeProto> = cx
                    .node
                    .attribute
                    .iter()
                    .filter(|a| a.name != "channels_last")
                    .cloned()
                    .collect();
                if self.qlinear_exact_form(cx, &[0], &[1, 2, 3, 4])? {
                    return self.qlinear_average_pool(cx, rw, attrs);
                }
                unary(self, rw, "AveragePool", attrs)
            }
            "QLinearSoftmax" if self.qlinear_softmax_exact(cx)? => self.qlinear_softmax(cx),
            "QLinearSoftmax" => {
                cx.arity(4, 5)?;
                let axis = cx.attr_i_or("axis", -1)?;
                let x = self.dq_via(cx, rw, inp(0), inp(1), inp(2), 1)?;
                let rank = self.in_dims(cx, 0)?.len() as i64;
                let last = axis == -1 || axis == rank - 1;
                // `opset` < 13: the softmax of the 2-D coercion at `axis` (the same when `axis`
                // is the last one).
                if cx.attr_i_or("opset", 13)? < 13 && !last {
                    return Err(cx.attr_err(
                        "axis",
                        "QLinearSoftmax of opset < 13 is supported along the last axis only",
                    ));
                }
                let y = self.via1(cx, rw, "Softmax", &[x], vec![attr_i("axis", axis)])?;
                self.requantize(cx, rw, y, inp(3), inp(4))
            }
            "QGemm" if self.integer_exact(cx)? => self.qlinear_exact(cx, rw, QKind::Gemm),
            "QGemm" => {
                cx.arity(6, 9)?;
                let trans_b = cx.attr_i_or("transB", 0)?;
                let a = self.dq_via(cx, rw, inp(0), inp(1), inp(2), 1)?;
                // B's scale is per output column N: axis 0 of a transposed [N, K] B, else 1.
                let b = self.dq_via(
                    cx,
                    rw,
                    inp(3),
                    inp(4),
                    inp(5),
                    if trans_b != 0 { 0 } else { 1 },
                )?;
                let mut ins = vec![a, b];
                if cx.has_input(6) {
                    let s = self.via1(cx, rw, "Mul", &[inp(1), inp(4)], vec![])?;
                    ins.push(self.dq_via(cx, rw, inp(6), s, String::new(), 0)?);
                }
                let attrs = vec![
                    super::rewrite::attr_f("alpha", cx.attr_f_or("alpha", 1.0)?),
                    attr_i("transA", cx.attr_i_or("transA", 0)?),
                    attr_i("transB", trans_b),
                ];
                let y = self.via1(cx, rw, "Gemm", &ins, attrs)?;
                if cx.has_input(7) {
                    self.requantize(cx, rw, y, inp(7), inp(8))
                } else {
                    Ok(vec![self.env.get(&y).cloned()])
                }
            }
            _ => unreachable!("qcontrib is dispatched for its own ops"),
        }
    }

    /// Whether a QLinearConv / QLinearMatMul / QGemm has the constant scales and zero points
    /// [`Self::qlinear_exact`] needs (every scale, the output zero point, the bias), and for a
    /// QGemm also a requantized output, `alpha` = 1 and no `transA`.
    fn integer_exact(&self, cx: &Ctx) -> R<bool> {
        let kind = QKind::of(&cx.node.op_type);
        let (ys, bias) = kind.late_inputs();
        // A QGemm without y_scale (a float output) takes the float path, before the arity check.
        if kind == QKind::Gemm
            && (!cx.has_input(ys)
                || cx.attr_f_or("alpha", 1.0)? != 1.0
                || cx.attr_i_or("transA", 0)? != 0)
        {
            return Ok(false);
        }
        cx.arity(8, if bias.is_some() { 9 } else { 8 })?;
        let is_const = |j: usize| matches!(self.input(cx, j), Ok(Val::Const(_)));
        let mut need = vec![1, 3, 4, ys, ys + 1];
        if cx.has_input(5) {
            need.push(5);
        }
        if let Some(b) = bias.filter(|&b| cx.has_input(b)) {
            need.push(b);
        }
        Ok(need.into_iter().all(is_const))
    }

    /// QLinearConv / QLinearMatMul / QGemm as onnxruntime's integer kernels compute them: the product
    /// of the zero-point-shifted integers (`(x − x_zp)` and `(w − w_zp)`, plus the int32 bias),
    /// which f32 holds exactly while every partial sum stays below 2^24 (true for 8-bit data
    /// unless a reduction is very long and one-signed), then one f32 multiply by the requantization
    /// multiplier `x_scale · w_scale / y_scale` (per output channel), round half to even, add
    /// the output zero point and saturate, the order `MlasRequantizeOutput` uses.
    fn qlinear_exact(&mut self, cx: &Ctx, rw: &mut Rewrite, kind: QKind) -> R<Outs> {
        let inp = |j: usize| input_name(cx, j);
        let conv = kind == QKind::Conv;
        let (ys_at, bias) = kind.late_inputs();
        let scalar = |me: &Self, j: usize| -> R<f32> {
            let c = me.konst(cx, j, "a scale")?;
            if c.element_count() != 1 {
                return Err(cx.err(format!("input {j} must be a scalar (per-tensor) scale")));
            }
            Ok(c.as_f64()[0] as f32)
        };
        let (xs, ys) = (scalar(self, 1)?, scalar(self, ys_at)?);
        let ws: Vec<f32> = self
            .konst(cx, 4, "the weight scale")?
            .as_f64()
            .iter()
            .map(|&v| v as f32)
            .collect();
        let one = self.const_f32(rw, 1.0);
        let dq1 = |me: &mut Self, rw: &mut Rewrite, x: String, z: String, axis: i64| {
            let ins = if z.is_empty() {
                vec![x, one.clone()]
            } else {
                vec![x, one.clone(), z]
            };
            me.via1(cx, rw, "DequantizeLinear", &ins, vec![attr_i("axis", axis)])
        };
        let trans_b = kind == QKind::Gemm && cx.attr_i_or("transB", 0)? != 0;
        // The weight's per-output-channel axis: 0 of a convolution's and of a transposed [N, K]
        // Gemm operand, else the last.
        let (x_axis, w_axis) = match kind {
            QKind::Conv => (1, 0),
            QKind::Gemm if trans_b => (-2, 0),
            _ => (-2, -1),
        };
        let x = dq1(self, rw, inp(0), inp(2), x_axis)?;
        let w = dq1(self, rw, inp(3), inp(5), w_axis)?;
        let mut ins = vec![x, w];
        if let Some(b) = bias.filter(|&b| cx.has_input(b)) {
            ins.push(dq1(self, rw, inp(b), String::new(), 0)?);
        }
        let (inner, attrs) = match kind {
            QKind::Conv => ("Conv", cx.node.attribute.clone()),
            QKind::MatMul => ("MatMul", vec![]),
            QKind::Gemm => ("Gemm", vec![attr_i("transB", trans_b as i64)]),
        };
        let y = self.via1(cx, rw, inner, &ins, attrs)?;
        let Some(Val::Rt { id: y, .. }) = self.env.get(&y).cloned() else {
            return Err(cx.err(format!("{inner} of run-time data gave no run-time value")));
        };
        let dims = self.dims(y);
        // The requantization multiplier, per output channel: axis 1 of a convolution, the last
        // axis of a product.
        let m: Vec<f32> = ws.iter().map(|&w| (xs * w) / ys).collect();
        let axis = if conv {
            1
        } else {
            dims.len().saturating_sub(1)
        };
        let mc = self
            .b
            .constant("constant", crate::ir::Literal::from_f32(vec![m.len()], &m));
        let mb = if m.len() == 1 {
            let s = self.reshape(cx, mc, Vec::new())?;
            self.bcast(cx, s, Vec::new(), dims.clone())?
        } else {
            self.bcast(cx, mc, vec![axis], dims.clone())?
        };
        let t = self.bin(cx, BinaryOp::Multiply, y, mb)?;
        let zp = self.input(cx, ys_at + 1)?;
        let out_ty = ty_of(&zp);
        let zv = match &zp {
            Val::Const(c) if c.element_count() == 1 => c.as_f64()[0] as f32,
            _ => {
                return Err(cx.err(format!(
                    "input {} (y_zero_point) must be a scalar constant",
                    ys_at + 1
                )));
            }
        };
        let z = self.splat(cx, zv, &dims)?;
        self.saturated(cx, t, Some(z), out_ty)
    }

    /// `DequantizeLinear(x, scale, zero_point?)` along `axis` as a rewritten node; its output name.
    pub(super) fn dq_via(
        &mut self,
        cx: &Ctx,
        rw: &mut Rewrite,
        x: String,
        scale: String,
        zp: String,
        axis: i64,
    ) -> R<String> {
        let ins = if zp.is_empty() {
            vec![x, scale]
        } else {
            vec![x, scale, zp]
        };
        self.via1(cx, rw, "DequantizeLinear", &ins, vec![attr_i("axis", axis)])
    }

    /// `QuantizeLinear(y, scale, zero_point)` of a rewritten node's float result.
    fn requantize(
        &mut self,
        cx: &Ctx,
        rw: &mut Rewrite,
        y: String,
        scale: String,
        zp: String,
    ) -> R<Outs> {
        let ins = if zp.is_empty() {
            vec![y, scale]
        } else {
            vec![y, scale, zp]
        };
        self.via(cx, rw, "QuantizeLinear", &ins, 1, vec![attr_i("axis", 1)])
    }

    /// DynamicQuantizeLinear: uint8 with `scale = (max(0, max x) − min(0, min x)) / 255` and
    /// `zero_point = saturate(round(−min(0, min x) / scale))`.
    fn dynamic_quantize(&mut self, cx: &Ctx) -> R<Outs> {
        let x = self.rt_f32(cx, 0)?;
        let dims = self.dims(x);
        let all: Vec<usize> = (0..dims.len()).collect();
        let z0 = self.b.scalar("constant", 0.0);
        // min(0, min x) and max(0, max x).
        let lo = self.reduce_raw(cx, ReduceKind::Min, x, &all)?;
        let lo = self.reshape(cx, lo, Vec::new())?;
        let lo = self.bin(cx, BinaryOp::Minimum, lo, z0)?;
        let hi = self.reduce_raw(cx, ReduceKind::Max, x, &all)?;
        let hi = self.reshape(cx, hi, Vec::new())?;
        let hi = self.bin(cx, BinaryOp::Maximum, hi, z0)?;
        let span = self.bin(cx, BinaryOp::Subtract, hi, lo)?;
        let q = self.b.scalar("constant", 255.0);
        let scale = self.bin(cx, BinaryOp::Divide, span, q)?;
        let neg_lo = self.bin(cx, BinaryOp::Subtract, z0, lo)?;
        let zr = self.bin(cx, BinaryOp::Divide, neg_lo, scale)?;
        let zr = self.round_even(cx, zr)?;
        let top = self.b.scalar("constant", 255.0);
        let zp = self.add(cx, Op::Clamp, &[z0, zr, top])?;
        let sb = self.bcast(cx, scale, Vec::new(), dims.clone())?;
        let zb = self.bcast(cx, zp, Vec::new(), dims.clone())?;
        let t = self.bin(cx, BinaryOp::Divide, x, sb)?;
        let t = self.round_even(cx, t)?;
        let t = self.bin(cx, BinaryOp::Add, t, zb)?;
        let y = self.add(cx, Op::Clamp, &[z0, t, top])?;
        let y = self.convert(cx, y, DType::I32)?;
        let zp = self.convert(cx, zp, DType::I32)?;
        Ok(vec![
            Some(Val::Rt {
                id: y,
                ty: dt::UINT8,
            }),
            Some(Val::Rt {
                id: scale,
                ty: dt::FLOAT,
            }),
            Some(Val::Rt {
                id: zp,
                ty: dt::UINT8,
            }),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_half_to_even() {
        for (x, want) in [
            (0.5f32, 0.0f32),
            (1.5, 2.0),
            (2.5, 2.0),
            (-0.5, -0.0),
            (-1.5, -2.0),
            (-2.5, -2.0),
            (2.4999998, 2.0),
            (8_388_607.5, 8_388_608.0),
            (1e30, 1e30),
        ] {
            assert_eq!(round_even_f32(x).to_bits(), want.to_bits(), "{x}");
        }
    }
}
