//! `precision: f16` (`ir/precision.rs`, docs/precision.md): on `aarch64-a78` (`+fullfp16`) packed
//! dots multiply and sum in f16 (`fmla .8h`, `codegen/cpu/gemm_f16.rs`) and match the interpreter
//! run on the rounded module (operands rounded by `round-f16`) within the f16 sums' bound, under
//! qemu-aarch64; the examples stay within the documented bound of the f32 model; targets without
//! FP16 arithmetic multiply the rounded operands in f32 and match that reference to f32 accuracy,
//! with the roundings inline (no `__truncsfhf2`).

mod common;

use common::{
    EXAMPLES, case_inputs, check_close, default_options, random_inputs, rel_to_max, repo,
    run_compiled_with,
};
use std::fmt::Write as _;
use xla_aot::compile::{CompileOptions, compile_model, optimize};
use xla_aot::front::load_spec;
use xla_aot::interp::evaluate;
use xla_aot::ir::{Literal, Module, Precision};
use xla_aot::target::Target;
use xla_aot::util::rng::SplitMix64;

/// Largest error of compiled `f16` code against the interpreter on the rounded module, as a
/// fraction of the output's largest magnitude: the f16 block sums (16 steps, each rounding at
/// 2⁻¹¹ of the running sum). Measured 2026-12-02 under qemu: at most 8.7e-4 on these GEMMs, 1.1e-3
/// on the examples (mobilenet_block); about 4× that.
const KERNEL_BOUND: f64 = 5e-3;

/// Largest error of an example's `f16` outputs against the f32 model, as a fraction of the
/// output's largest magnitude (docs/precision.md, `driver/compare.rs` `COMPARE_ATOL_F16`):
/// measured at most 1.1e-3 (mobilenet_block), about 4× that.
const EXAMPLE_BOUND: f64 = 5e-3;

fn options() -> CompileOptions {
    CompileOptions {
        precision: Some(Precision::F16),
        ..default_options()
    }
}

fn a78() -> Target {
    Target::resolve("aarch64-a78").unwrap()
}

