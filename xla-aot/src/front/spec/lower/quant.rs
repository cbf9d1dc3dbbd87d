//! The spec's quantization ops: `quantize` (f32 → the integers of `u8` or `i8`) and `dequantize`
//! (integers → f32), with ONNX `QuantizeLinear` / `DequantizeLinear` semantics.
//!
//! Contract:
//! - `quantize(x, scale, zero_point?)`, attributes `dtype` (`u8`, default, or `i8`) and `axis`
//!   (default 1, used when `scale` is 1-D): `saturate(round_half_even(x / scale) + zero_point)`
//!   into `[0, 255]` or `[-128, 127]`, computed as `front/onnx/quant.rs` computes it (clamp to the
//!   range shifted by the zero point, round with the 1.5·2^23 shift, add the zero point), so the
//!   same model written as a spec and as ONNX QDQ gives the same integers. The result is an i32
//!   tensor (the IR computes integers in i32, `ir/api.rs`); as a model output it is passed to
//!   the caller as `uint8_t` / `int8_t`.
//! - `dequantize(q, scale, zero_point?)`, attribute `axis`: `(f32(q) − zero_point) · scale`. `q`
//!   is an i32 tensor: a `quantize` result, a `u8`/`i8` model input, or an int8/uint8 weight of
//!   the params file (loaded as its integers); a dequantized constant weight folds at compile
//!   time and is stored as int8 where the kernels read it packed (`docs/quantization.md`).
//! - A `conv2d` or `dense` whose data input is a per-tensor `dequantize` computes on its centred
//!   integers and multiplies the product by the scale (`s·Σ(q − z)·w` instead of `Σ((q − z)·s)·w`,
//!   as onnxruntime's `QLinearConv` does), so the int8 kernels take it (`codegen/core/packing.rs`
//!   reads an integer-valued data operand); the results differ from the f32 form by rounding only.
//! - `scale` is an f32 scalar or a 1-D f32 tensor of the `axis` dim's length (per channel);
//!   `zero_point` (f32 or i32, a weight, constant or input) the same shape as `scale`. A scale
//!   that is a constant must be positive and finite.

use super::{Lowerer, OpDecl, R};
use crate::ir::value_range::ROUND_SHIFT;
use crate::ir::{BinaryOp, DType, InstId, Op};

/// The integer range of a quantized spec dtype.
pub fn q_range(dtype: &str) -> Option<(f32, f32, DType)> {
    match dtype {
        "u8" => Some((0.0, 255.0, DType::U8)),
        "i8" => Some((-128.0, 127.0, DType::I8)),
        _ => None,
    }
}

/// A `dequantize` result: the centred integers `f32(q) − zero_point`, the scale, and the axis
/// of a 1-D scale (`None`: a scalar).
#[derive(Debug, Clone, Copy)]
pub struct Dequantized {
    pub centred: InstId,
    pub scale: InstId,
    pub axis: Option<usize>,
}

/// What a product computed on centred integers is multiplied by: one scalar or per-channel
/// factor, or (scales known only at run time) each operand's.
pub struct Rescale {
    factors: Vec<InstId>,
}

impl<'a> Lowerer<'a> {
    /// The `axis` attribute of a quantization op over `rank` dims (default 1, as ONNX).
    fn q_axis(&self, d: &OpDecl, rank: usize) -> R<usize> {
        match self.attr_int(d, "axis")? {
            Some(a) => self.axis(d, "axis", a, rank),
            None => Ok(1.min(rank.saturating_sub(1))),
        }
    }

