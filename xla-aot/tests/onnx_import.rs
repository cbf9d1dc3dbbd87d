//! The ONNX importer's errors and names, on small models built here with the prost messages:
//! every bad input is a clear error naming the node (or says the file is not a model), and a
//! good model imports with sanitised, deduplicated names and runs.

mod common;

use common::onnx_proto::{node, value};

use prost::Message;
use std::path::{Path, PathBuf};
use xla_aot::front::inputs::{Frozen, InputOverrides, InputRef};
use xla_aot::front::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    ValueInfoProto, attribute_type, data_type, tensor_shape_proto, type_proto,
};
use xla_aot::front::onnx::{ImportOptions, import_file_with};
use xla_aot::front::{Format, load_file, load_file_with, load_spec};
use xla_aot::ir::Literal;

fn model(
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        producer_name: "onnx_import.rs".into(),
        graph: Some(GraphProto {
            name: "g".into(),
            node: nodes,
            input: inputs,
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A small conv net: x[1,2,5,5] → Conv(w initializer, pads 1) → Relu → y.
fn conv_relu() -> ModelProto {
    let w: Vec<f32> = (0..3 * 2 * 3 * 3)
        .map(|i| ((i % 7) as f32 - 3.0) * 0.1)
        .collect();
    let mut conv = node("conv0", "Conv", &["x.in", "w"], &["c"]);
    conv.attribute.push(AttributeProto {
        name: "pads".into(),
        r#type: attribute_type::INTS,
        ints: vec![1, 1, 1, 1],
        ..Default::default()
    });
    let mut m = model(
        vec![conv, node("relu0", "Relu", &["c"], &["y:0"])],
        vec![value("x.in", data_type::FLOAT, &[1, 2, 5, 5])],
        vec![value("y:0", data_type::FLOAT, &[1, 3, 5, 5])],
    );
    m.graph.as_mut().unwrap().initializer.push(TensorProto {
        name: "w".into(),
        dims: vec![3, 2, 3, 3],
        data_type: data_type::FLOAT,
        float_data: w,
        ..Default::default()
    });
    m
}

fn write(tag: &str, bytes: &[u8]) -> PathBuf {
    let dir = common::scratch(&format!("onnx-import-{tag}"));
    let p = dir.join(format!("{tag}.onnx"));
    std::fs::write(&p, bytes).unwrap();
    p
}

fn import_err(tag: &str, bytes: &[u8]) -> String {
    let p = write(tag, bytes);
    match load_file(&p, Format::Onnx) {
        Ok(_) => panic!("{tag}: imported, expected an error"),
        Err(e) => e.to_string(),
    }
}

fn load(p: &Path) -> xla_aot::ir::Module {
    load_file(p, Format::Onnx)
        .unwrap_or_else(|e| panic!("{e}"))
        .module
}

#[test]
fn a_conv_net_imports_with_c_names_and_matches_the_interpreter() {
    let p = write("convnet", &conv_relu().encode_to_vec());
    let m = load(&p);
    assert_eq!(m.name, "convnet");
    let params = m.entry.parameters();
    assert_eq!(params.len(), 1, "the weight is a constant, not an input");
    assert_eq!(m.entry.inst(params[0]).name, "x_in");
    assert_eq!(m.entry.outputs[0].name, "y_0");
    let x = Literal::from_f32(
        vec![1, 2, 5, 5],
        &(0..50).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(),
    );
    let want = xla_aot::interp::evaluate(&m, std::slice::from_ref(&x)).unwrap();
    let got = xla_aot::compile::run_host(&m, &[x]).unwrap();
    common::check_close(&got[0], &want[0]).unwrap();
    // Relu of a 3x3 conv with padding 1: [1, 3, 5, 5].
    assert_eq!(got[0].dims, vec![1, 3, 5, 5]);
}

#[test]
fn a_truncated_model_is_not_an_onnx_model() {
    let bytes = conv_relu().encode_to_vec();
    let e = import_err("truncated", &bytes[..bytes.len() / 2]);
    assert!(e.contains("not an ONNX model"), "{e}");
    assert!(e.contains("truncated"), "the hint says why: {e}");
}

#[test]
fn random_bytes_are_not_an_onnx_model() {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let bytes: Vec<u8> = (0..256)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let e = import_err("random", &bytes);
    assert!(e.contains("not an ONNX model"), "{e}");
    let e = import_err("text", b"this is not a protobuf\n");
    assert!(e.contains("not an ONNX model"), "{e}");
}

#[test]
fn an_unsupported_op_names_the_node_and_the_op() {
    let m = model(
        vec![
            node("relu0", "Relu", &["x"], &["r"]),
            node("my_unique", "Unique", &["r"], &["y"]),
        ],
        vec![value("x", data_type::FLOAT, &[4])],
        vec![value("y", data_type::FLOAT, &[2])],
    );
    let e = import_err("unsupported_op", &m.encode_to_vec());
    // The node takes the place of the line in the `-->` location, as in every front end's errors.
    assert!(e.starts_with("error: op `Unique` is not supported"), "{e}");
    assert!(e.contains(".onnx: node #1 `my_unique` (Unique)\n"), "{e}");
    assert!(e.contains("docs/import.md"), "{e}");
}

#[test]
fn an_unsupported_attribute_value_names_the_node_and_the_attribute() {
    let mut pad = node("pad0", "Pad", &["x", "pads"], &["y"]);
    pad.attribute.push(AttributeProto {
        name: "mode".into(),
        r#type: attribute_type::STRING,
        s: b"mirror".to_vec(),
        ..Default::default()
    });
    let mut m = model(
        vec![pad],
        vec![value("x", data_type::FLOAT, &[2, 3])],
        vec![value("y", data_type::FLOAT, &[2, 5])],
    );
    m.graph.as_mut().unwrap().initializer.push(TensorProto {
        name: "pads".into(),
        dims: vec![4],
        data_type: data_type::INT64,
        int64_data: vec![0, 1, 0, 1],
        ..Default::default()
    });
    let e = import_err("bad_attr", &m.encode_to_vec());
    assert!(e.contains("node #0 `pad0` (Pad)"), "{e}");
    assert!(e.contains("`mode`") && e.contains("mirror"), "{e}");

    let mut am = node("am", "MaxPool", &["x"], &["y"]);
    am.attribute.push(AttributeProto {
        name: "kernel_shape".into(),
        r#type: attribute_type::INTS,
        ints: vec![1, 1],
        ..Default::default()
    });
    am.attribute.push(AttributeProto {
        name: "storage_order".into(),
        r#type: attribute_type::INT,
        i: 1,
        ..Default::default()
    });
    let m = model(
        vec![am],
        vec![value("x", data_type::FLOAT, &[1, 1, 4, 4])],
        vec![value("y", data_type::FLOAT, &[1, 1, 4, 4])],
    );
    let e = import_err("bad_attr2", &m.encode_to_vec());
    assert!(
        e.contains("node #0 `am` (MaxPool)") && e.contains("storage_order"),
        "{e}"
    );
}

#[test]
fn a_run_time_shape_operand_says_it_must_be_constant() {
    let m = model(
        vec![node("rs", "Reshape", &["x", "shape"], &["y"])],
        vec![
            value("x", data_type::FLOAT, &[2, 3]),
            value("shape", data_type::INT32, &[1]),
        ],
        vec![value("y", data_type::FLOAT, &[6])],
    );
    let e = import_err("runtime_shape", &m.encode_to_vec());
    assert!(
        e.contains("node #0 `rs` (Reshape)") && e.contains("compile time"),
        "{e}"
    );
}

#[test]
fn symbolic_dims_old_opsets_and_other_domains_are_clear_errors() {
    let mut m = model(
        vec![node("relu0", "Relu", &["x"], &["y"])],
        vec![value("x", data_type::FLOAT, &[1, 4])],
        vec![value("y", data_type::FLOAT, &[1, 4])],
    );
    let mut sym = m.clone();
    if let Some(type_proto::Value::TensorType(t)) = sym.graph.as_mut().unwrap().input[0]
        .r#type
        .as_mut()
        .unwrap()
        .value
        .as_mut()
    {
        t.shape.as_mut().unwrap().dim[0].value = Some(
            tensor_shape_proto::dimension::Value::DimParam("batch".into()),
        );
    }
    let e = import_err("symbolic", &sym.encode_to_vec());
    assert!(
        e.contains("`batch`") && e.contains("--dim batch=N") && e.contains("--input-shape x="),
        "the error names the dim and the flags that fix it: {e}"
    );

    let mut old = m.clone();
    old.opset_import[0].version = 6;
    let e = import_err("old_opset", &old.encode_to_vec());
    assert!(
        e.contains("opset 6") && e.contains("opsets 7 to 28") && e.contains("version_converter"),
        "{e}"
    );

    m.graph.as_mut().unwrap().node[0].domain = "com.microsoft".into();
    let e = import_err("domain", &m.encode_to_vec());
    assert!(
        e.contains("node #0 `relu0` (Relu)") && e.contains("com.microsoft"),
        "{e}"
    );
}

#[test]
fn external_data_is_a_clear_error() {
    let mut m = conv_relu();
    let w = &mut m.graph.as_mut().unwrap().initializer[0];
    w.float_data.clear();
    w.data_location = 1;
    let e = import_err("external", &m.encode_to_vec());
    assert!(
        e.contains("initializer `w`") && e.contains("external"),
        "{e}"
    );
}

#[test]
fn duplicate_sanitised_names_are_made_unique() {
    let m = model(
        vec![node("add", "Add", &["a.b", "a:b"], &["y"])],
        vec![
            value("a.b", data_type::FLOAT, &[3]),
            value("a:b", data_type::FLOAT, &[3]),
        ],
        vec![value("y", data_type::FLOAT, &[3])],
    );
    let p = write("dupnames", &m.encode_to_vec());
    let m = load(&p);
    let names: Vec<String> = m
        .entry
        .parameters()
        .iter()
        .map(|&p| m.entry.inst(p).name.clone())
        .collect();
    assert_eq!(names, vec!["a_b", "a_b_1"]);
}

#[test]
fn no_prefix_or_byte_flip_of_a_model_panics() {
    let bytes = conv_relu().encode_to_vec();
    let path = Path::new("mutated.onnx");
    let weights = xla_aot::front::weights::WeightStore::empty();
    let try_import = |b: &[u8]| {
        let mut bindings = xla_aot::front::weights::Bindings::new(&weights);
        let _ = xla_aot::front::onnx::import(path, b, "m", &mut bindings);
    };
    for n in 0..bytes.len() {
        try_import(&bytes[..n]);
    }
    for i in 0..bytes.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= flip;
            try_import(&b);
        }
    }
}

fn sym_value(name: &str, elem: i32, dims: &[&str]) -> ValueInfoProto {
    let mut v = value(name, elem, &vec![0; dims.len()]);
    if let Some(type_proto::Value::TensorType(t)) = v.r#type.as_mut().unwrap().value.as_mut() {
        for (d, s) in t.shape.as_mut().unwrap().dim.iter_mut().zip(dims) {
            d.value = Some(match s.parse::<i64>() {
                Ok(n) => tensor_shape_proto::dimension::Value::DimValue(n),
                Err(_) => tensor_shape_proto::dimension::Value::DimParam(s.to_string()),
            });
        }
    }
    v
}

