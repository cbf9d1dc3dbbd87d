//! Half-precision weights (`--precision f16-weights|bf16-weights`, `ir/precision.rs`) and bf16
//! products (`--precision bf16`): compiled code matches the interpreter run on the rounded module
//! on every CPU target we can run (the best x86-64 one here, baseline x86-64 whose f16 widening is
//! integer code, aarch64 under qemu), stays within the documented error of the f32 model, and
//! stores its packed weights in half the bytes.

mod common;

use common::{
    EXAMPLES, case_inputs, check_close, default_options, rel_to_max, repo, run_compiled_with,
};
use xla_aot::compile::{CompileOptions, compile_model, optimize};
use xla_aot::front::load_spec;
use xla_aot::ir::{Literal, Module, Precision};
use xla_aot::target::Target;

/// The largest error of an example's outputs against the f32 model, as a fraction of the output's
/// largest magnitude, that docs/precision.md states: bfloat16 keeps 8 significant bits (relative
/// rounding error ≤ 2⁻⁹ per weight), f16 11 (≤ 2⁻¹²). Errors of independent weights partly
/// cancel; the bounds are the per-weight rounding times 4, measured worst 2026-12-02: see
/// docs/precision.md.
fn bound(p: Precision) -> f64 {
    match p {
        Precision::Bf16Weights | Precision::Bf16 => 4.0 * 2f64.powi(-9),
        Precision::F16Weights => 4.0 * 2f64.powi(-12),
        Precision::F16 => 5e-3, // tests/precision_f16.rs
        Precision::F32 => 0.0,
        // Not run here: tests/quantize.rs checks int8 weights.
        Precision::Int8Weights | Precision::Int8WeightsPerTensor => 0.0,
    }
}

fn options(p: Precision) -> CompileOptions {
    CompileOptions {
        precision: Some(p),
        ..default_options()
    }
}

fn example(ex: &str) -> (Module, Vec<Literal>, Vec<Literal>) {
    let dir = repo().join("examples").join(ex);
    let m = load_spec(&dir.join("model.yaml")).unwrap().module;
    let inputs = case_inputs(&m, &dir.join("golden"));
    let f32_out = xla_aot::interp::evaluate(&m, &inputs).unwrap();
    (m, inputs, f32_out)
}

fn targets() -> Vec<Target> {
    let mut ts: Vec<Target> = ["x86_64-avx512-bf16", "x86_64-avx512", "x86_64-avx2"]
        .iter()
        .map(|n| Target::resolve(n).unwrap())
        .filter(|t| t.runs_here())
        .take(1)
        .collect();
    ts.push(Target::resolve("x86_64").unwrap());
    // Under qemu-aarch64, as tests/compiled.rs runs it (.ci/run installs it).
    ts.push(Target::resolve("aarch64-neon").unwrap());
    ts
}

#[test]
fn examples_match_the_rounded_reference_on_every_target() {
    for p in [
        Precision::Bf16Weights,
        Precision::F16Weights,
        Precision::Bf16,
    ] {
        let opts = options(p);
        for ex in EXAMPLES {
            let (m, inputs, f32_out) = example(ex);
            let rounded = optimize(&m, &opts).unwrap().module;
            assert_eq!(rounded.precision, p);
            let expected = xla_aot::interp::evaluate(&rounded, &inputs).unwrap();
            for (e, f) in expected.iter().zip(&f32_out) {
                let err = rel_to_max(e, f);
                eprintln!("{ex} {p}: reference error against f32 {err:.3e} of the largest output");
                assert!(err <= bound(p), "{ex} {p}: {err:.3e} > {:.3e}", bound(p));
            }
            for t in targets() {
                if t.name == "aarch64-neon" && !matches!(*ex, "mlp" | "simplenet") {
                    continue; // qemu is slow: the dot and convolution paths suffice there
                }
                let tag = format!("prec-{ex}-{p}-{}", t.name);
                let got = run_compiled_with(&m, &t, &inputs, &tag, &opts);
                for (g, e) in got.iter().zip(&expected) {
                    check_close(g, e).unwrap_or_else(|msg| panic!("{tag}: {msg}"));
                }
            }
        }
    }
}

/// The packed weights take 2 bytes: the mlp's archive (2.67 MB of f32 weights, all packed GEMM
/// panels) shrinks to at most 0.55 of its f32 size (issue 18's bar).
#[test]
fn half_weights_halve_the_archive() {
    let (m, _, _) = example("mlp");
    let t = Target::resolve("x86_64-avx512").unwrap();
    let size = |p: Precision| compile_model(&m, &t, &options(p)).unwrap().archive.len();
    let f32_size = size(Precision::F32);
    for p in [
        Precision::Bf16Weights,
        Precision::F16Weights,
        Precision::Bf16,
    ] {
        let ratio = size(p) as f64 / f32_size as f64;
        eprintln!("mlp {p}: archive {ratio:.3} of f32's ({f32_size} bytes)");
        assert!(ratio <= 0.55, "mlp {p}: archive {ratio:.3} of f32's");
    }
}

/// f16 widening uses the hardware conversion where the target has one and integer code where not;
/// neither calls a library routine (the objects stay freestanding).
#[test]
fn f16_widening_is_inline() {
    let (m, _, _) = example("mlp");
    for (name, want) in [
        ("x86_64-avx2", "vcvtph2ps"),
        ("aarch64-neon", "fcvtl"),
        ("x86_64", "cvtdq2ps"),
    ] {
        let t = Target::resolve(name).unwrap();
        let mut opts = options(Precision::F16Weights);
        opts.codegen.assembly = true;
        let art = compile_model(&m, &t, &opts).unwrap();
        let asm = art.assembly.as_deref().unwrap_or("");
        assert!(asm.contains(want), "{name}: no {want} in the assembly");
        for call in ["__extendhfsf2", "__gnu_h2f_ieee"] {
            assert!(!asm.contains(call), "{name}: calls {call}");
        }
    }
}
