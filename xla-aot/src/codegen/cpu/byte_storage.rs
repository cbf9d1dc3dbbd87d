//! Quantized activations stored one byte per element: a requantized value whose producer and
//! readers can all handle bytes is kept as `u8` (or `i8`) in the arena, so it moves a quarter of
//! its f32 bytes through memory (squeezenet's int8 stem: 3.1 MB of f32 became 0.8 MB that stays
//! in L2; its fire modules' concatenations a quarter of their size).
//!
//! Contract: [`stored_types`] gives entry instruction `id` a byte type exactly when its value
//! range (`ir/value_range.rs`) is integers of that type ([`Range::byte_type`]: the conversions
//! to the byte and back to f32 are exact), it is no model output or an output passed in that
//! byte type at the C API at one position (written into the caller's buffer: a quantized
//! model's last dense layer, `ir/api_types.rs` `output_bytes`), and, within the largest set of
//! such values closed under both rules:
//! - its producer stores bytes: a model input the caller passes in that byte type (read from
//!   the caller's buffer, no staging slice: `arena/staging.rs`); an output fusion whose convolution takes the int8 direct
//!   micro-kernel (`conv/int8.rs`: a weight read as VNNI quads, `conv::choose`'s
//!   `PixelsByChannels`, no Winograd, no channel map) with its whole epilogue in registers and
//!   no residual, writing channels-minor, or one on the depthwise micro-kernel
//!   (`conv/depthwise.rs`) under the same conditions; an output fusion whose dot takes the int8
//!   GEMM micro-kernel (`gemm_i8.rs`) in one K-block with its whole epilogue in registers
//!   ([`int8_gemm`]: a quantized dense layer); a loop fusion whose root is elementwise
//!   (a quantized model input's centring, a quantized shuffle's dequantization); a bare max/min
//!   pool on the register path ([`pool_fits_registers`], every window holding an element) of a
//!   value stored in the same type; an input fusion of such a pool and its elementwise epilogue
//!   (`pool_epilogue`: an int8 pool and the zero-point subtraction after it), whatever its
//!   operand's storage; or a concatenation assembled in place (`arena/concat_views.rs`) of
//!   values stored in the same type;
//! - every reader reads bytes: such a pool (or a summing one: average pooling adds the bytes
//!   widened to f32), a pool-and-epilogue fusion reading it as its pool's operand alone, the
//!   concatenation it is a view of (stored too), or
//!   a convolution (fused or bare) on the int8 direct or the depthwise micro-kernel reading it
//!   as its input, a dot (fused or bare) on the int8 GEMM micro-kernel reading it as its A
//!   (its packing widens bytes where it converted f32: `gemm_i8.rs` `pack_a_quads`), or a loop fusion of elementwise ops (a quantized residual add), whose
//!   elemental code widens the bytes it loads (`core/elemental.rs`).
//!
//! - A value whose range is integers at most 255 wide but no byte type's (a quantized activation
//!   centred by a zero point other than −128 or 0: str_ww's `x − z`) is stored biased
//!   (`Range::biased_byte`: the byte `x + bias` of `U8`, `bias = −lo`) when its producer is a
//!   convolution on the int8 direct or the depthwise micro-kernel or a dot on the int8 GEMM
//!   (as above), whose byte store adds the bias, or an elementwise loop fusion (a quantized
//!   model input's centring, `kernel.rs` `fused_loop_bytes`), and its every reader the int8
//!   direct micro-kernel reading it as its input, which stages `x + o` with `o` the same `−lo`
//!   (`conv/int8.rs` `stage_rows`), or the int8 GEMM reading it as A, which packs `x + o`
//!   alike: no other kernel takes a biased value.
//!
//! A convolution converts its finished f32 vectors to bytes (packed four vectors to one 64-byte
//! store on AVX-512BW), a pool maxes the bytes as integers (the conversion is monotone) and
//! stores bytes or converts once per output, an int8 convolution stages the bytes plus its
//! offset as it staged converted f32s (`byte_store.rs`). The values are the f32 kernels' bit for
//! bit. The kernels check that they took these paths (`kernel.rs`, `reduce.rs`).
//!
//! [`Range::byte_type`]: crate::ir::value_range::Range::byte_type

use super::conv::{self, ConvPath};
use super::epilogue;
use super::gemm;
use super::gemm_tiles::{Kind, gemm_tiles};
use super::reduce::{pool_epilogue_in_registers, pool_fits_registers};
use crate::arena::ConcatView;
use crate::codegen::core::layout::geometry;
use crate::codegen::core::packing::{Packings, Tiles, heavy_in, mapped_conv_input};
use crate::ir::{Computation, DType, FusionKind, InstId, Module as Hlo, Op, ReduceKind};
use crate::target::Target;

