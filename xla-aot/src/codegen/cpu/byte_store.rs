//! The kernel side of byte storage (`byte_storage.rs` decides which values): finished f32
//! vectors stored as bytes, bytes loaded and widened back to f32.
//!
//! Contract: every function here is exact for values of the byte type's range (f32 integers in
//! `[0, 255]` for `u8`, `[−128, 127]` for `i8`): [`Cg::store_finished_bytes`] stores what
//! converting each value to its byte gives, [`Cg::bytes_to_f32`] gives back the f32 value.
//! [`byte_rounding`] may take over an epilogue's last steps (the rounding, and a clamp to the
//! byte type's limits, which the store then does by saturating): what is stored is bit for bit
//! what the whole epilogue gives.

use super::Cg;
use super::epilogue::{Operand, RegEpilogue, Step};
use crate::ir::value_range::{ROUND_SHIFT, Range};
use crate::ir::{BinaryOp, DType, InstId};
use inkwell::IntPredicate;
use inkwell::types::VectorType;
use inkwell::values::{BasicValueEnum, IntValue, PointerValue, VectorValue};

/// Vectors packed into one 64-byte store by [`Cg::store_finished_bytes`].
const PACKED_VECTORS: usize = 4;

// `ROUND_SHIFT` (`k`): for a result `r` of one byte's range, `v + k = k + r` lies in
// `[2^23, 2^24)`, where the f32 step is 1, so `r` is the bit pattern of `v + k` minus that of
// `k` (one integer subtraction in place of the f32 subtraction and the conversion).

/// Largest magnitude a value may have for `vcvtps2dq {rn-sae}` to give its rounded integer
/// (`2^30`: well inside the i32 range, whose overflow gives `0x80000000`).
const CONVERT_LIMIT: f64 = 1_073_741_824.0;

/// Largest magnitude for which `(v + k) − k` is the rounding and `bits(v + k) − bits(k)` its
/// integer (`2^22`: then `v + k` lies in `[2^23, 2^24)`).
const SHIFT_LIMIT: f64 = 4_194_304.0;

/// How a result stored as bytes takes its integers ([`byte_rounding`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Take {
    /// The epilogue's steps end in `+ k` ([`ROUND_SHIFT`]): the integer is `bits(v + k) −
    /// bits(k)` (one `vpsubd` for the f32 subtraction and the conversion).
    ShiftedBits,
    /// The rounding is `vcvtps2dq` with embedded round-to-nearest-even (AVX-512, whatever MXCSR
    /// says): one instruction for `+ k`, `− k` and the conversion.
    ConvertNearest,
}

/// The rounding and clamp of a result stored as bytes, as [`Cg::rounded_ints`] does them.
pub(super) struct ByteRounding {
    /// The epilogue without the steps `take` and `saturate` replace.
    pub steps: RegEpilogue,
    pub take: Take,
    /// The clamp to the byte type's own limits was dropped: the integers may lie outside them,
    /// and the store saturates (`vpackssdw`/`vpackuswb` do it for free; elsewhere an integer
    /// clamp). Exact: for integer bounds, rounding and clamping commute.
    pub saturate: bool,
}

