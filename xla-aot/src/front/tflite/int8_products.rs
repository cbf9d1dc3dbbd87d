//! TFLite's integer products, as TFLite Micro's reference kernels compute them: CONV_2D,
//! DEPTHWISE_CONV_2D, TRANSPOSE_CONV's tail and FULLY_CONNECTED over int8 weights (the
//! arithmetic is `int8.rs`'s contract: `acc = Σ w · (q − z_in) + bias`, per-channel
//! `multiply-q31`, the zero point, the activation clamp).
//!
//! Contract: each product's requantization runs on integer-valued f32 when
//! [`Importer::f32_plan`] proves every partial sum exact there (a register epilogue of the int8
//! kernels, `codegen/cpu/epilogue.rs`), else in i32; both give TFLite Micro's integers.

use super::lower::{Importer, NCHW, R, Val};
use crate::ir::fixed_point::{
    QuantizedMultiplier, multiply_by_quantized_multiplier, quantize_multiplier,
};
use crate::ir::value_range::F32_EXACT_INT;
use crate::ir::{BinaryOp, DType, InstId, Literal, Op, Window};
use xla_aot_tflite_schema::tflite::ActivationFunctionType;

/// A product's requantization on integer-valued f32 ([`Importer::f32_plan`]).
#[derive(Debug, Clone)]
pub(super) struct F32Plan {
    /// Per channel (empty: no bias).
    bias: Vec<i32>,
    /// One, or one per channel.
    mult: Vec<QuantizedMultiplier>,
}

impl Importer<'_, '_> {
    /// Integer weights of `wt` as integer-valued f32, and the per-channel scales. TFLite Micro
    /// subtracts the weights' zero point only in a per-tensor FULLY_CONNECTED (`with_zero_point`);
    /// convolutions and per-channel dense layers ignore it.
    fn weights_i8(&self, wt: usize, with_zero_point: bool) -> R<(Literal, Vec<f32>)> {
        let tensor = self.tensor(wt);
        if !self.is_quantized(wt) {
            return Err(self.err(format!(
                "{} is not quantized; an integer kernel takes int8 weights",
                self.tensor_name(wt)
            )));
        }
        let q = tensor.quant.as_ref().expect("is_quantized");
        let z = if !with_zero_point || q.scale.len() != 1 {
            0
        } else {
            i32::try_from(q.zero_point.first().copied().unwrap_or(0)).map_err(|_| {
                self.err(format!(
                    "{} has an out-of-range zero point",
                    self.tensor_name(wt)
                ))
            })?
        };
        let v: Vec<f32> = self.int_data(wt)?.iter().map(|&x| (x - z) as f32).collect();
        Ok((Literal::from_f32(tensor.shape.clone(), &v), q.scale.clone()))
    }

    /// The int32 bias (input 2), if present, added to i32 `acc` along IR dim `dim`.
    fn bias_i32(&mut self, acc: InstId, dim: usize, channels: usize) -> R<InstId> {
        self.bias_i32_at(2, acc, dim, channels)
    }

    /// The bias `v` (none when empty), added to integer-valued f32 `acc` along IR dim `dim`
    /// (exact: [`Importer::f32_plan`] bounds it).
    fn bias_f32(&mut self, v: &[i32], acc: InstId, dim: usize, channels: usize) -> R<InstId> {
        if v.is_empty() {
            return Ok(acc);
        }
        let f: Vec<f32> = v.iter().map(|&b| b as f32).collect();
        self.add_bias(
            acc,
            Literal::from_f32(vec![v.len()], &f),
            dim,
            channels,
            "the bias",
        )
    }

    /// The int32 bias at input `j`, if present, added to i32 `acc` along IR dim `dim`.
    fn bias_i32_at(&mut self, j: usize, acc: InstId, dim: usize, channels: usize) -> R<InstId> {
        let Some(bt) = self.input_index(j) else {
            return Ok(acc);
        };
        let v = self.int_data(bt)?;
        let what = format!("the bias {}", self.tensor_name(bt));
        self.add_bias(
            acc,
            Literal::from_i32(vec![v.len()], &v),
            dim,
            channels,
            &what,
        )
    }

    /// `acc` plus the per-channel constant `bias` broadcast along IR dim `dim`; `what` names it
    /// in the error when it does not hold `channels` values.
    fn add_bias(
        &mut self,
        acc: InstId,
        bias: Literal,
        dim: usize,
        channels: usize,
        what: &str,
    ) -> R<InstId> {
        let n = bias.element_count();
        if n != channels {
            return Err(self.err(format!("{what} has {n} values for {channels} channels")));
        }
        let c = self.b.constant(&self.name("bias"), bias);
        let dims = self.b.shape(acc).dims.clone();
        let name = self.name("bias_b");
        let bb = self
            .b
            .broadcast(&name, c, vec![dim], dims)
            .map_err(self.ir())?;
        self.binary("biased", BinaryOp::Add, acc, bb)
    }