/// x[batch, 4, w] · k (a scalar input) → Reshape to [batch, -1] → y: dynamic dims, and an input
/// that is better frozen.
fn dynamic_model() -> ModelProto {
    let mut m = model(
        vec![
            node("mul0", "Mul", &["x", "k"], &["m"]),
            node("reshape0", "Reshape", &["m", "shape"], &["y"]),
        ],
        vec![
            sym_value("x", data_type::FLOAT, &["batch", "4", "w"]),
            sym_value("k", data_type::FLOAT, &[]),
        ],
        vec![sym_value("y", data_type::FLOAT, &["batch", "n"])],
    );
    m.graph.as_mut().unwrap().initializer.push(TensorProto {
        name: "shape".into(),
        dims: vec![2],
        data_type: data_type::INT64,
        int64_data: vec![0, -1],
        ..Default::default()
    });
    m
}

#[test]
fn dims_shapes_and_frozen_inputs_are_fixed_at_build_time() {
    let p = write("dynamic", &dynamic_model().encode_to_vec());
    let with = |o: &InputOverrides| load_file_with(&p, Format::Onnx, o);
    let err = |o: &InputOverrides| match with(o) {
        Ok(_) => panic!("imported, expected an error for {o:?}"),
        Err(e) => e.to_string(),
    };
    // `--dim` for every symbol: both inputs stay run-time inputs.
    let dims = InputOverrides {
        dims: vec![("batch".into(), 2), ("w".into(), 3)],
        ..Default::default()
    };
    let m = with(&dims).unwrap().module;
    let params = m.entry.parameters();
    assert_eq!(m.entry.inst(params[0]).shape.dims, vec![2, 4, 3]);
    assert_eq!(m.entry.outputs.len(), 1);
    assert_eq!(
        m.entry.inst(m.entry.outputs[0].value).shape.dims,
        vec![2, 12]
    );

    // `--input-shape` by position, and `k` frozen: one input left, the product by a constant.
    let frozen = InputOverrides {
        shapes: vec![(InputRef::Index(0), vec![1, 4, 5])],
        freeze: vec![(InputRef::Name("k".into()), Frozen::Values(vec![0.5]))],
        ..Default::default()
    };
    let m = with(&frozen).unwrap().module;
    assert_eq!(m.entry.parameters().len(), 1, "k became a constant");
    let x = Literal::from_f32(
        vec![1, 4, 5],
        &(0..20).map(|i| i as f32).collect::<Vec<_>>(),
    );
    let got = xla_aot::compile::run_host(&m, &[x]).unwrap();
    assert_eq!(got[0].dims, vec![1, 20]);
    assert_eq!(got[0].to_f32_vec().unwrap()[7], 3.5);

    // What cannot hold is a clear error naming the input and what to do.
    let e = err(&InputOverrides {
        dims: vec![("batch".into(), 1)],
        ..Default::default()
    });
    assert!(
        e.contains("graph input `x`") && e.contains("`w`") && e.contains("--dim w=N"),
        "{e}"
    );
    let e = err(&InputOverrides {
        shapes: vec![(InputRef::Name("x".into()), vec![1, 5, 3])],
        ..Default::default()
    });
    assert!(
        e.contains("sets dimension 1 to 5, but the model fixes it at 4"),
        "{e}"
    );
    let e = err(&InputOverrides {
        shapes: vec![(InputRef::Name("x".into()), vec![1, 4])],
        ..Default::default()
    });
    assert!(e.contains("gives 2 dims, but the input has rank 3"), "{e}");
    let e = err(&InputOverrides {
        shapes: vec![(InputRef::Name("images".into()), vec![1, 4, 3])],
        ..Default::default()
    });
    assert!(e.contains("`images`") && e.contains("x, k"), "{e}");
    let e = err(&InputOverrides {
        dims: vec![("batch".into(), 1), ("w".into(), 2), ("height".into(), 2)],
        ..Default::default()
    });
    assert!(e.contains("`height`") && e.contains("batch, w"), "{e}");
    let e = err(&InputOverrides {
        dims: vec![("batch".into(), 1), ("w".into(), 2)],
        freeze: vec![(InputRef::Name("k".into()), Frozen::Values(vec![1.0, 2.0]))],
        ..Default::default()
    });
    assert!(
        e.contains("gives 2 values, but the input has 1 elements"),
        "{e}"
    );
}

