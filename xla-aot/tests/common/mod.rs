//! Helpers shared by the integration tests: repository paths, golden cases, comparisons.
#![allow(dead_code)]

pub mod onnx_proto;

#[allow(unused_imports)]
use std::io::Write as _;
use std::path::{Path, PathBuf};
use xla_aot::ir::npy::read_npy;
use xla_aot::ir::{DType, Literal, Module};

/// Absolute tolerance: the numpy reference computes each case in f64 and rounds once to f32,
/// while the interpreter rounds every instruction's result to f32 (as compiled code will). Values
/// that cancel to ~0 (x - mean in a normalisation, sums of mixed-sign products) carry an absolute
/// error of a few ulps of the *operands*: |x| ≲ 8 here, 8 · 2⁻²⁴ ≈ 5e-7 per rounding.
pub const GOLDEN_ATOL: f64 = 1e-6;
/// Relative tolerance: each rounding to f32 adds ≤ 2⁻²⁴ ≈ 6e-8 relative error; the deepest chain
/// (tiny_transformer: ~80 instructions, two layer norms, softmax) rounds a few dozen times along
/// any path. Measured worst case (2026-11-29): 0.18 of this tolerance, in tiny_transformer.
pub const GOLDEN_RTOL: f64 = 1e-5;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Every golden case: (case name, case directory, spec path). Op cases live in
/// `tests/golden/ops/<case>/model.yaml` with `inputs/` and `expected/`; examples in
/// `examples/<ex>/model.yaml` with `golden/inputs/` and `golden/expected/`.
pub fn golden_cases() -> Vec<(String, PathBuf, PathBuf)> {
    let mut cases = Vec::new();
    let ops = repo().join("tests/golden/ops");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&ops)
        .expect("tests/golden/ops exists (run scripts/gen_golden.py)")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for d in dirs {
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        cases.push((name, d.clone(), d.join("model.yaml")));
    }
    for ex in EXAMPLES {
        let d = repo().join("examples").join(ex);
        cases.push((
            format!("example:{ex}"),
            d.join("golden"),
            d.join("model.yaml"),
        ));
    }
    cases
}

/// The bundled example models.
pub const EXAMPLES: &[&str] = &["simplenet", "mlp", "mobilenet_block", "tiny_transformer"];

