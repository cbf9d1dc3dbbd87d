//! Inline math for generated code: `exp`, `log`, `tanh`, `erf`, `logistic`, `pow` in f32 without
//! libm (the libraries must link with nothing), as internal always-inline LLVM functions.
//!
//! Accuracy (relative error against a correctly rounded result, measured over 2^20 points per
//! function by `tests/compiled.rs::math_accuracy`; see docs/codegen.md):
//! - `exp`: Cephes `expf` polynomial after Cody–Waite range reduction, ≤ 2 ulp; results below
//!   2^-126 flush to zero; overflow gives +inf; NaN propagates.
//! - `log`: Cephes `logf` polynomial on the mantissa in [√½, √2), ≤ 2 ulp for normal and subnormal
//!   inputs; `log(0) = -inf`, `log(x<0) = NaN`, `log(inf) = inf`.
//! - `tanh`: odd polynomial for |x| < 0.625 (Cephes `tanhf`), `1 - 2/(e^{2|x|}+1)` above, ≤ 3 ulp.
//! - `erf`: Maclaurin series to x^21 for |x| < 1 (truncation < 2e-8 relative), Abramowitz & Stegun
//!   7.1.26 above (absolute error ≤ 1.5e-7, relative ≤ 1.8e-7 since erf ≥ 0.84 there).
//! - `logistic`: `1/(1+exp(-x))`; `pow(x, y)`: `exp(y·log|x|)` with the sign for integral `y`,
//!   `pow(x, 0) = 1`, NaN for a negative base with a non-integral exponent.

use inkwell::AddressSpace;
use inkwell::FloatPredicate;
use inkwell::attributes::{Attribute, AttributeLoc};
use inkwell::builder::Builder;
use inkwell::context::Context;
use inkwell::module::{Linkage, Module};
use inkwell::values::{BasicValueEnum, FloatValue, FunctionValue, IntValue};

/// Which function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MathFn {
    Exp,
    Log,
    Tanh,
    Erf,
    Logistic,
    Pow,
    Sin,
    Cos,
}

impl MathFn {
    fn symbol(self) -> &'static str {
        match self {
            MathFn::Exp => "xla_aot.exp",
            MathFn::Log => "xla_aot.log",
            MathFn::Tanh => "xla_aot.tanh",
            MathFn::Erf => "xla_aot.erf",
            MathFn::Logistic => "xla_aot.logistic",
            MathFn::Pow => "xla_aot.pow",
            MathFn::Sin => "xla_aot.sin",
            MathFn::Cos => "xla_aot.cos",
        }
    }
}

/// Small builder helpers over f32 values.
struct F<'a, 'ctx> {
    ctx: &'ctx Context,
    b: &'a Builder<'ctx>,
}

