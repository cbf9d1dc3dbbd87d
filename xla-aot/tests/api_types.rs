//! C API dtypes (`ir/api.rs`): the entry points' conversions of int64, uint8, int8, float16 and
//! bfloat16 inputs and outputs give the same bits as the host-side conversions (which the unit
//! tests check against IEEE rounding), in-process and compiled into a C program for x86-64 and
//! for aarch64 under qemu; an int64 input outside the i32 range is `XLA_AOT_STATUS_BAD_ARGUMENT`.

mod common;

use xla_aot::compile::run_host;
use xla_aot::ir::api::{f16_to_f32, f32_to_bf16, f32_to_f16};
use xla_aot::ir::{DType, Literal, LiteralData, Module, parse_module, print_module, verify};
use xla_aot::target::Target;

fn dense(dtype: DType, dims: Vec<usize>, data: Vec<u8>) -> Literal {
    Literal {
        dtype,
        dims,
        data: LiteralData::Dense(data.into()),
    }
}

fn module(text: &str) -> Module {
    let m = parse_module(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    verify(&m).unwrap();
    assert_eq!(print_module(&m), text, "the api_types line round-trips");
    m
}

/// Every float16 bit pattern through an f16 input and an f16 output of an identity model.
fn halves() -> (Module, Literal) {
    let n = 1 << 16;
    let m = module(&format!(
        "HloModule halves, api_types=(f16) -> (f16)\n\nENTRY %main {{\n  %x = f32[{n}]{{0}} parameter(0)\n  %y = f32[{n}]{{0}} negate(%x)\n  %z = f32[{n}]{{0}} negate(%y)\n  ROOT %outputs = (f32[{n}]{{0}}) tuple(%z), names={{z}}\n}}\n"
    ));
    let bits: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
    (m, dense(DType::F16, vec![n], bits))
}

fn check_halves(out: &Literal) {
    assert_eq!(out.dtype, DType::F16);
    let b = out.bytes().unwrap();
    for h in 0..=u16::MAX {
        let got = u16::from_le_bytes([b[2 * h as usize], b[2 * h as usize + 1]]);
        let want = if f16_to_f32(h).is_nan() {
            (h & 0x8000) | 0x7e00
        } else {
            h
        };
        assert_eq!(got, want, "half {h:#06x}");
    }
}

/// f32 values that round: ties, subnormal halves, overflow, NaN, through f16 and bf16 outputs.
fn rounding() -> (Module, Vec<f32>) {
    let mut v: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        65504.0,
        65519.99,
        65520.0,
        1e9,
        -1e9,
        2f32.powi(-24),
        2f32.powi(-25),
        3.0 * 2f32.powi(-25),
        1e-30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE / 4.0,
    ];
    let mut s = 0x1234_5678u32;
    while v.len() < 4096 {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        v.push(f32::from_bits(s));
    }
    let n = v.len();
    let m = module(&format!(
        "HloModule rounding, api_types=(_) -> (f16, bf16)\n\nENTRY %main {{\n  %x = f32[{n}]{{0}} parameter(0)\n  %y = f32[{n}]{{0}} negate(%x)\n  %z = f32[{n}]{{0}} negate(%y)\n  ROOT %outputs = (f32[{n}]{{0}}, f32[{n}]{{0}}) tuple(%z, %y), names={{h,b}}\n}}\n"
    ));
    (m, v)
}

fn check_rounding(v: &[f32], outs: &[Literal]) {
    let bits = |l: &Literal| -> Vec<u16> {
        l.bytes()
            .unwrap()
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect()
    };
    let (h, b) = (bits(&outs[0]), bits(&outs[1]));
    for (i, &x) in v.iter().enumerate() {
        assert_eq!(h[i], f32_to_f16(x), "f16 of {x:e} ({:#x})", x.to_bits());
        assert_eq!(b[i], f32_to_bf16(-x), "bf16 of {:e}", -x);
    }
    // Spot values, independent of the host helpers.
    assert_eq!(h[2], 0x3c00, "1 + 2^-11 ties to even");
    assert_eq!(h[3], 0x3c02);
    assert_eq!(h[5], 0x7bff);
    assert_eq!(h[6], 0x7c00, "65520 overflows to infinity");
    assert_eq!(h[9], 0x0001);
    assert_eq!(h[10], 0x0000, "2^-25 ties to even zero");
    assert_eq!(h[11], 0x0002);
}

