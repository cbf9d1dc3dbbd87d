//! Float32 models of the ops real exports use beyond onnx's float32 node tests: two blocks saved by
//! onnxruntime after its fusions (Gelu + SkipLayerNormalization, FusedConv), a BERT encoder
//! layer, alone and behind BERT's embeddings, saved by onnxruntime's transformer optimiser
//! (EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu), onnxruntime's
//! `com.microsoft` contrib ops (Gelu, BiasGelu, FastGelu, QuickGelu, BiasAdd,
//! SkipLayerNormalization with its sum output, SkipSimplifiedLayerNormalization,
//! LayerNormalization, FusedConv with each activation and the Z sum, FusedGemm, FusedMatMul,
//! Attention with each mask_index form, `unidirectional`, qkv_hidden_sizes, scale,
//! mask_filter_value, attention_bias, the present output and three seeded shape draws,
//! MultiHeadAttention (cross attention
//! with bias and key padding mask; causal), EmbedLayerNormalization with and without segments),
//! onnxruntime's default-domain SimplifiedLayerNormalization, Einsum with the equations exporters
//! write (batched matmuls, attention scores, transposes, reductions, outer and inner products, the
//! implicit output, ellipsis broadcasting, diagonals, three operands), LpPool with p = 1 and 3 and
//! with ceil_mode and dilations (opset 18), a Loop with a constant trip count and scan outputs, a
//! Loop run by its folded condition with an `If` in its body, a reversed Scan over axis 1, and DFTs
//! (opset 17 form: complex zero-padded, real truncated onesided, complex inverse). Each is
//! imported, compiled for the host (JIT, after the optimisation pipeline) and compared with
//! onnxruntime (numpy where onnxruntime has no CPU kernel): max |a - e| <= [`REL_OF_MAX`] × max
//! |e|.
//!
//! The models come from `scripts/onnx_contrib.py`, written to `$XLA_AOT_ONNX_CONTRIB_DIR`
//! (`scripts/test.sh` sets it); without the variable the test says it is skipped.

mod common;

use common::onnx_proto::value as vi;

use std::path::{Path, PathBuf};
use xla_aot::front::onnx::{ImportOptions, import_file_with};
use xla_aot::ir::Literal;

/// The bound: relative to the largest expected magnitude.
const REL_OF_MAX: f64 = 1e-5;

/// How many cases the script writes (a missing one fails the test rather than shrinking it).
const CASES: usize = 67;

fn data_dir() -> Option<PathBuf> {
    let Some(d) = std::env::var_os("XLA_AOT_ONNX_CONTRIB_DIR") else {
        eprintln!(
            "onnx contrib tests skipped: XLA_AOT_ONNX_CONTRIB_DIR is not set (run scripts/onnx_contrib.py --out DIR and set it, or use scripts/test.sh)"
        );
        return None;
    };
    Some(PathBuf::from(d))
}

fn npys(dir: &Path, stem: &str) -> Vec<Literal> {
    (0..)
        .map(|j| dir.join(format!("{stem}_{j}.npy")))
        .take_while(|p| p.exists())
        .map(|p| common::npy(&p))
        .collect()
}

