//! Which int8 quads hold no −128: the condition under which AVX2 multiplies them with
//! `vpmaddubsw` on `|a|` and `sign(a)·b` (`cpu/quad_dot.rs`, `DotKind::Signs`) exactly.
//!
//! Contract: on a target where that product applies ([`sign_dot`]: x86-64 with AVX2's 8 lanes
//! and no AVX-512 VNNI; `vpsignb` has no AVX-512 form), a weight stored as quads (`vnni`
//! offsets) avoids the minimum when none of its values is −128 × its column's scale (the scales
//! of `int8_columns` / `int8_conv_columns`, the ones `write_int8_quads` divides by); then
//! `sign(a)·b` never wraps and `|a|·(sign(a)·b)` pairs stay within i16 (2 · 128 · 127 < 2^15).
//! Weights of symmetric quantizers (onnxruntime's ±127) qualify.

use super::{Packing, Packings, heavy_in, int8_columns, int8_conv_columns, quad_dot_lanes};
use crate::ir::{DotDims, InstId, Module as Hlo, Op, Shape};
use crate::target::{Arch, Target};

/// i32 lanes of the sign product: AVX2's ymm (`llvm.x86.avx2.psign.b`).
const SIGN_LANES: u32 = 8;

/// Whether `target` multiplies quads that avoid −128 with the sign product.
pub fn sign_dot(target: &Target) -> bool {
    target.arch == Arch::X86_64
        && !target.has_avx512_vnni()
        && quad_dot_lanes(target) == Some(SIGN_LANES)
}

/// Per entry instruction: a weight stored as quads (`vnni[i]` set) none of whose int8 values is
/// −128, on a target where that matters ([`sign_dot`]).
pub(super) fn quads_avoiding_min(
    hlo: &Hlo,
    target: &Target,
    of: &[Option<Packing>],
    vnni: &[Option<i32>],
) -> Vec<bool> {
    let c = &hlo.entry;
    (0..c.instructions.len())
        .map(|i| {
            let inst = &c.instructions[i];
            let bytes = match &inst.op {
                Op::Constant(lit) if vnni[i].is_some() && sign_dot(target) => lit.bytes(),
                _ => None,
            };
            let Some(bytes) = bytes else { return false };
            match &of[i] {
                Some(Packing::Gemm(d)) => int8_columns(bytes, &inst.shape, d)
                    .is_some_and(|s| avoids_min(bytes, &inst.shape, d, &s)),
                Some(Packing::Conv { .. }) => {
                    // Columns are output channels, the rows of [O, C/G · KH · KW].
                    let w = &inst.shape;
                    let rows = Shape::new(w.dtype, vec![w.dims[0], w.dims[1..].iter().product()]);
                    let d = DotDims {
                        lhs_batch: vec![],
                        lhs_contracting: vec![1],
                        rhs_batch: vec![],
                        rhs_contracting: vec![1],
                    };
                    int8_conv_columns(bytes, w).is_some_and(|s| avoids_min(bytes, &rows, &d, &s))
                }
                _ => false,
            }
        })
        .collect()
}

/// Whether no f32 value of `bytes` (logical row-major, shape `rhs`, contracted along
/// `d.rhs_contracting[0]`, no batch dims) is −128 times its column's scale.
fn avoids_min(bytes: &[u8], rhs: &Shape, d: &DotDims, scales: &[f32]) -> bool {
    let kd = d.rhs_contracting[0];
    let rank = rhs.rank();
    let mut idx = vec![0usize; rank];
    for b in bytes.chunks_exact(4) {
        // The column: the free dims' index, the last one minor (as `int8_columns` numbers them).
        let j = (0..rank)
            .filter(|&fd| fd != kd)
            .fold(0, |j, fd| j * rhs.dims[fd] + idx[fd]);
        let s = scales.get(j).copied().unwrap_or(0.0);
        let w = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if s != 0.0 && (w / s).round() == -128.0 {
            return false;
        }
        for dim in (0..rank).rev() {
            idx[dim] += 1;
            if idx[dim] < rhs.dims[dim] {
                break;
            }
            idx[dim] = 0;
        }
    }
    true
}

impl Packings {
    /// Whether the dot computed by entry instruction `id` reads int8 quads none of which is
    /// −128, on a target where that makes the sign product exact ([`sign_dot`]).
    pub fn quads_avoid_min(&self, hlo: &Hlo, id: InstId) -> bool {
        heavy_in(hlo, id).is_some_and(|(_, _, rhs, _)| self.signs[rhs.index()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    #[test]
    fn a_column_reaching_minus_128_times_its_scale_does_not_avoid_the_minimum() {
        // [K = 2, N = 2]: column 1 holds −128 · 0.5.
        let w: Vec<u8> = [1.0f32, 2.0, -3.0, -64.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let s = Shape::new(DType::F32, vec![2, 2]);
        let d = DotDims {
            lhs_batch: vec![],
            lhs_contracting: vec![1],
            rhs_batch: vec![],
            rhs_contracting: vec![0],
        };
        assert!(!avoids_min(&w, &s, &d, &[1.0, 0.5]));
        assert!(avoids_min(&w, &s, &d, &[1.0, 1.0]));
        // Column 0 with scale 1/32: −3 is −96 steps; column 1 (scale 1) −64.
        assert!(avoids_min(&w, &s, &d, &[1.0 / 32.0, 1.0]));
    }
}