    /// Per-channel multipliers `s_in · s_w[c] / s_out`, each scale widened to double first (the
    /// `tflite-micro` build the tests compare with; TFLite's source of 2026-08 formed a per-tensor
    /// FULLY_CONNECTED's product in float).
    fn product_multipliers(s_in: f32, s_w: &[f32], s_out: f32) -> Vec<QuantizedMultiplier> {
        s_w.iter()
            .map(|&w| quantize_multiplier(f64::from(s_in) * f64::from(w) / f64::from(s_out)))
            .collect()
    }

    /// The integer CONV_2D / DEPTHWISE_CONV_2D after the float path has checked the geometry.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_i8(
        &mut self,
        x: &Val,
        wt: usize,
        kernel_perm: Vec<usize>,
        groups: usize,
        out_channels: usize,
        window: Window,
        act: ActivationFunctionType,
    ) -> R<()> {
        let xt = self.need(0)?;
        let (_, z_in, _, _) = self.q_scalar(xt)?;
        let (w, s_w) = self.weights_i8(wt, false)?;
        if s_w.len() != 1 && s_w.len() != out_channels {
            return Err(self.err(format!(
                "{} has {} scales for {out_channels} output channels",
                self.tensor_name(wt),
                s_w.len()
            )));
        }
        let xi = self.permuted(x, &NCHW)?;
        let xs = self.centered(xi, z_in)?;
        // CONV_2D's kernel is [O, KH, KW, I], DEPTHWISE_CONV_2D's [1, KH, KW, C·M].
        let channel_axis = if groups == 1 { 0 } else { 3 };
        let (m, z_out, (lo, hi)) = self.requantization(0, &s_w, act)?;
        let mut w = w;
        let plan = self.f32_plan(&mut w, channel_axis, (0, 2), &m, (z_out, lo, hi))?;
        let wc = self.b.constant(&self.name("weights"), w);
        let (xs, kernel_perm, window) = if groups == 1 && self.b.shape(xs).dims[1] == 1 {
            self.taps_as_channels(xs, window)?
        } else {
            (xs, kernel_perm, window)
        };
        let y = self.conv_nchw(xs, wc, kernel_perm, window, groups)?;
        self.conv_tail_i8(y, (0, 2), &s_w, out_channels, act, plan)
    }

    /// A one-channel CONV_2D (a keyword-spotting network's first layer over a spectrogram) as
    /// a convolution over `KW` channels: input channel `k` is the (padded) input shifted by tap
    /// `k` and sampled at the window's horizontal stride, the kernel `[O, KH, KW, 1]` read as
    /// `[O, KW, KH, 1]`, the window `KH × 1`. The same products and sums (the integer kernels
    /// multiply four channels per step: one channel would fill a quarter of each); the copy is
    /// the input's size times `KW / stride`. Returns `(input, kernel permutation, window)`;
    /// unchanged (the OIHW permutation) where the window is one wide or dilated horizontally.
    fn taps_as_channels(&mut self, xs: InstId, window: Window) -> R<(InstId, Vec<usize>, Window)> {
        const OIHW: [usize; 4] = [0, 3, 1, 2];
        let (kw, sw, dw) = (window.size[1], window.stride[1], window.dilation[1]);
        if kw < 2 || dw != 1 {
            return Ok((xs, OIHW.to_vec(), window));
        }
        let d = self.b.shape(xs).dims.clone();
        let (pl, ph) = (window.pad_low[1], window.pad_high[1]);
        let padded_w = d[3] + pl + ph;
        let ow = (padded_w - kw) / sw + 1;
        let xp = if pl + ph > 0 {
            let zero = self.b.scalar(&self.name("tap_pad_value"), 0.0);
            let name = self.name("tap_pad");
            self.b
                .add(
                    &name,
                    Op::Pad {
                        low: vec![0, 0, 0, pl],
                        high: vec![0, 0, 0, ph],
                    },
                    &[xs, zero],
                )
                .map_err(self.ir())?
        } else {
            xs
        };
        let mut taps = Vec::with_capacity(kw);
        for k in 0..kw {
            let t = self.slice_with_strides(
                &format!("tap{k}"),
                xp,
                vec![0, 0, 0, k],
                vec![d[0], 1, d[2], k + sw * (ow - 1) + 1],
                vec![1, 1, 1, sw],
            )?;
            taps.push(t);
        }
        let name = self.name("taps");
        let x = self
            .b
            .add(&name, Op::Concatenate { dimension: 1 }, &taps)
            .map_err(self.ir())?;
        let mut w = Window::new(vec![window.size[0], 1]);
        w.stride[0] = window.stride[0];
        w.dilation[0] = window.dilation[0];
        w.pad_low[0] = window.pad_low[0];
        w.pad_high[0] = window.pad_high[0];
        // [O, KH, KW, 1] → OIHW [O, KW, KH, 1].
        Ok((x, vec![0, 2, 1, 3], w))
    }

    /// How a product's requantization runs on integer-valued f32 (a register epilogue), decided
    /// from its integer weights `w` (output channel `c` at index `c` of `channel_axis`; channels
    /// that [`F32Plan::constant`] names are zeroed in place), its input tensor (input `x_at`),
    /// its bias (input `bias_at`), the multipliers `m` (one, or one per channel), the output's
    /// zero point and clamp: `None` where some sum `Σ w · (q − z_in) + bias` may leave f32's
    /// exact integers ([`F32_EXACT_INT`]), in any partial sum (the i32 tail then).
    ///
    /// A channel whose sums all give one output `k` (`multiply-q31` is monotone without a left
    /// shift, so its two extreme sums tell) is computed as that constant: weights zero, bias
    /// `2·(k − z_out)`, multiplier `(2^31 − 1, −1)`, which gives `k − z_out` back exactly and
    /// keeps every shift negative. The converter writes such channels: all-zero weights whose
    /// bias it quantized with a tiny scale (near 2^30), or a bias that dwarfs the products.
    fn f32_plan(
        &self,
        w: &mut Literal,
        channel_axis: usize,
        (x_at, bias_at): (usize, usize),
        m: &[QuantizedMultiplier],
        (z_out, lo, hi): (i32, i32, i32),
    ) -> R<Option<F32Plan>> {
        let xt = self.need(x_at)?;
        let (_, z, qmin, qmax) = self.q_scalar(xt)?;
        let x_max = f64::from((qmin - z).abs().max((qmax - z).abs()));
        let Some(mut v) = w.to_f32_vec() else {
            return Ok(None);
        };
        let channels = w.dims.get(channel_axis).copied().unwrap_or(1).max(1);
        let inner: usize = w.dims[channel_axis + 1..].iter().product::<usize>().max(1);
        let channel_of = |i: usize| (i / inner) % channels;
        let mut sums = vec![0f64; channels];
        for (i, x) in v.iter().enumerate() {
            sums[channel_of(i)] += f64::from(x.abs());
        }
        let mut bias = match self.input_index(bias_at) {
            Some(bt) => self.int_data(bt)?,
            None => Vec::new(),
        };
        let mut mult = m.to_vec();
        let mut constant = Vec::new();
        for (c, &sum) in sums.iter().enumerate() {
            let reach = sum * x_max;
            let b = bias.get(c).copied().unwrap_or(0);
            if reach + f64::from(b).abs() <= F32_EXACT_INT {
                continue;
            }
            let mc = m[if m.len() == 1 { 0 } else { c }];
            // Every sum of the channel lies in [b − reach, b + reach]; TFLite's int32 sums must
            // not wrap.
            let (r, b64) = (reach.ceil() as i64, i64::from(b));
            if bias.len() != channels
                || mc.shift > 0
                || b64 - r < i64::from(i32::MIN)
                || b64 + r > i64::from(i32::MAX)
            {
                return Ok(None);
            }
            let out = |acc: i64| {
                (i64::from(multiply_by_quantized_multiplier(acc as i32, mc)) + i64::from(z_out))
                    .clamp(i64::from(lo), i64::from(hi))
            };
            let k = out(b64 - r);
            if out(b64 + r) != k {
                return Ok(None);
            }
            if mult.len() == 1 {
                mult = vec![mult[0]; channels];
            }
            bias[c] = (2 * (k - i64::from(z_out))) as i32;
            mult[c] = QuantizedMultiplier {
                significand: i32::MAX,
                shift: -1,
            };
            constant.push(c);
        }
        if !constant.is_empty() {
            for (i, x) in v.iter_mut().enumerate() {
                if constant.contains(&channel_of(i)) {
                    *x = 0.0;
                }
            }
            *w = Literal::from_f32(w.dims.clone(), &v);
        }
        Ok(Some(F32Plan { bias, mult }))
    }

    /// A product's multipliers (from the scales of input `x_at`, the weights' `s_w` and the
    /// output), the output's zero point and its activation range.
    fn requantization(
        &self,
        x_at: usize,
        s_w: &[f32],
        act: ActivationFunctionType,
    ) -> R<(Vec<QuantizedMultiplier>, i32, (i32, i32))> {
        let xt = self.need(x_at)?;
        let out = self.output_index(0)?;
        let (s_in, _, _, _) = self.q_scalar(xt)?;
        let (s_out, z_out, _, _) = self.q_scalar(out)?;
        let range = self.activation_range(out, act)?;
        Ok((Self::product_multipliers(s_in, s_w, s_out), z_out, range))
    }

    /// A convolution's integer tail: its f32 sums `y` (NCHW, integer-valued) to int32, the int32
    /// bias of input `bias_at`, per-channel requantization with the scales of input `x_at`, the
    /// weights' `s_w` and the output, recorded NCHW.
    fn conv_tail_i8(
        &mut self,
        y: InstId,
        (x_at, bias_at): (usize, usize),
        s_w: &[f32],
        out_channels: usize,
        act: ActivationFunctionType,
        plan: Option<F32Plan>,
    ) -> R<()> {
        let out = self.output_index(0)?;
        let (m, z_out, range) = self.requantization(x_at, s_w, act)?;
        let q = if let Some(plan) = plan {
            let acc = self.bias_f32(&plan.bias, y, 1, out_channels)?;
            self.requantize_acc(acc, &plan.mult, 1, z_out, range)?
        } else {
            let acc = self.convert(y, DType::I32, "acc")?;
            let acc = self.bias_i32_at(bias_at, acc, 1, out_channels)?;
            self.requantize_acc(acc, &m, 1, z_out, range)?
        };
        self.set_nchw(out, q);
        Ok(())
    }

    /// The integer TRANSPOSE_CONV's tail: the convolution's f32 sums `y` (NCHW, integer-valued),
    /// the int32 bias (input 3), per-channel requantization as CONV_2D's.
    pub fn transpose_conv_tail_i8(
        &mut self,
        y: InstId,
        wt: usize,
        oc: usize,
        act: ActivationFunctionType,
    ) -> R<()> {
        let s_w = self
            .tensor(wt)
            .quant
            .as_ref()
            .map(|q| q.scale.clone())
            .unwrap_or_default();
        if s_w.len() != 1 && s_w.len() != oc {
            return Err(self.err(format!(
                "{} has {} scales for {oc} channels",
                self.tensor_name(wt),
                s_w.len()
            )));
        }
        self.conv_tail_i8(y, (2, 3), &s_w, oc, act, None)
    }

    /// The integer FULLY_CONNECTED of `[batch, K]` data.
    pub fn fully_connected_i8(
        &mut self,
        x: InstId,
        wt: usize,
        act: ActivationFunctionType,
        keep: Option<Vec<usize>>,
    ) -> R<()> {
        let xt = self.need(0)?;
        let out = self.output_index(0)?;
        let (_, z_in, _, _) = self.q_scalar(xt)?;
        let (w, s_w) = self.weights_i8(wt, true)?;
        let o = w.dims[0];
        if s_w.len() != 1 && s_w.len() != o {
            return Err(self.err(format!(
                "{} has {} scales for {o} outputs",
                self.tensor_name(wt),
                s_w.len()
            )));
        }
        let xs = self.centered(x, z_in)?;
        let (m, z_out, range) = self.requantization(0, &s_w, act)?;
        let mut w = w;
        let plan = self.f32_plan(&mut w, 0, (0, 2), &m, (z_out, range.0, range.1))?;
        let wc = self.b.constant(&self.name("weights"), w);
        let y = self.dense_dot(xs, wc)?;
        let mut q = if let Some(plan) = plan {
            let acc = self.bias_f32(&plan.bias, y, 1, o)?;
            self.requantize_acc(acc, &plan.mult, 1, z_out, range)?
        } else {
            let acc = self.convert(y, DType::I32, "acc")?;
            let acc = self.bias_i32(acc, 1, o)?;
            self.requantize_acc(acc, &m, 1, z_out, range)?
        };
        if let Some(dims) = keep {
            let name = self.name("keep_dims");
            q = self.b.reshape(&name, q, dims).map_err(self.ir())?;
        }
        let rank = self.b.shape(q).dims.len();
        self.set(out, Val::plain(q, rank));
        Ok(())
    }
}