#[test]
fn a_graph_spec_fixes_inputs_and_the_command_line_wins() {
    let p = write("dynamic_spec", &dynamic_model().encode_to_vec());
    let dir = p.parent().unwrap();
    std::fs::write(
        dir.join("model.yaml"),
        "name: dyn\ngraph:\n  onnx: dynamic_spec.onnx\n  dims: {batch: 2, w: 3}\n  freeze: {k: 2.0}\n",
    )
    .unwrap();
    let m = load_spec(&dir.join("model.yaml")).unwrap().module;
    let params = m.entry.parameters();
    assert_eq!(params.len(), 1);
    assert_eq!(m.entry.inst(params[0]).shape.dims, vec![2, 4, 3]);
    let cli = InputOverrides {
        dims: vec![("batch".into(), 5)],
        ..Default::default()
    };
    let m = xla_aot::front::load_spec_with(&dir.join("model.yaml"), &cli)
        .unwrap()
        .module;
    assert_eq!(
        m.entry.inst(m.entry.parameters()[0]).shape.dims,
        vec![5, 4, 3]
    );
    std::fs::write(
        dir.join("bad.yaml"),
        "name: dyn\ngraph:\n  onnx: dynamic_spec.onnx\n  freeze: {k: [a]}\n",
    )
    .unwrap();
    let e = load_spec(&dir.join("bad.yaml")).unwrap_err().to_string();
    assert!(e.contains("`freeze: k`") && e.contains("bad.yaml:3"), "{e}");
}