impl<'ctx> F<'_, 'ctx> {
    fn c(&self, v: f64) -> FloatValue<'ctx> {
        self.ctx.f32_type().const_float(v)
    }
    fn ci(&self, v: u64) -> IntValue<'ctx> {
        self.ctx.i32_type().const_int(v, true)
    }
    fn add(&self, a: FloatValue<'ctx>, b: FloatValue<'ctx>) -> FloatValue<'ctx> {
        self.b.build_float_add(a, b, "").unwrap()
    }
    fn sub(&self, a: FloatValue<'ctx>, b: FloatValue<'ctx>) -> FloatValue<'ctx> {
        self.b.build_float_sub(a, b, "").unwrap()
    }
    fn mul(&self, a: FloatValue<'ctx>, b: FloatValue<'ctx>) -> FloatValue<'ctx> {
        self.b.build_float_mul(a, b, "").unwrap()
    }
    fn div(&self, a: FloatValue<'ctx>, b: FloatValue<'ctx>) -> FloatValue<'ctx> {
        self.b.build_float_div(a, b, "").unwrap()
    }
    fn cmp(&self, p: FloatPredicate, a: FloatValue<'ctx>, b: FloatValue<'ctx>) -> IntValue<'ctx> {
        self.b.build_float_compare(p, a, b, "").unwrap()
    }
    fn sel(&self, c: IntValue<'ctx>, a: FloatValue<'ctx>, b: FloatValue<'ctx>) -> FloatValue<'ctx> {
        self.b.build_select(c, a, b, "").unwrap().into_float_value()
    }
    fn is_nan(&self, a: FloatValue<'ctx>) -> IntValue<'ctx> {
        self.cmp(FloatPredicate::UNO, a, a)
    }
    fn bits(&self, a: FloatValue<'ctx>) -> IntValue<'ctx> {
        self.b
            .build_bit_cast(a, self.ctx.i32_type(), "")
            .unwrap()
            .into_int_value()
    }
    fn f32_of_bits(&self, a: IntValue<'ctx>) -> FloatValue<'ctx> {
        self.b
            .build_bit_cast(a, self.ctx.f32_type(), "")
            .unwrap()
            .into_float_value()
    }
    fn abs(&self, a: FloatValue<'ctx>) -> FloatValue<'ctx> {
        let m = self
            .b
            .build_and(self.bits(a), self.ci(0x7fff_ffff), "")
            .unwrap();
        self.f32_of_bits(m)
    }
    /// `|v|` with the sign of `x`.
    fn with_sign_of(&self, v: FloatValue<'ctx>, x: FloatValue<'ctx>) -> FloatValue<'ctx> {
        let sign = self
            .b
            .build_and(self.bits(x), self.ci(0x8000_0000), "")
            .unwrap();
        self.f32_of_bits(self.b.build_or(self.bits(v), sign, "").unwrap())
    }

    /// Horner evaluation of `coeffs[0] + coeffs[1] x + ...` (coefficients low to high).
    fn poly(
        &self,
        x: FloatValue<'ctx>,
        coeffs: &[f64],
        fmuladd: FunctionValue<'ctx>,
    ) -> FloatValue<'ctx> {
        let mut acc = self.c(coeffs[coeffs.len() - 1]);
        for &k in coeffs[..coeffs.len() - 1].iter().rev() {
            acc = self.fma(acc, x, self.c(k), fmuladd);
        }
        acc
    }
    fn fma(
        &self,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
        c: FloatValue<'ctx>,
        fmuladd: FunctionValue<'ctx>,
    ) -> FloatValue<'ctx> {
        self.call(fmuladd, &[a, b, c])
    }
    fn call(&self, f: FunctionValue<'ctx>, args: &[FloatValue<'ctx>]) -> FloatValue<'ctx> {
        let a: Vec<BasicValueEnum<'ctx>> = args.iter().map(|&v| v.into()).collect();
        call_value(self.b, f, &a).into_float_value()
    }
}

/// Calls `f` (a function returning a value) with `args`.
pub fn call_value<'ctx>(
    b: &Builder<'ctx>,
    f: FunctionValue<'ctx>,
    args: &[BasicValueEnum<'ctx>],
) -> BasicValueEnum<'ctx> {
    let a: Vec<_> = args.iter().map(|&v| v.into()).collect();
    b.build_call(f, &a, "")
        .unwrap()
        .try_as_basic_value()
        .basic()
        .expect("the called function returns a value")
}

/// The declaration of `llvm.fmuladd.f32`.
pub fn fmuladd<'ctx>(ctx: &'ctx Context, m: &Module<'ctx>) -> FunctionValue<'ctx> {
    inkwell::intrinsics::Intrinsic::find("llvm.fmuladd")
        .expect("llvm.fmuladd exists")
        .get_declaration(m, &[ctx.f32_type().into()])
        .expect("f32 fmuladd")
}

/// The declaration of `llvm.fma.f32` (one rounding; an instruction where
/// `Target::has_fma`, else a libm call: `Emitter::fma_exact` decides).
pub fn fma<'ctx>(ctx: &'ctx Context, m: &Module<'ctx>) -> FunctionValue<'ctx> {
    inkwell::intrinsics::Intrinsic::find("llvm.fma")
        .expect("llvm.fma exists")
        .get_declaration(m, &[ctx.f32_type().into()])
        .expect("f32 fma")
}

/// The declaration of `llvm.sqrt.f32` (a hardware instruction on every target).
pub fn sqrt<'ctx>(ctx: &'ctx Context, m: &Module<'ctx>) -> FunctionValue<'ctx> {
    inkwell::intrinsics::Intrinsic::find("llvm.sqrt")
        .expect("llvm.sqrt exists")
        .get_declaration(m, &[ctx.f32_type().into()])
        .expect("f32 sqrt")
}

/// The declaration of `llvm.fabs.f32` (a sign-bit mask on every target).
pub fn fabs<'ctx>(ctx: &'ctx Context, m: &Module<'ctx>) -> FunctionValue<'ctx> {
    inkwell::intrinsics::Intrinsic::find("llvm.fabs")
        .expect("llvm.fabs exists")
        .get_declaration(m, &[ctx.f32_type().into()])
        .expect("f32 fabs")
}

