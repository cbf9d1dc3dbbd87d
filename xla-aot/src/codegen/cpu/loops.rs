//! The general loop nests of dot and convolution: what a CPU kernel runs when no micro-kernel
//! (`gemm.rs`, `conv.rs`) fits the operands' layouts.
//!
//! Contract: the output is zeroed, then every product is accumulated into it with
//! `llvm.fmuladd` in the reference's order (contracting dims, or input channels then taps, in
//! increasing order), innermost over contiguous output elements so the loop vectorizes without
//! reassociating a sum.

use super::Cg;
use crate::codegen::core::Kernel;
use crate::ir::{DType, DotDims, Shape, Window};
use inkwell::values::{IntValue, PointerValue};

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// A dot as loops: batch, lhs free, contracting, rhs free (innermost).
    pub(super) fn dot_loops(
        &self,
        k: &Kernel<'ctx>,
        d: &DotDims,
        shape: &Shape,
        opnds: &[Shape],
        bufs: &[PointerValue<'ctx>],
    ) {
        let opnd = |j: usize| &opnds[j];
        let (l, r) = (opnd(0).dims.clone(), opnd(1).dims.clone());
        let lfree: Vec<usize> = (0..l.len())
            .filter(|i| !d.lhs_batch.contains(i) && !d.lhs_contracting.contains(i))
            .collect();
        let rfree: Vec<usize> = (0..r.len())
            .filter(|i| !d.rhs_batch.contains(i) && !d.rhs_contracting.contains(i))
            .collect();
        let nb = d.lhs_batch.len();
        self.zero(k, shape.element_count());
        // Loop order: batch, lhs free, contracting, rhs free (innermost, contiguous in out).
        let mut outer: Vec<usize> = d.lhs_batch.iter().map(|&i| l[i]).collect();
        outer.extend(lfree.iter().map(|&i| l[i]));
        outer.extend(d.lhs_contracting.iter().map(|&i| l[i]));
        let inner: Vec<usize> = rfree.iter().map(|&i| r[i]).collect();
        let nlf = lfree.len();
        let nc = d.lhs_contracting.len();
        self.loop_nest(&outer, &mut |cg, o| {
            let mut li = vec![cg.i64(0); l.len()];
            let mut ri_base = vec![cg.i64(0); r.len()];
            for k2 in 0..nb {
                li[d.lhs_batch[k2]] = o[k2];
                ri_base[d.rhs_batch[k2]] = o[k2];
            }
            for (k2, &a) in lfree.iter().enumerate() {
                li[a] = o[nb + k2];
            }
            for k2 in 0..nc {
                li[d.lhs_contracting[k2]] = o[nb + nlf + k2];
                ri_base[d.rhs_contracting[k2]] = o[nb + nlf + k2];
            }
            let lv = cg
                .load(bufs[0], cg.offset(&li, &opnds[0]), DType::F32)
                .into_float_value();
            cg.loop_nest(&inner, &mut |cg, rf| {
                let mut ri = ri_base.clone();
                for (k2, &a) in rfree.iter().enumerate() {
                    ri[a] = rf[k2];
                }
                let mut oi: Vec<IntValue> = o[..nb + nlf].to_vec();
                oi.extend_from_slice(rf);
                let rv = cg
                    .load(bufs[1], cg.offset(&ri, &opnds[1]), DType::F32)
                    .into_float_value();
                let off = cg.offset(&oi, shape);
                let acc = cg.load(k.out, off, DType::F32).into_float_value();
                cg.store(k.out, off, cg.fma(lv, rv, acc).into(), DType::F32);
            });
        });
    }

    /// A convolution as loops: n, output channel, input channel (of its group), taps; the
    /// innermost loops run over the output positions whose input is inside the image.
    pub(super) fn conv_loops(
        &self,
        k: &Kernel<'ctx>,
        window: &Window,
        feature_group_count: &usize,
        shape: &Shape,
        opnds: &[Shape],
        bufs: &[PointerValue<'ctx>],
    ) {
        let out_dims = shape.dims.clone();
        let opnd = |j: usize| &opnds[j];
        let (x, w) = (opnd(0).dims.clone(), opnd(1).dims.clone());
        let sp = window.rank();
        let cin_g = w[1];
        let cout_g = w[0] / feature_group_count;
        // The buffer x is read from: a channel map's source (`kernel.rs`), else x itself.
        let x_buf = self
            .be
            .in_source
            .borrow()
            .clone()
            .unwrap_or_else(|| opnds[0].clone());
        self.zero(k, shape.element_count());
        // Loops: n, o, ci (per group), window taps (outer); output spatial (inner).
        let mut outer = vec![x[0], w[0], cin_g];
        outer.extend(window.size.iter().copied());
        self.loop_nest(&outer, &mut |cg, o| {
            let (n, oc, ci) = (o[0], o[1], o[2]);
            let taps = &o[3..];
            let g =
                cg.b.build_int_unsigned_div(oc, cg.i64(cout_g as u64), "")
                    .unwrap();
            let cin =
                cg.b.build_int_add(
                    cg.b.build_int_mul(g, cg.i64(cin_g as u64), "").unwrap(),
                    ci,
                    "",
                )
                .unwrap();
            // Read through a channel shuffle (`ir/shuffle.rs`): channel `cin` is at its source.
            let cin = match cg.be.in_channels.get() {
                Some(m) => cg.channel_source(&m, cin),
                None => cin,
            };
            let mut wi = vec![oc, ci];
            wi.extend_from_slice(taps);
            let wv = cg
                .load(bufs[1], cg.offset(&wi, &opnds[1]), DType::F32)
                .into_float_value();
            // Output positions whose input position is inside the image: affine indices,
            // no padding checks in the loop body, so the innermost loop vectorizes.
            let ranges: Vec<_> = (0..sp)
                .map(|dd| {
                    cg.window_range(
                        taps[dd],
                        window.stride[dd],
                        window.dilation[dd],
                        window.pad_low[dd],
                        x[2 + dd],
                        out_dims[2 + dd],
                    )
                })
                .collect();
            let mut s: Vec<IntValue<'ctx>> = Vec::with_capacity(sp);
            conv_inner(cg, &ranges, &mut s, &|cg, s| {
                let mut xi = vec![n, cin];
                for dd in 0..sp {
                    xi.push(cg.window_pos(s[dd], taps[dd], window, dd));
                }
                let xv = cg
                    .load(bufs[0], cg.offset(&xi, &x_buf), DType::F32)
                    .into_float_value();
                let mut oi = vec![n, oc];
                oi.extend_from_slice(s);
                let off = cg.offset(&oi, shape);
                let acc = cg.load(k.out, off, DType::F32).into_float_value();
                cg.store(k.out, off, cg.fma(xv, wv, acc).into(), DType::F32);
            });
        });
    }

    /// Convolution writing an output whose channels are minor-most (NHWC): for each output pixel
    /// and window tap inside the image, the innermost loop runs over output channels, contiguous
    /// in the output and (with the kernel laid out channels-minor) in the weights.
    pub(super) fn conv_channels_minor(
        &self,
        k: &Kernel<'ctx>,
        window: &Window,
        groups: usize,
        shape: &Shape,
        opnds: &[Shape],
        bufs: &[PointerValue<'ctx>],
    ) {
        let (xs, ws) = (&opnds[0], &opnds[1]);
        let (x, w) = (&xs.dims, &ws.dims);
        let sp = window.rank();
        let (o_count, cin_g) = (w[0], w[1]);
        let cout_g = o_count / groups;
        self.zero(k, shape.element_count());
        let mut pixel_dims = vec![x[0]];
        pixel_dims.extend_from_slice(&shape.dims[2..]);
        self.loop_nest(&pixel_dims, &mut |cg, px| {
            let n = px[0];
            let opos = &px[1..];
            cg.loop_nest(&window.size, &mut |cg, taps| {
                let mut valid = cg.ctx.bool_type().const_int(1, false);
                let mut ipos = Vec::with_capacity(sp);
                for dd in 0..sp {
                    let p = cg.window_pos(opos[dd], taps[dd], window, dd);
                    valid =
                        cg.b.build_and(valid, cg.in_range(p, x[2 + dd]), "")
                            .unwrap();
                    ipos.push(p);
                }
                cg.if_then(valid, &mut |cg| {
                    cg.for_loop(cin_g, &mut |cg, ci| {
                        cg.for_loop(o_count, &mut |cg, oc| {
                            // Input channel of this output channel's group.
                            let cin = if groups == 1 {
                                ci
                            } else {
                                let g =
                                    cg.b.build_int_unsigned_div(oc, cg.i64(cout_g as u64), "")
                                        .unwrap();
                                cg.b.build_int_add(
                                    cg.b.build_int_mul(g, cg.i64(cin_g as u64), "").unwrap(),
                                    ci,
                                    "",
                                )
                                .unwrap()
                            };
                            let mut xi = vec![n, cin];
                            xi.extend_from_slice(&ipos);
                            let xv = cg
                                .load(bufs[0], cg.offset(&xi, xs), DType::F32)
                                .into_float_value();
                            let mut wi = vec![oc, ci];
                            wi.extend_from_slice(taps);
                            let wv = cg
                                .load(bufs[1], cg.offset(&wi, ws), DType::F32)
                                .into_float_value();
                            let mut oi = vec![n, oc];
                            oi.extend_from_slice(opos);
                            let off = cg.offset(&oi, shape);
                            let acc = cg.load(k.out, off, DType::F32).into_float_value();
                            cg.store(k.out, off, cg.fma(xv, wv, acc).into(), DType::F32);
                        });
                    });
                });
            });
        });
    }

    pub(super) fn zero(&self, k: &Kernel<'ctx>, n: usize) {
        self.for_loop(n, &mut |cg, i| {
            cg.b.build_store(cg.gep(k.out, i), cg.f32c(0.0)).unwrap();
        });
    }
}

/// Nested run-time-bounded loops over the output spatial dims of a convolution.
fn conv_inner<'a, 'ctx>(
    cg: &Cg<'a, 'ctx>,
    ranges: &[(IntValue<'ctx>, IntValue<'ctx>)],
    s: &mut Vec<IntValue<'ctx>>,
    body: &dyn Fn(&Cg<'a, 'ctx>, &[IntValue<'ctx>]),
) {
    if s.len() == ranges.len() {
        body(cg, s);
        return;
    }
    let (lo, hi) = ranges[s.len()];
    cg.for_range(lo, hi, &mut |cg, i| {
        s.push(i);
        conv_inner(cg, ranges, s, body);
        s.pop();
    });
}
