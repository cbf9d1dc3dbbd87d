//! The CUDA launcher (`codegen/gpu/cuda_host.rs`) against a fake driver (`harness/fake_cuda.c`, built
//! as `libcuda.so.1`), with no GPU: the exact sequence of driver calls for every example (one
//! module load of the embedded PTX, one device allocation, the weights uploaded once, per run the
//! inputs in, every planned launch with its grid and arguments, the outputs out, one
//! synchronisation and no allocation), the statuses and error names of a missing driver, a
//! missing entry point and failing driver calls, a caller-supplied device arena, and the
//! `jetson-orin` library linked with `aarch64-linux-gnu-gcc ... -ldl` under qemu; and, with the
//! fake driver running each launch as the host build of the same grid kernel, every example's
//! outputs through the launcher against the reference interpreter.

mod common;

use common::{EXAMPLES, repo, scratch};
use std::path::{Path, PathBuf};
use std::process::Command;
use xla_aot::codegen::gpu::ptx::{BLOCK_THREADS, PtxModule};
use xla_aot::compile::{CompileOptions, compile_model};
use xla_aot::emit::Artefacts;
use xla_aot::front::load_spec;
use xla_aot::target::Target;

/// FNV-1a, as the fake driver hashes what it is given.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

fn compile(example: &str, target: &str) -> (xla_aot::ir::Module, Artefacts) {
    let m = load_spec(&repo().join("examples").join(example).join("model.yaml"))
        .unwrap()
        .module;
    let t = Target::resolve(target).unwrap();
    let a = compile_model(&m, &t, &common::default_options()).unwrap();
    (m, a)
}

