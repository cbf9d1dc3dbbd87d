//! TRANSPOSE_CONV (float and int8) as a stride-1 convolution of the stride-dilated input with the
//! spatially flipped kernel.
//!
//! Contract: inputs `[output_shape, filter [OC, KH, KW, IC], input NHWC, bias?]`; the output has
//! the constant `output_shape`. TFLite's reference (`reference_ops::TransposeConv`) adds
//! `x[iy, ix] · w[ky, kx]` into output `(iy·s − p + ky, ix·s − p + kx)` with `p` the padding
//! before, computed on the *output* size (`ComputePaddingHeightWidth`); that is the convolution of
//! the input dilated by the stride (`s − 1` zeros after every element) with the flipped kernel and
//! padding `k − 1 − p` before (a negative padding crops afterwards). int8 takes the integer
//! convolution's tail (`int8.rs`: per-channel multipliers in double, the filter zero point
//! ignored). The dilated input costs `s²` the products of a direct transposed convolution.

use super::lower::{Importer, NCHW, R};
use crate::front::tflite::read::pb;
use crate::ir::{InstId, Literal, Op, Window};
use xla_aot_tflite_schema::tflite::{ActivationFunctionType, BuiltinOptionsRef as O, Padding};

impl Importer<'_, '_> {
    /// `x` (NCHW) with `s − 1` zeros after every element of spatial dim `d` (2 or 3), the last
    /// run dropped.
    fn dilate(&mut self, x: InstId, d: usize, s: usize, zero: InstId) -> R<InstId> {
        if s == 1 {
            return Ok(x);
        }
        let dims = self.b.shape(x).dims.clone();
        let mut unit = dims.clone();
        unit.insert(d + 1, 1);
        let name = self.name("unit");
        let u = self.b.reshape(&name, x, unit.clone()).map_err(self.ir())?;
        let mut high = vec![0; unit.len()];
        high[d + 1] = s - 1;
        let name = self.name("spread");
        let p = self
            .b
            .add(
                &name,
                Op::Pad {
                    low: vec![0; unit.len()],
                    high,
                },
                &[u, zero],
            )
            .map_err(self.ir())?;
        let mut merged = dims.clone();
        merged[d] *= s;
        let name = self.name("dilated");
        let m = self
            .b
            .reshape(&name, p, merged.clone())
            .map_err(self.ir())?;
        let mut limits = merged.clone();
        limits[d] = (dims[d] - 1) * s + 1;
        let name = self.name("dilated");
        let n = merged.len();
        self.b
            .add(
                &name,
                Op::Slice {
                    starts: vec![0; n],
                    limits,
                    strides: vec![1; n],
                },
                &[m],
            )
            .map_err(self.ir())
    }