/// int64 in (i32 range) and int8 in → their maximum as int64; uint8 and int8 in → their max and min as int8 and uint8 (low byte).
fn integers() -> Module {
    module(
        "HloModule ints, api_types=(i64, u8, i8) -> (i64, i8, u8)\n\nENTRY %main {\n  %a = i32[4]{0} parameter(0)\n  %b = i32[4]{0} parameter(1)\n  %c = i32[4]{0} parameter(2)\n  %af = f32[4]{0} convert(%a)\n  %bf = f32[4]{0} convert(%b)\n  %cf = f32[4]{0} convert(%c)\n  %ac = pred[4]{0} compare(%af, %cf), direction=GT\n  %na = i32[4]{0} select(%ac, %a, %c)\n  %bc = pred[4]{0} compare(%bf, %cf), direction=GT\n  %s = i32[4]{0} select(%bc, %b, %c)\n  %d = i32[4]{0} select(%bc, %c, %b)\n  ROOT %outputs = (i32[4]{0}, i32[4]{0}, i32[4]{0}) tuple(%na, %s, %d), names={na,s,d}\n}\n",
    )
}

fn int_inputs(a0: i64) -> Vec<Literal> {
    let a: Vec<u8> = [a0, -5, i32::MAX as i64, i32::MIN as i64 + 1]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    vec![
        dense(DType::I64, vec![4], a),
        dense(DType::U8, vec![4], vec![0, 1, 200, 255]),
        dense(DType::I8, vec![4], vec![0, 0xff, 100, 0x80]),
    ]
}

fn check_ints(outs: &[Literal]) {
    let na: Vec<i64> = outs[0]
        .bytes()
        .unwrap()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // max(i64 [7, -5, 2^31 - 1, -2^31 + 1], i8 [0, -1, 100, -128]).
    assert_eq!(na, [7, -1, i32::MAX as i64, -128]);
    // max(u8 [0, 1, 200, 255], i8 [0, -1, 100, -128]) → int8 low bytes.
    assert_eq!(outs[1].dtype, DType::I8);
    assert_eq!(outs[1].bytes().unwrap(), [0, 1, 200, 255]);
    // min(u8, i8) = [0, -1, 100, -128] → uint8 low bytes.
    assert_eq!(outs[2].bytes().unwrap(), [0, 255, 100, 128]);
}

/// uint32 (below 2^31), int16 and uint16 inputs → selected → uint32, int16 and uint16 outputs.
fn wide_integers() -> Module {
    module(
        "HloModule wide, api_types=(u32, i16, u16) -> (u32, i16, u16)\n\nENTRY %main {\n  %a = i32[3]{0} parameter(0)\n  %b = i32[3]{0} parameter(1)\n  %c = i32[3]{0} parameter(2)\n  %bf = f32[3]{0} convert(%b)\n  %cf = f32[3]{0} convert(%c)\n  %bc = pred[3]{0} compare(%bf, %cf), direction=GT\n  %x = i32[3]{0} select(%bc, %b, %c)\n  %y = i32[3]{0} select(%bc, %c, %b)\n  ROOT %outputs = (i32[3]{0}, i32[3]{0}, i32[3]{0}) tuple(%y, %x, %a), names={y,x,a}\n}\n",
    )
}

fn wide_inputs(a0: u32) -> Vec<Literal> {
    vec![
        dense(
            DType::U32,
            vec![3],
            [a0, 0, i32::MAX as u32]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        ),
        dense(
            DType::I16,
            vec![3],
            [-300i16, 7, i16::MIN]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        ),
        dense(
            DType::U16,
            vec![3],
            [40000u16, 3, 65535]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        ),
    ]
}

