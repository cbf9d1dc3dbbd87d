//! `run --compare`: how far the compiled outputs are from the reference interpreter's, and
//! whether that is a mismatch.
//!
//! Contract: [`compare`] reports the largest absolute and relative error of one output and counts
//! the elements that mismatch: a NaN on one side only, an infinity on one side or of the other
//! sign, an integer or boolean that differs at all, or a float further from the reference than
//! [`COMPARE_ATOL`] of the output's largest finite magnitude plus [`COMPARE_RTOL`] of the element.
//! Any mismatching element makes `run --compare` exit non-zero.

use crate::ir::Literal;

/// Absolute tolerance, as a fraction of the largest finite reference magnitude of the output:
/// compiled code reassociates sums (vectorised dot products, split reductions), uses polynomial
/// `exp`/`tanh` within a few ulps, and Winograd F(4×4, 3×3) convolutions. Measured (2026-12-02)
/// on the examples (mlp, mobilenet_block, simplenet, tiny_transformer, tiny_lm) and the light
/// squeezenet: max abs error ≤ 1.7e-6, max rel error ≤ 1.2e-4; 1e-3 of the output's scale keeps
/// a wide margin while a real miscompilation (a wrong element, a NaN) is far above it.
pub const COMPARE_ATOL: f64 = 1e-3;
/// Relative tolerance per element, on top of [`COMPARE_ATOL`] (large elements carry errors
/// proportional to their size).
pub const COMPARE_RTOL: f64 = 1e-3;

/// Absolute tolerance of `run --compare --precision bf16-weights` (against the f32 interpreter), as
/// a fraction of the output's largest finite magnitude: bfloat16 weights carry a relative rounding
/// error up to 2⁻⁹ ≈ 2e-3 each; measured 2026-12-02 on the four examples: at most 2.7e-3 of the
/// largest output (mobilenet_block). docs/precision.md has the figures.
pub const COMPARE_ATOL_BF16_WEIGHTS: f64 = 1e-2;
/// The same for `f16-weights` (2⁻¹² ≈ 2.4e-4 per weight; measured at most 4.0e-4, the mlp).
pub const COMPARE_ATOL_F16_WEIGHTS: f64 = 2e-3;

/// The same for `bf16` (both operands of every product rounded to bfloat16, 2⁻⁹ each; f32
/// accumulation): measured 2026-12-02 on the four examples' golden inputs: at most 3.3e-3 of the
/// largest output (mobilenet_block), at most 1.6× what bf16 weights alone give; docs/precision.md
/// has the figures.
pub const COMPARE_ATOL_BF16: f64 = 1e-2;

/// The same for `f16` (both operands rounded to IEEE half, 2⁻¹² each; on targets with FP16
/// arithmetic packed dots also sum in f16 within blocks of `ir::F16_K_BLOCK` k, 2⁻¹¹ of the
/// running sum per step): measured 2026-12-02 on the four examples' golden inputs on aarch64-a78
/// under qemu: at most 1.1e-3 of the largest output (mobilenet_block); docs/precision.md.
pub const COMPARE_ATOL_F16: f64 = 5e-3;

/// The same for `int8-weights` and `int8-weights-per-tensor` (each weight within half a step,
/// `max|w| / 254`, of its channel's or tensor's largest magnitude, the error relative to the
/// weight unbounded for small weights): measured 2026-12-02 on the four examples' golden inputs:
/// at most 1.3e-2 of the largest output (the mlp; simplenet 5.3e-3, tiny_transformer 5.4e-3,
/// mobilenet_block 3.2e-3), docs/quantization.md.
pub const COMPARE_ATOL_INT8_WEIGHTS: f64 = 5e-2;

