//! HLO text exported from JAX (`scripts/export_jax.py` → `tests/jax/<case>/`) imports, and both
//! the reference interpreter and code compiled for this machine reproduce JAX's outputs
//! (max error ≤ 1e-4 of the largest expected magnitude; integers and booleans exactly).

mod common;

use common::{npy, repo};
use std::path::Path;
use xla_aot::front::load_spec;
use xla_aot::ir::{DType, Literal};

/// Cases whose import must fail, with a piece of the message: what xla-aot refuses, clearly.
const EXPECTED_ERRORS: &[(&str, &str)] = &[(
    // A start index that is a run-time input: xla-aot compiles static offsets only.
    "dynamic_slice_runtime",
    "on i32 values computed at run time is not supported",
)];

/// Largest error allowed, relative to the largest |expected| of an output (the bar).
const MAX_REL_ERROR: f64 = 1e-4;

/// Max |a - e| / max|e|, or a message for a dtype/shape/integer mismatch.
fn rel_error(actual: &Literal, expected: &Literal) -> Result<f64, String> {
    if actual.dtype != expected.dtype || actual.dims != expected.dims {
        return Err(format!(
            "got {}{:?}, expected {}{:?}",
            actual.dtype, actual.dims, expected.dtype, expected.dims
        ));
    }
    if actual.dtype != DType::F32 {
        return if actual.bytes() == expected.bytes() {
            Ok(0.0)
        } else {
            Err("integer/boolean values differ".into())
        };
    }
    let (a, e) = (actual.to_f32_vec().unwrap(), expected.to_f32_vec().unwrap());
    let scale = e
        .iter()
        .fold(0.0f64, |m, &x| m.max((x as f64).abs()))
        .max(1e-30);
    let mut worst = 0.0f64;
    for (x, y) in a.iter().zip(&e) {
        if x.is_nan() != y.is_nan() {
            return Err(format!("NaN mismatch: got {x}, expected {y}"));
        }
        if !x.is_nan() {
            worst = worst.max((*x as f64 - *y as f64).abs() / scale);
        }
    }
    Ok(worst)
}

fn cases() -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(repo().join("tests/jax"))
        .expect("tests/jax exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("model.hlo.txt").exists())
        .collect();
    v.sort();
    v
}

fn spec_of(dir: &Path) -> std::path::PathBuf {
    let yaml = dir.join("spec.yaml");
    if yaml.exists() {
        yaml
    } else {
        dir.join("model.hlo.txt")
    }
}

#[test]
fn jax_exports_match_jax_interpreted_and_compiled() {
    let cases = cases();
    assert!(
        cases.len() >= 40,
        "expected the JAX export set, found {}",
        cases.len()
    );
    let mut failures = Vec::new();
    let mut worst = (0.0f64, String::new());
    for dir in &cases {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let expected_error = EXPECTED_ERRORS.iter().find(|(n, _)| *n == name);
        let model = match (load_spec(&spec_of(dir)), expected_error) {
            (Err(e), Some((_, msg))) => {
                let text = e.to_string();
                if !text.contains(msg) || !text.contains("model.hlo.txt:") {
                    failures.push(format!(
                        "{name}: expected an error with `{msg}`, got:\n{text}"
                    ));
                }
                continue;
            }
            (Ok(_), Some(_)) => {
                failures.push(format!("{name}: imported, but xla-aot should refuse it"));
                continue;
            }
            (Ok(m), None) => m,
            (Err(e), None) => {
                failures.push(format!("{name}: import failed:\n{e}"));
                continue;
            }
        };
        let m = &model.module;
        let inputs: Vec<Literal> = (0..m.entry.parameters().len())
            .map(|i| npy(&dir.join(format!("input_{i}.npy"))))
            .collect();
        let reference = match xla_aot::interp::evaluate(m, &inputs) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{name}: interpreter: {e}"));
                continue;
            }
        };
        let compiled = match xla_aot::compile::run_host(m, &inputs) {
            Ok(v) => v,
            Err(e) => {
                failures.push(format!("{name}: compiled: {e}"));
                continue;
            }
        };
        for (i, (r, c)) in reference.iter().zip(&compiled).enumerate() {
            let expected = npy(&dir.join(format!("output_{i}.npy")));
            for (what, v) in [("interpreter", r), ("compiled", c)] {
                match rel_error(v, &expected) {
                    Ok(e) if e <= MAX_REL_ERROR => {
                        if e > worst.0 {
                            worst = (e, format!("{name}/output_{i} ({what})"));
                        }
                    }
                    Ok(e) => failures.push(format!("{name}/output_{i} ({what}): error {e:.2e}")),
                    Err(msg) => failures.push(format!("{name}/output_{i} ({what}): {msg}")),
                }
            }
        }
        if reference.len() != m.entry.outputs.len() {
            failures.push(format!("{name}: output count"));
        }
    }
    eprintln!(
        "{} JAX cases; worst error {:.2e} of the largest value ({})",
        cases.len(),
        worst.0,
        worst.1
    );
    assert!(
        failures.is_empty(),
        "JAX mismatches:\n{}",
        failures.join("\n")
    );
}

/// A sample of the JAX exports, optimised and compiled for aarch64 (run under qemu) and for AVX2
/// (through the C harness, like every compiled-code test), against JAX's outputs.
#[test]
fn a_sample_of_jax_exports_matches_on_aarch64_and_avx2() {
    const SAMPLE: &[&str] = &[
        "mlp",
        "conv_nhwc",
        "conv_depthwise",
        "softmax_axis1",
        "argmax_axis1",
        "gelu_erf",
        "layer_norm",
        "max_pool_3x3_same",
        "logical",
        "iota_add",
    ];
    let mut failures = Vec::new();
    for target in ["aarch64-neon", "x86_64-avx2"] {
        let t = xla_aot::target::Target::resolve(target).unwrap();
        if t.arch == xla_aot::target::Arch::X86_64 && !t.runs_here() {
            eprintln!("note: this CPU cannot run {target}; skipped");
            continue;
        }
        for name in SAMPLE {
            let dir = repo().join("tests/jax").join(name);
            let m = load_spec(&spec_of(&dir)).unwrap().module;
            let inputs: Vec<Literal> = (0..m.entry.parameters().len())
                .map(|i| npy(&dir.join(format!("input_{i}.npy"))))
                .collect();
            let outs = common::run_compiled(&m, &t, &inputs, &format!("jax-{name}-{target}"));
            for (i, o) in outs.iter().enumerate() {
                let expected = npy(&dir.join(format!("output_{i}.npy")));
                match rel_error(o, &expected) {
                    Ok(e) if e <= MAX_REL_ERROR => {}
                    Ok(e) => failures.push(format!("{name}/output_{i} on {target}: error {e:.2e}")),
                    Err(msg) => failures.push(format!("{name}/output_{i} on {target}: {msg}")),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
