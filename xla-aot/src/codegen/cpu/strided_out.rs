//! Kernels that write their result through another buffer's strides: the operands of a
//! concatenation assembled in place (`arena/concat_views.rs`).
//!
//! Contract: [`writes_strided`] is true exactly for the entry instructions whose CPU kernel
//! addresses every element it stores through the output strides the backend hands it
//! (`Cpu::out_strides`, read by [`Cg::out_strides`]): a convolution (bare, or the heavy op of an
//! output fusion whose whole epilogue runs on the micro-kernel's registers, residuals read
//! through their own strides) on a Winograd or direct micro-kernel path, or a bare pool, or a
//! max or min pool with its epilogue, on the register path (`reduce.rs` `pool_fits_registers`,
//! `pool_epilogue_in_registers`). A kernel that would sweep its epilogue over the output, or the
//! general loops, index the output by its own layout, so they are not chosen: their
//! concatenation keeps its copy.

use super::reduce::{pool_epilogue_in_registers, pool_fits_registers};
use super::{Cg, conv, epilogue};
use crate::codegen::core::layout::physical_strides;
use crate::codegen::core::packing::{Packings, Tiles, heavy_in, mapped_conv_input};
use crate::ir::{FusionKind, InstId, Module as Hlo, Op, Shape};
use crate::target::Target;

/// Whether the CPU kernel of entry instruction `id` can write its result with strides it is
/// given (`packings`: what the backend will read packed).
pub fn writes_strided(hlo: &Hlo, target: &Target, packings: &Packings, id: InstId) -> bool {
    let c = &hlo.entry;
    let inst = c.inst(id);
    if let Op::ReduceWindow { window, .. } = &inst.op {
        // A bare pool on the register path (`reduce.rs`) stores through `Cg::out_strides`.
        let lanes = Tiles::for_target(target).lanes;
        return pool_fits_registers(window, &inst.shape, &c.inst(inst.operands[0]).shape, lanes);
    }
    if let Op::Fusion {
        kind: FusionKind::Input,
        computation,
    } = &inst.op
    {
        // A max or min pool with its epilogue on the register path stores through
        // `Cg::out_strides` too.
        let lanes = Tiles::for_target(target).lanes;
        return pool_epilogue_in_registers(computation, lanes).is_some();
    }
    let Some((op, x, w, _)) = heavy_in(hlo, id) else {
        return false;
    };
    let Op::Convolution {
        window,
        feature_group_count,
    } = op
    else {
        return false;
    };
    if let Op::Fusion { computation, .. } = &c.inst(id).op {
        let heavy = computation
            .ids()
            .find(|&h| matches!(computation.inst(h).op, Op::Convolution { .. }));
        let Some(epi) = heavy.and_then(|h| epilogue::recognize(computation, h)) else {
            return false;
        };
        // A flattened 1×1 tile drops a residual its rows cannot address (`conv_fast`).
        if !epi.full_strides().is_empty() {
            return false;
        }
    }
    if mapped_conv_input(hlo, id).is_some() {
        // Read through a channel map: the micro-kernel when packed, else the loops (`kernel.rs`).
        return packings.reads_packed(hlo, id);
    }
    if packings.winograd(hlo, id).is_some() {
        return true;
    }
    let out = &c.inst(id).shape;
    conv::choose(
        &window,
        feature_group_count,
        &c.inst(x).shape,
        &c.inst(w).shape,
        out,
        packings.reads_packed(hlo, id),
    )
    .is_some()
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// The element strides the kernel being emitted writes its result `os` with: those of the
    /// concatenation it is assembled into, else its own layout's.
    pub(super) fn out_strides(&self, os: &Shape) -> Vec<u64> {
        self.be
            .out_strides
            .borrow()
            .clone()
            .unwrap_or_else(|| physical_strides(os))
    }
}