/// Reads an `.npy` file or panics with its path.
pub fn npy(path: &Path) -> Literal {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    read_npy(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The golden inputs of a case, in parameter order.
pub fn case_inputs(m: &Module, dir: &Path) -> Vec<Literal> {
    m.entry
        .parameters()
        .iter()
        .map(|&p| {
            npy(&dir
                .join("inputs")
                .join(format!("{}.npy", m.entry.inst(p).name)))
        })
        .collect()
}

/// Largest |a - e| / (atol + rtol |e|) over all elements (≤ 1 means within tolerance), with the
/// index of the worst element. Shapes and dtypes must match exactly; integers must be equal.
pub fn compare(
    actual: &Literal,
    expected: &Literal,
    atol: f64,
    rtol: f64,
) -> Result<(f64, usize), String> {
    if actual.dtype != expected.dtype || actual.dims != expected.dims {
        return Err(format!(
            "got {}{:?}, expected {}{:?}",
            actual.dtype, actual.dims, expected.dtype, expected.dims
        ));
    }
    if actual.dtype == DType::I32 {
        let (a, e) = (actual.to_i32_vec().unwrap(), expected.to_i32_vec().unwrap());
        return match a.iter().zip(&e).position(|(x, y)| x != y) {
            Some(i) => Err(format!("index {i}: got {}, expected {}", a[i], e[i])),
            None => Ok((0.0, 0)),
        };
    }
    if actual.dtype != DType::F32 {
        // Other C API dtypes (u8, i8, int64, halves ...): the same bytes.
        let (a, e) = (actual.bytes().unwrap(), expected.bytes().unwrap());
        let w = actual.dtype.size_bytes().max(1);
        return match a.chunks(w).zip(e.chunks(w)).position(|(x, y)| x != y) {
            Some(i) => Err(format!(
                "element {i}: got bytes {:?}, expected {:?}",
                &a[i * w..(i + 1) * w],
                &e[i * w..(i + 1) * w]
            )),
            None => Ok((0.0, 0)),
        };
    }
    let (a, e) = (actual.to_f32_vec().unwrap(), expected.to_f32_vec().unwrap());
    let mut worst = (0.0f64, 0usize);
    for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
        if x.is_nan() != y.is_nan() {
            return Err(format!("index {i}: got {x}, expected {y}"));
        }
        if x.is_nan() || x == y {
            continue;
        }
        let r = (x as f64 - y as f64).abs() / (atol + rtol * (y as f64).abs());
        if r > worst.0 {
            worst = (r, i);
        }
    }
    Ok(worst)
}

// ---- running compiled models ---------------------------------------------------------------------

use xla_aot::compile::{CompileOptions, compile_model};
use xla_aot::target::{Arch, Target};

/// Relative tolerance of compiled code against the interpreter: the inline `exp`/`log`/`tanh`/`erf`
/// are accurate to a few ulps (≈ 4e-7) and sums are accumulated in f32 in a different order; 1e-4
/// is the bound.
pub const COMPILED_RTOL: f64 = 1e-4;
/// Absolute tolerance, as a fraction of the largest |expected| of the output: f32 sums that cancel
/// (dot, conv, normalisations) keep an error of a few ulps of their largest terms, not of the
/// (small) result.
pub const COMPILED_ATOL_OF_MAX: f64 = 1e-5;

/// A scratch directory unique to this process and `tag`.
pub fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xla-aot-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The C compiler and the runner prefix for a target's code on this machine.
pub fn toolchain(t: &Target) -> (String, Vec<String>) {
    match t.arch {
        Arch::X86_64 => ("cc".into(), Vec::new()),
        Arch::Aarch64 => (
            "aarch64-linux-gnu-gcc".into(),
            vec![
                "qemu-aarch64".into(),
                "-L".into(),
                "/usr/aarch64-linux-gnu".into(),
            ],
        ),
        Arch::Nvptx64 => panic!("{}: PTX has no host toolchain; see tests/ptx.rs", t.name),
        Arch::Arm => panic!(
            "{}: bare metal, run on emulated boards; see tests/mcu.rs",
            t.name
        ),
    }
}

/// Compiles `m` for `t`, links the guard-page harness and runs it on `inputs`; returns the
/// outputs. Panics with the harness's message on any failure (including C API contract checks).
pub fn run_compiled(m: &Module, t: &Target, inputs: &[Literal], tag: &str) -> Vec<Literal> {
    run_compiled_with(m, t, inputs, tag, &default_options())
}

/// The default compile options, minus the passes named in `XLA_AOT_DISABLE_PASSES` (a comma-
/// separated list): CI runs the compiled-code tests once per disabled pass.
pub fn default_options() -> CompileOptions {
    let disabled_passes = std::env::var("XLA_AOT_DISABLE_PASSES")
        .map(|v| {
            v.split(',')
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())
                .collect()
        })
        .unwrap_or_default();
    CompileOptions {
        disabled_passes,
        ..CompileOptions::default()
    }
}

/// The targets the compiled-code tests run on: `x86_64-avx2` and `x86_64-avx512` where this CPU
/// has their instructions, and `aarch64-neon` under `qemu-aarch64`. With `XLA_AOT_DISABLE_PASSES`
/// set (`.ci/run`'s run of these tests once per disabled pass) only the first of them: the passes
/// rewrite the target-independent IR, and every target's code generation is checked by the main
/// run. One target per pass (and [`one_target_per_pass`]'s early returns) took one loop
/// iteration from 107 to about 40 s (11 passes: CI 55 → under 40 minutes with the rest of
/// .ci/run's changes, 2026-12-03).
pub fn compiled_targets() -> Vec<xla_aot::target::Target> {
    let mut ts = Vec::new();
    for name in ["x86_64-avx2", "x86_64-avx512", "aarch64-neon"] {
        let t = xla_aot::target::Target::resolve(name).unwrap();
        if t.arch == xla_aot::target::Arch::X86_64 && !t.runs_here() {
            eprintln!("note: this CPU cannot run {name}; skipped");
            continue;
        }
        ts.push(t);
    }
    if in_pass_loop() {
        ts.truncate(1);
    }
    ts
}

/// How many of `a`'s values have exactly the bits of `b`'s (the two are equally long): the
/// comparison of targets whose integer kernels sum the same integers exactly.
pub fn same_bits(a: &[f32], b: &[f32]) -> usize {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .filter(|(x, y)| x.to_bits() == y.to_bits())
        .count()
}

/// Whether `XLA_AOT_HOST_ISA` caps the host (`target/host_isa.rs`: `.ci/run` runs the host
/// suites once as an AVX2-only machine), where a test of what the real CPU detects at run time
/// (a multi-ISA library's dispatch) returns early; says so on stderr.
pub fn host_isa_capped(test: &str) -> bool {
    let capped = matches!(xla_aot::target::host_isa::cap(), Ok(Some(_)));
    if capped {
        eprintln!(
            "note: XLA_AOT_HOST_ISA is set: {test} (the run-time detection of the real CPU) skipped"
        );
    }
    capped
}