/// How the epilogue `e` of a result stored as bytes of type `d` ends, when its last two steps
/// are the rounding `(· + k) − k` with `k` [`ROUND_SHIFT`] (scalar parameters whose constant
/// values `consts` gives). A clamp to exactly `d`'s limits just before the rounding goes too
/// when `range` proves the clamped value NaN-free and small enough for `take`: vectors of
/// `lanes` f32 on a target with AVX-512 (`avx512`) convert with [`Take::ConvertNearest`].
pub(super) fn byte_rounding(
    e: &RegEpilogue,
    consts: &[Option<f32>],
    d: DType,
    (lanes, avx512): (u32, bool),
    range: &dyn Fn(InstId) -> Option<Range>,
) -> Option<ByteRounding> {
    let n = e.steps.len();
    let is_const = |o: &Operand, v: f32| match o {
        Operand::Scalar(p) => consts.get(*p).copied().flatten() == Some(v),
        _ => false,
    };
    let shift = |o: &Operand| is_const(o, ROUND_SHIFT);
    let add_k = match e.steps.get(n.checked_sub(2)?..)? {
        [
            add @ Step::Binary {
                op: BinaryOp::Add,
                other: a,
                ..
            },
            Step::Binary {
                op: BinaryOp::Subtract,
                other: b,
                value_first: true,
            },
        ] if shift(a) && shift(b) => add.clone(),
        _ => return None,
    };
    let (min, max) = byte_limits(d);
    let clamped = match n.checked_sub(3).map(|i| &e.steps[i]) {
        Some(Step::Clamp { lo, hi, x }) if is_const(lo, min as f32) && is_const(hi, max as f32) => {
            range(*x).filter(|r| !r.nan)
        }
        _ => None,
    };
    let within = |r: &Range, limit: f64| r.lo > -limit && r.hi < limit;
    Some(match clamped {
        Some(r) if avx512 && lanes == 16 && within(&r, CONVERT_LIMIT) => ByteRounding {
            steps: RegEpilogue {
                steps: e.steps[..n - 3].to_vec(),
            },
            take: Take::ConvertNearest,
            saturate: true,
        },
        Some(r) if within(&r, SHIFT_LIMIT) => ByteRounding {
            steps: RegEpilogue {
                steps: [&e.steps[..n - 3], &[add_k]].concat(),
            },
            take: Take::ShiftedBits,
            saturate: true,
        },
        _ => ByteRounding {
            steps: RegEpilogue {
                steps: e.steps[..n - 1].to_vec(),
            },
            take: Take::ShiftedBits,
            saturate: false,
        },
    })
}

/// The least and greatest value of byte type `d` (`U8` or `I8`).
fn byte_limits(d: DType) -> (i64, i64) {
    if d == DType::U8 {
        (0, 255)
    } else {
        (-128, 127)
    }
}

