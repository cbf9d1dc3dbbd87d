//! gemmlowp's fixed-point functions, as TFLite Micro's int8 kernels call them (gemmlowp
//! `fixedpoint/fixedpoint.h` at the commit TFLite Micro pins, `fda83bd`), and the per-op integer
//! functions built on them: the tables of int8 LOGISTIC, TANH, HARD_SWISH, RELU, RELU6 and
//! LEAKY_RELU and the exponentials of SOFTMAX.
//!
//! Contract: every function computes exactly what the C++ computes, wrapping int32 arithmetic
//! included (GCC's code wraps where C++ leaves overflow undefined). An int8 op whose output is a
//! function of one input integer becomes a 256-entry table built here at compile time and
//! gathered at run time (`int8.rs`), so its arithmetic runs in Rust, once, and the tests compare
//! the tables' results with TFLite Micro's outputs. `FixedPoint<int32, IB>` values are their raw
//! int32; `+` and `−` wrap, `*` is SRDHM.

use crate::ir::fixed_point::{
    QuantizedMultiplier, multiply_by_quantized_multiplier, quantize_multiplier,
    rounding_divide_by_pot, saturating_rounding_doubling_high_mul as srdhm,
};

/// `x · 2^k` saturated to int32 for `k > 0`, `x / 2^−k` rounded half away from zero for
/// `k ≤ 0` (gemmlowp's `SaturatingRoundingMultiplyByPOT`).
pub fn sat_mul_pot(x: i32, k: i32) -> i32 {
    if k <= 0 {
        return rounding_divide_by_pot(x, -k);
    }
    let t = (1i32 << (31 - k)) - 1;
    if x > t {
        i32::MAX
    } else if x < -t {
        i32::MIN
    } else {
        x.wrapping_shl(k as u32)
    }
}

/// `exp(a)` for `a` in `[−1/4, 0)` as Q0.31 (gemmlowp's Taylor polynomial around −1/8).
fn exp_on_interval_between_negative_one_quarter_and_0_excl(a: i32) -> i32 {
    /// exp(−1/8) in Q0.31.
    const EXP_MINUS_ONE_EIGHTH: i32 = 1_895_147_668;
    /// 1/3 in Q0.31.
    const ONE_THIRD: i32 = 715_827_883;
    let x = a.wrapping_add(1 << 28);
    let x2 = srdhm(x, x);
    let x3 = srdhm(x2, x);
    let x4 = srdhm(x2, x2);
    let x4_over_4 = rounding_divide_by_pot(x4, 2);
    let t = rounding_divide_by_pot(
        srdhm(x4_over_4.wrapping_add(x3), ONE_THIRD).wrapping_add(x2),
        1,
    );
    EXP_MINUS_ONE_EIGHTH.wrapping_add(srdhm(EXP_MINUS_ONE_EIGHTH, x.wrapping_add(t)))
}

/// `exp(a)` of a non-positive `a` with `ib` integer bits, as Q0.31 (gemmlowp's
/// `exp_on_negative_values`).
pub fn exp_on_negative_values(a: i32, ib: i32) -> i32 {
    /// exp(−2^k) in Q0.31 for k = −2 ..= 4 (gemmlowp's barrel shifter constants).
    const BARREL: [(i32, i32); 7] = [
        (-2, 1_672_461_947),
        (-1, 1_302_514_674),
        (0, 790_015_084),
        (1, 290_630_308),
        (2, 39_332_535),
        (3, 720_401),
        (4, 242),
    ];
    let fb = 31 - ib;
    let quarter = 1i32 << (fb - 2);
    let amq = (a & (quarter - 1)).wrapping_sub(quarter);
    let mut r = exp_on_interval_between_negative_one_quarter_and_0_excl(sat_mul_pot(amq, ib));
    let rem = amq.wrapping_sub(a);
    for (k, m) in BARREL {
        if ib > k && rem & (1i32 << (fb + k)) != 0 {
            r = srdhm(r, m);
        }
    }
    if ib > 5 && a < -(1i32 << (36 - ib)) {
        r = 0;
    }
    if a == 0 { i32::MAX } else { r }
}