/// The byte type the CPU backend stores each entry instruction in, if any (module doc);
/// `views`: the concatenations' in-place views the plan will make (`arena/concat_views.rs`).
pub fn stored_types(
    hlo: &Hlo,
    target: &Target,
    packings: &Packings,
    views: &[Option<ConcatView>],
) -> Vec<Option<DType>> {
    let c = &hlo.entry;
    let ranges = crate::ir::value_range::ranges(hlo);
    // Each instruction's readers (an instruction reading a value twice counts once), and
    // whether it is an output.
    let mut readers: Vec<Vec<InstId>> = vec![Vec::new(); c.instructions.len()];
    for id in c.ids() {
        for &o in &c.inst(id).operands {
            if !readers[o.index()].contains(&id) {
                readers[o.index()].push(id);
            }
        }
    }
    let output = |id: InstId| c.outputs.iter().any(|o| o.value == id);
    // A model output passed in the byte type at the C API, at one position: written into the
    // caller's buffer (no staging slice: `arena/staging.rs`).
    let api_output = |id: InstId, byte: DType| {
        let mut at = c.outputs.iter().enumerate().filter(|(_, o)| o.value == id);
        matches!((at.next(), at.next()), (Some((k, _)), None) if hlo.api.output(k) == Some(byte))
    };
    let lanes = Tiles::for_target(target).lanes;
    // Candidates: values of one byte type, no output, whose producer can store bytes given
    // its operands; then the greatest set closed under both ends' conditions.
    let mut stored: Vec<Option<DType>> = c
        .ids()
        .map(|id| {
            let (byte, bias) = ranges[id.index()].biased_byte()?;
            let ok = if output(id) {
                bias == 0 && api_output(id, byte)
            } else {
                !readers[id.index()].is_empty()
            } && match &c.inst(id).op {
                // Biased bytes: a convolution's or an int8 GEMM's register epilogue adds the
                // bias, or an elementwise loop's byte store.
                _ if bias != 0 => match &c.inst(id).op {
                    Op::Fusion {
                        kind: FusionKind::Output,
                        ..
                    } => {
                        int8_conv(hlo, packings, id, true)
                            || depthwise_conv(hlo, packings, id, true)
                            || int8_gemm(hlo, target, packings, id, true)
                    }
                    Op::Fusion {
                        kind: FusionKind::Loop,
                        computation,
                    } => elementwise_loop(computation),
                    _ => false,
                },
                Op::Fusion {
                    kind: FusionKind::Loop,
                    computation,
                } => elementwise_loop(computation),
                Op::Fusion {
                    kind: FusionKind::Input,
                    ..
                } => pool_epilogue(c, id, lanes).is_some(),
                Op::Fusion { .. } => {
                    int8_conv(hlo, packings, id, true)
                        || depthwise_conv(hlo, packings, id, true)
                        || int8_gemm(hlo, target, packings, id, true)
                }
                Op::ReduceWindow { .. } | Op::Concatenate { .. } => true,
                // An input the caller passes in this byte type (a parameter's index is its
                // input position, `ir/verify.rs`): read from its buffer.
                Op::Parameter { index } => hlo.api.input(*index) == Some(byte),
                _ => false,
            };
            ok.then_some(byte)
        })
        .collect();
    loop {
        let mut changed = false;
        for id in c.ids() {
            let Some(d) = stored[id.index()] else {
                continue;
            };
            let inst = c.inst(id);
            let biased = |o: InstId| ranges[o.index()].byte_type().is_none();
            let same = |o: &InstId| stored[o.index()] == Some(d) && !biased(*o) && !biased(id);
            let produced = match &inst.op {
                Op::ReduceWindow { .. } => {
                    pooled_in_registers(c, id, lanes, false) && same(&inst.operands[0])
                }
                Op::Concatenate { .. } => inst
                    .operands
                    .iter()
                    .all(|o| same(o) && views[o.index()].is_some_and(|v| v.concat == id)),
                _ => true,
            };
            let read = readers[id.index()].iter().all(|&r| match &c.inst(r).op {
                // Biased bytes: only the int8 convolution's staging and the int8 GEMM's packing
                // take the bias off.
                _ if biased(id) => {
                    matches!(
                        c.inst(r).op,
                        Op::Fusion { .. } | Op::Convolution { .. } | Op::Dot(_)
                    ) && heavy_in(hlo, r).is_some_and(|(_, x, w, _)| x == id && w != id)
                        && (int8_conv(hlo, packings, r, false)
                            || int8_gemm(hlo, target, packings, r, false))
                }
                Op::ReduceWindow { .. } => pooled_in_registers(c, r, lanes, true),
                Op::Concatenate { .. } => {
                    stored[r.index()] == Some(d) && views[id.index()].is_some_and(|v| v.concat == r)
                }
                Op::Fusion {
                    kind: FusionKind::Loop,
                    computation,
                } => elemental_reader(computation),
                Op::Fusion {
                    kind: FusionKind::Input,
                    ..
                } => pool_epilogue(c, r, lanes) == Some(id),
                Op::Fusion { .. } | Op::Convolution { .. } | Op::Dot(_) => {
                    heavy_in(hlo, r).is_some_and(|(_, x, w, _)| x == id && w != id)
                        && (int8_conv(hlo, packings, r, false)
                            || depthwise_conv(hlo, packings, r, false)
                            || int8_gemm(hlo, target, packings, r, false))
                }
                _ => false,
            });
            if !(produced && read) {
                stored[id.index()] = None;
                changed = true;
            }
        }
        if !changed {
            return stored;
        }
    }
}

