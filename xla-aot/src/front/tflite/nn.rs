//! CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, BATCH_MATMUL, AVERAGE_POOL_2D and MAX_POOL_2D of
//! float models.
//!
//! Contract, as TFLite defines them (`tensorflow/lite/kernels/internal/reference/*.h`):
//! - Padding `SAME`: output extent `⌈in / stride⌉`, total padding
//!   `max((out − 1) · stride + (k − 1) · dilation + 1 − in, 0)`, the smaller half before
//!   (`padding.h` `ComputePaddingHeightWidth`); `VALID`: no padding.
//! - CONV_2D: input NHWC, filter `[O, KH, KW, I]`, bias `[O]`; when `I` divides the input's
//!   channels into more than one group it is a grouped convolution (TFLite's converter writes
//!   these for `groups > 1`). DEPTHWISE_CONV_2D: filter `[1, KH, KW, C · M]`, output channel
//!   `c · M + m` reads input channel `c` (the IR's grouped convolution with `C` groups orders its
//!   outputs the same way). Both leave their result NCHW for the next op (`lower.rs`).
//! - FULLY_CONNECTED: weights `[O, K]` (`DEFAULT` format only), the input flattened to
//!   `[elements / K, K]`; `keep_num_dims` keeps the input's leading dims.
//! - BATCH_MATMUL: `[..., M, K] × [..., K, N]` (`adj_x`/`adj_y` transpose the last two dims),
//!   the batch dims broadcast numpy's way.
//! - AVERAGE_POOL_2D divides each window's sum by the number of cells inside the input (padding
//!   excluded), MAX_POOL_2D ignores padding.
//! - The fused activation is applied last.

use super::lower::{Importer, NCHW, R, Val};
use crate::ir::{BinaryOp, DotDims, InstId, Literal, Op, ReduceKind, Window};
use xla_aot_tflite_schema::tflite::{self, BuiltinOptionsRef as O, Padding};

/// Window geometry of one spatial dim: (output extent, padding before, padding after).
fn same_or_valid(
    padding: Padding,
    input: usize,
    k: usize,
    stride: usize,
    dilation: usize,
) -> Option<(usize, usize, usize)> {
    let span = dilation.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
    match padding {
        Padding::Same => {
            let out = input.div_ceil(stride);
            let need = (out.max(1) - 1) * stride + span;
            let total = need.saturating_sub(input);
            Some((out, total / 2, total - total / 2))
        }
        Padding::Valid => {
            let out = (input.checked_sub(span)?) / stride + 1;
            Some((out, 0, 0))
        }
    }
}

/// Stride and dilation as the IR wants them (`> 0`).
fn positive(imp: &Importer, what: &str, v: i32) -> R<usize> {
    usize::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| imp.err(format!("{what} is {v}; it must be positive")))
}

struct ConvParams {
    padding: Padding,
    stride: [usize; 2],
    dilation: [usize; 2],
    activation: tflite::ActivationFunctionType,
}

impl Importer<'_, '_> {
    fn conv_params(&self) -> R<ConvParams> {
        let p = crate::front::tflite::read::pb(self.path, "the operator's options");
        let e = |m: planus::Error| p(m).in_node(self.op().describe());
        let (padding, sw, sh, dw, dh, act) = match &self.op().options {
            Some(O::Conv2DOptions(o)) => (
                o.padding().map_err(e)?,
                o.stride_w().map_err(e)?,
                o.stride_h().map_err(e)?,
                o.dilation_w_factor().map_err(e)?,
                o.dilation_h_factor().map_err(e)?,
                o.fused_activation_function().map_err(e)?,
            ),
            Some(O::DepthwiseConv2DOptions(o)) => (
                o.padding().map_err(e)?,
                o.stride_w().map_err(e)?,
                o.stride_h().map_err(e)?,
                o.dilation_w_factor().map_err(e)?,
                o.dilation_h_factor().map_err(e)?,
                o.fused_activation_function().map_err(e)?,
            ),
            _ => return Err(self.err("the operator has no convolution options")),
        };
        Ok(ConvParams {
            padding,
            stride: [
                positive(self, "stride_h", sh)?,
                positive(self, "stride_w", sw)?,
            ],
            dilation: [
                positive(self, "dilation_h_factor", dh)?,
                positive(self, "dilation_w_factor", dw)?,
            ],
            activation: act,
        })
    }

