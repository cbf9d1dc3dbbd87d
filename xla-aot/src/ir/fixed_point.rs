//! TFLite's fixed-point requantization, the second rounding rule of quantized ops (the first is
//! ONNX's: a float scale, round half to even).
//!
//! Contract: these functions compute, on every input, exactly what TFLite Micro's reference
//! kernels compute (`tensorflow/lite/kernels/internal/common.h` and `quantization_util.cc`, with
//! `TFLITE_SINGLE_ROUNDING` off, its default, and gemmlowp's `fixedpoint.h`); CMSIS-NN's
//! `arm_nn_requantize` is the same arithmetic. A real multiplier `m = scale_in · scale_w /
//! scale_out` (TFLite forms it in double) becomes a Q31 significand and a power-of-two shift
//! ([`quantize_multiplier`]); an int32 accumulator `x` becomes
//! `rdbpot(srdhm(x · 2^left, M), right)` ([`multiply_by_quantized_multiplier`]): two roundings,
//! the first half up (toward +∞) at 2^-31, the second half away from zero at 2^-right. The
//! code generators implement the same function on int32 lanes; this is the definition they and
//! the reference interpreter are tested against.

/// A Q31 significand in `[2^30, 2^31)` (or 0) and a shift: `m ≈ significand · 2^(shift − 31)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantizedMultiplier {
    pub significand: i32,
    pub shift: i32,
}

/// TFLite's `QuantizeMultiplier`: `frexp(m)`, the fraction rounded to Q31 (half away from zero,
/// `std::round`), a fraction that rounds up to 1.0 renormalised, and a shift below −31 flushed
/// to zero (a multiplier under 2^-32 gives 0 for every int32 accumulator).
pub fn quantize_multiplier(m: f64) -> QuantizedMultiplier {
    if m == 0.0 || !m.is_finite() {
        return QuantizedMultiplier {
            significand: 0,
            shift: 0,
        };
    }
    let (fraction, mut shift) = frexp(m);
    let mut q = (fraction * (1u64 << 31) as f64).round() as i64;
    if q == 1i64 << 31 {
        q /= 2;
        shift += 1;
    }
    if shift < -31 {
        return QuantizedMultiplier {
            significand: 0,
            shift: 0,
        };
    }
    QuantizedMultiplier {
        significand: q as i32,
        shift,
    }
}

/// `(f, e)` with `m = f · 2^e`, `0.5 ≤ |f| < 1` (C's `frexp`), for finite non-zero `m`.
fn frexp(m: f64) -> (f64, i32) {
    let bits = m.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        // Subnormal: scale into the normal range first.
        let (f, e) = frexp(m * (1u64 << 54) as f64);
        return (f, e - 54);
    }
    let e = exp - 1022;
    let f = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    (f, e)
}

/// gemmlowp's `SaturatingRoundingDoublingHighMul`: `⌊(a · b + 2^30) / 2^31⌋` with C's division
/// toward zero after the nudge (so half rounds up for either sign), saturated where
/// `a = b = i32::MIN`.
pub fn saturating_rounding_doubling_high_mul(a: i32, b: i32) -> i32 {
    if a == i32::MIN && b == i32::MIN {
        return i32::MAX;
    }
    let ab = i64::from(a) * i64::from(b);
    let nudge = if ab >= 0 {
        1i64 << 30
    } else {
        1 - (1i64 << 30)
    };
    ((ab + nudge) / (1i64 << 31)) as i32
}

/// gemmlowp's `RoundingDivideByPOT`: `x / 2^exponent` rounded half away from zero
/// (`0 ≤ exponent ≤ 31`).
pub fn rounding_divide_by_pot(x: i32, exponent: i32) -> i32 {
    let mask = ((1i64 << exponent) - 1) as i32;
    let remainder = x & mask;
    let threshold = (mask >> 1) + i32::from(x < 0);
    (x >> exponent) + i32::from(remainder > threshold)
}