fn run(dir: &Path, name: &str) -> Result<f64, String> {
    let path = dir.join(format!("{name}.onnx"));
    let bytes = std::fs::read(&path).map_err(|e| e.to_string())?;
    let m = import_file_with(&path, &bytes, name, &ImportOptions::default())
        .map_err(|e| e.to_string())?;
    let inputs = npys(dir, "input");
    let want = npys(dir, "output");
    let got = xla_aot::compile::run_host(&m, &inputs).map_err(|e| format!("compile: {e}"))?;
    if got.len() != want.len() {
        return Err(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    let mut worst_rel = 0.0f64;
    for (j, (g, w)) in got.iter().zip(&want).enumerate() {
        if g.dims != w.dims {
            return Err(format!(
                "output {j}: dims {:?}, expected {:?}",
                g.dims, w.dims
            ));
        }
        let (g, w) = (g.to_f64_vec(), w.to_f64_vec());
        let scale = w
            .iter()
            .fold(0.0f64, |m, x| m.max(x.abs()))
            .max(f64::MIN_POSITIVE);
        let worst = g
            .iter()
            .zip(&w)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        if worst > REL_OF_MAX * scale {
            return Err(format!(
                "output {j}: max error {worst:.3e} over {REL_OF_MAX} x max |y| {scale:.3e}"
            ));
        }
        worst_rel = worst_rel.max(worst / scale);
    }
    Ok(worst_rel)
}

#[test]
fn contrib_einsum_loop_and_pool_models_match_onnxruntime() {
    let Some(root) = data_dir() else { return };
    common::run_cases(&root, CASES, |dir, name| {
        run(dir, name).map(|rel| format!("max error {rel:.2e} of max |y|"))
    });
}

/// The attention models in grid form (each GPU kernel body run over its grid on the host, as
/// `tests/grid.rs` does for the examples): the decomposition's kernels compute the same numbers
/// on the GPU path.
#[test]
fn attention_models_match_onnxruntime_in_grid_form() {
    let Some(root) = data_dir() else { return };
    let t = xla_aot::target::Target::resolve("x86_64").unwrap();
    let mut opts = xla_aot::compile::CompileOptions::default();
    opts.codegen.grid = true;
    for name in [
        "ms_attention_mask_2d",
        "ms_attention_unidirectional_left_pad",
        "ms_multi_head_attention",
    ] {
        let dir = root.join(name);
        let path = dir.join(format!("{name}.onnx"));
        let bytes = std::fs::read(&path).unwrap();
        let m = import_file_with(&path, &bytes, name, &ImportOptions::default()).unwrap();
        let got =
            common::run_compiled_with(&m, &t, &npys(&dir, "input"), &format!("grid-{name}"), &opts);
        let want = npys(&dir, "output");
        assert_eq!(got.len(), want.len(), "{name}: output count");
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            let (g, w) = (g.to_f64_vec(), w.to_f64_vec());
            let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            let worst = g
                .iter()
                .zip(&w)
                .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
            assert!(
                worst <= REL_OF_MAX * scale,
                "{name} output {j} in grid form: max error {worst:.3e} of max |y| {scale:.3e}"
            );
        }
    }
}

use prost::Message;
use xla_aot::front::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, ValueInfoProto,
};

