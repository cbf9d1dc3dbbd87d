//! How constants are stored: THE place that decides, for every backend, whether a weight is
//! packed for a micro-kernel and which bytes its global (or device-arena region) holds.
//!
//! Contract: [`Packings`] is decided once per module. A constant is packed when every use of it
//! is as the weight (rhs) operand of a dot or convolution that reads it packed, all the same way:
//! GEMM panels ([`pack_gemm`]) for a dot whose [`geometry`] has no batch dims, tap-major panels
//! per group ([`pack_conv`]) for a 2-D convolution whose output channels are minor and which is
//! not depthwise ([`conv_packable`]), or a Winograd-transformed kernel (`winograd.rs`) for a
//! stride-1 3×3 convolution `winograd::choose` accepts when the buffer plan reserved its scratch. The CPU backend decides with [`Packings::for_cpu`] and its kernels ask
//! [`Packings::reads_packed`]; the GPU (device arena and host emulation) keeps every constant in
//! its assigned layout ([`Packings::for_gpu`]: with a half weight precision, the weights of
//! dots and convolutions in the half type, 2 bytes per value). With a half weight precision
//! (`ir/precision.rs`) GEMM and convolution panels are stored 2 bytes per value
//! ([`Packings::half_of`]; Winograd kernels stay f32) and the kernels widen them as they load
//! them (`cpu/vector.rs` `vload`).
//! With `precision: bf16` on a target with AVX-512 BF16 ([`Packings::reads_bf16_pairs`]) GEMM
//! panels hold bfloat16 *pairs* instead ([`pack_gemm_pairs`]): two consecutive k of a column side
//! by side, so one 512-bit load is 16 columns × 2 k, the operand of `vdpbf16ps`
//! (`cpu/gemm_bf16.rs`). An int8 GEMM weight whose dot's data operand holds integers of one
//! byte's range (`ir/value_range.rs`) is stored for `vpdpbusd` on a target with AVX-512 VNNI,
//! for `vpmaddwd` on other x86-64 targets, for `sdot` / `smull` on aarch64, or for `smlad` on a
//! Cortex-M with the DSP extension ([`Packings::reads_vnni`], [`quad_dot_lanes`]): int8 *quads*,
//! four consecutive k of a column side by side (on Helium 16: [`dot_k`]), then the columns'
//! scales and sums ([`write_int8_quads`], `cpu/gemm_i8.rs`).
//! [`Packings::stored_bytes`] gives the bytes either way, re-laid here at compile time. The panel width is [`Tiles::nr`]: the micro-kernels
//! (`cpu/gemm.rs`, `cpu/conv.rs`) read panels of exactly that width.

use super::layout::{Geometry, geometry, physical_strides, relayout_into};
pub use super::tiles::{Tiles, panel_width};
use super::winograd;
mod depthwise;
mod direct;
mod int8;
pub mod signs;
mod stage;

use crate::ir::{DType, DotDims, FusionKind, InstId, Module as Hlo, Op, Precision, Shape, Window};
use crate::target::{SCALAR_FPU_BITS, Target};
use direct::{int8_direct, integer_valued};
pub use int8::{int8_columns, int8_conv_columns};
pub use stage::{VNNI_CONV_MAX_ROWS, VNNI_STAGE_BYTES, vnni_conv_stage_bytes};

/// What [`packing_of`] decides with.
struct Choice<'a> {
    tiles: Tiles,
    target: &'a Target,
    /// Arena scratch bytes reserved for Winograd convolutions.
    scratch: usize,
    /// The entry's value ranges, computed on first use.
    ranges: std::cell::OnceCell<Vec<crate::ir::value_range::Range>>,
}

/// How a weight is stored when a dot or convolution reads it packed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Packing {
    /// GEMM panels (`pack_gemm`) for a dot with these dims.
    Gemm(crate::ir::DotDims),
    /// Tap-major convolution panels per group (`pack_conv`), for this many groups.
    Conv { groups: usize },
    /// A Winograd-transformed kernel (`winograd::pack_into`).
    Winograd(winograd::Geometry),
    /// The assigned layout, in the weight precision's half type ([`Packings::for_gpu`]).
    Narrow,
}

/// How each constant of a module is stored.
#[derive(Debug, Clone)]
pub struct Packings {
    /// Per entry instruction: how it is stored packed (constants only).
    of: Vec<Option<Packing>>,
    /// The panels' tiles (`None`: nothing is packed).
    tiles: Option<Tiles>,
    /// The module's weight precision: packed weights are stored in its half type, 2 bytes per
    /// value (`ir/precision.rs`), when it has one.
    precision: Precision,
    /// Per entry instruction: a GEMM-packed f32 weight whose every column is exactly an int8
    /// vector times one scale (a quantized model's dequantized weights, [`int8_columns`]):
    /// stored as int8 panels and per-column scales, 1 byte per value, losslessly.
    int8: Vec<bool>,
    /// Per entry instruction: such an int8 weight whose every column scale is 1 (or 0, an
    /// all-zero column): integer weights, whose products' sums need no multiply.
    unit_scales: Vec<bool>,
    /// GEMM panels hold bfloat16 pairs ([`pack_gemm_pairs`]): `precision: bf16` on a target with
    /// AVX-512 BF16 and 16-lane vectors.
    bf16_pairs: bool,
    /// Per entry instruction: an int8 GEMM weight stored as VNNI quads ([`write_int8_quads`]),
    /// with the offset that makes its dot's data operand unsigned bytes (`x + offset` in
    /// [0, 255], `value_range::Range::u8_offset`).
    vnni: Vec<Option<i32>>,
    /// Per entry instruction: a quad weight without −128 on AVX2 (`signs.rs`).
    signs: Vec<bool>,
    /// Consecutive k of one column the int8 weights stored for a dot product keep side by side
    /// ([`dot_k`]): 4 (quads), or 16 for Helium.
    dot_k: usize,
    /// Per entry instruction: an int8 depthwise kernel (`packing/depthwise.rs`), stored in its
    /// layout one byte per value, then its channels' scales (also marked in `int8`).
    depthwise: Vec<bool>,
}

impl Packings {
    /// Every constant in its assigned layout.
    pub fn none(hlo: &Hlo) -> Packings {
        Packings {
            of: vec![None; hlo.entry.instructions.len()],
            tiles: None,
            precision: Precision::F32,
            int8: vec![false; hlo.entry.instructions.len()],
            unit_scales: vec![false; hlo.entry.instructions.len()],
            bf16_pairs: false,
            vnni: vec![None; hlo.entry.instructions.len()],
            signs: vec![false; hlo.entry.instructions.len()],
            dot_k: QUAD_K,
            depthwise: vec![false; hlo.entry.instructions.len()],
        }
    }

