//! `multiply-q31` as LLVM integer arithmetic, on one i32 or on a vector of i32 lanes: TFLite's
//! `MultiplyByQuantizedMultiplier` (`ir/fixed_point.rs` is its definition and the reference).
//!
//! Contract: [`emit_mul_q31`] computes, for every lane, exactly
//! `ir::fixed_point::multiply_by_quantized_multiplier(x, M, shift)`: `x << clamp(shift, 0, 31)`
//! (wrapping), the 64-bit product with `M` plus 2^30 shifted right by 31 (arithmetic: the
//! floor, which equals gemmlowp's nudge-and-truncate for either sign), saturated to
//! `i32::MAX` where the shifted `x` and `M` are both `i32::MIN` (skipped when the caller knows
//! `M` is never `i32::MIN`), then a right shift by `clamp(−shift, 0, 31)` rounding half away from
//! zero (gemmlowp's `RoundingDivideByPOT`). The same function serves the scalar elemental code
//! (`elemental.rs`) and the CPU register epilogue (`cpu/epilogue.rs`), so both compute the same
//! bits.

use inkwell::IntPredicate;
use inkwell::builder::Builder;
use inkwell::types::IntMathType;
use inkwell::values::{AsValueRef, IntMathValue};

/// Constants and types of one lane shape: i32 (and i64) scalars or vectors of `n` lanes.
pub struct Lanes<'c, 'ctx, T: IntMathValue<'ctx>> {
    /// An i32 constant of the lane shape.
    pub c32: &'c dyn Fn(i64) -> T,
    /// An i64 constant of the lane shape.
    pub c64: &'c dyn Fn(i64) -> T,
    /// The i32 type of the lane shape.
    pub t32: T::BaseType,
    /// The i64 type of the lane shape.
    pub t64: T::BaseType,
    /// The target's saturating rounding doubling multiply returning the high half, where it has
    /// one for this lane shape (Helium's `vqrdmulh.s32`, NEON's `sqrdmulh`):
    /// `sat((2·x·m + 2^31) >> 32)` equals `(x·m + 2^30) >> 31` with the one saturating case
    /// (`x = m = i32::MIN`) the definition has, so it replaces the 64-bit product, its rounding
    /// and the saturation test (no 64-bit lanes: Helium and NEON would split them into scalar
    /// `smlal`s and moves).
    pub high_mul: Option<&'c dyn Fn(T, T) -> T>,
    /// The target's rounding shift by a signed count (negative: right), where it has one for
    /// this lane shape (Helium's `vrshl.s32`, NEON's `srshl`): `(h + 2^(r−1)) >> r` for a right
    /// shift by `r`, rounding half up. With the short rounding (below) the divide is this
    /// shift of `h − [h < 0]`: the same `(h + 2^(r−1) − [h < 0]) >> r`.
    pub round_shift: Option<&'c dyn Fn(T, T) -> T>,
}

/// What the caller knows of the operands (from their value ranges), each fact letting the
/// emitted code skip work that cannot change the result.
#[derive(Debug, Clone, Copy)]
pub struct Facts {
    /// Some lane's `m` may be `i32::MIN` (the one case that saturates).
    pub m_may_be_min: bool,
    /// Every shift lies in `[−31, 0]`: no left shift, the right shift is `−s` unclamped.
    pub shift_nonpositive: bool,
    /// Every shift lies in `[−31, −1]` and `|x| ≤` [`SHORT_X_LIMIT`]: the Q31 high half is then
    /// at most `2^29 + 1` in magnitude, so the rounding divide is `(h + 2^(r−1) − [h < 0]) >> r`
    /// (equal to gemmlowp's remainder test: for `h ≥ 0` both round `h / 2^r` half up, for
    /// `h < 0` half down, i.e. half away from zero), with no overflow.
    pub short_rounding: bool,
}

/// `2^29`: for `|x|` up to this the Q31 high half `h` is at most `2^29 + 1` in magnitude, so
/// `h + 2^(r−1)` (`r ≤ 31`) stays below `2^31` ([`Facts::short_rounding`]) and `2x` fits an i32.
pub const SHORT_X_LIMIT: f64 = (1u32 << 29) as f64;