    /// `scale` (input 1) and the optional zero point (input 2) as f32 values broadcast to `dims`
    /// along `axis` (when they are 1-D).
    fn q_params(
        &mut self,
        d: &OpDecl,
        ins: &[InstId],
        dims: &[usize],
    ) -> R<(InstId, Option<InstId>)> {
        let name = d.name.clone();
        let axis = self.q_axis(d, dims.len())?;
        self.expect_dtype(d, 1, ins[1], DType::F32)?;
        if let Some(v) = self.constant_values(ins[1]) {
            if let Some(bad) = v.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
                return Err(self.shape_err(
                    d,
                    format!(
                        "scale `{}` holds {bad}; scales must be positive and finite",
                        d.inputs[1]
                    ),
                ));
            }
        }
        let spread = |lw: &mut Self, j: usize, id: InstId, what: &str| -> R<InstId> {
            let sd = lw.dims(id);
            match sd.as_slice() {
                [] => lw.bcast(d, &format!("{name}.{what}"), id, Vec::new(), dims.to_vec()),
                [n] if !dims.is_empty() && *n == dims[axis] => {
                    lw.bcast(d, &format!("{name}.{what}"), id, vec![axis], dims.to_vec())
                }
                _ => Err(lw.shape_err(
                    d,
                    format!(
                        "`{}` ({what}) has shape {:?}: expected a scalar or [{}] (the length of axis {axis} of {:?})",
                        d.inputs[j],
                        sd,
                        dims.get(axis).copied().unwrap_or(1),
                        dims
                    ),
                )),
            }
        };
        let s = spread(self, 1, ins[1], "scale")?;
        let z = match ins.get(2) {
            None => None,
            Some(&z) => {
                let zf = if self.b.dtype(z) == DType::F32 {
                    z
                } else {
                    self.expect_dtype(d, 2, z, DType::I32)?;
                    self.add(
                        d,
                        &format!("{name}.zero_point.f32"),
                        Op::Convert { to: DType::F32 },
                        &[z],
                    )?
                };
                Some(spread(self, 2, zf, "zero_point")?)
            }
        };
        Ok((s, z))
    }

    /// The f32 values of constant `id` (an inline constant or a loaded weight), if it is one.
    fn constant_values(&self, id: InstId) -> Option<Vec<f32>> {
        match &self.b.inst(id).op {
            Op::Constant(l) => l.to_f32_vec(),
            _ => None,
        }
    }

    /// `quantize(x, scale, zero_point?)` (module doc).
    pub(super) fn quantize(&mut self, d: &OpDecl, ins: &[InstId]) -> R<InstId> {
        let name = d.name.clone();
        let dtype = match d.attr("dtype") {
            None => "u8".to_string(),
            Some(v) => v.as_str().unwrap_or("").to_string(),
        };
        let Some((lo, hi, _)) = q_range(&dtype) else {
            return Err(self.attr_err(
                d,
                "dtype",
                format!(
                    "expected `u8` or `i8`, found {}",
                    super::describe(d.attr("dtype").expect("given"))
                ),
            ));
        };
        let x = ins[0];
        let dims = self.dims(x);
        let (s, z) = self.q_params(d, ins, &dims)?;
        let t = self.binary(d, &format!("{name}.scaled"), BinaryOp::Divide, x, s)?;
        let (lo_b, hi_b) = match z {
            None => (
                self.b.scalar(&format!("{name}.lo"), lo),
                self.b.scalar(&format!("{name}.hi"), hi),
            ),
            Some(z) => {
                let l = self.splat(d, &format!("{name}.lo"), lo, &dims)?;
                let h = self.splat(d, &format!("{name}.hi"), hi, &dims)?;
                (
                    self.binary(d, &format!("{name}.lo_z"), BinaryOp::Subtract, l, z)?,
                    self.binary(d, &format!("{name}.hi_z"), BinaryOp::Subtract, h, z)?,
                )
            }
        };
        let c = self.add(d, &format!("{name}.clamped"), Op::Clamp, &[lo_b, t, hi_b])?;
        let k = self.splat(d, &format!("{name}.shift"), ROUND_SHIFT, &dims)?;
        let up = self.binary(d, &format!("{name}.up"), BinaryOp::Add, c, k)?;
        let mut r = self.binary(d, &format!("{name}.rounded"), BinaryOp::Subtract, up, k)?;
        if let Some(z) = z {
            r = self.binary(d, &format!("{name}.shifted"), BinaryOp::Add, r, z)?;
        }
        self.add(d, &name, Op::Convert { to: DType::I32 }, &[r])
    }

    /// The operands a `conv2d` or `dense` computes on (`x` and the weight `w`, whose output
    /// channels are weight axis 0): for a per-tensor `dequantize` data operand and a weight
    /// dequantized per tensor or along axis 0, their centred integers; with the scale the product
    /// is then multiplied by ([`Self::rescale`], one value per output channel).
    pub(super) fn integer_operands(
        &mut self,
        d: &OpDecl,
        x: InstId,
        w: InstId,
    ) -> R<(InstId, InstId, Option<Rescale>)> {
        let dx = self
            .dequantized
            .get(&x)
            .copied()
            .filter(|q| q.axis.is_none());
        let dw = self
            .dequantized
            .get(&w)
            .copied()
            .filter(|q| q.axis.is_none() || q.axis == Some(0));
        let (x, w) = (dx.map_or(x, |q| q.centred), dw.map_or(w, |q| q.centred));
        let scales: Vec<Dequantized> = dx.into_iter().chain(dw).collect();
        if scales.is_empty() {
            return Ok((x, w, None));
        }
        let per_channel = scales.iter().any(|q| q.axis.is_some());
        // Constant scales combine into one constant (one rounding per channel, which
        // batch-norm folding then moves into the integer weights exactly once).
        let values: Option<Vec<Vec<f32>>> = scales
            .iter()
            .map(|q| self.constant_values(q.scale))
            .collect();
        let name = d.name.clone();
        let factors = match values {
            Some(vs) => {
                let n = vs.iter().map(Vec::len).max().unwrap_or(1);
                let combined: Vec<f32> = (0..n)
                    .map(|i| {
                        vs.iter()
                            .map(|v| if v.len() == 1 { v[0] } else { v[i] })
                            .product()
                    })
                    .collect();
                let dims = if per_channel { vec![n] } else { Vec::new() };
                vec![self.b.constant(
                    &format!("{name}.scale"),
                    crate::ir::Literal::from_f32(dims, &combined),
                )]
            }
            None => scales.iter().map(|q| q.scale).collect(),
        };
        Ok((x, w, Some(Rescale { factors })))
    }

    /// `product · scale` when the product was computed on centred integers
    /// ([`Self::integer_operands`]; `channel`: the product's output-channel dim), named after the
    /// op unless a bias follows.
    pub(super) fn rescale(
        &mut self,
        d: &OpDecl,
        product: InstId,
        scale: Option<Rescale>,
        channel: usize,
        has_bias: bool,
    ) -> R<InstId> {
        let Some(r) = scale else {
            return Ok(product);
        };
        let od = self.dims(product);
        let name = d.name.clone();
        let mut out = product;
        for (i, &f) in r.factors.iter().enumerate() {
            let along = if self.dims(f).is_empty() {
                Vec::new()
            } else {
                vec![channel]
            };
            let fb = self.bcast(d, &format!("{name}.scale.{i}"), f, along, od.clone())?;
            let last = i + 1 == r.factors.len();
            let nm = if last && !has_bias {
                name.clone()
            } else {
                format!("{name}.scaled.{i}")
            };
            out = self.binary(d, &nm, BinaryOp::Multiply, out, fb)?;
        }
        Ok(out)
    }

    /// `dequantize(q, scale, zero_point?)` (module doc).
    pub(super) fn dequantize(&mut self, d: &OpDecl, ins: &[InstId]) -> R<InstId> {
        let name = d.name.clone();
        self.expect_dtype(d, 0, ins[0], DType::I32)?;
        let dims = self.dims(ins[0]);
        let (s, z) = self.q_params(d, ins, &dims)?;
        let mut v = self.add(
            d,
            &format!("{name}.f32"),
            Op::Convert { to: DType::F32 },
            &[ins[0]],
        )?;
        if let Some(z) = z {
            v = self.binary(d, &format!("{name}.centred"), BinaryOp::Subtract, v, z)?;
        }
        let out = self.binary(d, &name, BinaryOp::Multiply, v, s)?;
        // A conv2d or dense reading `out` may compute on `v` and scale after.
        let axis = (!self.dims(ins[1]).is_empty()).then(|| self.q_axis(d, dims.len()));
        let axis = match axis {
            Some(a) => Some(a?),
            None => None,
        };
        self.dequantized.insert(
            out,
            Dequantized {
                centred: v,
                scale: ins[1],
                axis,
            },
        );
        Ok(out)
    }
}
