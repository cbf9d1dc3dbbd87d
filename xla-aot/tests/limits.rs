//! The compiler limits of `docs/limits.md` ("## Compiler limits"), exercised with the reproducers
//! of issue 19: each hostile input gives a clean error (exit 1, naming the limit or the field) or
//! compiles, quickly and without aborting. Spec errors with a caret are golden files in
//! `tests/malformed/` (`rank_limit`, `yaml_too_deep`, `params_not_a_file`); the rest are here.

mod common;

use common::onnx_proto::{node, value};

use prost::Message;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use xla_aot::front::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, OperatorSetIdProto, TensorProto, attribute_type,
    data_type,
};
use xla_aot::front::{Format, load_file, spec_from_str};
use xla_aot::ir::{Literal, Op};

/// What "quickly" means for one reproducer in a debug build on a shared two-core machine (the
/// issue's bar is 10 s for the release binary).
const QUICK: Duration = Duration::from_secs(60);

fn xla_aot(args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_xla-aot"))
        .args(args)
        .output()
        .unwrap();
    (out, t.elapsed())
}

/// Runs the CLI and checks it ended by itself, quickly, with `code`; returns stderr.
fn expect_exit(args: &[&str], code: i32) -> String {
    let (out, took) = xla_aot(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{args:?}:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}:\n{stderr}");
    assert!(took < QUICK, "{args:?} took {took:?}");
    stderr
}

fn write(dir: &Path, name: &str, text: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

const PAD_SPEC: &str = "name: m
inputs:
  - {name: x, dtype: f32, shape: [1]}
constants:
  - {name: c, value: [3.0], shape: [1]}
outputs: [y]
ops:
  - {name: p, op: pad, inputs: [c], pads: [0, PAD]}
  - {name: s, op: reduce_sum, inputs: [p], axes: [0]}
  - {name: y, op: add, inputs: [x, s]}
";

#[test]
fn a_constant_padded_to_two_billion_elements_is_not_folded() {
    // Folding asked the interpreter for 32 GB and aborted; the fold is declined now and the
    // padded reduction runs in the library (fused: no 8 GB buffer either).
    let dir = common::scratch("limits-pad");
    let spec = write(
        &dir,
        "pad.yaml",
        PAD_SPEC.replace("PAD", "2000000000").as_bytes(),
    );
    let out = dir.join("out").display().to_string();
    expect_exit(
        &[
            "compile",
            &spec,
            "--target",
            "x86_64-avx2",
            "--out-dir",
            &out,
        ],
        0,
    );
}

#[test]
fn a_fold_over_the_limit_runs_in_the_library_with_the_same_result() {
    // 20M elements (80 MB) is above FOLD_MAX_TENSOR_BYTES: computed at run time, still right.
    let dir = common::scratch("limits-pad-run");
    let path = dir.join("pad.yaml");
    let m = spec_from_str(&path, &PAD_SPEC.replace("PAD", "20000000"))
        .unwrap()
        .module;
    let x = Literal::from_f32(vec![1], &[0.5]);
    let got = xla_aot::compile::run_host(&m, &[x]).unwrap();
    assert_eq!(got[0].to_f32_vec().unwrap(), vec![3.5]);
}

#[test]
fn an_hlo_broadcast_of_a_constant_to_two_billion_elements_compiles() {
    let dir = common::scratch("limits-hlo-bcast");
    let hlo = write(
        &dir,
        "bc.hlo.txt",
        b"HloModule bc

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = f32[] add(f32[] %a, f32[] %b)
}

ENTRY %main (x: f32[1]) -> f32[1] {
  %x = f32[1]{0} parameter(0)
  %c = f32[2]{0} constant({1, 2})
  %b = f32[1000000000,2]{1,0} broadcast(f32[2]{0} %c), dimensions={1}
  %z = f32[] constant(0)
  %s = f32[] reduce(f32[1000000000,2]{1,0} %b, f32[] %z), dimensions={0,1}, to_apply=%add
  %sb = f32[1]{0} broadcast(f32[] %s), dimensions={}
  ROOT %y = f32[1]{0} add(f32[1]{0} %x, f32[1]{0} %sb)
}
",
    );
    let out = dir.join("out").display().to_string();
    expect_exit(
        &[
            "compile",
            &hlo,
            "--target",
            "x86_64-avx2",
            "--out-dir",
            &out,
        ],
        0,
    );
}