/// The Newton–Raphson iterate shared by `one_over_one_plus_x_for_x_in_0_1` and
/// `one_minus_x_over_one_plus_x_for_x_in_0_1`: `1 / (1 + a)` in Q2.29 for `a` in Q0.31.
fn one_over_one_plus_x_q2(a: i32) -> i32 {
    /// 48/17 and −32/17 in Q2.29.
    const C48_17: i32 = 1_515_870_810;
    const CNEG32_17: i32 = -1_010_580_540;
    // RoundingHalfSum(a, One): (a + INT32_MAX ± 1) / 2 in int64, truncated.
    let s = i64::from(a) + i64::from(i32::MAX);
    let s = s + if s >= 0 { 1 } else { -1 };
    let h = (s / 2) as i32;
    let mut x = C48_17.wrapping_add(srdhm(h, CNEG32_17));
    for _ in 0..3 {
        let one_minus = (1i32 << 29).wrapping_sub(srdhm(h, x));
        x = x.wrapping_add(sat_mul_pot(srdhm(x, one_minus), 2));
    }
    x
}

/// `1 / (1 + a)` for `a` in `[0, 1)`, Q0.31.
pub fn one_over_one_plus_x_for_x_in_0_1(a: i32) -> i32 {
    sat_mul_pot(one_over_one_plus_x_q2(a), 1)
}

/// `(1 − a) / (1 + a)` for `a` in `[0, 1)`, Q0.31.
pub fn one_minus_x_over_one_plus_x_for_x_in_0_1(a: i32) -> i32 {
    sat_mul_pot(one_over_one_plus_x_q2(a).wrapping_sub(1 << 29), 2)
}

/// The logistic of Q4.27 `a`, Q0.31.
pub fn logistic_q4(a: i32) -> i32 {
    if a == 0 {
        return 1 << 30;
    }
    let p = one_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(
        a.wrapping_abs().wrapping_neg(),
        4,
    ));
    if a > 0 { p } else { i32::MAX.wrapping_sub(p) }
}

/// The tanh of Q4.27 `a` (read as Q5.26 by the exponential), Q0.31.
pub fn tanh_q4(a: i32) -> i32 {
    if a == 0 {
        return 0;
    }
    let t = one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(
        a.wrapping_abs().wrapping_neg(),
        5,
    ));
    if a < 0 { t.wrapping_neg() } else { t }
}

/// TFLite's `CalculateInputRadius(ib, ls, 31)`.
pub fn input_radius(ib: i32, left_shift: i32) -> i32 {
    let max = f64::from((1i32 << ib) - 1) * 2f64.powi(31 - ib) / 2f64.powi(left_shift);
    max.floor() as i32
}

/// LOGISTIC and TANH's input scaling (`logistic_common.cc`): `frexp(s · 2^27)` with the fraction
/// rounded to Q31 (no renormalisation), and the input radius.
pub fn logistic_params(s_in: f32) -> (QuantizedMultiplier, i32) {
    let v = f64::from(s_in) * f64::from(1u32 << 27);
    let q = quantize_multiplier(v);
    // QuantizeMultiplier renormalises a fraction that rounds to 1.0; frexp-and-round does not:
    // both give the same product, so the table agrees either way except at that one multiplier.
    let (m, ls) = frexp_q31(v).unwrap_or((q.significand, q.shift));
    (
        QuantizedMultiplier {
            significand: m,
            shift: ls,
        },
        input_radius(4, ls),
    )
}

/// `frexp(v)` with the fraction as `round(q · 2^31)`, when that fits an i32.
fn frexp_q31(v: f64) -> Option<(i32, i32)> {
    if !(v.is_finite() && v > 0.0) {
        return None;
    }
    let e = v.log2().floor() as i32 + 1;
    let mut q = v / 2f64.powi(e);
    let mut e = e;
    // Guard log2's rounding at powers of two.
    if q >= 1.0 {
        q /= 2.0;
        e += 1;
    } else if q < 0.5 {
        q *= 2.0;
        e -= 1;
    }
    let m = (q * 2f64.powi(31)).round();
    (m < 2f64.powi(31)).then_some((m as i32, e))
}

/// int8 LOGISTIC of `q` (`reference_integer_ops::Logistic`; the output is Q0.8 with zero point
/// −128 whatever the tensor says).
pub fn logistic_i8(q: i32, z_in: i32, m: QuantizedMultiplier, radius: i32) -> i32 {
    let d = q - z_in;
    if d <= -radius {
        return -128;
    }
    if d >= radius {
        return 127;
    }
    let a = multiply_by_quantized_multiplier(d, m);
    (rounding_divide_by_pot(logistic_q4(a), 23) - 128).clamp(-128, 127)
}

/// int8 TANH of `q` (the output is Q0.7 with zero point 0 whatever the tensor says).
pub fn tanh_i8(q: i32, z_in: i32, m: QuantizedMultiplier, radius: i32) -> i32 {
    let d = q - z_in;
    if d <= -radius {
        return -128;
    }
    if d >= radius {
        return 127;
    }
    let a = multiply_by_quantized_multiplier(d, m);
    rounding_divide_by_pot(tanh_q4(a), 24).clamp(-128, 127)
}

