//! Quantized ONNX models as onnxruntime's own quantizer writes them (`quantize_static` QDQ with
//! uint8 and int8 activations and the QOperator format with its `com.microsoft` ops, on onnx's
//! light squeezenet and shufflenet, and on the four examples; `quantize_dynamic` on an MLP;
//! hand-built QDQ Add, Mul and AveragePool groups on every pair of 8-bit integers, which must
//! match exactly; squeezenet's logits without its Softmax; the forms of PyTorch QAT exports,
//! uint16 activations and int4 weights), compiled for the host and compared with onnxruntime's
//! int8 kernels (`session.qdqisint8allowed=1`: int8 activations too): max |ours - onnxruntime|
//! within the number of output quantization steps each case's `bound.txt` allows (or a bound
//! relative to the largest output for a float output), and the same top-1 class. One case,
//! `saturating_conv_qdq_u8`, compares with the ONNX definition computed in numpy instead
//! (exact int32 sums, one rounding): a QDQ convolution whose u8·s8 pair sums pass 32767.
//!
//! The models come from `scripts/onnx_quantized.py`, written to `$XLA_AOT_ONNX_QUANT_DIR`
//! (`scripts/test.sh` sets it); without the variable the test says it is skipped. Where the
//! references come from, and why: onnxruntime's u8·s8 kernel on x86-64 with AVX2 but without
//! VNNI (`vpmaddubsw`) saturates its int16 pair sums, so its outputs move by steps where ours,
//! exact, do not, and its float kernels (the calibration that sets the models' scales) differ
//! between SSE, AVX2 and AVX-512. The script therefore runs itself under `qemu-x86_64 -cpu
//! Nehalem` on an x86-64 host (SSE4.2, no AVX: MLAS's SSE2 kernel, exact int32 sums as VNNI's;
//! qemu's CPUID and arithmetic are the emulated CPU's), on one onnxruntime thread: the files are
//! the same bytes on every x86-64 host, and the integer results are the exact ones on AVX2-only
//! machines too. Most cases match exactly; where onnxruntime itself computes in float (uint16
//! activations, int4 weights) a value on a rounding boundary can land a step away, and such
//! steps compound through deep networks: the bounds say by how much, per case.

mod common;

use std::path::{Path, PathBuf};
use xla_aot::front::onnx::{ImportOptions, import_file_with};

/// Cases `scripts/onnx_quantized.py` writes.
const CASES: usize = 22;

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
    let xs: Vec<_> = (0..)
        .map(|j| dir.join(format!("input_{j}.npy")))
        .take_while(|p| p.exists())
        .map(|p| common::npy(&p))
        .collect();
    let want = common::npy(&dir.join("output_0.npy"));
    let got = xla_aot::compile::run_host(&m, &xs).map_err(|e| format!("compile: {e}"))?;
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

