//! The static tiling of the register-blocked GEMM kernels (`gemm.rs` and the kernels it
//! dispatches to): which micro-kernel a product takes ([`Kind`]), its tiles ([`gemm_tiles`]:
//! K-block, rows per tile, row block), how its work splits into units ([`units`]), and the
//! row-tiling rules the convolutions share ([`rows_for_issue`], [`balanced`]).
//!
//! Contract: these are pure functions of the geometry, the target and the kind, so the buffer
//! plan (`gemm_pack.rs`, which sizes the packed-A scratch from them) and the kernel agree.

use super::gemm_bf16;
use super::gemm_i8;
use crate::codegen::core::layout::Geometry;
use crate::codegen::core::packing::Tiles;
use crate::ir::F16_K_BLOCK;

/// Independent accumulator chains that keep the FMA units busy: FMA latency (4 cycles on
/// Skylake, Zen 2-4 and Cortex-A78) times FMA pipes (2). A tile with fewer accumulators (a
/// matrix-vector product, M = 1) covers several panels at once to reach this many.
pub(super) const MIN_CHAINS: usize = 8;

/// Bytes between addresses that map to the same L1D set, and the ways of a set, of the x86-64
/// cores the targets describe (32 KiB, 8 ways, 64-byte lines: 4 KiB). Arm L1Ds differ (A72:
/// 2 ways, A78: 4 ways of 16 KiB); there the rule is a weaker approximation.
const L1_SET_STRIDE: u64 = 4096;
const L1_WAYS: usize = 8;

/// Rows per tile when `m` rows are cut into tiles of at most `mr`: as even as possible, so
/// 16 rows with `mr` 14 are two tiles of 8, not 14 and a 2-row tile that wastes registers.
pub fn balanced(m: usize, mr: usize) -> usize {
    let tiles = m.div_ceil(mr).max(1);
    m.div_ceil(tiles).max(1)
}

/// Rows per tile for `count` rows in tiles of at most `rows_max` rows of `nv` accumulator vectors
/// each (a tile's remainder is its own, smaller tile): the choice with the least FMA issue time,
/// where a tile's K-step costs `max(rows · nv, MIN_CHAINS)` FMA slots (fewer chains than that
/// wait on FMA latency). Ties go to taller tiles (fewer weight loads). Example: 32 output pixels
/// with 2 vectors per row and at most 6 rows: 6-row tiles leave a 2-row tile that costs as much as
/// a 4-row one (68 slots), 8 tiles of 4 rows take 64 (mobilenet_block on AVX2: 34.5 -> 30 µs).
pub fn rows_for_issue(count: usize, rows_max: usize, nv: usize) -> usize {
    let cost = |r: usize| {
        let (full, part) = (count / r, count % r);
        let tile = |rows: usize| (rows * nv).max(MIN_CHAINS);
        full * tile(r) + if part > 0 { tile(part) } else { 0 }
    };
    (1..=rows_max.clamp(1, count.max(1)))
        .rev()
        .min_by_key(|&r| cost(r))
        .unwrap_or(1)
}

/// Panels of an `smlad` GEMM tile of one row (a dense layer of batch 1): 2 panels, 4 columns.
/// ad01 on the M4 board (instructions per inference, 2026-12-07, pointers walked): 1 panel →
/// 0.678 M, 2 → 0.586 M, 3 → 0.706 M (LLVM spills the 6 accumulators).
const SMLAD_ROW_PANELS: usize = 2;

/// Which GEMM micro-kernel a product takes (`gemm.rs` f32 unless one of these is set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Kind {
    /// `vdpbf16ps` on bfloat16 pairs (`gemm_bf16.rs`).
    pub bf16: bool,
    /// f16 blocks (`gemm_f16.rs`).
    pub f16: bool,
    /// Dot products of int8 quads (`gemm_i8.rs`: `vpdpbusd`, `sdot` or `smull`).
    pub vnni: bool,
}