#[test]
fn the_cli_fixes_inputs_on_compile_and_rejects_malformed_flags() {
    let p = write("dynamic_cli", &dynamic_model().encode_to_vec());
    let out = p.parent().unwrap().join("lib");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_xla-aot"))
            .args(args)
            .output()
            .unwrap()
    };
    let (ps, os) = (p.display().to_string(), out.display().to_string());
    let r = run(&[
        "compile",
        &ps,
        "--target",
        "host",
        "--out-dir",
        &os,
        "--input-shape",
        "x=3,4,2",
        "--freeze",
        "k=1.5",
    ]);
    assert_eq!(
        r.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let header = std::fs::read_to_string(out.join("dynamic_cli.h")).unwrap();
    assert!(
        header.contains("3, 4, 2") || header.contains("3,4,2"),
        "{header}"
    );
    assert!(
        !header.contains("k_SHAPE") && !header.contains("_K_"),
        "k is a constant: {header}"
    );
    // `profile` fixes inputs the same way and times the kernels of the fixed model.
    let r = run(&[
        "profile",
        &ps,
        "--runs",
        "2",
        "--input-shape",
        "x=3,4,2",
        "--freeze",
        "k=1.5",
    ]);
    let report = String::from_utf8_lossy(&r.stdout);
    assert_eq!(
        r.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(report.contains("kernel(s), 2 run(s)"), "{report}");
    // A malformed flag is a usage error (exit 2) that says the form.
    let r = run(&["inspect", &ps, "--dim", "batch"]);
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("SYMBOL=N"));
    // A YAML spec declares its own shapes.
    let spec = common::repo().join("examples/simplenet/model.yaml");
    let r = run(&["inspect", &spec.display().to_string(), "--dim", "batch=1"]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("apply to imported graphs"));
}