/// Returns the internal function for `which`, defining it (and what it calls) on first use.
pub fn get<'ctx>(ctx: &'ctx Context, m: &Module<'ctx>, which: MathFn) -> FunctionValue<'ctx> {
    if let Some(f) = m.get_function(which.symbol()) {
        return f;
    }
    let f32t = ctx.f32_type();
    let ty = match which {
        MathFn::Pow => f32t.fn_type(&[f32t.into(), f32t.into()], false),
        _ => f32t.fn_type(&[f32t.into()], false),
    };
    // Dependencies first, so their definitions do not interleave with this one.
    let needs_exp = !matches!(which, MathFn::Exp | MathFn::Log | MathFn::Sin | MathFn::Cos);
    let exp = needs_exp.then(|| get(ctx, m, MathFn::Exp));
    let log = (which == MathFn::Pow).then(|| get(ctx, m, MathFn::Log));
    let f = m.add_function(which.symbol(), ty, Some(Linkage::Internal));
    for attr in ["alwaysinline", "nounwind", "readnone", "willreturn"] {
        f.add_attribute(
            AttributeLoc::Function,
            ctx.create_enum_attribute(Attribute::get_named_enum_kind_id(attr), 0),
        );
    }
    f.add_attribute(
        AttributeLoc::Function,
        ctx.create_string_attribute("no-builtins", ""),
    );
    let b = ctx.create_builder();
    b.position_at_end(ctx.append_basic_block(f, "entry"));
    let fm = fmuladd(ctx, m);
    let h = F { ctx, b: &b };
    let x = f.get_nth_param(0).unwrap().into_float_value();
    let r = match which {
        MathFn::Exp => emit_exp(&h, x, fm),
        MathFn::Log => emit_log(&h, x, fm),
        MathFn::Tanh => emit_tanh(&h, x, fm, exp.unwrap()),
        MathFn::Erf => emit_erf(&h, x, fm, exp.unwrap()),
        MathFn::Logistic => {
            let e = h.call(exp.unwrap(), &[h.sub(h.c(0.0), x)]);
            h.div(h.c(1.0), h.add(h.c(1.0), e))
        }
        MathFn::Pow => {
            let y = f.get_nth_param(1).unwrap().into_float_value();
            emit_pow(&h, x, y, exp.unwrap(), log.unwrap())
        }
        MathFn::Sin => emit_sin_cos(&h, x, fm, false),
        MathFn::Cos => emit_sin_cos(&h, x, fm, true),
    };
    b.build_return(Some(&r)).unwrap();
    let _ = AddressSpace::default();
    f
}

fn emit_exp<'ctx>(
    h: &F<'_, 'ctx>,
    x: FloatValue<'ctx>,
    fm: FunctionValue<'ctx>,
) -> FloatValue<'ctx> {
    // Clamp to where the result is a normal float or overflows: below -87.33654 the result would
    // be subnormal (flushed to zero), above 88.72284 it is +inf.
    let lo = h.c(-87.336_54);
    let hi = h.c(88.722_84);
    let xc = h.sel(h.cmp(FloatPredicate::OLT, x, lo), lo, x);
    let xc = h.sel(h.cmp(FloatPredicate::OGT, xc, hi), hi, xc);
    // n = round(x / ln 2) via fptosi of x·log2(e) ± 0.5.
    let t = h.mul(xc, h.c(std::f64::consts::LOG2_E));
    let half = h.sel(h.cmp(FloatPredicate::OLT, t, h.c(0.0)), h.c(-0.5), h.c(0.5));
    let n =
        h.b.build_float_to_signed_int(h.add(t, half), h.ctx.i32_type(), "")
            .unwrap();
    let nf =
        h.b.build_signed_int_to_float(n, h.ctx.f32_type(), "")
            .unwrap();
    // r = x - n ln2 in two steps (Cody–Waite): ln2 = C1 + C2, C1 exact in 9 bits.
    let r = h.fma(nf, h.c(-0.693_359_375), xc, fm);
    let r = h.fma(nf, h.c(2.121_944_4e-4), r, fm);
    // e^r on [-ln2/2, ln2/2] (Cephes expf).
    let p = h.poly(
        r,
        &[
            5.000_000_1e-1,
            1.666_666_5e-1,
            4.166_579_6e-2,
            8.333_452e-3,
            1.398_2e-3,
            1.987_569_1e-4,
        ],
        fm,
    );
    let r2 = h.mul(r, r);
    let er = h.add(h.fma(p, r2, r, fm), h.c(1.0));
    // 2^n for n in [-126, 128] as two factors 2^(n>>1) · 2^(n - n>>1), each a normal float.
    let pow2 = |k: IntValue<'ctx>| {
        let biased = h.b.build_int_add(k, h.ci(127), "").unwrap();
        h.f32_of_bits(h.b.build_left_shift(biased, h.ci(23), "").unwrap())
    };
    let na = h.b.build_right_shift(n, h.ci(1), true, "").unwrap();
    let nb = h.b.build_int_sub(n, na, "").unwrap();
    let res = h.mul(h.mul(er, pow2(na)), pow2(nb));
    let res = h.sel(h.cmp(FloatPredicate::OLT, x, lo), h.c(0.0), res);
    let res = h.sel(h.cmp(FloatPredicate::OGT, x, hi), h.c(f64::INFINITY), res);
    h.sel(h.is_nan(x), x, res)
}