    /// What the GPU kernels read (device arena and host emulation, `codegen/gpu/half.rs`): every
    /// constant in its assigned layout; with a half weight precision, a weight whose every use is
    /// as the weight (rhs) operand of an f32 dot or convolution (its only read in that product's
    /// fusion) is stored in the half type, 2 bytes per value ([`Packings::half_of`]).
    pub fn for_gpu(hlo: &Hlo) -> Packings {
        let mut p = Packings::none(hlo);
        if hlo.precision.weight_dtype().is_none() {
            return p;
        }
        p.precision = hlo.precision;
        for i in 0..hlo.entry.instructions.len() {
            if narrow_on_gpu(hlo, InstId(i as u32)) {
                p.of[i] = Some(Packing::Narrow);
            }
        }
        p
    }

    /// The packings the CPU micro-kernels read on `target`; a convolution takes the Winograd
    /// path (`winograd.rs`) only if its scratch fits in `scratch` bytes (what the buffer plan
    /// reserved: [`Packings::scratch_for_cpu`] with Winograd on, 0 with it off).
    pub fn for_cpu(hlo: &Hlo, target: &Target, scratch: usize) -> Packings {
        let c = &hlo.entry;
        let t = Tiles::for_target(target);
        let cx = Choice {
            tiles: t,
            target,
            scratch,
            ranges: std::cell::OnceCell::new(),
        };
        let of: Vec<Option<Packing>> = (0..c.instructions.len())
            .map(|i| match c.instructions[i].op {
                Op::Constant(_) => packing_of(hlo, InstId(i as u32), &cx),
                _ => None,
            })
            .collect();
        let scales: Vec<Option<Vec<f32>>> = of
            .iter()
            .zip(&c.instructions)
            .enumerate()
            .map(|(i, (p, inst))| match (p, &inst.op) {
                (Some(Packing::Gemm(d)), Op::Constant(lit)) if hlo.precision == Precision::F32 => {
                    lit.bytes().and_then(|b| int8_columns(b, &inst.shape, d))
                }
                (Some(Packing::Conv { .. }), Op::Constant(lit))
                    if hlo.precision == Precision::F32 =>
                {
                    lit.bytes().and_then(|b| int8_conv_columns(b, &inst.shape))
                }
                (None, Op::Constant(_)) if hlo.precision == Precision::F32 => {
                    let ranges = cx
                        .ranges
                        .get_or_init(|| crate::ir::value_range::ranges(hlo));
                    depthwise::int8_depthwise(hlo, InstId(i as u32), target, ranges)
                }
                _ => None,
            })
            .collect();
        let int8: Vec<bool> = scales.iter().map(Option::is_some).collect();
        let depthwise = (0..c.instructions.len())
            .map(|i| int8[i] && of[i].is_none())
            .collect();
        // An all-zero column has scale 0: its sums are 0 either way.
        let unit_scales = scales
            .iter()
            .map(|s| {
                s.as_ref()
                    .is_some_and(|s| s.iter().all(|&v| v == 0.0 || v == 1.0))
            })
            .collect();
        let vnni = vnni_offsets(hlo, target, &t, &of, &int8);
        Packings {
            signs: signs::quads_avoiding_min(hlo, target, &of, &vnni),
            of,
            tiles: Some(t),
            precision: hlo.precision,
            int8,
            unit_scales,
            vnni,
            bf16_pairs: hlo.precision == Precision::Bf16
                && target.has_avx512_bf16()
                && t.lanes == BF16_PAIR_LANES,
            dot_k: dot_k(target),
            depthwise,
        }
    }

