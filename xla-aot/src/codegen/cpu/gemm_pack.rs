//! Where the GEMM kernels that pack their activations (A) pack them: per-task slices of the
//! arena's kernel scratch, reserved by the buffer plan, instead of the stack.
//!
//! Contract:
//! - The bf16 kernel (`gemm_bf16.rs`, A as bfloat16 pairs) and the int8 kernel (`gemm_i8.rs`,
//!   A as byte quads) pack A per K-block and row block before multiplying. [`a_pack`] sizes the
//!   scratch that takes: one slice per task, each one row block of one K-block (at most
//!   `gemm_bf16::A_BLOCK_BYTES`), for at most [`APack::tasks`] tasks (one when the kernel runs
//!   as one task, `parallel.rs`; at most [`MAX_PACK_TASKS`]).
//! - [`of`] answers for an entry instruction from the module, the target and the packings only,
//!   so the buffer plan (`compile::plan_for_target` through [`scratch_bytes`]), the kernel's
//!   signature (`mod.rs` `takes_scratch`: the scratch is its last argument) and the kernel
//!   (`gemm.rs`, which checks its own [`a_pack`] against it) agree. A kernel compiled against a
//!   plan that reserved less (a plan made for another target) packs into a stack buffer.
//! - Task `i` packs into dwords `[i · slice, (i + 1) · slice)`; kernels run one at a time, so
//!   the slices of one kernel are the only users of the scratch while it runs.
//! - f32 products read A in place: packing f32 A into such slices (a tile-interleaved copy read
//!   with unit stride) was measured on Zen 5 (AVX-512 and AVX2 code) for 512³-2048³,
//!   1024×4096×1024 and 256×8192×1024 and gained nothing (1-7% slower: the in-place kernel is
//!   at 88-95% of peak there, so the copy is pure cost); see docs/performance.md.

use super::gemm_tiles::{Kind, gemm_tiles, units};
use super::parallel::PARALLEL_MIN_FLOPS;
use crate::codegen::core::layout::{Geometry, geometry};
use crate::codegen::core::packing::{Packings, Tiles, heavy_in};
use crate::ir::{InstId, Module as Hlo, Op};
use crate::target::Target;

/// Most tasks a packing GEMM kernel splits into, so its scratch stays bounded (16 slices of at
/// most 64 KiB: 1 MiB). The hosts these kernels were measured on have 2 cores; an app lending
/// more threads runs such a kernel on 16 of them.
pub(super) const MAX_PACK_TASKS: usize = 16;

/// The scratch slices of one packing GEMM kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct APack {
    /// Dwords of one task's slice: one row block of one K-block, as pairs or quads.
    pub slice_dwords: usize,
    /// Most tasks the kernel splits into: one slice each.
    pub tasks: usize,
}

impl APack {
    /// Bytes of scratch the kernel takes.
    pub fn bytes(&self) -> usize {
        self.tasks * self.slice_dwords * 4
    }
}

/// The slices of the packing GEMM (`kind.bf16` or `kind.vnni`) of geometry `g` with its tiles
/// `t` (`gemm_tiles::gemm_tiles`).
pub(super) fn a_pack(g: &Geometry, t: &Tiles, kind: Kind) -> APack {
    let per_dword = if kind.vnni { 4 } else { 2 };
    let block_tiles = t.mc_tiles.clamp(1, g.m.div_ceil(t.mr).max(1));
    let (_, units, _) = units(g, t);
    let tasks = if g.flops() > PARALLEL_MIN_FLOPS {
        units.clamp(1, MAX_PACK_TASKS)
    } else {
        1
    };
    APack {
        slice_dwords: block_tiles * t.mr * t.kc.div_ceil(per_dword),
        tasks,
    }
}

/// The slices of the kernel of entry instruction `id` on `target`, if it is a GEMM that packs
/// A: a dot (or an output fusion around one) reading its weight as bfloat16 pairs or int8
/// quads.
pub(crate) fn of(hlo: &Hlo, target: &Target, p: &Packings, id: InstId) -> Option<APack> {
    let (Op::Dot(d), lhs, rhs, out) = heavy_in(hlo, id)? else {
        return None;
    };
    if !p.reads_packed(hlo, id) {
        return None;
    }
    let kind = Kind {
        bf16: p.reads_bf16_pairs(hlo, id),
        f16: false,
        vnni: p.reads_vnni(hlo, id).is_some(),
    };
    if !(kind.bf16 || kind.vnni) {
        return None;
    }
    let c = &hlo.entry;
    let g = geometry(&d, &c.inst(lhs).shape, &c.inst(rhs).shape, &out)?;
    Some(a_pack(&g, &gemm_tiles(&g, target, kind), kind))
}

/// The kernel scratch the packing GEMMs of `hlo` need on `target` with packings `p`: the
/// largest (kernels run one at a time).
pub fn scratch_bytes(hlo: &Hlo, target: &Target, p: &Packings) -> usize {
    (0..hlo.entry.instructions.len())
        .filter_map(|i| of(hlo, target, p, InstId(i as u32)))
        .map(|a| a.bytes())
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemm(m: usize, k: usize, n: usize) -> Geometry {
        Geometry {
            batch: vec![],
            m,
            k,
            n,
            a_m: k as u64,
            a_k: 1,
            b_k: n as u64,
            b_n_unit: true,
            c_m: n as u64,
        }
    }

    #[test]
    fn slices_hold_one_row_block_per_task() {
        let target = Target::resolve("x86_64-avx512-bf16").unwrap();
        let bf16 = Kind {
            bf16: true,
            f16: false,
            vnni: false,
        };
        // 1024³: row blocks of 64 KiB (`A_BLOCK_BYTES`), one per task, 32 column chunks of
        // 32 columns capped at MAX_PACK_TASKS tasks.
        let g = gemm(1024, 1024, 1024);
        let p = a_pack(&g, &gemm_tiles(&g, &target, bf16), bf16);
        assert_eq!(p.slice_dwords * 4, super::super::gemm_bf16::A_BLOCK_BYTES);
        assert_eq!(p.tasks, MAX_PACK_TASKS);
        assert_eq!(p.bytes(), MAX_PACK_TASKS * 64 * 1024);
        // 3 rows: one row tile whose K is one block (kc = K, 301 k as 151 pairs); 2·3·301·45
        // flops run as one task.
        let g = gemm(3, 301, 45);
        let t = gemm_tiles(&g, &target, bf16);
        let p = a_pack(&g, &t, bf16);
        assert_eq!((p.slice_dwords, p.tasks), (t.mr * 151, 1));
        // int8 quads: 4 k per dword.
        let vnni = Kind {
            bf16: false,
            f16: false,
            vnni: true,
        };
        let g = gemm(5, 64, 64);
        let t = gemm_tiles(&g, &target, vnni);
        assert_eq!(a_pack(&g, &t, vnni).slice_dwords, t.mr * 16);
    }
}
