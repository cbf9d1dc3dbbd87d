//! The integer GEMM (`codegen/cpu/gemm_i8.rs`): products of int8 weights and activations that
//! hold integers of one byte's range multiply with `vpdpbusd` on AVX-512 VNNI. On the shapes that
//! stress the quad packing (K not a multiple of 4, several K-blocks, M = 1, partial panels, row
//! blocks), with signed and unsigned activation ranges, a register epilogue and unit or
//! per-column scales, the compiled code matches the reference interpreter, bit for bit where the
//! f32 path is exact (unit scales); `vpdpbusd` is in the code for VNNI targets only.

mod common;

use common::{check_close, run_compiled};
use std::fmt::Write as _;
use xla_aot::compile::compile_model;
use xla_aot::interp::evaluate;
use xla_aot::ir::{Literal, Module, parse_module};
use xla_aot::target::Target;
use xla_aot::util::rng::SplitMix64;

/// A product `y = (clamp(x, 0, 255) → i32 → f32 − zp) · W (+ b, relu)` with `W` [K, N] int8
/// values times one scale per column (all 1 with `unit`): the form a quantized model's
/// dequantized activations and weights take.
fn model(name: &str, (m, k, n): (usize, usize, usize), zp: i32, unit: bool, epi: bool) -> Module {
    let mut rng = SplitMix64(k as u64 * 31 + n as u64);
    let scales: Vec<f32> = (0..n)
        .map(|_| {
            if unit {
                1.0
            } else {
                (0.002 + 0.01 * rng.unit()) as f32
            }
        })
        .collect();
    let w: Vec<String> = (0..k * n)
        .map(|i| {
            let q = (rng.below(256) as i32 - 128) as f32;
            format!("{}", q * scales[i % n])
        })
        .collect();
    let b: Vec<String> = (0..n)
        .map(|j| format!("{}", j as f32 * 0.5 - 7.0))
        .collect();
    let mut t = String::new();
    let _ = writeln!(t, "HloModule {name}\n\nENTRY %main {{");
    let _ = writeln!(t, "  %x = f32[{m},{k}]{{1,0}} parameter(0)");
    let _ = writeln!(t, "  %lo = f32[] constant(0)\n  %hi = f32[] constant(255)");
    let _ = writeln!(t, "  %c = f32[{m},{k}]{{1,0}} clamp(%lo, %x, %hi)");
    let _ = writeln!(t, "  %i = i32[{m},{k}]{{1,0}} convert(%c)");
    let _ = writeln!(t, "  %f = f32[{m},{k}]{{1,0}} convert(%i)");
    let _ = writeln!(t, "  %z = f32[] constant({zp})");
    let _ = writeln!(
        t,
        "  %zb = f32[{m},{k}]{{1,0}} broadcast(%z), dimensions={{}}"
    );
    let _ = writeln!(t, "  %a = f32[{m},{k}]{{1,0}} subtract(%f, %zb)");
    let _ = writeln!(
        t,
        "  %w = f32[{k},{n}]{{1,0}} constant({{{}}})",
        w.join(", ")
    );
    let _ = writeln!(
        t,
        "  %d = f32[{m},{n}]{{1,0}} dot(%a, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"
    );
    let out = if epi {
        let _ = writeln!(t, "  %b = f32[{n}]{{0}} constant({{{}}})", b.join(", "));
        let _ = writeln!(
            t,
            "  %bb = f32[{m},{n}]{{1,0}} broadcast(%b), dimensions={{1}}"
        );
        let _ = writeln!(t, "  %s = f32[{m},{n}]{{1,0}} add(%d, %bb)");
        let _ = writeln!(t, "  %zero = f32[] constant(0)");
        let _ = writeln!(
            t,
            "  %zz = f32[{m},{n}]{{1,0}} broadcast(%zero), dimensions={{}}"
        );
        let _ = writeln!(t, "  %r = f32[{m},{n}]{{1,0}} maximum(%s, %zz)");
        "%r"
    } else {
        "%d"
    };
    let _ = writeln!(
        t,
        "  ROOT %outputs = (f32[{m},{n}]{{1,0}}) tuple({out}), names={{y}}\n}}"
    );
    parse_module(&t).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Activations spread past both ends of [0, 255], so the clamp saturates some.
fn input(m: &Module, seed: u64) -> Vec<Literal> {
    let s = &m.entry.inst(m.entry.parameters()[0]).shape;
    let mut rng = SplitMix64(seed);
    let v: Vec<f32> = (0..s.element_count())
        .map(|_| (rng.unit() * 300.0 - 20.0) as f32)
        .collect();
    vec![Literal::from_f32(s.dims.clone(), &v)]
}

/// Name, (M, K, N), zero point, unit scales, bias + ReLU epilogue.
type Case = (&'static str, (usize, usize, usize), i32, bool, bool);

const CASES: &[Case] = &[
    ("i8_gemv", (1, 301, 70), 128, false, false),
    ("i8_gemm_blocks", (37, 1100, 45), 128, false, true),
    ("i8_gemm_rows", (300, 64, 33), 0, false, false),
    ("i8_gemm_unit", (19, 515, 40), 121, true, true),
];

#[test]
fn vnni_products_match_the_reference() {
    let vnni = Target::resolve("x86_64-avx512-vnni").unwrap();
    let mut ts = vec![Target::resolve("x86_64-avx512").unwrap()];
    if vnni.runs_here() {
        ts.push(vnni);
    } else {
        eprintln!("this CPU has no AVX-512 VNNI: vpdpbusd is compiled, not run");
    }
    ts.retain(Target::runs_here);
    for &(name, dims, zp, unit, epi) in CASES {
        let m = model(name, dims, zp, unit, epi);
        let ins = input(&m, 5);
        let expected = evaluate(&m, &ins).unwrap();
        for t in &ts {
            let tag = format!("int8-{name}-{}", t.name);
            let actual = run_compiled(&m, t, &ins, &tag);
            if let Err(msg) = check_close(&actual[0], &expected[0]) {
                panic!("{tag}: {msg}");
            }
            if unit {
                // Integer sums below 2^24: the f32 path is exact, and so is the integer one.
                assert_eq!(
                    actual[0].to_f32_vec(),
                    expected[0].to_f32_vec(),
                    "{tag}: not bit for bit"
                );
            }
        }
    }
}

#[test]
fn vpdpbusd_is_in_the_code_of_vnni_targets_only() {
    let m = model("i8_asm", (8, 130, 40), 128, false, false);
    let mut opts = common::default_options();
    opts.codegen.assembly = true;
    let asm = |name: &str| {
        let t = Target::resolve(name).unwrap();
        compile_model(&m, &t, &opts)
            .unwrap()
            .assembly
            .unwrap_or_default()
    };
    for name in ["x86_64-avx512-vnni", "x86_64-avx512-bf16"] {
        assert!(asm(name).contains("vpdpbusd"), "{name}: no vpdpbusd");
    }
    for name in ["x86_64-avx512", "x86_64-avx2"] {
        assert!(!asm(name).contains("vpdpbusd"), "{name} has vpdpbusd");
    }
    // A data operand that is not integer-valued keeps the f32 kernel.
    let float = {
        let mut t =
            String::from("HloModule f\n\nENTRY %main {\n  %x = f32[8,130]{1,0} parameter(0)\n");
        let w: Vec<String> = (0..130 * 40)
            .map(|i| format!("{}", (i % 7) as f32 - 3.0))
            .collect();
        let _ = writeln!(
            t,
            "  %w = f32[130,40]{{1,0}} constant({{{}}})",
            w.join(", ")
        );
        t.push_str("  %d = f32[8,40]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  ROOT %outputs = (f32[8,40]{1,0}) tuple(%d), names={y}\n}\n");
        parse_module(&t).unwrap()
    };
    let t = Target::resolve("x86_64-avx512-vnni").unwrap();
    let a = compile_model(&float, &t, &opts)
        .unwrap()
        .assembly
        .unwrap_or_default();
    assert!(
        !a.contains("vpdpbusd"),
        "a float data operand took vpdpbusd"
    );
}
