//! `fma` (a · b + c rounded once) is fused on every backend: bit for bit the interpreter's
//! `f32::mul_add`, on inputs where a separate multiply and add differ, on random inputs and on
//! special values — on the host, on the x86-64 baseline (no FMA3: the f64 round-to-odd
//! emulation of `core/emitter.rs`), on AVX2, on aarch64 under qemu, in grid form (the GPU
//! kernel bodies on the host), and as PTX with `fma.rn.f32`.

mod common;

use common::{run_compiled, run_compiled_with};
use xla_aot::compile::CompileOptions;
use xla_aot::interp::evaluate;
use xla_aot::ir::{Literal, Module, parse_module, verify};
use xla_aot::target::Target;

/// Elements per operand: the hand-picked cases, then seeded random ones.
const N: usize = 1024;

fn hlo() -> String {
    format!(
        "HloModule fma\n\nENTRY %main {{\n  \
         %a = f32[{N}]{{0}} parameter(0)\n  \
         %b = f32[{N}]{{0}} parameter(1)\n  \
         %c = f32[{N}]{{0}} parameter(2)\n  \
         %r = f32[{N}]{{0}} fma(%a, %b, %c)\n  \
         ROOT %outputs = (f32[{N}]{{0}}) tuple(%r), names={{r}}\n}}\n"
    )
}

fn module() -> Module {
    let m = parse_module(&hlo()).unwrap_or_else(|e| panic!("{e}"));
    verify(&m).unwrap_or_else(|e| panic!("{e}"));
    m
}

/// (a, b, c) where one rounding matters, then the special values, then random triples of every
/// magnitude (so the emulation's sums cancel, round to ties and underflow).
fn operands() -> [Vec<f32>; 3] {
    let one_p = 1.0 + 2.0 * f32::EPSILON; // 1 + 2^-22
    let mut t: Vec<(f32, f32, f32)> = vec![
        // (1 + 2^-12)² − (1 + 2^-11) = 2^-24 exactly; a separate product rounds it away.
        (
            1.0 + 2f32.powi(-12),
            1.0 + 2f32.powi(-12),
            -(1.0 + 2f32.powi(-11)),
        ),
        (one_p, one_p, -1.0),
        // (1 + 2^-12)² is an f32 midpoint plus 2^-11; a tiny c breaks the tie, but an f64 sum
        // rounded to nearest would drop it (double rounding: the emulation rounds to odd).
        (1.0 + 2f32.powi(-12), 1.0 + 2f32.powi(-12), 2f32.powi(-80)),
        (
            -(1.0 + 2f32.powi(-12)),
            1.0 + 2f32.powi(-12),
            -(2f32.powi(-80)),
        ),
        // A quantized add's shape: byte · ratio + (byte · ratio + fixed part).
        (200.0, 0.373_291_3, 17.124_512),
        (0.0, f32::INFINITY, 1.0),
        (f32::INFINITY, 2.0, f32::NEG_INFINITY),
        (f32::NAN, 1.0, 1.0),
        (f32::MAX, 2.0, -f32::MAX),
        (f32::MIN_POSITIVE, 0.5, 0.0),
        (1e-30, 1e-10, -1e-45),
        (-0.0, 0.0, -0.0),
        (3.0, 5.0, -15.0),
    ];
    let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    while t.len() < N {
        let mut f = |lo: i32, hi: i32| {
            let r = next();
            let m = 1.0 + (r & 0xff_ffff) as f32 / 16_777_216.0;
            let span = (hi - lo) as u64 + 1;
            let ex = lo + ((r >> 24) % span) as i32;
            let sign = if r >> 63 == 1 { -1.0 } else { 1.0 };
            sign * m * 2f32.powi(ex)
        };
        let (a, b) = (f(-20, 20), f(-20, 20));
        // c near −a·b half the time: the sum cancels and the product's low bits decide.
        let c = if f(0, 0) > 0.0 {
            -(a * b) + f(-60, -20)
        } else {
            f(-40, 40)
        };
        t.push((a, b, c));
    }
    [
        t.iter().map(|x| x.0).collect(),
        t.iter().map(|x| x.1).collect(),
        t.iter().map(|x| x.2).collect(),
    ]
}

fn inputs() -> Vec<Literal> {
    operands()
        .iter()
        .map(|v| Literal::from_f32(vec![N], v))
        .collect()
}

/// Bit for bit `f32::mul_add` (every NaN counts as NaN), and the first case really is fused.
fn assert_fused(what: &str, got: &[Literal]) {
    let [a, b, c] = operands();
    let got = got[0]
        .to_f32_vec()
        .unwrap_or_else(|| panic!("{what}: f32 output"));
    assert_eq!(got[0], 2f32.powi(-24), "{what}: (1 + 2^-12)² − (1 + 2^-11)");
    for i in 0..N {
        let want = a[i].mul_add(b[i], c[i]);
        let same = got[i].to_bits() == want.to_bits() || (got[i].is_nan() && want.is_nan());
        assert!(
            same,
            "{what}: element {i}: fma({:e}, {:e}, {:e}) = {:e}, got {:e}",
            a[i], b[i], c[i], want, got[i]
        );
    }
}

#[test]
fn fma_rounds_once_in_the_interpreter_and_on_the_host() {
    let m = module();
    assert_fused("interpreter", &evaluate(&m, &inputs()).unwrap());
    let got = xla_aot::compile::run_host(&m, &inputs()).unwrap_or_else(|e| panic!("{e}"));
    assert_fused("host", &got);
}

#[test]
fn fma_rounds_once_on_every_cpu_target() {
    let m = module();
    for name in ["x86_64", "x86_64-avx2", "aarch64-neon"] {
        let t = Target::resolve(name).unwrap();
        assert_eq!(t.has_fma(), name != "x86_64", "{name}: has_fma");
        if !t.runs_here() && t.arch == xla_aot::target::Arch::X86_64 {
            eprintln!("{name}: skipped, this CPU cannot run it");
            continue;
        }
        assert_fused(
            name,
            &run_compiled(&m, &t, &inputs(), &format!("fma-{name}")),
        );
    }
}

#[test]
fn fma_rounds_once_in_grid_form() {
    let m = module();
    let t = Target::resolve("x86_64").unwrap();
    let mut opts = CompileOptions::default();
    opts.codegen.grid = true;
    assert_fused(
        "grid",
        &run_compiled_with(&m, &t, &inputs(), "grid-fma", &opts),
    );
}

#[test]
fn fma_is_one_ptx_instruction() {
    let mut m = module();
    xla_aot::passes::Pipeline::default_pipeline()
        .run(&mut m, &mut |_, _, _| {})
        .unwrap();
    let plan = xla_aot::arena::plan(&m);
    let module = xla_aot::codegen::gpu::ptx::compile(&m, &plan, "sm_80").unwrap();
    assert!(
        module.ptx.contains("fma.rn.f32"),
        "the PTX fuses the product:\n{}",
        module.ptx
    );
    let Some(ptxas) = std::env::var_os("XLA_AOT_PTXAS") else {
        eprintln!("fma ptxas check skipped: XLA_AOT_PTXAS is not set");
        return;
    };
    let dir = common::scratch("ptx-fma");
    let file = dir.join("fma.ptx");
    std::fs::write(&file, &module.ptx).unwrap();
    let out = std::process::Command::new(&ptxas)
        .args(["-arch=sm_80"])
        .arg(&file)
        .arg("-o")
        .arg(dir.join("fma.cubin"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ptxas failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