/// The tiles of the GEMM kernel of kind `kind` for geometry `g` on `target`: the target's
/// ([`Tiles::for_target`]) with the kernel's K-block, rows per tile and row block.
pub(super) fn gemm_tiles(g: &Geometry, target: &crate::target::Target, kind: Kind) -> Tiles {
    let Kind { bf16, f16, vnni } = kind;
    let mut t = Tiles::for_target(target);
    if bf16 {
        t.kc = gemm_bf16::kc(&t);
    }
    if vnni {
        t.kc = gemm_i8::kc(&t);
        t.mr = gemm_i8::mr(&t, target);
    }
    if f16 {
        // The f16 blocks start at multiples of F16_K_BLOCK (`gemm_f16.rs`).
        t.kc = t.kc.next_multiple_of(F16_K_BLOCK);
    }
    let a_row_bytes = if vnni {
        g.k.div_ceil(4) * 4
    } else {
        g.k.div_ceil(2) * 4
    };
    let packs_a = bf16 || vnni;
    if g.m <= t.mr && (!packs_a || a_row_bytes * g.m <= gemm_bf16::A_BLOCK_BYTES) {
        // One row tile: no panel is reused across row tiles, so K-blocking only breaks each
        // panel's stream into pieces. Stream every panel whole. (The packed A holds the tile's
        // `m` rows: `rows_for_issue` below gives it at most `m`. vgg19's int8 dense layer,
        // 1 × 25088 × 4096, had been cut into 49 K-blocks by the `mr`-row bound: 3.3 ms.)
        t.kc = g.k.max(1);
    }
    if (g.a_m * 4) % L1_SET_STRIDE == 0 && g.m > L1_WAYS {
        // Rows of A a multiple of 4 KiB apart share one L1 set: a tile reading more of them
        // than the set has ways evicts its own rows every step (gemm1024 ran at 65%).
        t.mr = t.mr.min(L1_WAYS);
    }
    t.mr = rows_for_issue(g.m, t.mr, t.nv);
    if vnni && super::quad_dot::DotKind::of(target) == Some(super::quad_dot::DotKind::Smlad) {
        // An `smlad` tile lives in the core registers: each column takes one accumulator per
        // row and B's two unpacked halves. A dense layer of one row had taken 4 panels (8
        // columns, 24 values for 10 registers) and spilled 60 of its loop's 93 instructions
        // (MLPerf Tiny ad01 on the M4).
        let per_col = t.mr + super::quad_dot::DotKind::Smlad.b_registers();
        t.max_pp = (super::quad_dot::SMLAD_REGISTERS / per_col / t.nr()).max(1);
        if t.mr == 1 {
            // One row: B's halves are used once, only the accumulators stay live.
            t.max_pp = SMLAD_ROW_PANELS;
        }
    }
    if packs_a {
        // K shorter than the K-block: packed rows are K long, not `kc` (more rows fit the row
        // block, and the scratch slices are smaller).
        t.kc = t.kc.min(g.k.max(1));
    }
    if bf16 {
        t.mc_tiles = gemm_bf16::mc_tiles(&t);
    }
    if vnni {
        t.mc_tiles = gemm_i8::mc_tiles(&t);
    }
    t
}

/// Panels per column chunk, the number of work units (column chunks, or row tiles when there
/// are fewer chunks) and whether the units are column chunks, of a GEMM with tiles `t`: what
/// `gemm.rs` splits between tasks. Thin products (few rows per tile) cover several panels per
/// chunk to keep [`MIN_CHAINS`] accumulators.
pub(super) fn units(g: &Geometry, t: &Tiles) -> (usize, usize, bool) {
    let pp = MIN_CHAINS
        .div_ceil(t.mr * t.nv)
        .clamp(1, t.max_pp)
        .min(g.n.div_ceil(t.nr()).max(1));
    let chunks = g.n.div_ceil(pp * t.nr());
    let row_tiles = g.m.div_ceil(t.mr);
    let split_cols = chunks >= row_tiles;
    (pp, if split_cols { chunks } else { row_tiles }, split_cols)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_tiles_minimise_fma_issue_time() {
        // 32 pixels, 2 vectors per row, at most 6 rows: 8 tiles of 4 (64 slots), not 6,6,6,6,6,2.
        assert_eq!(rows_for_issue(32, 6, 2), 4);
        // Ties go to the tallest tile: 14 + 14 + 4 costs what 8 tiles of 4 do.
        assert_eq!(rows_for_issue(32, 14, 2), 14);
        // Whole tiles when they fit; one short row count is one tile.
        assert_eq!(rows_for_issue(36, 6, 2), 6);
        assert_eq!(rows_for_issue(3, 6, 2), 3);
        assert_eq!(rows_for_issue(0, 6, 2), 1);
    }
}
