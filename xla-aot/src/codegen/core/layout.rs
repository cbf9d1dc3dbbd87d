//! Layouts: element strides of a shape, row-major offsets, constants re-laid into their
//! assigned layout, and the matrix-product view of a dot.
//!
//! Contract: pure functions of shapes (no IR). [`geometry`] is the one description of a dot as
//! `C[b, m, n] = Σ_k A[b, m, k] · B[b, k, n]` with element strides: the CPU micro-kernel
//! (`cpu/gemm.rs`), the GPU's tiled products (`gpu/tiled.rs`) and the packing decision
//! (`packing.rs`) all read it, so none can disagree about which dots are matrix products.

use crate::ir::{DType, DotDims, Shape};

/// Element strides of each logical dim of `s` in memory, from its layout (minor to major).
pub fn physical_strides(s: &Shape) -> Vec<u64> {
    let mut strides = vec![1u64; s.rank()];
    let mut acc = 1u64;
    for &d in &s.layout.minor_to_major {
        strides[d] = acc;
        acc *= s.dims[d] as u64;
    }
    strides
}

pub fn is_row_major(s: &Shape) -> bool {
    s.layout == crate::ir::Layout::row_major(s.rank())
}

pub fn row_major_strides(dims: &[usize]) -> Vec<u64> {
    let mut s = vec![1u64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1] as u64;
    }
    s
}

/// The bytes of a row-major literal of shape `s` rearranged into `s`'s layout.
pub fn relayout(bytes: &[u8], s: &Shape) -> Vec<u8> {
    let mut out = vec![0u8; bytes.len()];
    relayout_into(bytes, s, &mut out);
    out
}

/// [`relayout`] into `out` (as long as `bytes`).
pub fn relayout_into(bytes: &[u8], s: &Shape, out: &mut [u8]) {
    if is_row_major(s) {
        out.copy_from_slice(bytes);
        return;
    }
    let w = s.dtype.size_bytes();
    let phys = physical_strides(s);
    let logical = row_major_strides(&s.dims);
    let n = s.element_count();
    for i in 0..n {
        let mut rest = i as u64;
        let mut p = 0u64;
        for d in 0..s.rank() {
            let q = rest / logical[d];
            rest %= logical[d];
            p += q * phys[d];
        }
        let (src, dst) = (i * w, p as usize * w);
        out[dst..dst + w].copy_from_slice(&bytes[src..src + w]);
    }
}

/// A dot seen as a batch of row-major-ish matrix products (element strides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// Batch dims: (size, lhs stride, rhs stride, out stride).
    pub batch: Vec<(usize, u64, u64, u64)>,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// Stride of `m` and of `k` in the lhs.
    pub a_m: u64,
    pub a_k: u64,
    /// Stride of `k` in the rhs (its `n` has stride 1 when the rhs is not packed).
    pub b_k: u64,
    /// Whether the rhs's `n` has stride 1 (needed unless it is packed).
    pub b_n_unit: bool,
    /// Stride of `m` in the output (its `n` has stride 1).
    pub c_m: u64,
}

impl Geometry {
    pub fn flops(&self) -> u64 {
        let b: usize = self.batch.iter().map(|x| x.0).product();
        2 * (b * self.m * self.n * self.k) as u64
    }
}

/// `dims` (in the given order) as one index: its size and stride, if each dim's stride is the
/// next one's times its size (dims of size 1 are ignored: any stride will do for them).
fn collapse(all_dims: &[usize], strides: &[u64], dims: &[usize]) -> Option<(usize, u64)> {
    let kept: Vec<usize> = dims.iter().copied().filter(|&d| all_dims[d] != 1).collect();
    let size: usize = kept.iter().map(|&d| all_dims[d]).product();
    let Some(&last) = kept.last() else {
        return Some((1, 1));
    };
    for w in kept.windows(2) {
        if strides[w[0]] != strides[w[1]] * all_dims[w[1]] as u64 {
            return None;
        }
    }
    Some((size, strides[last]))
}

/// The matrix-product view of `dot(lhs, rhs) -> out`, or `None` when the dims do not collapse
/// (the kernel then uses the general loop nest).
pub fn geometry(d: &DotDims, lhs: &Shape, rhs: &Shape, out: &Shape) -> Option<Geometry> {
    if [lhs, rhs, out].iter().any(|s| s.dtype != DType::F32)
        || d.lhs_contracting.len() != 1
        || d.rhs_contracting.len() != 1
    {
        return None;
    }
    let (ls, rs, os) = (
        physical_strides(lhs),
        physical_strides(rhs),
        physical_strides(out),
    );
    let nb = d.lhs_batch.len();
    let lfree: Vec<usize> = (0..lhs.rank())
        .filter(|i| !d.lhs_batch.contains(i) && !d.lhs_contracting.contains(i))
        .collect();
    let rfree: Vec<usize> = (0..rhs.rank())
        .filter(|i| !d.rhs_batch.contains(i) && !d.rhs_contracting.contains(i))
        .collect();
    let (m, a_m) = collapse(&lhs.dims, &ls, &lfree)?;
    let k = lhs.dims[d.lhs_contracting[0]];
    let a_k = ls[d.lhs_contracting[0]];
    let (n, b_n) = collapse(&rhs.dims, &rs, &rfree)?;
    let b_k = rs[d.rhs_contracting[0]];
    let out_m: Vec<usize> = (nb..nb + lfree.len()).collect();
    let out_n: Vec<usize> = (nb + lfree.len()..out.rank()).collect();
    let (_, c_m) = collapse(&out.dims, &os, &out_m)?;
    let (_, c_n) = collapse(&out.dims, &os, &out_n)?;
    if c_n != 1 && n > 1 {
        return None;
    }
    let batch = (0..nb)
        .map(|b| {
            (
                lhs.dims[d.lhs_batch[b]],
                ls[d.lhs_batch[b]],
                rs[d.rhs_batch[b]],
                os[b],
            )
        })
        .collect();
    Some(Geometry {
        batch,
        m,
        k,
        n,
        a_m,
        a_k,
        b_k,
        b_n_unit: b_n == 1 || n == 1,
        c_m,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Layout;

    fn shape(dims: &[usize]) -> Shape {
        Shape::new(DType::F32, dims.to_vec())
    }

    fn mm() -> DotDims {
        DotDims {
            lhs_batch: vec![],
            lhs_contracting: vec![1],
            rhs_batch: vec![],
            rhs_contracting: vec![0],
        }
    }

    #[test]
    fn geometry_of_a_dense_layer_and_a_transposed_operand() {
        let g = geometry(&mm(), &shape(&[4, 8]), &shape(&[8, 5]), &shape(&[4, 5])).unwrap();
        assert_eq!(
            (g.m, g.k, g.n, g.a_m, g.a_k, g.b_k, g.c_m),
            (4, 8, 5, 8, 1, 5, 5)
        );
        assert!(g.b_n_unit);
        // rhs [N, K] (contracting dim 1): its n has stride K, so only a packed weight fits.
        let d = DotDims {
            rhs_contracting: vec![1],
            ..mm()
        };
        let g = geometry(&d, &shape(&[4, 8]), &shape(&[5, 8]), &shape(&[4, 5])).unwrap();
        assert!(!g.b_n_unit);
        // An output whose columns are not contiguous does not fit.
        let mut out = shape(&[4, 5]);
        out.layout = Layout {
            minor_to_major: vec![0, 1],
        };
        assert!(geometry(&mm(), &shape(&[4, 8]), &shape(&[8, 5]), &out).is_none());
    }
}