fn emit_log<'ctx>(
    h: &F<'_, 'ctx>,
    x: FloatValue<'ctx>,
    fm: FunctionValue<'ctx>,
) -> FloatValue<'ctx> {
    // Subnormals: scale by 2^23 first.
    let small = h.cmp(FloatPredicate::OLT, x, h.c(1.175_494_4e-38));
    let xs = h.sel(small, h.mul(x, h.c(8_388_608.0)), x);
    let bias =
        h.b.build_select(small, h.ci(126 + 23), h.ci(126), "")
            .unwrap()
            .into_int_value();
    let bits = h.bits(xs);
    let exp_bits = h.b.build_right_shift(bits, h.ci(23), false, "").unwrap();
    let exp_bits = h.b.build_and(exp_bits, h.ci(0xff), "").unwrap();
    let e = h.b.build_int_sub(exp_bits, bias, "").unwrap();
    // Mantissa in [0.5, 1).
    let mbits = h.b.build_and(bits, h.ci(0x807f_ffff), "").unwrap();
    let m = h.f32_of_bits(h.b.build_or(mbits, h.ci(0x3f00_0000), "").unwrap());
    let ef =
        h.b.build_signed_int_to_float(e, h.ctx.f32_type(), "")
            .unwrap();
    let below = h.cmp(FloatPredicate::OLT, m, h.c(std::f64::consts::FRAC_1_SQRT_2));
    let ef = h.sel(below, h.sub(ef, h.c(1.0)), ef);
    let m = h.sel(below, h.sub(h.add(m, m), h.c(1.0)), h.sub(m, h.c(1.0)));
    let z = h.mul(m, m);
    let p = h.poly(
        m,
        &[
            3.333_333_1e-1,
            -2.499_999_4e-1,
            2.000_071_4e-1,
            -1.666_805_8e-1,
            1.424_932_3e-1,
            -1.242_014_1e-1,
            1.167_699_9e-1,
            -1.151_461e-1,
            7.037_683_6e-2,
        ],
        fm,
    );
    let y = h.mul(h.mul(p, m), z);
    let y = h.fma(ef, h.c(-2.121_944_4e-4), y, fm);
    let y = h.fma(z, h.c(-0.5), y, fm);
    let res = h.fma(ef, h.c(0.693_359_375), h.add(m, y), fm);
    // Special values.
    let res = h.sel(
        h.cmp(FloatPredicate::OEQ, x, h.c(0.0)),
        h.c(f64::NEG_INFINITY),
        res,
    );
    let res = h.sel(h.cmp(FloatPredicate::OLT, x, h.c(0.0)), h.c(f64::NAN), res);
    let res = h.sel(h.cmp(FloatPredicate::OEQ, x, h.c(f64::INFINITY)), x, res);
    h.sel(h.is_nan(x), x, res)
}

/// Largest |x| whose octant index `⌊|x|·4/π⌋` is computed in an i32 (past it the argument is
/// clamped: f32 spacing there is 128, so no result is meaningful anyway).
const SIN_COS_MAX_OCTANT: f64 = 1_073_741_824.0;

