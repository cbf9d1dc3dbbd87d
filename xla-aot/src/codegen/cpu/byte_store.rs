//! The kernel side of byte storage (`byte_storage.rs` decides which values): finished f32
//! vectors stored as bytes, bytes loaded and widened back to f32.
//!
//! Contract: every function here is exact for values of the byte type's range (f32 integers in
//! `[0, 255]` for `u8`, `[−128, 127]` for `i8`): [`Cg::store_finished_bytes`] stores what
//! converting each value to its byte gives, [`Cg::bytes_to_f32`] gives back the f32 value.

use super::Cg;
use super::epilogue::{Operand, RegEpilogue, Step};
use crate::ir::{BinaryOp, DType};
use inkwell::types::VectorType;
use inkwell::values::{IntValue, PointerValue, VectorValue};

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
