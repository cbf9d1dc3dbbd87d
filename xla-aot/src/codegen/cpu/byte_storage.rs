//! Quantized activations stored one byte per element: a requantized value whose producer and
//! readers can all handle bytes is kept as `u8` (or `i8`) in the arena, so it moves a quarter of
//! its f32 bytes through memory (squeezenet's int8 stem: 3.1 MB of f32 became 0.8 MB that stays
//! in L2; its fire modules' concatenations a quarter of their size).
//!
//! Contract: [`stored_types`] gives entry instruction `id` a byte type exactly when its value
//! range (`ir/value_range.rs`) is integers of that type ([`Range::byte_type`]: the conversions
//! to the byte and back to f32 are exact), it is no model output, and, within the largest set of
//! such values closed under both rules:
//! - its producer stores bytes: an output fusion whose convolution takes the int8 direct
//!   micro-kernel (`conv/int8.rs`: a weight read as VNNI quads, `conv::choose`'s
//!   `PixelsByChannels`, no Winograd, no channel map) with its whole epilogue in registers and
//!   no residual, writing channels-minor; a bare max/min pool on the register path
//!   ([`pool_fits_registers`], every window holding an element) of a value stored in the same
//!   type; or a concatenation assembled in place (`arena/concat_views.rs`) of values stored in
//!   the same type;
//! - every reader reads bytes: such a pool, the concatenation it is a view of (stored too), or
//!   a convolution (fused or bare) on the int8 direct micro-kernel reading it as its input.
//!
//! A convolution converts its finished f32 vectors to bytes (packed four vectors to one 64-byte
//! store on AVX-512BW), a pool maxes the bytes as integers (the conversion is monotone) and
//! stores bytes or converts once per output, an int8 convolution stages the bytes plus its
//! offset as it staged converted f32s. The values are the f32 kernels' bit for bit. The kernels
//! check that they took these paths (`kernel.rs`, `reduce.rs`).
//!
//! [`Range::byte_type`]: crate::ir::value_range::Range::byte_type

