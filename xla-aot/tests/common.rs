//! Helpers shared by the integration tests: repository paths, golden cases, comparisons.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use xla_aot::ir::{DType, Literal, Module};
use xla_aot::util::npy::read_npy;

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