fn check_wide(outs: &[Literal]) {
    // y = min(b, c) = [-300, 3, -32768] as uint32 (low 32 bits), x = max(b, c) = [40000, 7, 65535]
    // as int16 (low 16 bits), a passes through.
    let u32s: Vec<u32> = outs[0]
        .bytes()
        .unwrap()
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(u32s, [(-300i32) as u32, 3, (-32768i32) as u32]);
    let i16s: Vec<i16> = outs[1]
        .bytes()
        .unwrap()
        .chunks_exact(2)
        .map(|c| i16::from_le_bytes([c[0], c[1]]))
        .collect();
    assert_eq!(i16s, [40000u16 as i16, 7, -1]);
    assert_eq!(outs[2].to_f64_vec(), [9.0, 0.0, i32::MAX as f64 % 65536.0]);
}

/// uint64 in and out: `a − 10` (wraps below zero as ONNX's unsigned arithmetic: 3 → 2^64 − 7).
fn uint64_model() -> Module {
    module(
        "HloModule u64s, api_types=(u64) -> (u64)\n\nENTRY %main {\n  %a = i32[3]{0} parameter(0)\n  %af = f32[3]{0} convert(%a)\n  %k = f32[] constant(10.0)\n  %kb = f32[3]{0} broadcast(%k), dimensions={}\n  %d = f32[3]{0} subtract(%af, %kb)\n  %y = i32[3]{0} convert(%d)\n  ROOT %outputs = (i32[3]{0}) tuple(%y), names={y}\n}\n",
    )
}

fn uint64_inputs(a0: u64) -> Vec<Literal> {
    let v = [a0, 100, 1 << 24];
    vec![dense(
        DType::U64,
        vec![3],
        v.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )]
}

fn check_uint64(outs: &[Literal]) {
    let got: Vec<u64> = outs[0]
        .bytes()
        .unwrap()
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, [u64::MAX - 6, 90, (1 << 24) - 10]);
}

#[test]
fn conversions_match_the_host_in_process() {
    let (m, x) = halves();
    check_halves(&run_host(&m, &[x]).unwrap()[0]);
    let (m, v) = rounding();
    check_rounding(
        &v,
        &run_host(&m, &[Literal::from_f32(vec![v.len()], &v)]).unwrap(),
    );
    let m = integers();
    check_ints(&run_host(&m, &int_inputs(7)).unwrap());
    // The interpreter takes and returns the same types.
    check_ints(&xla_aot::interp::evaluate(&m, &int_inputs(7)).unwrap());
    let w = wide_integers();
    check_wide(&run_host(&w, &wide_inputs(9)).unwrap());
    check_wide(&xla_aot::interp::evaluate(&w, &wide_inputs(9)).unwrap());
    let u = uint64_model();
    check_uint64(&run_host(&u, &uint64_inputs(3)).unwrap());
    check_uint64(&xla_aot::interp::evaluate(&u, &uint64_inputs(3)).unwrap());
}

#[test]
fn int64_out_of_range_is_a_bad_argument() {
    let m = integers();
    let err = run_host(&m, &int_inputs(1 << 31)).unwrap_err().to_string();
    assert!(err.contains("status -3"), "{err}");
    let err = run_host(&wide_integers(), &wide_inputs(1 << 31))
        .unwrap_err()
        .to_string();
    assert!(err.contains("status -3"), "uint32 2^31: {err}");
    for big in [1u64 << 31, 1 << 63] {
        let err = run_host(&uint64_model(), &uint64_inputs(big))
            .unwrap_err()
            .to_string();
        assert!(err.contains("status -3"), "uint64 {big}: {err}");
    }
    let err = xla_aot::interp::evaluate(&m, &int_inputs(-(1 << 40)))
        .unwrap_err()
        .to_string();
    assert!(err.contains("outside the int32 range"), "{err}");
}

