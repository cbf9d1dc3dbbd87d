//! ONNX backend node tests: every test included by `tests/onnx/manifest.txt` is imported,
//! compiled for the host (JIT, after the optimisation pipeline) and compared with ONNX's expected
//! outputs (floats: |a - e| <= ATOL + RTOL |e|; ints and bools exactly); a sample also runs
//! compiled for aarch64-neon under qemu.
//!
//! The cases come from `scripts/onnx_node_tests.py` (the pip wheel does not ship them), written
//! to `$XLA_AOT_ONNX_NODE_DIR` or, when that is unset, `target/onnx-node`. With the variable set
//! (CI) the data must exist; without it a missing default directory skips the test.
//!
//! Inputs: every input is first a run-time parameter (int64, uint8, float16, ... ones in their
//! own type at the C API, `ir/api.rs`); an input the importer needs at compile time (Reshape's
//! shape, axes, pads, ...: a real model has them as initializers) is then bound as a constant
//! through `ImportOptions::constants`, as `--freeze` would. A case that fails so is retried with
//! every int64 input bound, as the node tests always were. Outputs come back in their ONNX type.
//!
//! Tools: `XLA_AOT_ONNX_NODE_ALL=1` runs every case of the data directory and
//! `XLA_AOT_ONNX_NODE_MANIFEST_OUT=FILE` writes a manifest from the results (passing tests
//! included, the others excluded with the first line of their error) for curation;
//! `XLA_AOT_ONNX_NODE_ONLY=name,...` runs only the named tests.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use xla_aot::front::onnx::proto::{GraphProto, ModelProto, TensorProto, data_type, type_proto};
use xla_aot::front::onnx::{ConstTensor, ImportOptions, decode_tensor, import_file_with};
use xla_aot::ir::{DType, Literal, Module};

/// ONNX's backend runner's relative tolerance (onnx/backend/test/runner).
const RTOL: f64 = 1e-3;
/// Absolute tolerance: ONNX's node cases use 1e-7; our f32 transcendental functions and
/// reassociated sums need a little more near zero.
const ATOL: f64 = 1e-5;

/// Tests also run compiled for aarch64-neon under qemu.
const AARCH64_SAMPLE: &[&str] = &[
    "test_conv_with_strides_padding",
    "test_maxpool_2d_pads",
    "test_averagepool_2d_pads_count_include_pad",
    "test_gemm_all_attributes",
    "test_matmul_4d",
    "test_softmax_axis_1",
    "test_layer_normalization_4d_axis1",
    "test_batchnorm_epsilon",
    "test_reduce_sum_square_keepdims_random",
    "test_gelu_tanh_2",
    "test_argmax_keepdims_random",
    "test_slice_neg_steps",
    "test_lstm_bidirectional",
    "test_gru_with_initial_bias",
    "test_simple_rnn_reverse",
    "test_resize_upsample_scales_cubic",
    "test_resize_downsample_scales_linear",
    "test_convtranspose_group_2",
    "test_gather_elements_negative_indices",
    "test_rms_normalization_3d_axis_negative_2_epsilon",
    "test_attention_4d_causal_expanded",
    "test_lrn",
    // Index-driven decompositions (gathers with computed indices, selects).
    "test_gridsample_bicubic",
    "test_gridsample_reflection_padding",
    "test_scatter_elements_with_duplicate_indices",
    "test_bitshift_left_int8_overflow",
    // C API dtypes: float16 output rounding, uint8 inputs and output (`ir/api.rs`).
    "test_cast_FLOAT_to_FLOAT16",
    "test_add_uint8",
];

enum Entry {
    Include,
    Exclude,
}

