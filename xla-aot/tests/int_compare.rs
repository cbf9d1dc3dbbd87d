//! `compare` of integer operands (i32 `EQ`, `NE`, `LT`, `LE`, `GT`, `GE` feeding `select`s, and
//! pred `EQ`/`LT`): the verifier accepts them, so every backend must compute them as
//! integer comparisons — exactly, also where float32 would round (2^24 + 1 vs 2^24) — on the
//! host (JIT after the pipeline), in grid form (the GPU kernel bodies run on the host), and as
//! PTX that ptxas accepts; each against the reference interpreter and hand-computed values.

mod common;

use common::{check_close, run_compiled_with};
use xla_aot::compile::CompileOptions;
use xla_aot::interp::evaluate;
use xla_aot::ir::{Literal, parse_module, verify};
use xla_aot::target::Target;

const HLO: &str = "HloModule icmp\n\nENTRY %main {\n  \
    %a = i32[6]{0} parameter(0)\n  \
    %b = i32[6]{0} parameter(1)\n  \
    %c = i32[6]{0} parameter(2)\n  \
    %eq = pred[6]{0} compare(%a, %b), direction=EQ\n  \
    %ne = pred[6]{0} compare(%a, %b), direction=NE\n  \
    %lt = pred[6]{0} compare(%a, %b), direction=LT\n  \
    %le = pred[6]{0} compare(%a, %b), direction=LE\n  \
    %gt = pred[6]{0} compare(%a, %b), direction=GT\n  \
    %ge = pred[6]{0} compare(%a, %b), direction=GE\n  \
    %peq = pred[6]{0} compare(%lt, %gt), direction=EQ\n  \
    %plt = pred[6]{0} compare(%lt, %gt), direction=LT\n  \
    %seq = i32[6]{0} select(%eq, %a, %c)\n  \
    %sne = i32[6]{0} select(%ne, %a, %c)\n  \
    %slt = i32[6]{0} select(%lt, %a, %c)\n  \
    %sle = i32[6]{0} select(%le, %a, %c)\n  \
    %sgt = i32[6]{0} select(%gt, %a, %c)\n  \
    %sge = i32[6]{0} select(%ge, %a, %c)\n  \
    %speq = i32[6]{0} select(%peq, %a, %c)\n  \
    %splt = i32[6]{0} select(%plt, %a, %c)\n  \
    ROOT %outputs = (i32[6]{0}, i32[6]{0}, i32[6]{0}, i32[6]{0}, i32[6]{0}, i32[6]{0}, i32[6]{0}, i32[6]{0}) \
    tuple(%seq, %sne, %slt, %sle, %sgt, %sge, %speq, %splt), names={seq,sne,slt,sle,sgt,sge,speq,splt}\n}\n";

/// Operands that differ only below f32's precision (2^24 + 1 vs 2^24), negatives, equal values
/// and the i32 extremes.
const A: [i32; 6] = [16_777_217, -5, 7, 0, i32::MIN, i32::MAX];
const B: [i32; 6] = [16_777_216, 3, 7, -1, i32::MAX, i32::MIN];
/// What a false comparison selects.
const C: [i32; 6] = [-100, -200, -300, -400, -500, -600];

fn inputs() -> Vec<Literal> {
    vec![
        Literal::from_i32(vec![6], &A),
        Literal::from_i32(vec![6], &B),
        Literal::from_i32(vec![6], &C),
    ]
}

/// select(a OP b, a, c) per direction, then the pred compares of (a < b) with (a > b).
fn expected() -> Vec<Vec<i32>> {
    let pick = |f: &dyn Fn(i32, i32) -> bool| -> Vec<i32> {
        (0..6)
            .map(|i| if f(A[i], B[i]) { A[i] } else { C[i] })
            .collect()
    };
    vec![
        pick(&|a, b| a == b),
        pick(&|a, b| a != b),
        pick(&|a, b| a < b),
        pick(&|a, b| a <= b),
        pick(&|a, b| a > b),
        pick(&|a, b| a >= b),
        pick(&|a, b| (a < b) == (a > b)),
        // pred LT: (a < b) < (a > b) holds only for false < true, i.e. where a > b.
        pick(&|a, b| a > b),
    ]
}

fn module() -> xla_aot::ir::Module {
    let m = parse_module(HLO).unwrap_or_else(|e| panic!("{e}"));
    verify(&m).unwrap_or_else(|e| panic!("{e}"));
    m
}

fn assert_expected(what: &str, got: &[Literal]) {
    let want = expected();
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (j, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g.to_i32_vec().as_deref(),
            Some(w.as_slice()),
            "{what}: output {j}"
        );
    }
}

