//! The spec's quantization ops (`front/spec/lower/quant.rs`): `quantize` and `dequantize` give
//! ONNX `QuantizeLinear` / `DequantizeLinear`'s numbers (hand-computed below: round half to even,
//! saturation, zero points, per-channel scales), in the interpreter and in compiled code, with
//! `uint8_t` / `int8_t` outputs at the C API; an int8 weight in the params folder, dequantized
//! per output channel, runs a convolution on the int8 kernel (`vpdpbusd` on AVX-512 VNNI) and
//! matches the interpreter within one quantization step (on at most 1% of the outputs).

mod common;

use common::run_compiled;
use std::path::Path;
use xla_aot::compile::compile_model;
use xla_aot::interp::evaluate;
use xla_aot::ir::{DType, Literal, LiteralData, Module};
use xla_aot::target::Target;
use xla_aot::util::rng::SplitMix64;

fn spec(dir: &Path, text: &str) -> Module {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("model.yaml");
    std::fs::write(&path, text).unwrap();
    xla_aot::front::load_spec(&path)
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .module
}

fn f32s(dims: &[usize], v: &[f32]) -> Literal {
    Literal::from_f32(dims.to_vec(), v)
}

/// The first x86-64 target this machine runs (VNNI where it has it).
fn host() -> Target {
    ["x86_64-avx512-vnni", "x86_64-avx512", "x86_64-avx2"]
        .into_iter()
        .map(|n| Target::resolve(n).unwrap())
        .find(Target::runs_here)
        .expect("an x86-64 target runs here")
}

