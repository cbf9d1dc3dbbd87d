//! The [`ConvPath::Depthwise`](super::ConvPath::Depthwise) micro-kernel: `groups == C == O`,
//! input and output channels minor. Each tap is a vector multiply-add along channels; a tile is
//! [`DW_PIXELS`] pixels × [`DW_GROUP`] channel vectors, and every output element is one running
//! sum over the taps in window order, as the interpreter sums them. Its input and output may be
//! stored one byte per element (`byte_storage.rs`): loaded and widened to f32, and stored
//! narrowed after the register epilogue, the same values.
//!
//! An int8 kernel (`core/packing/depthwise.rs`: integer weights on the Cortex-M cores without a
//! vector unit) is read as bytes and multiplied in i32 with the input's integers (its bytes
//! widened, or its f32 integers converted), an integer bias the sums' start (`kernel.rs`
//! `sum_bias`); each sum is converted to f32 once, exact (below 2^24), so the outputs are the
//! f32 kernel's. MLPerf Tiny on the M4 (instructions per inference, 2026-12-07): kws 6.91 M →
//! 6.33 M, vww 22.6 M → 21.7 M, str_ww 2.13 M → 1.99 M; the LLVM M4 code takes `ldrb`, `ldrsb`
//! and `smlabb` per product.

use super::super::Cg;
use super::super::byte_store::Finished;
use super::super::epilogue::{RegEpilogue, TilePos};
use super::super::gemm;
use super::super::vector::{VecCol, vectors};
use super::ConvShape;
use crate::codegen::core::Kernel;
use crate::codegen::core::packing::Tiles;
use crate::ir::{DType, Window};
use crate::target::Optimize;
use inkwell::values::{IntValue, PointerValue, VectorValue};

/// Pixels per depthwise tile: enough independent chains (with 2 channel vectors) to cover FMA
/// latency × pipes (see `gemm.rs`' `MIN_CHAINS`).
const DW_PIXELS: usize = 4;

/// Channel vectors per depthwise group: with [`DW_PIXELS`] pixels, 8 independent chains.
const DW_GROUP: usize = 2;

/// At most this many channel groups are unrolled when optimizing for speed; more run as a loop.
/// One group's body is already `kh·kw·DW_PIXELS·DW_GROUP` independent multiply-adds, so the loop
/// costs a few instructions per hundred; unrolled, shufflenet's 544-channel 3×3 layers (34 groups
/// on AVX2, × interior/checked × full/partial tiles) were 150,000 lines of LLVM IR each and made
/// its compile for aarch64-neon take two minutes.
const DW_UNROLLED_GROUPS: usize = 4;