/// The import error of a one-node model importing opset 17 (and `domain` version 1, if any).
fn import_error(node: NodeProto, inputs: Vec<ValueInfoProto>, domain: &str) -> String {
    let mut opset_import = vec![OperatorSetIdProto {
        domain: String::new(),
        version: 17,
    }];
    if !domain.is_empty() {
        opset_import.push(OperatorSetIdProto {
            domain: domain.into(),
            version: 1,
        });
    }
    let model = ModelProto {
        ir_version: 8,
        opset_import,
        graph: Some(GraphProto {
            node: vec![node],
            input: inputs,
            output: vec![vi("y", 1, &[4])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let bytes = model.encode_to_vec();
    import_file_with(Path::new("m.onnx"), &bytes, "m", &ImportOptions::default())
        .unwrap_err()
        .to_string()
}

/// A `com.microsoft` op we do not import is an error naming the node, the domain and the fix;
/// a node of another domain is refused naming its domain.
#[test]
fn unsupported_contrib_and_unknown_domains_are_named() {
    for (domain, op, want) in [
        (
            "com.microsoft",
            "GroupQueryAttention",
            "op `GroupQueryAttention` of domain `com.microsoft` is not supported",
        ),
        ("com.microsoft", "FastGelo", "did you mean `FastGelu`?"),
        (
            "org.example",
            "Thing",
            "its domain `org.example` is not supported",
        ),
    ] {
        let node = NodeProto {
            input: vec!["x".into()],
            output: vec!["y".into()],
            name: "n0".into(),
            op_type: op.into(),
            domain: domain.into(),
            ..Default::default()
        };
        let err = import_error(node, vec![vi("x", 1, &[4])], domain);
        assert!(err.contains(want), "{domain} {op}: {err}");
        assert!(err.contains("`n0`"), "the error names the node: {err}");
    }
}

/// A Loop whose trip count is a run-time input is refused naming the node and `--freeze`.
#[test]
fn loop_with_a_run_time_trip_count_names_the_node_and_freeze() {
    let node = NodeProto {
        input: vec!["m".into(), "".into(), "x".into()],
        output: vec!["y".into()],
        name: "steps".into(),
        op_type: "Loop".into(),
        attribute: vec![AttributeProto {
            name: "body".into(),
            r#type: 5,
            g: Some(Box::default()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let err = import_error(node, vec![vi("m", 6, &[]), vi("x", 1, &[4])], "");
    assert!(
        err.contains("input 0 (trip count M) must be known at compile time"),
        "{err}"
    );
    assert!(err.contains("`steps` (Loop)"), "{err}");
    assert!(err.contains("--freeze"), "{err}");
}

/// The fix the Loop error names works: with `--freeze m=3` the same model unrolls three times
/// (y = x · 2³).
#[test]
fn a_frozen_trip_count_unrolls_the_loop() {
    let node = |op: &str, ins: &[&str], out: &str| NodeProto {
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: vec![out.into()],
        op_type: op.into(),
        ..Default::default()
    };
    let body = GraphProto {
        node: vec![
            node("Identity", &["c_in"], "c_out"),
            node("Add", &["y_in", "y_in"], "y_out"),
        ],
        input: vec![vi("i", 7, &[]), vi("c_in", 9, &[]), vi("y_in", 1, &[4])],
        output: vec![vi("c_out", 9, &[]), vi("y_out", 1, &[4])],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            node: vec![NodeProto {
                input: vec!["m".into(), "".into(), "x".into()],
                output: vec!["y".into()],
                name: "steps".into(),
                op_type: "Loop".into(),
                attribute: vec![AttributeProto {
                    name: "body".into(),
                    r#type: 5,
                    g: Some(Box::new(body)),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            input: vec![vi("m", 7, &[]), vi("x", 1, &[4])],
            output: vec![vi("y", 1, &[4])],
            ..Default::default()
        }),
        ..Default::default()
    };
    let bytes = model.encode_to_vec();
    let mut options = ImportOptions::default();
    options
        .inputs
        .freeze
        .push(xla_aot::front::inputs::parse_freeze("m=3").unwrap());
    let m = import_file_with(Path::new("loop.onnx"), &bytes, "loop", &options)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.entry.parameters().len(), 1, "m is frozen, x remains");
    let x = [0.5f32, -1.0, 2.0, 0.25];
    let got = xla_aot::compile::run_host(&m, &[Literal::from_f32(vec![4], &x)]).unwrap();
    let want: Vec<f32> = x.iter().map(|v| v * 8.0).collect();
    assert_eq!(got[0].to_f32_vec().unwrap(), want);
}

/// Einsum equations that do not fit their inputs are errors naming the node and the equation.
#[test]
fn einsum_equations_that_do_not_fit_are_named() {
    let string_attr = |name: &str, v: &str| AttributeProto {
        name: name.into(),
        r#type: 3,
        s: v.as_bytes().to_vec(),
        ..Default::default()
    };
    for (eq, want) in [
        (
            "ii->i",
            "label `i` has extent 3 in one place and 4 in another",
        ),
        ("ijk->i", "term 0 has 3 labels, input 0 has rank 2"),
        ("ij->k", "output label `k` is in no input term"),
        ("i.j->i", "labels are letters"),
        ("ij,jk->ik", "2 input terms for 1 inputs"),
    ] {
        let node = NodeProto {
            input: vec!["x".into()],
            output: vec!["y".into()],
            name: "es".into(),
            op_type: "Einsum".into(),
            attribute: vec![string_attr("equation", eq)],
            ..Default::default()
        };
        let err = import_error(node, vec![vi("x", 1, &[3, 4])], "");
        assert!(err.contains(want), "{eq}: {err}");
        assert!(err.contains("`es` (Einsum)"), "{eq}: {err}");
    }
}

/// The attention forms we do not import (the KV cache, rotary embeddings, packed Q/K/V) are
/// errors naming the node and what is unsupported.
#[test]
fn unsupported_attention_forms_are_named() {
    let attr_i = |name: &str, i: i64| AttributeProto {
        name: name.into(),
        r#type: 2,
        i,
        ..Default::default()
    };
    for (op, inputs, attrs, want) in [
        (
            "Attention",
            vec!["x", "w", "b", "", "past"],
            vec![attr_i("num_heads", 2)],
            "input 4 (past) is not supported",
        ),
        (
            "Attention",
            vec!["x", "w"],
            vec![attr_i("num_heads", 2), attr_i("do_rotary", 1)],
            "`do_rotary` = 1 is not supported",
        ),
        (
            "Attention",
            vec!["x", "w"],
            vec![],
            "attribute `num_heads`: is required and must be positive",
        ),
        (
            "MultiHeadAttention",
            vec!["x", "x", "x", "", "", "", "past_key"],
            vec![attr_i("num_heads", 2)],
            "input 6 (past_key) is not supported",
        ),
    ] {
        let node = NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: vec!["y".into()],
            name: "att".into(),
            op_type: op.into(),
            domain: "com.microsoft".into(),
            attribute: attrs,
        };
        let err = import_error(
            node,
            vec![vi("x", 1, &[1, 4, 8]), vi("w", 1, &[8, 24])],
            "com.microsoft",
        );
        assert!(err.contains(want), "{op}: {err}");
        assert!(err.contains("`att`"), "the error names the node: {err}");
    }
}
