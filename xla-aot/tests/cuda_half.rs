//! Half precisions on CUDA targets (issue 18; `codegen/gpu/half.rs`, docs/precision.md): every
//! example compiles for `cuda-x86_64` (sm_80) and `jetson-orin` (sm_87, and sm_90) with `f16`,
//! `f16-weights`, `bf16-weights` and `bf16`; ptxas accepts the PTX; `f16` PTX sums its products
//! in f16 (`fma.rn.f16`, with `cvt.rn.f16.f32` and `cvt.f32.f16`), the `-weights` precisions widen
//! 16-bit weights (`cvt.f32.f16` for IEEE half) and the device arena holds them 2 bytes per
//! value. The GPU kernels' host emulation (`GridForm::Host`: the same kernel bodies over the
//! whole grid, on baseline x86-64 whose half conversions are integer code and on AVX2's F16C)
//! matches the interpreter on the rounded module: to f32 accuracy where the products are exact
//! in f32 (`f16-weights`, `bf16-weights`, `bf16`), within [`F16_SUMS_BOUND`] for `f16`'s f16 block
//! sums, on the examples and on element and tiled products with partial tiles and K not a
//! multiple of 16. `tests/cuda.rs` runs the same through the launcher and the fake driver.
//!
//! ptxas as for `tests/ptx.rs` (`XLA_AOT_PTXAS`, or the `nvidia-cuda-nvcc-cu12` wheel in `.venv`).

mod common;

use common::{
    EXAMPLES, case_inputs, check_close, default_options, random_inputs, rel_to_max, repo, scratch,
};
use std::fmt::Write as _;
use std::path::PathBuf;
use xla_aot::compile::{CompileOptions, compile_model, optimize};
use xla_aot::front::load_spec;
use xla_aot::interp::evaluate;
use xla_aot::ir::{Literal, Module, Precision};
use xla_aot::target::Target;
use xla_aot::util::rng::SplitMix64;

/// Largest error of `f16` GPU kernels against the interpreter on the rounded module, as a
/// fraction of the output's largest magnitude: the f16 block sums (16 steps, each rounding at
/// 2⁻¹¹ of the running sum), as on aarch64 (`tests/precision_f16.rs` `KERNEL_BOUND`, the same
/// sums). Measured 2026-12-02 in the host emulation: at most 1.1e-3 (see docs/precision.md).
const F16_SUMS_BOUND: f64 = 5e-3;

/// Largest error of an example's half-precision outputs against the f32 model, as a fraction of
/// the output's largest magnitude: `run --compare`'s bound per precision (`driver/compare.rs`,
/// docs/precision.md).
fn model_bound(p: Precision) -> f64 {
    xla_aot::driver::tolerance(p).0
}

/// The half precisions, in the order the tests report them.
const HALVES: [Precision; 4] = [
    Precision::F16,
    Precision::F16Weights,
    Precision::Bf16Weights,
    Precision::Bf16,
];

fn options(p: Precision) -> CompileOptions {
    CompileOptions {
        precision: Some(p),
        ..default_options()
    }
}

fn example(ex: &str) -> Module {
    load_spec(&repo().join("examples").join(ex).join("model.yaml"))
        .unwrap()
        .module
}

fn ptxas() -> PathBuf {
    if let Some(p) = std::env::var_os("XLA_AOT_PTXAS") {
        return PathBuf::from(p);
    }
    if let Ok(dirs) = std::fs::read_dir(repo().join(".venv/lib")) {
        for d in dirs.flatten() {
            let p = d.path().join("site-packages/nvidia/cuda_nvcc/bin/ptxas");
            if p.exists() {
                return p;
            }
        }
    }
    PathBuf::from("ptxas")
}

