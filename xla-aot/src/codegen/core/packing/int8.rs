//! Int8 weight columns: which f32 weights are exactly an int8 vector times one scale per
//! column (a quantized model's dequantized weights, or plain integers), and those scales.
//!
//! Contract: [`int8_columns`] (a GEMM weight) and [`int8_conv_columns`] (a convolution kernel,
//! one column per output channel) return a scale `s` per column such that every value of the
//! column is exactly `f32(q · s)` with `q` an integer in [-128, 127], or `None` when some column
//! has none; a column of integers takes scale 1 (0 for an all-zero column), which the int8
//! kernels rely on to skip the multiply (`Packings::reads_unit_scales`).

use super::gemm_kn;
use crate::ir::{DType, DotDims, Shape};

/// The largest int8 magnitude: a column whose largest value is `q_max · s` has scale
/// `colmax / q_max` for some `q_max` in `1..=INT8_MAX_MAGNITUDE` (symmetric quantizers reach ±127,
/// or -128; a column whose values stay smaller reaches less).
const INT8_MAX_MAGNITUDE: u32 = 128;

/// Per column of a GEMM weight (`bytes` row-major, shape `rhs`), a scale `s` such that every
/// value of the column is exactly `f32(q · s)` for an integer `q` in [-128, 127], if every column
/// has one: what dequantizing an int8 weight gives (per column, or per tensor), and plain
/// integers. Then storing `q` and `s` loses nothing: the kernel's `q · s` is the weight, bit for
/// bit, and the products are the f32 path's. A failed candidate fails at its first inexact value,
/// so the search costs about one pass per column.
pub fn int8_columns(bytes: &[u8], rhs: &Shape, d: &DotDims) -> Option<Vec<f32>> {
    if rhs.dtype != DType::F32 || !d.rhs_batch.is_empty() {
        return None;
    }
    let (k, n) = gemm_kn(rhs, d);
    if k == 0 || n == 0 {
        return None;
    }
    // Value (kk, j) without re-laying the weight (a large one would be copied per decision).
    let rank = rhs.rank();
    let mut strides = vec![1usize; rank];
    for i in (0..rank.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * rhs.dims[i + 1];
    }
    let kd = d.rhs_contracting[0];
    let free: Vec<usize> = (0..rank).filter(|&i| i != kd).collect();
    let col_off = |mut j: usize| {
        let mut off = 0;
        for &fd in free.iter().rev() {
            off += (j % rhs.dims[fd]) * strides[fd];
            j /= rhs.dims[fd];
        }
        off
    };
    let at = |e: usize| {
        let b = &bytes[e * 4..e * 4 + 4];
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    };
    let global = std::cell::OnceCell::new();
    let global = || {
        *global.get_or_init(|| {
            bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).abs())
                .fold(0f32, f32::max)
        })
    };
    let column = |j: usize| -> Option<f32> {
        let base = col_off(j);
        let v = |kk: usize| at(base + kk * strides[kd]);
        if (0..k).any(|kk| !v(kk).is_finite()) {
            return None;
        }
        let colmax = (0..k).fold(0f32, |m, kk| m.max(v(kk).abs()));
        if colmax == 0.0 {
            return Some(0.0);
        }
        let exact = |s: f32| {
            (0..k).all(|kk| {
                let w = v(kk);
                let q = (w / s).round();
                (-128.0..=127.0).contains(&q) && q * s == w
            })
        };
        // A column of int8 integers (a QDQ product's zero-point-shifted weights) takes scale 1,
        // though other scales may pass `exact` too (colmax 3: 3/126 with q = 42·w): the integer
        // kernels compute f32(Σ q·x) · s, which is the exact integer sum only when every q · s
        // is exact in real arithmetic, not just after rounding (one output in 2200 landed a
        // step away at a rounding tie, tests/onnx_quantized.rs).
        if exact(1.0) {
            return Some(1.0);
        }
        // `colmax / e` rounds: the scale itself may lie an ulp or two away.
        let near = |c: f32| {
            let b = c.to_bits();
            [b, b + 1, b.saturating_sub(1), b + 2, b.saturating_sub(2)].map(f32::from_bits)
        };
        // The column's own scale (per-channel quantization), else the tensor's (per-tensor).
        (1..=INT8_MAX_MAGNITUDE)
            .rev()
            .flat_map(|e| near(colmax / e as f32))
            .find(|&s| exact(s))
            .or_else(|| {
                [127.0, 128.0]
                    .into_iter()
                    .flat_map(|e| near(global() / e))
                    .find(|&s| exact(s))
            })
    };
    (0..n).map(column).collect()
}

/// [`int8_columns`] for a convolution kernel `[O, C/G, KH, KW]` (`bytes` row-major): a scale per
/// output channel, each channel's values being one column.
pub fn int8_conv_columns(bytes: &[u8], w: &Shape) -> Option<Vec<f32>> {
    if w.rank() < 2 {
        return None;
    }
    let k: usize = w.dims[1..].iter().product();
    let as_rows = Shape::new(w.dtype, vec![w.dims[0], k]);
    let d = DotDims {
        lhs_batch: vec![],
        lhs_contracting: vec![1],
        rhs_batch: vec![],
        rhs_contracting: vec![1],
    };
    int8_columns(bytes, &as_rows, &d)
}