/// sin x or cos x (`cos`), Cephes' `sinf`/`cosf`: `x = j·π/4 + z` with `j` the even octant
/// nearest `|x|·4/π` and `z` in [-π/4, π/4] by a three-part Cody–Waite reduction (exact for
/// |x| < 8192, Cephes' stated range; larger arguments lose bits of `z`), then the sine or cosine
/// minimax polynomial of `z` by octant, with the octant's sign. NaN and ±∞ give NaN.
fn emit_sin_cos<'ctx>(
    h: &F<'_, 'ctx>,
    x: FloatValue<'ctx>,
    fm: FunctionValue<'ctx>,
    cos: bool,
) -> FloatValue<'ctx> {
    let i32t = h.ctx.i32_type();
    let ax = h.abs(x);
    let t = h.mul(ax, h.c(4.0 / std::f64::consts::PI));
    let t = h.sel(
        h.cmp(FloatPredicate::OLT, t, h.c(SIN_COS_MAX_OCTANT)),
        t,
        h.c(SIN_COS_MAX_OCTANT),
    );
    // j = ⌊t⌋ rounded up to even.
    let j = h.b.build_float_to_signed_int(t, i32t, "").unwrap();
    let j = h.b.build_int_add(j, h.ci(1), "").unwrap();
    let j = h.b.build_and(j, h.ci(!1u32 as u64), "").unwrap();
    let y =
        h.b.build_signed_int_to_float(j, h.ctx.f32_type(), "")
            .unwrap();
    // z = |x| − y·π/4 in three parts (DP1 and DP2 have few bits: y·DP1, y·DP2 are exact).
    let z = h.fma(y, h.c(-0.785_156_25), ax, fm);
    let z = h.fma(y, h.c(-2.418_756_484_985_351_6e-4), z, fm);
    let z = h.fma(y, h.c(-3.774_894_977_445_941e-8), z, fm);
    let zz = h.mul(z, z);
    let sin_z = {
        let p = h.poly(
            zz,
            &[-1.666_665_461_1e-1, 8.332_160_873_6e-3, -1.951_529_589_1e-4],
            fm,
        );
        h.fma(h.mul(p, zz), z, z, fm)
    };
    let cos_z = {
        let p = h.poly(
            zz,
            &[
                4.166_664_568_298_827e-2,
                -1.388_731_625_493_765e-3,
                2.443_315_711_809_948e-5,
            ],
            fm,
        );
        let r = h.fma(h.mul(p, zz), zz, h.mul(h.c(-0.5), zz), fm);
        h.add(r, h.c(1.0))
    };
    // Octant j mod 8 ∈ {0, 2, 4, 6}: quadrant q = j/2 mod 4. sin: q 0 → sin z, 1 → cos z,
    // 2 → −sin z, 3 → −cos z (then the sign of x); cos: q 0 → cos z, 1 → −sin z, 2 → −cos z,
    // 3 → sin z.
    let q = h.b.build_right_shift(j, h.ci(1), false, "").unwrap();
    let q = h.b.build_and(q, h.ci(3), "").unwrap();
    let q = if cos {
        h.b.build_int_add(q, h.ci(1), "").unwrap()
    } else {
        q
    };
    let odd = h.b.build_and(q, h.ci(1), "").unwrap();
    let odd =
        h.b.build_int_compare(inkwell::IntPredicate::NE, odd, h.ci(0), "")
            .unwrap();
    let v = h.sel(odd, cos_z, sin_z);
    let neg = h.b.build_and(q, h.ci(2), "").unwrap();
    let neg =
        h.b.build_int_compare(inkwell::IntPredicate::NE, neg, h.ci(0), "")
            .unwrap();
    let v = h.sel(neg, h.sub(h.c(0.0), v), v);
    // sin is odd: the sign of x; cos is even.
    let v = if cos {
        v
    } else {
        let negx = h.cmp(FloatPredicate::OLT, x, h.c(0.0));
        h.sel(negx, h.sub(h.c(0.0), v), v)
    };
    // NaN and ±∞ (|x| not finite) give NaN.
    let finite = h.cmp(FloatPredicate::OLT, ax, h.c(f64::INFINITY));
    h.sel(finite, v, h.c(f64::NAN))
}