    /// CONV_2D (`depthwise` false) or DEPTHWISE_CONV_2D.
    pub fn conv(&mut self, depthwise: bool) -> R<()> {
        let p = self.conv_params()?;
        let (xt, wt) = (self.need(0)?, self.need(1)?);
        let quantized = self.is_quantized(xt);
        if !quantized {
            self.check_float(xt)?;
            self.check_float(wt)?;
        }
        let x = self.val(xt)?;
        let xd = self.dims(&x);
        let wd = self.tensor(wt).shape.clone();
        if xd.len() != 4 || wd.len() != 4 {
            return Err(self.err(format!(
                "the input is {xd:?} and the filter {wd:?}; both must be 4-D (NHWC, OHWI)"
            )));
        }
        let c = xd[3];
        let (kernel_perm, groups, out_channels) = if depthwise {
            if wd[0] != 1 || c == 0 || wd[3] % c != 0 {
                return Err(self.err(format!(
                    "the filter is {wd:?} for {c} input channels; a depthwise filter is [1, KH, KW, C·M]"
                )));
            }
            (vec![3, 0, 1, 2], c, wd[3])
        } else {
            if wd[3] == 0 || c % wd[3] != 0 || wd[0] % (c / wd[3]).max(1) != 0 {
                return Err(self.err(format!(
                    "the filter is {wd:?} for {c} input channels; its last dim must divide the channels into groups that divide its first"
                )));
            }
            (vec![0, 3, 1, 2], c / wd[3], wd[0])
        };
        let mut window = Window::new(vec![wd[1], wd[2]]);
        for (i, (&input, &k)) in [xd[1], xd[2]].iter().zip(&[wd[1], wd[2]]).enumerate() {
            let (_, lo, hi) = same_or_valid(p.padding, input, k, p.stride[i], p.dilation[i])
                .ok_or_else(|| {
                    self.err(format!(
                        "the {}×{} filter (dilation {:?}) does not fit the {}×{} input",
                        wd[1], wd[2], p.dilation, xd[1], xd[2]
                    ))
                })?;
            window.stride[i] = p.stride[i];
            window.dilation[i] = p.dilation[i];
            window.pad_low[i] = lo;
            window.pad_high[i] = hi;
        }
        if quantized {
            return self.conv_i8(
                &x,
                wt,
                kernel_perm,
                groups,
                out_channels,
                window,
                p.activation,
            );
        }
        let xi = self.permuted(&x, &NCHW)?;
        let w = self.tflite(wt)?;
        let mut y = self.conv_nchw(xi, w, kernel_perm, window, groups)?;
        y = self.bias(y, 1, out_channels)?;
        y = self.activation(y, p.activation)?;
        let out = self.output_index(0)?;
        self.set_nchw(out, y);
        Ok(())
    }

    /// FULLY_CONNECTED's product of `[batch, K]` data `x` and `[O, K]` weights `w`: `[batch, O]`.
    pub(super) fn dense_dot(&mut self, x: InstId, w: InstId) -> R<InstId> {
        let name = self.name("dot");
        self.b
            .add(
                &name,
                Op::Dot(DotDims {
                    lhs_batch: vec![],
                    lhs_contracting: vec![1],
                    rhs_batch: vec![],
                    rhs_contracting: vec![1],
                }),
                &[x, w],
            )
            .map_err(self.ir())
    }

    /// The NCHW convolution of `x` with the filter `w` (TFLite order) brought to OIHW by
    /// `kernel_perm`.
    pub(super) fn conv_nchw(
        &mut self,
        x: InstId,
        w: InstId,
        kernel_perm: Vec<usize>,
        window: Window,
        groups: usize,
    ) -> R<InstId> {
        let name = self.name("kernel");
        let k = self
            .b
            .add(
                &name,
                Op::Transpose {
                    permutation: kernel_perm,
                },
                &[w],
            )
            .map_err(self.ir())?;
        let name = self.name("conv");
        self.b
            .add(
                &name,
                Op::Convolution {
                    window,
                    feature_group_count: groups,
                },
                &[x, k],
            )
            .map_err(self.ir())
    }