use super::Cg;
use super::conv::{self, ConvPath};
use super::epilogue::{self, Operand, RegEpilogue, Step};
use super::reduce::pool_fits_registers;
use crate::arena::ConcatView;
use crate::codegen::core::packing::{Packings, Tiles, heavy_in, mapped_conv_input};
use crate::ir::{BinaryOp, Computation, DType, FusionKind, InstId, Module as Hlo, Op, ReduceKind};
use crate::target::Target;
use inkwell::types::VectorType;
use inkwell::values::{IntValue, PointerValue, VectorValue};

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
    let (readers, outs) = crate::passes::rewrite::users(c);
    let lanes = Tiles::for_target(target).lanes;
    // Candidates: values of one byte type, no output, whose producer can store bytes given
    // its operands; then the greatest set closed under both ends' conditions.
    let mut stored: Vec<Option<DType>> = c
        .ids()
        .map(|id| {
            let byte = ranges[id.index()].byte_type()?;
            let ok = outs[id.index()] == 0
                && !readers[id.index()].is_empty()
                && match &c.inst(id).op {
                    Op::Fusion { .. } => int8_conv(hlo, packings, id, true),
                    Op::ReduceWindow { .. } | Op::Concatenate { .. } => true,
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
            let same = |o: &InstId| stored[o.index()] == Some(d);
            let produced = match &inst.op {
                Op::ReduceWindow { .. } => {
                    pooled_in_registers(c, id, lanes) && same(&inst.operands[0])
                }
                Op::Concatenate { .. } => inst
                    .operands
                    .iter()
                    .all(|o| same(o) && views[o.index()].is_some_and(|v| v.concat == id)),
                _ => true,
            };
            let read = readers[id.index()].iter().all(|&r| match &c.inst(r).op {
                Op::ReduceWindow { .. } => pooled_in_registers(c, r, lanes),
                Op::Concatenate { .. } => {
                    stored[r.index()] == Some(d) && views[id.index()].is_some_and(|v| v.concat == r)
                }
                Op::Fusion { .. } | Op::Convolution { .. } => {
                    heavy_in(hlo, r).is_some_and(|(_, x, w, _)| x == id && w != id)
                        && int8_conv(hlo, packings, r, false)
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
/// micro-kernel (`conv/int8.rs`) reading its input as it is (no Winograd, no channel map), with
/// its whole epilogue in registers and no residual, writing channels-minor when `writes` (the
/// conditions under which it stores bytes; reading bytes needs only the kernel).
fn int8_conv(hlo: &Hlo, packings: &Packings, id: InstId, writes: bool) -> bool {
    let c = &hlo.entry;
    let computation = match &c.inst(id).op {
        Op::Fusion {
            kind: FusionKind::Output,
            computation,
        } => Some(computation),
        // A bare convolution reads as the fused ones do, and never stores bytes (its raw sums
        // are no byte's range).
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
    if packings.reads_vnni(hlo, id).is_none()
        || packings.winograd(hlo, id).is_some()
        || mapped_conv_input(hlo, id).is_some()
    {
        return false;
    }
    let path = conv::choose(
        &window,
        feature_group_count,
        &c.inst(x).shape,
        &c.inst(w).shape,
        &out,
        packings.reads_packed(hlo, id),
    );
    if path != Some(ConvPath::PixelsByChannels) {
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

/// Whether entry instruction `id` is a bare max or min pool on the register path (`reduce.rs`)
/// whose windows all hold an element.
fn pooled_in_registers(c: &Computation, id: InstId, lanes: u32) -> bool {
    let inst = c.inst(id);
    let Op::ReduceWindow { kind, window } = &inst.op else {
        return false;
    };
    *kind != ReduceKind::Add
        && (0..window.rank())
            .all(|d| window.pad_low[d] < window.size[d] && window.pad_high[d] < window.size[d])
        && pool_fits_registers(window, &inst.shape, &c.inst(inst.operands[0]).shape, lanes)
}

/// Vectors packed into one 64-byte store by [`Cg::store_finished_bytes`].
const PACKED_VECTORS: usize = 4;

/// `1.5 · 2^23`: the constant of the rounding `(v + k) − k` a quantization lowers to. For a
/// result `r` of one byte's range, `v + k = k + r` lies in `[2^23, 2^24)`, where the f32 step
/// is 1, so `r` is the bit pattern of `v + k` minus that of `k` (one integer subtraction in
/// place of the f32 subtraction and the conversion).
const ROUND_SHIFT: f32 = 12_582_912.0;

/// The epilogue `e` of a result stored as bytes without its last step, when that step and the
/// one before are the rounding `(· + k) − k` with `k` [`ROUND_SHIFT`] (scalar parameters whose
/// constant values `consts` gives): [`Cg::rounded_ints`] then finishes the integers.
pub(super) fn before_rounding(e: &RegEpilogue, consts: &[Option<f32>]) -> Option<RegEpilogue> {
    let n = e.steps.len();
    let shift = |o: &Operand| match o {
        Operand::Scalar(p) => consts.get(*p).copied().flatten() == Some(ROUND_SHIFT),
        _ => false,
    };
    match e.steps.get(n.checked_sub(2)?..)? {
        [
            Step::Binary {
                op: BinaryOp::Add,
                other: a,
                ..
            },
            Step::Binary {
                op: BinaryOp::Subtract,
                other: b,
                value_first: true,
            },
        ] if shift(a) && shift(b) => Some(RegEpilogue {
            steps: e.steps[..n - 1].to_vec(),
        }),
        _ => None,
    }
}

/// A finished vector of a tile: f32 integers of the byte type, for column `col` at element
/// `off`, of which `lanes` are stored.
pub(super) struct Finished<'ctx> {
    pub off: IntValue<'ctx>,
    /// f32 integers, or already i32 ([`Cg::rounded_ints`]) when `ints`.
    pub val: VectorValue<'ctx>,
    pub ints: bool,
    pub col: usize,
    pub lanes: u32,
}

impl Finished<'_> {
    fn lanes_total(&self) -> u32 {
        self.val.get_type().get_size()
    }
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// Stores finished vectors of byte type `d` at `p`: four (two) whole 16-lane vectors of
    /// consecutive columns as one 64-byte (32-byte) store
    /// where the target has AVX-512BW (`vpackssdw` twice, `vpackuswb`/`vpacksswb`, `vpermd`:
    /// four shuffles where four `vpmovdb` take eight, on the port the dot products share), the
    /// rest one by one. Exact: the values fit the byte type, so the
    /// saturating packs never saturate.
    pub(super) fn store_finished_bytes(
        &self,
        p: PointerValue<'ctx>,
        vals: &[Finished<'ctx>],
        d: DType,
    ) {
        let whole = |v: &Finished<'ctx>| v.lanes == 16 && v.val.get_type().get_size() == 16;
        let packable = self.target.has_avx512bw()
            && (vals.len() == PACKED_VECTORS || vals.len() == PACKED_VECTORS / 2)
            && vals.iter().all(whole)
            && vals.windows(2).all(|w| w[1].col == w[0].col + 16);
        if !packable {
            for v in vals {
                let i = self.finished_ints(v);
                let bytes = self
                    .b
                    .build_int_truncate(i, self.ctx.i8_type().vec_type(v.lanes_total()), "")
                    .unwrap();
                self.store_byte_lanes(p, v.off, bytes, v.lanes);
            }
            return;
        }
        let i32v = self.ctx.i32_type().vec_type(16);
        let ints: Vec<VectorValue<'ctx>> = vals.iter().map(|v| self.finished_ints(v)).collect();
        let intrinsic = |name: &str, arg: VectorType<'ctx>, ret: VectorType<'ctx>| {
            self.m.get_function(name).unwrap_or_else(|| {
                let ty = ret.fn_type(&[arg.into(), arg.into()], false);
                self.m.add_function(name, ty, None)
            })
        };
        let i16v = self.ctx.i16_type().vec_type(32);
        let i8v = self.ctx.i8_type().vec_type(64);
        let dw = intrinsic("llvm.x86.avx512.packssdw.512", i32v, i16v);
        let wb = intrinsic(
            if d == DType::U8 {
                "llvm.x86.avx512.packuswb.512"
            } else {
                "llvm.x86.avx512.packsswb.512"
            },
            i16v,
            i8v,
        );
        let ab = self.call(dw, &[ints[0].into(), ints[1].into()]);
        let cd = match ints.get(2..4) {
            Some(cd) => self.call(dw, &[cd[0].into(), cd[1].into()]),
            None => ab,
        };
        let bytes = self.call(wb, &[ab, cd]).into_vector_value();
        // Per 128-bit lane L the packs leave dwords [a_L, b_L, c_L, d_L] (4 bytes of each
        // vector; two vectors: [a_L, b_L, a_L, b_L]): dword 4L + v holds vector v's bytes
        // 4L..4L+3, wanted at dword 4v + L.
        let dwords = self
            .b
            .build_bit_cast(bytes, i32v, "")
            .unwrap()
            .into_vector_value();
        let mask: Vec<_> = (0..4 * vals.len() as u64)
            .map(|i| self.ctx.i32_type().const_int(4 * (i % 4) + i / 4, false))
            .collect();
        let ordered = self
            .b
            .build_shuffle_vector(
                dwords,
                i32v.get_undef(),
                VectorType::const_vector(&mask),
                "",
            )
            .unwrap();
        self.vstore_aligned(p, vals[0].off, ordered, 1);
    }

    /// A finished vector's integers (i32 lanes).
    fn finished_ints(&self, v: &Finished<'ctx>) -> VectorValue<'ctx> {
        if v.ints {
            return v.val;
        }
        let i32v = self.ctx.i32_type().vec_type(v.lanes_total());
        self.b.build_float_to_signed_int(v.val, i32v, "").unwrap()
    }

    /// `u − bits(k)` for `u = v + k` of [`before_rounding`]: the rounded integers.
    pub(super) fn rounded_ints(&self, u: VectorValue<'ctx>) -> VectorValue<'ctx> {
        let lanes = u.get_type().get_size();
        let i32t = self.ctx.i32_type();
        let bits = self.b.build_bit_cast(u, i32t.vec_type(lanes), "").unwrap();
        let k = i32t.const_int(u64::from(ROUND_SHIFT.to_bits()), false);
        let ks = VectorType::const_vector(&vec![k; lanes as usize]);
        self.b
            .build_int_sub(bits.into_vector_value(), ks, "")
            .unwrap()
    }

    /// Stores the first `n` lanes of byte vector `b` at element `off` of `p` (an `i8*`).
    pub(super) fn store_byte_lanes(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        b: VectorValue<'ctx>,
        n: u32,
    ) {
        if n == b.get_type().get_size() {
            self.vstore_aligned(p, off, b, 1);
            return;
        }
        for l in 0..n {
            let e = self
                .b
                .build_extract_element(b, self.ctx.i32_type().const_int(u64::from(l), false), "")
                .unwrap();
            self.b
                .build_store(self.gep(p, self.add(off, self.i64(u64::from(l)))), e)
                .unwrap();
        }
    }

    /// `lanes` bytes of type `d` (`U8` or `I8`) at element `off` of `p`, as a byte vector.
    pub(super) fn load_bytes(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        lanes: u32,
    ) -> VectorValue<'ctx> {
        self.load_vector(p, off, self.ctx.i8_type().vec_type(lanes), 1)
    }

    /// Byte vector `b` of type `d` (`U8` or `I8`) as f32 (exact).
    pub(super) fn bytes_to_f32(&self, b: VectorValue<'ctx>, d: DType) -> VectorValue<'ctx> {
        let lanes = b.get_type().get_size();
        let i32v = self.ctx.i32_type().vec_type(lanes);
        let w = if d == DType::U8 {
            self.b.build_int_z_extend(b, i32v, "").unwrap()
        } else {
            self.b.build_int_s_extend(b, i32v, "").unwrap()
        };
        self.b
            .build_signed_int_to_float(w, self.vec_ty(lanes), "")
            .unwrap()
    }
}
