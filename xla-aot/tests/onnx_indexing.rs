//! Index-driven ONNX ops on small models built here, with run-time int32 indices and values the
//! node tests do not reach: GatherND with run-time indices wraps negative coordinates and clamps
//! out-of-range ones into the data, on the interpreter and the host JIT alike; ScatterND with
//! run-time indices wraps negative ones, skips rows outside the data and reduces duplicates;
//! ScatterElements does the same along its axis; ReverseSequence with run-time lengths is an
//! error naming the node; BitShift is exact on int32 values beyond the node tests' small ones;
//! GridSample matches ONNX's reference in every mode × padding × align_corners combination (the
//! node tests cover reflection only with bilinear) on points far outside the image.
//! NegativeLogLikelihoodLoss with run-time int32 targets: an ignored class inside [0, C), a
//! target outside it (loss 0), weights and the mean over the kept weights; a target of the wrong
//! shape is an error naming the node.

mod common;

use common::onnx_proto::{attr_int, node, value};
use prost::Message;
use std::path::PathBuf;
use xla_aot::front::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, ValueInfoProto,
    attribute_type, data_type,
};
use xla_aot::front::{Format, load_file};
use xla_aot::ir::{Literal, Module};

fn model(
    opset: i64,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opset,
        }],
        producer_name: "onnx_indexing.rs".into(),
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

fn write(tag: &str, m: &ModelProto) -> PathBuf {
    let dir = common::scratch(&format!("onnx-indexing-{tag}"));
    let p = dir.join(format!("{tag}.onnx"));
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    p
}

fn load(tag: &str, m: &ModelProto) -> Module {
    load_file(&write(tag, m), Format::Onnx)
        .unwrap_or_else(|e| panic!("{e}"))
        .module
}

fn import_err(tag: &str, m: &ModelProto) -> String {
    match load_file(&write(tag, m), Format::Onnx) {
        Ok(_) => panic!("{tag}: imported, expected an error"),
        Err(e) => e.to_string(),
    }
}

