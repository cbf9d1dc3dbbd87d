//! The integer kernels (`codegen/cpu/gemm_i8.rs`, `cpu/conv/int8.rs`): products and
//! convolutions of int8 weights over activations that hold integers of one byte's range multiply
//! with `vpdpbusd` on AVX-512 VNNI, with `vpmaddwd` on other x86-64 (`x86_64-avx512`,
//! `x86_64-avx2`, `x86_64`), with `sdot` on aarch64 with dotprod (`aarch64-a78`) and with
//! `smull`/`sadalp` on baseline NEON (`aarch64-neon`), the aarch64 code run under `qemu-aarch64`.
//! On the shapes that stress the quad packing (K not a multiple of 4, several K-blocks, M = 1, partial panels, row blocks; channels not a multiple of 4, padding,
//! strides, dilation, groups, input staged from NCHW and from NHWC), with signed and unsigned
//! activation ranges, a register epilogue and unit or per-column scales, the compiled code
//! matches the reference interpreter, bit for bit where the f32 path is exact (unit scales), and
//! the `vpmaddwd` and aarch64 results equal x86 VNNI's bit for bit for any scales, with weights
//! in [−128, 127] and in [−127, 127] (which AVX2 multiplies with `vpmaddubsw` on signs instead);
//! `vpdpbusd` is in the code for VNNI targets only, `vpmaddwd` for the other x86-64 ones,
//! `vpmaddubsw` for AVX2 without −128 weights only, `sdot` for dotprod targets only.

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
fn model(name: &str, dims: (usize, usize, usize), zp: i32, unit: bool, epi: bool) -> Module {
    model_q(name, dims, zp, unit, epi, false)
}