/// Whether this is `.ci/run`'s loop over the passes: `XLA_AOT_DISABLE_PASSES` names some.
pub fn in_pass_loop() -> bool {
    !default_options().disabled_passes.is_empty()
}

/// Whether this is `.ci/run`'s loop over the passes (`XLA_AOT_DISABLE_PASSES` set), where tests
/// of other targets (multi-ISA dispatch, emulated CPUs, the Jetson cross build) return early, as
/// [`compiled_targets`] keeps one target; says so on stderr.
pub fn one_target_per_pass(test: &str) -> bool {
    let skip = in_pass_loop();
    if skip {
        eprintln!("note: XLA_AOT_DISABLE_PASSES is set: {test} (another target) skipped");
    }
    skip
}

/// [`run_compiled`] with explicit compile options (e.g. a disabled pass).
pub fn run_compiled_with(
    m: &Module,
    t: &Target,
    inputs: &[Literal],
    tag: &str,
    opts: &CompileOptions,
) -> Vec<Literal> {
    run_compiled_cflags(m, t, inputs, tag, opts, &[])
}

/// [`run_compiled_with`], the harness compiled and linked with the extra C flags `cflags` (the
/// sanitizers: `-fsanitize=address,undefined`).
pub fn run_compiled_cflags(
    m: &Module,
    t: &Target,
    inputs: &[Literal],
    tag: &str,
    opts: &CompileOptions,
    cflags: &[&str],
) -> Vec<Literal> {
    run_harness(m, t, inputs, tag, opts, cflags, &[(None, None, false)])
        .remove(0)
        .1
        .unwrap_or_else(|e| panic!("{tag}: {e}"))
}

/// [`run_compiled_with`] for a multi-ISA target (`x86_64-multi`): compiles and links once, then
/// runs the harness once per entry of `forced` (`Some(isa)`: that variant forced through
/// `<name>_force_isa`, `None`: the automatic choice). Returns per run the variant that ran (as
/// `<name>_isa()` named it) and the outputs, or `Err` when the library refused the forced
/// variant (this CPU cannot run it). Any other failure panics.
pub fn run_compiled_forced(
    m: &Module,
    t: &Target,
    inputs: &[Literal],
    tag: &str,
    opts: &CompileOptions,
    forced: &[Option<&str>],
) -> Vec<(String, Result<Vec<Literal>, String>)> {
    let runs: Vec<(Option<&str>, Option<&str>, bool)> =
        forced.iter().map(|f| (*f, None, false)).collect();
    run_harness(m, t, inputs, tag, opts, &[], &runs)
}

/// [`run_compiled_forced`] where each run is (forced variant, CPU model for QEMU's `-cpu` or
/// `None` for a native run, ISA only): `Some("Haswell")` runs an x86-64 harness under
/// `qemu-x86_64` on an emulated AVX2-only CPU, `Some("cortex-a72")` an aarch64 one under
/// `qemu-aarch64` on a CPU without dotprod; with ISA only the harness reports the variant and
/// refusals and runs nothing (the outputs are then empty).
pub fn run_compiled_emulated(
    m: &Module,
    t: &Target,
    inputs: &[Literal],
    tag: &str,
    opts: &CompileOptions,
    runs: &[(Option<&str>, Option<&str>, bool)],
) -> Vec<(String, Result<Vec<Literal>, String>)> {
    run_harness(m, t, inputs, tag, opts, &[], runs)
}