fn attr_str(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: attribute_type::STRING,
        s: v.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// Runs `m` on the interpreter and the host JIT; both must agree, the JIT's result is returned.
fn run_both(m: &Module, inputs: &[Literal]) -> Vec<Literal> {
    let want = xla_aot::interp::evaluate(m, inputs).unwrap();
    let got = xla_aot::compile::run_host(m, inputs).unwrap();
    for (g, w) in got.iter().zip(&want) {
        common::check_close(g, w).unwrap();
    }
    got
}

#[test]
fn gather_nd_run_time_indices_wrap_and_clamp_into_the_data() {
    let mut g = node("g0", "GatherND", &["data", "idx"], &["y"]);
    let m = model(
        13,
        vec![g.clone()],
        vec![
            value("data", data_type::FLOAT, &[3, 4]),
            value("idx", data_type::INT32, &[4, 2]),
        ],
        vec![value("y", data_type::FLOAT, &[4])],
    );
    let m = load("gathernd", &m);
    let data = Literal::from_f32(vec![3, 4], &(0..12).map(|v| v as f32).collect::<Vec<_>>());
    // (0, 1); (-1 → 2, 0); (2, 5 → clamped 3); (7 → clamped 2, -9 → -5 → clamped 0).
    let idx = Literal::from_i32(vec![4, 2], &[0, 1, -1, 0, 2, 5, 7, -9]);
    let y = run_both(&m, &[data.clone(), idx]);
    assert_eq!(y[0].to_f32_vec().unwrap(), vec![1.0, 8.0, 11.0, 8.0]);

    // batch_dims = 1: one row per batch entry.
    g.attribute.push(attr_int("batch_dims", 1));
    let m = model(
        13,
        vec![g],
        vec![
            value("data", data_type::FLOAT, &[2, 3, 2]),
            value("idx", data_type::INT32, &[2, 1]),
        ],
        vec![value("y", data_type::FLOAT, &[2, 2])],
    );
    let m = load("gathernd_batch", &m);
    let data = Literal::from_f32(
        vec![2, 3, 2],
        &(0..12).map(|v| v as f32).collect::<Vec<_>>(),
    );
    let idx = Literal::from_i32(vec![2, 1], &[2, -3]);
    let y = run_both(&m, &[data, idx]);
    assert_eq!(y[0].to_f32_vec().unwrap(), vec![4.0, 5.0, 6.0, 7.0]);
}

/// ScatterND(data[4, 2], run-time int32 indices[3, 1], updates[3, 2]) with `reduction`.
fn scatter_nd_rt(tag: &str, reduction: &str, idx: [i32; 3]) -> Vec<f32> {
    let mut n = node("s0", "ScatterND", &["data", "idx", "upd"], &["y"]);
    n.attribute.push(attr_str("reduction", reduction));
    let m = model(
        18,
        vec![n],
        vec![
            value("data", data_type::FLOAT, &[4, 2]),
            value("idx", data_type::INT32, &[3, 1]),
            value("upd", data_type::FLOAT, &[3, 2]),
        ],
        vec![value("y", data_type::FLOAT, &[4, 2])],
    );
    let m = load(tag, &m);
    let data: Vec<f32> = (0..8).map(|v| v as f32).collect();
    let y = run_both(
        &m,
        &[
            Literal::from_f32(vec![4, 2], &data),
            Literal::from_i32(vec![3, 1], &idx),
            Literal::from_f32(vec![3, 2], &[10.0, 11.0, 20.0, 21.0, 30.0, 31.0]),
        ],
    );
    y[0].to_f32_vec().unwrap()
}

#[test]
fn scatter_nd_with_run_time_indices_wraps_and_skips_rows_outside_the_data() {
    // -1 is row 3; 7 is outside the data and writes nothing.
    assert_eq!(
        scatter_nd_rt("scatternd_rt_none", "none", [-1, 1, 7]),
        vec![0.0, 1.0, 20.0, 21.0, 4.0, 5.0, 10.0, 11.0]
    );
    // Three updates to row 1 (-3 wraps to 1) add up.
    assert_eq!(
        scatter_nd_rt("scatternd_rt_add", "add", [1, 1, -3]),
        vec![0.0, 1.0, 62.0, 66.0, 4.0, 5.0, 6.0, 7.0]
    );
    assert_eq!(
        scatter_nd_rt("scatternd_rt_max", "max", [1, 1, -3]),
        vec![0.0, 1.0, 30.0, 31.0, 4.0, 5.0, 6.0, 7.0]
    );
    assert_eq!(
        scatter_nd_rt("scatternd_rt_mul", "mul", [0, 2, 2]),
        vec![0.0, 11.0, 2.0, 3.0, 4.0 * 600.0, 5.0 * 651.0, 6.0, 7.0]
    );
}

/// ScatterElements(data, run-time int32 indices, updates) along `axis` with `reduction`.
fn scatter_elements_rt(
    tag: &str,
    axis: i64,
    reduction: &str,
    (dd, data): (&[i64], &[f32]),
    (id, idx, upd): (&[i64], &[i32], &[f32]),
) -> Vec<f32> {
    let mut n = node("s0", "ScatterElements", &["data", "idx", "upd"], &["y"]);
    n.attribute.push(attr_int("axis", axis));
    n.attribute.push(attr_str("reduction", reduction));
    let m = model(
        18,
        vec![n],
        vec![
            value("data", data_type::FLOAT, dd),
            value("idx", data_type::INT32, id),
            value("upd", data_type::FLOAT, id),
        ],
        vec![value("y", data_type::FLOAT, dd)],
    );
    let m = load(tag, &m);
    let u = |d: &[i64]| d.iter().map(|&v| v as usize).collect::<Vec<_>>();
    let y = run_both(
        &m,
        &[
            Literal::from_f32(u(dd), data),
            Literal::from_i32(u(id), idx),
            Literal::from_f32(u(id), upd),
        ],
    );
    y[0].to_f32_vec().unwrap()
}

#[test]
fn scatter_elements_with_run_time_indices_wraps_skips_and_reduces() {
    let data: Vec<f32> = (0..12).map(|v| v as f32).collect();
    // Along axis 1 of [3, 4] with [2, 2] indices: row 0 writes 10 at -1 (column 3) and nothing
    // at 5; row 1 writes twice at column 0 (the last wins, or both add); row 2 is not indexed.
    let at = (
        &[2i64, 2][..],
        &[-1, 5, 0, 0][..],
        &[10.0, 11.0, 20.0, 21.0][..],
    );
    assert_eq!(
        scatter_elements_rt("se_rt_none", 1, "none", (&[3, 4], &data), at),
        vec![
            0.0, 1.0, 2.0, 10.0, 21.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0
        ]
    );
    assert_eq!(
        scatter_elements_rt("se_rt_add", 1, "add", (&[3, 4], &data), at),
        vec![
            0.0, 1.0, 2.0, 13.0, 45.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0
        ]
    );
    // Along axis 0 of [3, 2]: (2, 0) <- 7 and (-3 = 0, 1) <- 8.
    assert_eq!(
        scatter_elements_rt(
            "se_rt_axis0",
            0,
            "none",
            (&[3, 2], &data[..6]),
            (&[1, 2], &[2, -3], &[7.0, 8.0])
        ),
        vec![0.0, 8.0, 2.0, 3.0, 7.0, 5.0]
    );
}

#[test]
fn run_time_sequence_lengths_are_an_error_naming_the_node() {
    let m = model(
        18,
        vec![node("r0", "ReverseSequence", &["x", "lens"], &["y"])],
        vec![
            value("x", data_type::FLOAT, &[3, 2]),
            value("lens", data_type::INT32, &[2]),
        ],
        vec![value("y", data_type::FLOAT, &[3, 2])],
    );
    let e = import_err("revseq_rt", &m);
    assert!(
        e.contains("node #0 `r0` (ReverseSequence)") && e.contains("sequence_lens"),
        "{e}"
    );
}

#[test]
fn a_scatter_piling_thousands_of_updates_on_one_element_is_an_error() {
    const N: usize = 10_000;
    let mut n = node("s0", "ScatterElements", &["data", "idx", "upd"], &["y"]);
    n.attribute.push(attr_str("reduction", "add"));
    let mut m = model(
        18,
        vec![n],
        vec![
            value("data", data_type::FLOAT, &[N as i64]),
            value("upd", data_type::FLOAT, &[N as i64]),
        ],
        vec![value("y", data_type::FLOAT, &[N as i64])],
    );
    m.graph
        .as_mut()
        .unwrap()
        .initializer
        .push(xla_aot::front::onnx::proto::TensorProto {
            name: "idx".into(),
            dims: vec![N as i64],
            data_type: data_type::INT64,
            int64_data: vec![0; N],
            ..Default::default()
        });
    let e = import_err("scatter_pile", &m);
    assert!(
        e.contains("node #0 `s0` (ScatterElements)")
            && e.contains("10000 updates go to one element"),
        "{e}"
    );
}

/// A shift direction, the values, the shifts and the expected results.
type ShiftCase = (&'static str, [i32; 4], [i32; 4], [i32; 4]);

#[test]
fn bit_shift_is_exact_on_larger_int32_values() {
    let cases: [ShiftCase; 2] = [
        (
            "LEFT",
            [12345, -12345, 1 << 20, 3],
            [7, 3, 11, 30],
            // 2^31 and 3·2^30 wrap to two's complement.
            [12345 << 7, -12345 << 3, i32::MIN, -(1 << 30)],
        ),
        (
            "RIGHT",
            [12345, -12345, -1, i32::MIN],
            [7, 3, 31, 4],
            [12345 >> 7, -12345 >> 3, -1, i32::MIN >> 4],
        ),
    ];
    for (dir, x, s, want) in cases {
        let mut n = node("b0", "BitShift", &["x", "s"], &["y"]);
        n.attribute.push(attr_str("direction", dir));
        let m = model(
            11,
            vec![n],
            vec![
                value("x", data_type::INT32, &[4]),
                value("s", data_type::INT32, &[4]),
            ],
            vec![value("y", data_type::INT32, &[4])],
        );
        let m = load(&format!("bitshift_{dir}"), &m);
        let y = run_both(
            &m,
            &[
                Literal::from_i32(vec![4], &x),
                Literal::from_i32(vec![4], &s),
            ],
        );
        assert_eq!(y[0].to_i32_vec().unwrap(), want, "{dir}");
    }
}

/// One GridSample case: mode, padding mode, align_corners, and ONNX's reference output
/// (`onnx.reference.ReferenceEvaluator`, onnx 1.23) for [`GRID_X`] and [`GRID_G`].
type GridCase = (&'static str, &'static str, i64, [f32; 5]);

/// X[1, 1, 3, 4] = ((0..12) / 2 − 2)².
const GRID_X: [f32; 12] = [
    4.0, 2.25, 1.0, 0.25, 0.0, 0.25, 1.0, 2.25, 4.0, 6.25, 9.0, 12.25,
];
/// grid[1, 1, 5, 2] (x, y): three points outside [−1, 1], two inside.
const GRID_G: [f32; 10] = [-1.7, 0.3, 0.9, -1.4, 2.2, 2.6, -0.35, 0.8, 0.1, -0.05];

const GRID_CASES: [GridCase; 18] = [
    ("linear", "zeros", 0, [0.0, 0.0, 0.0, 4.640001, 0.82]),
    ("linear", "zeros", 1, [0.0, 0.2175, 0.0, 5.00375, 0.7725]),
    ("linear", "border", 0, [1.8, 0.25, 12.25, 5.8, 0.82]),
    ("linear", "border", 1, [1.2, 0.3625, 12.25, 5.00375, 0.7725]),
    (
        "linear",
        "reflection",
        0,
        [2.835, 0.45, 1.944999, 5.8, 0.82],
    ),
    (
        "linear",
        "reflection",
        1,
        [2.1175, 1.0425, 1.36, 5.00375, 0.7725],
    ),
    ("nearest", "zeros", 0, [0.0, 0.0, 0.0, 6.25, 1.0]),
    ("nearest", "zeros", 1, [0.0, 0.25, 0.0, 6.25, 1.0]),
    ("nearest", "border", 0, [0.0, 0.25, 12.25, 6.25, 1.0]),
    ("nearest", "border", 1, [0.0, 0.25, 12.25, 6.25, 1.0]),
    ("nearest", "reflection", 0, [0.25, 0.25, 2.25, 6.25, 1.0]),
    ("nearest", "reflection", 1, [0.25, 0.25, 2.25, 6.25, 1.0]),
    (
        "cubic",
        "zeros",
        0,
        [-0.011482, -0.005927, 0.0, 5.218257, 0.359118],
    ),
    (
        "cubic",
        "zeros",
        1,
        [-0.029241, 0.003998, 0.021168, 5.657799, 0.414533],
    ),
    (
        "cubic",
        "border",
        0,
        [1.366875, 0.167313, 12.25, 6.113778, 0.353855],
    ),
    (
        "cubic",
        "border",
        1,
        [0.675, 0.327837, 12.25, 5.06502, 0.412048],
    ),
    (
        "cubic",
        "reflection",
        0,
        [2.486771, 0.252077, 1.862216, 6.244721, 0.353855],
    ),
    (
        "cubic",
        "reflection",
        1,
        [2.085026, 0.093534, 0.991168, 5.632933, 0.413417],
    ),
];

/// ONNX's reference prints six decimals; f32 coordinate arithmetic adds a few ulps.
const GRID_TOL: f32 = 2e-5;

#[test]
fn grid_sample_matches_the_onnx_reference_in_every_mode_and_padding() {
    for (mode, padding, align, want) in GRID_CASES {
        let mut n = node("gs0", "GridSample", &["x", "grid"], &["y"]);
        n.attribute.push(attr_str("mode", mode));
        n.attribute.push(attr_str("padding_mode", padding));
        n.attribute.push(attr_int("align_corners", align));
        let m = model(
            20,
            vec![n],
            vec![
                value("x", data_type::FLOAT, &[1, 1, 3, 4]),
                value("grid", data_type::FLOAT, &[1, 1, 5, 2]),
            ],
            vec![value("y", data_type::FLOAT, &[1, 1, 1, 5])],
        );
        let m = load(&format!("gridsample_{mode}_{padding}_{align}"), &m);
        let y = run_both(
            &m,
            &[
                Literal::from_f32(vec![1, 1, 3, 4], &GRID_X),
                Literal::from_f32(vec![1, 1, 5, 2], &GRID_G),
            ],
        );
        let got = y[0].to_f32_vec().unwrap();
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= GRID_TOL * (1.0 + w.abs()),
                "{mode} {padding} align_corners={align}: got {got:?}, want {want:?}"
            );
        }
    }
}