/// `y = relu(x · w + b)` (and a second layer when `n2 > 0`) as HLO text, `x` an `m × k` input,
/// the weights random normal scaled by 1/√fan-in.
fn dense(name: &str, (m, k, n, n2): (usize, usize, usize, usize), seed: u64) -> Module {
    let mut rng = SplitMix64(seed);
    let mut vals = |count: usize, fan_in: usize| {
        let s = 1.0 / (fan_in as f64).sqrt();
        (0..count)
            .map(|_| format!("{}", (rng.normal() * s) as f32))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut t = String::new();
    let _ = writeln!(t, "HloModule {name}\n\nENTRY %main {{");
    let _ = writeln!(t, "  %x = f32[{m},{k}]{{1,0}} parameter(0)");
    let _ = writeln!(
        t,
        "  %w = f32[{k},{n}]{{1,0}} constant({{{}}})",
        vals(k * n, k)
    );
    let _ = writeln!(t, "  %b = f32[{n}]{{0}} constant({{{}}})", vals(n, 1));
    let _ = writeln!(
        t,
        "  %d = f32[{m},{n}]{{1,0}} dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"
    );
    let _ = writeln!(
        t,
        "  %bb = f32[{m},{n}]{{1,0}} broadcast(%b), dimensions={{1}}"
    );
    let _ = writeln!(t, "  %s = f32[{m},{n}]{{1,0}} add(%d, %bb)");
    let _ = writeln!(t, "  %z = f32[] constant(0)");
    let _ = writeln!(
        t,
        "  %zb = f32[{m},{n}]{{1,0}} broadcast(%z), dimensions={{}}"
    );
    let _ = writeln!(t, "  %r = f32[{m},{n}]{{1,0}} maximum(%s, %zb)");
    let (out, y) = if n2 > 0 {
        let _ = writeln!(
            t,
            "  %w2 = f32[{n},{n2}]{{1,0}} constant({{{}}})",
            vals(n * n2, n)
        );
        let _ = writeln!(
            t,
            "  %y = f32[{m},{n2}]{{1,0}} dot(%r, %w2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"
        );
        (format!("f32[{m},{n2}]{{1,0}}"), "%y")
    } else {
        (format!("f32[{m},{n}]{{1,0}}"), "%r")
    };
    let _ = writeln!(t, "  ROOT %outputs = ({out}) tuple({y}), names={{y}}\n}}");
    xla_aot::ir::parse_module(&t).unwrap_or_else(|e| panic!("{name}: {e}\n{t}"))
}

/// The GEMM shapes of the bf16 kernel test: M = 1 and 3, K not a multiple of the f16 block,
/// N not a multiple of 8 (a lone `.4h` vector), several K-blocks and row tiles, and a hidden
/// layer rounded in its register epilogue.
#[test]
fn f16_products_match_the_rounded_reference_under_qemu() {
    let opts = options();
    let t = a78();
    let mut worst = 0f64;
    for (name, shape, seed) in [
        ("f16_gemv", (1, 301, 70, 0), 81),
        ("f16_gemm3", (3, 257, 45, 0), 82),
        ("f16_gemm_blocks", (37, 601, 70, 0), 83),
        ("f16_gemm_rows", (30, 64, 36, 0), 84),
        ("f16_two_layers", (3, 40, 64, 10), 85),
    ] {
        let m = dense(name, shape, seed);
        let ins = random_inputs(&m, 7);
        let rounded = optimize(&m, &opts).unwrap().module;
        let expected = evaluate(&rounded, &ins).unwrap();
        let f32_out = evaluate(&m, &ins).unwrap();
        let got = run_compiled_with(&m, &t, &ins, &format!("f16-{name}"), &opts);
        for ((g, e), f) in got.iter().zip(&expected).zip(&f32_out) {
            let err = rel_to_max(g, e);
            eprintln!(
                "{name}: f16 kernel vs rounded reference {err:.3e}, vs f32 {:.3e}, reference vs f32 {:.3e}",
                rel_to_max(g, f),
                rel_to_max(e, f)
            );
            worst = worst.max(err);
            assert!(
                err <= KERNEL_BOUND,
                "{name}: {err:.3e} > {KERNEL_BOUND:.0e}"
            );
        }
    }
    eprintln!("worst f16 kernel error: {worst:.3e} of the largest output");
}

/// The compiled aarch64-a78 GEMM multiplies halves with `fmla` on `.8h`; `aarch64-neon`
/// (Armv8.0, no FP16 arithmetic) and x86-64 multiply in f32, and round inline.
#[test]
fn f16_gemm_is_fmla_8h_on_a78_and_f32_fma_without_fullfp16() {
    let m = dense("f16_asm", (4, 64, 32, 0), 86);
    let mut opts = options();
    opts.codegen.assembly = true;
    let asm = |name: &str| {
        let art = compile_model(&m, &Target::resolve(name).unwrap(), &opts).unwrap();
        art.assembly.unwrap_or_default()
    };
    let fmla8h = |a: &str| {
        a.lines()
            .filter(|l| l.contains("fmla") && l.contains(".8h"))
            .count()
    };
    assert!(fmla8h(&asm("aarch64-a78")) > 0, "aarch64-a78: no fmla .8h");
    let neon = asm("aarch64-neon");
    assert_eq!(fmla8h(&neon), 0, "aarch64-neon has no FP16 arithmetic");
    assert!(neon.contains("fmla"), "aarch64-neon: no f32 fmla");
    for name in ["aarch64-neon", "x86_64", "x86_64-avx2"] {
        let a = asm(name);
        for call in ["__truncsfhf2", "__gnu_f2h_ieee", "__extendhfsf2"] {
            assert!(!a.contains(call), "{name}: calls {call}");
        }
    }
}

/// Without FP16 arithmetic the products are f32 FMAs on the rounded operands: the interpreter on
/// the rounded module to f32 accuracy, on x86-64 (F16C conversions and baseline integer code)
/// and aarch64-neon under qemu.
#[test]
fn f16_without_fullfp16_matches_the_rounded_reference() {
    let opts = options();
    let mut ts = vec![Target::resolve("x86_64").unwrap()];
    ts.extend(
        ["x86_64-avx512", "x86_64-avx2"]
            .iter()
            .map(|n| Target::resolve(n).unwrap())
            .filter(|t| t.runs_here())
            .take(1),
    );
    ts.push(Target::resolve("aarch64-neon").unwrap());
    for (name, shape, seed) in [
        ("f16_f32_gemm3", (3, 257, 45, 0), 87),
        ("f16_f32_two_layers", (3, 40, 64, 10), 88),
    ] {
        let m = dense(name, shape, seed);
        let ins = random_inputs(&m, 7);
        let rounded = optimize(&m, &opts).unwrap().module;
        let expected = evaluate(&rounded, &ins).unwrap();
        for t in &ts {
            let tag = format!("{name}-{}", t.name);
            let got = run_compiled_with(&m, t, &ins, &tag, &opts);
            for (g, e) in got.iter().zip(&expected) {
                check_close(g, e).unwrap_or_else(|msg| panic!("{tag}: {msg}"));
            }
        }
    }
}

/// The four examples with `precision: f16` on aarch64-a78 under qemu stay within the f16 bound of
/// the f32 interpreter.
#[test]
fn examples_with_f16_stay_within_the_bound_of_f32() {
    let opts = options();
    for ex in EXAMPLES {
        let dir = repo().join("examples").join(ex);
        let m = load_spec(&dir.join("model.yaml")).unwrap().module;
        let ins = case_inputs(&m, &dir.join("golden"));
        let f32_out = evaluate(&m, &ins).unwrap();
        let rounded = optimize(&m, &opts).unwrap().module;
        let expected = evaluate(&rounded, &ins).unwrap();
        let got = run_compiled_with(&m, &a78(), &ins, &format!("f16-{ex}"), &opts);
        for ((g, e), f) in got.iter().zip(&expected).zip(&f32_out) {
            let err = rel_to_max(g, f);
            eprintln!(
                "{ex} f16: {err:.3e} of the largest output against f32 (reference {:.3e}, kernel vs reference {:.3e})",
                rel_to_max(e, f),
                rel_to_max(g, e)
            );
            assert!(
                err <= EXAMPLE_BOUND,
                "{ex}: {err:.3e} > {EXAMPLE_BOUND:.0e}"
            );
        }
    }
}

/// `round-f16` compiled (scalar and vector, integer code on baseline x86-64, F16C or `fcvtn` where
/// the target converts) is the interpreter's rounding bit for bit: ties to even, halves'
/// subnormals and the smallest subnormal's half, 65504 and the overflow to infinity at 65520,
/// infinities and NaN.
#[test]
fn round_f16_is_exact_on_every_target() {
    let vals: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        -(1.0 + 2f32.powi(-11)),
        0.1,
        -2.5317,
        2f32.powi(-14),
        2f32.powi(-14) * 0.99,
        2f32.powi(-24),
        2f32.powi(-25),
        2f32.powi(-25) * 1.01,
        3.0 * 2f32.powi(-25),
        -1e-30,
        65504.0,
        65519.0,
        65520.0,
        -70000.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1.5e-5,
        12345.678,
        -0.33333334,
    ];
    let n = vals.len();
    let text = format!(
        "HloModule round_f16\n\nENTRY %main {{\n  \
         %x = f32[{n}]{{0}} parameter(0)\n  \
         %y = f32[{n}]{{0}} round-f16(%x)\n  \
         ROOT %outputs = (f32[{n}]{{0}}) tuple(%y), names={{y}}\n}}\n"
    );
    let m = xla_aot::ir::parse_module(&text).unwrap();
    let x = Literal {
        dtype: xla_aot::ir::DType::F32,
        dims: vec![n],
        data: xla_aot::ir::LiteralData::Dense(
            vals.iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        ),
    };
    let want: Vec<f32> = vals
        .iter()
        .map(|&v| xla_aot::ir::half::f16_to_f32(xla_aot::ir::half::f32_to_f16(v)))
        .collect();
    let reference = evaluate(&m, std::slice::from_ref(&x)).unwrap()[0]
        .to_f32_vec()
        .unwrap();
    let same = |a: &[f32]| {
        a.iter()
            .zip(&want)
            .all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
    };
    assert!(
        same(&reference),
        "interpreter: {reference:?}\nwant {want:?}"
    );
    let mut ts = vec![
        Target::resolve("x86_64").unwrap(),
        Target::resolve("aarch64-a78").unwrap(),
    ];
    ts.extend(
        ["x86_64-avx512", "x86_64-avx2"]
            .iter()
            .map(|n| Target::resolve(n).unwrap())
            .filter(|t| t.runs_here())
            .take(1),
    );
    for t in &ts {
        let got = run_compiled_with(
            &m,
            t,
            std::slice::from_ref(&x),
            &format!("round-f16-{}", t.name),
            &default_options(),
        );
        let got = got[0].to_f32_vec().unwrap();
        assert!(same(&got), "{}: {got:?}\nwant {want:?}", t.name);
    }
}

