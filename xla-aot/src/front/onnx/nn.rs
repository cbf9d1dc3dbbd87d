//! Neural-network ONNX ops: Conv, Gemm, MatMul, BatchNormalization, InstanceNormalization,
//! LayerNormalization, MaxPool/AveragePool/LpPool, GlobalAveragePool/GlobalMaxPool, Softmax,
//! LogSoftmax, LRN.
//!
//! Contract: all are float only. Convolutions are 2-D (`bf01_oi01->bf01`) or 1-D (run as 2-D
//! with a unit height), with groups, strides, dilations, explicit pads or `auto_pad`; pools take
//! any number of spatial dims, `ceil_mode` (by extra high padding that no window counts) and
//! `count_include_pad`; LpPool sums |x|^p over the window (padding counts as zeros) and takes the
//! p-th root. Normalisations are inference forms; a `training_mode` of 1 is rejected.
//! Softmax and LogSoftmax read the model's opset: one axis (default -1) from opset 13, the 2-D
//! coercion at `axis` (default 1) before; computed stably (max subtracted). LRN is decomposed
//! into a windowed sum of squares over the channels, a power and a division.

use super::context::{Ctx, Importer, R, Val, broadcast_dims, ty_of};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use crate::front::decompose::{self, CountOrder, DEFAULT_EPSILON, Moments};
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, DType, DotDims, InstId, Op, ReduceKind, UnaryOp, Window};

/// Spatial padding of a conv or pool: explicit `pads` or `auto_pad`, per spatial dim.
struct Padding {
    low: Vec<usize>,
    high: Vec<usize>,
}

/// A pool's window and where its padding comes from.
struct PoolWindow {
    window: Window,
    kernel: Vec<usize>,
    /// The explicit or `auto_pad` padding.
    pads: Padding,
    /// The `ceil_mode` extension of the high padding, per spatial dim.
    extra: Vec<usize>,
}

/// `v` after two leading entries `pad` (the batch and channel dims).
fn spatial_full(v: &[usize], pad: usize) -> Vec<usize> {
    let mut o = vec![pad; 2];
    o.extend_from_slice(v);
    o
}

impl Importer {
    fn spatial_attr(&self, cx: &Ctx, name: &str, n: usize, default: usize) -> R<Vec<usize>> {
        match cx.attr_ints(name)? {
            None => Ok(vec![default; n]),
            Some(v) => {
                if v.len() != n || v.iter().any(|&x| x < 1) {
                    return Err(cx.attr_err(
                        name,
                        format!("{v:?} must have {n} positive entries (one per spatial dim)"),
                    ));
                }
                Ok(v.iter().map(|&x| x as usize).collect())
            }
        }
    }

    fn padding(
        &self,
        cx: &Ctx,
        input: &[usize],
        kernel: &[usize],
        stride: &[usize],
        dil: &[usize],
    ) -> R<Padding> {
        let n = input.len();
        if input.contains(&0) {
            return Err(cx.err(format!(
                "the spatial dims {} are empty; the compiler does not support empty tensors here",
                dims_str(input)
            )));
        }
        let auto = cx.attr_s("auto_pad")?.unwrap_or_else(|| "NOTSET".into());
        match auto.as_str() {
            "NOTSET" | "" => {
                let pads = cx.attr_ints("pads")?.unwrap_or_else(|| vec![0; 2 * n]);
                if pads.len() != 2 * n || pads.iter().any(|&p| p < 0) {
                    return Err(cx.attr_err(
                        "pads",
                        format!("{pads:?} must have {} non-negative entries", 2 * n),
                    ));
                }
                Ok(Padding {
                    low: pads[..n].iter().map(|&p| p as usize).collect(),
                    high: pads[n..].iter().map(|&p| p as usize).collect(),
                })
            }
            "VALID" => Ok(Padding {
                low: vec![0; n],
                high: vec![0; n],
            }),
            "SAME_UPPER" | "SAME_LOWER" => {
                let mut low = Vec::new();
                let mut high = Vec::new();
                for i in 0..n {
                    let out = input[i].div_ceil(stride[i]);
                    let span = (kernel[i] - 1) * dil[i] + 1;
                    let total = ((out - 1) * stride[i] + span).saturating_sub(input[i]);
                    let small = total / 2;
                    if auto == "SAME_UPPER" {
                        low.push(small);
                        high.push(total - small);
                    } else {
                        low.push(total - small);
                        high.push(small);
                    }
                }
                Ok(Padding { low, high })
            }
            other => Err(cx.attr_err(
                "auto_pad",
                format!("expected NOTSET, VALID, SAME_UPPER or SAME_LOWER, found `{other}`"),
            )),
        }
    }

