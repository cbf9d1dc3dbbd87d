//! The int8 [`ConvPath::PixelsByChannels`](super::ConvPath::PixelsByChannels) micro-kernel: a
//! convolution of int8 weights over activations that hold integers of one byte's range
//! (`ir/value_range.rs`), such as a quantized model's `convert(q) − zero_point`, with the
//! target's 4-byte dot product (`cpu/quad_dot.rs`: `vpdpbusd` on AVX-512 VNNI, `vpmaddwd` on
//! other x86-64, `sdot` on aarch64 with dotprod, `smull`/`sadalp` on baseline NEON), 4 input channels per step.
//!
//! Contract:
//! - The kernel is stored as VNNI quads per packed panel (`core/packing.rs`): panel `jr`, tap `t`,
//!   quad `q` (channels `4q..4q+3` of the group, zero past `C/G`), column `j` at byte
//!   `((jr·T·C4 + t·C4 + q)·nr + j)·4`, `C4 = ⌈(C/G)/4⌉`; then each padded column's f32 scale
//!   `s`, then its i32 sum of int8 values `Σq`. On Helium (`packing::dot_k` = 16) the same with
//!   groups of 16 channels for quads (`packing::conv_tap_channels`), or, where the channels do not
//!   fill 16 (`packing::conv_taps_merged`), every tap's quads one after the other in one k
//!   padded to 16 at its end: the kernel then copies each pixel's taps from the staged rows into
//!   one row (`copy_taps`) and multiplies it with one K loop.
//! - Per row tile (`rows` output pixels of one output row), the input rows its taps read are
//!   staged once into a stack buffer as bytes `a + o` (`o`: the byte offset of `Cpu.vnni`,
//!   `Packings::reads_vnni`'s plus `quad_dot::byte_shift`): `KH` rows × the tile's pixel span ×
//!   groups × `C4` quads, a pixel in the padding holding `o` (the value 0 as a byte), channels
//!   past `C/G` holding 0. At most
//!   `VNNI_STAGE_BYTES` (the packing decision checks it). Then every tap of every pixel is in the
//!   buffer: the tile has no bounds checks.
//! - Each output element is `Σ (a + o)·q` over taps and channels in i32 (exact: K ≤ 65536),
//!   started from `−o·Σq` so the offset cancels, then `f32(sum) · s`, the register epilogue and
//!   the store of the f32 kernel. With unit scales (onnxruntime's QLinearConv integers,
//!   `front/onnx/quant.rs`) and sums below 2^24 this is bit for bit the f32 kernel's result.

use super::super::Cg;
use super::super::byte_store::{Finished, byte_rounding};
use super::super::epilogue::{RegEpilogue, TilePos};
use super::super::gemm;
use super::super::quad_dot::{DotKind, MVE_ROWS};
use super::super::vector::{VecCol, vectors};
use super::{COL_PARTS, ConvShape, MAX_PIXEL_ROWS, MIN_ROW_UNITS, spare_registers};
use crate::codegen::core::Kernel;
use crate::codegen::core::packing::{
    Tiles, conv_tap_channels, conv_taps_merged, dot_k, panel_width,
};
use crate::ir::Window;
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::types::VectorType;
use inkwell::values::{IntValue, PointerValue, VectorValue};

/// Channels staged per vector step where they are contiguous (16 bytes).
const STAGE_C: u32 = 16;

/// Output pixels whose input one tile of a Helium convolution with merged taps stages together
/// (then multiplied one at a time, `packing::conv_taps_merged`): a span of 16 pixels (31 at
/// stride 2) takes the 16-pixel staging of narrow inputs; one pixel per tile had staged its 3×3
/// window pixel by pixel (vww's stem on the M55: 1.79 M of 6.59 M instructions).
const MERGED_STAGE_PIXELS: usize = 16;

/// Panels per tile of a convolution reading one input quad per tap (see `wide`).
const WIDE_PANELS: usize = 2;

/// Pixels staged per vector step where a pixel has at most 4 channels (one dword) and pixels are
/// contiguous: one 16-lane f32 load per channel (an AVX-512 register; two on AVX2). The scalar
/// staging had taken most of squeezenet's int8 stem (3 channels, 7×7 taps: 18 staged pixels per
/// output pixel against 49 dot products).
const NARROW_STAGE_PIXELS: u32 = 16;

/// The shortest span the narrow staging takes, in steps of this many pixels: squeezenet's 3×3
/// stride-2 stem stages 15 pixels per tile.
const NARROW_STAGE_MIN: u32 = 8;