    /// Adds input 2 (a `[channels]` bias, if present) along IR dim `dim` of `y`.
    fn bias(&mut self, y: InstId, dim: usize, channels: usize) -> R<InstId> {
        let Some(bt) = self.input_index(2) else {
            return Ok(y);
        };
        self.check_float(bt)?;
        let bias = self.tflite(bt)?;
        if self.b.shape(bias).dims != [channels] {
            return Err(self.err(format!(
                "the bias {} is {:?}; it must be [{channels}]",
                self.tensor_name(bt),
                self.b.shape(bias).dims
            )));
        }
        let dims = self.b.shape(y).dims.clone();
        let name = self.name("bias");
        let bb = self
            .b
            .broadcast(&name, bias, vec![dim], dims)
            .map_err(self.ir())?;
        self.binary("biased", BinaryOp::Add, y, bb)
    }

    /// FULLY_CONNECTED.
    pub fn fully_connected(&mut self) -> R<()> {
        let (act, keep, format) = match &self.op().options {
            Some(O::FullyConnectedOptions(o)) => {
                let p = crate::front::tflite::read::pb(self.path, "FullyConnectedOptions");
                (
                    o.fused_activation_function().map_err(&p)?,
                    o.keep_num_dims().map_err(&p)?,
                    o.weights_format().map_err(&p)?,
                )
            }
            _ => (
                tflite::ActivationFunctionType::None,
                false,
                tflite::FullyConnectedOptionsWeightsFormat::Default,
            ),
        };
        if format != tflite::FullyConnectedOptionsWeightsFormat::Default {
            return Err(self.err(format!(
                "weights_format {format:?}: only the DEFAULT [O, K] weights are read"
            )));
        }
        let (xt, wt) = (self.need(0)?, self.need(1)?);
        let quantized = self.is_quantized(xt);
        if !quantized {
            self.check_float(xt)?;
            self.check_float(wt)?;
        }
        let x = self.tflite(xt)?;
        let xd = self.b.shape(x).dims.clone();
        let wd = self.tensor(wt).shape.clone();
        let total: usize = xd.iter().product();
        if wd.len() != 2 || wd[1] == 0 || total % wd[1] != 0 {
            return Err(self.err(format!(
                "the weights are {wd:?} for an input of {xd:?}; they must be [outputs, K] with K dividing the input's {total} elements"
            )));
        }
        let (o, k) = (wd[0], wd[1]);
        let batch = total / k;
        let name = self.name("rows");
        let x2 = self
            .b
            .reshape(&name, x, vec![batch, k])
            .map_err(self.ir())?;
        if quantized {
            let keep_dims = (keep && xd.len() > 2).then(|| {
                let mut dims = xd[..xd.len() - 1].to_vec();
                dims.push(o);
                dims
            });
            return self.fully_connected_i8(x2, wt, act, keep_dims);
        }
        let w = self.tflite(wt)?;
        let mut y = self.dense_dot(x2, w)?;
        y = self.bias(y, 1, o)?;
        y = self.activation(y, act)?;
        if keep && xd.len() > 2 {
            let mut dims = xd[..xd.len() - 1].to_vec();
            dims.push(o);
            if dims.iter().product::<usize>() == batch * o {
                let name = self.name("keep_dims");
                y = self.b.reshape(&name, y, dims).map_err(self.ir())?;
            }
        }
        let out = self.output_index(0)?;
        let rank = self.b.shape(y).dims.len();
        self.set(out, Val::plain(y, rank));
        Ok(())
    }