/// SOFTMAX's input scaling (`PreprocessSoftmaxScaling` with 5 integer bits): the multiplier and
/// left shift of `beta · s_in`, and the smallest difference from the row's maximum that counts.
pub fn softmax_params(beta: f32, s_in: f32) -> (QuantizedMultiplier, i32) {
    /// gemmlowp's `kScaledDiffIntegerBits`.
    const IB: i32 = 5;
    let real = (f64::from(beta) * f64::from(s_in) * 2f64.powi(31 - IB)).min(f64::from(i32::MAX));
    let m = quantize_multiplier(real);
    let diff_min = -input_radius(IB, m.shift);
    (m, diff_min)
}

/// SOFTMAX's exponential of difference `d ≤ 0` from the row's maximum, Q0.31 (0 below
/// `diff_min`).
pub fn softmax_exp(d: i32, m: QuantizedMultiplier, diff_min: i32) -> i32 {
    if d < diff_min {
        return 0;
    }
    let rescaled = srdhm(d.wrapping_shl(m.shift.max(0) as u32), m.significand);
    exp_on_negative_values(rescaled, 5)
}

/// int16 `SaturatingRoundingDoublingHighMul`.
fn srdhm16(a: i16, b: i16) -> i16 {
    if a == i16::MIN && b == i16::MIN {
        return i16::MAX;
    }
    let ab = i32::from(a) * i32::from(b);
    let nudge = if ab >= 0 { 1 << 14 } else { 1 - (1 << 14) };
    ((ab + nudge) / (1 << 15)) as i16
}

/// int16 `RoundingDivideByPOT`.
fn rdbpot16(x: i16, e: i32) -> i16 {
    rounding_divide_by_pot(i32::from(x), e) as i16
}

/// `DownScaleInt32ToInt16Multiplier`.
fn down_scale_16(m: i32) -> i16 {
    if m >= 0x7FFF_7FFF {
        i16::MAX
    } else {
        ((m + (1 << 15)) >> 16) as i16
    }
}

/// int8 HARD_SWISH of `q` (`reference_ops::HardSwish`, int16 arithmetic, its final product
/// truncated).
pub fn hard_swish_i8(q: i32, z_in: i32, s_in: f32, s_out: f32, z_out: i32) -> i32 {
    let hires = s_in * (1.0 / 128.0);
    let o = quantize_multiplier(f64::from(hires) / f64::from(s_out));
    let r = quantize_multiplier(f64::from(hires) / (3.0 / 32768.0));
    let (om16, rm16) = (down_scale_16(o.significand), down_scale_16(r.significand));
    let v = (q - z_in) as i16;
    let hi = v.wrapping_mul(128);
    let pre = srdhm16(hi, om16);
    let mut x = hi;
    if r.shift > 0 {
        // gemmlowp's saturating left shift of an int16 (in i64: any shift saturates, none wraps).
        x = (i64::from(x) << (r.shift - 1).min(40)).clamp(-32768, 32767) as i16;
    }
    x = srdhm16(x, rm16);
    if r.shift > 0 {
        x = (i32::from(x) * 2).clamp(-32768, 32767) as i16;
    }
    if r.shift < 0 {
        x = rdbpot16(x, -r.shift);
    }
    let x = ((i32::from(x) + 32768) >> 1) as i16;
    let p = if x == i16::MIN && pre == i16::MIN {
        i16::MAX
    } else {
        ((i32::from(x) * i32::from(pre)) / (1 << 15)) as i16
    };
    (i32::from(rdbpot16(p, (-o.shift).max(0))) + z_out).clamp(-128, 127)
}

/// int8 LEAKY_RELU of `q`.
pub fn leaky_relu_i8(q: i32, z_in: i32, s_in: f32, alpha: f32, s_out: f32, z_out: i32) -> i32 {
    let ma = quantize_multiplier(f64::from(s_in) * f64::from(alpha) / f64::from(s_out));
    let mi = quantize_multiplier(f64::from(s_in) / f64::from(s_out));
    let d = q - z_in;
    let v = if d >= 0 {
        multiply_by_quantized_multiplier(d, mi)
    } else if ma.significand < 0 {
        multiply_by_quantized_multiplier(
            d,
            QuantizedMultiplier {
                significand: ma.significand.wrapping_neg(),
                shift: ma.shift,
            },
        )
        .wrapping_neg()
    } else {
        multiply_by_quantized_multiplier(d, ma)
    };
    z_out.wrapping_add(v).clamp(-128, 127)
}