/// `include NAME` / `exclude NAME  # reason`, `#` comments, blank lines.
fn read_manifest() -> Vec<(String, Entry)> {
    let path = common::repo().join("tests/onnx/manifest.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let body = line.split('#').next().unwrap_or("").trim();
        if body.is_empty() {
            continue;
        }
        let mut words = body.split_whitespace();
        let (kind, name) = (words.next().unwrap(), words.next());
        let entry = match (kind, name) {
            ("include", Some(_)) => Entry::Include,
            ("exclude", Some(_)) => {
                assert!(
                    line.contains('#'),
                    "manifest line {}: an exclude needs `# reason`",
                    i + 1
                );
                Entry::Exclude
            }
            _ => panic!(
                "manifest line {}: expected `include NAME` or `exclude NAME  # reason`",
                i + 1
            ),
        };
        out.push((name.unwrap().to_string(), entry));
    }
    out
}

fn data_dir() -> Option<PathBuf> {
    match std::env::var_os("XLA_AOT_ONNX_NODE_DIR") {
        Some(d) => {
            let d = PathBuf::from(d);
            assert!(
                d.join("test_abs/model.onnx").exists(),
                "XLA_AOT_ONNX_NODE_DIR={} holds no node tests; run scripts/onnx_node_tests.py --out {}",
                d.display(),
                d.display()
            );
            Some(d)
        }
        None => {
            let d = common::repo().join("target/onnx-node");
            if d.join("test_abs/model.onnx").exists() {
                Some(d)
            } else {
                eprintln!(
                    "onnx node tests skipped: no data in {} (run scripts/onnx_node_tests.py, or set XLA_AOT_ONNX_NODE_DIR)",
                    d.display()
                );
                None
            }
        }
    }
}

/// A prepared case: the module, its run-time inputs, the expected outputs.
struct Case {
    module: Module,
    inputs: Vec<Literal>,
    expected: Vec<ConstTensor>,
}

fn read_pb(p: &Path) -> Result<(TensorProto, ConstTensor), String> {
    let bytes = std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let (_, c) = decode_tensor(&bytes).map_err(|e| format!("{}: {e}", p.display()))?;
    let t = <TensorProto as prost::Message>::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
    Ok((t, c))
}

/// The graph input that an import error says must be known at compile time: `input J (...) must
/// be known at compile time` of `node #I` (or an `If` whose condition is computed at run time).
fn needed_at_compile_time(err: &str, graph: &GraphProto) -> Option<String> {
    let node_ix: usize = err
        .split("node #")
        .nth(1)?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    let input_ix = if err.contains("must be known at compile time") {
        err.split("input ")
            .nth(1)?
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()?
    } else if err.contains("condition is computed at run time") {
        0
    } else {
        return None;
    };
    let name = graph.node.get(node_ix)?.input.get(input_ix)?.clone();
    graph.input.iter().any(|v| v.name == name).then_some(name)
}

/// [`prepare_with`] with int64 inputs at run time, else (on any error) with them bound.
fn prepare(dir: &Path) -> Result<Case, String> {
    prepare_with(dir, true).or_else(|_| prepare_with(dir, false))
}

