//! ONNX's nine "light" architectures (alexnet, densenet121, inception_v1/v2, resnet50,
//! shufflenet, squeezenet, vgg19, zfnet512: opset 9, IR version 3, every initializer also a graph
//! input) with seeded random weights, compiled through the normal path (`front::load_spec`, then
//! `compile::run_host`) and compared with onnxruntime: max |a - e| <= [`REL_OF_MAX`] × max |e|.
//! squeezenet and shufflenet also run compiled for aarch64-neon under qemu.
//!
//! The models come from `scripts/onnx_light_models.py`, written to `$XLA_AOT_ONNX_LIGHT_DIR`
//! (`scripts/test.sh` writes them to `target/onnx-light` once and sets the variable). With the
//! variable set the data must exist; without it the tests say they are skipped.
//! `XLA_AOT_ONNX_LIGHT_ONLY=name,...` runs only the named models.

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;
use xla_aot::ir::Literal;

/// The bound: the worst element error, relative to the output's largest magnitude.
const REL_OF_MAX: f64 = 1e-4;

/// A model whose import and compile take longer than this is reported (these are big models: a
/// regression here is a compile-time problem worth seeing in the log).
const SLOW_COMPILE_S: f64 = 60.0;

const MODELS: &[&str] = &[
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
];

/// Run compiled for aarch64-neon under qemu too.
const AARCH64: &[&str] = &["squeezenet", "shufflenet"];

/// Compiled into a library for the host too: models whose large weights (packed GEMM panels of
/// fully connected layers, packed convolution kernels) go into the library's data object.
const LIBRARY: &[&str] = &["resnet50", "bvlc_alexnet"];

fn data_dir() -> Option<PathBuf> {
    let Some(d) = std::env::var_os("XLA_AOT_ONNX_LIGHT_DIR") else {
        eprintln!(
            "onnx light model tests skipped: XLA_AOT_ONNX_LIGHT_DIR is not set (run scripts/onnx_light_models.py --out DIR and set it to DIR, or use scripts/test.sh)"
        );
        return None;
    };
    let d = PathBuf::from(d);
    for m in MODELS {
        assert!(
            model_path(&d, m).exists(),
            "XLA_AOT_ONNX_LIGHT_DIR={} lacks {m}; run scripts/onnx_light_models.py --out {}",
            d.display(),
            d.display()
        );
    }
    Some(d)
}

fn model_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(name).join(format!("{name}.onnx"))
}

fn selected() -> Vec<&'static str> {
    match std::env::var("XLA_AOT_ONNX_LIGHT_ONLY") {
        Ok(s) => MODELS
            .iter()
            .copied()
            .filter(|m| s.split(',').any(|x| x.trim() == *m))
            .collect(),
        Err(_) => MODELS.to_vec(),
    }
}

/// Worst |a - e| over max |e|.
fn rel_error(got: &Literal, want: &Literal) -> Result<f64, String> {
    if got.dims != want.dims || got.dtype != want.dtype {
        return Err(format!(
            "got {}{:?}, expected {}{:?}",
            got.dtype, got.dims, want.dtype, want.dims
        ));
    }
    let (a, e) = (got.to_f32_vec().unwrap(), want.to_f32_vec().unwrap());
    let scale = e.iter().fold(0.0f64, |m, &x| m.max(x.abs() as f64));
    let mut worst = 0.0f64;
    for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
        let d = (x as f64 - y as f64).abs();
        if d.is_nan() {
            return Err(format!("element {i}: got {x}, expected {y}"));
        }
        worst = worst.max(d);
    }
    Ok(worst / scale.max(f64::MIN_POSITIVE))
}

/// Imports a light model through the normal path and returns the module and its input/output.
fn load(dir: &Path, name: &str) -> (xla_aot::ir::Module, Literal, Literal) {
    let path = model_path(dir, name);
    let model = xla_aot::front::load_spec(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let m = model.module;
    assert_eq!(
        m.entry.parameters().len(),
        1,
        "{name}: the IR-3 initializers listed as graph inputs must be weights, not inputs"
    );
    let x = common::npy(&dir.join(name).join("input_0.npy"));
    let y = common::npy(&dir.join(name).join("output_0.npy"));
    (m, x, y)
}

#[test]
fn light_models_match_onnxruntime() {
    let Some(dir) = data_dir() else { return };
    let mut failures = Vec::new();
    for name in selected() {
        let t = Instant::now();
        let (m, x, y) = load(&dir, name);
        let import_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let outs = match xla_aot::compile::run_host(&m, &[x]) {
            Ok(o) => o,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let run_s = t.elapsed().as_secs_f64();
        let slow = if import_s + run_s > SLOW_COMPILE_S {
            " SLOW"
        } else {
            ""
        };
        match rel_error(&outs[0], &y) {
            Ok(r) if r <= REL_OF_MAX => println!(
                "ok    {name}: max error {r:.2e} of max |y| (import {import_s:.1} s, compile and run {run_s:.1} s){slow}"
            ),
            Ok(r) => failures.push(format!(
                "{name}: max error {r:.2e} of max |y| exceeds {REL_OF_MAX:e}"
            )),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn light_models_run_on_aarch64_under_qemu() {
    let Some(dir) = data_dir() else { return };
    let have = |tool: &str| {
        std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    assert!(
        have("qemu-aarch64") && have("aarch64-linux-gnu-gcc"),
        "qemu-aarch64 and aarch64-linux-gnu-gcc are required with XLA_AOT_ONNX_LIGHT_DIR set (install them as scripts/test.sh does)"
    );
    let target = xla_aot::target::Target::resolve("aarch64-neon").unwrap();
    for name in selected().into_iter().filter(|m| AARCH64.contains(m)) {
        let t = Instant::now();
        let (m, x, y) = load(&dir, name);
        let outs = common::run_compiled(&m, &target, &[x], &format!("onnx-light-{name}"));
        let r = rel_error(&outs[0], &y).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            r <= REL_OF_MAX,
            "{name} on aarch64-neon: max error {r:.2e} of max |y| exceeds {REL_OF_MAX:e}"
        );
        println!(
            "ok    {name} (aarch64-neon under qemu): max error {r:.2e} of max |y| ({:.1} s)",
            t.elapsed().as_secs_f64()
        );
    }
}

#[test]
fn light_model_libraries_with_a_weights_object_match_onnxruntime() {
    let Some(dir) = data_dir() else { return };
    let target = xla_aot::target::Target::resolve("x86_64-avx2").unwrap();
    for name in selected().into_iter().filter(|m| LIBRARY.contains(m)) {
        let t = Instant::now();
        let (m, x, y) = load(&dir, name);
        let outs = common::run_compiled(&m, &target, &[x], &format!("onnx-light-lib-{name}"));
        let r = rel_error(&outs[0], &y).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            r <= REL_OF_MAX,
            "{name} as a library: max error {r:.2e} of max |y| exceeds {REL_OF_MAX:e}"
        );
        println!(
            "ok    {name} (library for x86_64-avx2): max error {r:.2e} of max |y| ({:.1} s)",
            t.elapsed().as_secs_f64()
        );
    }
}
