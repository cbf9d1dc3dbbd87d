//! ONNX ops decomposed into the IR's elementwise ops, checked beyond the node tests' few random
//! values: the nine trigonometric and hyperbolic functions (`front/onnx/trig.rs`) against Rust's
//! f64 functions over their whole domains (the edges ±1, 1, large and infinite arguments
//! included), on the interpreter and the host JIT; CumSum's exclusive and reverse forms on int32;
//! GroupNormalization with opset 18's per-group scale and bias.

mod common;

use common::onnx_proto::{attr_int, node, value};
use prost::Message;
use xla_aot::front::onnx::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, ValueInfoProto, data_type,
};
use xla_aot::front::{Format, load_file};
use xla_aot::ir::{Literal, Module};

/// Worst error allowed, relative to max(|reference|, 1): Cephes' `atanf` is within about 1e-7,
/// the compositions lose a few ulps more (`acosh` near 1, `atanh` near ±1).
const TOLERANCE: f64 = 4e-6;

fn load(
    tag: &str,
    opset: i64,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    init: Vec<TensorProto>,
    out: ValueInfoProto,
) -> Module {
    let m = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        graph: Some(GraphProto {
            name: "g".into(),
            node: nodes,
            input: inputs,
            initializer: init,
            output: vec![out],
            ..Default::default()
        }),
        ..Default::default()
    };
    let p = common::scratch(&format!("onnx-math-{tag}")).join("m.onnx");
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    load_file(&p, Format::Onnx)
        .unwrap_or_else(|e| panic!("{tag}: {e}"))
        .module
}

/// The interpreter's and the host JIT's outputs (any element type, as f64).
fn run(m: &Module, inputs: &[Literal]) -> [Vec<f64>; 2] {
    let a = xla_aot::interp::evaluate(m, inputs).unwrap();
    let b = xla_aot::compile::run_host(m, inputs).unwrap();
    [a[0].to_f64_vec(), b[0].to_f64_vec()]
}

#[test]
fn trigonometric_and_hyperbolic_functions_match_f64_over_their_domains() {
    let grid = |lo: f64, hi: f64| -> Vec<f32> {
        (0..=200)
            .map(|i| (lo + (hi - lo) * i as f64 / 200.0) as f32)
            .collect()
    };
    let wide: Vec<f32> = grid(-8.0, 8.0)
        .into_iter()
        .chain([1e-6, -1e-6, 1e4, -3e7, f32::INFINITY, f32::NEG_INFINITY])
        .collect();
    type Case = (&'static str, Vec<f32>, fn(f64) -> f64);
    let cases: [Case; 9] = [
        ("Tan", grid(-1.5, 1.5), f64::tan),
        ("Atan", wide.clone(), f64::atan),
        ("Asin", grid(-1.0, 1.0), f64::asin),
        ("Acos", grid(-1.0, 1.0), f64::acos),
        ("Sinh", grid(-10.0, 10.0), f64::sinh),
        ("Cosh", grid(-10.0, 10.0), f64::cosh),
        (
            "Asinh",
            wide.iter().copied().filter(|x| x.is_finite()).collect(),
            f64::asinh,
        ),
        ("Acosh", grid(1.0, 1e3), f64::acosh),
        ("Atanh", grid(-0.999, 0.999), f64::atanh),
    ];
    for (op, xs, f) in cases {
        let n = xs.len() as i64;
        let m = load(
            op,
            13,
            vec![node("t", op, &["x"], &["y"])],
            vec![value("x", data_type::FLOAT, &[n])],
            vec![],
            value("y", data_type::FLOAT, &[n]),
        );
        let x = Literal::from_f32(vec![xs.len()], &xs);
        for (who, ys) in ["interpreter", "JIT"].iter().zip(run(&m, &[x])) {
            for (&x, &y) in xs.iter().zip(&ys) {
                let want = f(x as f64);
                let err = (y - want).abs() / want.abs().max(1.0);
                assert!(
                    err <= TOLERANCE,
                    "{op}({x}) on the {who}: {y}, expected {want} (error {err:.1e})"
                );
            }
        }
    }
}

#[test]
fn cum_sum_exclusive_and_reverse_on_int32() {
    let x: Vec<i32> = vec![1, 2, 3, 4, 50, 60, 70, 80];
    let want: [(i64, i64, [i32; 8]); 4] = [
        (0, 0, [1, 3, 6, 10, 50, 110, 180, 260]),
        (1, 0, [0, 1, 3, 6, 0, 50, 110, 180]),
        (0, 1, [10, 9, 7, 4, 260, 210, 150, 80]),
        (1, 1, [9, 7, 4, 0, 210, 150, 80, 0]),
    ];
    let axis = TensorProto {
        dims: vec![],
        data_type: data_type::INT64,
        int64_data: vec![1],
        name: "axis".into(),
        ..Default::default()
    };
    for (exclusive, reverse, want) in want {
        let mut n = node("c", "CumSum", &["x", "axis"], &["y"]);
        n.attribute = vec![
            attr_int("exclusive", exclusive),
            attr_int("reverse", reverse),
        ];
        let m = load(
            "cumsum",
            14,
            vec![n],
            vec![value("x", data_type::INT32, &[2, 4])],
            vec![axis.clone()],
            value("y", data_type::INT32, &[2, 4]),
        );
        for ys in run(&m, &[Literal::from_i32(vec![2, 4], &x)]) {
            let want: Vec<f64> = want.iter().map(|&v| v as f64).collect();
            assert_eq!(ys, want, "exclusive {exclusive} reverse {reverse}");
        }
    }
}

#[test]
fn group_normalization_reads_opset_18_per_group_scale_and_bias() {
    // 4 channels in 2 groups, 2 pixels: group 0 holds [0, 2 | 4, 6] (mean 3, variance 5).
    let x: Vec<f32> = vec![0.0, 2.0, 4.0, 6.0, 1.0, 1.0, 1.0, 1.0];
    let f = |name: &str, v: &[f32]| TensorProto {
        dims: vec![2],
        data_type: data_type::FLOAT,
        float_data: v.to_vec(),
        name: name.into(),
        ..Default::default()
    };
    let mut n = node("g", "GroupNormalization", &["x", "s", "b"], &["y"]);
    n.attribute = vec![attr_int("num_groups", 2)];
    let m = load(
        "groupnorm18",
        18,
        vec![n],
        vec![value("x", data_type::FLOAT, &[1, 4, 2])],
        vec![f("s", &[2.0, 3.0]), f("b", &[10.0, -1.0])],
        value("y", data_type::FLOAT, &[1, 4, 2]),
    );
    let inv = 1.0 / (5.0f32 + 1e-5).sqrt();
    let want: Vec<f32> = [-3.0, -1.0, 1.0, 3.0]
        .iter()
        .map(|d| 10.0 + 2.0 * d * inv)
        .chain([-1.0; 4])
        .collect();
    for ys in run(&m, &[Literal::from_f32(vec![1, 4, 2], &x)]) {
        for (y, w) in ys.iter().zip(&want) {
            assert!((y - *w as f64).abs() <= 1e-5, "{ys:?} against {want:?}");
        }
    }
}