impl<'a, 'ctx> Cg<'a, 'ctx> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn conv_pixels_by_channels_i8(
        &self,
        k: &Kernel<'ctx>,
        win: &Window,
        cs: &ConvShape,
        (xi, wi): (usize, usize),
        flops: u64,
        epi: &Option<RegEpilogue>,
        offset: i32,
    ) {
        let t = Tiles::for_target(self.target);
        let ConvShape {
            n: n_count,
            c: c_all,
            groups,
            h,
            wd,
            o,
            kh,
            kw,
            oh: oh_count,
            ow: ow_count,
            ref xst,
            wst: _,
            ref ost,
            ih_in: _,
            iw_in: _,
            pixels_dim: _,
        } = *cs;
        let (c, og) = (c_all / groups, o / groups);
        // Quads per pixel, group and tap (`packing::conv_tap_channels`); merged taps read a
        // per-pixel copy of them (`packing::conv_taps_merged`).
        let gk = dot_k(self.target);
        let c4 = conv_tap_channels(gk, groups, c) / 4;
        let merged = conv_taps_merged(gk, groups, c);
        let nr = panel_width(og, &t);
        let nv = nr / t.lanes as usize;
        // An accumulator takes two registers on baseline NEON, a B vector two with `vpmaddwd`,
        // which also widens the row into two and makes two products, and with `smlad`, whose
        // tile lives in the core registers (`quad_dot.rs`).
        let kind = DotKind::of(self.target);
        // Helium's merged taps: a tile stages `MERGED_STAGE_PIXELS` pixels' input once, then
        // copies and multiplies one pixel at a time.
        let pixel_loop = merged && kind == Some(DotKind::Mve);
        let regs = kind.map_or(self.target.vector_registers as usize, |k| {
            k.tile_registers(self.target)
        });
        // `SMLAD_REGISTERS` already left the loop's own registers free.
        let spare = if kind == Some(DotKind::Smlad) {
            0
        } else {
            spare_registers(regs)
        };
        let acc_regs = kind.map_or(1, DotKind::registers);
        let b_regs = nv * kind.map_or(1, DotKind::b_registers);
        let madd_regs = if kind == Some(DotKind::Madd) { 3 } else { 0 };
        let rows_for = |nv: usize| {
            if pixel_loop {
                return gemm::rows_for_issue(ow_count, MERGED_STAGE_PIXELS, nv);
            }
            if kind == Some(DotKind::Mve) {
                return gemm::rows_for_issue(ow_count, MVE_ROWS, nv);
            }
            let b_regs = b_regs * nv / (nr / t.lanes as usize);
            let rows_max = (regs.saturating_sub(b_regs + madd_regs + spare) / (nv * acc_regs))
                .clamp(1, MAX_PIXEL_ROWS);
            gemm::rows_for_issue(ow_count, rows_max, nv)
        };
        // A one-quad input (an image's 3 channels) gives each tap one broadcast per row: with
        // one panel per tile the broadcasts of every tap and row are the same for each panel, so
        // LLVM hoists them out of the panel loop and spills them (squeezenet's int8 stem spent a
        // tenth of its time there). Such a convolution takes `WIDE_PANELS` panels per tile.
        let wide = c4 == 1
            && groups == 1
            && kind != Some(DotKind::Mve)
            && og % (WIDE_PANELS * nr) == 0
            && n_count * oh_count * ow_count.div_ceil(rows_for(WIDE_PANELS * nv)) >= MIN_ROW_UNITS;
        let ppt = if wide { WIDE_PANELS } else { 1 };
        let mr = rows_for(ppt * nv);
        let tiles_per_row = ow_count.div_ceil(mr);
        let (full_rows, part_rows) = (ow_count / mr, ow_count % mr);
        // Column chunks: `ppt` panels each.
        let (full_cols, part_cols) = (og / (ppt * nr), og % (ppt * nr));
        let chunks_g = og.div_ceil(ppt * nr);
        let chunks = groups * chunks_g;
        let taps = kh * kw;
        // Quads per column: every tap's, padded to whole groups of the dot product's k.
        let kk4 = (taps * c4 * 4).div_ceil(gk) * gk / 4;
        let panels = groups * og.div_ceil(nr);
        let quads_bytes = panels * nr * kk4 * 4;
        let (sh, sw) = (win.stride[0], win.stride[1]);
        let (dh, dw) = (win.dilation[0], win.dilation[1]);
        let (ph, pw) = (win.pad_low[0], win.pad_low[1]);
        // Input pixels one tile of `rows` output pixels reads along a row.
        let span = |rows: usize| (rows - 1) * sw + (kw - 1) * dw + 1;
        let row_units = n_count * oh_count * tiles_per_row;
        let col_parts = if row_units < MIN_ROW_UNITS {
            chunks.min(COL_PARTS)
        } else {
            1
        };
        let units = row_units * col_parts;
        let i32t = self.ctx.i32_type();
        // The input stored as bytes (`byte_storage.rs`): staged without conversion.
        let x_bytes = self
            .be
            .args_stored
            .borrow()
            .get(xi)
            .copied()
            .flatten()
            .is_some();
        // Biased bytes (`Range::biased_byte`: `x + bias`) stage as `x + offset` all the same.
        let x_bias = self.be.args_bias.borrow().get(xi).copied().unwrap_or(0);
        let mut dp = self.quad_dot();
        // `smlad` reads its staged rows widened to halfwords (`Cg::widen_quads`), except where
        // a tap has one quad (a stem's few channels): each staged dword is read by few products
        // there, and widening cost more than it saved (vww's stem on the M4: 3.54 M
        // instructions unwidened, 3.79 M widened).
        dp.wide_a = dp.kind == DotKind::Smlad && c4 > 1;
        let lanes = dp.lanes;
        // Integer weights need no scale multiply; an integer bias, the epilogue's first step,
        // goes into the sums' start (`kernel.rs` `sum_bias`: exact).
        let unit = self.be.unit_scales.get();
        let (bias, epi) = match epi {
            Some(e) if self.be.sum_bias.get() => (
                Some(RegEpilogue {
                    steps: e.steps[..1].to_vec(),
                }),
                &Some(RegEpilogue {
                    steps: e.steps[1..].to_vec(),
                }),
            ),
            _ => (None, epi),
        };
        let rounded = match (self.be.out_stored.get(), epi) {
            (Some(d), Some(e)) => byte_rounding(
                e,
                &self.scalar_consts.borrow(),
                d,
                (lanes, self.target.has_avx512bw()),
                &|x| self.fused_range(x),
            ),
            _ => None,
        };
        let i32v = i32t.vec_type(lanes);
        self.conv_tasks(k, units, flops, &|cg, tk, u| {
            let (f, x, w, out) = (tk.f, tk.args[xi], tk.args[wi], tk.out);
            let (ru, jr_lo, jr_hi) = cg.unit_panels(u, col_parts, chunks, oh_count, tiles_per_row);
            let ow0 = cg.mul(ru.tile, mr as u64);
            let per_rows = |cg: &Self, rows: usize| {
                let sp = span(rows);
                let quads = kh * sp * groups * c4;
                // Widened rows: one buffer of twice the quads, staged into its upper half and
                // widened in place (`Cg::widen_quads`).
                let buf = cg.dword_buffer(f, if dp.wide_a { 2 * quads } else { quads });
                let stage = if dp.wide_a {
                    cg.gep(buf, cg.i64(quads as u64))
                } else {
                    buf
                };
                cg.stage_rows(
                    (x, xst, x_bytes, x_bias),
                    stage,
                    (ru.n, ru.oh, ow0),
                    (kh, sp, groups, c, c4),
                    (h, wd),
                    ((sh, dh, ph), (sw, pw)),
                    offset,
                );
                let stage = if dp.wide_a {
                    cg.widen_quads(&dp, buf, quads);
                    buf
                } else {
                    stage
                };
                // Merged taps: row `i`'s taps' quads one after the other at dword `i·kk4`, zero
                // to the end of the row; pixel `i` of the staged span's from `first`.
                let copy_taps =
                    |cg: &Self, buf: PointerValue<'ctx>, i: usize, first: IntValue<'ctx>| {
                        for y in 0..kh {
                            for xw in 0..kw {
                                let src = cg
                                    .add(first, cg.i64(((y * sp + i * sw + xw * dw) * c4) as u64));
                                let dst = (i * kk4 + (y * kw + xw) * c4) as u64;
                                cg.for_loop(c4, &mut |cg, q| {
                                    let d =
                                        cg.b.build_load(cg.gep(stage, cg.add(src, q)), "").unwrap();
                                    cg.b.build_store(cg.gep(buf, cg.add(cg.i64(dst), q)), d)
                                        .unwrap();
                                });
                            }
                        }
                        for q in taps * c4..kk4 {
                            let at = cg.i64((i * kk4 + q) as u64);
                            cg.b.build_store(cg.gep(buf, at), i32t.const_zero())
                                .unwrap();
                        }
                    };
                // Every panel of the unit for `rows` output pixels from `ow0`.
                let panels = |cg: &Self,
                              rows: usize,
                              ow0: IntValue<'ctx>,
                              taps_copy: Option<PointerValue<'ctx>>| {
                    cg.for_range(jr_lo, jr_hi, &mut |cg, jr| {
                        let (grp, jp) = if groups == 1 {
                            (cg.i64(0), jr)
                        } else {
                            (cg.udiv(jr, chunks_g as u64), cg.urem(jr, chunks_g as u64))
                        };
                        let oc0 = cg.add(cg.mul(grp, og as u64), cg.mul(jp, (ppt * nr) as u64));
                        let tile = |cg: &Self, cols: &[VecCol]| {
                            let col0 = cg.mul(jr, (ppt * nr) as u64);
                            let col_at = |v: &VecCol| cg.add(col0, cg.i64(v.col as u64));
                            // i32 sums from −offset·Σq.
                            let o = i32t.const_int((-offset) as u64, true);
                            let neg_o = VectorType::const_vector(&vec![o; lanes as usize]);
                            let start: Vec<VectorValue<'ctx>> = cols
                                .iter()
                                .map(|v| {
                                    let at = cg.add(
                                        cg.i64((quads_bytes + 4 * panels * nr) as u64),
                                        cg.mul(col_at(v), 4),
                                    );
                                    let sums = cg.load_vector(w, at, i32v, 4);
                                    let s = cg.b.build_int_mul(sums, neg_o, "").unwrap();
                                    let Some(b) = bias.as_ref() else {
                                        return s;
                                    };
                                    // 0 + bias: the bias of each lane's channel, as the epilogue
                                    // reads it.
                                    let ch = cg.add(oc0, cg.i64(v.col as u64));
                                    let zero = cg.vec_ty(lanes).const_zero();
                                    let role = |d: usize| match d {
                                        1 => TilePos::Col,
                                        _ => TilePos::At(ru.n),
                                    };
                                    let bf = cg.apply_epilogue(b, tk, zero, ow0, ch, v, &role);
                                    let bi = cg.b.build_float_to_signed_int(bf, i32v, "").unwrap();
                                    cg.b.build_int_add(s, bi, "").unwrap()
                                })
                                .collect();
                            let acc: Vec<Vec<PointerValue<'ctx>>> = (0..rows)
                                .map(|_| {
                                    start
                                        .iter()
                                        .map(|s| {
                                            let p = cg.slot(f, dp.acc_type(cg).into());
                                            cg.b.build_store(p, cg.dot_begin(&dp, *s)).unwrap();
                                            p
                                        })
                                        .collect()
                                })
                                .collect();
                            if let Some(buf) = taps_copy {
                                let b_base = cg.mul(
                                    cg.mul(cg.mul(jr, ppt as u64), kk4 as u64),
                                    (4 * nr) as u64,
                                );
                                let b_off: Vec<u64> = cols
                                    .iter()
                                    .map(|v| {
                                        ((v.col / nr) * kk4 * 4 * nr + gk * (v.col % nr)) as u64
                                    })
                                    .collect();
                                let a_off: Vec<u64> = (0..rows).map(|i| (i * kk4) as u64).collect();
                                cg.dot_steps(
                                    &dp,
                                    f,
                                    &acc,
                                    cg.i64((kk4 * 4 / gk) as u64),
                                    (buf, cg.i64(0), &a_off),
                                    (w, b_base, &b_off, (gk * nr) as u64),
                                );
                            }
                            // One tap's K steps (a runtime loop over the taps on Helium, whose
                            // unrolled taps spill q registers, moved every sum between core and
                            // vector registers per tap: resnet on the M55 5.71 M -> 6.03 M).
                            let tap_steps = |cg: &Self, y: IntValue<'ctx>, xw: IntValue<'ctx>| {
                                // Dword of row i, quad 0: ((y·span + i·sw + xw·dw)·G + grp)·C4:
                                // the tile's first row, then each row's constant offset.
                                let px0 = cg.add(cg.mul(y, sp as u64), cg.mul(xw, dw as u64));
                                let a_base =
                                    cg.mul(cg.add(cg.mul(px0, groups as u64), grp), c4 as u64);
                                let a_off: Vec<u64> =
                                    (0..rows).map(|i| (i * sw * groups * c4) as u64).collect();
                                // Column `v.col` of the tile: column `v.col mod nr` of panel
                                // `jr·ppt + v.col div nr`; its offset from the tile's first
                                // panel at this tap is constant.
                                let tap = cg.add(cg.mul(y, kw as u64), xw);
                                let b_base = cg.mul(
                                    cg.add(
                                        cg.mul(cg.mul(jr, ppt as u64), kk4 as u64),
                                        cg.mul(tap, c4 as u64),
                                    ),
                                    (4 * nr) as u64,
                                );
                                let b_off: Vec<u64> = cols
                                    .iter()
                                    .map(|v| {
                                        ((v.col / nr) * kk4 * 4 * nr + gk * (v.col % nr)) as u64
                                    })
                                    .collect();
                                cg.dot_steps(
                                    &dp,
                                    f,
                                    &acc,
                                    cg.i64((c4 * 4 / gk) as u64),
                                    (stage, a_base, &a_off),
                                    (w, b_base, &b_off, (gk * nr) as u64),
                                );
                            };
                            if !merged {
                                for y in 0..kh {
                                    for xw in 0..kw {
                                        tap_steps(cg, cg.i64(y as u64), cg.i64(xw as u64));
                                    }
                                }
                            }
                            let scales: Vec<Option<VectorValue<'ctx>>> = cols
                                .iter()
                                .map(|v| {
                                    (!unit)
                                        .then(|| cg.column_scales(w, quads_bytes, col_at(v), lanes))
                                })
                                .collect();
                            for (i, row) in acc.iter().enumerate() {
                                let owi = cg.add(ow0, cg.i64(i as u64));
                                let pix = cg.add(
                                    cg.add(cg.mul(ru.n, ost[0]), cg.mul(ru.oh, ost[2])),
                                    cg.mul(owi, ost[3]),
                                );
                                // Stored as bytes (`byte_storage.rs`): finished vectors gathered
                                // for one packed store where four whole ones make 64 bytes.
                                let mut finished: Vec<Finished<'ctx>> = Vec::new();
                                for ((v, slot), s) in cols.iter().zip(row).zip(&scales) {
                                    let ch = cg.add(oc0, cg.i64(v.col as u64));
                                    let off = cg.add(pix, cg.mul(ch, ost[1]));
                                    let sum =
                                        cg.b.build_load(*slot, "").unwrap().into_vector_value();
                                    let sum = cg.dot_end(&dp, sum);
                                    let xf =
                                        cg.b.build_signed_int_to_float(sum, cg.vec_ty(lanes), "")
                                            .unwrap();
                                    let mut val = match s {
                                        Some(s) => cg.b.build_float_mul(xf, *s, "").unwrap(),
                                        None => xf,
                                    };
                                    let role = |d: usize| match d {
                                        0 => TilePos::At(ru.n),
                                        1 => TilePos::Col,
                                        d if d == cs.pixels_dim => TilePos::Row,
                                        _ => TilePos::At(ru.oh),
                                    };
                                    if let Some(r) = rounded.as_ref() {
                                        // Bytes: the rounding (and a clamp the store's saturation
                                        // does) taken in integers (`byte_store.rs`).
                                        let u =
                                            cg.apply_epilogue(&r.steps, tk, val, owi, ch, v, &role);
                                        assert_eq!(ost[1], 1, "bytes are stored channels-minor");
                                        finished.push(Finished {
                                            off,
                                            val: cg.rounded_ints(u, r.take),
                                            ints: true,
                                            saturate: r.saturate,
                                            col: v.col,
                                            lanes: v.store,
                                        });
                                        continue;
                                    }
                                    if let Some(e) = epi {
                                        val = cg.apply_epilogue(e, tk, val, owi, ch, v, &role);
                                    }
                                    if cg.be.out_stored.get().is_some() {
                                        // Channels minor (`byte_storage.rs`): contiguous lanes.
                                        assert_eq!(ost[1], 1, "bytes are stored channels-minor");
                                        finished.push(Finished {
                                            off,
                                            val,
                                            ints: false,
                                            saturate: false,
                                            col: v.col,
                                            lanes: v.store,
                                        });
                                    } else {
                                        cg.store_lanes_strided(out, off, val, v.store, ost[1]);
                                    }
                                }
                                if let Some(d) = cg.be.out_stored.get() {
                                    cg.store_finished_bytes(out, &finished, d);
                                }
                            }
                        };
                        let full = vectors(ppt * nr, t.lanes, true);
                        let part = vectors(part_cols, t.lanes, true);
                        // Helium: one column vector at a time over `rows` pixels (their 4 ×
                        // rows sums in core registers), the panel's vectors one after another.
                        let tile = |cg: &Self, cols: &[VecCol]| {
                            if kind == Some(DotKind::Mve) && rows > 1 {
                                for v in cols {
                                    tile(cg, std::slice::from_ref(v));
                                }
                            } else {
                                tile(cg, cols);
                            }
                        };
                        match (full_cols > 0, part_cols > 0) {
                            (true, false) => tile(cg, &full),
                            (false, true) => tile(cg, &part),
                            _ => {
                                let is_full =
                                    cg.b.build_int_compare(
                                        IntPredicate::ULT,
                                        jp,
                                        cg.i64(full_cols as u64),
                                        "",
                                    )
                                    .unwrap();
                                cg.if_else(is_full, &mut |cg| tile(cg, &full), &mut |cg| {
                                    tile(cg, &part)
                                });
                            }
                        }
                    });
                };
                if pixel_loop {
                    // One pixel at a time from the staged span (Helium: 8 accumulators a pixel).
                    let buf = cg.dword_buffer(f, kk4);
                    cg.for_loop(rows, &mut |cg, i| {
                        copy_taps(cg, buf, 0, cg.mul(i, (sw * c4) as u64));
                        panels(cg, 1, cg.add(ow0, i), Some(buf));
                    });
                } else {
                    let taps_copy = merged.then(|| {
                        let buf = cg.dword_buffer(f, rows * kk4);
                        for i in 0..rows {
                            copy_taps(cg, buf, i, cg.i64(0));
                        }
                        buf
                    });
                    panels(cg, rows, ow0, taps_copy);
                }
            };
            cg.by_rows(ru.tile, full_rows, part_rows, mr, &per_rows);
        });
    }

    /// `lanes` input values at element `off` of `x` as i32 lanes whose low byte is the value's:
    /// f32 integers converted, or bytes (`bytes`: stored so, `byte_storage.rs`) widened.
    fn staged_ints(
        &self,
        x: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        lanes: u32,
        bytes: bool,
    ) -> VectorValue<'ctx> {
        let i32v = self.ctx.i32_type().vec_type(lanes);
        if bytes {
            let b = self.load_bytes(x, off, lanes);
            return self.b.build_int_z_extend(b, i32v, "").unwrap();
        }
        let xv = self.vload(x, off, lanes);
        self.b.build_float_to_signed_int(xv, i32v, "").unwrap()
    }

    /// The narrow staging's step on Helium: 16 contiguous pixels from element `pix` of `x`,
    /// channel `ci` at `pix + ci·cs`, as the pixels' dwords at dword `at` of the staging bytes
    /// `stage`: byte `ci` of pixel `p`'s dword is channel `ci`'s value plus `add` (mod 256),
    /// bytes past the `c` channels zero: the 4 byte vectors stored interleaved by one `vst4`
    /// (LLVM 14 lowers the equivalent 64-byte shuffle lane by lane).
    #[allow(clippy::too_many_arguments)]
    fn stage_interleaved(
        &self,
        x: PointerValue<'ctx>,
        pix: IntValue<'ctx>,
        cs: u64,
        (c, add, x_bytes): (usize, i32, bool),
        stage: PointerValue<'ctx>,
        at: IntValue<'ctx>,
    ) {
        let lanes = NARROW_STAGE_PIXELS;
        let i8t = self.ctx.i8_type();
        let i32t = self.ctx.i32_type();
        let i8v = i8t.vec_type(lanes);
        let off = VectorType::const_vector(&vec![i32t.const_int(add as u64, true); lanes as usize]);
        let chans: Vec<VectorValue<'ctx>> = (0..4)
            .map(|ci| {
                if ci >= c {
                    return i8v.const_zero();
                }
                let iv =
                    self.staged_ints(x, self.add(pix, self.i64(ci as u64 * cs)), lanes, x_bytes);
                let iv = self.b.build_int_add(iv, off, "").unwrap();
                self.b.build_int_truncate(iv, i8v, "").unwrap()
            })
            .collect();
        // `vst40`..`vst43`: together they store byte `4p + j` = channel j's pixel p.
        let name = "llvm.arm.mve.vst4q.p0i8.v16i8";
        let i8p = i8t.ptr_type(AddressSpace::default());
        let f = self.m.get_function(name).unwrap_or_else(|| {
            let args = [
                i8p.into(),
                i8v.into(),
                i8v.into(),
                i8v.into(),
                i8v.into(),
                i32t.into(),
            ];
            let ty = self.ctx.void_type().fn_type(&args, false);
            self.m.add_function(name, ty, None)
        });
        let bytes = self.gep(stage, self.mul(at, 4));
        for stage_no in 0..4u64 {
            let mut args: Vec<inkwell::values::BasicMetadataValueEnum<'ctx>> = vec![bytes.into()];
            args.extend(
                chans
                    .iter()
                    .map(|&v| -> inkwell::values::BasicMetadataValueEnum<'ctx> { v.into() }),
            );
            args.push(i32t.const_int(stage_no, false).into());
            self.b.build_call(f, &args, "").unwrap();
        }
    }

    /// Stages the input rows of one row tile (module doc): for each of the `kh` taps' input rows
    /// of output row `oh` and each of `span` input pixels from output pixel `ow0`'s first tap, every
    /// group's `c` channels as bytes `a + offset` in `c4` dwords (padding pixels `offset`, channels
    /// past `c` zero). Bytes stored with a bias (`x_bias`: the byte `a + x_bias`) add
    /// `offset − x_bias`.
    #[allow(clippy::too_many_arguments)]
    fn stage_rows(
        &self,
        (x, xst, x_bytes, x_bias): (PointerValue<'ctx>, &[u64], bool, i32),
        stage: PointerValue<'ctx>,
        (n, oh, ow0): (IntValue<'ctx>, IntValue<'ctx>, IntValue<'ctx>),
        (kh, span, groups, c, c4): (usize, usize, usize, usize, usize),
        (h, wd): (usize, usize),
        ((sh, dh, ph), (sw, pw)): ((usize, usize, usize), (usize, usize)),
        offset: i32,
    ) {
        let i8t = self.ctx.i8_type();
        let i32t = self.ctx.i32_type();
        // What a pixel's value adds (its bias off); a padding pixel is `offset` itself.
        let add = offset - x_bias;
        let off = i32t.const_int(add as u64, true);
        let bytes = self
            .b
            .build_pointer_cast(stage, i8t.ptr_type(AddressSpace::default()), "")
            .unwrap();
        let fill = i8t.const_int(offset as u64 & 0xff, false);
        // Channels in 16-lane vectors where they are contiguous, whole vectors per group; one
        // by one from their sources when read through a channel shuffle (`ir/shuffle.rs`).
        let shuffle = self.be.in_channels.get();
        let vec_c = if shuffle.is_none() && xst[1] == 1 && c % STAGE_C as usize == 0 {
            c / STAGE_C as usize
        } else {
            0
        };
        let off16 = VectorType::const_vector(&vec![off; STAGE_C as usize]);
        for y in 0..kh {
            let ih = self
                .b
                .build_int_sub(
                    self.add(self.mul(oh, sh as u64), self.i64((y * dh) as u64)),
                    self.i64(ph as u64),
                    "",
                )
                .unwrap();
            let row_ok = self.in_range(ih, h);
            let ih = self.clamp_index(ih, h);
            let iw0 = self.mul(ow0, sw as u64);
            let pixel = |cg: &Self, p: IntValue<'ctx>| {
                let iw =
                    cg.b.build_int_sub(cg.add(iw0, p), cg.i64(pw as u64), "")
                        .unwrap();
                let ok = cg.b.build_and(row_ok, cg.in_range(iw, wd), "").unwrap();
                let iw = cg.clamp_index(iw, wd);
                let px = cg.add(cg.i64((y * span) as u64), p);
                let pix = cg.add(
                    cg.add(cg.mul(n, xst[0]), cg.mul(ih, xst[2])),
                    cg.mul(iw, xst[3]),
                );
                cg.for_loop(groups, &mut |cg, g| {
                    // First byte of this pixel's group: ((px·G + g)·C4)·4.
                    let dst = cg.mul(cg.add(cg.mul(px, groups as u64), g), (c4 * 4) as u64);
                    let src = match shuffle {
                        Some(_) => pix,
                        None => cg.add(pix, cg.mul(g, (c as u64) * xst[1])),
                    };
                    cg.if_else(
                        ok,
                        &mut |cg| {
                            cg.for_loop(vec_c, &mut |cg, v| {
                                let at = cg.add(src, cg.mul(v, STAGE_C as u64));
                                let iv = cg.staged_ints(x, at, STAGE_C, x_bytes);
                                let iv = cg.b.build_int_add(iv, off16, "").unwrap();
                                let bv =
                                    cg.b.build_int_truncate(iv, i8t.vec_type(STAGE_C), "")
                                        .unwrap();
                                let vp =
                                    cg.b.build_pointer_cast(
                                        cg.gep(bytes, cg.add(dst, cg.mul(v, STAGE_C as u64))),
                                        bv.get_type().ptr_type(AddressSpace::default()),
                                        "",
                                    )
                                    .unwrap();
                                let st = cg.b.build_store(vp, bv).unwrap();
                                st.set_alignment(1).unwrap();
                            });
                            let done = (vec_c * STAGE_C as usize) as u64;
                            cg.for_range(cg.i64(done), cg.i64((c4 * 4) as u64), &mut |cg, ci| {
                                let inside = cg
                                    .b
                                    .build_int_compare(IntPredicate::ULT, ci, cg.i64(c as u64), "")
                                    .unwrap();
                                let cc = cg.umin(ci, cg.i64(c as u64 - 1));
                                let cc = match &shuffle {
                                    // `src` is the pixel's (no group offset): the source channel.
                                    Some(s) => {
                                        cg.channel_source(s, cg.add(cg.mul(g, c as u64), cc))
                                    }
                                    None => cc,
                                };
                                let a =
                                    cg.b.build_load(cg.gep(x, cg.add(src, cg.mul(cc, xst[1]))), "")
                                        .unwrap();
                                let v = if x_bytes {
                                    cg.b.build_int_z_extend(a.into_int_value(), i32t, "")
                                        .unwrap()
                                } else {
                                    cg.b.build_float_to_signed_int(a.into_float_value(), i32t, "")
                                        .unwrap()
                                };
                                let v = cg.b.build_int_add(v, off, "").unwrap();
                                let v = cg.b.build_int_truncate(v, i8t, "").unwrap();
                                let v =
                                    cg.b.build_select(inside, v, i8t.const_zero(), "")
                                        .unwrap()
                                        .into_int_value();
                                cg.b.build_store(cg.gep(bytes, cg.add(dst, ci)), v).unwrap();
                            });
                        },
                        &mut |cg| {
                            cg.for_loop(c4 * 4, &mut |cg, ci| {
                                let inside = cg
                                    .b
                                    .build_int_compare(IntPredicate::ULT, ci, cg.i64(c as u64), "")
                                    .unwrap();
                                let v =
                                    cg.b.build_select(inside, fill, i8t.const_zero(), "")
                                        .unwrap()
                                        .into_int_value();
                                cg.b.build_store(cg.gep(bytes, cg.add(dst, ci)), v).unwrap();
                            });
                        },
                    );
                });
            };
            // Without vector registers (`smlad`) any span takes it: LLVM's scalar code for the
            // pixels' dwords beats the pixel-by-pixel bytes (vww's stem on the M4: 3 × 7 pixels
            // per tile of 3 outputs, 15 instructions a byte).
            let scalar = DotKind::of(self.target) == Some(DotKind::Smlad);
            let narrow = shuffle.is_none()
                && groups == 1
                && c4 == 1
                && xst[3] == 1
                && (span >= NARROW_STAGE_MIN as usize || scalar);
            if !narrow {
                self.for_loop(span, &mut |cg, p| pixel(cg, p));
                continue;
            }
            // At most 4 channels, pixels contiguous (an NCHW input such as an image's 3
            // channels): 16 pixels per step (8 in a shorter span), each channel's values loaded as one vector and
            // packed into the pixels' dwords; the last step ends at the span's end, overlapping
            // the one before it. A step reaching into the padding stages pixel by pixel.
            let l = if span >= NARROW_STAGE_PIXELS as usize {
                NARROW_STAGE_PIXELS
            } else if span >= NARROW_STAGE_MIN as usize {
                NARROW_STAGE_MIN
            } else {
                span as u32
            } as u64;
            let dwords = self
                .b
                .build_pointer_cast(stage, i32t.ptr_type(AddressSpace::default()), "")
                .unwrap();
            let splat =
                |v: u64| VectorType::const_vector(&vec![i32t.const_int(v, false); l as usize]);
            // Helium: the channels' bytes interleaved into the pixels' dwords by one `vst4`
            // ([`Cg::stage_interleaved`]) where LLVM widened them to 32-bit lanes through
            // the stack (resnet's stem on the M55: 654 k instructions).
            let interleave = self.target.has_helium();
            self.for_loop(span.div_ceil(l as usize), &mut |cg, v| {
                let p0 = cg.umin(cg.mul(v, l), cg.i64(span as u64 - l));
                let iw =
                    cg.b.build_int_sub(cg.add(iw0, p0), cg.i64(pw as u64), "")
                        .unwrap();
                let last = cg.add(iw, cg.i64(l - 1));
                let ok = cg.b.build_and(row_ok, cg.in_range(iw, wd), "").unwrap();
                let ok = cg.b.build_and(ok, cg.in_range(last, wd), "").unwrap();
                cg.if_else(
                    ok,
                    &mut |cg| {
                        let pix = cg.add(cg.add(cg.mul(n, xst[0]), cg.mul(ih, xst[2])), iw);
                        if interleave && l == u64::from(NARROW_STAGE_PIXELS) {
                            let at = cg.add(cg.i64((y * span) as u64), p0);
                            return cg.stage_interleaved(
                                x,
                                pix,
                                xst[1],
                                (c, add, x_bytes),
                                bytes,
                                at,
                            );
                        }
                        let mut d = VectorType::const_vector(&vec![i32t.const_zero(); l as usize]);
                        for ci in 0..c {
                            let at = cg.add(pix, cg.i64(ci as u64 * xst[1]));
                            let iv = cg.staged_ints(x, at, l as u32, x_bytes);
                            let iv = cg.b.build_int_add(iv, splat(add as u64), "").unwrap();
                            let iv = cg.b.build_and(iv, splat(0xff), "").unwrap();
                            let iv = cg.b.build_left_shift(iv, splat(8 * ci as u64), "").unwrap();
                            d = cg.b.build_or(d, iv, "").unwrap();
                        }
                        cg.vstore(dwords, cg.add(cg.i64((y * span) as u64), p0), d);
                    },
                    &mut |cg| {
                        cg.for_loop(l as usize, &mut |cg, j| pixel(cg, cg.add(p0, j)));
                    },
                );
            });
        }
    }
}