/// TFLite's `MultiplyByQuantizedMultiplier` (double rounding): `x · 2^max(shift, 0)` (wrapping
/// as TFLite's int32 multiply does, which its converter's multipliers never reach), the Q31
/// high product, then a rounding right shift by `max(−shift, 0)`. Shifts are clamped to
/// `[−31, 31]` (TFLite's are, for any multiplier `quantize_multiplier` gives).
pub fn multiply_by_quantized_multiplier(x: i32, m: QuantizedMultiplier) -> i32 {
    let left = m.shift.clamp(0, 31);
    let right = (-m.shift).clamp(0, 31);
    let shifted = x.wrapping_mul(1i32.wrapping_shl(left as u32));
    rounding_divide_by_pot(
        saturating_rounding_doubling_high_mul(shifted, m.significand),
        right,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact rational result of the double rounding, from i128 arithmetic: first
    /// `⌊(x·M + 2^30) / 2^31⌋` (half toward +∞), then half away from zero at 2^-right.
    fn exact(x: i32, m: QuantizedMultiplier) -> i32 {
        let left = m.shift.max(0);
        let right = (-m.shift).max(0);
        let p = i128::from(x) * (1i128 << left) * i128::from(m.significand);
        let first = (p + (1i128 << 30)).div_euclid(1i128 << 31);
        let d = 1i128 << right;
        let q = first.abs() / d;
        let r = first.abs() % d;
        let rounded = if 2 * r >= d { q + 1 } else { q };
        (if first < 0 { -rounded } else { rounded }) as i32
    }

    #[test]
    fn multipliers_are_tflites() {
        // Values QuantizeMultiplier gives (by hand from frexp and std::round).
        assert_eq!(
            quantize_multiplier(0.5),
            QuantizedMultiplier {
                significand: 1 << 30,
                shift: 0
            }
        );
        assert_eq!(
            quantize_multiplier(1.0),
            QuantizedMultiplier {
                significand: 1 << 30,
                shift: 1
            }
        );
        assert_eq!(
            quantize_multiplier(0.75),
            QuantizedMultiplier {
                significand: 3 << 29,
                shift: 0
            }
        );
        // A fraction that rounds up to 1.0 is renormalised: 1 − 2^-40 → 2^30, shift 1.
        assert_eq!(
            quantize_multiplier(1.0 - 2f64.powi(-40)),
            QuantizedMultiplier {
                significand: 1 << 30,
                shift: 1
            }
        );
        // Below 2^-32 the multiplier is flushed to zero.
        assert_eq!(quantize_multiplier(2f64.powi(-40)).significand, 0);
        // A typical conv: 0.025374 · 0.0041 / 0.023866.
        let m = quantize_multiplier(0.025374f32 as f64 * 0.0041f32 as f64 / 0.023866f32 as f64);
        assert!((1 << 30..i32::MAX).contains(&m.significand) && m.shift < 0);
        let back = f64::from(m.significand) * 2f64.powi(m.shift - 31);
        assert!(
            (back / (0.025374f32 as f64 * 0.0041f32 as f64 / 0.023866f32 as f64) - 1.0).abs()
                < 1e-9
        );
    }

    #[test]
    fn rounding_is_half_up_then_half_away_from_zero() {
        // srdhm: −0.5 → 0, 0.5 → 1, −1.5 → −1 (half toward +∞).
        assert_eq!(saturating_rounding_doubling_high_mul(-1, 1 << 30), 0);
        assert_eq!(saturating_rounding_doubling_high_mul(1, 1 << 30), 1);
        assert_eq!(saturating_rounding_doubling_high_mul(-3, 1 << 30), -1);
        assert_eq!(
            saturating_rounding_doubling_high_mul(i32::MIN, i32::MIN),
            i32::MAX
        );
        // rdbpot: ±0.5 → ±1, ±1.5 → ±2, −2.5 → −3.
        assert_eq!(rounding_divide_by_pot(1, 1), 1);
        assert_eq!(rounding_divide_by_pot(-1, 1), -1);
        assert_eq!(rounding_divide_by_pot(3, 1), 2);
        assert_eq!(rounding_divide_by_pot(-3, 1), -2);
        assert_eq!(rounding_divide_by_pot(-5, 1), -3);
        assert_eq!(rounding_divide_by_pot(-4, 2), -1);
        assert_eq!(rounding_divide_by_pot(7, 0), 7);
    }

    #[test]
    fn the_double_rounding_equals_its_exact_definition() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..200_000 {
            let r = next();
            // Accumulators of int8 convolutions and multipliers of 2^-20 .. 2.
            let x = (r as i32) >> (r >> 59);
            let m = quantize_multiplier(
                2f64.powf(-20.0 + 21.0 * ((r >> 32) as u32 as f64 / u32::MAX as f64)),
            );
            if m.shift > 0 && x.unsigned_abs() >= (1 << (31 - m.shift)) {
                continue; // TFLite's int32 left shift would overflow: never a converter's case.
            }
            assert_eq!(
                multiply_by_quantized_multiplier(x, m),
                exact(x, m),
                "x {x}, {m:?}"
            );
        }
    }
}