    /// The arena scratch the CPU backend needs for `hlo` with Winograd convolutions on: the
    /// largest any one of them uses (kernels run one at a time).
    pub fn scratch_for_cpu(hlo: &Hlo, target: &Target) -> usize {
        let p = Packings::for_cpu(hlo, target, usize::MAX);
        p.of.iter()
            .filter_map(|k| match k {
                Some(Packing::Winograd(g)) => Some(g.scratch_bytes()),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The Winograd geometry of the convolution computed by entry instruction `id`, if it reads
    /// its kernel Winograd-transformed.
    pub fn winograd(&self, hlo: &Hlo, id: InstId) -> Option<winograd::Geometry> {
        let (_, _, rhs, _) = heavy_in(hlo, id)?;
        match &self.of[rhs.index()] {
            Some(Packing::Winograd(g)) => Some(*g),
            _ => None,
        }
    }

    /// Whether entry instruction `id` is a constant stored packed.
    pub fn is_packed(&self, id: InstId) -> bool {
        self.of[id.index()].is_some()
    }

    /// Whether the dot or convolution computed by entry instruction `id` (itself, or the heavy
    /// op of an output fusion) reads its weight packed.
    pub fn reads_packed(&self, hlo: &Hlo, id: InstId) -> bool {
        heavy_in(hlo, id).is_some_and(|(_, _, rhs, _)| self.is_packed(rhs))
    }

    /// The bytes constant `id` (logical row-major `bytes`, shape `s`) is stored as.
    pub fn stored_bytes(&self, id: InstId, bytes: &[u8], s: &Shape) -> Vec<u8> {
        let mut out = vec![0u8; self.stored_len(id, s)];
        self.write_stored(id, bytes, s, &mut out);
        out
    }

    /// How many bytes constant `id` of shape `s` is stored as (packed panels are padded to
    /// whole panels).
    pub fn stored_len(&self, id: InstId, s: &Shape) -> usize {
        if self.depthwise[id.index()] {
            return depthwise::stored_len(s);
        }
        if let (Some(Packing::Gemm(d)), Some(t), Some(_)) =
            (&self.of[id.index()], &self.tiles, self.vnni[id.index()])
        {
            let (k, n) = gemm_kn(s, d);
            return quads_len(k, n.div_ceil(t.nr()) * t.nr(), self.dot_k);
        }
        if let (Some(Packing::Conv { groups }), Some(t), Some(_)) =
            (&self.of[id.index()], &self.tiles, self.vnni[id.index()])
        {
            let (og, c) = (s.dims[0] / groups, s.dims[1]);
            let nr = panel_width(og, t);
            let taps = s.dims[2] * s.dims[3];
            let g = self.dot_k;
            let k = taps * conv_tap_channels(g, *groups, c);
            return quads_len(k, groups * og.div_ceil(nr) * nr, g);
        }
        if let Some(len) = self.packed_f32_len(id, s).filter(|_| self.int8[id.index()]) {
            // int8 panels, then one f32 scale per padded column.
            let values = len / 4;
            return values + values / self.column_len(id, s).max(1) * 4;
        }
        let packed = self.packed_f32_len(id, s);
        match (packed, self.half_of(id)) {
            (Some(len), Some(_)) => len / 2,
            (Some(len), None) => len,
            (None, _) => s.size_bytes(),
        }
    }

    /// The bytes of constant `id`'s packed panels in f32, if it is packed.
    fn packed_f32_len(&self, id: InstId, s: &Shape) -> Option<usize> {
        match (&self.of[id.index()], &self.tiles) {
            (Some(Packing::Gemm(d)), Some(t)) => {
                let (k, n) = gemm_kn(s, d);
                let k = if self.bf16_pairs {
                    k.div_ceil(2) * 2
                } else {
                    k
                };
                Some(n.div_ceil(t.nr()) * k * t.nr() * 4)
            }
            (Some(Packing::Conv { groups }), Some(t)) => {
                let nr = panel_width(s.dims[0] / groups, t);
                let k = s.dims[1] * s.dims[2] * s.dims[3];
                Some(groups * (s.dims[0] / groups).div_ceil(nr) * k * nr * 4)
            }
            (Some(Packing::Winograd(g)), Some(_)) => Some(winograd::packed_len(g)),
            (Some(Packing::Narrow), _) => Some(s.size_bytes()),
            _ => None,
        }
    }

    /// The type constant `id` is stored in when a kernel reads it packed: the weight precision's
    /// half type (F16 or BF16), or `None` for f32. A Winograd-transformed kernel stays f32: its
    /// values are sums of the rounded weights, and rounding them again is amplified by the
    /// output transform (a bf16 `F(4,3)` kernel measured 2.4% of the largest output off).
    pub fn half_of(&self, id: InstId) -> Option<DType> {
        match self.of[id.index()] {
            Some(Packing::Gemm(_) | Packing::Conv { .. } | Packing::Narrow) => {
                self.precision.weight_dtype()
            }
            _ => None,
        }
    }

    /// The narrow type the dot or convolution computed by entry instruction `id` reads its packed
    /// weight in (F16 or BF16: [`Packings::half_of`]; I8: int8 panels and per-column scales), with
    /// the weight (an entry instruction); `None` when it reads f32.
    pub fn reads_narrow(&self, hlo: &Hlo, id: InstId) -> Option<(InstId, DType)> {
        let (_, _, rhs, _) = heavy_in(hlo, id)?;
        if self.int8[rhs.index()] {
            return Some((rhs, DType::I8));
        }
        Some((rhs, self.half_of(rhs)?))
    }

    /// Whether the dot computed by entry instruction `id` reads its weight as GEMM panels of
    /// bfloat16 pairs ([`pack_gemm_pairs`]), for `vdpbf16ps` (`cpu/gemm_bf16.rs`).
    pub fn reads_bf16_pairs(&self, hlo: &Hlo, id: InstId) -> bool {
        self.bf16_pairs
            && heavy_in(hlo, id).is_some_and(|(_, _, rhs, _)| {
                matches!(self.of[rhs.index()], Some(Packing::Gemm(_)))
            })
    }

    /// The byte offset of the dot computed by entry instruction `id` when it reads its weight as
    /// VNNI quads ([`write_int8_quads`]) and multiplies with `vpdpbusd`, `vpmaddwd`, `sdot` or
    /// `smull` (`cpu/quad_dot.rs`).
    pub fn reads_vnni(&self, hlo: &Hlo, id: InstId) -> Option<i32> {
        let (_, _, rhs, _) = heavy_in(hlo, id)?;
        self.vnni[rhs.index()]
    }

    /// Whether the dot or convolution computed by entry instruction `id` reads an int8 weight
    /// whose column scales are all 1 (or 0): its f32 result is its i32 sums converted.
    pub fn reads_unit_scales(&self, hlo: &Hlo, id: InstId) -> bool {
        heavy_in(hlo, id).is_some_and(|(_, _, rhs, _)| self.unit_scales[rhs.index()])
    }

    /// Whether constant `id` is stored as int8 panels and per-column scales.
    pub fn is_int8(&self, id: InstId) -> bool {
        self.int8[id.index()]
    }

    /// The values of one column of the GEMM- or convolution-packed constant `id` of shape `s`:
    /// its contracted dim, or a convolution kernel's input channels × taps.
    fn column_len(&self, id: InstId, s: &Shape) -> usize {
        match &self.of[id.index()] {
            Some(Packing::Gemm(d)) => s.dims[d.rhs_contracting[0]],
            Some(Packing::Conv { .. }) => s.dims[1..].iter().product(),
            _ => 1,
        }
    }

    /// [`Packings::stored_bytes`] into `out` (of [`Packings::stored_len`] bytes, zeroed: the
    /// padding of packed panels is not written): the object writer re-lays each weight straight
    /// into the object it writes, holding no second copy.
    pub fn write_stored(&self, id: InstId, bytes: &[u8], s: &Shape, out: &mut [u8]) {
        if self.depthwise[id.index()] {
            return depthwise::write(bytes, s, out);
        }
        if let (Some(Packing::Gemm(d)), Some(t), true) =
            (&self.of[id.index()], &self.tiles, self.int8[id.index()])
        {
            let scales = int8_columns(bytes, s, d).expect("decided by Packings::for_cpu");
            let (k, n) = gemm_kn(s, d);
            let nr = t.nr();
            let mut f32s = vec![0u8; n.div_ceil(nr) * k * nr * 4];
            pack_gemm_into(bytes, s, d, nr, &mut f32s);
            if self.vnni[id.index()].is_some() {
                write_int8_quads(&f32s, (k, self.dot_k), nr, &scales, out);
            } else {
                write_int8_panels(&f32s, k, nr, &scales, out);
            }
            return;
        }
        if let (Some(Packing::Conv { groups }), Some(t), true) =
            (&self.of[id.index()], &self.tiles, self.int8[id.index()])
        {
            let scales = int8_conv_columns(bytes, s).expect("decided by Packings::for_cpu");
            let (og, k) = (s.dims[0] / groups, self.column_len(id, s));
            let nr = panel_width(og, t);
            let chunks_g = og.div_ceil(nr);
            let mut f32s = vec![0u8; groups * chunks_g * k * nr * 4];
            pack_conv_into(bytes, s, nr, *groups, &mut f32s);
            let padded = conv_column_scales(&scales, og, nr, *groups);
            if self.vnni[id.index()].is_none() {
                write_int8_panels(&f32s, k, nr, &padded, out);
                return;
            }
            // VNNI quads: each tap's channels padded (`c4` rows per tap, zeros past `c`:
            // `conv_tap_channels`), then written as quads (or Helium's groups of 16).
            let (c, taps) = (s.dims[1], s.dims[2] * s.dims[3]);
            let c4 = conv_tap_channels(self.dot_k, *groups, c);
            let mut quad_rows = vec![0u8; groups * chunks_g * taps * c4 * nr * 4];
            for jr in 0..groups * chunks_g {
                for tap in 0..taps {
                    let src = (jr * taps + tap) * c * nr * 4;
                    let dst = (jr * taps + tap) * c4 * nr * 4;
                    quad_rows[dst..dst + c * nr * 4].copy_from_slice(&f32s[src..src + c * nr * 4]);
                }
            }
            write_int8_quads(&quad_rows, (taps * c4, self.dot_k), nr, &padded, out);
            return;
        }
        if let (Some(len), Some(_)) = (self.packed_f32_len(id, s), self.half_of(id)) {
            // Half weights: packed in f32 (one weight's worth of scratch), then narrowed. The
            // panels hold values rounded to the half type before (`compile/weight_rounding.rs`),
            // so narrowing them is exact.
            let mut f32s = vec![0u8; len];
            self.write_packed_f32(id, bytes, s, &mut f32s);
            for (o, b) in out.chunks_exact_mut(2).zip(f32s.chunks_exact(4)) {
                let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                let h = self.precision.half_bits(v).unwrap_or(0);
                o.copy_from_slice(&h.to_le_bytes());
            }
            return;
        }
        self.write_packed_f32(id, bytes, s, out)
    }

    /// [`Packings::write_stored`] with packed panels in f32.
    fn write_packed_f32(&self, id: InstId, bytes: &[u8], s: &Shape, out: &mut [u8]) {
        match (&self.of[id.index()], &self.tiles) {
            (Some(Packing::Gemm(d)), Some(t)) if self.bf16_pairs => {
                pack_gemm_pairs_into(bytes, s, d, t.nr(), out)
            }
            (Some(Packing::Gemm(d)), Some(t)) => pack_gemm_into(bytes, s, d, t.nr(), out),
            (Some(Packing::Conv { groups }), Some(t)) => {
                pack_conv_into(bytes, s, panel_width(s.dims[0] / groups, t), *groups, out)
            }
            (Some(Packing::Winograd(g)), Some(_)) => winograd::pack_into(bytes, g, out),
            // `Narrow` and unpacked constants: the assigned layout.
            _ => relayout_into(bytes, s, out),
        }
    }
}

/// The dot or convolution computed by entry instruction `id` (itself, or the heavy op of an
/// output fusion): the op, the entry instructions feeding its two operands, its result shape.
pub(crate) fn heavy_in(hlo: &Hlo, id: InstId) -> Option<(Op, InstId, InstId, Shape)> {
    let inst = hlo.entry.inst(id);
    match &inst.op {
        Op::Dot(_) | Op::Convolution { .. } => Some((
            inst.op.clone(),
            inst.operands[0],
            inst.operands[1],
            inst.shape.clone(),
        )),
        Op::Fusion {
            kind: FusionKind::Output,
            computation,
        } => computation.instructions.iter().find_map(|h| match &h.op {
            Op::Dot(_) | Op::Convolution { .. } => {
                let param = |o: InstId| match computation.inst(o).op {
                    Op::Parameter { index } => Some(inst.operands[index]),
                    _ => None,
                };
                Some((
                    h.op.clone(),
                    param(crate::ir::shuffle::conv_input(computation, h.operands[0]).0)?,
                    param(h.operands[1])?,
                    h.shape.clone(),
                ))
            }
            _ => None,
        }),
        _ => None,
    }
}

/// The logical input shape of the convolution that entry instruction `id` computes, when it
/// reads its input through a channel map (an output fusion's prologue, `ir/shuffle.rs`
/// `conv_input`): the convolution operand's dims with the layout of the buffer it reads (the
/// map's source, [`heavy_in`]'s lhs), whose channels are minor exactly when the source's are.
pub(crate) fn mapped_conv_input(hlo: &Hlo, id: InstId) -> Option<Shape> {
    let Op::Fusion {
        kind: FusionKind::Output,
        computation,
    } = &hlo.entry.inst(id).op
    else {
        return None;
    };
    let h = computation
        .instructions
        .iter()
        .find(|h| matches!(h.op, Op::Convolution { .. }))?;
    let x = h.operands[0];
    let (src, map) = crate::ir::shuffle::conv_input(computation, x);
    map.map(|_| Shape {
        layout: computation.inst(src).shape.layout.clone(),
        ..computation.inst(x).shape.clone()
    })
}

/// Whether constant `c` is read only as the weight (rhs) operand of f32 dots and convolutions,
/// one read per product (in an output fusion, the heavy op's alone): what [`Packings::for_gpu`]
/// stores in the half type.
fn narrow_on_gpu(hlo: &Hlo, c: InstId) -> bool {
    let e = &hlo.entry;
    let inst = e.inst(c);
    if !matches!(inst.op, Op::Constant(_))
        || inst.shape.dtype != DType::F32
        || e.outputs.iter().any(|o| o.value == c)
    {
        return false;
    }
    let mut read = false;
    for (i, user) in e.instructions.iter().enumerate() {
        let uses = user.operands.iter().filter(|&&o| o == c).count();
        if uses == 0 {
            continue;
        }
        let Some((_, lhs, rhs, out)) = heavy_in(hlo, InstId(i as u32)) else {
            return false;
        };
        if uses != 1 || rhs != c || lhs == c || out.dtype != DType::F32 {
            return false;
        }
        // In an output fusion, the weight's parameter feeds the heavy op alone.
        if let Op::Fusion { computation, .. } = &user.op {
            let slot = user.operands.iter().position(|&o| o == c);
            let reads = computation
                .instructions
                .iter()
                .filter(|h| {
                    h.operands.iter().any(|&o| {
                        matches!(computation.inst(o).op, Op::Parameter { index } if Some(index) == slot)
                    })
                })
                .count();
            if reads != 1 {
                return false;
            }
        }
        read = true;
    }
    read
}

/// How constant `c` is stored packed, if every use of it is as the weight operand of a dot or
/// convolution that reads it packed, all the same way.
fn packing_of(hlo: &Hlo, c: InstId, cx: &Choice<'_>) -> Option<Packing> {
    let t = &cx.tiles;
    let e = &hlo.entry;
    if e.outputs.iter().any(|o| o.value == c) || e.inst(c).shape.dtype != DType::F32 {
        return None;
    }
    let mut packing: Option<Packing> = None;
    for (i, inst) in e.instructions.iter().enumerate() {
        let uses = inst.operands.iter().filter(|&&o| o == c).count();
        if uses == 0 {
            continue;
        }
        let (op, lhs, rhs, out) = heavy_in(hlo, InstId(i as u32))?;
        if uses != 1 || rhs != c || lhs == c {
            return None;
        }
        // A convolution reading its input through a channel map decides on the mapped input's
        // shape, and never takes Winograd (its transform reads the input plainly).
        let mapped = mapped_conv_input(hlo, InstId(i as u32));
        let (ls, rs) = (
            mapped.as_ref().unwrap_or(&e.inst(lhs).shape),
            &e.inst(rhs).shape,
        );
        let this = match &op {
            Op::Dot(d) => {
                let g = geometry(d, ls, rs, &out)?;
                if !packable(&g) {
                    return None;
                }
                Packing::Gemm(d.clone())
            }
            Op::Convolution {
                window,
                feature_group_count: groups,
            } => match winograd::choose(window, *groups, ls, rs, &out, cx.target).filter(|g| {
                g.scratch_bytes() <= cx.scratch
                    && !integer_valued(e.inst(c))
                    && mapped.is_none()
                    && !int8_direct(hlo, c, lhs, window, *groups, &out, cx)
            }) {
                Some(g) => Packing::Winograd(g),
                // Only the packed micro-kernel reads through a channel map (the staged and
                // channels × pixels paths read their input plainly): better its stores than
                // the loops.
                None if conv_packable(window, *groups, ls, rs, &out, t)
                    || (mapped.is_some()
                        && conv_packable_any_path(window, *groups, ls, rs, &out)) =>
                {
                    Packing::Conv { groups: *groups }
                }
                None => return None,
            },
            _ => return None,
        };
        match &packing {
            Some(p) if *p != this => return None,
            _ => packing = Some(this),
        }
    }
    packing
}

/// f32 panels `f32s` (columns of `k` values, `nr` per panel) as int8 panels, then the padded
/// columns' `scales` (one f32 each; missing ones, the padding, 0): the layout the int8 kernels
/// read (`cpu/vector.rs` `column_scales`).
fn write_int8_panels(f32s: &[u8], k: usize, nr: usize, scales: &[f32], out: &mut [u8]) {
    let values = f32s.len() / 4;
    for (i, b) in f32s.chunks_exact(4).enumerate() {
        let w = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        // Panel p holds column p·nr + j at value (p·K + kk)·nr + j.
        let col = (i / (k * nr)) * nr + i % nr;
        let scale = scales.get(col).copied().unwrap_or(0.0);
        let q = if scale == 0.0 {
            0.0
        } else {
            (w / scale).round()
        };
        out[i] = q as i8 as u8;
    }
    for (j, sc) in scales.iter().enumerate() {
        out[values + 4 * j..values + 4 * j + 4].copy_from_slice(&sc.to_le_bytes());
    }
}

/// Lanes of the vectors VNNI quads are laid out for on x86-64: one 512-bit register of i32
/// accumulators (`llvm.x86.avx512.vpdpbusd.512`).
pub const VNNI_LANES: u32 = 16;

/// Lanes of the vectors the quads are read in on aarch64: one 128-bit register of i32
/// accumulators (`llvm.aarch64.neon.sdot.v4i32.v16i8`; baseline NEON folds two into one).
pub const DOTPROD_LANES: u32 = 4;

/// Lanes of the dot product on a Cortex-M with Helium (M55): the f32 tiles' four 128-bit lanes,
/// each an output column whose 16 consecutive k one `vmlava.s8` sums into a core register
/// (`cpu/quad_dot.rs` `DotKind::Mve`).
pub const MVE_LANES: u32 = 4;

/// Consecutive k of a column stored side by side for the dot products of `cpu/quad_dot.rs`:
/// a quad, the operand of `vpdpbusd`, `vpmaddwd`, `sdot`, `smull` and `smlad` pairs.
pub const QUAD_K: usize = 4;

/// Consecutive k of a column stored side by side for Helium's `vmlava.s8`: one 128-bit vector
/// of bytes.
pub const MVE_K: usize = 16;

/// The k a column keeps side by side in the int8 weights of `target`'s dot product: [`MVE_K`]
/// on Helium, else [`QUAD_K`]. The data operand (a row of A, a staged pixel) is padded with zeros
/// to the same multiple.
pub fn dot_k(target: &Target) -> usize {
    if target.has_helium() { MVE_K } else { QUAD_K }
}

/// Whether an int8 convolution kernel's taps are merged into one k for Helium's 16-byte
/// products (`dot_k` = [`MVE_K`]): one group whose input channels do not fill whole groups of
/// 16 (a 3-channel image, kws's 4 taps as channels). Its column's k is then every tap's
/// channels padded to a quad, one after the other, padded to 16 only at the end, and the kernel
/// reads its data operand through a per-pixel copy of the taps (`cpu/conv/int8.rs`); else each
/// tap's channels are padded to 16 (10 taps of 4 channels: 40 products in 48 bytes, not 160).
pub fn conv_taps_merged(dot_k: usize, groups: usize, c: usize) -> bool {
    dot_k == MVE_K && groups == 1 && c.div_ceil(QUAD_K) % (MVE_K / QUAD_K) != 0
}

/// The channels one tap of an int8 convolution kernel takes per column, zeros past `c`: whole
/// quads, or whole groups of `dot_k` where the taps are not merged ([`conv_taps_merged`]).
pub fn conv_tap_channels(dot_k: usize, groups: usize, c: usize) -> usize {
    let pad = if conv_taps_merged(dot_k, groups, c) {
        QUAD_K
    } else {
        dot_k
    };
    c.div_ceil(pad) * pad
}

/// Lanes of the 4-byte dot product on a Cortex-M without a vector unit: one i32 accumulator in a
/// core register per output (`smlad` adds two 16-bit products to it).
pub const SMLAD_LANES: u32 = 1;

/// The i32 lanes of the 4-byte dot product that reads int8 quads on `target` (`cpu/quad_dot.rs`):
/// `vpdpbusd` on AVX-512 VNNI (16); on other x86-64 targets `vpmaddwd` on the vectors of the
/// tiles, the bytes widened to words: 16 with 512-bit vectors and AVX-512BW, 8 with 256-bit ones
/// and AVX2, 4 (SSE2, every x86-64 CPU) with 128-bit ones; on aarch64 `sdot` with dotprod, else
/// `smull`/`sadalp` (baseline NEON: every aarch64 target whose file does not turn NEON off);
/// on a Cortex-M with the DSP extension and no vector unit (M4, M7, M33) `sxtb16`/`smlad` on one
/// lane, in the core registers ([`SMLAD_LANES`]); `None` where there is none. Quads are stored the same way for all: a vector of `lanes`
/// columns × 4 k is `4 · lanes` consecutive bytes of a panel.
pub fn quad_dot_lanes(target: &Target) -> Option<u32> {
    use crate::target::Arch;
    if target.has_avx512_vnni() {
        return Some(VNNI_LANES);
    }
    match target.arch {
        Arch::X86_64 => match target.vector_bits {
            512 if target.has_avx512bw() => Some(16),
            256 if target.has_avx2() => Some(8),
            128 => Some(4),
            _ => None,
        },
        Arch::Aarch64 if target.has_neon() => Some(DOTPROD_LANES),
        Arch::Arm if target.has_helium() => Some(MVE_LANES),
        Arch::Arm if target.has_arm_dsp() && target.vector_bits == SCALAR_FPU_BITS => {
            Some(SMLAD_LANES)
        }
        _ => None,
    }
}

/// Most k a VNNI product sums in i32: 255 · 128 · K stays below 2^31 (no wrap-around).
const VNNI_MAX_K: usize = 65_536;

/// Per entry instruction, the byte offset of the int8 GEMM weights stored as VNNI quads: on a
/// target with a 4-byte dot product whose vectors are the tiles' ([`quad_dot_lanes`]: AVX-512
/// VNNI with 16 lanes, other x86-64 with the tiles' 16, 8 or 4, aarch64 with 4), an f32 module's int8 GEMM weight (`int8`) whose
/// dot's data operand holds integers within one byte's range.
fn vnni_offsets(
    hlo: &Hlo,
    target: &Target,
    t: &Tiles,
    of: &[Option<Packing>],
    int8: &[bool],
) -> Vec<Option<i32>> {
    let n = hlo.entry.instructions.len();
    let candidate =
        |i: usize| int8[i] && matches!(of[i], Some(Packing::Gemm(_) | Packing::Conv { .. }));
    if !(0..n).any(candidate)
        || quad_dot_lanes(target) != Some(t.lanes)
        || hlo.precision != Precision::F32
    {
        return vec![None; n];
    }
    let ranges = crate::ir::value_range::ranges(hlo);
    let mut out = vec![None; n];
    // A weight read by several products (identical constants merged by CSE) takes quads only
    // when every reader can read them with the same offset: its storage is one.
    let mut refused = vec![false; n];
    for i in 0..n {
        let Some((_, lhs, rhs, out_shape)) = heavy_in(hlo, InstId(i as u32)) else {
            continue;
        };
        let x = &hlo.entry.inst(lhs).shape;
        let fits = match of[rhs.index()].as_ref() {
            Some(Packing::Gemm(d)) if candidate(rhs.index()) => {
                gemm_kn(&hlo.entry.inst(rhs).shape, d).0 <= VNNI_MAX_K
            }
            Some(Packing::Conv { groups }) if candidate(rhs.index()) => {
                let w = &hlo.entry.inst(rhs).shape;
                let window = match heavy_in(hlo, InstId(i as u32)) {
                    Some((Op::Convolution { window, .. }, ..)) => window,
                    _ => continue,
                };
                // A row tile holds at most one output row's pixels.
                let rows = out_shape
                    .dims
                    .get(3)
                    .map_or(VNNI_CONV_MAX_ROWS, |&w| w.min(VNNI_CONV_MAX_ROWS));
                w.dims[1..].iter().product::<usize>() <= VNNI_MAX_K
                    && vnni_conv_stage_bytes(&window, *groups, x, w, (rows, dot_k(target)))
                        <= VNNI_STAGE_BYTES
            }
            _ => false,
        };
        let offset = if fits {
            ranges[lhs.index()].u8_offset()
        } else {
            None
        };
        let r = rhs.index();
        match (offset, out[r]) {
            (Some(o), None) if !refused[r] => out[r] = Some(o),
            (Some(o), Some(prev)) if o == prev => {}
            _ => {
                refused[r] = true;
                out[r] = None;
            }
        }
    }
    out
}

/// Bytes of a VNNI-quad weight of `k` rows and `n_pad` padded columns in groups of `g` k
/// ([`write_int8_quads`]).
fn quads_len(k: usize, n_pad: usize, g: usize) -> usize {
    n_pad * (k.div_ceil(g) * g + 8)
}

/// Writes GEMM panels (`f32s`, [`pack_gemm`]'s layout, `k` rows of `nr` columns per panel) whose
/// columns are int8 × `scales` as VNNI quads: panel `p` holds the int8 of `B[4q + b, p·nr + j]` at
/// byte `((p·K4 + q)·nr + j)·4 + b` with `K4 = ⌈K/4⌉` (zero past K), so 64 bytes are 16 columns ×
/// 4 k, one `vpdpbusd` operand (or a zmm `vpmaddwd` pair's), 32 bytes one ymm `vpmaddwd` pair's,
/// and 16 bytes 4 columns × 4 k, one `sdot` operand. In groups of `g` = [`MVE_K`] (Helium)
/// the same with 16 for 4: `B[16q + b, p·nr + j]` at byte `((p·K16 + q)·nr + j)·16 + b`, one
/// column's 16 k a `vmlava.s8` operand. Then one f32
/// scale per padded column, then one i32 per padded column: the sum of its int8 values (the
/// zero-point correction of `cpu/gemm_i8.rs`).
fn write_int8_quads(
    f32s: &[u8],
    (k, g): (usize, usize),
    nr: usize,
    scales: &[f32],
    out: &mut [u8],
) {
    let k4 = k.div_ceil(g);
    let n_pad = f32s.len() / 4 / k.max(1);
    let panels = n_pad / nr;
    let mut sums = vec![0i32; n_pad];
    for p in 0..panels {
        for kk in 0..k {
            for j in 0..nr {
                let src = ((p * k + kk) * nr + j) * 4;
                let w =
                    f32::from_le_bytes([f32s[src], f32s[src + 1], f32s[src + 2], f32s[src + 3]]);
                let col = p * nr + j;
                let scale = scales.get(col).copied().unwrap_or(0.0);
                let q = if scale == 0.0 {
                    0
                } else {
                    (w / scale).round() as i8
                };
                sums[col] += i32::from(q);
                out[((p * k4 + kk / g) * nr + j) * g + kk % g] = q as u8;
            }
        }
    }
    let at = n_pad * k4 * g;
    for j in 0..n_pad {
        let sc = scales.get(j).copied().unwrap_or(0.0);
        out[at + 4 * j..at + 4 * j + 4].copy_from_slice(&sc.to_le_bytes());
        let s = at + 4 * n_pad + 4 * j;
        out[s..s + 4].copy_from_slice(&sums[j].to_le_bytes());
    }
}

/// The scale of each padded column of a packed convolution kernel: padded column `jr·nr + j`
/// (panel `jr` = panel `jp` of group `g`, `pack_conv`'s order) is output channel
/// `g·og + jp·nr + j`, or padding (scale 0).
fn conv_column_scales(scales: &[f32], og: usize, nr: usize, groups: usize) -> Vec<f32> {
    let chunks_g = og.div_ceil(nr);
    (0..groups * chunks_g * nr)
        .map(|col| {
            let (jr, j) = (col / nr, col % nr);
            let o = (jr % chunks_g) * nr + j;
            if o < og {
                scales[(jr / chunks_g) * og + o]
            } else {
                0.0
            }
        })
        .collect()
}

/// Whether a dot with this geometry reads its rhs packed, when the rhs is a weight.
pub fn packable(g: &Geometry) -> bool {
    g.batch.is_empty()
}

/// Whether a convolution `conv(x, w) -> out` reads a constant kernel packed: 2-D, f32, output
/// or input channels minor (`cpu/conv.rs`' `ConvPath::PixelsByChannels`), with any number of groups
/// except depthwise ones (one input and one output channel per group: `ConvPath::Depthwise`
/// runs those along channels, which a panel per group cannot).
pub fn conv_packable(
    window: &Window,
    groups: usize,
    x: &Shape,
    w: &Shape,
    out: &Shape,
    t: &Tiles,
) -> bool {
    conv_packable_any_path(window, groups, x, w, out)
        && !conv_staged(window, groups, x, w, out)
        && !rows_fill_better(window, groups, x, w, out, t)
}

/// Whether `cpu/conv.rs`' packed path can run the convolution at all, whether or not another path
/// would run it faster.
fn conv_packable_any_path(
    window: &Window,
    groups: usize,
    x: &Shape,
    w: &Shape,
    out: &Shape,
) -> bool {
    let depthwise = groups > 1 && w.dims[1] == 1 && w.dims[0] == groups;
    window.rank() == 2
        && [x, w, out].iter().all(|s| s.dtype == DType::F32)
        && groups >= 1
        && x.dims[1] == groups * w.dims[1]
        && w.dims[0] % groups == 0
        && !depthwise
        && (physical_strides(out)[1] == 1 || physical_strides(x)[1] == 1)
}

/// Below this share of useful columns in its panels (output channels per group over the panel
/// width: 17 channels in AVX-512's 32-wide panel fill 53%), a convolution that can run channels ×
/// pixels does.
const MIN_PANEL_FILL: f64 = 0.75;

/// Whether a convolution whose input rows are contiguous (NCHW, unit stride along W) fills its
/// vectors better as `cpu/conv.rs`' `ConvPath::ChannelsByPixels` (rows of output channels, vectors
/// of pixels) than as `PixelsByChannels` (vectors of a group's output channels): when the panels
/// are less than [`MIN_PANEL_FILL`] full, the pixel vectors fuller, and each output element sums
/// at least two vectors' worth of products (an output not contiguous along W is then stored lane
/// by lane).
pub fn rows_fill_better(
    window: &Window,
    groups: usize,
    x: &Shape,
    w: &Shape,
    out: &Shape,
    t: &Tiles,
) -> bool {
    let (xs, os) = (physical_strides(x), physical_strides(out));
    if window.rank() != 2 || xs[3] != 1 || window.stride[1] != 1 || w.dims[0] % groups != 0 {
        return false;
    }
    let lanes = t.lanes as usize;
    let og = w.dims[0] / groups;
    let fill = og as f64 / panel_width(og, t) as f64;
    // A pointwise convolution over whole rows runs as one row of all pixels.
    let pointwise = window.size.iter().all(|&k| k == 1)
        && window.stride.iter().all(|&s| s == 1)
        && window
            .pad_low
            .iter()
            .chain(&window.pad_high)
            .all(|&p| p == 0)
        && xs[2] == x.dims[3] as u64
        && os[2] == out.dims[3] as u64 * os[3];
    let px = if pointwise {
        out.dims[2] * out.dims[3]
    } else {
        out.dims[3]
    };
    let px_fill = px as f64 / (px.div_ceil(lanes) * lanes) as f64;
    let k = w.dims[1] * w.dims[2] * w.dims[3];
    fill < MIN_PANEL_FILL && px_fill > fill && k >= 2 * lanes
}

/// Most input floats one group of a staged convolution copies per chunk of pixels: 16 KiB of
/// stack, half the smallest L1D of our targets.
const STAGE_FLOATS: usize = 4096;

/// Most pixels in a chunk of `ConvPath::ChannelsByPixels`: its panel width `Tiles::nr`, 32 on
/// the widest target (AVX-512: 2 × 16 lanes).
const MAX_CHUNK_PIXELS: usize = 32;

/// Whether `cpu/conv.rs`' `ConvPath::ChannelsByPixels` copies this convolution's input, a group
/// and a chunk of pixels at a time, into a channels-major stack buffer: a 1×1 convolution with
/// unit strides and no padding from pixel-ordered, channels-minor data (NHWC) into an output
/// whose rows are contiguous (NCHW, a model output). Transposing the input is cheaper than
/// storing the output lane by lane: the output has `O/G` values per pixel and group where the
/// input has `C/G`, and the copy is done once per chunk and group, not per tile. The kernel is
/// then read in its layout, not packed.
pub fn conv_staged(window: &Window, groups: usize, x: &Shape, w: &Shape, out: &Shape) -> bool {
    if window.rank() != 2 || [x, w, out].iter().any(|s| s.dtype != DType::F32) {
        return false;
    }
    let (xs, os) = (physical_strides(x), physical_strides(out));
    let pointwise = window.size.iter().all(|&k| k == 1)
        && window.stride.iter().all(|&s| s == 1)
        && window
            .pad_low
            .iter()
            .chain(&window.pad_high)
            .all(|&p| p == 0);
    pointwise
        && groups >= 1
        && x.dims[1] == groups * w.dims[1]
        && w.dims[0] % groups == 0
        && os[3] == 1
        && os[2] == out.dims[3] as u64
        && xs[3] != 1
        && xs[2] == x.dims[3] as u64 * xs[3]
        && w.dims[1] * MAX_CHUNK_PIXELS <= STAGE_FLOATS
}

/// Packs a weight (`bytes` in logical row-major order, shape `rhs`) into panels of `nr` columns:
/// panel `p` holds `B[k, p·nr + j]` at float `(p·K + k)·nr + j`, zero past `N`.
pub fn pack_gemm(bytes: &[u8], rhs: &Shape, d: &DotDims, nr: usize) -> Vec<u8> {
    let (k, n) = gemm_kn(rhs, d);
    let mut out = vec![0u8; n.div_ceil(nr) * k * nr * 4];
    pack_gemm_into(bytes, rhs, d, nr, &mut out);
    out
}

/// Lanes of the vectors `vdpbf16ps` panels are laid out for: one 512-bit register of f32
/// accumulators (`llvm.x86.avx512bf16.dpbf16ps.512`).
pub const BF16_PAIR_LANES: u32 = 16;

/// Packs a weight into panels of `nr` columns of bfloat16 *pairs* (values still f32 here; the
/// writer narrows them): panel `p` holds `B[2q + h, p·nr + j]` at value `((p·K2 + q)·nr + j)·2 + h`
/// with `K2 = ⌈K/2⌉`, zero past `N` and at `k = K` when K is odd. So the 32 halves from value
/// `((p·K2 + q)·nr + j)·2` are columns `j..j+16` × k `2q, 2q+1`: one `vdpbf16ps` operand.
pub fn pack_gemm_pairs(bytes: &[u8], rhs: &Shape, d: &DotDims, nr: usize) -> Vec<u8> {
    let (k, n) = gemm_kn(rhs, d);
    let mut out = vec![0u8; n.div_ceil(nr) * k.div_ceil(2) * 2 * nr * 4];
    pack_gemm_pairs_into(bytes, rhs, d, nr, &mut out);
    out
}

/// [`pack_gemm_pairs`] into a zeroed `out` of the packed size.
fn pack_gemm_pairs_into(bytes: &[u8], rhs: &Shape, d: &DotDims, nr: usize, out: &mut [u8]) {
    let (k, n) = gemm_kn(rhs, d);
    let k2 = k.div_ceil(2);
    let mut plain = vec![0u8; n.div_ceil(nr) * k * nr * 4];
    pack_gemm_into(bytes, rhs, d, nr, &mut plain);
    for p in 0..n.div_ceil(nr) {
        for kk in 0..k {
            let src = (p * k + kk) * nr * 4;
            for j in 0..nr {
                let dst = (((p * k2 + kk / 2) * nr + j) * 2 + kk % 2) * 4;
                out[dst..dst + 4].copy_from_slice(&plain[src + j * 4..src + j * 4 + 4]);
            }
        }
    }
}

/// The contracted size K and the column count N of a dot's rhs.
fn gemm_kn(rhs: &Shape, d: &DotDims) -> (usize, usize) {
    let kd = d.rhs_contracting[0];
    let n = (0..rhs.rank())
        .filter(|i| !d.rhs_batch.contains(i) && *i != kd)
        .map(|i| rhs.dims[i])
        .product();
    (rhs.dims[kd], n)
}

/// [`pack_gemm`] into a zeroed `out` of the packed size.
fn pack_gemm_into(bytes: &[u8], rhs: &Shape, d: &DotDims, nr: usize, out: &mut [u8]) {
    let rank = rhs.rank();
    let mut strides = vec![1usize; rank];
    for i in (0..rank.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * rhs.dims[i + 1];
    }
    let kd = d.rhs_contracting[0];
    let free: Vec<usize> = (0..rank)
        .filter(|i| !d.rhs_batch.contains(i) && *i != kd)
        .collect();
    let k = rhs.dims[kd];
    let n: usize = free.iter().map(|&i| rhs.dims[i]).product();
    // Offset of column j: unravel j over the free dims.
    let col_off: Vec<usize> = (0..n)
        .map(|mut j| {
            let mut off = 0;
            for &fd in free.iter().rev() {
                off += (j % rhs.dims[fd]) * strides[fd];
                j /= rhs.dims[fd];
            }
            off
        })
        .collect();
    let panels = n.div_ceil(nr);
    for p in 0..panels {
        for kk in 0..k {
            for j in 0..nr.min(n - p * nr) {
                let src = (kk * strides[kd] + col_off[p * nr + j]) * 4;
                let dst = ((p * k + kk) * nr + j) * 4;
                out[dst..dst + 4].copy_from_slice(&bytes[src..src + 4]);
            }
        }
    }
}

/// Packs a kernel `[O, C/G, KH, KW]` of `groups` = G groups (logical row-major `bytes`) for
/// `ConvPath::PixelsByChannels` (`cpu/conv.rs`). Each group's `O/G` output channels get
/// `P = ⌈(O/G)/nr⌉` panels of their own (a panel never mixes groups: its columns share the
/// input channels they read), group `g`'s before group `g + 1`'s: panel `q = g·P + p`, row
/// `k = (kh·KW + kw)·C/G + c`, column `j` holds `w[g·O/G + p·nr + j, c, kh, kw]` at float
/// `(q·K + k)·nr + j`, zero past the group's last channel.
pub fn pack_conv(bytes: &[u8], w: &Shape, nr: usize, groups: usize) -> Vec<u8> {
    let (o, c, kh, kw) = (w.dims[0], w.dims[1], w.dims[2], w.dims[3]);
    let mut out = vec![0u8; groups * (o / groups).div_ceil(nr) * c * kh * kw * nr * 4];
    pack_conv_into(bytes, w, nr, groups, &mut out);
    out
}

/// [`pack_conv`] into a zeroed `out` of the packed size.
fn pack_conv_into(bytes: &[u8], w: &Shape, nr: usize, groups: usize, out: &mut [u8]) {
    let (o, c, kh, kw) = (w.dims[0], w.dims[1], w.dims[2], w.dims[3]);
    let og = o / groups;
    let k = c * kh * kw;
    let per_group = og.div_ceil(nr);
    for g in 0..groups {
        for p in 0..per_group {
            let q = g * per_group + p;
            for (tap, (y, x)) in (0..kh)
                .flat_map(|y| (0..kw).map(move |x| (y, x)))
                .enumerate()
            {
                for ci in 0..c {
                    for j in 0..nr.min(og - p * nr) {
                        let oc = g * og + p * nr + j;
                        let src = (((oc * c + ci) * kh + y) * kw + x) * 4;
                        let dst = ((q * k + tap * c + ci) * nr + j) * 4;
                        out[dst..dst + 4].copy_from_slice(&bytes[src..src + 4]);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