    pub fn conv(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 3)?;
        let mut x = self.rt_f32(cx, 0)?;
        let mut w = self.rt_f32(cx, 1)?;
        let (mut xd, mut wd) = (self.dims(x), self.dims(w));
        if xd.len() != wd.len() || !(3..=4).contains(&xd.len()) {
            return Err(cx.err(format!(
                "input {} and weight {} must both be rank 3 (1-D conv) or 4 (2-D conv); {}",
                dims_str(&xd),
                dims_str(&wd),
                if xd.len() == 5 {
                    "3-D convolutions are not supported"
                } else {
                    "other ranks are not supported"
                }
            )));
        }
        let n = xd.len() - 2;
        if let Some(k) = cx.attr_ints("kernel_shape")? {
            if k.iter().map(|&v| v as usize).ne(wd[2..].iter().copied()) {
                return Err(cx.attr_err(
                    "kernel_shape",
                    format!("{k:?} does not match the weight {}", dims_str(&wd)),
                ));
            }
        }
        let stride = self.spatial_attr(cx, "strides", n, 1)?;
        let dil = self.spatial_attr(cx, "dilations", n, 1)?;
        let group = cx.attr_i_or("group", 1)?;
        let c = xd[1];
        if group < 1 || c % group as usize != 0 || wd[0] % group as usize != 0 {
            return Err(cx.attr_err(
                "group",
                format!(
                    "{group} must divide the input channels ({c}) and the output channels ({})",
                    wd[0]
                ),
            ));
        }
        let group = group as usize;
        if wd[1] * group != c {
            return Err(cx.err(format!(
                "weight {} needs {} input channels for group {group}, the input {} has {c}",
                dims_str(&wd),
                wd[1] * group,
                dims_str(&xd)
            )));
        }
        let p = self.padding(cx, &xd[2..], &wd[2..], &stride, &dil)?;
        let mut window = Window {
            size: wd[2..].to_vec(),
            stride,
            pad_low: p.low,
            pad_high: p.high,
            dilation: dil,
        };
        let one_d = n == 1;
        if one_d {
            let mut x4 = xd.clone();
            x4.insert(2, 1);
            let mut w4 = wd.clone();
            w4.insert(2, 1);
            x = self.reshape(cx, x, x4.clone())?;
            w = self.reshape(cx, w, w4.clone())?;
            xd = x4;
            wd = w4;
            window.size.insert(0, 1);
            window.stride.insert(0, 1);
            window.pad_low.insert(0, 0);
            window.pad_high.insert(0, 0);
            window.dilation.insert(0, 1);
        }
        for i in 0..window.rank() {
            if window.output_extent(i, xd[2 + i]).is_none() {
                return Err(cx.err(format!(
                    "the kernel {} (dilations {:?}) does not fit the padded input {}",
                    dims_str(&wd[2..]),
                    window.dilation,
                    dims_str(&xd)
                )));
            }
        }
        let mut y = self.add(
            cx,
            Op::Convolution {
                window,
                feature_group_count: group,
            },
            &[x, w],
        )?;
        y = self.channel_bias(cx, y, wd[0])?;
        if one_d {
            let mut od = self.dims(y);
            od.remove(2);
            y = self.reshape(cx, y, od)?;
        }
        Ok(rt(y, dt::FLOAT))
    }

    /// `y [N, C, ...]` plus the node's optional input 2, a bias of one value per output channel
    /// (Conv, ConvTranspose).
    pub(super) fn channel_bias(&mut self, cx: &Ctx, y: InstId, channels: usize) -> R<InstId> {
        if !cx.has_input(2) {
            return Ok(y);
        }
        let b = self.rt_f32(cx, 2)?;
        if self.dims(b) != [channels] {
            return Err(cx.err(format!(
                "bias {} must be [{channels}] (one per output channel)",
                dims_str(&self.dims(b))
            )));
        }
        let od = self.dims(y);
        let bb = self.bcast(cx, b, vec![1], od)?;
        self.bin(cx, BinaryOp::Add, y, bb)
    }

    pub fn gemm(&mut self, cx: &Ctx) -> R<Outs> {
        // Gemm-11 made C optional (Gemm-7 replaced the `broadcast` attribute by unidirectional
        // broadcasting of C, which is all we read).
        cx.arity(if cx.before(11) { 3 } else { 2 }, 3)?;
        let a = self.rt_f32(cx, 0)?;
        let b = self.rt_f32(cx, 1)?;
        let (ad, bd) = (self.dims(a), self.dims(b));
        if ad.len() != 2 || bd.len() != 2 {
            return Err(cx.err(format!(
                "A {} and B {} must be matrices",
                dims_str(&ad),
                dims_str(&bd)
            )));
        }
        let ta = cx.attr_i_or("transA", 0)? != 0;
        let tb = cx.attr_i_or("transB", 0)? != 0;
        let alpha = cx.attr_f_or("alpha", 1.0)?;
        let beta = cx.attr_f_or("beta", 1.0)?;
        let ka = if ta { ad[0] } else { ad[1] };
        let kb = if tb { bd[1] } else { bd[0] };
        if ka != kb {
            return Err(cx.err(format!(
                "inner dimensions differ: A {} (transA={}) and B {} (transB={})",
                dims_str(&ad),
                ta as u8,
                dims_str(&bd),
                tb as u8
            )));
        }
        let mut y = self.add(
            cx,
            Op::Dot(DotDims {
                lhs_contracting: vec![if ta { 0 } else { 1 }],
                rhs_contracting: vec![if tb { 1 } else { 0 }],
                ..DotDims::default()
            }),
            &[a, b],
        )?;
        let od = self.dims(y);
        if alpha != 1.0 {
            let s = self.splat(cx, alpha, &od)?;
            y = self.bin(cx, BinaryOp::Multiply, y, s)?;
        }
        if cx.has_input(2) && beta != 0.0 {
            let c = self.rt_f32(cx, 2)?;
            let cd = self.dims(c);
            if broadcast_dims(&[cd.clone(), od.clone()]).as_deref() != Some(&od[..]) {
                return Err(cx.err(format!(
                    "C {} does not broadcast to the result {}",
                    dims_str(&cd),
                    dims_str(&od)
                )));
            }
            let mut c = self.stretch(cx, c, &od)?;
            if beta != 1.0 {
                let s = self.splat(cx, beta, &od)?;
                c = self.bin(cx, BinaryOp::Multiply, c, s)?;
            }
            y = self.bin(cx, BinaryOp::Add, y, c)?;
        }
        Ok(rt(y, dt::FLOAT))
    }

    pub fn matmul(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let mut a = self.rt_f32(cx, 0)?;
        let mut b = self.rt_f32(cx, 1)?;
        let (mut ad, mut bd) = (self.dims(a), self.dims(b));
        if ad.is_empty() || bd.is_empty() {
            return Err(cx.err("MatMul does not take scalars"));
        }
        let (a1, b1) = (ad.len() == 1, bd.len() == 1);
        if a1 {
            ad.insert(0, 1);
            a = self.reshape(cx, a, ad.clone())?;
        }
        if b1 {
            bd.push(1);
            b = self.reshape(cx, b, bd.clone())?;
        }
        let (ra, rb) = (ad.len(), bd.len());
        let (m, k) = (ad[ra - 2], ad[ra - 1]);
        let (kb, n) = (bd[rb - 2], bd[rb - 1]);
        if k != kb {
            return Err(cx.err(format!(
                "inner dimensions differ: {} × {}",
                dims_str(&ad),
                dims_str(&bd)
            )));
        }
        let batch =
            broadcast_dims(&[ad[..ra - 2].to_vec(), bd[..rb - 2].to_vec()]).ok_or_else(|| {
                cx.err(format!(
                    "batch dimensions of {} and {} do not broadcast",
                    dims_str(&ad),
                    dims_str(&bd)
                ))
            })?;
        let nb = batch.len();
        let widen = |me: &mut Self, v: InstId, dv: &[usize]| -> R<InstId> {
            let mut full = batch.clone();
            full.extend_from_slice(&dv[dv.len() - 2..]);
            me.stretch(cx, v, &full)
        };
        let a2 = widen(self, a, &ad)?;
        let b2 = widen(self, b, &bd)?;
        let bdims: Vec<usize> = (0..nb).collect();
        let mut y = self.add(
            cx,
            Op::Dot(DotDims {
                lhs_batch: bdims.clone(),
                lhs_contracting: vec![nb + 1],
                rhs_batch: bdims,
                rhs_contracting: vec![nb],
            }),
            &[a2, b2],
        )?;
        let mut od = batch.clone();
        if !a1 {
            od.push(m);
        }
        if !b1 {
            od.push(n);
        }
        y = self.reshape(cx, y, od)?;
        Ok(rt(y, dt::FLOAT))
    }

    pub fn batch_norm(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(5, 5)?;
        // BatchNormalization-9 removed `spatial` (1: statistics per channel; 0: per element of
        // [C, spatial...]), which we read only as 1.
        if cx.before(9) && cx.attr_i_or("spatial", 1)? != 1 {
            return Err(cx.attr_err(
                "spatial",
                "0 (statistics per element rather than per channel) is not supported; only 1 is",
            ).hint("re-export the model with per-channel BatchNormalization"));
        }
        if cx.attr_i_or("training_mode", 0)? != 0 {
            return Err(cx.attr_err(
                "training_mode",
                "1 (batch statistics) is not supported; export the model in eval mode",
            ));
        }
        let x = self.rt_f32(cx, 0)?;
        let xd = self.dims(x);
        if xd.len() < 2 {
            return Err(cx.err(format!("input {} must be [N, C, ...]", dims_str(&xd))));
        }
        let c = xd[1];
        let mut p = Vec::new();
        for (j, role) in [(1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")] {
            let v = self.rt_f32(cx, j)?;
            if self.dims(v) != [c] {
                return Err(cx.err(format!(
                    "{role} has shape {}, expected [{c}] (one per channel)",
                    dims_str(&self.dims(v))
                )));
            }
            p.push(v);
        }
        let eps = cx.attr_f_or("epsilon", DEFAULT_EPSILON)?;
        let y = decompose::batch_norm(&mut self.composite(cx), x, [p[0], p[1], p[2], p[3]], eps)?;
        let mut outs = rt(y, dt::FLOAT);
        // Before BatchNormalization-14 the optional outputs are mean, var, saved_mean and
        // saved_var: in inference the running statistics pass through unchanged; the saved
        // (batch) statistics exist only in training, so naming them is an error.
        if cx.before(14) {
            outs.push(Some(self.input(cx, 3)?));
            outs.push(Some(self.input(cx, 4)?));
        }
        Ok(outs)
    }

    pub fn instance_norm(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(3, 3)?;
        let (x, xd) = self.spatial_input(cx)?;
        let scale = self.rt_f32(cx, 1)?;
        let bias = self.rt_f32(cx, 2)?;
        for (v, role) in [(scale, "scale"), (bias, "B")] {
            if self.dims(v) != [xd[1]] {
                return Err(cx.err(format!("{role} must be [{}] (one per channel)", xd[1])));
            }
        }
        let eps = cx.attr_f_or("epsilon", DEFAULT_EPSILON)?;
        let axes: Vec<usize> = (2..xd.len()).collect();
        let mut g = self.composite(cx);
        let (y, _) = decompose::normalize(&mut g, x, &axes, eps, CountOrder::AfterSum, false)?;
        let zero = decompose::splat(&mut g, "zero", 0.0, &[xd[1]])?;
        let y = decompose::channel_affine(&mut g, y, scale, zero)?;
        let bb = self.bcast(cx, bias, vec![1], xd)?;
        let y = self.bin(cx, BinaryOp::Add, y, bb)?;
        Ok(rt(y, dt::FLOAT))
    }

    pub fn layer_norm(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 3)?;
        let (x, xd) = self.rt_f32_nonscalar(cx, 0)?;
        let axis = cx.axis("axis", cx.attr_i_or("axis", -1)?, xd.len())?;
        let eps = cx.attr_f_or("epsilon", DEFAULT_EPSILON)?;
        let axes: Vec<usize> = (axis..xd.len()).collect();
        let (mut y, m) = {
            let mut g = self.composite(cx);
            decompose::normalize(&mut g, x, &axes, eps, CountOrder::AfterSum, false)?
        };
        let Moments {
            mean, inv_std: inv, ..
        } = m;
        let s = self.rt_f32(cx, 1)?;
        let s = self.stretch(cx, s, &xd)?;
        y = self.bin(cx, BinaryOp::Multiply, y, s)?;
        if cx.has_input(2) {
            let b = self.rt_f32(cx, 2)?;
            let b = self.stretch(cx, b, &xd)?;
            y = self.bin(cx, BinaryOp::Add, y, b)?;
        }
        let kd: Vec<usize> = (0..xd.len())
            .map(|i| if i < axis { xd[i] } else { 1 })
            .collect();
        let mean = self.reshape(cx, mean, kd.clone())?;
        let inv = self.reshape(cx, inv, kd)?;
        Ok(vec![
            Some(Val::Rt {
                id: y,
                ty: dt::FLOAT,
            }),
            Some(Val::Rt {
                id: mean,
                ty: dt::FLOAT,
            }),
            Some(Val::Rt {
                id: inv,
                ty: dt::FLOAT,
            }),
        ])
    }

    pub fn softmax(&mut self, cx: &Ctx, log: bool) -> R<Outs> {
        cx.arity(1, 1)?;
        let (x, xd) = self.rt_f32_nonscalar(cx, 0)?;
        // Softmax-13 and LogSoftmax-13 normalise over one axis (default -1). Before, the input
        // is coerced to 2-D [d0 × ... × d(axis-1), d(axis) × ... × d(n-1)] (axis default 1) and
        // normalised over the second dim, then reshaped back.
        if cx.before(13) {
            let axis = cx.attr_i_or("axis", 1)?;
            let r = xd.len() as i64;
            if axis < -r || axis > r {
                return Err(cx.attr_err(
                    "axis",
                    format!("{axis} is out of range for rank {r} (valid: {} to {r})", -r),
                ));
            }
            let axis = if axis < 0 { axis + r } else { axis } as usize;
            let rows: usize = xd[..axis].iter().product();
            let cols: usize = xd[axis..].iter().product();
            let x2 = self.reshape(cx, x, vec![rows, cols])?;
            let y = decompose::softmax(&mut self.composite(cx), x2, 1, log)?;
            let y = self.reshape(cx, y, xd)?;
            return Ok(rt(y, dt::FLOAT));
        }
        let axis = cx.axis("axis", cx.attr_i_or("axis", -1)?, xd.len())?;
        if !log && ty_of(&self.input(cx, 0)?) == dt::BFLOAT16 {
            // Each step rounded to bfloat16, as onnx's reference (`bf16_graph.rs`).
            let y = self.softmax_bf16(cx, x, axis)?;
            return Ok(rt(y, dt::BFLOAT16));
        }
        let y = decompose::softmax(&mut self.composite(cx), x, axis, log)?;
        Ok(rt(y, dt::FLOAT))
    }

    /// LRN (local response normalisation across channels), decomposed:
    /// `y = x / (bias + alpha / size · Σ x²)^beta`, the sum over the channels
    /// `c - ⌊(size-1)/2⌋ ..= c + ⌈(size-1)/2⌉` that exist (a reduce-window over the channel dim
    /// whose zero padding stands for the missing ones). Unchanged since LRN-1.
    pub fn lrn(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        let (x, xd) = self.spatial_input(cx)?;
        let Some(size) = cx.attr_i("size")? else {
            return Err(cx.attr_err("size", "is required"));
        };
        if size < 1 {
            return Err(cx.attr_err("size", format!("{size} must be positive")));
        }
        let size = size as usize;
        let alpha = cx.attr_f_or("alpha", 1e-4)?;
        let beta = cx.attr_f_or("beta", 0.75)?;
        let bias = cx.attr_f_or("bias", 1.0)?;
        let r = xd.len();
        let mut sizes = vec![1; r];
        sizes[1] = size;
        let mut window = Window::new(sizes);
        window.pad_low[1] = (size - 1) / 2;
        window.pad_high[1] = size / 2;
        let sq = self.bin(cx, BinaryOp::Multiply, x, x)?;
        let sum = self.add(
            cx,
            Op::ReduceWindow {
                kind: ReduceKind::Add,
                window,
            },
            &[sq],
        )?;
        let k = self.splat(cx, alpha / size as f32, &xd)?;
        let scaled = self.bin(cx, BinaryOp::Multiply, sum, k)?;
        let b = self.splat(cx, bias, &xd)?;
        let base = self.bin(cx, BinaryOp::Add, scaled, b)?;
        // The exponents exporters use, without `pow` (a scalar call per element): x^0.75 is
        // √x·√√x (each square root correctly rounded: within 2 ulp of the power).
        let den = if beta == 0.75 {
            let r = self.un(cx, UnaryOp::Sqrt, base)?;
            let rr = self.un(cx, UnaryOp::Sqrt, r)?;
            self.bin(cx, BinaryOp::Multiply, r, rr)?
        } else if beta == 0.5 {
            self.un(cx, UnaryOp::Sqrt, base)?
        } else if beta == 1.0 {
            base
        } else {
            let e = self.splat(cx, beta, &xd)?;
            self.bin(cx, BinaryOp::Power, base, e)?
        };
        let y = self.bin(cx, BinaryOp::Divide, x, den)?;
        Ok(rt(y, dt::FLOAT))
    }

    /// Input 0 of a pooling or instance-norm op: f32, [N, C, spatial...].
    fn spatial_input(&mut self, cx: &Ctx) -> R<(InstId, Vec<usize>)> {
        let x = self.rt_f32(cx, 0)?;
        let xd = self.dims(x);
        if xd.len() < 3 {
            return Err(cx.err(format!(
                "input {} must be [N, C, spatial...]",
                dims_str(&xd)
            )));
        }
        Ok((x, xd))
    }

    pub fn global_pool(&mut self, cx: &Ctx, max: bool) -> R<Outs> {
        cx.arity(1, 1)?;
        let (x, xd) = self.spatial_input(cx)?;
        let axes: Vec<usize> = (2..xd.len()).collect();
        let kind = if max {
            ReduceKind::Max
        } else {
            ReduceKind::Add
        };
        let mut r = self.reduce_raw(cx, kind, x, &axes)?;
        if !max {
            let count: usize = xd[2..].iter().product();
            let d = self.dims(r);
            let n = self.splat(cx, count as f32, &d)?;
            r = self.bin(cx, BinaryOp::Divide, r, n)?;
        }
        let mut kd = xd[..2].to_vec();
        kd.extend(std::iter::repeat_n(1, xd.len() - 2));
        let r = self.reshape(cx, r, kd)?;
        Ok(rt(r, dt::FLOAT))
    }

    /// The window of MaxPool/AveragePool/LpPool over `xd` = [N, C, spatial...]: kernel_shape,
    /// strides, dilations, pads or auto_pad, and ceil_mode as extra high padding (returned
    /// separately: no window counts it).
    fn pool_window(&self, cx: &Ctx, xd: &[usize]) -> R<PoolWindow> {
        let n = xd.len() - 2;
        let Some(k) = cx.attr_ints("kernel_shape")? else {
            return Err(cx.attr_err("kernel_shape", "is required"));
        };
        if k.len() != n || k.iter().any(|&v| v < 1) {
            return Err(cx.attr_err(
                "kernel_shape",
                format!("{k:?} must have {n} positive entries"),
            ));
        }
        let k: Vec<usize> = k.iter().map(|&v| v as usize).collect();
        let stride = self.spatial_attr(cx, "strides", n, 1)?;
        let dil = self.spatial_attr(cx, "dilations", n, 1)?;
        let p = self.padding(cx, &xd[2..], &k, &stride, &dil)?;
        let ceil = cx.attr_i_or("ceil_mode", 0)? != 0;
        let mut extra = vec![0usize; n];
        for i in 0..n {
            let span = (k[i] - 1) * dil[i] + 1;
            let padded = xd[2 + i] + p.low[i] + p.high[i];
            if span > padded {
                return Err(cx.err(format!(
                    "the window {:?} (dilations {dil:?}) does not fit the padded input {}",
                    k,
                    dims_str(xd)
                )));
            }
            if ceil {
                let mut out = (padded - span).div_ceil(stride[i]) + 1;
                // The last window must start inside the input or its low padding.
                if (out - 1) * stride[i] >= xd[2 + i] + p.low[i] {
                    out -= 1;
                }
                extra[i] = ((out - 1) * stride[i] + span).saturating_sub(padded);
            }
        }
        let high: Vec<usize> = (0..n).map(|i| p.high[i] + extra[i]).collect();
        let window = Window {
            size: spatial_full(&k, 1),
            stride: spatial_full(&stride, 1),
            pad_low: spatial_full(&p.low, 0),
            pad_high: spatial_full(&high, 0),
            dilation: spatial_full(&dil, 1),
        };
        Ok(PoolWindow {
            window,
            kernel: k,
            pads: p,
            extra,
        })
    }

    /// LpPool: (sum over the window of |x|^p)^(1/p); padding counts as zeros.
    pub fn lp_pool(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        let (x, xd) = self.spatial_input(cx)?;
        let p = cx.attr_i_or("p", 2)?;
        if p < 1 {
            return Err(cx.attr_err("p", format!("{p} must be a positive integer")));
        }
        let PoolWindow { window, .. } = self.pool_window(cx, &xd)?;
        let powed = match p {
            1 => self.un(cx, UnaryOp::Abs, x)?,
            2 => self.bin(cx, BinaryOp::Multiply, x, x)?,
            _ => {
                let ax = self.un(cx, UnaryOp::Abs, x)?;
                let e = self.splat(cx, p as f32, &xd)?;
                self.bin(cx, BinaryOp::Power, ax, e)?
            }
        };
        let sum = self.add(
            cx,
            Op::ReduceWindow {
                kind: ReduceKind::Add,
                window,
            },
            &[powed],
        )?;
        let y = match p {
            1 => sum,
            2 => self.un(cx, UnaryOp::Sqrt, sum)?,
            _ => {
                let od = self.dims(sum);
                let e = self.splat(cx, 1.0 / p as f32, &od)?;
                self.bin(cx, BinaryOp::Power, sum, e)?
            }
        };
        Ok(rt(y, dt::FLOAT))
    }

    pub fn pool(&mut self, cx: &Ctx, max: bool) -> R<Outs> {
        cx.arity(1, 1)?;
        // onnxruntime's QOperator models max-pool 8-bit quantized tensors directly, and the QDQ
        // rewrite (`qdq.rs` MOVES) 8- or 16-bit ones (uint16 activations): exact in f32.
        let ty = super::context::ty_of(&self.input(cx, 0)?);
        let quantized = max && matches!(ty, dt::INT8 | dt::UINT8 | dt::INT16 | dt::UINT16);
        let (x, xd) = if quantized {
            let (q, _) = self.rt(cx, 0)?;
            let x = self.convert(cx, q, DType::F32)?;
            let xd = self.dims(x);
            if xd.len() < 3 {
                return Err(cx.err(format!(
                    "input {} must be [N, C, spatial...]",
                    dims_str(&xd)
                )));
            }
            (x, xd)
        } else {
            self.spatial_input(cx)?
        };
        let n = xd.len() - 2;
        if cx.attr_i_or("storage_order", 0)? != 0 {
            return Err(cx.attr_err("storage_order", "only 0 (row-major) is supported"));
        }
        let PoolWindow {
            window,
            kernel: k,
            pads: p,
            extra,
        } = self.pool_window(cx, &xd)?;
        let high: Vec<usize> = (0..n).map(|i| p.high[i] + extra[i]).collect();
        let full = spatial_full;
        if max {
            let r = self.add(
                cx,
                Op::ReduceWindow {
                    kind: ReduceKind::Max,
                    window,
                },
                &[x],
            )?;
            if quantized {
                let q = self.convert(cx, r, DType::I32)?;
                return Ok(rt(q, ty));
            }
            return Ok(rt(r, dt::FLOAT));
        }
        let include = cx.attr_i_or("count_include_pad", 0)? != 0;
        let sum = self.add(
            cx,
            Op::ReduceWindow {
                kind: ReduceKind::Add,
                window: window.clone(),
            },
            &[x],
        )?;
        let padded_any = p.low.iter().chain(&high).any(|&v| v > 0);
        let od = self.dims(sum);
        let count = if !padded_any {
            self.splat(cx, k.iter().product::<usize>() as f32, &od)?
        } else {
            // Cells per window that count: the same window summed over ones (a constant
            // subgraph, folded at compile time). With count_include_pad the explicit padding
            // counts (ones padded with ones), the ceil_mode extension never does.
            let ones = self.splat(cx, 1.0, &xd)?;
            if include {
                let one = self.b.scalar("constant", 1.0);
                let padded = self.add(
                    cx,
                    Op::Pad {
                        low: full(&p.low, 0),
                        high: full(&p.high, 0),
                    },
                    &[ones, one],
                )?;
                let w2 = Window {
                    pad_low: vec![0; n + 2],
                    pad_high: full(&extra, 0),
                    ..window
                };
                self.add(
                    cx,
                    Op::ReduceWindow {
                        kind: ReduceKind::Add,
                        window: w2,
                    },
                    &[padded],
                )?
            } else {
                self.add(
                    cx,
                    Op::ReduceWindow {
                        kind: ReduceKind::Add,
                        window,
                    },
                    &[ones],
                )?
            }
        };
        let r = self.bin(cx, BinaryOp::Divide, sum, count)?;
        Ok(rt(r, dt::FLOAT))
    }
}