fn prepare_with(dir: &Path, int64_runtime: bool) -> Result<Case, String> {
    let model_path = dir.join("model.onnx");
    let bytes = std::fs::read(&model_path).map_err(|e| e.to_string())?;
    let model =
        <ModelProto as prost::Message>::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
    let graph = model.graph.unwrap_or_default();
    let ds = dir.join("test_data_set_0");
    if !ds.exists() {
        return Err("no tensor test data (sequence/map/optional values)".into());
    }
    let inits: Vec<&str> = graph.initializer.iter().map(|t| t.name.as_str()).collect();
    let graph_inputs: Vec<_> = graph
        .input
        .iter()
        .filter(|v| !inits.contains(&v.name.as_str()))
        .collect();
    let mut opts = ImportOptions::default();
    let mut runtime = Vec::new();
    for (j, vi) in graph_inputs.iter().enumerate() {
        let p = ds.join(format!("input_{j}.pb"));
        if !p.exists() {
            continue; // an omitted optional input
        }
        let (t, c) = read_pb(&p)?;
        let elem = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(type_proto::Value::TensorType(tt)) => tt.elem_type,
            None => 0,
        };
        if elem == data_type::INT64 && !int64_runtime {
            opts.constants.insert(vi.name.clone(), t);
        } else {
            runtime.push((vi.name.clone(), c));
        }
    }
    // A model may need an input at compile time (Resize's scales, Range's limit, an If's
    // condition): the test data then binds it as a constant, as `--freeze` would, and the import
    // is retried, at most once per input.
    let module = loop {
        match import_file_with(&model_path, &bytes, "model", &opts) {
            Ok(m) => break m,
            Err(e) => {
                let s = e.to_string();
                let wanted = needed_at_compile_time(&s, &graph);
                match wanted.and_then(|n| runtime.iter().position(|(r, _)| *r == n)) {
                    Some(k) => {
                        let (name, _) = runtime.remove(k);
                        let j = graph_inputs.iter().position(|v| v.name == name).unwrap();
                        let (t, _) = read_pb(&ds.join(format!("input_{j}.pb")))?;
                        opts.constants.insert(name, t);
                    }
                    // The message and the `-->` line that names the node.
                    None => {
                        return Err(s
                            .lines()
                            .filter(|l| l.starts_with("error") || l.trim_start().starts_with("-->"))
                            .collect::<Vec<_>>()
                            .join("\n"));
                    }
                }
            }
        }
    };
    let mut inputs = Vec::new();
    for (k, (name, c)) in runtime.into_iter().enumerate() {
        let lit = c.to_literal().map_err(|e| format!("input `{name}`: {e}"))?;
        // In the C API's dtype (int64, uint8, float16, ...), as a caller passes it.
        inputs.push(xla_aot::ir::api::to_api(&lit, module.input_dtype(k)));
    }
    let mut expected = Vec::new();
    for j in 0..graph.output.len() {
        let (_, c) = read_pb(&ds.join(format!("output_{j}.pb")))?;
        expected.push(c);
    }
    Ok(Case {
        module,
        inputs,
        expected,
    })
}

/// Checks one output.
fn check(j: usize, got: &Literal, want: &ConstTensor) -> Result<(), String> {
    if got.dims != want.dims {
        return Err(format!(
            "output {j}: got dims {:?}, expected {:?}",
            got.dims, want.dims
        ));
    }
    if got.dtype != DType::F32 && xla_aot::ir::api::ir_dtype(got.dtype) != got.dtype {
        // An output in its ONNX type at the C API: integers exactly, float16/bfloat16 within
        // the tolerance plus half an ulp of the type.
        let ulp = match got.dtype {
            DType::F16 => 2f64.powi(-11),
            DType::BF16 => 2f64.powi(-8),
            _ => 0.0,
        };
        let (a, e) = (got.to_f64_vec(), want.as_f64());
        for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
            let ok = (x.is_nan() && y.is_nan())
                || x == y
                || (ulp > 0.0 && (x - y).abs() <= ATOL + (RTOL + ulp) * y.abs());
            if !ok {
                return Err(format!("output {j} element {i}: got {x}, expected {y}"));
            }
        }
        return Ok(());
    }
    let w = want.to_literal().map_err(|e| format!("output {j}: {e}"))?;
    if got.dtype != w.dtype {
        return Err(format!(
            "output {j}: got {}, expected {}",
            got.dtype, w.dtype
        ));
    }
    match got.dtype {
        DType::F32 => {
            let (a, e) = (got.to_f32_vec().unwrap(), w.to_f32_vec().unwrap());
            for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
                let ok = (x.is_nan() && y.is_nan())
                    || x == y
                    || ((x as f64 - y as f64).abs() <= ATOL + RTOL * (y as f64).abs());
                if !ok {
                    return Err(format!("output {j} element {i}: got {x}, expected {y}"));
                }
            }
            Ok(())
        }
        _ if got.bytes() == w.bytes() => Ok(()),
        _ => Err(format!(
            "output {j}: got {:?}, expected {:?}",
            got.to_f64_vec(),
            w.to_f64_vec()
        )),
    }
}

