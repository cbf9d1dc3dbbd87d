//! Int8 depthwise kernels for the Cortex-M cores without a vector unit: which depthwise
//! convolution weights are stored one byte per value, and those bytes.
//!
//! Contract: [`int8_depthwise`] accepts a constant exactly when
//! - the target multiplies int8 on `smlad` (M4, M7, M33: [`quad_dot_lanes`] gives
//!   [`SMLAD_LANES`]), where the depthwise kernel's f32 taps took 4.7 instructions per
//!   multiply-accumulate (a byte load, its conversion, the FPU's multiply-add, a weight load);
//! - its one use is as the kernel of a depthwise convolution (`groups == C == O`, one input
//!   channel per group, input and output channels minor: `cpu/conv.rs`'s `ConvPath::Depthwise`)
//!   read plainly (no channel map), whose kernel is channels-minor too;
//! - its values are integers in [−128, 127] ([`int8_conv_columns`] with every scale 1, or 0
//!   for an all-zero channel: TFLite models' weights after `passes/exact_integers.rs`);
//! - the input holds integers small enough that every sum of `taps` products is exact in f32
//!   and in i32 ([`EXACT_SUM`]).
//!
//! Such a kernel is stored in its assigned layout, one signed byte per value ([`write`]).
//! `cpu/conv/depthwise.rs` multiplies the input's integers by those bytes in i32 and converts
//! each finished sum once: the f32 kernel's sums bit for bit, so every target computes the same
//! outputs. (Weights with other scales stay f32: `f32(Σ x·q) · s` would round differently from
//! the f32 kernels of the other targets.)

use super::int8::int8_conv_columns;
use super::{SMLAD_LANES, heavy_in, mapped_conv_input, quad_dot_lanes};
use crate::codegen::core::layout::{physical_strides, relayout_into};
use crate::ir::value_range::Range;
use crate::ir::{DType, InstId, Module as Hlo, Op, Shape};
use crate::target::Target;

/// Largest magnitude a depthwise sum may reach: 2^24, below which every integer is exact in f32
/// (and far inside i32), so the integer kernel's sums are the f32 kernel's.
const EXACT_SUM: f64 = 16_777_216.0;

/// Largest int8 weight magnitude.
const INT8_MAGNITUDE: f64 = 128.0;

/// The per-channel scales (each 1, or 0 for an all-zero channel) of constant `c` when it is
/// stored as an int8 depthwise kernel on `target` (module doc); `ranges`: the entry's value
/// ranges.
pub(super) fn int8_depthwise(
    hlo: &Hlo,
    c: InstId,
    target: &Target,
    ranges: &[Range],
) -> Option<Vec<f32>> {
    if quad_dot_lanes(target) != Some(SMLAD_LANES) {
        return None;
    }
    let e = &hlo.entry;
    let w = &e.inst(c).shape;
    let Op::Constant(lit) = &e.inst(c).op else {
        return None;
    };
    if w.dtype != DType::F32 || w.rank() != 4 || e.outputs.iter().any(|o| o.value == c) {
        return None;
    }
    let mut users = e
        .ids()
        .filter(|&i| e.inst(i).operands.contains(&c))
        .peekable();
    let user = users.next()?;
    if users.peek().is_some() || e.inst(user).operands.iter().filter(|&&o| o == c).count() != 1 {
        return None;
    }
    let (op, lhs, rhs, out) = heavy_in(hlo, user)?;
    let Op::Convolution {
        window,
        feature_group_count: groups,
    } = op
    else {
        return None;
    };
    if rhs != c || lhs == c || mapped_conv_input(hlo, user).is_some() || window.rank() != 2 {
        return None;
    }
    let x = &e.inst(lhs).shape;
    let (xs, os, ws) = (
        physical_strides(x),
        physical_strides(&out),
        physical_strides(w),
    );
    let ch = x.dims[1];
    let depthwise = groups == ch && w.dims[0] == ch && w.dims[1] == 1;
    if !depthwise || xs[1] != 1 || os[1] != 1 || ws[0] != 1 || out.dtype != DType::F32 {
        return None;
    }
    let r = ranges[lhs.index()];
    let taps = (w.dims[2] * w.dims[3]) as f64;
    let reach = r.lo.abs().max(r.hi.abs()) * INT8_MAGNITUDE * taps;
    if !r.integer || r.nan || !reach.is_finite() || reach >= EXACT_SUM {
        return None;
    }
    int8_conv_columns(lit.bytes()?, w).filter(|s| s.iter().all(|&v| v == 0.0 || v == 1.0))
}

/// Bytes an int8 depthwise kernel of shape `s` is stored in: one per value.
pub(super) fn stored_len(s: &Shape) -> usize {
    s.element_count()
}

/// Writes the int8 depthwise kernel (`bytes`: f32 row-major integers, shape `s`) into `out`
/// ([`stored_len`] bytes) in its assigned layout.
pub(super) fn write(bytes: &[u8], s: &Shape, out: &mut [u8]) {
    let mut f32s = vec![0u8; s.size_bytes()];
    relayout_into(bytes, s, &mut f32s);
    for (o, b) in out.iter_mut().zip(f32s.chunks_exact(4)) {
        // An integer in [−128, 127] (`int8_depthwise`): exact.
        *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i8 as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_integer_bytes_in_the_assigned_layout() {
        // [C=2, 1, 1, 2] channels minor: physical order (tap, channel).
        let mut s = Shape::new(DType::F32, vec![2, 1, 1, 2]);
        s.layout.minor_to_major = vec![0, 3, 2, 1];
        let logical = [1.0f32, -2.0, -128.0, 127.0];
        let bytes: Vec<u8> = logical.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = vec![0u8; stored_len(&s)];
        write(&bytes, &s, &mut out);
        let got: Vec<i8> = out.iter().map(|&b| b as i8).collect();
        assert_eq!(got, vec![1, -128, -2, 127]);
    }
}