/// [`model`] with int8 weights in [−127, 127] where `sym` (a symmetric quantizer's: no −128, what
/// AVX2's `vpmaddubsw` on signs needs), else in [−128, 127].
fn model_q(
    name: &str,
    (m, k, n): (usize, usize, usize),
    zp: i32,
    unit: bool,
    epi: bool,
    sym: bool,
) -> Module {
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
            let q = if sym {
                rng.below(255) as i32 - 127
            } else {
                rng.below(256) as i32 - 128
            };
            format!("{}", q as f32 * scales[i % n])
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

/// The x86-64 targets, VNNI first: `vpdpbusd`, then `vpmaddwd` on zmm (AVX-512BW), ymm (AVX2)
/// and xmm (SSE2), then the multi-ISA library (the three variants' code and their shared
/// weights; its dispatcher runs the best variant this CPU has).
const X86: [&str; 5] = [
    "x86_64-avx512-vnni",
    "x86_64-avx512",
    "x86_64-avx2",
    "x86_64",
    "x86_64-multi",
];

/// Runs `m` compiled for every [`X86`] target this CPU runs and checks each against the
/// reference: close always, bit for bit where `exact` (integer weights, sums below 2^24); and
/// every `vpmaddwd` result bit for bit against VNNI's for any scales (the same exact sums, rounded
/// once and scaled once), where this CPU runs VNNI.
fn check_x86(m: &Module, ins: &[Literal], exact: bool) {
    let expected = evaluate(m, ins).unwrap();
    let mut vnni: Option<Literal> = None;
    for name in X86 {
        let t = Target::resolve(name).unwrap();
        if !t.runs_here() {
            eprintln!("this CPU does not run {name}: its int8 kernels are compiled, not run");
            continue;
        }
        let tag = format!("int8-{}-{name}", m.name);
        let actual = run_compiled(m, &t, ins, &tag).remove(0);
        if let Err(msg) = check_close(&actual, &expected[0]) {
            panic!("{tag}: {msg}");
        }
        let n = expected[0].element_count();
        if exact {
            assert_eq!(
                same_bits(&actual, &expected[0]),
                n,
                "{tag}: not bit for bit"
            );
        }
        match &vnni {
            None => vnni = Some(actual),
            Some(v) => assert_eq!(same_bits(&actual, v), n, "{tag}: differs from VNNI"),
        }
    }
}

#[test]
fn x86_products_match_the_reference_and_vnni_bit_for_bit() {
    // Weights with −128 (`vpmaddwd` on AVX2) and without (`vpmaddubsw` on signs on AVX2).
    for sym in [false, true] {
        for &(name, dims, zp, unit, epi) in CASES {
            let m = model_q(&format!("{name}_{sym}"), dims, zp, unit, epi, sym);
            check_x86(&m, &input(&m, 5), unit);
        }
    }
}

#[test]
fn int8_products_pack_their_activations_into_the_arena_scratch() {
    // The quads of A go to per-task slices of the arena's kernel scratch (`gemm_pack.rs`), not
    // the stack, wherever the product multiplies quads: VNNI and both aarch64 kernels. With
    // VNNI (14-row tiles): 300 rows with K = 64 (16 quads a row, one K-block) are 22 row tiles,
    // split between at most 16 tasks, each slice a row block of all 22; 37 rows with K = 1100
    // (K-blocks of 512 k: 128 quads a row) are 3 row tiles, 3 tasks of one block of 3 tiles.
    let rows = model("i8_scratch_rows", (300, 64, 33), 0, false, false);
    let blocks = model("i8_scratch_blocks", (37, 1100, 45), 128, false, true);
    let vnni_bytes = [16 * (22 * 14 * 16) * 4, 3 * (3 * 14 * 128) * 4];
    for t in ["x86_64-avx512-vnni", "aarch64-a78", "aarch64-neon"] {
        let target = Target::resolve(t).unwrap();
        let opts = common::default_options();
        for (m, want) in [&rows, &blocks].into_iter().zip(vnni_bytes) {
            let art = compile_model(m, &target, &opts).unwrap();
            let (_, bytes) = art
                .plan
                .scratch
                .unwrap_or_else(|| panic!("{t} {}: no kernel scratch", m.name));
            if t == "x86_64-avx512-vnni" {
                assert_eq!(bytes, want, "{t} {}", m.name);
            }
        }
    }
    // The `vpmaddwd` kernels pack theirs the same way; the f32 kernel of a product whose data
    // operand is not integer-valued takes none.
    for t in ["x86_64-avx512", "x86_64-avx2", "x86_64"] {
        let target = Target::resolve(t).unwrap();
        let art = compile_model(&rows, &target, &common::default_options()).unwrap();
        assert!(art.plan.scratch.is_some(), "{t}: no kernel scratch");
        let art = compile_model(&float_model(), &target, &common::default_options()).unwrap();
        assert_eq!(art.plan.scratch, None, "{t}: a float product took scratch");
    }
    // Split between 3 threads through the hook (9.8 MFLOP, 22 row tiles: each task packs its
    // rows into its own slice), the product gives one thread's bits.
    let vnni = Target::resolve("x86_64-avx512-vnni").unwrap();
    if vnni.runs_here() {
        let m = model("i8_scratch_threads", (300, 256, 64), 3, false, true);
        assert!(common::hook_calls_with(&m, &vnni, 3, &common::default_options()) >= 1);
    } else {
        eprintln!("this CPU has no AVX-512 VNNI: the threaded int8 product is compiled, not run");
    }
}

/// Integer-valued weights [O, C/G, K, K] (`unit`) or int8 times one scale per output channel;
/// in [−127, 127] where `sym`, else in [−128, 127].
fn conv_weights(rng: &mut SplitMix64, dims: [usize; 4], unit: bool, sym: bool) -> String {
    let per: usize = dims[1..].iter().product();
    let v: Vec<String> = (0..dims[0] * per)
        .map(|i| {
            let s = if unit {
                1.0
            } else {
                0.01 + 0.001 * (i / per) as f32
            };
            let q = if sym {
                rng.below(255) as i32 - 127
            } else {
                rng.below(256) as i32 - 128
            };
            format!("{}", q as f32 * s)
        })
        .collect();
    v.join(", ")
}

/// `x` (NCHW input) → bytes (`clamp`, `convert`) − zp → conv1 (input staged from NCHW) → bytes
/// again → conv2 (input staged from the NHWC layout the pipeline gives conv1's result) → a float
/// 1×1 conv (keeps conv2's result internal): both integer convolutions take the int8 kernel.
#[allow(clippy::too_many_arguments)]
fn conv_model(
    name: &str,
    (c, h, w): (usize, usize, usize),
    (o1, k1, s1, p1): (usize, usize, usize, usize),
    (o2, k2, d2, g2): (usize, usize, usize, usize),
    zp: i32,
    (unit, sym): (bool, bool),
) -> Module {
    let mut rng = SplitMix64((c * 1000 + o1 * 10 + o2) as u64);
    let h1 = (h + 2 * p1 - k1) / s1 + 1;
    let w1 = (w + 2 * p1 - k1) / s1 + 1;
    let span2 = (k2 - 1) * d2;
    let (h2, w2) = (h1 + 2 - span2, w1 + 2 - span2);
    let mut t = String::new();
    let _ = writeln!(t, "HloModule {name}\n\nENTRY %main {{");
    let _ = writeln!(t, "  %x = f32[1,{c},{h},{w}]{{3,2,1,0}} parameter(0)");
    let _ = writeln!(t, "  %lo = f32[] constant(0)\n  %hi = f32[] constant(255)");
    let _ = writeln!(
        t,
        "  %cx = f32[1,{c},{h},{w}]{{3,2,1,0}} clamp(%lo, %x, %hi)"
    );
    let _ = writeln!(t, "  %ix = i32[1,{c},{h},{w}]{{3,2,1,0}} convert(%cx)");
    let _ = writeln!(t, "  %fx = f32[1,{c},{h},{w}]{{3,2,1,0}} convert(%ix)");
    let _ = writeln!(t, "  %z = f32[] constant({zp})");
    let _ = writeln!(
        t,
        "  %zx = f32[1,{c},{h},{w}]{{3,2,1,0}} broadcast(%z), dimensions={{}}"
    );
    let _ = writeln!(t, "  %a = f32[1,{c},{h},{w}]{{3,2,1,0}} subtract(%fx, %zx)");
    let w1v = conv_weights(&mut rng, [o1, c, k1, k1], unit, sym);
    let _ = writeln!(
        t,
        "  %w1 = f32[{o1},{c},{k1},{k1}]{{3,2,1,0}} constant({{{w1v}}})"
    );
    let _ = writeln!(
        t,
        "  %c1 = f32[1,{o1},{h1},{w1}]{{3,2,1,0}} convolution(%a, %w1), window={{size={k1}x{k1} stride={s1}x{s1} pad={p1}_{p1}x{p1}_{p1}}}, dim_labels=bf01_oi01->bf01"
    );
    let _ = writeln!(t, "  %q = f32[] constant(0.01)");
    let _ = writeln!(
        t,
        "  %qb = f32[1,{o1},{h1},{w1}]{{3,2,1,0}} broadcast(%q), dimensions={{}}"
    );
    let _ = writeln!(
        t,
        "  %m = f32[1,{o1},{h1},{w1}]{{3,2,1,0}} multiply(%c1, %qb)"
    );
    let _ = writeln!(
        t,
        "  %cm = f32[1,{o1},{h1},{w1}]{{3,2,1,0}} clamp(%lo, %m, %hi)"
    );
    let _ = writeln!(t, "  %im = i32[1,{o1},{h1},{w1}]{{3,2,1,0}} convert(%cm)");
    let _ = writeln!(t, "  %a2 = f32[1,{o1},{h1},{w1}]{{3,2,1,0}} convert(%im)");
    let w2v = conv_weights(&mut rng, [o2, o1 / g2, k2, k2], unit, sym);
    let _ = writeln!(
        t,
        "  %w2 = f32[{o2},{},{k2},{k2}]{{3,2,1,0}} constant({{{w2v}}})",
        o1 / g2
    );
    let _ = writeln!(
        t,
        "  %c2 = f32[1,{o2},{h2},{w2}]{{3,2,1,0}} convolution(%a2, %w2), window={{size={k2}x{k2} pad=1_1x1_1 rhs_dilate={d2}x{d2}}}, dim_labels=bf01_oi01->bf01, feature_group_count={g2}"
    );
    let w3v: Vec<String> = (0..8 * o2)
        .map(|i| format!("{}", ((i % 5) as f32 - 2.0) * 0.25))
        .collect();
    let _ = writeln!(
        t,
        "  %w3 = f32[8,{o2},1,1]{{3,2,1,0}} constant({{{}}})",
        w3v.join(", ")
    );
    let _ = writeln!(
        t,
        "  %c3 = f32[1,8,{h2},{w2}]{{3,2,1,0}} convolution(%c2, %w3), window={{size=1x1}}, dim_labels=bf01_oi01->bf01"
    );
    let _ = writeln!(
        t,
        "  ROOT %outputs = (f32[1,8,{h2},{w2}]{{3,2,1,0}}) tuple(%c3), names={{y}}\n}}"
    );
    parse_module(&t).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The convolution cases: both integer convolutions of each take the int8 kernel.
fn conv_cases() -> Vec<Module> {
    vec![
        // 3 channels (one quad, three bytes used), 3×3 stride 2 pad 1; then 32 → 48 dilated 3×3.
        conv_model(
            "i8_conv_rgb",
            (3, 17, 15),
            (32, 3, 2, 1),
            (48, 3, 2, 1),
            128,
            (false, false),
        ),
        // 16 channels 1×1; then grouped 3×3 (4 groups of 8 channels: quads of whole groups).
        conv_model(
            "i8_conv_groups",
            (16, 9, 11),
            (32, 1, 1, 0),
            (64, 3, 1, 4),
            0,
            (true, false),
        ),
        // 64 channels 3×3 (the vector staging path); partial panels (40 output channels); integer
        // weights (with scales, stride-1 3×3 kernels take Winograd instead).
        conv_model(
            "i8_conv_wide",
            (64, 8, 8),
            (64, 3, 1, 1),
            (40, 3, 1, 1),
            100,
            (true, false),
        ),
        // Weights without −128 (`vpmaddubsw` on signs on AVX2), scales, 1×1 and grouped 3×3.
        conv_model(
            "i8_conv_sym",
            (16, 9, 11),
            (32, 1, 1, 0),
            (64, 3, 1, 4),
            3,
            (false, true),
        ),
    ]
}

/// Whether the convolution case's weights are integers (unit scales: exact on every path).
fn integer_weights(m: &Module) -> bool {
    !matches!(m.name.as_str(), "i8_conv_rgb" | "i8_conv_sym")
}

#[test]
fn x86_convolutions_match_the_reference_and_vnni_bit_for_bit() {
    for m in &conv_cases() {
        for (name, instruction) in X86
            .into_iter()
            .zip(["vpdpbusd", "vpmaddwd", "vpmaddwd", "pmaddwd", "vpmaddwd"])
        {
            let asm = assembly(m, name);
            assert!(
                asm.matches(instruction).count() >= 2,
                "{}: the integer convolutions took no {instruction} on {name}",
                m.name
            );
        }
        // Integer weights (all but the first case): exact sums on every path.
        check_x86(m, &input(m, 9), integer_weights(m));
    }
}

/// The assembly of `m` compiled for the target named `name`.
fn assembly(m: &Module, name: &str) -> String {
    let mut opts = common::default_options();
    opts.codegen.assembly = true;
    let t = Target::resolve(name).unwrap();
    compile_model(m, &t, &opts)
        .unwrap()
        .assembly
        .unwrap_or_default()
}

/// A product whose data operand is not integer-valued (a parameter) by integer weights.
fn float_model() -> Module {
    let mut t = String::from("HloModule f\n\nENTRY %main {\n  %x = f32[8,130]{1,0} parameter(0)\n");
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
}

#[test]
fn vpdpbusd_is_in_the_code_of_vnni_targets_only_vpmaddwd_of_the_other_x86() {
    let m = model("i8_asm", (8, 130, 40), 128, false, false);
    let asm = |name: &str| assembly(&m, name);
    for name in ["x86_64-avx512-vnni", "x86_64-avx512-bf16"] {
        let a = asm(name);
        assert!(a.contains("vpdpbusd"), "{name}: no vpdpbusd");
        assert!(!a.contains("pmaddwd"), "{name} has vpmaddwd");
    }
    // `vpmaddwd` on the target's vectors: zmm with AVX-512BW, ymm with AVX2, xmm with SSE2; not
    // `vpmaddubsw` (on signs) with a −128 among the weights, where its i16 sums could saturate.
    for (name, reg) in [
        ("x86_64-avx512", "zmm"),
        ("x86_64-avx2", "ymm"),
        ("x86_64", "xmm"),
    ] {
        let a = asm(name);
        assert!(!a.contains("vpdpbusd"), "{name} has vpdpbusd");
        assert!(!a.contains("pmaddubsw"), "{name} has vpmaddubsw");
        assert!(
            a.lines().any(|l| l.contains("pmaddwd") && l.contains(reg)),
            "{name}: no pmaddwd on {reg}"
        );
    }
    // The multi-ISA library: its AVX-512 and AVX2 variants both multiply words.
    let multi = asm("x86_64-multi");
    for reg in ["zmm", "ymm"] {
        assert!(
            multi
                .lines()
                .any(|l| l.contains("vpmaddwd") && l.contains(reg)),
            "x86_64-multi: no vpmaddwd on {reg}"
        );
    }
    // A data operand that is not integer-valued keeps the f32 kernel.
    for name in ["x86_64-avx512-vnni", "x86_64-avx2"] {
        let a = assembly(&float_model(), name);
        assert!(
            !a.contains("vpdpbusd") && !a.contains("pmaddwd"),
            "{name}: a float data operand took the integer kernel"
        );
    }
}

#[test]
fn avx2_takes_vpmaddubsw_on_signs_where_no_weight_is_minus_128() {
    let sym = model_q("i8_asm_sym", (8, 130, 40), 128, false, false, true);
    let conv = conv_cases().pop().unwrap();
    for m in [&sym, &conv] {
        let a = assembly(m, "x86_64-avx2");
        for i in ["vpmaddubsw", "vpsignb", "vpabsb"] {
            assert!(a.contains(i), "{}: no {i} on x86_64-avx2", m.name);
        }
        // No `vpsignb` on zmm, no `psignb` in SSE2: those keep `vpmaddwd` on widened words.
        for name in ["x86_64-avx512", "x86_64"] {
            assert!(
                !assembly(m, name).contains("pmaddubsw"),
                "{}: {name}",
                m.name
            );
        }
    }
    // With a −128 among the weights AVX2 widens to words.
    let m = model("i8_asm_min", (8, 130, 40), 128, false, false);
    assert!(!assembly(&m, "x86_64-avx2").contains("pmaddubsw"));
}

/// The aarch64 targets, the instruction their int8 dots take and the CPU QEMU emulates for
/// them: `sdot` with dotprod; `smull`/`sadalp` on baseline NEON, run on an emulated Cortex-A72
/// (no dotprod, so a stray `sdot` would fault).
const AARCH64: [(&str, &str, Option<&str>); 2] = [
    ("aarch64-a78", "sdot", None),
    ("aarch64-neon", "sadalp", Some("cortex-a72")),
];

/// The x86 results the aarch64 ones are compared with: the first of [`X86`] this CPU runs (all
/// multiply int8 quads, VNNI or `vpmaddwd`: the same bits).
fn x86_reference() -> Option<Target> {
    X86.into_iter()
        .map(|n| Target::resolve(n).unwrap())
        .find(Target::runs_here)
}

/// How many elements of `a` and `b` have the same bits.
fn same_bits(a: &Literal, b: &Literal) -> usize {
    common::same_bits(&a.to_f32_vec().unwrap(), &b.to_f32_vec().unwrap())
}

/// Runs `m` compiled for the aarch64 target `name` under qemu (on `cpu`, or QEMU's default)
/// and checks it against the reference and x86: close always; bit for bit with the reference
/// where `exact` (integer weights, sums below 2^24), with x86's int8 kernels (VNNI or
/// `vpmaddwd`) always.
fn check_aarch64(m: &Module, ins: &[Literal], exact: bool, (name, cpu): (&str, Option<&str>)) {
    let t = Target::resolve(name).unwrap();
    let expected = evaluate(m, ins).unwrap();
    let tag = format!("int8-{}-{name}", m.name);
    let opts = common::default_options();
    let arm = common::run_compiled_emulated(m, &t, ins, &tag, &opts, &[(None, cpu, false)])
        .remove(0)
        .1
        .unwrap_or_else(|e| panic!("{tag}: {e}"));
    if let Err(msg) = check_close(&arm[0], &expected[0]) {
        panic!("{tag}: {msg}");
    }
    let n = expected[0].element_count();
    if exact {
        assert_eq!(
            same_bits(&arm[0], &expected[0]),
            n,
            "{tag}: not bit for bit"
        );
    }
    if let Some(x) = x86_reference() {
        let x86 = run_compiled(
            m,
            &x,
            ins,
            &format!("int8-{}-{name}-{}-ref", m.name, x.name),
        );
        let same = same_bits(&arm[0], &x86[0]);
        eprintln!("{tag}: {same} of {n} values have {}'s bits", x.name);
        // The int8 kernels all give an exact sum rounded once: the same bits for any scales.
        assert_eq!(same, n, "{tag}: differs from {}", x.name);
    }
}

#[test]
fn aarch64_products_match_the_reference_and_x86() {
    for &(name, dims, zp, unit, epi) in CASES {
        let m = model(name, dims, zp, unit, epi);
        for (target, _, cpu) in AARCH64 {
            check_aarch64(&m, &input(&m, 5), unit, (target, cpu));
        }
    }
}

#[test]
fn aarch64_convolutions_match_the_reference_and_x86() {
    for m in &conv_cases() {
        for (target, instruction, cpu) in AARCH64 {
            let asm = assembly(m, target);
            assert!(
                asm.matches(instruction).count() >= 2,
                "{}: the integer convolutions took no {instruction} on {target}",
                m.name
            );
            check_aarch64(m, &input(m, 9), integer_weights(m), (target, cpu));
        }
    }
}

#[test]
fn aarch64_int8_dots_are_sdot_with_dotprod_and_smull_sadalp_without() {
    let m = model("i8_asm_arm", (8, 130, 40), 128, false, false);
    let asm = |name: &str| assembly(&m, name);
    // aarch64-multi: its dotprod variant (aarch64-a78's code) has sdot, its baseline smull.
    for name in ["aarch64-a78", "aarch64-multi"] {
        assert!(asm(name).contains("sdot"), "{name}: no sdot");
    }
    for name in ["aarch64-neon", "aarch64-multi"] {
        let a = asm(name);
        assert!(
            a.contains("smull") && a.contains("sadalp"),
            "{name}: no smull/sadalp"
        );
    }
    assert!(
        !asm("aarch64-neon").contains("sdot"),
        "aarch64-neon has sdot"
    );
}

/// `aarch64-multi` under qemu: on a CPU with dotprod (`neoverse-n1`) the dispatcher runs the
/// `dotprod` variant (`sdot`), on one without (`cortex-a72`) the `neon` variant (`smull`/
/// `sadalp`); both give the reference's bits (integer weights: exact sums).
#[test]
fn aarch64_multi_runs_sdot_or_smull_by_the_cpu_with_the_same_bits() {
    let t = Target::resolve("aarch64-multi").unwrap();
    let m = model("i8_multi", (19, 515, 40), 121, true, true);
    let ins = input(&m, 5);
    let expected = evaluate(&m, &ins).unwrap();
    let plan = [
        (None, Some("neoverse-n1"), false),
        (None, Some("cortex-a72"), false),
    ];
    let opts = common::default_options();
    let runs = common::run_compiled_emulated(&m, &t, &ins, "int8-multi", &opts, &plan);
    for ((ran, got), want) in runs.iter().zip(["dotprod", "neon"]) {
        assert_eq!(ran, want);
        let got = got.as_ref().unwrap_or_else(|e| panic!("{want}: {e}"));
        assert_eq!(
            same_bits(&got[0], &expected[0]),
            expected[0].element_count(),
            "aarch64-multi {want}: not bit for bit"
        );
    }
}