impl Facts {
    /// Nothing known.
    pub const NONE: Facts = Facts {
        m_may_be_min: true,
        shift_nonpositive: false,
        short_rounding: false,
    };
}

/// `multiply-q31(x, m, s)` (module doc), with what `facts` let it skip.
pub fn emit_mul_q31<'ctx, T>(
    b: &Builder<'ctx>,
    k: &Lanes<'_, 'ctx, T>,
    (x, m, s): (T, T, T),
    facts: Facts,
) -> T
where
    T: IntMathValue<'ctx> + Copy,
    T::BaseType: IntMathType<'ctx, ValueType = T> + Copy,
{
    let (c32, c64) = (k.c32, k.c64);
    let sel = |c: T, t: T, f: T| -> T {
        let v = b.build_select(c, t, f, "").unwrap();
        // SAFETY: a select of two `T` values is a `T` value.
        unsafe { T::new(v.as_value_ref()) }
    };
    let cmp = |p: IntPredicate, l: T, r: T| b.build_int_compare(p, l, r, "").unwrap();
    let clamp31 = |v: T| {
        let v = sel(cmp(IntPredicate::SLT, v, c32(0)), c32(0), v);
        sel(cmp(IntPredicate::SGT, v, c32(31)), c32(31), v)
    };
    let (shifted, right) = if facts.shift_nonpositive || facts.short_rounding {
        (x, b.build_int_neg(s, "").unwrap())
    } else {
        let left = clamp31(s);
        let right = clamp31(b.build_int_neg(s, "").unwrap());
        (b.build_left_shift(x, left, "").unwrap(), right)
    };
    let mut high = match k.high_mul {
        Some(f) => f(shifted, m),
        None => {
            let ab = b
                .build_int_mul(
                    b.build_int_s_extend(shifted, k.t64, "").unwrap(),
                    b.build_int_s_extend(m, k.t64, "").unwrap(),
                    "",
                )
                .unwrap();
            let sum = b.build_int_add(ab, c64(1 << 30), "").unwrap();
            let high = b.build_right_shift(sum, c64(31), true, "").unwrap();
            b.build_int_truncate(high, k.t32, "").unwrap()
        }
    };
    if facts.m_may_be_min && k.high_mul.is_none() {
        let min = c32(i32::MIN as i64);
        let both = b
            .build_and(
                cmp(IntPredicate::EQ, shifted, min),
                cmp(IntPredicate::EQ, m, min),
                "",
            )
            .unwrap();
        high = sel(both, c32(i32::MAX as i64), high);
    }
    if let (true, Some(f)) = (facts.short_rounding, k.round_shift) {
        let sign = b.build_right_shift(high, c32(31), true, "").unwrap();
        return f(b.build_int_add(high, sign, "").unwrap(), s);
    }
    if facts.short_rounding {
        let half = b
            .build_left_shift(c32(1), b.build_int_sub(right, c32(1), "").unwrap(), "")
            .unwrap();
        let sign = b.build_right_shift(high, c32(31), true, "").unwrap();
        let t = b
            .build_int_add(b.build_int_add(high, half, "").unwrap(), sign, "")
            .unwrap();
        return b.build_right_shift(t, right, true, "").unwrap();
    }
    // Rounding divide by 2^right: up where the remainder exceeds half the divisor (half of it
    // plus one for a negative value).
    let mask = b
        .build_int_sub(b.build_left_shift(c32(1), right, "").unwrap(), c32(1), "")
        .unwrap();
    let rem = b.build_and(high, mask, "").unwrap();
    let negative = cmp(IntPredicate::SLT, high, c32(0));
    let half = b.build_right_shift(mask, c32(1), true, "").unwrap();
    let threshold = b
        .build_int_add(half, sel(negative, c32(1), c32(0)), "")
        .unwrap();
    let up = sel(cmp(IntPredicate::SGT, rem, threshold), c32(1), c32(0));
    let q = b.build_right_shift(high, right, true, "").unwrap();
    b.build_int_add(q, up, "").unwrap()
}