/// Compiles `m` for `t`, links the guard-page harness (with `cflags`) once and runs it once per
/// entry of `runs` ([`run_compiled_emulated`]).
fn run_harness(
    m: &Module,
    t: &Target,
    inputs: &[Literal],
    tag: &str,
    opts: &CompileOptions,
    cflags: &[&str],
    runs: &[(Option<&str>, Option<&str>, bool)],
) -> Vec<(String, Result<Vec<Literal>, String>)> {
    let dir = scratch(tag);
    let art = compile_model(m, t, opts).unwrap_or_else(|e| panic!("{tag}: {e}"));
    let lib = dir.join(format!("lib{}.a", art.name));
    std::fs::write(&lib, &art.archive).unwrap();
    let (cc, runner) = toolchain(t);
    let exe = dir.join("harness");
    let harness = repo().join("xla-aot/tests/harness/harness.c");
    let multi = !t.variants.is_empty();
    let out = std::process::Command::new(&cc)
        .args(["-O1", "-std=c11", "-Wall", "-Werror"])
        .args(cflags)
        .arg(format!("-DMODEL={}", art.name))
        .args(multi.then_some("-DMULTI_ISA"))
        .arg(&harness)
        .arg(&lib)
        .args(["-lpthread", "-o"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} ({e}); install it as .ci/run does"));
    assert!(
        out.status.success(),
        "{tag}: linking failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut args: Vec<String> = vec![
        art.plan.arena_size.to_string(),
        inputs.len().to_string(),
        m.entry.outputs.len().to_string(),
    ];
    for (i, lit) in inputs.iter().enumerate() {
        let p = dir.join(format!("in{i}.bin"));
        std::fs::write(&p, lit.bytes().unwrap()).unwrap();
        args.push(p.display().to_string());
        args.push(lit.bytes().unwrap().len().to_string());
    }
    let mut outs = Vec::new();
    for (i, o) in m.entry.outputs.iter().enumerate() {
        // Outputs come back in their C API dtype (`ir/api.rs`).
        let mut s = m.entry.inst(o.value).shape.clone();
        s.dtype = m.output_dtype(i);
        let s = &s;
        let p = dir.join(format!("out{i}.bin"));
        args.push(p.display().to_string());
        args.push(s.size_bytes().to_string());
        outs.push((p, s.clone()));
    }
    let mut results = Vec::new();
    for (isa, cpu, isa_only) in runs {
        let mut cmd = if let Some(cpu) = cpu {
            let mut c = if runner.is_empty() {
                std::process::Command::new("qemu-x86_64")
            } else {
                let mut c = std::process::Command::new(&runner[0]);
                c.args(&runner[1..]);
                c
            };
            c.args(["-cpu", cpu]).arg(&exe);
            c
        } else if runner.is_empty() {
            std::process::Command::new(&exe)
        } else {
            let mut c = std::process::Command::new(&runner[0]);
            c.args(&runner[1..]).arg(&exe);
            c
        };
        if let Some(isa) = isa {
            cmd.env("XLA_AOT_FORCE_ISA", isa);
        }
        if *isa_only {
            cmd.env("XLA_AOT_ISA_ONLY", "1");
        }
        let r = cmd
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("{tag}: cannot run the harness ({e})"));
        let stderr = String::from_utf8_lossy(&r.stderr).into_owned();
        if isa.is_some() && r.status.code() == Some(4) {
            results.push((String::new(), Err(stderr)));
            continue;
        }
        assert!(
            r.status.success(),
            "{tag} ({isa:?} on {cpu:?}): harness failed ({:?}):\n{stderr}",
            r.status,
        );
        let ran = stderr
            .lines()
            .find_map(|l| l.strip_prefix("isa: "))
            .unwrap_or("")
            .to_string();
        if *isa_only {
            results.push((ran, Ok(Vec::new())));
            continue;
        }
        let result = outs
            .iter()
            .map(|(p, s)| Literal {
                dtype: s.dtype,
                dims: s.dims.clone(),
                data: xla_aot::ir::LiteralData::Dense(std::fs::read(p).unwrap().into()),
            })
            .collect();
        results.push((ran, Ok(result)));
    }
    let _ = std::fs::remove_dir_all(&dir);
    results
}

/// max |a − e| / max |e| over an output: the error measure of the precision bounds.
pub fn rel_to_max(a: &Literal, e: &Literal) -> f64 {
    let (a, e) = (a.to_f32_vec().unwrap(), e.to_f32_vec().unwrap());
    let scale = e
        .iter()
        .fold(0f64, |m, &x| m.max(x.abs() as f64))
        .max(1e-30);
    a.iter()
        .zip(&e)
        .map(|(&x, &y)| (x as f64 - y as f64).abs())
        .fold(0.0, f64::max)
        / scale
}

/// Seeded random values for every parameter of `m` (parameter `i` from seed `seed + i`).
pub fn random_inputs(m: &Module, seed: u64) -> Vec<Literal> {
    m.entry
        .parameters()
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let s = &m.entry.inst(p).shape;
            xla_aot::driver::random_input(s.dtype, &s.dims, seed + i as u64)
        })
        .collect()
}