#[test]
fn the_build_api_fixes_inputs_and_keys_its_cache_on_them() {
    let p = write("dynamic_build", &dynamic_model().encode_to_vec());
    let out = p.parent().unwrap().join("out");
    let build = |batch: usize| {
        xla_aot::Build::new(&p)
            .target("x86_64-avx2")
            .out_dir(&out)
            .cargo_metadata(false)
            .dim("batch", batch)
            .input_shape("x", &[batch, 4, 3])
            .freeze("k", &[2.0])
            .try_compile("dynb")
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let c = build(2);
    assert!(c.compiled);
    let header = std::fs::read_to_string(c.dir.join("dynb.h")).unwrap();
    assert!(header.contains("DYNB_INPUT_X_SHAPE {2, 4, 3}"), "{header}");
    assert!(!build(2).compiled, "cached");
    assert!(build(3).compiled, "a different dim is a different library");
}

/// y = If(mode == 1) { Relu(x) + bias } else { Neg(x) }, with `mode` an int64 scalar input and
/// `bias` an initializer of the then-branch.
fn if_model() -> ModelProto {
    let branch = |nodes: Vec<NodeProto>, out: &str, init: Vec<TensorProto>| GraphProto {
        name: out.into(),
        node: nodes,
        initializer: init,
        output: vec![value(out, data_type::FLOAT, &[2, 3])],
        ..Default::default()
    };
    let then_g = branch(
        vec![
            node("relu", "Relu", &["x"], &["r"]),
            node("addb", "Add", &["r", "bias"], &["t"]),
        ],
        "t",
        vec![TensorProto {
            name: "bias".into(),
            dims: vec![3],
            data_type: data_type::FLOAT,
            float_data: vec![10.0, 20.0, 30.0],
            ..Default::default()
        }],
    );
    let else_g = branch(vec![node("neg", "Neg", &["x"], &["e"])], "e", vec![]);
    let mut iff = node("if0", "If", &["c"], &["y"]);
    for (name, g) in [("then_branch", then_g), ("else_branch", else_g)] {
        iff.attribute.push(AttributeProto {
            name: name.into(),
            r#type: attribute_type::GRAPH,
            g: Some(Box::new(g)),
            ..Default::default()
        });
    }
    let mut m = model(
        vec![node("eq", "Equal", &["mode", "one"], &["c"]), iff],
        vec![
            value("x", data_type::FLOAT, &[2, 3]),
            value("mode", data_type::INT64, &[]),
        ],
        vec![value("y", data_type::FLOAT, &[2, 3])],
    );
    m.graph.as_mut().unwrap().initializer.push(TensorProto {
        name: "one".into(),
        data_type: data_type::INT64,
        int64_data: vec![1],
        ..Default::default()
    });
    m
}

#[test]
fn an_if_on_a_frozen_input_lowers_the_chosen_branch() {
    let p = write("if_frozen", &if_model().encode_to_vec());
    let x = Literal::from_f32(vec![2, 3], &[-1.0, 2.0, -3.0, 4.0, -5.0, 6.0]);
    let run = |mode: f64| {
        let o = InputOverrides {
            freeze: vec![(InputRef::Name("mode".into()), Frozen::Values(vec![mode]))],
            ..Default::default()
        };
        let m = load_file_with(&p, Format::Onnx, &o)
            .unwrap_or_else(|e| panic!("{e}"))
            .module;
        assert_eq!(m.entry.parameters().len(), 1, "mode is a constant");
        xla_aot::compile::run_host(&m, std::slice::from_ref(&x)).unwrap()[0]
            .to_f32_vec()
            .unwrap()
    };
    assert_eq!(run(1.0), [10.0, 22.0, 30.0, 14.0, 20.0, 36.0]);
    assert_eq!(run(0.0), [1.0, -2.0, 3.0, -4.0, 5.0, -6.0]);
    // Unfrozen, the int64 input is a run-time input (passed as int64_t); the `If` on it says
    // which flag helps.
    let e = import_err("if_int64", &if_model().encode_to_vec());
    assert!(
        e.contains("node #1 `if0` (If)") && e.contains("--freeze NAME=VALUE"),
        "{e}"
    );
    // An int32 condition input computed at run time: the `If` says which flag helps.
    let mut m = if_model();
    let g = m.graph.as_mut().unwrap();
    g.input[1] = value("mode", data_type::INT32, &[]);
    g.initializer[0].data_type = data_type::INT32;
    g.initializer[0].int32_data = vec![1];
    g.initializer[0].int64_data.clear();
    let e = import_err("if_runtime", &m.encode_to_vec());
    assert!(
        e.contains("node #1 `if0` (If)") && e.contains("--freeze NAME=VALUE"),
        "{e}"
    );
}

fn ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INTS,
        ints: v.to_vec(),
        ..Default::default()
    }
}

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::INT,
        i: v,
        ..Default::default()
    }
}

fn float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::FLOAT,
        f: v,
        ..Default::default()
    }
}