fn run_case(dir: &Path) -> Result<(), String> {
    let case = prepare(dir)?;
    let m = case.module;
    let outs = std::panic::catch_unwind(|| xla_aot::compile::run_host(&m, &case.inputs))
        .map_err(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("xla-aot panicked: {msg}")
        })?
        .map_err(|e| format!("compile: {e}"))?;
    for (j, (g, w)) in outs.iter().zip(&case.expected).enumerate() {
        check(j, g, w)?;
    }
    Ok(())
}

/// A short manifest reason from an error.
fn reason(err: &str) -> String {
    // The `-->` lines name the model file, whose path holds the test's name (`..._float16_...`):
    // only the messages classify.
    let e: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim_start().starts_with("-->"))
        .collect();
    let located = err.replace('#', "no. ");
    let e = e.join("\n").replace('#', "no. ");
    if let Some(i) = e.find("op `") {
        let rest = &e[i + 4..];
        if let Some(k) = rest.find("` is not supported") {
            return format!("op not supported: {}", &rest[..k]);
        }
    }
    if e.contains("opset") && e.contains("are supported") {
        if let Some(i) = e.find("imports opset ") {
            let v: String = e[i + 14..]
                .chars()
                .take_while(|c| c.is_ascii_digit())
                .collect();
            return format!(
                "opset {v} is older than {}",
                xla_aot::front::onnx::MIN_OPSET
            );
        }
    }
    if let Some(i) = e.find("element type ") {
        let rest = e[i + 13..].trim_start_matches("is ");
        let ty: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == ' ')
            .collect();
        let ty = ty
            .split(' ')
            .take(if ty.starts_with("sub-byte") { 2 } else { 1 })
            .collect::<Vec<_>>()
            .join(" ");
        let runtime = e.contains("run-time inputs");
        return match ty.as_str() {
            "float64" | "float16" | "bfloat16" | "float8" => format!("{ty} data"),
            t if runtime => format!("{t} runtime data"),
            t => format!("{t} data"),
        };
    }
    for (pat, r) in [
        ("float64", "float64 data"),
        ("int64; run-time", "int64 runtime data"),
        ("float16", "float16 data"),
        ("bfloat16", "bfloat16 data"),
        ("float8", "float8 data"),
        ("sub-byte", "4-bit/2-bit data"),
        ("string", "string data"),
        ("uint8", "uint8 runtime data"),
        ("int8", "int8 runtime data"),
        ("int16", "int16 runtime data"),
        ("uint16", "uint16 runtime data"),
        ("uint32", "uint32 runtime data"),
        ("uint64", "uint64 runtime data"),
        ("empty", "empty tensors"),
        ("not a tensor", "sequence/optional values"),
        ("no tensor test data", "sequence/map/optional values"),
        (
            "no opset of the default",
            "no default-domain opset (other domains only)",
        ),
        ("domain", "non-default domain"),
    ] {
        if e.contains(pat) {
            return r.to_string();
        }
    }
    // `error: MESSAGE` with the node on the `-->` line: `(OpType): MESSAGE`, as the manifest has
    // always spelled it.
    let first = e.lines().next().unwrap_or("").trim_start_matches("error: ");
    let op = located
        .lines()
        .find(|l| l.trim_start().starts_with("-->"))
        .and_then(|l| l.rfind('(').map(|i| l[i..].trim().to_string()))
        .filter(|o| o.ends_with(')'));
    let short: String = match op {
        Some(op) => format!("{op}: {first}"),
        None => first.to_string(),
    }
    .chars()
    .take(140)
    .collect();
    short
}