/// `y = x + ReduceMax(ConstantOfShape(shape, value 0.5))`, `shape` an initializer.
fn constant_of_shape(shape: &[i64]) -> PathBuf {
    let mut cos = node("fill", "ConstantOfShape", &["shape"], &["c"]);
    cos.attribute.push(AttributeProto {
        name: "value".into(),
        r#type: attribute_type::TENSOR,
        t: Some(TensorProto {
            dims: vec![1],
            data_type: data_type::FLOAT,
            float_data: vec![0.5],
            ..Default::default()
        }),
        ..Default::default()
    });
    let mut sum = node("max", "ReduceMax", &["c"], &["s"]);
    sum.attribute.push(AttributeProto {
        name: "keepdims".into(),
        r#type: attribute_type::INT,
        i: 0,
        ..Default::default()
    });
    let m = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            name: "g".into(),
            node: vec![cos, sum, node("add", "Add", &["x", "s"], &["y"])],
            input: vec![value("x", data_type::FLOAT, &[1])],
            output: vec![value("y", data_type::FLOAT, &[1])],
            initializer: vec![TensorProto {
                name: "shape".into(),
                dims: vec![shape.len() as i64],
                data_type: data_type::INT64,
                int64_data: shape.to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let dir = common::scratch(&format!("limits-cos-{}", shape.len()));
    let p = dir.join("cos.onnx");
    std::fs::write(&p, m.encode_to_vec()).unwrap();
    p
}

#[test]
fn constant_of_shape_past_the_import_limit_is_filled_at_run_time() {
    // 2^25 elements: above IMPORT_FOLD_MAX_ELEMENTS, so a run-time broadcast, not a 256 MB
    // import-time tensor (2^30 took 58 s and 16 GB; 2^32 aborted).
    let p = constant_of_shape(&[512, 65536]);
    let t = Instant::now();
    let m = load_file(&p, Format::Onnx).unwrap().module;
    assert!(t.elapsed() < QUICK);
    assert!(
        m.entry
            .instructions
            .iter()
            .any(|i| matches!(i.op, Op::Broadcast { .. }) && i.shape.dims == [512, 65536]),
        "a run-time broadcast fills the tensor"
    );
    let got = xla_aot::compile::run_host(&m, &[Literal::from_f32(vec![1], &[1.0])]).unwrap();
    assert_eq!(got[0].to_f32_vec().unwrap(), vec![1.5]);
}

#[test]
fn constant_of_shape_past_the_element_limit_is_an_error_naming_the_node() {
    let p = constant_of_shape(&[65536, 65536]);
    let e = load_file(&p, Format::Onnx).unwrap_err().to_string();
    assert!(e.contains("`fill` (ConstantOfShape)"), "{e}");
    assert!(e.contains("more than 2147483647 elements"), "{e}");
}

#[test]
fn a_rank_above_the_limit_is_refused_by_every_front_end() {
    // Rank 30000 overflowed the stack in code generation.
    let dims: Vec<String> = (0..30000)
        .map(|i| (1 + (i == 0) as usize).to_string())
        .collect();
    let dir = common::scratch("limits-rank");
    let layout: Vec<String> = (0..30000).rev().map(|i| i.to_string()).collect();
    let shape = format!("f32[{}]{{{}}}", dims.join(","), layout.join(","));
    let hlo = write(
        &dir,
        "rank.hlo.txt",
        format!(
            "HloModule rank\n\nENTRY %main {{\n  %x = {shape} parameter(0)\n  ROOT %y = {shape} negate({shape} %x)\n}}\n"
        )
        .as_bytes(),
    );
    let e = expect_exit(&["inspect", &hlo], 1);
    assert!(
        e.contains("rank 30000 is above the limit of 64 dimensions (MAX_RANK"),
        "{e}"
    );
    assert!(e.contains("rank.hlo.txt:4:3"), "{e}");
}

#[test]
fn unreadable_inputs_are_refused_before_reading() {
    // /dev/zero never ends: reading it whole ran out of memory.
    let e = expect_exit(
        &[
            "compile",
            "/dev/zero",
            "--target",
            "x86_64",
            "--out-dir",
            "/tmp/x",
        ],
        1,
    );
    assert!(
        e.contains("cannot read /dev/zero: it is not a regular file"),
        "{e}"
    );
    let spec = common::repo().join("examples/mlp/model.yaml");
    let spec = spec.display().to_string();
    let e = expect_exit(
        &[
            "compile",
            &spec,
            "--target",
            "/dev/zero",
            "--out-dir",
            "/tmp/x",
        ],
        1,
    );
    assert!(
        e.contains("target file /dev/zero: it is not a regular file"),
        "{e}"
    );
    // A regular file over the limit is refused by its size, before it is read.
    let dir = common::scratch("limits-big-target");
    let big = dir.join("big.yaml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(xla_aot::limits::MAX_TARGET_FILE_BYTES + 1)
        .unwrap();
    let big = big.display().to_string();
    let e = expect_exit(
        &["compile", &spec, "--target", &big, "--out-dir", "/tmp/x"],
        1,
    );
    assert!(
        e.contains("more than the 1048576-byte limit (MAX_TARGET_FILE_BYTES"),
        "{e}"
    );
}

#[test]
fn a_target_file_is_checked_against_what_llvm_knows() {
    // An x86-64 triple with an Arm CPU: LLVM ignored the CPU and then aborted the process
    // ("64-bit code requested on a subtarget that doesn't support it!").
    let dir = common::scratch("limits-target");
    let base = std::fs::read_to_string(common::repo().join("targets/x86_64-avx2.yaml")).unwrap();
    let spec = common::repo().join("examples/mlp/model.yaml");
    let spec = spec.display().to_string();
    let out = dir.join("out").display().to_string();
    let cases = [
        (
            base.replace("cpu: x86-64-v3", "cpu: cortex-a53"),
            "field `cpu`: `cortex-a53` is not a CPU LLVM knows for x86_64",
        ),
        (
            base.replace("cpu: x86-64-v3", "cpu: pentium4"),
            "field `cpu`: `pentium4` is not a CPU LLVM knows for x86_64",
        ),
        (
            base.replace("cpu: x86-64-v3", "cpu: x86-64-v5"),
            "did you mean `x86-64-v",
        ),
        (
            base.replace("features: \"\"", "features: \"-64bit\""),
            "field `features`: `-64bit` cannot be disabled for x86_64 code",
        ),
        (
            base.replace("features: \"\"", "features: \"+avx9\""),
            "field `features`: `avx9` is not a feature LLVM knows for x86_64",
        ),
        (
            base.replace("features: \"\"", "features: \"avx2\""),
            "field `features`: `avx2` must start with `+` (enable) or `-` (disable)",
        ),
    ];
    for (k, (text, want)) in cases.iter().enumerate() {
        let t = write(&dir, &format!("t{k}.yaml"), text.as_bytes());
        let e = expect_exit(&["compile", &spec, "--target", &t, "--out-dir", &out], 1);
        assert!(e.contains(want), "case {k}: {e}");
    }
}

#[test]
fn deeply_nested_yaml_is_refused_in_linear_time() {
    // 100k nested `[` took 70 s to reject.
    let dir = common::scratch("limits-deep");
    let text = format!("name: m\ninputs: {}\n", "[".repeat(100_000));
    let spec = write(&dir, "deep.yaml", text.as_bytes());
    let (out, took) = xla_aot(&["inspect", &spec]);
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert!(e.contains("YAML nested more than 64 levels deep"), "{e}");
    // The quoted line is cut around the caret, not 100 KB long.
    assert!(e.len() < 1000, "{} bytes of message", e.len());
    let target = write(&dir, "deep-target.yaml", text.as_bytes());
    let mlp = common::repo().join("examples/mlp/model.yaml");
    let e = expect_exit(
        &[
            "compile",
            &mlp.display().to_string(),
            "--target",
            &target,
            "--out-dir",
            "/tmp/x",
        ],
        1,
    );
    assert!(e.contains("YAML nested more than 64 levels deep"), "{e}");
}

/// A spec of `n` ops alternating `tanh` and `add x` on a [64] input.
fn tanh_add_chain(n: usize) -> String {
    let mut s = String::from(
        "name: m\ninputs:\n  - {name: x, dtype: f32, shape: [64]}\noutputs: [y]\nops:\n",
    );
    let mut prev = "x".to_string();
    for i in 0..n {
        let op = if i % 2 == 0 {
            format!("  - {{name: t{i}, op: tanh, inputs: [{prev}]}}\n")
        } else {
            format!("  - {{name: t{i}, op: add, inputs: [{prev}, x]}}\n")
        };
        s.push_str(&op);
        prev = format!("t{i}");
    }
    s.push_str(&format!("  - {{name: y, op: relu, inputs: [{prev}]}}\n"));
    s
}

#[test]
fn a_long_chain_is_split_into_kernels_and_its_math_calls_are_bounded() {
    // 2,200 ops: 1,100 tanh calls (past MAX_INLINED_MATH_CALLS) in kernels of cost at most
    // MAX_FUSION_COST. One kernel of 10,000 such ops took 953 s; the results stay the same.
    use xla_aot::limits::MAX_FUSION_COST;
    let dir = common::scratch("limits-chain");
    let m = spec_from_str(&dir.join("chain.yaml"), &tanh_add_chain(2200))
        .unwrap()
        .module;
    let opt = xla_aot::compile::optimize(&m, &Default::default()).unwrap();
    let fusions: Vec<u32> = opt
        .module
        .entry
        .instructions
        .iter()
        .filter_map(|i| match &i.op {
            Op::Fusion { computation, .. } => Some(
                computation
                    .instructions
                    .iter()
                    .filter(|j| !matches!(j.op, Op::Parameter { .. }))
                    .map(|j| xla_aot::passes::fusion::cost(&j.op))
                    .sum::<u32>(),
            ),
            _ => None,
        })
        .collect();
    assert!(fusions.len() > 1, "the chain is split");
    assert!(
        fusions.iter().all(|&c| c <= MAX_FUSION_COST),
        "kernel costs {fusions:?}"
    );
    let x = Literal::from_f32(
        vec![64],
        &(0..64)
            .map(|i| (i as f32 - 32.0) * 0.05)
            .collect::<Vec<_>>(),
    );
    let t = Instant::now();
    let got = xla_aot::compile::run_host(&m, std::slice::from_ref(&x)).unwrap();
    assert!(t.elapsed() < QUICK, "compiled and ran in {:?}", t.elapsed());
    let want = xla_aot::interp::evaluate(&m, &[x]).unwrap();
    common::check_close(&got[0], &want[0]).unwrap();
}

#[test]
fn a_wide_column_sum_is_not_unrolled() {
    // reduce_sum over axis 0 of [2, 262144]: the register path unrolled 32,768 vectors (139 s).
    let dir = common::scratch("limits-column");
    let spec = "name: m\ninputs:\n  - {name: x, dtype: f32, shape: [2, 262144]}\noutputs: [y]\nops:\n  - {name: y, op: reduce_sum, inputs: [x], axes: [0]}\n";
    let m = spec_from_str(&dir.join("col.yaml"), spec).unwrap().module;
    let vals: Vec<f32> = (0..2 * 262144)
        .map(|i| ((i % 1000) as f32) * 0.25)
        .collect();
    let x = Literal::from_f32(vec![2, 262144], &vals);
    let t = Instant::now();
    let got = xla_aot::compile::run_host(&m, std::slice::from_ref(&x)).unwrap();
    assert!(t.elapsed() < QUICK, "compiled and ran in {:?}", t.elapsed());
    let want = xla_aot::interp::evaluate(&m, &[x]).unwrap();
    assert_eq!(got[0].to_f32_vec(), want[0].to_f32_vec());
}

/// A spec with `n` outputs, alternately `x + x` and `relu(x)` of a 4-element input.
fn many_outputs(n: usize) -> String {
    let mut s = String::from("name: m\ninputs:\n  - {name: x, dtype: f32, shape: [4]}\noutputs: [");
    s.push_str(
        &(0..n)
            .map(|i| format!("y{i}"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    s.push_str("]\nops:\n");
    for i in 0..n {
        if i % 2 == 0 {
            s.push_str(&format!("  - {{name: y{i}, op: add, inputs: [x, x]}}\n"));
        } else {
            s.push_str(&format!("  - {{name: y{i}, op: relu, inputs: [x]}}\n"));
        }
    }
    s
}

#[test]
fn many_outputs_take_the_array_entry_path_and_stay_correct() {
    // 600 outputs: past LARGE_API_BUFFERS (pointer checks by loops over arrays, `run` calling
    // `run_ptrs`) and KERNELS_PER_PART (the body in parts). 5000 outputs took 187 s in code per
    // pointer and one body; the path is linear (docs/limits.md has the times).
    let dir = common::scratch("limits-outputs");
    let n = 600;
    let m = spec_from_str(&dir.join("m.yaml"), &many_outputs(n))
        .unwrap()
        .module;
    // From C (the guard-page harness takes at most 64 buffers): `run` with one parameter per
    // buffer and `run_ptrs` with arrays; the results, a null output, an overlap.
    let t = xla_aot::target::Target::resolve("x86_64").unwrap();
    let art = xla_aot::compile::compile_model(&m, &t, &Default::default()).unwrap();
    std::fs::write(dir.join("libm.a"), &art.archive).unwrap();
    std::fs::write(dir.join("m.h"), &art.header).unwrap();
    let outs: Vec<String> = (0..n).map(|i| format!("y[{i}]")).collect();
    let call = |replace: &str| -> String {
        let mut o = outs.clone();
        if !replace.is_empty() {
            o[n - 1] = replace.to_string();
        }
        format!("m_run(arena, x, {})", o.join(", "))
    };
    let c = format!(
        "#include <stdio.h>\n#include \"m.h\"\nstatic _Alignas(64) unsigned char arena[M_ARENA_SIZE + 64];\n\
         static float y[{n}][4];\nint main(void) {{\n  const float x[4] = {{-1.5f, 0.0f, 2.0f, 3.5f}};\n  \
         int s = {};\n  if (s != 0) return 10;\n  for (int i = 0; i < {n}; i++)\n    \
         for (int j = 0; j < 4; j++)\n      if (y[i][j] != (i % 2 ? (x[j] > 0 ? x[j] : 0) : x[j] + x[j])) return 11;\n  \
         if ({} != XLA_AOT_STATUS_NULL_POINTER) return 12;\n  \
         if ({} != XLA_AOT_STATUS_OVERLAP) return 13;\n  \
         const void *ins[1] = {{x}};\n  void *outs[{n}];\n  \
         for (int i = 0; i < {n}; i++) outs[i] = y[{n} - 1 - i];\n  \
         if (m_run_ptrs(arena, ins, outs) != 0) return 14;\n  \
         for (int j = 0; j < 4; j++) if (y[0][j] != (({n} - 1) % 2 ? (x[j] > 0 ? x[j] : 0) : x[j] + x[j])) return 15;\n  \
         outs[7] = NULL;\n  if (m_run_ptrs(arena, ins, outs) != XLA_AOT_STATUS_NULL_POINTER) return 16;\n  \
         outs[7] = (void *)x;\n  if (m_run_ptrs(arena, ins, outs) != XLA_AOT_STATUS_OVERLAP) return 17;\n  \
         outs[7] = arena + 8;\n  if (M_ARENA_SIZE > 8 && m_run_ptrs(arena, ins, outs) != XLA_AOT_STATUS_OVERLAP) return 18;\n  \
         puts(\"ok\");\n  return 0;\n}}\n",
        call(""),
        call("NULL"),
        call("y[0]"),
    );
    std::fs::write(dir.join("main.c"), c).unwrap();
    let rt = common::repo().join("runtime-min/include");
    let out = Command::new("cc")
        .args(["-std=c11", "-O1", "-Wall", "-Werror", "-I"])
        .arg(&rt)
        .arg("-I")
        .arg(&dir)
        .arg(dir.join("main.c"))
        .arg(dir.join("libm.a"))
        .arg("-o")
        .arg(dir.join("app"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = Command::new(dir.join("app")).output().unwrap();
    assert_eq!(
        r.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&r.stdout)
    );
}