    /// AVERAGE_POOL_2D (`max` false) or MAX_POOL_2D.
    pub fn pool(&mut self, max: bool) -> R<()> {
        let Some(O::Pool2DOptions(o)) = &self.op().options else {
            return Err(self.err("the operator has no Pool2DOptions"));
        };
        let p = crate::front::tflite::read::pb(self.path, "Pool2DOptions");
        let padding = o.padding().map_err(&p)?;
        let stride = [
            positive(self, "stride_h", o.stride_h().map_err(&p)?)?,
            positive(self, "stride_w", o.stride_w().map_err(&p)?)?,
        ];
        let size = [
            positive(self, "filter_height", o.filter_height().map_err(&p)?)?,
            positive(self, "filter_width", o.filter_width().map_err(&p)?)?,
        ];
        let act = o.fused_activation_function().map_err(&p)?;
        let xt = self.need(0)?;
        let quantized = self.is_quantized(xt);
        if !quantized {
            self.check_float(xt)?;
        }
        let x = self.val(xt)?;
        let xd = self.dims(&x);
        if xd.len() != 4 || xd.contains(&0) {
            return Err(self.err(format!(
                "the input is {xd:?}; it must be a non-empty 4-D tensor (NHWC)"
            )));
        }
        let mut window = Window::new(vec![1, 1, size[0], size[1]]);
        let mut geometry = Vec::new();
        for i in 0..2 {
            let g = same_or_valid(padding, xd[1 + i], size[i], stride[i], 1).ok_or_else(|| {
                self.err(format!(
                    "the {}×{} window does not fit the {}×{} input",
                    size[0], size[1], xd[1], xd[2]
                ))
            })?;
            window.stride[2 + i] = stride[i];
            window.pad_low[2 + i] = g.1;
            window.pad_high[2 + i] = g.2;
            geometry.push(g);
        }
        let xi = self.permuted(&x, &NCHW)?;
        if quantized {
            // The extents the window reduction will have (its shape rule), which the counts
            // must match element for element.
            let extent = |i: usize, input: usize| {
                window.output_extent(i, input).ok_or_else(|| {
                    self.err(format!(
                        "the {}×{} window does not fit the {}×{} input",
                        size[0], size[1], xd[1], xd[2]
                    ))
                })
            };
            let out = [extent(2, xd[1])?, extent(3, xd[2])?];
            let counts = self.window_counts(out, &geometry, size, stride, [xd[1], xd[2]])?;
            return self.pool_i8(xi, window, max, &counts, act);
        }
        let kind = if max {
            ReduceKind::Max
        } else {
            ReduceKind::Add
        };
        let name = self.name(if max { "max" } else { "sum" });
        let mut y = self
            .b
            .add(&name, Op::ReduceWindow { kind, window }, &[xi])
            .map_err(self.ir())?;
        if !max {
            y = self.divide_by_window_counts(y, &geometry, size, stride, [xd[1], xd[2]])?;
        }
        y = self.activation(y, act)?;
        let out = self.output_index(0)?;
        self.set_nchw(out, y);
        Ok(())
    }

    /// The cells inside the input of each window of an `out` grid, row-major (at least 1).
    fn window_counts(
        &self,
        out: [usize; 2],
        geometry: &[(usize, usize, usize)],
        size: [usize; 2],
        stride: [usize; 2],
        input: [usize; 2],
    ) -> R<Vec<i32>> {
        // Cells of window `o` along one dim: those of [o·s − lo, o·s − lo + k) inside [0, in).
        let covered = |i: usize, o: usize| {
            let start = (o * stride[i]) as i64 - geometry[i].1 as i64;
            let end = start + size[i] as i64;
            (end.min(input[i] as i64) - start.max(0)).max(0)
        };
        self.check_built(
            out[0].checked_mul(out[1]),
            "the average pool's window counts",
        )?;
        let mut counts = Vec::with_capacity(out[0] * out[1]);
        for oh in 0..out[0] {
            for ow in 0..out[1] {
                counts.push((covered(0, oh) * covered(1, ow)).clamp(1, i32::MAX as i64) as i32);
            }
        }
        Ok(counts)
    }