#[test]
fn integer_compares_run_on_the_host() {
    let m = module();
    assert_expected("interpreter", &evaluate(&m, &inputs()).unwrap());
    let got = xla_aot::compile::run_host(&m, &inputs()).unwrap_or_else(|e| panic!("{e}"));
    assert_expected("host", &got);
}

#[test]
fn integer_compares_run_in_grid_form() {
    let m = module();
    let t = Target::resolve("x86_64").unwrap();
    let mut opts = CompileOptions::default();
    opts.codegen.grid = true;
    let got = run_compiled_with(&m, &t, &inputs(), "grid-int-compare", &opts);
    let want = evaluate(&m, &inputs()).unwrap();
    for (j, (g, w)) in got.iter().zip(&want).enumerate() {
        check_close(g, w).unwrap_or_else(|e| panic!("grid output {j}: {e}"));
    }
    assert_expected("grid", &got);
}

#[test]
fn integer_compares_assemble_as_ptx() {
    let Some(ptxas) = std::env::var_os("XLA_AOT_PTXAS") else {
        eprintln!("int compare PTX check skipped: XLA_AOT_PTXAS is not set");
        return;
    };
    let mut m = module();
    xla_aot::passes::Pipeline::default_pipeline()
        .run(&mut m, &mut |_, _, _| {})
        .unwrap();
    let plan = xla_aot::arena::plan(&m);
    let module = xla_aot::codegen::gpu::ptx::compile(&m, &plan, "sm_80").unwrap();
    let dir = common::scratch("ptx-int-compare");
    let file = dir.join("icmp.ptx");
    std::fs::write(&file, &module.ptx).unwrap();
    let out = std::process::Command::new(&ptxas)
        .arg("-arch=sm_80")
        .arg(&file)
        .arg("-o")
        .arg(dir.join("icmp.cubin"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ptxas failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let int_setp = module
        .ptx
        .lines()
        .filter(|l| l.contains("setp.") && (l.contains(".s32") || l.contains(".b32")))
        .count();
    assert!(
        int_setp >= 4,
        "the PTX compares 32-bit integers (found {int_setp} setp on s32/b32):\n{}",
        module.ptx
    );
}

/// ONNX `Equal`/`Less`/`GreaterOrEqual` of int32 tensors compare in i32: exactly, also where
/// float32 would merge the operands (2^24 + 1 vs 2^24).
#[test]
fn onnx_integer_compares_are_exact() {
    use prost::Message;
    use xla_aot::front::onnx::proto::{
        AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorShapeProto,
        TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
    };
    let vi = |name: &str, elem: i32| ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem,
                shape: Some(TensorShapeProto {
                    dim: vec![tensor_shape_proto::Dimension {
                        value: Some(tensor_shape_proto::dimension::Value::DimValue(6)),
                    }],
                }),
            })),
        }),
    };
    let node = |op: &str, ins: &[&str], out: &str, to: Option<i64>| NodeProto {
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: vec![out.into()],
        op_type: op.into(),
        attribute: to
            .map(|i| AttributeProto {
                name: "to".into(),
                r#type: 2,
                i,
                ..Default::default()
            })
            .into_iter()
            .collect(),
        ..Default::default()
    };
    // int32 = 6, bool = 9 (TensorProto.DataType).
    let mut nodes = Vec::new();
    let mut outputs = Vec::new();
    for (op, out) in [("Equal", "eq"), ("Less", "lt"), ("GreaterOrEqual", "ge")] {
        nodes.push(node(op, &["a", "b"], &format!("{out}_b"), None));
        nodes.push(node("Cast", &[&format!("{out}_b")], out, Some(6)));
        outputs.push(vi(out, 6));
    }
    let model = ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(GraphProto {
            node: nodes,
            input: vec![vi("a", 6), vi("b", 6)],
            output: outputs,
            ..Default::default()
        }),
        ..Default::default()
    };
    let bytes = model.encode_to_vec();
    let m = xla_aot::front::onnx::import_file_with(
        std::path::Path::new("icmp.onnx"),
        &bytes,
        "icmp",
        &xla_aot::front::onnx::ImportOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let got = xla_aot::compile::run_host(&m, &inputs()[..2]).unwrap_or_else(|e| panic!("{e}"));
    let want = |f: &dyn Fn(i32, i32) -> bool| -> Vec<i32> {
        (0..6).map(|i| f(A[i], B[i]) as i32).collect()
    };
    assert_eq!(got[0].to_i32_vec().unwrap(), want(&|a, b| a == b), "Equal");
    assert_eq!(got[1].to_i32_vec().unwrap(), want(&|a, b| a < b), "Less");
    assert_eq!(
        got[2].to_i32_vec().unwrap(),
        want(&|a, b| a >= b),
        "GreaterOrEqual"
    );
}
