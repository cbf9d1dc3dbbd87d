//! Which convolutions keep their kernel direct although Winograd would apply: a kernel of
//! integers (the exact integer path of `front/onnx/quant.rs`, which Winograd's fractional
//! transforms would round) and one that multiplies bytes on the target (an int8 kernel).

use super::{
    Choice, Hlo, InstId, Op, Precision, Shape, VNNI_CONV_MAX_ROWS, VNNI_MAX_K, VNNI_STAGE_BYTES,
    dot_k, int8_conv_columns, quad_dot_lanes, vnni_conv_stage_bytes,
};

/// Whether a constant holds only integers (below 2^24, so f32 sums of their products with
/// integer data are exact): the shifted weights of a quantized model's integer path
/// (`front/onnx/quant.rs`), which must not take Winograd, whose transforms' fractions round.
pub(super) fn integer_valued(inst: &crate::ir::Instruction) -> bool {
    let Op::Constant(lit) = &inst.op else {
        return false;
    };
    let Some(bytes) = lit.bytes() else {
        return false;
    };
    bytes.chunks_exact(4).all(|b| {
        let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        v.fract() == 0.0 && v.abs() < 16_777_216.0
    })
}

/// Whether the convolution of data `lhs` by weight `c` (`window`, `groups`, result `out`) would
/// multiply bytes ([`vnni_offsets`]' conditions): the target has a 4-byte dot product, the
/// weight's columns are int8 × a scale, the data holds integers of one byte's range and the
/// staging fits. Such a convolution stays direct instead of taking Winograd: the dot product
/// makes 4 products per lane and instruction where Winograd saves 2.25–4× of the f32 ones, sums
/// exactly, and reads a quarter of the weight bytes (int8 squeezenet, whose expand 3×3
/// convolutions took Winograd: 1.25 → 1.16 ms, docs/performance-history.md).
pub(super) fn int8_direct(
    hlo: &Hlo,
    c: InstId,
    lhs: InstId,
    window: &crate::ir::Window,
    groups: usize,
    out: &Shape,
    cx: &Choice<'_>,
) -> bool {
    let w = hlo.entry.inst(c);
    let x = &hlo.entry.inst(lhs).shape;
    let Op::Constant(lit) = &w.op else {
        return false;
    };
    let rows = out
        .dims
        .get(3)
        .map_or(VNNI_CONV_MAX_ROWS, |&d| d.min(VNNI_CONV_MAX_ROWS));
    quad_dot_lanes(cx.target) == Some(cx.tiles.lanes)
        && hlo.precision == Precision::F32
        && w.shape.dims[1..].iter().product::<usize>() <= VNNI_MAX_K
        && vnni_conv_stage_bytes(window, groups, x, &w.shape, (rows, dot_k(cx.target)))
            <= VNNI_STAGE_BYTES
        && cx
            .ranges
            .get_or_init(|| crate::ir::value_range::ranges(hlo))[lhs.index()]
        .u8_offset()
        .is_some()
        && lit
            .bytes()
            .is_some_and(|b| int8_conv_columns(b, &w.shape).is_some())
}
