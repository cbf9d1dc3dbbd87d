//! The staging bound of the int8 convolution (`cpu/conv/int8.rs`): how many bytes one row
//! tile's input rows take as quads, and the most the packing decision (`vnni_offsets`) lets a
//! convolution stage on the stack before it keeps the convolution in f32.

use crate::ir::{Shape, Window};

/// Most pixels in one row tile of the int8 convolution (`cpu/conv/int8.rs`): the f32 tile's
/// limit (`cpu/conv.rs` `MAX_PIXEL_ROWS`), which bounds the input span a tile stages.
pub const VNNI_CONV_MAX_ROWS: usize = 24;

/// Bytes of the stack buffer an int8 convolution stages one row tile's input rows into, as
/// unsigned bytes (`cpu/conv/int8.rs`): 64 KiB, as the bf16 GEMM's packed A (a small part of a
/// thread's stack, in L2 while every panel passes over it).
pub const VNNI_STAGE_BYTES: usize = 64 * 1024;

/// The bytes of the staged input of one row tile of `rows` output pixels of a 2-D convolution
/// (`x` [N, C, H, W], kernel `w` [O, C/G, KH, KW]): `KH` rows of the pixels the tile's taps read,
/// each pixel's channels as `packing::conv_tap_channels` per group (`g`: `packing::dot_k`), and
/// where the taps are merged (Helium) each pixel's copy of its taps.
pub fn vnni_conv_stage_bytes(
    window: &Window,
    groups: usize,
    x: &Shape,
    w: &Shape,
    (rows, g): (usize, usize),
) -> usize {
    if window.rank() != 2 || x.rank() != 4 || w.rank() != 4 {
        return usize::MAX;
    }
    let span = (rows.max(1) - 1) * window.stride[1] + (w.dims[3] - 1) * window.dilation[1] + 1;
    let c = super::conv_tap_channels(g, groups, w.dims[1]);
    let merged = if super::conv_taps_merged(g, groups, w.dims[1]) {
        rows * (w.dims[2] * w.dims[3] * c).div_ceil(g) * g
    } else {
        0
    };
    w.dims[2] * span * groups * c + merged
}