/// Whether entry instruction `id` is an output fusion whose convolution takes the int8 direct
/// micro-kernel (`conv/int8.rs`: a weight read as VNNI quads) reading its input as it is (no
/// Winograd, no channel map), with its whole epilogue in registers and no residual, writing
/// channels-minor when `writes` (the conditions under which it stores bytes; reading bytes
/// needs only the kernel).
fn int8_conv(hlo: &Hlo, packings: &Packings, id: InstId, writes: bool) -> bool {
    packings.reads_vnni(hlo, id).is_some()
        && conv_on_path(hlo, packings, id, writes, ConvPath::PixelsByChannels)
}

/// Whether entry instruction `id` is a dot (an output fusion's, or when only reading (`!writes`)
/// a bare one) on the int8 GEMM micro-kernel (`gemm_i8.rs`: a weight read as quads, A packed
/// from its buffer, which reads bytes as it reads f32), and when `writes`, in one K-block (the
/// tile's i32 sums never wait in C, which is one byte an element) with its whole epilogue in
/// registers (`gemm::dim_roles`, no residual).
fn int8_gemm(hlo: &Hlo, target: &Target, packings: &Packings, id: InstId, writes: bool) -> bool {
    let c = &hlo.entry;
    let Some((Op::Dot(d), x, w, out)) = heavy_in(hlo, id) else {
        return false;
    };
    if packings.reads_vnni(hlo, id).is_none() {
        return false;
    }
    let Some(g) = geometry(&d, &c.inst(x).shape, &c.inst(w).shape, &out) else {
        return false;
    };
    if !writes {
        return true;
    }
    let Op::Fusion {
        kind: FusionKind::Output,
        computation,
    } = &c.inst(id).op
    else {
        return false;
    };
    let kind = Kind {
        bf16: false,
        f16: false,
        vnni: true,
    };
    let lfree = c.inst(x).shape.rank() - d.lhs_batch.len() - d.lhs_contracting.len();
    let epi = computation
        .ids()
        .find(|&h| matches!(computation.inst(h).op, Op::Dot(_)))
        .and_then(|h| epilogue::recognize(computation, h));
    g.k <= gemm_tiles(&g, target, kind).kc
        && gemm::dim_roles(&g, &out, lfree).is_some()
        && epi.is_some_and(|e| e.full_strides().is_empty())
}

/// Whether entry instruction `id` is a convolution on the depthwise micro-kernel
/// (`conv/depthwise.rs`: it loads its input through the byte type) under [`int8_conv`]'s other
/// conditions.
fn depthwise_conv(hlo: &Hlo, packings: &Packings, id: InstId, writes: bool) -> bool {
    conv_on_path(hlo, packings, id, writes, ConvPath::Depthwise)
}