#[test]
fn conversions_match_the_host_compiled_for_x86_64_and_aarch64() {
    for target in ["x86_64-avx2", "aarch64-neon"] {
        let t = Target::resolve(target).unwrap();
        let (m, x) = halves();
        check_halves(&common::run_compiled(&m, &t, &[x], &format!("halves-{target}"))[0]);
        let (m, v) = rounding();
        let x = Literal::from_f32(vec![v.len()], &v);
        check_rounding(
            &v,
            &common::run_compiled(&m, &t, &[x], &format!("round-{target}")),
        );
        let m = integers();
        check_ints(&common::run_compiled(
            &m,
            &t,
            &int_inputs(7),
            &format!("ints-{target}"),
        ));
        check_wide(&common::run_compiled(
            &wide_integers(),
            &t,
            &wide_inputs(9),
            &format!("wide-{target}"),
        ));
    }
}

#[test]
fn header_manifest_and_bindings_follow_the_api_dtype() {
    let m = integers();
    let art = xla_aot::compile::compile_model(
        &m,
        &Target::resolve("x86_64-avx2").unwrap(),
        &Default::default(),
    )
    .unwrap();
    assert!(
        art.header.contains(
            "int ints_run(void *arena, const int64_t *a, const uint8_t *b, const int8_t *c, int64_t *na, int8_t *s, uint8_t *d);"
        ),
        "{}",
        art.header
    );
    assert!(art.header.contains("input a: i64, computed as i32"));
    assert!(
        art.header
            .contains("XLA_AOT_STATUS_BAD_ARGUMENT before the model runs")
    );
    let j: serde_json::Value = serde_json::from_str(&art.manifest).unwrap();
    assert_eq!(j["inputs"][0]["dtype"], "i64");
    assert_eq!(j["inputs"][0]["computed_as"], "i32");
    assert_eq!(j["outputs"][2]["dtype"], "u8");
    // Staging: one input (a: int64) and three outputs of 4 elements, one 64-byte slice each;
    // b and c, passed as bytes and read elementwise, are read from the caller's buffers
    // (`cpu/byte_storage.rs`, `arena/staging.rs`).
    assert_eq!(art.plan.staging.len(), 4);
    assert_eq!(
        art.plan.stored[m.entry.parameters()[1].index()],
        Some(DType::U8)
    );
    assert_eq!(
        art.plan.stored[m.entry.parameters()[2].index()],
        Some(DType::I8)
    );
    let b = xla_aot::emit::bindings::render(&m, &art.plan, None, None, None);
    assert!(b.contains("a: &[i64; A_LEN]"), "{b}");
    assert!(b.contains("d: &mut [u8; D_LEN]"), "{b}");
}

/// On a CUDA target the header (CPU and CUDA entry points), the manifest and the bindings state
/// the C API dtypes as on a CPU; the device arena's slots hold them, and the launches convert
/// (`codegen/gpu/boundary.rs`; `tests/cuda.rs` runs them).
#[test]
fn cuda_targets_state_the_api_dtypes() {
    let t = Target::resolve("cuda-x86_64").unwrap();
    let m = module(
        "HloModule dev, api_types=(_) -> (i64)\n\nENTRY %main {\n  %x = f32[4]{0} parameter(0)\n  %c = i32[4]{0} convert(%x)\n  ROOT %outputs = (i32[4]{0}) tuple(%c), names={c}\n}\n",
    );
    let art = xla_aot::compile::compile_model(&m, &t, &Default::default()).unwrap();
    assert!(
        art.header
            .contains("int dev_run(void *arena, const float *x, int64_t *c);"),
        "{}",
        art.header
    );
    assert_eq!(art.plan.staging.len(), 1);
    let p = art.ptx.as_ref().unwrap();
    assert_eq!(
        p.layout.outputs[0].1.bytes, 32,
        "the output slot holds int64"
    );
    assert_eq!(p.launches.last().unwrap().entry, "dev_convert_out0_entry");
    let m = integers();
    let art = xla_aot::compile::compile_model(&m, &t, &Default::default()).unwrap();
    assert!(
        art.header.contains(
            "int ints_run(void *arena, const int64_t *a, const uint8_t *b, const int8_t *c, int64_t *na, int8_t *s, uint8_t *d);"
        ),
        "{}",
        art.header
    );
    let j: serde_json::Value = serde_json::from_str(&art.manifest).unwrap();
    assert_eq!(j["inputs"][0]["dtype"], "i64");
    assert_eq!(j["inputs"][0]["computed_as"], "i32");
    assert_eq!(j["outputs"][2]["dtype"], "u8");
    let b = xla_aot::emit::bindings::render(&m, &art.plan, art.ptx.as_ref(), None, None);
    assert!(b.contains("a: &[i64; A_LEN]"), "{b}");
    assert!(b.contains("d: &mut [u8; D_LEN]"), "{b}");
    assert!(b.contains("pub mod cuda"), "{b}");
}