/// Runs a C compiler (warnings are errors) with `args`.
fn cc(compiler: &str, args: &[&str]) {
    let out = Command::new(compiler)
        .args(["-O1", "-std=c11", "-Wall", "-Werror"])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {compiler} ({e}); install it as .ci/run does"));
    assert!(
        out.status.success(),
        "{compiler} {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the fake driver as `dir/libcuda.so.1`.
fn fake_driver(dir: &Path, compiler: &str, extra: &[&str]) {
    let src = repo().join("xla-aot/tests/harness/fake_cuda.c");
    let out = dir.join("libcuda.so.1");
    let mut args = vec!["-shared", "-fPIC"];
    args.extend_from_slice(extra);
    args.extend([src.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    cc(compiler, &args);
}

/// Writes the library and header of `a` into `dir` and links the harness against them.
fn harness(a: &Artefacts, dir: &Path, compiler: &str) -> PathBuf {
    std::fs::write(dir.join(format!("lib{}.a", a.name)), &a.archive).unwrap();
    std::fs::write(dir.join(format!("{}.h", a.name)), &a.header).unwrap();
    let exe = dir.join("cuda_harness");
    let src = repo().join("xla-aot/tests/harness/cuda_harness.c");
    let ptx = a.ptx.as_ref().expect("a CUDA target");
    cc(
        compiler,
        &[
            &format!("-DMODEL={}", a.name),
            &format!("-DHEADER=\"{}.h\"", a.name),
            &format!("-DDEVICE_BYTES={}", ptx.layout.size),
            "-I",
            dir.to_str().unwrap(),
            src.to_str().unwrap(),
            dir.join(format!("lib{}.a", a.name)).to_str().unwrap(),
            "-ldl",
            "-o",
            exe.to_str().unwrap(),
        ],
    );
    exe
}

/// Runs the harness; returns (stdout, the fake driver's log).
fn run_harness(
    exe: &Path,
    runner: &[&str],
    m: &xla_aot::ir::Module,
    mode: &str,
    driver_dir: Option<&Path>,
    env: &[(&str, &str)],
) -> (String, String) {
    let c = &m.entry;
    let log = exe.with_file_name(format!("driver-{mode}.log"));
    let _ = std::fs::remove_file(&log);
    let mut cmd = match runner.split_first() {
        Some((r, rest)) => {
            let mut cmd = Command::new(r);
            cmd.args(rest).arg(exe);
            cmd
        }
        None => Command::new(exe),
    };
    cmd.arg(mode)
        .arg(c.parameters().len().to_string())
        .arg(c.outputs.len().to_string());
    for p in c.parameters() {
        cmd.arg(c.inst(p).shape.size_bytes().to_string());
    }
    for o in &c.outputs {
        cmd.arg(c.inst(o.value).shape.size_bytes().to_string());
    }
    cmd.env("FAKE_CUDA_LOG", &log);
    cmd.env_remove("FAKE_CUDA_FAIL");
    match driver_dir {
        Some(d) => cmd.env("LD_LIBRARY_PATH", d),
        None => cmd.env_remove("LD_LIBRARY_PATH"),
    };
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "harness failed ({:?}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).unwrap(),
        std::fs::read_to_string(&log).unwrap_or_default(),
    )
}

/// The driver calls of init, as the fake logs them.
fn init_calls(p: &PtxModule, own_arena: bool) -> Vec<String> {
    let mut v = vec![
        "cuInit 0".to_string(),
        "cuDeviceGet 0".into(),
        "cuDevicePrimaryCtxRetain 0".into(),
        "cuCtxPushCurrent".into(),
        format!(
            "cuModuleLoadData {} bytes fnv {:016x}",
            p.ptx.len(),
            fnv(p.ptx.as_bytes())
        ),
    ];
    v.extend(
        p.launches
            .iter()
            .map(|l| format!("cuModuleGetFunction {}", l.entry)),
    );
    if !own_arena {
        v.push(format!("cuMemAlloc {}", p.layout.size));
    }
    if !p.layout.weights.is_empty() {
        v.push(format!(
            "cuMemcpyHtoD +0 {} fnv {:016x}",
            p.layout.weights.len(),
            fnv(&p.layout.weights)
        ));
    }
    v.push("cuCtxPopCurrent".into());
    v
}

fn launch_line(p: &PtxModule, i: usize) -> String {
    let l = &p.launches[i];
    let args: Vec<String> = l.args.iter().map(|a| format!("+{a}")).collect();
    format!(
        "cuLaunchKernel {} grid {},1,1 block {BLOCK_THREADS},1,1 shared 0 args {}",
        l.entry,
        l.blocks(),
        args.join(" ")
    )
}

/// The driver calls of one run.
fn run_calls(p: &PtxModule) -> Vec<String> {
    let mut v = vec!["cuCtxPushCurrent".to_string()];
    for (k, (_, r)) in p.layout.inputs.iter().enumerate() {
        let bytes = vec![k as u8 + 1; r.bytes as usize];
        v.push(format!(
            "cuMemcpyHtoDAsync +{} {} fnv {:016x}",
            r.offset,
            r.bytes,
            fnv(&bytes)
        ));
    }
    v.extend((0..p.launches.len()).map(|i| launch_line(p, i)));
    for (_, r) in &p.layout.outputs {
        v.push(format!("cuMemcpyDtoHAsync +{} {}", r.offset, r.bytes));
    }
    v.push("cuStreamSynchronize".into());
    v.push("cuCtxPopCurrent".into());
    v
}

/// Every driver call of the harness's run mode, in order.
fn expected_log(p: &PtxModule, own_arena: bool) -> String {
    let mut v = Vec::new();
    if own_arena {
        // The app's own allocation (cuda_harness.c) before the launcher's init.
        v.extend([
            "cuInit 0".to_string(),
            "cuDevicePrimaryCtxRetain 0".into(),
            "cuCtxPushCurrent".into(),
            format!("cuMemAlloc {}", p.layout.size),
            "cuCtxPopCurrent".into(),
        ]);
    }
    v.extend(init_calls(p, own_arena));
    v.extend(run_calls(p));
    v.extend(run_calls(p));
    v.extend([
        "cuCtxPushCurrent".to_string(),
        launch_line(p, 0),
        "cuStreamSynchronize".into(),
        "cuCtxPopCurrent".into(),
        "cuCtxPushCurrent".into(),
    ]);
    if !own_arena {
        v.push(format!("cuMemFree {}", p.layout.size));
    }
    v.extend([
        "cuModuleUnload".to_string(),
        "cuCtxPopCurrent".into(),
        "cuDevicePrimaryCtxRelease 0".into(),
    ]);
    v.join("\n") + "\n"
}

const OK_RUN_STDOUT: &str =
    "run before init -> -3 the CUDA context is not initialised (init failed or was not called)
init -> 0 no error
run -> 0 no error
run -> 0 no error
run_kernel 0 -> 0 no error
run_kernel out of range -> -3 no error
run after destroy -> -3 the CUDA context is not initialised (init failed or was not called)
destroyed
";

#[test]
fn every_example_runs_the_planned_launch_sequence_on_a_fake_driver() {
    let dir = scratch("cuda-fake");
    fake_driver(&dir, "cc", &[]);
    for ex in EXAMPLES {
        let (m, a) = compile(ex, "cuda-x86_64");
        let p = a.ptx.as_ref().unwrap();
        let exe = harness(&a, &dir, "cc");
        let (stdout, log) = run_harness(&exe, &[], &m, "run", Some(&dir), &[]);
        assert_eq!(stdout, OK_RUN_STDOUT, "{ex}");
        assert_eq!(log, expected_log(p, false), "{ex}: driver calls");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The host build of `m`'s kernels in grid form as a shared object (`dir/grid_<name>.so`), for
/// the fake driver to run launches with (`FAKE_CUDA_KERNELS`); compiled with `opts` (the PTX
/// side must have been compiled with the same passes, so that the kernels are the same).
fn grid_kernels(m: &xla_aot::ir::Module, dir: &Path, opts: &CompileOptions) -> PathBuf {
    let host = Target::resolve("x86_64-avx2").unwrap();
    let mut grid = opts.clone();
    grid.codegen.grid = true;
    let g = compile_model(m, &host, &grid).unwrap();
    let lib = dir.join(format!("libgrid_{}.a", m.name));
    std::fs::write(&lib, &g.archive).unwrap();
    let so = dir.join(format!("grid_{}.so", m.name));
    cc(
        "cc",
        &[
            "-shared",
            "-o",
            so.to_str().unwrap(),
            "-Wl,--whole-archive",
            lib.to_str().unwrap(),
            "-Wl,--no-whole-archive",
        ],
    );
    so
}

/// End to end without a GPU: the launcher drives the fake driver, which runs each launch as the
/// host build of the same grid kernel over the whole grid on the device arena's bytes; the
/// outputs copied back match the reference interpreter. This checks the device layout (weights,
/// arena, input and output slots) and every launch's arguments, not only their order.
#[test]
fn every_example_matches_the_interpreter_through_the_launcher_with_emulated_kernels() {
    let dir = scratch("cuda-emulated");
    fake_driver(&dir, "cc", &[]);
    for ex in EXAMPLES {
        let m = load_spec(&repo().join("examples").join(ex).join("model.yaml"))
            .unwrap()
            .module;
        let expected_of =
            |inputs: &[xla_aot::ir::Literal]| xla_aot::interp::evaluate(&m, inputs).unwrap();
        let got = run_emulated(&dir, &m, &common::default_options(), &expected_of);
        for (i, (actual, e)) in got.iter().enumerate() {
            if let Err(msg) = common::check_close(actual, e) {
                panic!("{ex} output {i} through the CUDA launcher: {msg}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The expected outputs for given inputs (an interpreter run).
type Reference<'r> = &'r dyn Fn(&[xla_aot::ir::Literal]) -> Vec<xla_aot::ir::Literal>;

/// Compiles `m` for `cuda-x86_64` with `opts`, runs its golden inputs through the launcher on the
/// emulating fake driver (built in `dir`) and returns each output with the one `expected` gives
/// for those inputs.
fn run_emulated(
    dir: &Path,
    m: &xla_aot::ir::Module,
    opts: &CompileOptions,
    expected: Reference<'_>,
) -> Vec<(xla_aot::ir::Literal, xla_aot::ir::Literal)> {
    let ex = &m.name;
    let t = Target::resolve("cuda-x86_64").unwrap();
    let a = compile_model(m, &t, opts).unwrap();
    let exe = harness(&a, dir, "cc");
    let kernels = grid_kernels(m, dir, opts);
    let golden = repo().join("examples").join(ex).join("golden");
    let inputs = common::case_inputs(m, &golden);
    let expected = expected(&inputs);
    let mut cmd = Command::new(&exe);
    cmd.arg("io")
        .arg(inputs.len().to_string())
        .arg(expected.len().to_string());
    for (i, lit) in inputs.iter().enumerate() {
        let p = dir.join(format!("in{i}.bin"));
        std::fs::write(&p, lit.bytes().unwrap()).unwrap();
        cmd.arg(&p).arg(lit.bytes().unwrap().len().to_string());
    }
    for (i, e) in expected.iter().enumerate() {
        cmd.arg(dir.join(format!("out{i}.bin")))
            .arg(e.bytes().unwrap().len().to_string());
    }
    let out = cmd
        .env("LD_LIBRARY_PATH", dir)
        .env("FAKE_CUDA_KERNELS", &kernels)
        .env("FAKE_CUDA_LOG", dir.join("emulated.log"))
        .env_remove("FAKE_CUDA_FAIL")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{ex}: {}{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(dir.join("emulated.log")).unwrap_or_default()
    );
    expected
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let actual = xla_aot::ir::Literal {
                dtype: e.dtype,
                dims: e.dims.clone(),
                data: xla_aot::ir::LiteralData::Dense(
                    std::fs::read(dir.join(format!("out{i}.bin")))
                        .unwrap()
                        .into(),
                ),
            };
            (actual, e)
        })
        .collect()
}

/// Largest error of `precision: f16` GPU kernels against the interpreter on the rounded module
/// (fraction of the output's largest magnitude): `tests/cuda_half.rs` `F16_SUMS_BOUND`.
const F16_SUMS_BOUND: f64 = 5e-3;

/// Half precisions through the launcher: the device arena holds the dots' and convolutions'
/// weights 2 bytes per value (`Packings::for_gpu`), the kernels read them there, and the outputs
/// match the interpreter on the rounded module (`compile::optimize` applies the precision): to
/// f32 accuracy for `bf16-weights` (exact products), within the f16 sums' bound for `f16`.
#[test]
fn half_precisions_match_the_rounded_reference_through_the_launcher() {
    use xla_aot::ir::Precision;
    let dir = scratch("cuda-emulated-half");
    fake_driver(&dir, "cc", &[]);
    for ex in EXAMPLES {
        let m = load_spec(&repo().join("examples").join(ex).join("model.yaml"))
            .unwrap()
            .module;
        for p in [Precision::F16, Precision::Bf16Weights] {
            let opts = CompileOptions {
                precision: Some(p),
                ..common::default_options()
            };
            let rounded = xla_aot::compile::optimize(&m, &opts).unwrap().module;
            let expected_of = |inputs: &[xla_aot::ir::Literal]| {
                xla_aot::interp::evaluate(&rounded, inputs).unwrap()
            };
            for (i, (actual, e)) in run_emulated(&dir, &m, &opts, &expected_of)
                .iter()
                .enumerate()
            {
                if p == Precision::F16 {
                    let err = common::rel_to_max(actual, e);
                    assert!(err <= F16_SUMS_BOUND, "{ex} {p} output {i}: {err:.3e}");
                } else if let Err(msg) = common::check_close(actual, e) {
                    panic!("{ex} {p} output {i} through the CUDA launcher: {msg}");
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `scripts/gpu-check.sh`, the check for a machine with a GPU, run here against the fake driver
/// with emulated kernels: it compiles, links and runs every example and compares with the golden
/// outputs and the CPU path. Without a driver it says so and exits 2.
#[test]
fn gpu_check_script_runs_every_example_on_the_emulating_fake_driver() {
    let dir = scratch("cuda-gpu-check");
    fake_driver(&dir, "cc", &[]);
    let mut libs = Vec::new();
    for ex in EXAMPLES {
        let m = load_spec(&repo().join("examples").join(ex).join("model.yaml"))
            .unwrap()
            .module;
        // The script compiles with the CLI's full pipeline.
        let full = CompileOptions::default();
        libs.push(grid_kernels(&m, &dir, &full).display().to_string());
    }
    let script = |driver: &Path| {
        Command::new("bash")
            .arg(repo().join("scripts/gpu-check.sh"))
            .arg("x86_64")
            .env("XLA_AOT", env!("CARGO_BIN_EXE_xla-aot"))
            .env("GPU_CHECK_ITERS", "2")
            .env("LD_LIBRARY_PATH", driver)
            .env("FAKE_CUDA_KERNELS", libs.join(":"))
            .env("FAKE_CUDA_LOG", dir.join("gpu-check.log"))
            .env_remove("FAKE_CUDA_FAIL")
            .output()
            .unwrap()
    };
    let out = script(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("gpu-check: 4 of 4 examples match on the GPU (cuda-x86_64)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("kernel  0 tiny_transformer_k0_ln1_sum_entry"),
        "{stdout}"
    );
    assert!(!stdout.contains("MISMATCH"), "{stdout}");
    if !real_driver_installed() {
        let empty = scratch("cuda-gpu-check-none");
        let out = script(&empty);
        assert_eq!(out.status.code(), Some(2), "no driver: exit status 2");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("no NVIDIA driver or GPU"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_dir_all(&empty);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_caller_supplied_device_arena_is_used_and_not_freed() {
    let dir = scratch("cuda-own-arena");
    fake_driver(&dir, "cc", &[]);
    let (m, a) = compile("mlp", "cuda-x86_64");
    let exe = harness(&a, &dir, "cc");
    let (stdout, log) = run_harness(&exe, &[], &m, "own-arena", Some(&dir), &[]);
    assert_eq!(stdout, OK_RUN_STDOUT);
    assert_eq!(log, expected_log(a.ptx.as_ref().unwrap(), true));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether this machine has a real NVIDIA driver (then "no driver" cannot be observed).
fn real_driver_installed() -> bool {
    Command::new("sh")
        .args(["-c", "ldconfig -p | grep -q 'libcuda.so.1 '"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[test]
fn driver_failures_are_statuses_with_the_drivers_error_names() {
    let dir = scratch("cuda-errors");
    fake_driver(&dir, "cc", &[]);
    let (m, a) = compile("simplenet", "cuda-x86_64");
    let exe = harness(&a, &dir, "cc");
    let cases = [
        (
            "cuInit=100",
            "init -> -5 CUDA_ERROR_NO_DEVICE",
            vec!["cuInit -> 100 (injected)"],
        ),
        (
            "cuMemAlloc_v2=2",
            "init -> -5 CUDA_ERROR_OUT_OF_MEMORY",
            // The pushed context is popped before init returns; destroy releases the rest.
            vec![
                "cuMemAlloc_v2 -> 2 (injected)",
                "cuCtxPopCurrent",
                "cuCtxPushCurrent",
                "cuModuleUnload",
                "cuCtxPopCurrent",
                "cuDevicePrimaryCtxRelease 0",
            ],
        ),
        (
            "cuLaunchKernel=719",
            "run -> -5 CUDA_ERROR_LAUNCH_FAILED",
            vec![
                "cuLaunchKernel -> 719 (injected)",
                "cuCtxPopCurrent",
                "cuCtxPushCurrent",
                "cuMemFree",
                "cuModuleUnload",
            ],
        ),
        (
            "cuModuleLoadData=12345",
            "init -> -5 CUDA_ERROR",
            vec!["cuModuleLoadData -> 12345 (injected)", "cuCtxPopCurrent"],
        ),
    ];
    for (fail, line, calls) in cases {
        let (stdout, log) = run_harness(
            &exe,
            &[],
            &m,
            "run",
            Some(&dir),
            &[("FAKE_CUDA_FAIL", fail)],
        );
        assert!(
            stdout.lines().any(|l| l == line),
            "{fail}: expected `{line}` in\n{stdout}"
        );
        assert!(stdout.ends_with("destroyed\n"), "{fail}: {stdout}");
        let logged: Vec<&str> = log.lines().collect();
        let at = logged
            .iter()
            .position(|l| *l == calls[0])
            .unwrap_or_else(|| panic!("{fail}: `{}` not in\n{log}", calls[0]));
        for (i, want) in calls.iter().enumerate() {
            assert!(
                logged.get(at + i).is_some_and(|l| l.starts_with(want)),
                "{fail}: call {i} after the failure is not `{want}`:\n{log}"
            );
        }
        let pushes = log.lines().filter(|l| *l == "cuCtxPushCurrent").count();
        let pops = log.lines().filter(|l| *l == "cuCtxPopCurrent").count();
        assert_eq!(pushes, pops, "{fail}: every push is popped:\n{log}");
        assert!(!log.contains("without a current context"), "{fail}:\n{log}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_driver_or_entry_point_is_no_cuda_driver() {
    let dir = scratch("cuda-missing");
    fake_driver(&dir, "cc", &["-DOMIT_LAUNCH"]);
    let (m, a) = compile("simplenet", "cuda-x86_64");
    let exe = harness(&a, &dir, "cc");
    let (stdout, log) = run_harness(&exe, &[], &m, "run", Some(&dir), &[]);
    assert!(
        stdout.contains("init -> -4 the CUDA driver has no entry point cuLaunchKernel\n"),
        "{stdout}"
    );
    assert_eq!(
        log, "",
        "nothing is called in a driver that lacks an entry point"
    );
    if !real_driver_installed() {
        let empty = scratch("cuda-no-driver");
        let (stdout, _) = run_harness(&exe, &[], &m, "run", Some(&empty), &[]);
        assert!(
            stdout.contains("init -> -4 no CUDA driver (libcuda.so.1 could not be loaded)\n"),
            "{stdout}"
        );
        let _ = std::fs::remove_dir_all(&empty);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The acceptance check: the CLI builds an aarch64 library for Jetson Orin that links
/// with the cross C compiler and `-ldl` alone; under qemu (no driver) the app reports it, and
/// against an aarch64 build of the fake driver it runs the planned sequence.
#[test]
fn jetson_orin_library_links_with_the_cross_compiler_and_runs_under_qemu() {
    if common::one_target_per_pass(
        "jetson_orin_library_links_with_the_cross_compiler_and_runs_under_qemu",
    ) {
        return;
    }
    let dir = scratch("cuda-orin");
    let out = Command::new(env!("CARGO_BIN_EXE_xla-aot"))
        .args(["compile", "examples/simplenet/model.yaml", "--target"])
        .args(["jetson-orin", "--out-dir"])
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
    assert!(ptx.contains(".target sm_87"));
    let file = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "cd {} && ar x libsimplenet.a && od -An -j18 -N2 -tx1 cuda.o",
            dir.display()
        ))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&file.stdout).trim(),
        "b7 00",
        "the launcher is an aarch64 object (e_machine EM_AARCH64)"
    );
    let (compiler, runner) = common::toolchain(&Target::resolve("jetson-orin").unwrap());
    let (compiler, runner) = (
        compiler.as_str(),
        runner.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
    );
    let app = repo().join("examples/cuda-app/main.c");
    let exe = dir.join("app");
    cc(
        compiler,
        &[
            "-I",
            dir.to_str().unwrap(),
            app.to_str().unwrap(),
            dir.join("libsimplenet.a").to_str().unwrap(),
            "-ldl",
            "-lm",
            "-o",
            exe.to_str().unwrap(),
        ],
    );
    let mut cmd = Command::new(runner[0]);
    cmd.args(&runner[1..]).arg(&exe).current_dir(repo());
    cmd.env_remove("LD_LIBRARY_PATH");
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("no CUDA driver"), "{stdout}");
    assert!(stdout.contains("CPU"), "{stdout}");

    // The same library against the fake driver, built for aarch64.
    let (m, a) = compile("simplenet", "jetson-orin");
    fake_driver(&dir, compiler, &[]);
    let harness_exe = harness(&a, &dir, compiler);
    let (stdout, log) = run_harness(&harness_exe, &runner, &m, "run", Some(&dir), &[]);
    assert_eq!(stdout, OK_RUN_STDOUT);
    assert_eq!(log, expected_log(a.ptx.as_ref().unwrap(), false));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cuda_libraries_are_deterministic() {
    let (_, a) = compile("tiny_transformer", "cuda-x86_64");
    let (_, b) = compile("tiny_transformer", "cuda-x86_64");
    assert!(a.archive == b.archive, "two compiles give the same archive");
    assert_eq!(a.header, b.header);
    assert_eq!(a.manifest, b.manifest);
}

/// Compiles `m` (with C API dtypes) for `cuda-x86_64`, runs `inputs` (in the C API dtypes)
/// through the launcher on the emulating fake driver built in `dir`; returns the outputs in their
/// C API dtypes (or the harness's stderr when run failed), the driver's log, and the PTX module.
fn run_typed(
    dir: &Path,
    m: &xla_aot::ir::Module,
    inputs: &[xla_aot::ir::Literal],
) -> (Result<Vec<xla_aot::ir::Literal>, String>, String, PtxModule) {
    let opts = common::default_options();
    let t = Target::resolve("cuda-x86_64").unwrap();
    let a = compile_model(m, &t, &opts).unwrap();
    let exe = harness(&a, dir, "cc");
    let kernels = grid_kernels(m, dir, &opts);
    let c = &m.entry;
    let mut cmd = Command::new(&exe);
    cmd.arg("io")
        .arg(inputs.len().to_string())
        .arg(c.outputs.len().to_string());
    for (k, lit) in inputs.iter().enumerate() {
        assert_eq!(lit.dtype, m.input_dtype(k), "{}: input {k}", m.name);
        let p = dir.join(format!("in{k}.bin"));
        std::fs::write(&p, lit.bytes().unwrap()).unwrap();
        cmd.arg(&p).arg(lit.bytes().unwrap().len().to_string());
    }
    let shapes: Vec<_> = (c.outputs.iter()).map(|o| &c.inst(o.value).shape).collect();
    for (k, s) in shapes.iter().enumerate() {
        let bytes = s.element_count() * m.output_dtype(k).size_bytes();
        cmd.arg(dir.join(format!("out{k}.bin")))
            .arg(bytes.to_string());
    }
    let log = dir.join("typed.log");
    let _ = std::fs::remove_file(&log);
    let out = cmd
        .env("LD_LIBRARY_PATH", dir)
        .env("FAKE_CUDA_KERNELS", &kernels)
        .env("FAKE_CUDA_LOG", &log)
        .env_remove("FAKE_CUDA_FAIL")
        .output()
        .unwrap();
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    let outputs = if out.status.success() {
        Ok((shapes.iter().enumerate())
            .map(|(k, s)| xla_aot::ir::Literal {
                dtype: m.output_dtype(k),
                dims: s.dims.clone(),
                data: xla_aot::ir::LiteralData::Dense(
                    std::fs::read(dir.join(format!("out{k}.bin")))
                        .unwrap()
                        .into(),
                ),
            })
            .collect())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    };
    (outputs, log, a.ptx.unwrap())
}

/// The launches of a run in the fake driver's log: the planned ones, conversions included, in
/// plan order; and the copies in and out move the C API dtype's bytes.
fn check_typed_log(name: &str, p: &PtxModule, log: &str) {
    let launched: Vec<&str> = (log.lines())
        .filter_map(|l| l.strip_prefix("cuLaunchKernel "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    let planned: Vec<&str> = p.launches.iter().map(|l| l.entry.as_str()).collect();
    assert_eq!(launched, planned, "{name}: launches");
    for (k, (_, r)) in p.layout.inputs.iter().enumerate() {
        let line = format!("cuMemcpyHtoDAsync +{} {} ", r.offset, r.bytes);
        assert!(
            log.contains(&line),
            "{name}: input {k}: no `{line}` in\n{log}"
        );
    }
    for (k, (_, r)) in p.layout.outputs.iter().enumerate() {
        let line = format!("cuMemcpyDtoHAsync +{} {}", r.offset, r.bytes);
        assert!(
            log.contains(&line),
            "{name}: output {k}: no `{line}` in\n{log}"
        );
    }
}

/// ptxas (`XLA_AOT_PTXAS`, as `tests/ptx.rs` finds it) accepts `p`'s PTX for its SM; without the
/// variable, nothing is checked.
fn ptxas_accepts(name: &str, p: &PtxModule, dir: &Path) {
    let Some(ptxas) = std::env::var_os("XLA_AOT_PTXAS") else {
        return;
    };
    let file = dir.join(format!("{name}.ptx"));
    std::fs::write(&file, &p.ptx).unwrap();
    let out = Command::new(ptxas)
        .arg(format!("-arch={}", p.sm))
        .arg(&file)
        .arg("-o")
        .arg(dir.join(format!("{name}.cubin")))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: ptxas failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn typed_literal(
    dtype: xla_aot::ir::DType,
    dims: Vec<usize>,
    bytes: Vec<u8>,
) -> xla_aot::ir::Literal {
    xla_aot::ir::Literal {
        dtype,
        dims,
        data: xla_aot::ir::LiteralData::Dense(bytes.into()),
    }
}

/// Models of exact computations (negations, selects) in every C API dtype pair the device
/// converts, with their inputs: every float16 and bfloat16 bit pattern in and out; f32 values that
/// round (ties, subnormal halves, overflow, NaN) to float16 and bfloat16 outputs; int64, uint32,
/// uint8, int8, int16 and uint16 inputs at their extremes, and int64, int8, uint8, int16 and
/// uint16 outputs (low bits).
fn exact_typed_models() -> Vec<(xla_aot::ir::Module, Vec<xla_aot::ir::Literal>)> {
    use xla_aot::ir::DType;
    let module = |text: &str| {
        let m = xla_aot::ir::parse_module(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        xla_aot::ir::verify(&m).unwrap();
        m
    };
    let n = 1 << 16;
    let halves: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
    let identity = module(&format!(
        "HloModule halves, api_types=(f16, bf16) -> (f16, bf16)\n\nENTRY %main {{\n  %x = f32[{n}]{{0}} parameter(0)\n  %b = f32[{n}]{{0}} parameter(1)\n  %y = f32[{n}]{{0}} negate(%x)\n  %z = f32[{n}]{{0}} negate(%y)\n  %c = f32[{n}]{{0}} negate(%b)\n  %d = f32[{n}]{{0}} negate(%c)\n  ROOT %outputs = (f32[{n}]{{0}}, f32[{n}]{{0}}) tuple(%z, %d), names={{z,d}}\n}}\n"
    ));
    let halves_in = vec![
        typed_literal(DType::F16, vec![n], halves.clone()),
        typed_literal(DType::BF16, vec![n], halves),
    ];
    let mut v: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0 + 2f32.powi(-11),
        65519.99,
        65520.0,
        2f32.powi(-24),
        2f32.powi(-25),
        3.0 * 2f32.powi(-25),
        1e-30,
        f32::INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE / 4.0,
    ];
    let mut s = 0x1234_5678u32;
    while v.len() < 4096 {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        v.push(f32::from_bits(s));
    }
    let r = v.len();
    let rounding = module(&format!(
        "HloModule rounding, api_types=(_) -> (f16, bf16)\n\nENTRY %main {{\n  %x = f32[{r}]{{0}} parameter(0)\n  %y = f32[{r}]{{0}} negate(%x)\n  %z = f32[{r}]{{0}} negate(%y)\n  ROOT %outputs = (f32[{r}]{{0}}, f32[{r}]{{0}}) tuple(%z, %y), names={{h,b}}\n}}\n"
    ));
    let rounding_in = vec![xla_aot::ir::Literal::from_f32(vec![r], &v)];
    // int64 and uint32 in the i32 range, 8- and 16-bit integers at their extremes; the outputs
    // keep the low bits of max(a, c), max(b, u), min(b, u), max(p, q) and min(p, q).
    let ints = module(
        "HloModule ints, api_types=(i64, u8, i8, u32, i16, u16) -> (i64, i8, u8, i16, u16)\n\nENTRY %main {\n  %a = i32[4]{0} parameter(0)\n  %b = i32[4]{0} parameter(1)\n  %c = i32[4]{0} parameter(2)\n  %u = i32[4]{0} parameter(3)\n  %p = i32[4]{0} parameter(4)\n  %q = i32[4]{0} parameter(5)\n  %af = f32[4]{0} convert(%a)\n  %cf = f32[4]{0} convert(%c)\n  %bf = f32[4]{0} convert(%b)\n  %uf = f32[4]{0} convert(%u)\n  %ac = pred[4]{0} compare(%af, %cf), direction=GT\n  %bc = pred[4]{0} compare(%bf, %uf), direction=GT\n  %na = i32[4]{0} select(%ac, %a, %c)\n  %s = i32[4]{0} select(%bc, %b, %u)\n  %d = i32[4]{0} select(%bc, %u, %b)\n  %pf = f32[4]{0} convert(%p)\n  %qf = f32[4]{0} convert(%q)\n  %pc = pred[4]{0} compare(%pf, %qf), direction=GT\n  %e = i32[4]{0} select(%pc, %p, %q)\n  %f = i32[4]{0} select(%pc, %q, %p)\n  ROOT %outputs = (i32[4]{0}, i32[4]{0}, i32[4]{0}, i32[4]{0}, i32[4]{0}) tuple(%na, %s, %d, %e, %f), names={na,s,d,e,f}\n}\n",
    );
    let le = |v: &[i64], bytes: usize| -> Vec<u8> {
        v.iter()
            .flat_map(|x| x.to_le_bytes()[..bytes].to_vec())
            .collect()
    };
    let ints_in = vec![
        typed_literal(
            DType::I64,
            vec![4],
            le(&[7, -5, i32::MAX as i64, i32::MIN as i64], 8),
        ),
        typed_literal(DType::U8, vec![4], le(&[0, 1, 200, 255], 1)),
        typed_literal(DType::I8, vec![4], le(&[-128, 127, -1, 0], 1)),
        typed_literal(
            DType::U32,
            vec![4],
            le(&[0, 300, i32::MAX as i64, 65535], 4),
        ),
        typed_literal(DType::I16, vec![4], le(&[-32768, 32767, -1, 12345], 2)),
        typed_literal(DType::U16, vec![4], le(&[65535, 0, 40000, 1], 2)),
    ];
    vec![
        (identity, halves_in),
        (rounding, rounding_in),
        (ints, ints_in),
    ]
}

/// The C API dtypes on a CUDA target (`codegen/gpu/boundary.rs`): the device slots hold the
/// caller's bytes and conversion launches run before and after the model's kernels. Models of
/// exact computations in every converted dtype give the CPU entry points' bits (every float16
/// and bfloat16 pattern, rounding ties and overflow, integer extremes and low bits); the
/// launches and copies are the planned ones; an int64 or uint32 input outside the int32 range is
/// `BAD_ARGUMENT` with the launcher's message before anything is copied or launched; and ptxas
/// accepts the conversion kernels (with `XLA_AOT_PTXAS`).
#[test]
fn api_dtypes_convert_on_the_device_bit_for_bit_as_on_the_cpu() {
    use xla_aot::ir::DType;
    let dir = scratch("cuda-typed-exact");
    fake_driver(&dir, "cc", &[]);
    for (m, inputs) in exact_typed_models() {
        let want = xla_aot::compile::run_host(&m, &inputs).unwrap();
        let (got, log, p) = run_typed(&dir, &m, &inputs);
        let got = got.unwrap_or_else(|e| panic!("{}: {e}\n{log}", m.name));
        check_typed_log(&m.name, &p, &log);
        let converted = p.launches.iter().filter(|l| l.entry.contains("_convert_"));
        assert_eq!(converted.count(), p.layout.boundary.len(), "{}", m.name);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.dtype, w.dtype, "{} output {k}", m.name);
            assert!(
                g.bytes() == w.bytes(),
                "{} output {k}: the bits differ",
                m.name
            );
        }
        ptxas_accepts(&m.name, &p, &dir);
        if m.name == "ints" {
            for (k, bad) in [(0usize, 1i64 << 40), (3, 1 << 31)] {
                let mut bad_in = inputs.clone();
                let size = inputs[k].dtype.size_bytes();
                let mut b = inputs[k].bytes().unwrap().to_vec();
                b[..size].copy_from_slice(&bad.to_le_bytes()[..size]);
                bad_in[k] = typed_literal(inputs[k].dtype, vec![4], b);
                let (got, log, _) = run_typed(&dir, &m, &bad_in);
                let err = got.expect_err("an input out of the int32 range runs");
                assert!(
                    err.contains(&format!("status -3: {}", runtime_min::cuda::RANGE_MESSAGE)),
                    "input {k}: {err}"
                );
                assert!(
                    !log.contains("cuMemcpyHtoDAsync") && !log.contains("cuLaunchKernel"),
                    "input {k}: nothing is copied or launched:\n{log}"
                );
                assert!(matches!(inputs[k].dtype, DType::I64 | DType::U32));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// onnx_patterns' models with C API dtypes (`tests/onnx_patterns.rs` `TYPED_MODELS`: int64 token
/// ids → logits and an int64 ArgMax, a uint8 image → float and a bool mask, a float16 export,
/// bfloat16 weights) through the launcher on the emulating fake driver, from
/// `$XLA_AOT_ONNX_PATTERNS_DIR` (skipped without it): in the C API dtype and shape, integers and
/// bools equal to the CPU entry points' and to onnxruntime's, floats within the bounds
/// `onnx_patterns.rs` holds the CPU to.
#[test]
fn onnx_models_with_api_dtypes_match_the_cpu_and_onnxruntime_through_the_launcher() {
    use xla_aot::ir::DType;
    let Some(root) = std::env::var_os("XLA_AOT_ONNX_PATTERNS_DIR").map(PathBuf::from) else {
        eprintln!("skipped: XLA_AOT_ONNX_PATTERNS_DIR is not set (scripts/onnx_patterns.py)");
        return;
    };
    // `tests/onnx_patterns.rs`: f32 outputs within 1e-4 of the largest, float16 ones within an
    // ulp of float16 (onnxruntime rounds inside the graph, the compiler once at the output).
    let bound = |d: DType| match d {
        DType::F32 => 1e-4,
        DType::F16 | DType::BF16 => 2e-3,
        _ => 0.0,
    };
    let dir = scratch("cuda-typed-onnx");
    fake_driver(&dir, "cc", &[]);
    for name in ["tokens", "image_u8", "half", "bf16_weights"] {
        let d = root.join(name);
        let npys = |stem: &str| -> Vec<xla_aot::ir::Literal> {
            (0..)
                .map(|j| d.join(format!("{stem}_{j}.npy")))
                .take_while(|p| p.exists())
                .map(|p| common::npy(&p))
                .collect()
        };
        let (inputs, ort) = (npys("input"), npys("output"));
        let m = xla_aot::front::load_spec_with(
            &d.join(format!("{name}.onnx")),
            &xla_aot::front::inputs::InputOverrides::default(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .module;
        let cpu = xla_aot::compile::run_host(&m, &inputs).unwrap();
        let (got, log, p) = run_typed(&dir, &m, &inputs);
        let got = got.unwrap_or_else(|e| panic!("{name}: {e}\n{log}"));
        check_typed_log(name, &p, &log);
        ptxas_accepts(name, &p, &dir);
        for (k, g) in got.iter().enumerate() {
            for (what, w) in [("the CPU", &cpu[k]), ("onnxruntime", &ort[k])] {
                assert_eq!((g.dtype, &g.dims), (w.dtype, &w.dims), "{name} output {k}");
                let (a, e) = (g.to_f64_vec(), w.to_f64_vec());
                let scale = e.iter().fold(0.0f64, |m, x| m.max(x.abs()));
                let worst = (a.iter().zip(&e)).fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
                assert!(
                    worst <= bound(g.dtype) * scale,
                    "{name} output {k} ({}) against {what}: max error {worst:.3e}",
                    g.dtype
                );
                eprintln!(
                    "ok    {name} output {k} {}{:?} against {what}: max error {:.2e} of max |y|, bits {}",
                    g.dtype,
                    g.dims,
                    worst / scale.max(f64::MIN_POSITIVE),
                    if g.bytes() == w.bytes() {
                        "equal"
                    } else {
                        "differ"
                    }
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