    /// TRANSPOSE_CONV.
    pub fn transpose_conv(&mut self) -> R<()> {
        let Some(O::TransposeConvOptions(o)) = &self.op().options else {
            return Err(self.err("the operator has no TransposeConvOptions"));
        };
        let p = pb(self.path, "TransposeConvOptions");
        let padding = o.padding().map_err(&p)?;
        let stride = [o.stride_h().map_err(&p)?, o.stride_w().map_err(&p)?];
        let act = o.fused_activation_function().map_err(&p)?;
        let stride: Vec<usize> = stride
            .iter()
            .map(|&s| usize::try_from(s).ok().filter(|&s| s > 0))
            .collect::<Option<_>>()
            .ok_or_else(|| self.err(format!("strides {stride:?} must be positive")))?;
        let (st, wt, xt) = (self.need(0)?, self.need(1)?, self.need(2)?);
        let quantized = self.is_quantized(xt);
        if !quantized {
            self.check_float(xt)?;
            self.check_float(wt)?;
        }
        let shape = self.const_ints(st)?;
        let x = self.val(xt)?;
        let xd = self.dims(&x);
        let wd = self.tensor(wt).shape.clone();
        if xd.len() != 4 || wd.len() != 4 || shape.len() != 4 || wd[3] != xd[3] {
            return Err(self.err(format!(
                "input {xd:?}, filter {wd:?} and output shape {shape:?} must be NHWC, [OC, KH, KW, IC] and 4 values"
            )));
        }
        let out: Vec<usize> = shape.iter().map(|&v| v.max(0) as usize).collect();
        if out[3] != wd[0] || out[0] != xd[0] {
            return Err(self.err(format!(
                "the output shape {shape:?} does not fit the filter {wd:?} and input {xd:?}"
            )));
        }
        // The padding before, on the output size (TFLite's ComputePaddingHeightWidth).
        let (kh, kw) = (wd[1], wd[2]);
        let before = |i: usize, k: usize| -> usize {
            match padding {
                Padding::Same => {
                    let o = out[1 + i];
                    let need = ((o.div_ceil(stride[i])).max(1) - 1) * stride[i] + k;
                    need.saturating_sub(o) / 2
                }
                Padding::Valid => 0,
            }
        };
        let pads = [before(0, kh), before(1, kw)];
        // The flipped kernel [OC, IC, KH, KW], built here (the weights are constants).
        let w: Vec<f32> = if quantized {
            self.int_data(wt)?.iter().map(|&v| v as f32).collect()
        } else {
            self.literal(wt)?
                .to_f32_vec()
                .ok_or_else(|| self.err("the filter is not float32"))?
        };
        let (oc, ic) = (wd[0], wd[3]);
        let mut k = vec![0.0f32; w.len()];
        for o in 0..oc {
            for y in 0..kh {
                for xx in 0..kw {
                    for c in 0..ic {
                        let src = ((o * kh + y) * kw + xx) * ic + c;
                        let dst = ((o * ic + c) * kh + (kh - 1 - y)) * kw + (kw - 1 - xx);
                        k[dst] = w[src];
                    }
                }
            }
        }
        let kernel = self.b.constant(
            &self.name("kernel"),
            Literal::from_f32(vec![oc, ic, kh, kw], &k),
        );
        // The input, NCHW, centred for int8, then dilated by the strides.
        let mut xi = self.permuted(&x, &NCHW)?;
        let z_in = if quantized { self.q_scalar(xt)?.1 } else { 0 };
        if quantized {
            xi = self.convert(xi, crate::ir::DType::F32, "as_f32")?;
            if z_in != 0 {
                let z = self.splat(z_in as f32, xi)?;
                xi = self.binary("centered", crate::ir::BinaryOp::Subtract, xi, z)?;
            }
        }
        let zero = self.b.scalar(&self.name("zero"), 0.0);
        let xi = self.dilate(xi, 2, stride[0], zero)?;
        let xi = self.dilate(xi, 3, stride[1], zero)?;
        let dd = self.b.shape(xi).dims.clone();
        let mut window = Window::new(vec![kh, kw]);
        let mut crop = [(0usize, 0usize); 2];
        for (i, (&k, &p)) in [kh, kw].iter().zip(&pads).enumerate() {
            let lo = k as i64 - 1 - p as i64;
            let hi = out[1 + i] as i64 - dd[2 + i] as i64 - lo + k as i64 - 1;
            window.pad_low[i] = lo.max(0) as usize;
            window.pad_high[i] = hi.max(0) as usize;
            crop[i] = ((-lo).max(0) as usize, (-hi).max(0) as usize);
        }
        let name = self.name("conv");
        let mut y = self
            .b
            .add(
                &name,
                Op::Convolution {
                    window,
                    feature_group_count: 1,
                },
                &[xi, kernel],
            )
            .map_err(self.ir())?;
        if crop.iter().any(|&(a, b)| a + b > 0) {
            let yd = self.b.shape(y).dims.clone();
            let name = self.name("crop");
            y = self
                .b
                .add(
                    &name,
                    Op::Slice {
                        starts: vec![0, 0, crop[0].0, crop[1].0],
                        limits: vec![yd[0], yd[1], yd[2] - crop[0].1, yd[3] - crop[1].1],
                        strides: vec![1; 4],
                    },
                    &[y],
                )
                .map_err(self.ir())?;
        }
        if self.b.shape(y).dims != [out[0], out[3], out[1], out[2]] {
            return Err(self.err(format!(
                "the transposed convolution gives {:?} (NCHW), the output shape is {shape:?}",
                self.b.shape(y).dims
            )));
        }
        let o = self.output_index(0)?;
        if quantized {
            return self.transpose_conv_tail_i8(y, wt, oc, act);
        }
        // Bias is input 3 here.
        if let Some(bt) = self.input_index(3) {
            self.check_float(bt)?;
            let bias = self.tflite(bt)?;
            let dims = self.b.shape(y).dims.clone();
            let name = self.name("bias");
            let bb = self
                .b
                .broadcast(&name, bias, vec![1], dims)
                .map_err(self.ir())?;
            y = self.binary("biased", crate::ir::BinaryOp::Add, y, bb)?;
        }
        let y = if act == ActivationFunctionType::None {
            y
        } else {
            self.activation(y, act)?
        };
        self.set_nchw(o, y);
        Ok(())
    }
}