/// TFLite's `GetInvSqrtQuantizedMultiplierExp(input, −1)`: `1/√input` as a Q31 multiplier and
/// shift (Newton–Raphson in Q3.28, `common.h`).
fn inv_sqrt_multiplier(input: i32) -> QuantizedMultiplier {
    if input <= 1 {
        return QuantizedMultiplier {
            significand: i32::MAX,
            shift: 0,
        };
    }
    let mut input = input;
    let mut sh = 11;
    while input >= (1 << 29) {
        input /= 4;
        sh += 1;
    }
    let p = (input.leading_zeros() as i32 - 1) / 2 - 1;
    sh -= p;
    input = input.wrapping_shl((2 * p) as u32);
    let half = rounding_divide_by_pot(input >> 1, 1);
    let mut x = 1i32 << 28;
    /// 3/2 in Q3.28.
    const THREE_HALVES: i32 = 3 << 27;
    for _ in 0..5 {
        let x3 = sat_mul_pot(srdhm(srdhm(x, x), x), 6);
        x = sat_mul_pot(srdhm(THREE_HALVES, x).wrapping_sub(srdhm(half, x3)), 3);
    }
    /// √2 / 2 in Q0.31.
    const HALF_SQRT2: i32 = 1_518_500_250;
    x = srdhm(x, HALF_SQRT2);
    if sh < 0 {
        x = x.wrapping_shl((-sh) as u32);
        sh = 0;
    }
    QuantizedMultiplier {
        significand: x,
        shift: -sh,
    }
}

/// int8 RSQRT of `q` (`elementwise.cc`). TFLite Micro stops with an error on an input below the
/// zero point; a compiled model cannot, and gives −128 there.
pub fn rsqrt_i8(q: i32, z_in: i32, s_in: f32, s_out: f32, z_out: i32) -> i32 {
    let m = quantize_multiplier(1.0 / (f64::from(s_in).sqrt() * f64::from(s_out)));
    let v = q - z_in;
    if v < 0 {
        return -128;
    }
    if v == 0 {
        return 127;
    }
    let im = inv_sqrt_multiplier(v);
    let t = multiply_by_quantized_multiplier(
        1,
        QuantizedMultiplier {
            significand: im.significand,
            shift: im.shift + 20,
        },
    );
    let y = multiply_by_quantized_multiplier(
        t,
        QuantizedMultiplier {
            significand: m.significand,
            shift: m.shift - 20,
        },
    );
    y.wrapping_add(z_out).clamp(-128, 127)
}

/// int8 ABS of `q`: `|q − z_in|`, requantized when the scales differ.
pub fn abs_i8(q: i32, z_in: i32, s_in: f32, s_out: f32, z_out: i32) -> i32 {
    let mut v = (q - z_in).abs();
    if s_in != s_out {
        v = multiply_by_quantized_multiplier(
            v,
            quantize_multiplier(f64::from(s_in) / f64::from(s_out)),
        );
    }
    v.wrapping_add(z_out).clamp(-128, 127)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_and_reciprocal_are_close_to_their_real_values() {
        // exp(−x) for x in Q5.26 and 1/(1+a) in Q0.31, within a few units of the last place.
        for i in 0..200 {
            let x = -(i as f64) / 10.0;
            let raw = (x * 2f64.powi(26)) as i32;
            let e = f64::from(exp_on_negative_values(raw, 5)) / 2f64.powi(31);
            assert!((e - x.exp()).abs() < 1e-6, "exp({x}) = {e}");
        }
        for i in 0..100 {
            let a = i as f64 / 100.0;
            let raw = (a * 2f64.powi(31)) as i32;
            let r = f64::from(one_over_one_plus_x_for_x_in_0_1(raw)) / 2f64.powi(31);
            assert!((r - 1.0 / (1.0 + a)).abs() < 1e-6, "1/(1+{a}) = {r}");
        }
        assert_eq!(exp_on_negative_values(0, 5), i32::MAX);
        assert_eq!(logistic_q4(0), 1 << 30);
    }

    #[test]
    fn saturating_shifts_saturate() {
        assert_eq!(sat_mul_pot(1 << 29, 2), i32::MAX);
        assert_eq!(sat_mul_pot(-(1 << 29), 2), i32::MIN);
        assert_eq!(sat_mul_pot(3, 2), 12);
        assert_eq!(sat_mul_pot(-3, -1), -2);
    }
}