#[test]
fn onnx_node_tests_pass() {
    let Some(dir) = data_dir() else { return };
    let manifest = read_manifest();
    let all = std::env::var_os("XLA_AOT_ONNX_NODE_ALL").is_some();
    let only: Option<Vec<String>> = std::env::var("XLA_AOT_ONNX_NODE_ONLY")
        .ok()
        .map(|s| s.split(',').map(|x| x.trim().to_string()).collect());
    let mut names: Vec<(String, bool)> = if all {
        let mut v: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("test_"))
            .collect();
        v.sort();
        v.into_iter().map(|n| (n, true)).collect()
    } else {
        manifest
            .iter()
            .map(|(n, e)| (n.clone(), matches!(e, Entry::Include)))
            .collect()
    };
    if let Some(only) = &only {
        names.retain(|(n, _)| only.contains(n));
    }
    // The manifest must name every case of the data directory.
    if !all && only.is_none() {
        let listed: std::collections::HashSet<&str> =
            manifest.iter().map(|(n, _)| n.as_str()).collect();
        let mut missing: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("test_") && !listed.contains(n.as_str()))
            .collect();
        missing.sort();
        assert!(
            missing.is_empty(),
            "tests/onnx/manifest.txt does not list {} node test(s): {}",
            missing.len(),
            missing.join(", ")
        );
    }
    let (mut passed, mut failed, mut excluded) = (0, Vec::new(), 0);
    let mut results: HashMap<String, Result<(), String>> = HashMap::new();
    for (name, include) in &names {
        if !include {
            excluded += 1;
            continue;
        }
        let t = std::time::Instant::now();
        let r = run_case(&dir.join(name));
        match &r {
            Ok(()) => {
                passed += 1;
                println!("ok    {name} ({} ms)", t.elapsed().as_millis());
            }
            Err(e) => {
                println!("FAIL  {name}: {e}");
                failed.push(name.clone());
            }
        }
        results.insert(name.clone(), r);
    }
    println!(
        "onnx node tests: {passed} passed, {} failed, {excluded} excluded",
        failed.len()
    );
    if let Ok(out) = std::env::var("XLA_AOT_ONNX_NODE_MANIFEST_OUT") {
        let mut text = String::new();
        for (name, _) in &names {
            match results.get(name) {
                Some(Ok(())) => text.push_str(&format!("include {name}\n")),
                Some(Err(e)) => text.push_str(&format!("exclude {name}  # {}\n", reason(e))),
                None => {}
            }
        }
        std::fs::write(&out, text).unwrap();
    }
    if !all {
        assert!(
            failed.is_empty(),
            "failing node tests: {}",
            failed.join(", ")
        );
    }
}

#[test]
fn onnx_node_sample_runs_on_aarch64_under_qemu() {
    let Some(dir) = data_dir() else { return };
    let required = std::env::var_os("XLA_AOT_ONNX_NODE_DIR").is_some();
    let have = |tool: &str| {
        std::process::Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !have("qemu-aarch64") || !have("aarch64-linux-gnu-gcc") {
        assert!(
            !required,
            "qemu-aarch64 and aarch64-linux-gnu-gcc are required with XLA_AOT_ONNX_NODE_DIR set (install them as .ci/run does)"
        );
        eprintln!("aarch64 node tests skipped: qemu-aarch64 or aarch64-linux-gnu-gcc missing");
        return;
    }
    let target = xla_aot::target::Target::resolve("aarch64-neon").unwrap();
    for name in AARCH64_SAMPLE {
        let case = prepare(&dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let outs =
            common::run_compiled(&case.module, &target, &case.inputs, &format!("onnx-{name}"));
        for (j, (g, w)) in outs.iter().zip(&case.expected).enumerate() {
            check(j, g, w).unwrap_or_else(|e| panic!("{name} on aarch64-neon: {e}"));
        }
        println!("ok    {name} (aarch64-neon under qemu)");
    }
}
