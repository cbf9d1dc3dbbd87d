//! Staging: copying a chunk of channels-minor (NHWC) input channels-major onto the stack, so
//! `conv.rs`' channels × pixels path can load its pixels as vectors (`packing::conv_staged`
//! decides which convolutions do).
//!
//! Contract: [`Cg::stage_chunk`] writes channel `ci`, pixel `p` of the chunk at `ci·cw + p` of
//! the buffer for every `ci < c`, `p < n_px`, and nothing else; values are copied, not computed,
//! so staging changes no bit of the result.

use super::Cg;
use crate::codegen::core::packing::Tiles;
use crate::ir::DType;
use inkwell::IntPredicate;
use inkwell::values::{IntValue, PointerValue, VectorValue};

/// Where a staged chunk comes from: pixel `p0 + p`, channel `ci` of the group is element
/// `src0 + (p0 + p)·px_stride + ci·ch_stride` of `x`.
pub(super) struct StageFrom<'ctx> {
    pub x: PointerValue<'ctx>,
    pub src0: IntValue<'ctx>,
    pub p0: IntValue<'ctx>,
    pub px_stride: u64,
    pub ch_stride: u64,
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// Copies `n_px` pixels × `c` channels channels-major into `buf` (channel `ci`, pixel `p` at
    /// `ci·cw + p`). A whole chunk (`n_px == cw`) of contiguous channels moves in square blocks of
    /// a vector's lanes, transposed in registers; the rest element by element.
    pub(super) fn stage_chunk(
        &self,
        from: &StageFrom<'ctx>,
        buf: PointerValue<'ctx>,
        n_px: IntValue<'ctx>,
        c: usize,
        cw: usize,
    ) {
        let lanes = Tiles::for_target(self.target).lanes as usize;
        let at = |cg: &Self, p: IntValue<'ctx>, ci: IntValue<'ctx>| {
            cg.add(
                cg.add(from.src0, cg.mul(cg.add(from.p0, p), from.px_stride)),
                cg.mul(ci, from.ch_stride),
            )
        };
        let scalar = |cg: &Self, c_lo: usize, n: IntValue<'ctx>| {
            cg.for_range(cg.i64(0), n, &mut |cg, p| {
                cg.for_range(cg.i64(c_lo as u64), cg.i64(c as u64), &mut |cg, ci| {
                    let v = cg.load(from.x, at(cg, p, ci), DType::F32);
                    cg.store(buf, cg.add(cg.mul(ci, cw as u64), p), v, DType::F32);
                });
            });
        };
        let blocks = c / lanes;
        if from.ch_stride != 1 || blocks == 0 || cw % lanes != 0 || !lanes.is_power_of_two() {
            return scalar(self, 0, n_px);
        }
        let whole = self
            .b
            .build_int_compare(IntPredicate::EQ, n_px, self.i64(cw as u64), "")
            .unwrap();
        self.if_else(
            whole,
            &mut |cg| {
                cg.for_loop(blocks, &mut |cg, cb| {
                    let c0 = cg.mul(cb, lanes as u64);
                    for pb in 0..cw / lanes {
                        let rows: Vec<VectorValue<'ctx>> = (0..lanes)
                            .map(|i| {
                                let p = cg.i64((pb * lanes + i) as u64);
                                cg.vload(from.x, at(cg, p, c0), lanes as u32)
                            })
                            .collect();
                        for (j, col) in cg.transpose_square(rows).into_iter().enumerate() {
                            let ci = cg.add(c0, cg.i64(j as u64));
                            let off = cg.add(cg.mul(ci, cw as u64), cg.i64((pb * lanes) as u64));
                            cg.vstore(buf, off, col);
                        }
                    }
                });
                if blocks * lanes < c {
                    scalar(cg, blocks * lanes, n_px);
                }
            },
            &mut |cg| scalar(cg, 0, n_px),
        );
    }
}