#[test]
fn quantize_and_dequantize_give_onnx_integers() {
    let dir = std::env::temp_dir().join("xla-aot-spec-quant-values");
    let m = spec(
        &dir,
        "name: qvals
inputs:
  - {name: x, dtype: f32, shape: [6]}
  - {name: y, dtype: f32, shape: [3, 2]}
outputs: [qu, qi, d, qc, dc]
constants:
  - {name: s, value: 0.05}
  - {name: z, value: 128, dtype: i32}
  - {name: sc, value: [0.5, 2.0]}
ops:
  - {name: qu, op: quantize, inputs: [x, s, z]}
  - {name: qi, op: quantize, inputs: [x, s], dtype: i8}
  - {name: d, op: dequantize, inputs: [qu, s, z]}
  - {name: qc, op: quantize, inputs: [y, sc], dtype: i8, axis: 1}
  - {name: dc, op: dequantize, inputs: [qc, sc], axis: 1}
",
    );
    assert_eq!(m.output_dtype(0), DType::U8);
    assert_eq!(m.output_dtype(1), DType::I8);
    assert_eq!(m.output_dtype(2), DType::F32);
    assert_eq!(m.output_dtype(3), DType::I8);
    let x = f32s(&[6], &[-1.0, 0.0, 0.026, 0.075, 6.4, 100.0]);
    let y = f32s(&[3, 2], &[1.0, 1.0, -3.3, 5.0, 100.0, -100.0]);
    // x / 0.05 = -20, 0, 0.52, 1.5, 128, 2000: clamped to [0 - 128, 255 - 128], rounded half to
    // even, plus the zero point; y / [0.5, 2] = [2, 0.5], [-6.6, 2.5], [200, -50].
    let qu: Vec<u8> = vec![108, 128, 129, 130, 255, 255];
    let qi: Vec<u8> = [-20i8, 0, 1, 2, 127, 127]
        .iter()
        .map(|&v| v as u8)
        .collect();
    let d = [-1.0f32, 0.0, 0.05, 0.1, 6.35, 6.35];
    let qc: Vec<u8> = [2i8, 0, -7, 2, 127, -50].iter().map(|&v| v as u8).collect();
    let dc = [1.0f32, 0.0, -3.5, 4.0, 63.5, -100.0];
    let check = |outs: &[Literal], tag: &str| {
        assert_eq!(outs[0].dtype, DType::U8, "{tag}");
        assert_eq!(outs[0].bytes().unwrap().to_vec(), qu, "{tag}: qu");
        assert_eq!(outs[1].bytes().unwrap().to_vec(), qi, "{tag}: qi");
        assert_eq!(outs[3].bytes().unwrap().to_vec(), qc, "{tag}: qc");
        for (got, want, what) in [(&outs[2], &d[..], "d"), (&outs[4], &dc[..], "dc")] {
            let g = got.to_f32_vec().unwrap();
            for (a, b) in g.iter().zip(want) {
                assert!(
                    (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                    "{tag}: {what} {g:?}"
                );
            }
        }
    };
    let inputs = vec![x, y];
    check(&evaluate(&m, &inputs).unwrap(), "interpreter");
    check(
        &run_compiled(&m, &host(), &inputs, "spec-quant-values"),
        "compiled",
    );
}

#[test]
fn quantization_errors_point_at_the_op() {
    let dir = std::env::temp_dir().join("xla-aot-spec-quant-errors");
    let bad = |ops: &str| {
        let text = format!(
            "name: qerr\ninputs:\n  - {{name: x, dtype: f32, shape: [2, 3]}}\noutputs: [q]\nconstants:\n  - {{name: s, value: 0.1}}\n  - {{name: s2, value: [0.1, 0.2]}}\n  - {{name: neg, value: -1.0}}\nops:\n{ops}"
        );
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("model.yaml");
        std::fs::write(&path, &text).unwrap();
        xla_aot::front::load_spec(&path).unwrap_err().to_string()
    };
    let e = bad("  - {name: q, op: quantize, inputs: [x, s], dtype: u4}\n");
    assert!(e.contains("expected `u8` or `i8`"), "{e}");
    let e = bad("  - {name: q, op: quantize, inputs: [x, s2]}\n");
    assert!(e.contains("expected a scalar or [3]"), "{e}");
    let e = bad("  - {name: q, op: quantize, inputs: [x, neg]}\n");
    assert!(e.contains("positive and finite"), "{e}");
    let e = bad("  - {name: q, op: dequantize, inputs: [x, s]}\n");
    assert!(e.contains("expected i32"), "{e}");
}

#[test]
fn int8_weights_run_on_the_int8_kernel() {
    let dir = std::env::temp_dir().join("xla-aot-spec-quant-conv");
    let params = dir.join("params");
    std::fs::create_dir_all(&params).unwrap();
    let mut rng = SplitMix64(17);
    let (o, c) = (16usize, 8usize);
    let wq: Vec<u8> = (0..o * c * 9)
        .map(|_| (rng.below(255) as i32 - 127) as i8 as u8)
        .collect();
    let ws: Vec<f32> = (0..o).map(|j| 0.002 + 0.0005 * j as f32).collect();
    let write = |name: &str, lit: Literal| {
        std::fs::write(
            params.join(format!("{name}.npy")),
            xla_aot::ir::npy::write_npy(&lit),
        )
        .unwrap();
    };
    write(
        "w_q",
        Literal {
            dtype: DType::I8,
            dims: vec![o, c, 3, 3],
            data: LiteralData::Dense(wq.into()),
        },
    );
    write("w_s", f32s(&[o], &ws));
    let w2q: Vec<u8> = (0..4 * o)
        .map(|_| (rng.below(255) as i32 - 127) as i8 as u8)
        .collect();
    write(
        "w2_q",
        Literal {
            dtype: DType::I8,
            dims: vec![4, o, 1, 1],
            data: LiteralData::Dense(w2q.into()),
        },
    );
    write("w2_s", f32s(&[4], &[0.01, 0.02, 0.03, 0.04]));
    let m = spec(
        &dir,
        "name: qconv
inputs:
  - {name: x, dtype: f32, shape: [1, 8, 10, 10]}
outputs: [q]
params: params
constants:
  - {name: xs, value: 0.05}
  - {name: xz, value: 128, dtype: i32}
  - {name: ys, value: 0.02}
ops:
  - {name: xq, op: quantize, inputs: [x, xs, xz]}
  - {name: xd, op: dequantize, inputs: [xq, xs, xz]}
  - {name: w, op: dequantize, inputs: [w_q, w_s], axis: 0}
  - {name: conv, op: conv2d, inputs: [xd, w], padding: [1, 1, 1, 1]}
  - {name: r, op: relu, inputs: [conv]}
  - {name: rq, op: quantize, inputs: [r, ys]}
  - {name: rd, op: dequantize, inputs: [rq, ys]}
  - {name: w2, op: dequantize, inputs: [w2_q, w2_s], axis: 0}
  - {name: conv2, op: conv2d, inputs: [rd, w2]}
  - {name: q, op: quantize, inputs: [conv2, ys], dtype: i8}
",
    );
    let x = xla_aot::driver::random_input(DType::F32, &[1, 8, 10, 10], 3);
    let want = evaluate(&m, std::slice::from_ref(&x)).unwrap();
    let got = run_compiled(&m, &host(), &[x], "spec-quant-conv");
    let (w, g) = (want[0].bytes().unwrap(), got[0].bytes().unwrap());
    let off = w.iter().zip(g).filter(|(a, b)| a != b).count();
    let worst = w
        .iter()
        .zip(g)
        .map(|(&a, &b)| (a as i8 as i32 - b as i8 as i32).abs())
        .max()
        .unwrap();
    // The int8 kernel sums exact integers, the interpreter rounds f32 partial sums: a value at a
    // rounding tie of either quantization (the hidden one and the output) may land one step away.
    assert!(
        worst <= 1 && off * 100 <= w.len(),
        "{off} of {} outputs differ, by up to {worst} steps",
        w.len()
    );
    let mut opts = common::default_options();
    opts.codegen.assembly = true;
    let t = Target::resolve("x86_64-avx512-vnni").unwrap();
    let asm = compile_model(&m, &t, &opts).unwrap().assembly.unwrap();
    assert!(
        asm.matches("vpdpbusd").count() >= 2,
        "the int8 convolutions are not on the int8 kernel"
    );
}
