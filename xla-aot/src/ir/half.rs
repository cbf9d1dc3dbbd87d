//! float16 and bfloat16 bit patterns ↔ f32 on the host: the reference for the C API's conversions
//! (`codegen/core/boundary.rs` computes the same bits) and for weights and `.npy` files.
//!
//! Contract: widening is exact (subnormals, infinities and NaN payloads included); narrowing
//! rounds to nearest even, float16 overflow gives infinity and NaN a quiet NaN.

/// IEEE half bits → f32, exactly (subnormals, infinities and NaN payloads included).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let em = (h as u32) & 0x7fff;
    let bits = if em >= 0x7c00 {
        0x7f80_0000 | ((em & 0x3ff) << 13)
    } else {
        // Shift into f32's field and rescale by 2^112: exact for normals and subnormals alike.
        (f32::from_bits(em << 13) * f32::from_bits(0x7780_0000)).to_bits()
    };
    f32::from_bits(sign | bits)
}

/// f32 → IEEE half bits, rounding to nearest even (overflow → infinity, NaN → quiet NaN).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let a = bits & 0x7fff_ffff;
    let h = if a > 0x7f80_0000 {
        0x7e00
    } else if a >= 0x4780_0000 {
        0x7c00 // 65520 and above round to infinity
    } else if a < 0x3880_0000 {
        // Subnormal or zero: adding 0.5 lets the f32 adder round at the half's last bit.
        let f = f32::from_bits(a) + 0.5;
        f.to_bits() - 0.5f32.to_bits()
    } else {
        let odd = (a >> 13) & 1;
        (a.wrapping_add(0xc800_0000u32).wrapping_add(0xfff + odd)) >> 13
    };
    (sign | h) as u16
}

/// bfloat16 bits → f32, exactly.
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// f32 → bfloat16 bits, rounding to nearest even (NaN → quiet NaN).
pub fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    (b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_round_trips_every_value() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "half {h:#x} = {f}");
            }
        }
    }

    #[test]
    fn half_rounds_to_nearest_even() {
        // 1 + 2^-11 lies halfway between 1 and the next half (1 + 2^-10): ties go to even (1).
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(-2f32.powi(-24)), 0x8001);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0x0000);
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
    }
}