fn with(mut n: NodeProto, attrs: Vec<AttributeProto>) -> NodeProto {
    n.attribute = attrs;
    n
}

fn int64s(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![v.len() as i64],
        data_type: data_type::INT64,
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

fn scalar(name: &str, v: f32) -> TensorProto {
    TensorProto {
        name: name.into(),
        data_type: data_type::FLOAT,
        float_data: vec![v],
        ..Default::default()
    }
}

fn run_interp(tag: &str, m: &ModelProto, x: &Literal) -> Vec<Literal> {
    let p = write(tag, &m.encode_to_vec());
    xla_aot::interp::evaluate(&load(&p), std::slice::from_ref(x)).unwrap()
}

/// The same computation written with opset 9's attributes and opset 13's inputs imports to the
/// same values: Unsqueeze/Squeeze `axes`, Slice `starts`/`ends`/`axes` (attributes before 10),
/// Pad `pads`/`value` and Clip `min`/`max` (before 11), Split `split` and ReduceSum `axes`
/// (before 13), and Softmax's 2-D coercion at `axis` (before 13; a Reshape around a one-axis
/// Softmax from 13).
#[test]
fn opset_9_attribute_forms_match_opset_13_input_forms() {
    let x_in = vec![value("x", data_type::FLOAT, &[2, 3, 4])];
    let y_out = || vec![value("y", data_type::FLOAT, &[2, 2, 2])];
    let old = model(
        vec![
            with(
                node("u", "Unsqueeze", &["x"], &["u"]),
                vec![ints("axes", &[0])],
            ),
            with(
                node("s", "Squeeze", &["u"], &["s"]),
                vec![ints("axes", &[0])],
            ),
            with(
                node("sl", "Slice", &["s"], &["sl"]),
                vec![
                    ints("starts", &[0, 1]),
                    ints("ends", &[2, 3]),
                    ints("axes", &[0, 1]),
                ],
            ),
            with(
                node("p", "Pad", &["sl"], &["p"]),
                vec![ints("pads", &[0, 0, 1, 0, 0, 1]), float("value", 0.75)],
            ),
            with(
                node("c", "Clip", &["p"], &["c"]),
                vec![float("min", -0.5), float("max", 0.6)],
            ),
            with(
                node("sp", "Split", &["c"], &["a", "b"]),
                vec![int("axis", 2), ints("split", &[2, 4])],
            ),
            with(
                node("r", "ReduceSum", &["b"], &["r"]),
                vec![ints("axes", &[2]), int("keepdims", 1)],
            ),
            node("t", "Add", &["a", "r"], &["t"]),
            with(node("sm", "Softmax", &["t"], &["y"]), vec![int("axis", 1)]),
        ],
        x_in.clone(),
        y_out(),
    );
    let mut old = old;
    old.ir_version = 3;
    old.opset_import[0].version = 9;
    let mut new = model(
        vec![
            node("u", "Unsqueeze", &["x", "axes0"], &["u"]),
            node("s", "Squeeze", &["u", "axes0"], &["s"]),
            node("sl", "Slice", &["s", "starts", "ends", "axes01"], &["sl"]),
            node("p", "Pad", &["sl", "pads", "value"], &["p"]),
            node("c", "Clip", &["p", "lo", "hi"], &["c"]),
            with(
                node("sp", "Split", &["c", "sizes"], &["a", "b"]),
                vec![int("axis", 2)],
            ),
            with(
                node("r", "ReduceSum", &["b", "axes2"], &["r"]),
                vec![int("keepdims", 1)],
            ),
            node("t", "Add", &["a", "r"], &["t"]),
            node("f", "Reshape", &["t", "flat"], &["f"]),
            with(node("sm", "Softmax", &["f"], &["g"]), vec![int("axis", 1)]),
            node("back", "Reshape", &["g", "shape"], &["y"]),
        ],
        x_in,
        y_out(),
    );
    new.opset_import[0].version = 13;
    new.graph.as_mut().unwrap().initializer = vec![
        int64s("axes0", &[0]),
        int64s("starts", &[0, 1]),
        int64s("ends", &[2, 3]),
        int64s("axes01", &[0, 1]),
        int64s("pads", &[0, 0, 1, 0, 0, 1]),
        scalar("value", 0.75),
        scalar("lo", -0.5),
        scalar("hi", 0.6),
        int64s("sizes", &[2, 4]),
        int64s("axes2", &[2]),
        int64s("flat", &[2, 4]),
        int64s("shape", &[2, 2, 2]),
    ];
    let x = Literal::from_f32(
        vec![2, 3, 4],
        &(0..24).map(|i| (i as f32 * 0.61).sin()).collect::<Vec<_>>(),
    );
    let a = run_interp("opset9_forms", &old, &x);
    let b = run_interp("opset13_forms", &new, &x);
    assert_eq!(a[0].dims, vec![2, 2, 2]);
    assert_eq!(a[0].to_f32_vec().unwrap(), b[0].to_f32_vec().unwrap());
    // The 2-D coercion normalises over 4 values per batch row, not over axis 1 alone.
    let v = a[0].to_f32_vec().unwrap();
    assert!((v[..4].iter().sum::<f32>() - 1.0).abs() < 1e-6, "{v:?}");

    // Opset 13 forms in an opset 9 model are errors naming the node.
    let mut mixed = new.clone();
    mixed.opset_import[0].version = 9;
    let e = import_err("mixed_forms", &mixed.encode_to_vec());
    assert!(
        e.contains("node #0 `u` (Unsqueeze)") && e.contains("takes 1 input(s), found 2"),
        "{e}"
    );
}

/// IR 3 lists every initializer as a graph input: they are weights (constants) unless
/// `ImportOptions::initializers_as_inputs` keeps them as run-time inputs.
#[test]
fn ir3_initializers_listed_as_inputs_are_weights_unless_the_option_keeps_them() {
    let mut m = conv_relu();
    m.ir_version = 3;
    m.opset_import[0].version = 9;
    let g = m.graph.as_mut().unwrap();
    g.input.push(value("w", data_type::FLOAT, &[3, 2, 3, 3]));
    let w = Literal::from_f32(vec![3, 2, 3, 3], &g.initializer[0].float_data);
    let bytes = m.encode_to_vec();
    let p = write("ir3", &bytes);
    let weights = load(&p);
    assert_eq!(weights.entry.parameters().len(), 1, "w is a weight");

    let opts = ImportOptions {
        initializers_as_inputs: true,
        ..Default::default()
    };
    let inputs = import_file_with(&p, &bytes, "ir3", &opts).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<String> = inputs
        .entry
        .parameters()
        .iter()
        .map(|&i| inputs.entry.inst(i).name.clone())
        .collect();
    assert_eq!(names, vec!["x_in", "w"]);
    let x = Literal::from_f32(
        vec![1, 2, 5, 5],
        &(0..50).map(|i| (i as f32 * 0.37).sin()).collect::<Vec<_>>(),
    );
    let a = xla_aot::interp::evaluate(&weights, std::slice::from_ref(&x)).unwrap();
    let b = xla_aot::interp::evaluate(&inputs, &[x, w]).unwrap();
    assert_eq!(a[0].to_f32_vec().unwrap(), b[0].to_f32_vec().unwrap());
}

/// Old-opset forms the compiler cannot run are errors that say why.
#[test]
fn batch_norm_spatial_0_is_a_clear_error_and_upsample_repeats_pixels() {
    let mut bn = model(
        vec![with(
            node(
                "bn",
                "BatchNormalization",
                &["x", "s", "b", "m", "v"],
                &["y"],
            ),
            vec![int("spatial", 0)],
        )],
        vec![value("x", data_type::FLOAT, &[1, 2, 3])],
        vec![value("y", data_type::FLOAT, &[1, 2, 3])],
    );
    bn.opset_import[0].version = 7;
    bn.graph.as_mut().unwrap().initializer = ["s", "b", "m", "v"]
        .iter()
        .map(|n| TensorProto {
            name: n.to_string(),
            dims: vec![2],
            data_type: data_type::FLOAT,
            float_data: vec![1.0, 1.0],
            ..Default::default()
        })
        .collect();
    let e = import_err("bn_spatial", &bn.encode_to_vec());
    assert!(
        e.contains("node #0 `bn` (BatchNormalization)") && e.contains("`spatial`: 0"),
        "{e}"
    );

    // Upsample (opset 9): nearest with asymmetric coordinates repeats each pixel.
    let mut up = model(
        vec![node("up", "Upsample", &["x", "scales"], &["y"])],
        vec![value("x", data_type::FLOAT, &[1, 1, 2, 2])],
        vec![value("y", data_type::FLOAT, &[1, 1, 4, 4])],
    );
    up.opset_import[0].version = 9;
    up.graph.as_mut().unwrap().initializer.push(TensorProto {
        name: "scales".into(),
        dims: vec![4],
        data_type: data_type::FLOAT,
        float_data: vec![1.0, 1.0, 2.0, 2.0],
        ..Default::default()
    });
    let x = Literal::from_f32(vec![1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let y = run_interp("upsample", &up, &x);
    assert_eq!(
        y[0].to_f32_vec().unwrap(),
        [
            1., 1., 2., 2., 1., 1., 2., 2., 3., 3., 4., 4., 3., 3., 4., 4.
        ]
    );
}

#[test]
fn two_nodes_writing_one_name_is_an_error_naming_both() {
    let m = model(
        vec![
            node("first", "Relu", &["x"], &["y"]),
            node("second", "Tanh", &["x"], &["y"]),
        ],
        vec![value("x", data_type::FLOAT, &[3])],
        vec![value("y", data_type::FLOAT, &[3])],
    );
    let e = import_err("twowriters", &m.encode_to_vec());
    assert!(
        e.contains("node #1 `second` (Tanh)")
            && e.contains("it writes `y`, which node #0 `first` (Relu) already writes"),
        "{e}"
    );
    // A node may not overwrite a graph input either.
    let m = model(
        vec![node("over", "Relu", &["x"], &["x"])],
        vec![value("x", data_type::FLOAT, &[3])],
        vec![value("x", data_type::FLOAT, &[3])],
    );
    let e = import_err("overinput", &m.encode_to_vec());
    assert!(
        e.contains("`x`, which is a graph input or initializer"),
        "{e}"
    );
}

/// bfloat16 `x` rounded (nearest even), as f32.
fn bf16(x: f32) -> f32 {
    xla_aot::ir::half::bf16_to_f32(xla_aot::ir::half::f32_to_bf16(x))
}

/// Softmax over rows of `n` bfloat16 values as onnx's reference computes it on
/// `ml_dtypes.bfloat16` (`front/onnx/bf16_graph.rs`): every step rounded, the sum in order with a
/// rounding after each addition (`sequential`), or in f32 rounded once.
fn softmax_bf16_reference(x: &[f32], n: usize, sequential: bool) -> Vec<f32> {
    let mut y = Vec::new();
    for row in x.chunks(n) {
        let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f32> = row
            .iter()
            .map(|&v| bf16((bf16(v - m) as f64).exp() as f32))
            .collect();
        let s = if sequential {
            e[1..].iter().fold(e[0], |s, &v| bf16(s + v))
        } else {
            bf16(e.iter().sum())
        };
        y.extend(e.iter().map(|&v| bf16(v / s)));
    }
    y
}

/// A bfloat16 Softmax rounds each step as onnx's reference does: over 6 elements the sum is
/// rounded after every addition (6 slices of the exponentials), over 300 (more than
/// `BF16_SEQUENTIAL_SUM_MAX`) it is an f32 reduction rounded once; the compiled library gives
/// the reference's bits, which an f32 sum would not.
#[test]
fn bfloat16_softmax_rounds_each_step_as_the_onnx_reference() {
    let mut m = model(
        vec![
            node("short", "Softmax", &["a"], &["ya"]),
            node("long", "Softmax", &["b"], &["yb"]),
        ],
        vec![
            value("a", data_type::BFLOAT16, &[16, 6]),
            value("b", data_type::BFLOAT16, &[2, 300]),
        ],
        vec![
            value("ya", data_type::BFLOAT16, &[16, 6]),
            value("yb", data_type::BFLOAT16, &[2, 300]),
        ],
    );
    m.opset_import[0].version = 13;
    let module = load(&write("bf16_softmax", &m.encode_to_vec()));
    let slices = module
        .entry
        .instructions
        .iter()
        .filter(|i| matches!(i.op, xla_aot::ir::Op::Slice { .. }))
        .count();
    assert_eq!(slices, 6, "one slice per element of the short rows only");
    let input = |n: usize, seed: f32| -> (Vec<f32>, Literal) {
        let v: Vec<f32> = (0..n)
            .map(|i| bf16(((i as f32 * 0.731 + seed).sin() * 3.0).round() / 4.0 + 0.01 * i as f32))
            .collect();
        let bytes: Vec<u8> = v
            .iter()
            .flat_map(|&x| xla_aot::ir::half::f32_to_bf16(x).to_le_bytes())
            .collect();
        let lit = Literal {
            dtype: xla_aot::ir::DType::BF16,
            dims: Vec::new(),
            data: xla_aot::ir::LiteralData::Dense(bytes.into()),
        };
        (v, lit)
    };
    let (a, mut la) = input(16 * 6, 0.3);
    let (b, mut lb) = input(2 * 300, 1.1);
    la.dims = vec![16, 6];
    lb.dims = vec![2, 300];
    let got = xla_aot::compile::run_host(&module, &[la, lb]).unwrap();
    let (ya, yb) = (got[0].to_f64_vec(), got[1].to_f64_vec());
    let want_a = softmax_bf16_reference(&a, 6, true);
    let f32_sum = softmax_bf16_reference(&a, 6, false);
    assert!(
        want_a.iter().zip(&f32_sum).any(|(x, y)| x != y),
        "the test data tells the sequential sum from an f32 sum"
    );
    for (i, (&g, &w)) in ya.iter().zip(&want_a).enumerate() {
        assert_eq!(g as f32, w, "short row element {i}");
    }
    for (i, (&g, &w)) in yb
        .iter()
        .zip(&softmax_bf16_reference(&b, 300, false))
        .enumerate()
    {
        assert_eq!(g as f32, w, "long row element {i}");
    }
}