/// A finished vector of a tile: f32 integers of the byte type, for column `col` at element
/// `off`, of which `lanes` are stored.
pub(super) struct Finished<'ctx> {
    pub off: IntValue<'ctx>,
    /// f32 integers, or already i32 ([`Cg::rounded_ints`]) when `ints`.
    pub val: VectorValue<'ctx>,
    pub ints: bool,
    /// The integers may lie outside the byte type (`ByteRounding::saturate`): stored saturated.
    pub saturate: bool,
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
    /// rest one by one. The packs saturate, which is the clamp a [`Finished::saturate`] vector
    /// still needs (the others fit the byte type and never saturate); stored one by one, such a
    /// vector is clamped first.
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
                let i = if v.saturate { self.saturated(i, d) } else { i };
                let i = self.biased(i);
                let bytes = self
                    .b
                    .build_int_truncate(i, self.ctx.i8_type().vec_type(v.lanes_total()), "")
                    .unwrap();
                self.store_byte_lanes(p, v.off, bytes, v.lanes);
            }
            return;
        }
        let i32v = self.ctx.i32_type().vec_type(16);
        let ints: Vec<VectorValue<'ctx>> = vals
            .iter()
            .map(|v| self.biased(self.finished_ints(v)))
            .collect();
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

    /// Integers `i` plus the bias of the bytes the kernel stores (`Range::biased_byte`; 0 for
    /// most). A biased value is never saturated: its epilogue ends in the centring subtraction,
    /// not in the rounding [`byte_rounding`] takes over, so its integers lie in the bytes' range.
    fn biased(&self, i: VectorValue<'ctx>) -> VectorValue<'ctx> {
        let bias = self.be.out_bias.get();
        if bias == 0 {
            return i;
        }
        let lanes = i.get_type().get_size() as usize;
        let c = self.ctx.i32_type().const_int(bias as u64, true);
        self.b
            .build_int_add(i, VectorType::const_vector(&vec![c; lanes]), "")
            .unwrap()
    }

    /// A finished vector's integers (i32 lanes).
    fn finished_ints(&self, v: &Finished<'ctx>) -> VectorValue<'ctx> {
        if v.ints {
            return v.val;
        }
        if let Some(i) = self.exact_int_of(v.val) {
            return i;
        }
        let i32v = self.ctx.i32_type().vec_type(v.lanes_total());
        self.b.build_float_to_signed_int(v.val, i32v, "").unwrap()
    }

    /// The rounded integers of `u`, what [`byte_rounding`]'s steps leave: `u − bits(k)` for
    /// `u = v + k` ([`Take::ShiftedBits`]), or `u` converted to nearest, ties to even.
    pub(super) fn rounded_ints(&self, u: VectorValue<'ctx>, take: Take) -> VectorValue<'ctx> {
        let lanes = u.get_type().get_size();
        let i32t = self.ctx.i32_type();
        if take == Take::ConvertNearest {
            let i32v = i32t.vec_type(lanes);
            let i16t = self.ctx.i16_type();
            let name = "llvm.x86.avx512.mask.cvtps2dq.512";
            let f = self.m.get_function(name).unwrap_or_else(|| {
                let ty = i32v.fn_type(
                    &[u.get_type().into(), i32v.into(), i16t.into(), i32t.into()],
                    false,
                );
                self.m.add_function(name, ty, None)
            });
            // All lanes; rounding 8 = `_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC`.
            let args = [
                u.into(),
                i32v.get_undef().into(),
                i16t.const_all_ones().into(),
                i32t.const_int(8, false).into(),
            ];
            return self.call(f, &args).into_vector_value();
        }
        let bits = self.b.build_bit_cast(u, i32t.vec_type(lanes), "").unwrap();
        let k = i32t.const_int(u64::from(ROUND_SHIFT.to_bits()), false);
        let ks = VectorType::const_vector(&vec![k; lanes as usize]);
        self.b
            .build_int_sub(bits.into_vector_value(), ks, "")
            .unwrap()
    }

    /// Integers `i` clamped to byte type `d`'s limits (`vpmaxsd`, `vpminsd`).
    fn saturated(&self, i: VectorValue<'ctx>, d: DType) -> VectorValue<'ctx> {
        let (min, max) = byte_limits(d);
        let lanes = i.get_type().get_size() as usize;
        let splat = |c: i64| {
            let c = self.ctx.i32_type().const_int(c as u64, true);
            VectorType::const_vector(&vec![c; lanes])
        };
        let (lo, hi) = (splat(min), splat(max));
        let b = &self.b;
        let below = b.build_int_compare(IntPredicate::SLT, i, lo, "").unwrap();
        let i = b
            .build_select(below, lo, i, "")
            .unwrap()
            .into_vector_value();
        let above = b.build_int_compare(IntPredicate::SGT, i, hi, "").unwrap();
        b.build_select(above, hi, i, "")
            .unwrap()
            .into_vector_value()
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

    /// The bytes of f32 value `v` (a scalar or a vector) holding integers of a byte type: each
    /// converted to i32 and truncated, exact for such values (`byte_storage.rs`'s loop, shuffle
    /// and pool-epilogue kernels).
    pub(super) fn exact_bytes(&self, v: BasicValueEnum<'ctx>) -> BasicValueEnum<'ctx> {
        let (i32t, i8t) = (self.ctx.i32_type(), self.ctx.i8_type());
        if v.is_vector_value() {
            let v = v.into_vector_value();
            let lanes = v.get_type().get_size();
            let i = self
                .b
                .build_float_to_signed_int(v, i32t.vec_type(lanes), "")
                .unwrap();
            return self
                .b
                .build_int_truncate(i, i8t.vec_type(lanes), "")
                .unwrap()
                .into();
        }
        let i = self
            .b
            .build_float_to_signed_int(v.into_float_value(), i32t, "")
            .unwrap();
        self.b.build_int_truncate(i, i8t, "").unwrap().into()
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

    /// Byte vector `b` of type `d` (`U8` or `I8`) widened to the integer vector type `to`.
    pub(super) fn widen_bytes(
        &self,
        b: VectorValue<'ctx>,
        to: VectorType<'ctx>,
        d: DType,
    ) -> VectorValue<'ctx> {
        if d == DType::U8 {
            self.b.build_int_z_extend(b, to, "").unwrap()
        } else {
            self.b.build_int_s_extend(b, to, "").unwrap()
        }
    }

    /// Byte vector `b` of type `d` (`U8` or `I8`) as f32 (exact).
    pub(super) fn bytes_to_f32(&self, b: VectorValue<'ctx>, d: DType) -> VectorValue<'ctx> {
        let lanes = b.get_type().get_size();
        let w = self.widen_bytes(b, self.ctx.i32_type().vec_type(lanes), d);
        self.b
            .build_signed_int_to_float(w, self.vec_ty(lanes), "")
            .unwrap()
    }
}