/// Whether entry instruction `id` is a convolution (an output fusion's, or when only reading
/// (`!writes`) a bare one: its raw sums are no byte's range) that `conv::choose` puts on `path`,
/// reading its input as it is (no Winograd, no channel map), and when `writes`, with its whole
/// epilogue in registers and no residual, writing channels-minor.
fn conv_on_path(hlo: &Hlo, packings: &Packings, id: InstId, writes: bool, path: ConvPath) -> bool {
    let c = &hlo.entry;
    let computation = match &c.inst(id).op {
        Op::Fusion {
            kind: FusionKind::Output,
            computation,
        } => Some(computation),
        Op::Convolution { .. } if !writes => None,
        _ => return false,
    };
    let Some((op, x, w, out)) = heavy_in(hlo, id) else {
        return false;
    };
    let Op::Convolution {
        window,
        feature_group_count,
    } = op
    else {
        return false;
    };
    if packings.winograd(hlo, id).is_some() || mapped_conv_input(hlo, id).is_some() {
        return false;
    }
    let chosen = conv::choose(
        &window,
        feature_group_count,
        &c.inst(x).shape,
        &c.inst(w).shape,
        &out,
        packings.reads_packed(hlo, id),
    );
    if chosen != Some(path) {
        return false;
    }
    let Some(computation) = computation.filter(|_| writes) else {
        return !writes;
    };
    let epi = computation
        .ids()
        .find(|&h| matches!(computation.inst(h).op, Op::Convolution { .. }))
        .and_then(|h| epilogue::recognize(computation, h));
    out.layout.minor_to_major.first() == Some(&1)
        && epi.is_some_and(|e| e.full_strides().is_empty())
}

/// The entry operand pooled by entry instruction `id` when it is an input fusion of a max or
/// min pool reading that operand as it is (a fused parameter, no chain) with an elementwise
/// epilogue in registers (`reduce.rs` `pool_epilogue_in_registers`), every window holding an
/// element: an int8 max pool and the
/// zero-point subtraction after it (squeezenet's int8 stem pool with signed activations). It
/// reads bytes as a bare pool does, and stores bytes after its epilogue.
fn pool_epilogue(c: &Computation, id: InstId, lanes: u32) -> Option<InstId> {
    let inst = c.inst(id);
    let Op::Fusion {
        kind: FusionKind::Input,
        computation,
    } = &inst.op
    else {
        return None;
    };
    let (heavy, chain, param) = pool_epilogue_in_registers(computation, lanes)?;
    let h = computation.inst(heavy);
    let Op::ReduceWindow { window, .. } = &h.op else {
        return None;
    };
    // The parameter is read by the pool alone (the epilogue would load it as f32).
    let readers = computation
        .instructions
        .iter()
        .filter(|i| i.operands.contains(&h.operands[0]))
        .count();
    (chain.steps.is_empty()
        && readers == 1
        && (0..window.rank())
            .all(|d| window.pad_low[d] < window.size[d] && window.pad_high[d] < window.size[d]))
    .then(|| inst.operands[param])
}

/// Whether a loop fusion computes its single f32 result by an elementwise root (a quantized
/// model input's `convert(q) − z`): `kernel.rs` then stores each element as its byte.
fn elementwise_loop(comp: &Computation) -> bool {
    let root = comp.inst(comp.outputs[0].value);
    comp.outputs.len() == 1 && root.shape.dtype == DType::F32 && root.op.is_elementwise()
}

/// Whether a loop fusion reads its arguments only through elemental code (`core/elemental.rs`
/// `value_of`, which widens a byte-stored argument): every instruction elementwise, a
/// parameter, a constant, a broadcast, a transpose or a reshape (a quantized residual add's
/// requantizations, a quantized input's layout and centring), so no channel shuffle or
/// concatenation path (`kernel.rs`) loads it as vectors.
fn elemental_reader(comp: &Computation) -> bool {
    comp.outputs.len() == 1
        && comp.instructions.iter().all(|i| {
            i.op.is_elementwise()
                || matches!(
                    i.op,
                    Op::Parameter { .. }
                        | Op::Constant(_)
                        | Op::Broadcast { .. }
                        | Op::Transpose { .. }
                        | Op::Reshape
                )
        })
}

/// Whether entry instruction `id` is a bare max or min pool (or, reading only (`sums`), a
/// summing one: it adds the bytes widened) on the register path (`reduce.rs`) whose windows
/// all hold an element.
fn pooled_in_registers(c: &Computation, id: InstId, lanes: u32, sums: bool) -> bool {
    let inst = c.inst(id);
    let Op::ReduceWindow { kind, window } = &inst.op else {
        return false;
    };
    (sums || *kind != ReduceKind::Add)
        && (0..window.rank())
            .all(|d| window.pad_low[d] < window.size[d] && window.pad_high[d] < window.size[d])
        && pool_fits_registers(window, &inst.shape, &c.inst(inst.operands[0]).shape, lanes)
}