/// Assembles `ptx` for `sm` with ptxas, failing with its message.
fn assemble(ptx: &str, sm: &str, tag: &str) {
    let dir = scratch(&format!("cuda-half-{tag}-{sm}"));
    let file = dir.join("k.ptx");
    std::fs::write(&file, ptx).unwrap();
    let ptxas = ptxas();
    let out = std::process::Command::new(&ptxas)
        .arg(format!("-arch={sm}"))
        .arg(&file)
        .arg("-o")
        .arg(dir.join("k.cubin"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): python3 -m venv .venv && .venv/bin/pip install \
                 nvidia-cuda-nvcc-cu12, or set XLA_AOT_PTXAS",
                ptxas.display()
            )
        });
    assert!(
        out.status.success(),
        "{tag}: ptxas -arch={sm} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// How many lines of `ptx` hold instruction `op` (e.g. `fma.rn.f16`).
fn count(ptx: &str, op: &str) -> usize {
    ptx.lines()
        .filter(|l| l.trim_start().starts_with(op))
        .count()
}

#[test]
fn half_precisions_compile_for_cuda_targets_with_f16_ptx_arithmetic() {
    for ex in EXAMPLES {
        let m = example(ex);
        let t = Target::resolve("cuda-x86_64").unwrap();
        let f32_lib = compile_model(&m, &t, &default_options()).unwrap();
        let f32_weights = f32_lib.ptx.as_ref().unwrap().layout.weights.len();
        assert_eq!(count(&f32_lib.ptx.unwrap().ptx, "fma.rn.f16"), 0);
        for p in HALVES {
            let a = compile_model(&m, &t, &options(p))
                .unwrap_or_else(|e| panic!("{ex} {p} for cuda-x86_64: {e}"));
            let ptx = a.ptx.as_ref().unwrap();
            assemble(&ptx.ptx, &ptx.sm, &format!("{ex}-{p}"));
            let (fma16, widen, narrow) = (
                count(&ptx.ptx, "fma.rn.f16"),
                count(&ptx.ptx, "cvt.f32.f16"),
                count(&ptx.ptx, "cvt.rn.f16.f32"),
            );
            match p {
                Precision::F16 => {
                    assert!(fma16 > 0 && widen > 0, "{ex} {p}: no f16 sums\n{}", ptx.ptx);
                    // Activations are narrowed (exactly: rounded by round-f16 before); simplenet's
                    // convolutions read the model input, narrowed too.
                    assert!(narrow > 0, "{ex} {p}: no cvt.rn.f16.f32");
                }
                Precision::F16Weights => {
                    assert!(
                        fma16 == 0 && widen > 0,
                        "{ex} {p}: {fma16} fma.rn.f16, {widen} cvt.f32.f16"
                    );
                }
                _ => assert!(
                    !ptx.ptx.contains(".f16"),
                    "{ex} {p}: bfloat16 weights are widened by a shift, not as IEEE halves"
                ),
            }
            // Every weight the device arena holds is a dot's or a convolution's in these models
            // (biases are folded into output fusions as constants of their own: f32).
            let w = ptx.layout.weights.len();
            eprintln!(
                "{ex} {p}: device weights {w} bytes ({:.3} of f32), {fma16} fma.rn.f16, {widen} cvt.f32.f16, {narrow} cvt.rn.f16.f32",
                w as f64 / f32_weights as f64
            );
            if matches!(*ex, "mlp" | "tiny_transformer") {
                assert!(
                    (w as f64) <= 0.55 * f32_weights as f64,
                    "{ex} {p}: device weights {w} bytes, f32 {f32_weights}"
                );
            }
        }
        // Jetson Orin (sm_87, relabelled sm_86 code) with f16.
        let orin = Target::resolve("jetson-orin").unwrap();
        let a = compile_model(&m, &orin, &options(Precision::F16)).unwrap();
        let ptx = a.ptx.as_ref().unwrap();
        assert!(count(&ptx.ptx, "fma.rn.f16") > 0);
        assemble(&ptx.ptx, "sm_87", &format!("{ex}-orin"));
        // Hopper: the same code relabelled (`ptx::relabel`, ISA 7.8).
        let hopper = xla_aot::codegen::gpu::ptx::relabel(&ptx.ptx, "sm_90");
        assemble(&hopper, "sm_90", &format!("{ex}-hopper"));
    }
}

/// The host emulation of `m`'s GPU kernels with precision `p` on `t`, against the interpreter on
/// the rounded module (within [`F16_SUMS_BOUND`] for `f16`, to f32 accuracy otherwise) and the
/// f32 model ([`model_bound`]); returns the error against the rounded module (fraction of the
/// largest output).
fn check_grid(m: &Module, ins: &[Literal], p: Precision, t: &Target, tag: &str) -> f64 {
    let mut opts = options(p);
    opts.codegen.grid = true;
    let rounded = optimize(m, &opts).unwrap().module;
    let expected = evaluate(&rounded, ins).unwrap();
    let f32_out = evaluate(m, ins).unwrap();
    let got = common::run_compiled_with(m, t, ins, &format!("gridh-{tag}-{p}"), &opts);
    let mut worst = 0f64;
    for (i, ((g, e), f)) in got.iter().zip(&expected).zip(&f32_out).enumerate() {
        let err = rel_to_max(g, e);
        let vs_f32 = rel_to_max(g, f);
        eprintln!(
            "{tag} {p} on {}: output {i}: {err:.2e} of the largest output from the rounded reference, {vs_f32:.2e} from f32",
            t.name
        );
        assert!(
            vs_f32 <= model_bound(p),
            "{tag} {p} output {i}: {vs_f32:.3e} from the f32 model"
        );
        if p == Precision::F16 {
            assert!(
                err <= F16_SUMS_BOUND,
                "{tag} {p} output {i}: {err:.3e} > {F16_SUMS_BOUND:.0e}"
            );
        } else if let Err(msg) = check_close(g, e) {
            panic!("{tag} {p} output {i} on {}: {msg}", t.name);
        }
        worst = worst.max(err);
    }
    worst
}

#[test]
fn half_precision_grid_kernels_match_the_rounded_reference_on_the_examples() {
    let targets = [
        Target::resolve("x86_64").unwrap(),
        Target::resolve("x86_64-avx2").unwrap(),
    ];
    for ex in EXAMPLES {
        let m = example(ex);
        let ins = case_inputs(&m, &repo().join("examples").join(ex).join("golden"));
        let f32_out = evaluate(&m, &ins).unwrap();
        for p in HALVES {
            for t in &targets {
                check_grid(&m, &ins, p, t, ex);
            }
            // The rounded module itself stays within the precision's bound of the f32 model.
            let rounded = optimize(&m, &options(p)).unwrap().module;
            for (e, f) in evaluate(&rounded, &ins).unwrap().iter().zip(&f32_out) {
                let err = rel_to_max(e, f);
                assert!(err <= model_bound(p), "{ex} {p}: {err:.3e} from f32");
            }
        }
    }
}

/// `y = x · w + b` (then ReLU) as HLO text, `x` an `m × k` input, `w` random normal scaled by
/// 1/√k.
fn dense(name: &str, (m, k, n): (usize, usize, usize), seed: u64) -> Module {
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
    let _ = writeln!(
        t,
        "  ROOT %outputs = (f32[{m},{n}]{{1,0}}) tuple(%r), names={{y}}\n}}"
    );
    xla_aot::ir::parse_module(&t).unwrap_or_else(|e| panic!("{name}: {e}\n{t}"))
}

/// Element kernels (M = 1, 3: one thread per output) and tiled ones (M = 37, 30: 16×16 blocks,
/// partial tiles), K not a multiple of 16 (a partial last block) and K = 16·j.
#[test]
fn f16_gpu_products_match_the_rounded_reference_on_partial_tiles_and_blocks() {
    let t = Target::resolve("x86_64").unwrap();
    let mut worst = 0f64;
    for (name, shape, seed) in [
        ("h_gemv", (1, 301, 70), 91),
        ("h_gemm3", (3, 257, 45), 92),
        ("h_tiled", (37, 601, 45), 93),
        ("h_tiled16", (30, 64, 36), 94),
    ] {
        let m = dense(name, shape, seed);
        let ins = random_inputs(&m, 7);
        for p in HALVES {
            let err = check_grid(&m, &ins, p, &t, name);
            if p == Precision::F16 {
                worst = worst.max(err);
            }
        }
        // The tiled shapes are tiled on the device too (shared tiles, barriers, f16 sums).
        if shape.0 >= 16 {
            let orin = Target::resolve("jetson-orin").unwrap();
            let a = compile_model(&m, &orin, &options(Precision::F16)).unwrap();
            let ptx = &a.ptx.as_ref().unwrap().ptx;
            assert!(
                ptx.contains(".shared") && ptx.contains("bar.sync"),
                "{name}: not tiled"
            );
            assert!(
                count(ptx, "fma.rn.f16") >= 16,
                "{name}: the K-slice is not 16 fma.rn.f16"
            );
            assert!(
                count(ptx, "ld.shared.b16") > 0,
                "{name}: the tiles do not hold halves"
            );
            assemble(ptx, "sm_87", name);
        }
    }
    eprintln!("worst f16 GPU kernel error: {worst:.3e} of the largest output");
}

/// The finite non-negative halves as multiples of 2⁻⁴⁸ (every half is one exactly), by bit
/// pattern: increasing.
fn half_numerators() -> Vec<i128> {
    (0..0x7c00u16)
        .map(|h| (xla_aot::ir::half::f16_to_f32(h) as f64 * 2f64.powi(48)) as i128)
        .collect()
}

/// `n`·2⁻⁴⁸ rounded to the nearest half (ties to the even pattern, beyond 65520 to infinity),
/// as f32: IEEE `fma.rn.f16`'s rounding, computed from the exact value.
fn round_exact_to_f16(n: i128, table: &[i128]) -> f32 {
    let a = n.abs();
    let i = table.partition_point(|&v| v <= a) - 1;
    let pick = if i + 1 == table.len() {
        // Between 65504 and the overflow threshold 65520 (a tie, which goes to the even infinity).
        let limit = table[i] + (table[i] - table[i - 1]) / 2;
        if a >= limit { None } else { Some(i) }
    } else {
        let (lo, hi) = (a - table[i], table[i + 1] - a);
        Some(if lo < hi || (lo == hi && i % 2 == 0) {
            i
        } else {
            i + 1
        })
    };
    let v = pick.map_or(f32::INFINITY, |i| xla_aot::ir::half::f16_to_f32(i as u16));
    if n < 0 { -v } else { v }
}

/// `precision: f16`'s dense layer computed from its definition, with exact integer arithmetic:
/// per output, f16 sums of blocks of 16 k, each step `a·b + s` rounded once to f16, the block
/// sums added in f32 in increasing k; then the bias and ReLU in f32.
fn f16_dense_model(m: &Module, x: &[f32]) -> Vec<f32> {
    let c = &m.entry;
    let constant = |name: &str| {
        let i = c.instructions.iter().find(|i| i.name == name).unwrap();
        let xla_aot::ir::Op::Constant(lit) = &i.op else {
            panic!("{name} is a constant")
        };
        (lit.to_f32_vec().unwrap(), i.shape.dims.clone())
    };
    let ((w, wd), (b, _)) = (constant("w"), constant("b"));
    let (k, n) = (wd[0], wd[1]);
    let rows = x.len() / k;
    let h = |v: f32| Precision::F16.round(v);
    let table = half_numerators();
    let scaled = |v: f32| (v as f64 * 2f64.powi(24)) as i128;
    let mut out = vec![0f32; rows * n];
    for i in 0..rows {
        for j in 0..n {
            let mut acc = 0f32;
            for block in (0..k).step_by(16) {
                let mut s = 0f32;
                for kk in block..(block + 16).min(k) {
                    let p = scaled(h(x[i * k + kk])) * scaled(h(w[kk * n + j]));
                    let sum = p + (s as f64 * 2f64.powi(48)) as i128;
                    s = round_exact_to_f16(sum, &table);
                }
                acc += s;
            }
            out[i * n + j] = (acc + b[j]).max(0.0);
        }
    }
    out
}

/// The f16 GPU kernels (host emulation) give exactly the bits of the f16 block sums computed
/// from their definition (`f16_dense_model`, exact integer arithmetic): element kernels and
/// tiled ones, full and partial blocks, on baseline x86-64 (integer half conversions) and
/// AVX2 (F16C).
#[test]
fn f16_gpu_products_are_exactly_the_f16_block_sums() {
    for t in ["x86_64", "x86_64-avx2"] {
        let t = Target::resolve(t).unwrap();
        for (name, shape, seed) in [
            ("x_gemv", (1, 301, 70), 95),
            ("x_tiled", (37, 601, 45), 96),
            ("x_tiled16", (30, 64, 36), 97),
        ] {
            let m = dense(name, shape, seed);
            let ins = random_inputs(&m, 11);
            let mut opts = options(Precision::F16);
            opts.codegen.grid = true;
            let got = common::run_compiled_with(&m, &t, &ins, &format!("exact-{name}"), &opts);
            let want = f16_dense_model(&m, &ins[0].to_f32_vec().unwrap());
            let got = got[0].to_f32_vec().unwrap();
            let differ = got
                .iter()
                .zip(&want)
                .filter(|(g, w)| g.to_bits() != w.to_bits())
                .count();
            assert_eq!(
                differ,
                0,
                "{name} on {}: {differ} of {} outputs differ from the f16 block sums",
                t.name,
                want.len()
            );
        }
    }
}

/// `y = conv(x, w)` (stride 2, padding 1: K = 3·3·3 = 27, one full f16 block and a partial one)
/// with `w` the first `c` output channels of one seeded random kernel.
fn conv(c: usize) -> Module {
    let mut rng = SplitMix64(98);
    let w: Vec<String> = (0..17 * 27)
        .map(|_| format!("{}", (rng.normal() / 27f64.sqrt()) as f32))
        .collect();
    let w = w[..c * 27].join(", ");
    let text = format!(
        "HloModule conv{c}\n\nENTRY %main {{\n  %x = f32[2,3,9,10]{{3,2,1,0}} parameter(0)\n  \
         %w = f32[{c},3,3,3]{{3,2,1,0}} constant({{{w}}})\n  \
         %y = f32[2,{c},5,5]{{3,2,1,0}} convolution(%x, %w), window={{size=3x3 stride=2x2 pad=1_1x1_1}}, \
         dim_labels=bf01_oi01->bf01\n  \
         ROOT %outputs = (f32[2,{c},5,5]{{3,2,1,0}}) tuple(%y), names={{y}}\n}}\n"
    );
    xla_aot::ir::parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A convolution with 17 output channels runs tiled (16×16 blocks of output pixels × channels,
/// half shared tiles), one with 15 runs one thread per output; both sum the same f16 blocks in
/// the same order (input channel, then taps; padding taps add nothing), so the 15 channels they
/// share are bit for bit the same, and within the f16 sums' bound of the rounded reference.
#[test]
fn f16_tiled_and_element_convolutions_sum_the_same_blocks() {
    let t = Target::resolve("x86_64").unwrap();
    let mut opts = options(Precision::F16);
    opts.codegen.grid = true;
    let (tiled, element) = (conv(17), conv(15));
    let orin = Target::resolve("jetson-orin").unwrap();
    for (m, is_tiled) in [(&tiled, true), (&element, false)] {
        let a = compile_model(m, &orin, &options(Precision::F16)).unwrap();
        let ptx = &a.ptx.as_ref().unwrap().ptx;
        assert_eq!(ptx.contains("bar.sync"), is_tiled, "{}: tiled", m.name);
        assert!(count(ptx, "fma.rn.f16") > 0, "{}: no f16 sums", m.name);
    }
    let ins = random_inputs(&tiled, 5);
    let a = common::run_compiled_with(&tiled, &t, &ins, "conv-tiled", &opts)[0]
        .to_f32_vec()
        .unwrap();
    let b = common::run_compiled_with(&element, &t, &ins, "conv-element", &opts)[0]
        .to_f32_vec()
        .unwrap();
    let (pixels, n) = (25, 2);
    for img in 0..n {
        for ch in 0..15 {
            for p in 0..pixels {
                let (x, y) = (
                    a[(img * 17 + ch) * pixels + p],
                    b[(img * 15 + ch) * pixels + p],
                );
                assert_eq!(
                    x.to_bits(),
                    y.to_bits(),
                    "image {img} channel {ch} pixel {p}"
                );
            }
        }
    }
    check_grid(&tiled, &ins, Precision::F16, &t, "conv17");
}

/// `xla-aot compile --target jetson-orin --precision f16` gives a library the CUDA app
/// (`examples/cuda-app`) links with `aarch64-linux-gnu-gcc ... -ldl` and runs under qemu: without
/// a driver it says so and runs on the Cortex-A78 (whose f16 products are `fmla .8h`); its PTX
/// has the f16 sums.
#[test]
fn jetson_orin_f16_library_links_and_runs_on_the_cpu_under_qemu() {
    let dir = scratch("cuda-half-orin");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_xla-aot"))
        .args([
            "compile",
            "examples/simplenet/model.yaml",
            "--target",
            "jetson-orin",
        ])
        .args(["--precision", "f16", "--out-dir"])
        .arg(&dir)
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ptx = std::fs::read_to_string(dir.join("simplenet.ptx")).unwrap();
    assert!(count(&ptx, "fma.rn.f16") > 0 && ptx.contains(".target sm_87"));
    let header = std::fs::read_to_string(dir.join("simplenet.h")).unwrap();
    assert!(header.contains("Precision f16"), "{header}");
    let (compiler, runner) = common::toolchain(&Target::resolve("jetson-orin").unwrap());
    let exe = dir.join("app");
    let cc = std::process::Command::new(&compiler)
        .args(["-O1", "-std=c11", "-Wall", "-Werror", "-I"])
        .arg(&dir)
        .arg(repo().join("examples/cuda-app/main.c"))
        .arg(dir.join("libsimplenet.a"))
        .args(["-ldl", "-lm", "-o"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler} ({e}); install it as .ci/run does"));
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = std::process::Command::new(&runner[0])
        .args(&runner[1..])
        .arg(&exe)
        .current_dir(repo())
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("no CUDA driver") && stdout.contains("CPU"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