fn emit_tanh<'ctx>(
    h: &F<'_, 'ctx>,
    x: FloatValue<'ctx>,
    fm: FunctionValue<'ctx>,
    exp: FunctionValue<'ctx>,
) -> FloatValue<'ctx> {
    let ax = h.abs(x);
    // Small |x|: x + x^3 P(x^2) (Cephes tanhf).
    let z = h.mul(x, x);
    let p = h.poly(
        z,
        &[
            -3.333_328_2e-1,
            1.333_144_2e-1,
            -5.373_971_6e-2,
            2.063_908_9e-2,
            -5.704_988_7e-3,
        ],
        fm,
    );
    let small = h.fma(h.mul(p, z), x, x, fm);
    // Large |x|: 1 - 2/(e^{2|x|} + 1), with the sign of x.
    let e = h.call(exp, &[h.add(ax, ax)]);
    let big = h.sub(h.c(1.0), h.div(h.c(2.0), h.add(e, h.c(1.0))));
    let big = h.with_sign_of(big, x);
    let r = h.sel(h.cmp(FloatPredicate::OLT, ax, h.c(0.625)), small, big);
    h.sel(h.is_nan(x), x, r)
}

fn emit_erf<'ctx>(
    h: &F<'_, 'ctx>,
    x: FloatValue<'ctx>,
    fm: FunctionValue<'ctx>,
    exp: FunctionValue<'ctx>,
) -> FloatValue<'ctx> {
    let ax = h.abs(x);
    // |x| < 1: erf(x) = 2/√π Σ (-1)^n x^(2n+1) / (n! (2n+1)), n = 0..=10.
    let two_over_sqrt_pi = 2.0 / std::f64::consts::PI.sqrt();
    let mut coeffs = Vec::new();
    let mut fact = 1.0f64;
    for n in 0..=10u32 {
        if n > 0 {
            fact *= n as f64;
        }
        let sign = if n % 2 == 0 { 1.0 } else { -1.0 };
        coeffs.push(sign * two_over_sqrt_pi / (fact * (2 * n + 1) as f64));
    }
    let z = h.mul(x, x);
    let small = h.mul(h.poly(z, &coeffs, fm), x);
    // |x| >= 1: Abramowitz & Stegun 7.1.26.
    let t = h.div(h.c(1.0), h.fma(ax, h.c(0.327_591_1), h.c(1.0), fm));
    let p = h.poly(
        t,
        &[
            0.254_829_592,
            -0.284_496_736,
            1.421_413_741,
            -1.453_152_027,
            1.061_405_429,
        ],
        fm,
    );
    let e = h.call(exp, &[h.sub(h.c(0.0), z)]);
    let big = h.sub(h.c(1.0), h.mul(h.mul(p, t), e));
    let big = h.with_sign_of(big, x);
    let r = h.sel(h.cmp(FloatPredicate::OLT, ax, h.c(1.0)), small, big);
    h.sel(h.is_nan(x), x, r)
}

fn emit_pow<'ctx>(
    h: &F<'_, 'ctx>,
    x: FloatValue<'ctx>,
    y: FloatValue<'ctx>,
    exp: FunctionValue<'ctx>,
    log: FunctionValue<'ctx>,
) -> FloatValue<'ctx> {
    let ax = h.abs(x);
    let r = h.call(exp, &[h.mul(y, h.call(log, &[ax]))]);
    // Integral exponent (|y| < 2^24 so the conversion is exact) and its parity.
    let yi =
        h.b.build_float_to_signed_int(y, h.ctx.i32_type(), "")
            .unwrap();
    let back =
        h.b.build_signed_int_to_float(yi, h.ctx.f32_type(), "")
            .unwrap();
    let small_y = h.cmp(FloatPredicate::OLT, h.abs(y), h.c(16_777_216.0));
    let integral =
        h.b.build_and(h.cmp(FloatPredicate::OEQ, back, y), small_y, "")
            .unwrap();
    let odd_bit = h.b.build_and(yi, h.ci(1), "").unwrap();
    let odd =
        h.b.build_int_compare(inkwell::IntPredicate::NE, odd_bit, h.ci(0), "")
            .unwrap();
    let odd = h.b.build_and(odd, integral, "").unwrap();
    let neg = h.sel(odd, h.sub(h.c(0.0), r), r);
    let neg = h.sel(integral, neg, h.c(f64::NAN));
    let r = h.sel(h.cmp(FloatPredicate::OLT, x, h.c(0.0)), neg, r);
    let r = h.sel(h.cmp(FloatPredicate::OEQ, y, h.c(0.0)), h.c(1.0), r);
    let any_nan = h.b.build_or(h.is_nan(x), h.is_nan(y), "").unwrap();
    let nan = h.add(x, y);
    let r = h.sel(any_nan, nan, r);
    // pow(x, 0) = 1 even for NaN x, as in C and numpy.
    h.sel(h.cmp(FloatPredicate::OEQ, y, h.c(0.0)), h.c(1.0), r)
}
