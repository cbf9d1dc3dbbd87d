//! Per-element (grid) kernels for dot and convolution: the GPU form of the two ops whose CPU
//! kernels accumulate into their whole output.
//!
//! Contract: in the grid form (`gpu/mod.rs`) every kernel computes the one output element
//! its trailing index parameter names (`loop_nest_physical` visits just that element). These
//! two functions give dot and convolution that form: the element's full reduction (contracting
//! dims; input channels of its group, then window taps) accumulated with `llvm.fmuladd` in a
//! register, then one store (with `precision: f16`, f16 sums of blocks of 16 k added into that
//! register, `half.rs`). No element reads another's result, so any number of threads may run
//! any elements in any order.

use super::Cg;
use crate::codegen::core::Kernel;
use crate::ir::{DType, DotDims, Shape, Window};
use inkwell::values::{FloatValue, IntValue, PointerValue};

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// `out[idx] = Σ_k lhs[..k..] · rhs[..k..]` for this kernel's element.
    pub(super) fn dot_element(
        &self,
        k: &Kernel<'ctx>,
        d: &DotDims,
        shape: &Shape,
        opnds: &[Shape],
        bufs: &[PointerValue<'ctx>],
    ) {
        let (l, r) = (&opnds[0], &opnds[1]);
        let lfree: Vec<usize> = (0..l.rank())
            .filter(|i| !d.lhs_batch.contains(i) && !d.lhs_contracting.contains(i))
            .collect();
        let rfree: Vec<usize> = (0..r.rank())
            .filter(|i| !d.rhs_batch.contains(i) && !d.rhs_contracting.contains(i))
            .collect();
        let nb = d.lhs_batch.len();
        let csizes: Vec<usize> = d.lhs_contracting.iter().map(|&i| l.dims[i]).collect();
        // The operands' indices of output element `oidx` and contracting index `c`.
        let indices = |cg: &Self, oidx: &[IntValue<'ctx>], c: &[IntValue<'ctx>]| {
            let mut li = vec![cg.i64(0); l.rank()];
            let mut ri = vec![cg.i64(0); r.rank()];
            for b in 0..nb {
                li[d.lhs_batch[b]] = oidx[b];
                ri[d.rhs_batch[b]] = oidx[b];
            }
            for (j, &a) in lfree.iter().enumerate() {
                li[a] = oidx[nb + j];
            }
            for (j, &a) in rfree.iter().enumerate() {
                ri[a] = oidx[nb + lfree.len() + j];
            }
            for (j, (&lc, &rc)) in d.lhs_contracting.iter().zip(&d.rhs_contracting).enumerate() {
                li[lc] = c[j];
                ri[rc] = c[j];
            }
            (li, ri)
        };
        if self.f16_sums() {
            // f16 sums in blocks of 16 k (`half.rs`), k the contracting dims' linear index.
            let kdim: usize = csizes.iter().product();
            self.loop_nest_physical(shape, &mut |cg, oidx| {
                let total = cg.f16_block_sum(k.f, kdim, &|cg, kk| {
                    let (li, ri) = indices(cg, oidx, &cg.unravel(kk, &csizes));
                    let lv = cg.load(bufs[0], cg.offset(&li, l), DType::F32);
                    let lv = cg.to_block(lv.into_float_value());
                    (lv, cg.load_weight_block(bufs[1], cg.offset(&ri, r)), None)
                });
                cg.store(k.out, cg.offset(oidx, shape), total.into(), DType::F32);
            });
            return;
        }
        let acc = self.slot(k.f, self.ctx.f32_type().into());
        self.loop_nest_physical(shape, &mut |cg, oidx| {
            cg.b.build_store(acc, cg.f32c(0.0)).unwrap();
            cg.loop_nest(&csizes, &mut |cg, c| {
                let (li, ri) = indices(cg, oidx, c);
                let lv = cg
                    .load(bufs[0], cg.offset(&li, l), DType::F32)
                    .into_float_value();
                let rv = cg.load_weight(bufs[1], cg.offset(&ri, r));
                let a = cg.b.build_load(acc, "").unwrap().into_float_value();
                cg.b.build_store(acc, cg.fma(lv, rv, a)).unwrap();
            });
            let a = cg.b.build_load(acc, "").unwrap();
            cg.store(k.out, cg.offset(oidx, shape), a, DType::F32);
        });
    }

    /// `out[n, o, p...] = Σ_ci Σ_taps x[n, g·C/G + ci, p·s + t·d - pad] · w[o, ci, t...]` for this
    /// kernel's element (taps outside the input contribute nothing).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn conv_element(
        &self,
        k: &Kernel<'ctx>,
        window: &Window,
        groups: usize,
        shape: &Shape,
        opnds: &[Shape],
        bufs: &[PointerValue<'ctx>],
    ) {
        let (xs, ws) = (&opnds[0], &opnds[1]);
        let sp = window.rank();
        let cin_g = ws.dims[1];
        let cout_g = ws.dims[0] / groups;
        // Input x's offset of output element `oidx`, input channel `ci` (of its group) and taps
        // `taps`, with whether that tap is inside the input; the kernel w's offset.
        let at =
            |cg: &Self, oidx: &[IntValue<'ctx>], ci: IntValue<'ctx>, taps: &[IntValue<'ctx>]| {
                let (n, oc) = (oidx[0], oidx[1]);
                let g =
                    cg.b.build_int_unsigned_div(oc, cg.i64(cout_g as u64), "")
                        .unwrap();
                let cin0 = cg.b.build_int_mul(g, cg.i64(cin_g as u64), "").unwrap();
                let mut valid = cg.ctx.bool_type().const_all_ones();
                let cin = cg.b.build_int_add(cin0, ci, "").unwrap();
                // Read through a channel shuffle (`ir/shuffle.rs`): channel `cin` is at its source.
                let cin = match cg.be.in_channels.get() {
                    Some(m) => cg.channel_source(&m, cin),
                    None => cin,
                };
                let mut xi: Vec<IntValue<'ctx>> = vec![n, cin];
                for dd in 0..sp {
                    let p = cg.window_pos(oidx[2 + dd], taps[dd], window, dd);
                    valid =
                        cg.b.build_and(valid, cg.in_range(p, xs.dims[2 + dd]), "")
                            .unwrap();
                    xi.push(cg.clamp_index(p, xs.dims[2 + dd]));
                }
                let mut wi = vec![oc, ci];
                wi.extend_from_slice(taps);
                (cg.offset(&xi, xs), cg.offset(&wi, ws), valid)
            };
        if self.f16_sums() {
            // f16 sums in blocks of 16 k (`half.rs`), k = (input channel, taps) row-major.
            let mut k_dims = vec![cin_g];
            k_dims.extend_from_slice(&window.size);
            let kdim: usize = k_dims.iter().product();
            self.loop_nest_physical(shape, &mut |cg, oidx| {
                let total = cg.f16_block_sum(k.f, kdim, &|cg, kk| {
                    let t = cg.unravel(kk, &k_dims);
                    let (xo, wo, valid) = at(cg, oidx, t[0], &t[1..]);
                    let xv = cg.load(bufs[0], xo, DType::F32).into_float_value();
                    (
                        cg.to_block(xv),
                        cg.load_weight_block(bufs[1], wo),
                        Some(valid),
                    )
                });
                cg.store(k.out, cg.offset(oidx, shape), total.into(), DType::F32);
            });
            return;
        }
        let acc = self.slot(k.f, self.ctx.f32_type().into());
        self.loop_nest_physical(shape, &mut |cg, oidx| {
            cg.b.build_store(acc, cg.f32c(0.0)).unwrap();
            cg.for_loop(cin_g, &mut |cg, ci| {
                cg.loop_nest(&window.size, &mut |cg, taps| {
                    let (xo, wo, valid) = at(cg, oidx, ci, taps);
                    let xv = cg.load(bufs[0], xo, DType::F32).into_float_value();
                    let wv = cg.load_weight(bufs[1], wo);
                    let a = cg.b.build_load(acc, "").unwrap().into_float_value();
                    let next: FloatValue<'ctx> = cg.fma(xv, wv, a);
                    let v = cg.select(valid, next.into(), a.into());
                    cg.b.build_store(acc, v).unwrap();
                });
            });
            let a = cg.b.build_load(acc, "").unwrap();
            cg.store(k.out, cg.offset(oidx, shape), a, DType::F32);
        });
    }
}