    /// `y` (window sums, NCHW) divided by the number of input cells each window covers.
    fn divide_by_window_counts(
        &mut self,
        y: InstId,
        geometry: &[(usize, usize, usize)],
        size: [usize; 2],
        stride: [usize; 2],
        input: [usize; 2],
    ) -> R<InstId> {
        let dims = self.b.shape(y).dims.clone();
        let counts: Vec<f32> = self
            .window_counts([dims[2], dims[3]], geometry, size, stride, input)?
            .into_iter()
            .map(|c| c as f32)
            .collect();
        let uniform = counts.iter().all(|&c| c == counts[0]);
        let d = if uniform {
            self.splat(counts.first().copied().unwrap_or(1.0), y)?
        } else {
            let c = self.b.constant(
                &self.name("counts"),
                Literal::from_f32(vec![dims[2], dims[3]], &counts),
            );
            let name = self.name("counts_b");
            self.b
                .broadcast(&name, c, vec![2, 3], dims)
                .map_err(self.ir())?
        };
        self.binary("mean", BinaryOp::Divide, y, d)
    }

    /// The product of `[batch (n dims), M, K] × [batch, K, N]` (`adj_x`/`adj_y` transpose the
    /// last two dims of an operand): BATCH_MATMUL's, float and int8.
    pub(super) fn batch_dot(
        &mut self,
        x: InstId,
        y: InstId,
        n: usize,
        adj_x: bool,
        adj_y: bool,
    ) -> R<InstId> {
        let b: Vec<usize> = (0..n).collect();
        let name = self.name("");
        self.b
            .add(
                &name,
                Op::Dot(DotDims {
                    lhs_batch: b.clone(),
                    lhs_contracting: vec![if adj_x { n } else { n + 1 }],
                    rhs_batch: b,
                    rhs_contracting: vec![if adj_y { n + 1 } else { n }],
                }),
                &[x, y],
            )
            .map_err(self.ir())
    }

    /// BATCH_MATMUL.
    pub fn batch_matmul(&mut self) -> R<()> {
        let (adj_x, adj_y) = match &self.op().options {
            Some(O::BatchMatMulOptions(o)) => {
                let p = crate::front::tflite::read::pb(self.path, "BatchMatMulOptions");
                (o.adj_x().map_err(&p)?, o.adj_y().map_err(&p)?)
            }
            _ => (false, false),
        };
        let (xt, yt) = (self.need(0)?, self.need(1)?);
        if self.is_quantized(xt) {
            return self.batch_matmul_i8(adj_x, adj_y);
        }
        self.check_float(xt)?;
        self.check_float(yt)?;
        let (x, y) = (self.val(xt)?, self.val(yt)?);
        let (xd, yd) = (self.dims(&x), self.dims(&y));
        if xd.len() < 2 || yd.len() < 2 {
            return Err(self.err(format!(
                "the operands {xd:?} and {yd:?} must be at least 2-D"
            )));
        }
        // Numpy broadcasting of the batch dims.
        let (xb, yb) = (&xd[..xd.len() - 2], &yd[..yd.len() - 2]);
        let n = xb.len().max(yb.len());
        let at = |d: &[usize], i: usize| {
            if i < n - d.len() {
                1
            } else {
                d[i - (n - d.len())]
            }
        };
        let mut batch = Vec::new();
        for i in 0..n {
            batch.push(match (at(xb, i), at(yb, i)) {
                (a, b) if a == b => a,
                (1, b) => b,
                (a, 1) => a,
                _ => {
                    return Err(self.err(format!(
                        "the batch dims of {xd:?} and {yd:?} do not broadcast"
                    )));
                }
            });
        }
        let full = |d: &[usize]| {
            let mut f = batch.clone();
            f.extend(&d[d.len() - 2..]);
            f
        };
        let plain = |r: usize| (0..r).collect::<Vec<_>>();
        let xf = self.broadcast_to(&x, &full(&xd), &plain(n + 2))?;
        let yf = self.broadcast_to(&y, &full(&yd), &plain(n + 2))?;
        let r = self.batch_dot(xf, yf, n, adj_x, adj_y)?;
        let o = self.output_index(0)?;
        self.set(o, Val::plain(r, n + 2));
        Ok(())
    }
}