impl<'a, 'ctx> Cg<'a, 'ctx> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn conv_depthwise(
        &self,
        k: &Kernel<'ctx>,
        win: &Window,
        cs: &ConvShape,
        (xi, wi): (usize, usize),
        flops: u64,
        epi: &Option<RegEpilogue>,
    ) {
        let t = Tiles::for_target(self.target);
        let ConvShape {
            n: n_count,
            c,
            groups: _,
            h,
            wd,
            o: _,
            kh,
            kw,
            oh: oh_count,
            ow: ow_count,
            ref xst,
            ref wst,
            ref ost,
            ih_in,
            iw_in,
            pixels_dim: _,
        } = *cs;
        let mr = gemm::balanced(ow_count, DW_PIXELS);
        let tiles_per_row = ow_count.div_ceil(mr);
        let (full_rows, part_rows) = (ow_count / mr, ow_count % mr);
        let units = n_count * oh_count * tiles_per_row;
        // Channels in vectors; the kernel's channel stride decides whether its taps load as vectors.
        let cols = vectors(c, t.lanes, false);
        // Activations stored one byte each (`byte_storage.rs`): read widened, written narrowed.
        let x_bytes = self.be.args_stored.borrow().get(xi).copied().flatten();
        let out_bytes = self.be.out_stored.get();
        assert!(
            out_bytes.is_none() || (ost[1] == 1 && epi.is_some()),
            "byte_storage.rs stores a depthwise result only channels-minor, finished in registers"
        );
        // An int8 kernel (`core/packing/depthwise.rs`: integer weights): i32 sums of the
        // input's integers times its bytes, converted once per output.
        let int8 = self.be.half_rhs.get() == Some(DType::I8);
        let i32t = self.ctx.i32_type();
        // Integer weights: an integer bias, the epilogue's first step, is the sums' start
        // (`kernel.rs` `sum_bias`), and `multiply-q31` then reads the sums as they are: its
        // f32 round trip had taken 6 instructions per output on the M4.
        let (bias, epi) = match epi {
            Some(e) if int8 && self.be.sum_bias.get() => (
                Some(RegEpilogue {
                    steps: e.steps[..1].to_vec(),
                }),
                &Some(RegEpilogue {
                    steps: e.steps[1..].to_vec(),
                }),
            ),
            _ => (None, epi),
        };
        self.conv_tasks(k, units, flops, &|cg, tk, u| {
            let (f, x, w, out) = (tk.f, tk.args[xi], tk.args[wi], tk.out);
            let ru = cg.row_unit(u, oh_count, tiles_per_row);
            let tile_body = |cg: &Self, rows: usize, checked: bool| {
                let ow0 = cg.mul(ru.tile, mr as u64);
                // One group of channel vectors (2 × rows chains), its channels `shift` further on.
                let group_body = |cg: &Self, group: &[VecCol], shift: IntValue<'ctx>| {
                    let col = |cg: &Self, v: &VecCol| cg.add(shift, cg.i64(v.col as u64));
                    let acc = if int8 {
                        let start: Vec<VectorValue<'ctx>> = group
                            .iter()
                            .map(|v| {
                                let t = i32t.vec_type(v.lanes);
                                let Some(b) = bias.as_ref() else {
                                    return t.const_zero();
                                };
                                let zero = cg.vec_ty(v.lanes).const_zero();
                                let role = |d: usize| match d {
                                    1 => TilePos::Col,
                                    _ => TilePos::At(ru.n),
                                };
                                let bf = cg.apply_epilogue(b, tk, zero, ow0, col(cg, v), v, &role);
                                cg.b.build_float_to_signed_int(bf, t, "").unwrap()
                            })
                            .collect();
                        (0..rows)
                            .map(|_| {
                                start
                                    .iter()
                                    .map(|s0| {
                                        let p = cg.slot(f, s0.get_type().into());
                                        cg.b.build_store(p, *s0).unwrap();
                                        p
                                    })
                                    .collect()
                            })
                            .collect()
                    } else {
                        cg.acc_slots(f, rows, group)
                    };
                    for y in 0..kh {
                        let (row_ok, ih) = cg.in_pos(
                            checked,
                            ru.oh,
                            y,
                            win.stride[0],
                            win.dilation[0],
                            win.pad_low[0],
                            h,
                        );
                        for xw in 0..kw {
                            let wv: Vec<VectorValue<'ctx>> = group
                                .iter()
                                .map(|v| {
                                    let off = cg.add(
                                        cg.mul(col(cg, v), wst[0]),
                                        cg.i64(y as u64 * wst[2] + xw as u64 * wst[3]),
                                    );
                                    if int8 {
                                        let b = cg.load_bytes(w, off, v.lanes);
                                        let t = i32t.vec_type(v.lanes);
                                        cg.b.build_int_s_extend(b, t, "").unwrap()
                                    } else {
                                        cg.gather(w, off, wst[0], v.lanes)
                                    }
                                })
                                .collect();
                            for (i, row) in acc.iter().enumerate() {
                                let owi = cg.add(ow0, cg.i64(i as u64));
                                let (ok, iw) = cg.in_pos(
                                    checked,
                                    owi,
                                    xw,
                                    win.stride[1],
                                    win.dilation[1],
                                    win.pad_low[1],
                                    wd,
                                );
                                let valid = cg.b.build_and(row_ok, ok, "").unwrap();
                                let base = cg.add(
                                    cg.add(cg.mul(ru.n, xst[0]), cg.mul(ih, xst[2])),
                                    cg.mul(iw, xst[3]),
                                );
                                let mut taps = |cg: &Self| {
                                    for (j, v) in group.iter().enumerate() {
                                        let at = cg.add(base, col(cg, v));
                                        if int8 {
                                            let xi = cg.tap_ints(x, at, v.lanes, x_bytes);
                                            let old = cg.b.build_load(row[j], "").unwrap();
                                            let prod = cg.b.build_int_mul(xi, wv[j], "").unwrap();
                                            let new = cg
                                                .b
                                                .build_int_add(old.into_vector_value(), prod, "")
                                                .unwrap();
                                            cg.b.build_store(row[j], new).unwrap();
                                            continue;
                                        }
                                        let xv = match x_bytes {
                                            Some(d) => {
                                                cg.bytes_to_f32(cg.load_bytes(x, at, v.lanes), d)
                                            }
                                            None => cg.vload(x, at, v.lanes),
                                        };
                                        cg.fma_into(row[j], xv, wv[j]);
                                    }
                                };
                                if checked {
                                    cg.if_then(valid, &mut taps);
                                } else {
                                    taps(cg);
                                }
                            }
                        }
                    }
                    for (i, row) in acc.iter().enumerate() {
                        let owi = cg.add(ow0, cg.i64(i as u64));
                        let pix = cg.add(
                            cg.add(cg.mul(ru.n, ost[0]), cg.mul(ru.oh, ost[2])),
                            cg.mul(owi, ost[3]),
                        );
                        for (v, slot) in group.iter().zip(row) {
                            let mut val = cg.b.build_load(*slot, "").unwrap().into_vector_value();
                            let ch = col(cg, v);
                            if int8 {
                                val =
                                    cg.b.build_signed_int_to_float(val, cg.vec_ty(v.lanes), "")
                                        .unwrap();
                            }
                            if let Some(e) = epi {
                                let role = |d: usize| match d {
                                    0 => TilePos::At(ru.n),
                                    1 => TilePos::Col,
                                    d if d == cs.pixels_dim => TilePos::Row,
                                    _ => TilePos::At(ru.oh),
                                };
                                val = cg.apply_epilogue(e, tk, val, owi, ch, v, &role);
                            }
                            let at = cg.add(pix, ch);
                            match out_bytes {
                                Some(d) => {
                                    let f = Finished {
                                        off: at,
                                        val,
                                        ints: false,
                                        saturate: false,
                                        col: v.col,
                                        lanes: v.store,
                                    };
                                    cg.store_finished_bytes(out, &[f], d);
                                }
                                None => cg.store_lanes(out, at, val, v.store),
                            }
                        }
                    }
                };
                // The leading groups of whole vectors are one loop over channels: always when
                // optimizing for size (unrolled, 64 channels on a scalar FPU are 32 groups, 50 KB
                // of Thumb-2 code per 3×3 kernel), and for speed past DW_UNROLLED_GROUPS.
                let groups: Vec<&[VecCol]> = cols.chunks(DW_GROUP).collect();
                let whole = groups
                    .iter()
                    .take_while(|g| {
                        g.len() == DW_GROUP
                            && g.iter().all(|v| v.lanes == t.lanes && v.store == t.lanes)
                    })
                    .count();
                let looped = if self.target.optimize == Optimize::Size || whole > DW_UNROLLED_GROUPS
                {
                    whole
                } else {
                    0
                };
                let mut rest = &groups[..];
                if looped >= 2 {
                    let step = (DW_GROUP * t.lanes as usize) as u64;
                    cg.for_loop(looped, &mut |cg, g| {
                        group_body(cg, groups[0], cg.mul(g, step))
                    });
                    rest = &groups[looped..];
                }
                for group in rest {
                    group_body(cg, group, cg.i64(0));
                }
            };
            let tile = |cg: &Self, rows: usize| {
                let ow0 = cg.mul(ru.tile, mr as u64);
                let full = (oh_count, ow_count);
                cg.interior_or_checked(ru.oh, ow0, rows, ih_in, iw_in, full, &|cg, chk| {
                    tile_body(cg, rows, chk)
                });
            };
            cg.by_rows(ru.tile, full_rows, part_rows, mr, &tile);
        });
    }

    /// `lanes` integers of the input at `p + off` as i32: its bytes of type `bytes` widened, or
    /// its f32 values (integers: `core/packing/depthwise.rs`) converted.
    fn tap_ints(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        lanes: u32,
        bytes: Option<DType>,
    ) -> VectorValue<'ctx> {
        let t = self.ctx.i32_type().vec_type(lanes);
        match bytes {
            Some(DType::U8) => {
                let b = self.load_bytes(p, off, lanes);
                self.b.build_int_z_extend(b, t, "").unwrap()
            }
            Some(_) => {
                let b = self.load_bytes(p, off, lanes);
                self.b.build_int_s_extend(b, t, "").unwrap()
            }
            None => {
                let v = self.vload(p, off, lanes);
                self.b.build_float_to_signed_int(v, t, "").unwrap()
            }
        }
    }

    /// `lanes` floats at `p + off + l·stride` (a plain vector load when `stride` is 1).
    fn gather(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        stride: u64,
        lanes: u32,
    ) -> VectorValue<'ctx> {
        if stride == 1 {
            return self.vload(p, off, lanes);
        }
        let mut v = self.vec_ty(lanes).const_zero();
        for l in 0..lanes {
            let e = self
                .load(p, self.add(off, self.i64(l as u64 * stride)), DType::F32)
                .into_float_value();
            v = self
                .b
                .build_insert_element(v, e, self.ctx.i32_type().const_int(l as u64, false), "")
                .unwrap();
        }
        v
    }
}
