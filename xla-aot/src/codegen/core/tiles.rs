//! Register and cache tiles of the CPU micro-kernels on one target: how many accumulator rows
//! and panel vectors a tile has, and the K- and row-blocks that keep its operands in L1 and L2.
//!
//! Contract: [`Tiles::for_target`] depends on the target description only (vector width,
//! register count, cache sizes), so every part of the compiler that lays out a panel
//! (`packing.rs`, `winograd.rs`, the micro-kernels of `cpu/`) agrees on its width.

use crate::target::Target;

/// Most rows of one micro-tile; more than this only adds broadcasts a tile of this height
/// already amortises (BLIS' AVX-512 kernels use 12-14 rows).
const MAX_MR: usize = 14;

/// Smallest K-block: below this, loading and storing the accumulator tile per block costs more
/// than the block's FMAs.
const MIN_KC: usize = 64;

/// Largest K-block (targets with a large L1D and narrow panels): past this the accumulator
/// tile's loads and stores are already negligible.
const MAX_KC: usize = 512;

/// Tile sizes for one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiles {
    /// f32 lanes per vector register.
    pub lanes: u32,
    /// Vector registers per panel row (panel width `nr = nv · lanes`).
    pub nv: usize,
    /// Rows per micro-tile.
    pub mr: usize,
    /// K-block: one packed panel's K-block (`kc · nr` floats) fills half the L1D, the other half
    /// holding the rows of A it meets. (Measured with AVX-512: a panel filling the whole L1D ran
    /// gemm256 at half speed; gemm512 and gemm1024 were 3-7% faster with it.)
    pub kc: usize,
    /// Row tiles per row block: a row block of `A` times one K-block fills half the L2.
    pub mc_tiles: usize,
    /// Most packed panels one GEMM tile spans ([`MAX_TILE_PANELS`]; fewer where the tile lives
    /// in the core registers: `cpu/gemm_tiles.rs`).
    pub max_pp: usize,
}

/// Most packed panels one GEMM micro-tile spans: enough independent chains for a short row tile.
pub const MAX_TILE_PANELS: usize = 4;

impl Tiles {
    pub fn for_target(t: &Target) -> Tiles {
        let lanes = t.vector_bits / 32;
        let regs = t.vector_registers as usize;
        // 128-bit vectors with 32 registers (NEON): 3 vectors per panel row (the classic 8x12
        // kernel); otherwise 2, which keeps 16-register x86 at 6 rows.
        let nv = if lanes == 4 && regs >= 32 { 3 } else { 2 };
        // Accumulators, one register per B vector and one for the broadcast A value.
        let mr = ((regs - nv - 1) / nv).clamp(1, MAX_MR);
        let nr = nv * lanes as usize;
        let kc = (t.l1d_bytes as usize / 2 / (nr * 4)).clamp(MIN_KC, MAX_KC) / 8 * 8;
        let mc_tiles = ((t.l2_bytes as usize / 2) / (kc * 4) / mr).max(1);
        Tiles {
            lanes,
            nv,
            mr,
            kc,
            mc_tiles,
            max_pp: MAX_TILE_PANELS,
        }
    }

    /// Columns per packed panel.
    pub fn nr(&self) -> usize {
        self.nv * self.lanes as usize
    }
}

/// Output channels per packed panel of a convolution kernel: the target's panel, or fewer whole
/// vectors when the convolution has fewer channels (16 channels in a 32-wide panel would waste
/// half of every FMA).
pub fn panel_width(o: usize, t: &Tiles) -> usize {
    let lanes = t.lanes as usize;
    t.nr().min(o.div_ceil(lanes) * lanes)
}