#[test]
fn nll_loss_ignores_a_class_picks_nothing_out_of_range_and_averages_over_kept_weights() {
    let mut n = node("l0", "NegativeLogLikelihoodLoss", &["x", "t", "w"], &["y"]);
    n.attribute.push(attr_int("ignore_index", 1));
    let io = |t: &[i64]| {
        vec![
            value("x", data_type::FLOAT, &[4, 3]),
            value("t", data_type::INT32, t),
            value("w", data_type::FLOAT, &[3]),
        ]
    };
    let m = load(
        "nll",
        &model(
            13,
            vec![n.clone()],
            io(&[4]),
            vec![value("y", data_type::FLOAT, &[])],
        ),
    );
    let x = Literal::from_f32(vec![4, 3], &(1..=12).map(|v| v as f32).collect::<Vec<_>>());
    let w = Literal::from_f32(vec![3], &[0.5, 2.0, 4.0]);
    // Rows pick class 2 (−3·4), 1 (ignored), 0 (−7·0.5) and 5 (outside [0, 3): nothing).
    let t = Literal::from_i32(vec![4], &[2, 1, 0, 5]);
    let y = run_both(&m, &[x, t, w])[0].to_f32_vec().unwrap();
    assert_eq!(y, vec![(-12.0 - 3.5) / (4.0 + 0.5)]);

    let m = model(
        13,
        vec![n],
        io(&[4, 1]),
        vec![value("y", data_type::FLOAT, &[])],
    );
    let e = import_err("nll_dims", &m);
    assert!(
        e.contains("node #0 `l0` (NegativeLogLikelihoodLoss)") && e.contains("must be [4]"),
        "{e}"
    );
}
