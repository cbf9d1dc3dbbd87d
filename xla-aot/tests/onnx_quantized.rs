//! Quantized ONNX models as onnxruntime's own quantizer writes them (`quantize_static` QDQ with
//! uint8 and int8 activations and the QOperator format with its `com.microsoft` ops, on onnx's
//! light squeezenet and shufflenet; `quantize_dynamic` on an MLP), compiled for the host and
//! compared with onnxruntime's int8 kernels: max |ours - onnxruntime| within the number of
//! output quantization steps each case's `bound.txt` allows (or a bound relative to the largest
//! output for a float output), and the same top-1 class.
//!
//! The models come from `scripts/onnx_quantized.py`, written to `$XLA_AOT_ONNX_QUANT_DIR`
//! (`scripts/test.sh` sets it); without the variable the test says it is skipped. xla-aot
//! computes between dequantization and quantization in f32 (`front/onnx/quant.rs`), so a value
//! on a rounding boundary can land one step away from onnxruntime's integer arithmetic, and such
//! steps compound through deep networks: the bounds say by how much, per case.

mod common;

use std::path::{Path, PathBuf};
use xla_aot::front::onnx::{ImportOptions, import_file_with};

/// Cases `scripts/onnx_quantized.py` writes.
const CASES: usize = 6;

fn data_dir() -> Option<PathBuf> {
    let Some(d) = std::env::var_os("XLA_AOT_ONNX_QUANT_DIR") else {
        eprintln!(
            "onnx quantized-model tests skipped: XLA_AOT_ONNX_QUANT_DIR is not set (run scripts/onnx_quantized.py --out DIR and set it, or use scripts/test.sh)"
        );
        return None;
    };
    Some(PathBuf::from(d))
}

/// The largest accepted |ours - onnxruntime| for outputs whose largest magnitude is `max`.
fn bound(dir: &Path, max: f64) -> f64 {
    let text = std::fs::read_to_string(dir.join("bound.txt")).unwrap();
    let f: Vec<&str> = text.split_whitespace().collect();
    match f.as_slice() {
        ["steps", n, step] => n.parse::<f64>().unwrap() * step.parse::<f64>().unwrap() * 1.0001,
        ["rel", r] => r.parse::<f64>().unwrap() * max,
        _ => panic!("{}: bad bound.txt `{text}`", dir.display()),
    }
}

fn argmax(v: &[f64]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

fn run(dir: &Path, name: &str) -> Result<String, String> {
    let path = dir.join(format!("{name}.onnx"));
    let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    let m = import_file_with(&path, &bytes, name, &ImportOptions::default())
        .map_err(|e| e.to_string())?;
    let x = common::npy(&dir.join("input_0.npy"));
    let want = common::npy(&dir.join("output_0.npy"));
    let got = xla_aot::compile::run_host(&m, &[x]).map_err(|e| format!("compile: {e}"))?;
    let (g, w) = (got[0].to_f64_vec(), want.to_f64_vec());
    if g.len() != w.len() {
        return Err(format!("{} values, expected {}", g.len(), w.len()));
    }
    let max = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let worst = g
        .iter()
        .zip(&w)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    let differ = g.iter().zip(&w).filter(|(a, b)| a != b).count();
    let limit = bound(dir, max);
    if worst > limit {
        return Err(format!("max error {worst:.3e} over the bound {limit:.3e}"));
    }
    // Top-1 per row of the last dim.
    let row = *got[0].dims.last().unwrap_or(&1);
    for (r, (gr, wr)) in g.chunks(row).zip(w.chunks(row)).enumerate() {
        if argmax(gr) != argmax(wr) {
            return Err(format!(
                "row {r}: top-1 {} where onnxruntime has {}",
                argmax(gr),
                argmax(wr)
            ));
        }
    }
    Ok(format!(
        "max error {worst:.3e} (bound {limit:.3e}), {differ} of {} values differ",
        w.len()
    ))
}

#[test]
fn models_quantized_by_onnxruntime_match_its_int8_kernels() {
    let Some(root) = data_dir() else { return };
    common::run_cases(&root, CASES, run);
}

/// The QDQ squeezenet (uint8 activations) compiled for aarch64, whose integer convolutions take
/// `sdot` on `aarch64-a78` and `smull`/`sadalp` on `aarch64-neon` (`cpu/quad_dot.rs`), run under
/// `qemu-aarch64` (aarch64-neon on an emulated Cortex-A72, without dotprod): within the bound of
/// onnxruntime as on x86, and bit for bit x86's outputs where this CPU runs the VNNI kernels (all
/// sum the same integers exactly and round once; the f32 code around them does the same
/// operations in the same order).
#[test]
fn squeezenet_qdq_on_aarch64_equals_x86() {
    use xla_aot::target::Target;
    let Some(root) = data_dir() else { return };
    let dir = root.join("squeezenet_qdq_u8");
    let path = dir.join("squeezenet_qdq_u8.onnx");
    let bytes = std::fs::read(&path).unwrap();
    let m = import_file_with(
        &path,
        &bytes,
        "squeezenet_qdq_u8",
        &ImportOptions::default(),
    )
    .unwrap();
    let x = common::npy(&dir.join("input_0.npy"));
    let want = common::npy(&dir.join("output_0.npy")).to_f64_vec();
    let max = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let vnni = Target::resolve("x86_64-avx512-vnni").unwrap();
    let x86 = vnni
        .runs_here()
        .then(|| common::run_compiled(&m, &vnni, std::slice::from_ref(&x), "quant-sqz-vnni"));
    let mut opts = common::default_options();
    for (name, instruction, cpu) in [
        ("aarch64-a78", "sdot", None),
        ("aarch64-neon", "sadalp", Some("cortex-a72")),
    ] {
        let t = Target::resolve(name).unwrap();
        opts.codegen.assembly = true;
        let asm = xla_aot::compile::compile_model(&m, &t, &opts)
            .unwrap()
            .assembly
            .unwrap_or_default();
        assert!(
            asm.contains(instruction),
            "{name}: the integer convolutions took no {instruction}"
        );
        opts.codegen.assembly = false;
        let tag = format!("quant-sqz-{name}");
        let runs = [(None, cpu, false)];
        let arm =
            common::run_compiled_emulated(&m, &t, std::slice::from_ref(&x), &tag, &opts, &runs)
                .remove(0)
                .1
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        let g = arm[0].to_f64_vec();
        let worst = g
            .iter()
            .zip(&want)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= bound(&dir, max),
            "{name}: max error {worst:.3e} over the bound"
        );
        let Some(x86) = &x86 else {
            eprintln!("this CPU has no AVX-512 VNNI: the x86 comparison is skipped");
            continue;
        };
        let (a, b) = (arm[0].to_f32_vec().unwrap(), x86[0].to_f32_vec().unwrap());
        let same = a
            .iter()
            .zip(&b)
            .filter(|(p, q)| p.to_bits() == q.to_bits())
            .count();
        eprintln!(
            "squeezenet_qdq_u8: {name} max error {worst:.3e} vs onnxruntime; {same} of {} values have x86 VNNI's bits",
            a.len()
        );
        assert_eq!(same, a.len(), "{name} differs from x86_64-avx512-vnni");
    }
}