/// The case that shows onnxruntime's saturating difference, `saturating_conv_qdq_u8` (the main
/// test compiles it and requires the numpy result exactly): onnxruntime's own output, written
/// beside it by the same script (`onnxruntime.npy`: its SSE2 kernel under the emulated CPU, or
/// Arm's, both exact), has the numpy result's bits, so the formula there (f32 multiplier
/// `(x_scale · w_scale) / y_scale`, round half to even, saturate) is onnxruntime's; and
/// onnxruntime on an emulated AVX2 CPU (`onnxruntime_haswell.npy`, written where the script ran
/// under qemu) is many steps away, which is why no test compares with onnxruntime run on the
/// machine that runs the tests.
#[test]
fn saturating_case_is_onnxruntimes_exact_kernel_not_its_avx2_one() {
    let Some(root) = data_dir() else { return };
    let dir = root.join("saturating_conv_qdq_u8");
    let want = common::npy(&dir.join("output_0.npy")).to_f64_vec();
    let ort = common::npy(&dir.join("onnxruntime.npy")).to_f64_vec();
    let differ = want.iter().zip(&ort).filter(|(a, b)| a != b).count();
    assert_eq!(
        differ,
        0,
        "onnxruntime's output differs from the ONNX definition in {differ} of {} values: were the references written on a CPU whose onnxruntime kernels saturate (scripts/onnx_quantized.py --native on AVX2 without VNNI)?",
        want.len()
    );
    let haswell = dir.join("onnxruntime_haswell.npy");
    if !haswell.exists() {
        eprintln!("no onnxruntime_haswell.npy (references not written under qemu-x86_64): skipped");
        return;
    }
    let avx2 = common::npy(&haswell).to_f64_vec();
    // The output step is 1.0 (bound.txt).
    let worst = want
        .iter()
        .zip(&avx2)
        .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
    let differ = want.iter().zip(&avx2).filter(|(a, b)| a != b).count();
    eprintln!(
        "onnxruntime on AVX2 (vpmaddubsw): {differ} of {} values differ, up to {worst} steps",
        want.len()
    );
    assert!(
        differ > want.len() / 2 && worst > 10.0,
        "onnxruntime's AVX2 kernel no longer saturates here: {differ} values differ, up to {worst} steps"
    );
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
        let same = common::same_bits(&a, &b);
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
        let same = common::same_bits(&a, &b);
        eprintln!(
            "squeezenet_qdq_u8: {name} max error {worst:.3e} vs onnxruntime; {same} of {} values have x86_64-avx512-vnni's bits",
            a.len()
        );
        assert_eq!(same, a.len(), "{name} differs from x86_64-avx512-vnni");
    }
}