/// A spec input of `dtype: f16` or `bf16` is that type at the C API and f32 inside; every half
/// goes through a spec's identity (`neg(neg(x))`) unchanged, as through the HLO one.
#[test]
fn spec_half_inputs_are_half_at_the_c_api() {
    let dir = std::env::temp_dir().join(format!("xla-aot-spec-half-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (ty, want) in [("f16", DType::F16), ("bf16", DType::BF16)] {
        let path = dir.join(format!("{ty}.yaml"));
        let n = 1 << 16;
        std::fs::write(
            &path,
            format!(
                "name: h\ninputs:\n  - {{name: x, dtype: {ty}, shape: [{n}]}}\noutputs: [z]\nops:\n  - {{name: y, op: neg, inputs: [x]}}\n  - {{name: z, op: neg, inputs: [y]}}\n"
            ),
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let m = xla_aot::front::spec::lower_spec(&path, &text)
            .unwrap_or_else(|e| panic!("{ty}: {e}"))
            .module;
        assert_eq!(m.input_dtype(0), want, "{ty}");
        assert_eq!(
            m.entry.inst(m.entry.parameters()[0]).shape.dtype,
            DType::F32
        );
        let bits: Vec<u8> = (0..=u16::MAX).flat_map(|h| h.to_le_bytes()).collect();
        let out = run_host(&m, &[dense(want, vec![n], bits)]).unwrap();
        let got = out[0].to_f32_vec().unwrap();
        for h in 0..=u16::MAX {
            let x = if want == DType::F16 {
                f16_to_f32(h)
            } else {
                xla_aot::ir::api::bf16_to_f32(h)
            };
            let g = got[h as usize];
            assert!(
                g == x || (g.is_nan() && x.is_nan()),
                "{ty} {h:#06x}: {g} != {x}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An f32 output passed as a byte (a quantized TFLite model's output, `ir/api_types.rs`
/// `output_bytes`): compiled and interpreted alike, `convert` to i32 then the low byte; an f32
/// input cannot be passed so.
#[test]
fn f32_outputs_pass_as_bytes_and_f32_inputs_do_not() {
    let m = module(
        "HloModule bytes, api_types=(_) -> (i8, u8)\n\nENTRY %main {\n  %x = f32[5]{0} parameter(0)\n  %y = f32[5]{0} negate(%x)\n  ROOT %outputs = (f32[5]{0}, f32[5]{0}) tuple(%y, %x), names={y,x}\n}\n",
    );
    let x = Literal::from_f32(vec![5], &[128.0, -127.0, 2.9, 255.0, f32::NAN]);
    for outs in [
        run_host(&m, std::slice::from_ref(&x)).unwrap(),
        xla_aot::interp::evaluate(&m, std::slice::from_ref(&x)).unwrap(),
    ] {
        assert_eq!(outs[0].dtype, DType::I8);
        assert_eq!(outs[0].bytes().unwrap(), [0x80, 0x7f, 0xfe, 0x01, 0]);
        assert_eq!(outs[1].dtype, DType::U8);
        assert_eq!(outs[1].bytes().unwrap(), [0x80, 0x81, 2, 0xff, 0]);
    }
    let text = "HloModule bytes, api_types=(i8) -> (_)\n\nENTRY %main {\n  %x = f32[5]{0} parameter(0)\n  %y = f32[5]{0} negate(%x)\n  ROOT %outputs = (f32[5]{0}) tuple(%y), names={y}\n}\n";
    let err = parse_module(text)
        .map_err(|e| e.to_string())
        .and_then(|m| verify(&m).map_err(|e| e.to_string()))
        .unwrap_err();
    assert!(err.contains("cannot be passed as i8"), "{err}");
}