/// The tolerance `run --compare` applies to compiled code built with weight precision `p`: the
/// absolute one as a fraction of the output's largest magnitude, and the relative one.
pub fn tolerance(p: crate::ir::Precision) -> (f64, f64) {
    match p {
        crate::ir::Precision::F32 => (COMPARE_ATOL, COMPARE_RTOL),
        crate::ir::Precision::Bf16Weights => (COMPARE_ATOL_BF16_WEIGHTS, COMPARE_RTOL),
        crate::ir::Precision::F16Weights => (COMPARE_ATOL_F16_WEIGHTS, COMPARE_RTOL),
        crate::ir::Precision::Bf16 => (COMPARE_ATOL_BF16, COMPARE_RTOL),
        crate::ir::Precision::F16 => (COMPARE_ATOL_F16, COMPARE_RTOL),
        crate::ir::Precision::Int8Weights | crate::ir::Precision::Int8WeightsPerTensor => {
            (COMPARE_ATOL_INT8_WEIGHTS, COMPARE_RTOL)
        }
    }
}

/// The difference between one compiled output and its reference.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    /// The tolerance applied: absolute (of the largest magnitude) and relative.
    pub tolerance: (f64, f64),
    pub max_abs: f64,
    pub max_rel: f64,
    /// Elements NaN on one side only.
    pub nan_mismatches: usize,
    /// All elements out of tolerance, NaN ones included.
    pub mismatches: usize,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "max abs error {:.3e}, max rel error {:.3e} (elements above 1e-3 of the largest)",
            self.max_abs, self.max_rel
        )?;
        if self.nan_mismatches > 0 {
            write!(f, ", {} NaN mismatches", self.nan_mismatches)?;
        }
        if self.mismatches > 0 {
            write!(
                f,
                "; MISMATCH: {} element(s) outside {:e} of the largest + {:e} relative",
                self.mismatches, self.tolerance.0, self.tolerance.1
            )?;
        }
        Ok(())
    }
}

/// Compares `compiled` with `reference` (same shape) within [`COMPARE_ATOL`] and [`COMPARE_RTOL`].
pub fn compare(compiled: &Literal, reference: &Literal) -> Difference {
    compare_within(compiled, reference, (COMPARE_ATOL, COMPARE_RTOL))
}

/// [`compare`] within `tolerance` (absolute as a fraction of the largest magnitude, relative).
pub fn compare_within(
    compiled: &Literal,
    reference: &Literal,
    tolerance: (f64, f64),
) -> Difference {
    let exact = !reference.dtype.is_float();
    let (c, r) = (compiled.to_f64_vec(), reference.to_f64_vec());
    let scale = r
        .iter()
        .filter(|x| x.is_finite())
        .fold(0.0f64, |m, x| m.max(x.abs()));
    let mut d = Difference {
        tolerance,
        max_abs: 0.0,
        max_rel: 0.0,
        nan_mismatches: 0,
        mismatches: c.len().abs_diff(r.len()),
    };
    for (&a, &b) in c.iter().zip(&r) {
        if a.is_nan() || b.is_nan() {
            let one_sided = usize::from(a.is_nan() != b.is_nan());
            d.nan_mismatches += one_sided;
            d.mismatches += one_sided;
            continue;
        }
        if a.is_infinite() || b.is_infinite() {
            d.mismatches += usize::from(a != b);
            continue;
        }
        let e = (a - b).abs();
        d.max_abs = d.max_abs.max(e);
        if b.abs() > scale * 1e-3 {
            d.max_rel = d.max_rel.max(e / b.abs());
        }
        let tolerance = if exact {
            0.0
        } else {
            tolerance.0 * scale + tolerance.1 * b.abs()
        };
        d.mismatches += usize::from(e > tolerance);
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Literal {
        Literal::from_f32(vec![v.len()], v)
    }

    #[test]
    fn nan_on_one_side_and_large_errors_mismatch() {
        let r = f32s(&[1.0, 2.0, 3.0]);
        assert_eq!(compare(&f32s(&[1.0, 2.0, 3.000_01]), &r).mismatches, 0);
        let d = compare(&f32s(&[f32::NAN, 2.0, 3.5]), &r);
        assert_eq!((d.nan_mismatches, d.mismatches), (1, 2));
        assert!(
            d.to_string()
                .contains("1 NaN mismatches; MISMATCH: 2 element(s)")
        );
        let nan = f32s(&[f32::NAN]);
        assert_eq!(compare(&nan, &nan).mismatches, 0);
        assert_eq!(
            compare(&f32s(&[f32::INFINITY]), &f32s(&[1.0])).mismatches,
            1
        );
    }
}