/// A QDQ dense layer as onnxruntime's quantizer writes it (DequantizeLinear of the uint8 input,
/// of int8 `[N, K]` weights per output channel and of the int32 bias → `Gemm` with `transB` →
/// QuantizeLinear), with N = 1100 channels, so its per-channel scales are large enough that the
/// importer takes their bytes before the QDQ fusion looks at them: it must still run as
/// onnxruntime's integer kernel does (exact sum, one multiply by `x_scale · w_scale / y_scale`,
/// round half to even), in the interpreter and compiled. The scales make that multiplier exactly
/// 0.5 on some channels, so every odd sum there is a tie that only the exact integer path rounds
/// to even: a dequantized f32 product, or a sum scaled by an inexact weight-column scale, lands
/// on either side.
#[test]
fn a_qdq_gemm_with_many_channels_runs_as_the_integer_kernel() {
    use common::onnx_proto::{node, value};
    use prost::Message;
    use xla_aot::front::onnx::proto::{
        AttributeProto, GraphProto, ModelProto, OperatorSetIdProto, TensorProto, attribute_type,
        data_type,
    };
    let (m, k, n) = (2usize, 16usize, 1100usize);
    let mut seed = 7u64;
    let mut next = |span: i64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 33) as i64 % span) - span / 2
    };
    let (xs, xz) = (0.1f32, 128i64);
    let ws: Vec<f32> = (0..n).map(|c| 0.3 + 0.01 * (c % 7) as f32).collect();
    let xq: Vec<i64> = (0..m * k).map(|_| xz + next(17)).collect();
    let wq: Vec<i64> = (0..n * k).map(|_| next(7)).collect();
    let bq: Vec<i64> = (0..n).map(|_| next(41)).collect();
    // y_scale = 2 · x_scale · w_scale[0]: the multiplier is exactly 0.5 on every channel whose
    // weight scale is ws[0] (one in seven), the rest check the ordinary case.
    let ys = 2.0 * (xs * ws[0]);
    let yz = 128i64;
    let raw = |name: &str, dims: &[usize], ty: i32, bytes: Vec<u8>| TensorProto {
        name: name.into(),
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: ty,
        raw_data: bytes,
        ..Default::default()
    };
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let i32s = |v: &[i64]| {
        v.iter()
            .flat_map(|&x| (x as i32).to_le_bytes())
            .collect::<Vec<u8>>()
    };
    let bs: Vec<f32> = ws.iter().map(|&w| xs * w).collect();
    let inits = vec![
        raw("xs", &[], data_type::FLOAT, f32s(&[xs])),
        raw("xz", &[], data_type::UINT8, vec![xz as u8]),
        raw(
            "wq",
            &[n, k],
            data_type::INT8,
            wq.iter().map(|&w| w as i8 as u8).collect(),
        ),
        raw("ws", &[n], data_type::FLOAT, f32s(&ws)),
        raw("wz", &[n], data_type::INT8, vec![0; n]),
        raw("bq", &[n], data_type::INT32, i32s(&bq)),
        raw("bs", &[n], data_type::FLOAT, f32s(&bs)),
        raw("bz", &[n], data_type::INT32, vec![0; 4 * n]),
        raw("ys", &[], data_type::FLOAT, f32s(&[ys])),
        raw("yz", &[], data_type::UINT8, vec![yz as u8]),
    ];
    let axis0 = AttributeProto {
        name: "axis".into(),
        r#type: attribute_type::INT,
        i: 0,
        ..Default::default()
    };
    let mut gemm = node("fc", "Gemm", &["xd", "wd", "bd"], &["y"]);
    gemm.attribute = vec![AttributeProto {
        name: "transB".into(),
        r#type: attribute_type::INT,
        i: 1,
        ..Default::default()
    }];
    let mut wd = node("wdq", "DequantizeLinear", &["wq", "ws", "wz"], &["wd"]);
    wd.attribute = vec![axis0.clone()];
    let mut bd = node("bdq", "DequantizeLinear", &["bq", "bs", "bz"], &["bd"]);
    bd.attribute = vec![axis0];
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(GraphProto {
            name: "g".into(),
            node: vec![
                node("xq", "QuantizeLinear", &["x", "xs", "xz"], &["xq"]),
                node("xdq", "DequantizeLinear", &["xq", "xs", "xz"], &["xd"]),
                wd,
                bd,
                gemm,
                node("yq", "QuantizeLinear", &["y", "ys", "yz"], &["yq"]),
                node("ydq", "DequantizeLinear", &["yq", "ys", "yz"], &["out"]),
            ],
            input: vec![value("x", data_type::FLOAT, &[m as i64, k as i64])],
            output: vec![value("out", data_type::FLOAT, &[m as i64, n as i64])],
            initializer: inits,
            ..Default::default()
        }),
        ..Default::default()
    };
    let path = std::env::temp_dir().join(format!("xla_aot_qdq_gemm_{}.onnx", std::process::id()));
    let bytes = model.encode_to_vec();
    std::fs::write(&path, &bytes).unwrap();
    let module = import_file_with(&path, &bytes, "qdq_gemm", &ImportOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::remove_file(&path).ok();
    // x exactly (q − zero point) · scale, which QuantizeLinear maps back to q.
    let x: Vec<f32> = xq.iter().map(|&q| (q - xz) as f32 * xs).collect();
    let x = xla_aot::ir::Literal::from_f32(vec![m, k], &x);
    // onnxruntime's integer kernel: exact sum, f32 multiply, round half to even, saturate.
    let want: Vec<f32> = (0..m * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            let acc: i64 = (0..k)
                .map(|j| (xq[r * k + j] - xz) * wq[c * k + j])
                .sum::<i64>()
                + bq[c];
            let t = acc as f32 * ((xs * ws[c]) / ys);
            let q = (t.round_ties_even() as i64 + yz).clamp(0, 255);
            (q - yz) as f32 * ys
        })
        .collect();
    let ties = (0..m * n).filter(|&i| ws[i % n] == ws[0]).count();
    assert!(ties > 100, "{ties} channels with the 0.5 multiplier");
    let interp = xla_aot::interp::evaluate(&module, std::slice::from_ref(&x)).unwrap();
    let host = xla_aot::compile::run_host(&module, std::slice::from_ref(&x)).unwrap();
    for (what, got) in [("interpreter", &interp[0]), ("host", &host[0])] {
        let got = got.to_f32_vec().unwrap();
        let bad: Vec<usize> = (0..m * n).filter(|&i| got[i] != want[i]).collect();
        assert!(
            bad.is_empty(),
            "{what}: {} of {} outputs differ from the integer kernel's, first at {}: {} vs {}",
            bad.len(),
            m * n,
            bad[0],
            got[bad[0]],
            want[bad[0]]
        );
    }
}
