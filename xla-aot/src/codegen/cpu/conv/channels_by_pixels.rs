//! The [`ConvPath::ChannelsByPixels`](super::ConvPath::ChannelsByPixels) tiles: unit stride
//! along W, input W contiguous (NCHW input), any groups. Rows of a tile are output channels of
//! one group (kernel values broadcast), columns are pixels of one output row loaded as vectors
//! from the input row, with masked loads where the window hangs over the border; stored as
//! vectors into an NCHW output, lane by lane into any other. A 1×1 convolution over whole rows
//! runs as one row of all pixels. Every output element is one running sum, channels outer and
//! taps inner (the module doc of `conv.rs` states the shared contract).

use super::super::Cg;
use super::super::epilogue::{RegEpilogue, TilePos};
use super::super::gemm;
use super::super::stage::StageFrom;
use super::super::vector::{VecCol, vectors};
use super::ConvShape;
use crate::codegen::core::Kernel;
use crate::codegen::core::packing::Tiles;
use crate::ir::{DType, Window};
use inkwell::IntPredicate;
use inkwell::values::{FloatValue, IntValue, VectorValue};

impl<'a, 'ctx> Cg<'a, 'ctx> {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn conv_channels_by_pixels(
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
            ref wst,
            ref ost,
            ih_in,
            iw_in,
            pixels_dim: _,
        } = *cs;
        // Per group: `c` input channels, `og` output channels in `row_tiles_g` row tiles.
        let (c, og) = (c_all / groups, o / groups);
        let mr = gemm::balanced(og, t.mr);
        let (full_rows, part_rows) = (og / mr, og % mr);
        let row_tiles_g = og.div_ceil(mr);
        let row_tiles = groups * row_tiles_g;
        let lanes = t.lanes as usize;
        // Pixels per chunk: the panel width, or fewer vectors for a narrow image.
        let cw = t.nr().min(ow_count.div_ceil(lanes) * lanes);
        let chunks_per_row = ow_count.div_ceil(cw);
        let (full_cols, part_cols) = (ow_count / cw, ow_count % cw);
        let units = n_count * oh_count * chunks_per_row;
        let masked_load = inkwell::intrinsics::Intrinsic::find("llvm.masked.load")
            .expect("llvm.masked.load exists")
            .get_declaration(
                self.m,
                &[
                    self.vec_ty(t.lanes).into(),
                    self.vec_ty(t.lanes)
                        .ptr_type(inkwell::AddressSpace::default())
                        .into(),
                ],
            )
            .expect("masked load declaration");
        self.conv_tasks(k, units, flops, &|cg, tk, u| {
            let (f, x, w, out) = (tk.f, tk.args[xi], tk.args[wi], tk.out);
            debug_assert!(
                xst[3] == 1 || c * cw <= 4096,
                "conv_staged bounds the stage"
            );
            let stage = (xst[3] != 1).then(|| {
                let ty = cg.ctx.f32_type().array_type((c * cw) as u32);
                let p = cg.slot(f, ty.into());
                cg.b.build_pointer_cast(p, cg.ptr_type(DType::F32), "")
                    .unwrap()
            });
            let ru = cg.row_unit(u, oh_count, chunks_per_row);
            let ow0 = cg.mul(ru.tile, cw as u64);
            let per_cols = |cg: &Self, cols: &[VecCol]| {
                cg.for_loop(row_tiles, &mut |cg, ir_all| {
                    // Row tile `ir` of group `grp`.
                    let (grp, ir) = if groups == 1 {
                        (cg.i64(0), ir_all)
                    } else {
                        (
                            cg.udiv(ir_all, row_tiles_g as u64),
                            cg.urem(ir_all, row_tiles_g as u64),
                        )
                    };
                    // A staged input (`conv_staged`): this group's channels of this chunk's
                    // pixels, copied channels-major into `stage` at its first row tile.
                    let (x, x_grp, x_st1) = match stage {
                        None => (x, cg.mul(grp, c as u64), xst[1]),
                        Some(buf) => {
                            let first =
                                cg.b.build_int_compare(IntPredicate::EQ, ir, cg.i64(0), "")
                                    .unwrap();
                            cg.if_then(first, &mut |cg| {
                                let left =
                                    cg.b.build_int_sub(cg.i64(ow_count as u64), ow0, "")
                                        .unwrap();
                                let lt =
                                    cg.b.build_int_compare(
                                        IntPredicate::ULT,
                                        left,
                                        cg.i64(cw as u64),
                                        "",
                                    )
                                    .unwrap();
                                let n_px =
                                    cg.b.build_select(lt, left, cg.i64(cw as u64), "")
                                        .unwrap()
                                        .into_int_value();
                                let src0 = cg.add(
                                    cg.mul(ru.n, xst[0]),
                                    cg.mul(cg.mul(grp, c as u64), xst[1]),
                                );
                                let from = StageFrom {
                                    x,
                                    src0,
                                    p0: ow0,
                                    px_stride: xst[3],
                                    ch_stride: xst[1],
                                };
                                cg.stage_chunk(&from, buf, n_px, c, cw);
                            });
                            (buf, cg.i64(0), cw as u64)
                        }
                    };
                    let tile_body = |cg: &Self, rows: usize, cols: &[VecCol], checked: bool| {
                        let oc0 = cg.add(cg.mul(grp, og as u64), cg.mul(ir, mr as u64));
                        let acc = cg.acc_slots(f, rows, cols);
                        // Per tap and vector: the input row offset and the lanes inside the image.
                        let mut taps = Vec::new();
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
                                let per_vec: Vec<(IntValue<'ctx>, VectorValue<'ctx>)> = cols
                                    .iter()
                                    .map(|v| {
                                        // iw of lane 0: ow0 + col + xw·dil - pad (stride 1).
                                        let iw0 =
                                            cg.b.build_int_sub(
                                                cg.add(
                                                    ow0,
                                                    cg.i64((v.col + xw * win.dilation[1]) as u64),
                                                ),
                                                cg.i64(win.pad_low[1] as u64),
                                                "",
                                            )
                                            .unwrap();
                                        let mask = cg.lane_mask(iw0, v.lanes, wd, row_ok);
                                        let off = if stage.is_some() {
                                            cg.b.build_int_sub(iw0, ow0, "").unwrap()
                                        } else {
                                            cg.add(
                                                cg.add(cg.mul(ru.n, xst[0]), cg.mul(ih, xst[2])),
                                                iw0,
                                            )
                                        };
                                        (off, mask)
                                    })
                                    .collect();
                                taps.push((y, xw, per_vec));
                            }
                        }
                        cg.for_loop(c, &mut |cg, ci| {
                            let xc = cg.mul(cg.add(x_grp, ci), x_st1);
                            for (y, xw, per_vec) in &taps {
                                let bv: Vec<VectorValue<'ctx>> = per_vec
                                    .iter()
                                    .map(|&(off, mask)| {
                                        if !checked {
                                            return cg.vload(x, cg.add(off, xc), t.lanes);
                                        }
                                        // Lanes outside the image are never read (their address may be).
                                        let ptr = unsafe {
                                            cg.b.build_gep(x, &[cg.add(off, xc)], "").unwrap()
                                        };
                                        let vp =
                                            cg.b.build_pointer_cast(
                                                ptr,
                                                cg.vec_ty(t.lanes)
                                                    .ptr_type(inkwell::AddressSpace::default()),
                                                "",
                                            )
                                            .unwrap();
                                        cg.call(
                                            masked_load,
                                            &[
                                                vp.into(),
                                                cg.ctx.i32_type().const_int(4, false).into(),
                                                mask.into(),
                                                cg.vec_ty(t.lanes).const_zero().into(),
                                            ],
                                        )
                                        .into_vector_value()
                                    })
                                    .collect();
                                let wt = cg.add(
                                    cg.mul(ci, wst[1]),
                                    cg.i64((y * wst[2] as usize + xw * wst[3] as usize) as u64),
                                );
                                for (i, row) in acc.iter().enumerate() {
                                    let oc = cg.add(oc0, cg.i64(i as u64));
                                    let a: FloatValue<'ctx> = cg
                                        .load(w, cg.add(cg.mul(oc, wst[0]), wt), DType::F32)
                                        .into_float_value();
                                    for (j, v) in cols.iter().enumerate() {
                                        cg.fma_into(row[j], cg.splat(a, v.lanes), bv[j]);
                                    }
                                }
                            }
                        });
                        for (i, row) in acc.iter().enumerate() {
                            let oc = cg.add(oc0, cg.i64(i as u64));
                            let base = cg.add(
                                cg.add(cg.mul(ru.n, ost[0]), cg.mul(oc, ost[1])),
                                cg.add(cg.mul(ru.oh, ost[2]), cg.mul(ow0, ost[3])),
                            );
                            for (v, slot) in cols.iter().zip(row) {
                                let mut val =
                                    cg.b.build_load(*slot, "").unwrap().into_vector_value();
                                if let Some(e) = epi {
                                    let px = cg.add(ow0, cg.i64(v.col as u64));
                                    let role = |d: usize| match d {
                                        0 => TilePos::At(ru.n),
                                        1 => TilePos::Row,
                                        2 => TilePos::At(ru.oh),
                                        _ => TilePos::Col,
                                    };
                                    val = cg.apply_epilogue(e, tk, val, oc, px, v, &role);
                                }
                                cg.store_lanes_strided(
                                    out,
                                    cg.add(base, cg.i64(v.col as u64 * ost[3])),
                                    val,
                                    v.store,
                                    ost[3],
                                );
                            }
                        }
                    };
                    let tile = |cg: &Self, rows: usize, cols: &[VecCol]| {
                        // A partial chunk's last vector reaches past the output row, and may
                        // reach past the input row: its loads always need their masks.
                        if cols.iter().any(|v| v.store < v.lanes) {
                            return tile_body(cg, rows, cols, true);
                        }
                        let width = cols.iter().map(|v| v.lanes as usize).sum::<usize>();
                        let full = (oh_count, ow_count);
                        cg.interior_or_checked(
                            ru.oh,
                            ow0,
                            width,
                            ih_in,
                            iw_in,
                            full,
                            &|cg, chk| tile_body(cg, rows, cols, chk),
                        );
                    };
                    cg.by_rows(ir, full_rows, part_rows, mr, &|cg, rows| {
                        tile(cg, rows, cols)
                    });
                });
            };
            let full = vectors(cw, t.lanes, true);
            let part = vectors(part_cols, t.lanes, true);
            match (full_cols > 0, part_cols > 0) {
                (true, false) => per_cols(cg, &full),
                (false, true) => per_cols(cg, &part),
                _ => {
                    let is_full = cg
                        .b
                        .build_int_compare(IntPredicate::ULT, ru.tile, cg.i64(full_cols as u64), "")
                        .unwrap();
                    cg.if_else(is_full, &mut |cg| per_cols(cg, &full), &mut |cg| {
                        per_cols(cg, &part)
                    });
                }
            }
        });
    }
}