/// The QDQ squeezenet compiled for the x86-64 targets without VNNI, whose integer convolutions
/// take `vpmaddwd` (`cpu/quad_dot.rs`: zmm on `x86_64-avx512`, xmm on `x86_64`) or, on
/// `x86_64-avx2`, `vpmaddubsw` on signs (onnxruntime's weights are symmetric, no −128) and run
/// here: within the bound of onnxruntime, and bit for bit the outputs of
/// `x86_64-avx512-vnni` where this CPU runs it (the same exact integer sums, rounded once).
#[test]
fn squeezenet_qdq_on_x86_without_vnni_equals_vnni() {
    use xla_aot::target::Target;
    let Some(root) = data_dir() else { return };
    let dir = root.join("squeezenet_qdq_u8");
    let path = dir.join("squeezenet_qdq_u8.onnx");
    let bytes = std::fs::read(&path).unwrap();
    let m = import_file_with(
        &path,
        &bytes,
        "squeezenet_qdq_u8",
        &ImportOptions::default(),
    )
    .unwrap();
    let x = common::npy(&dir.join("input_0.npy"));
    let want = common::npy(&dir.join("output_0.npy")).to_f64_vec();
    let max = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let vnni = Target::resolve("x86_64-avx512-vnni").unwrap();
    let reference = vnni
        .runs_here()
        .then(|| common::run_compiled(&m, &vnni, std::slice::from_ref(&x), "quant-sqz-vnni-x86"));
    let mut opts = common::default_options();
    for (name, instruction, reg) in [
        ("x86_64-avx512", "vpmaddwd", "zmm"),
        ("x86_64-avx2", "vpmaddubsw", "ymm"),
        ("x86_64", "pmaddwd", "xmm"),
    ] {
        let t = Target::resolve(name).unwrap();
        opts.codegen.assembly = true;
        let asm = xla_aot::compile::compile_model(&m, &t, &opts)
            .unwrap()
            .assembly
            .unwrap_or_default();
        assert!(
            asm.lines()
                .any(|l| l.contains(instruction) && l.contains(reg)),
            "{name}: the integer convolutions took no {instruction} on {reg}"
        );
        opts.codegen.assembly = false;
        if !t.runs_here() {
            eprintln!("this CPU does not run {name}: its code is compiled, not run");
            continue;
        }
        let got = common::run_compiled(
            &m,
            &t,
            std::slice::from_ref(&x),
            &format!("quant-sqz-{name}"),
        );
        let g = got[0].to_f64_vec();
        let worst = g
            .iter()
            .zip(&want)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= bound(&dir, max),
            "{name}: max error {worst:.3e} over the bound"
        );
        let Some(reference) = &reference else {
            eprintln!("this CPU has no AVX-512 VNNI: the comparison with it is skipped");
            continue;
        };
        let (a, b) = (
            got[0].to_f32_vec().unwrap(),
            reference[0].to_f32_vec().unwrap(),
        );
        let same = a
            .iter()
            .zip(&b)
            .filter(|(p, q)| p.to_bits() == q.to_bits())
            .count();
        eprintln!(
            "squeezenet_qdq_u8: {name} max error {worst:.3e} vs onnxruntime; {same} of {} values have x86_64-avx512-vnni's bits",
            a.len()
        );
        assert_eq!(same, a.len(), "{name} differs from x86_64-avx512-vnni");
    }
}