/// `aarch64-multi` with `precision: f16` under qemu: on an Armv8.2-A CPU with FP16 arithmetic
/// (`neoverse-n1`) the dispatcher runs the `dotprod` (aarch64-a78) variant, f16 sums within the
/// kernel bound; on an Armv8.0-A one (`cortex-a72`) the `neon` variant, f32 products of the
/// rounded operands, to f32 accuracy.
#[test]
fn aarch64_multi_runs_f16_sums_only_where_the_cpu_has_them() {
    let t = Target::resolve("aarch64-multi").unwrap();
    let m = dense("f16_multi", (3, 257, 45, 0), 89);
    let ins = random_inputs(&m, 7);
    let opts = options();
    let expected = evaluate(&optimize(&m, &opts).unwrap().module, &ins).unwrap();
    let plan = [
        (None, Some("neoverse-n1"), false),
        (None, Some("cortex-a72"), false),
    ];
    let runs = common::run_compiled_emulated(&m, &t, &ins, "f16-multi", &opts, &plan);
    let (ran, got) = &runs[0];
    assert_eq!(ran, "dotprod");
    let err = rel_to_max(&got.as_ref().unwrap()[0], &expected[0]);
    eprintln!("aarch64-multi dotprod (neoverse-n1): {err:.3e} of the largest output");
    assert!(err > 0.0 && err <= KERNEL_BOUND, "dotprod: {err:.3e}");
    let (ran, got) = &runs[1];
    assert_eq!(ran, "neon");
    check_close(&got.as_ref().unwrap()[0], &expected[0]).unwrap();
}