/// Compares compiled outputs with the interpreter's: `|a - e| <= ATOL_OF_MAX·max|e| + RTOL·|e|`;
/// NaNs must match; integers must be equal. Returns a description of the worst violation.
pub fn check_close(actual: &Literal, expected: &Literal) -> Result<f64, String> {
    let scale = expected
        .to_f32_vec()
        .map(|v| {
            v.iter()
                .filter(|x| x.is_finite())
                .fold(0.0f64, |m, &x| m.max(x.abs() as f64))
        })
        .unwrap_or(0.0);
    let atol = COMPILED_ATOL_OF_MAX * scale.max(1e-30);
    match compare(actual, expected, atol, COMPILED_RTOL) {
        Ok((r, _)) if r <= 1.0 => Ok(r),
        Ok((r, i)) => {
            let (a, e) = (actual.to_f32_vec().unwrap(), expected.to_f32_vec().unwrap());
            Err(format!(
                "element {i}: got {}, expected {} ({r:.2}x the tolerance)",
                a[i], e[i]
            ))
        }
        Err(e) => Err(e),
    }
}

/// Runs `run` on every case directory under `root` (sorted by name; there must be `expected` of
/// them), printing `ok` or `FAIL` per case, and fails naming every failing case.
pub fn run_cases(
    root: &Path,
    expected: usize,
    run: impl Fn(&Path, &str) -> Result<String, String>,
) {
    let mut names: Vec<String> = std::fs::read_dir(root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names.len(),
        expected,
        "{} holds {} cases; its script writes {expected}",
        root.display(),
        names.len()
    );
    let mut failed = Vec::new();
    for name in &names {
        match run(&root.join(name), name) {
            Ok(msg) => println!("ok    {name}: {msg}"),
            Err(e) => {
                println!("FAIL  {name}: {e}");
                failed.push(name.clone());
            }
        }
    }
    assert!(failed.is_empty(), "failing: {}", failed.join(", "));
}

/// Compiles `m` for `t` with `opts` and links it with the C program `source` (a path in the
/// repository) into a scratch directory: (directory, executable, arena size).
pub fn link_with_options(
    m: &Module,
    t: &Target,
    source: &str,
    tag: &str,
    opts: &CompileOptions,
) -> (std::path::PathBuf, std::path::PathBuf, usize) {
    let dir = scratch(&format!("{tag}-{}-{}", m.name, t.name));
    let art = compile_model(m, t, opts).unwrap();
    let lib = dir.join(format!("lib{}.a", art.name));
    std::fs::write(&lib, &art.archive).unwrap();
    let (cc, _) = toolchain(t);
    let exe = dir.join(tag);
    let out = std::process::Command::new(&cc)
        .args(["-O2", "-std=c11", "-Wall", "-Werror"])
        .arg(format!("-DMODEL={}", art.name))
        .arg("-I")
        .arg(repo().join("runtime-min/include"))
        .arg(repo().join(source))
        .arg(&lib)
        .args(["-lpthread", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, exe, art.plan.arena_size)
}

/// Runs `m` compiled with `opts` through `tests/harness/parallel.c` with `threads` threads (which
/// checks that they give one thread's bits); returns the hook's call count.
pub fn hook_calls_with(m: &Module, t: &Target, threads: usize, opts: &CompileOptions) -> usize {
    let (dir, exe, arena) =
        link_with_options(m, t, "xla-aot/tests/harness/parallel.c", "parallel", opts);
    let (_, runner) = toolchain(t);
    let ins = random_inputs(m, 11);
    let mut args = vec![
        threads.to_string(),
        arena.to_string(),
        ins.len().to_string(),
        m.entry.outputs.len().to_string(),
    ];
    for (i, lit) in ins.iter().enumerate() {
        let p = dir.join(format!("in{i}.bin"));
        std::fs::write(&p, lit.bytes().unwrap()).unwrap();
        args.push(p.display().to_string());
        args.push(lit.bytes().unwrap().len().to_string());
    }
    for (i, o) in m.entry.outputs.iter().enumerate() {
        args.push(dir.join(format!("out{i}.bin")).display().to_string());
        args.push(m.entry.inst(o.value).shape.size_bytes().to_string());
    }
    let mut cmd = if runner.is_empty() {
        std::process::Command::new(&exe)
    } else {
        let mut c = std::process::Command::new(&runner[0]);
        c.args(&runner[1..]).arg(&exe);
        c
    };
    let r = cmd.args(&args).output().unwrap();
    assert!(
        r.status.success(),
        "{} on {}: {}",
        m.name,
        t.name,
        String::from_utf8_lossy(&r.stderr)
    );
    let text = String::from_utf8_lossy(&r.stdout);
    let _ = std::fs::remove_dir_all(&dir);
    text.trim()
        .strip_prefix("hook calls: ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected harness output {text}"))
}
