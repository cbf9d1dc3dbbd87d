//! The register-blocked kernels (`codegen/cpu/gemm.rs`, `conv.rs`) on the shapes that stress
//! their edges, compiled for every target this machine runs (aarch64 under qemu) and compared with
//! the reference interpreter; then the parallel-for hook on products large enough to use it.
//!
//! Each case names what it covers: partial row and column tiles, several K-blocks and row
//! blocks, matrix-vector products, batched and transposed operands of two activations, packed and
//! unpacked weights, and the three convolution paths with padding, strides and dilations (tiles
//! inside the image and tiles on its border).

mod common;

use common::{
    check_close, hook_calls_with, link_with_options, random_inputs, run_compiled, toolchain,
};
use std::fmt::Write as _;
use xla_aot::compile::{CompileOptions, compile_model};
use xla_aot::interp::evaluate;
use xla_aot::ir::Module;
use xla_aot::target::Target;
use xla_aot::util::rng::SplitMix64;

/// A spec under construction: inputs, weights (written as `.npy` files of a params directory),
/// ops, outputs.
struct Spec {
    name: String,
    rng: SplitMix64,
    inputs: String,
    weights: Vec<(String, xla_aot::ir::Literal)>,
    ops: String,
    outputs: Vec<String>,
}

impl Spec {
    fn new(name: &str, seed: u64) -> Spec {
        Spec {
            name: name.into(),
            rng: SplitMix64(seed),
            inputs: String::new(),
            weights: Vec::new(),
            ops: String::new(),
            outputs: Vec::new(),
        }
    }
    fn input(&mut self, name: &str, shape: &[usize]) -> &mut Self {
        let _ = writeln!(
            self.inputs,
            "  - {{name: {name}, dtype: f32, shape: {shape:?}}}"
        );
        self
    }
    fn weight(&mut self, name: &str, shape: &[usize]) -> &mut Self {
        let n: usize = shape.iter().product();
        let scale = 1.0 / (shape.iter().skip(1).product::<usize>().max(1) as f64).sqrt();
        let data: Vec<u8> = (0..n)
            .flat_map(|_| ((self.rng.normal() * scale) as f32).to_le_bytes())
            .collect();
        self.f32_weight(name, shape, data)
    }
    /// A weight whose rows (a dense layer's output channels) are int8 vectors times one scale
    /// each, as dequantizing a per-channel int8 weight gives.
    fn weight_int8(&mut self, name: &str, shape: &[usize]) -> &mut Self {
        let row: usize = shape.iter().skip(1).product();
        let mut data = Vec::with_capacity(shape[0] * row * 4);
        for _ in 0..shape[0] {
            let scale = (0.01 + 0.05 * self.rng.normal().abs()) as f32;
            for _ in 0..row {
                let q = (self.rng.normal() * 40.0).round().clamp(-127.0, 127.0) as f32;
                data.extend_from_slice(&(q * scale).to_le_bytes());
            }
        }
        self.f32_weight(name, shape, data)
    }
    /// A weight of integers (normal·40, rounded, within ±127) times `mult`.
    fn weight_ints(&mut self, name: &str, shape: &[usize], mult: f32) -> &mut Self {
        let n: usize = shape.iter().product();
        let data: Vec<u8> = (0..n)
            .flat_map(|_| {
                let q = (self.rng.normal() * 40.0).round().clamp(-127.0, 127.0) as f32;
                (q * mult).to_le_bytes()
            })
            .collect();
        self.f32_weight(name, shape, data)
    }
    /// An f32 weight of little-endian bytes `data`.
    fn f32_weight(&mut self, name: &str, shape: &[usize], data: Vec<u8>) -> &mut Self {
        let lit = xla_aot::ir::Literal {
            dtype: xla_aot::ir::DType::F32,
            dims: shape.to_vec(),
            data: xla_aot::ir::LiteralData::Dense(data.into()),
        };
        self.weights.push((name.into(), lit));
        self
    }
    /// A scalar weight of value `v` (a quantization scale).
    fn scalar(&mut self, name: &str, v: f32) -> &mut Self {
        let lit = xla_aot::ir::Literal {
            dtype: xla_aot::ir::DType::F32,
            dims: Vec::new(),
            data: xla_aot::ir::LiteralData::Dense(v.to_le_bytes().to_vec().into()),
        };
        self.weights.push((name.into(), lit));
        self
    }
    fn op(&mut self, text: &str) -> &mut Self {
        let _ = writeln!(self.ops, "  - {text}");
        self
    }
    fn output(&mut self, name: &str) -> &mut Self {
        self.outputs.push(name.into());
        self
    }
    fn module(&self) -> Module {
        let dir = std::env::temp_dir().join(format!("xla-aot-kernels-{}", self.name));
        let params = dir.join("params");
        std::fs::create_dir_all(&params).unwrap();
        for (name, lit) in &self.weights {
            let bytes = xla_aot::ir::npy::write_npy(lit);
            std::fs::write(params.join(format!("{name}.npy")), bytes).unwrap();
        }
        let text = format!(
            "name: {}\ninputs:\n{}outputs: [{}]\nparams: params\nops:\n{}",
            self.name,
            self.inputs,
            self.outputs.join(", "),
            self.ops
        );
        let path = dir.join("model.yaml");
        std::fs::write(&path, &text).unwrap();
        let m = xla_aot::front::load_spec(&path)
            .unwrap_or_else(|e| panic!("{}: {e}\n{text}", self.name))
            .module;
        let _ = std::fs::remove_dir_all(&dir);
        m
    }
}

fn check_everywhere(m: &Module) {
    let ins = random_inputs(m, 7);
    let expected = evaluate(m, &ins).unwrap();
    for t in common::compiled_targets() {
        let actual = run_compiled(m, &t, &ins, &format!("kernels-{}-{}", m.name, t.name));
        for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
            if let Err(msg) = check_close(a, e) {
                panic!("{} output {i} on {}: {msg}", m.name, t.name);
            }
        }
    }
}

/// [`check_everywhere`] with half-precision weights: against the interpreter run on the module
/// with its weights rounded (`compile::optimize`), within the usual tolerance.
fn check_half_everywhere(m: &Module, p: xla_aot::ir::Precision) {
    let opts = CompileOptions {
        precision: Some(p),
        ..common::default_options()
    };
    let ins = random_inputs(m, 7);
    let rounded = xla_aot::compile::optimize(m, &opts).unwrap().module;
    let expected = evaluate(&rounded, &ins).unwrap();
    for t in common::compiled_targets() {
        let tag = format!("kernels-{}-{p}-{}", m.name, t.name);
        let actual = common::run_compiled_with(m, &t, &ins, &tag, &opts);
        for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
            if let Err(msg) = check_close(a, e) {
                panic!("{tag} output {i}: {msg}");
            }
        }
    }
}

#[test]
fn half_weights_match_the_rounded_reference_on_every_target() {
    use xla_aot::ir::Precision;
    // GEMM panels (matrix-vector and partial tiles), grouped convolution panels (stored half), and
    // a Winograd kernel (the transform of the rounded weights, kept f32).
    let mut s = Spec::new("half_gemm", 51);
    s.input("x", &[3, 300])
        .weight("w", &[70, 300])
        .weight("b", &[70])
        .op("{name: d, op: dense, inputs: [x, w, b]}")
        .op("{name: y, op: relu, inputs: [d]}")
        .output("y");
    let gemm = s.module();
    let mut s = Spec::new("half_conv", 52);
    s.input("x", &[1, 24, 9, 11])
        .weight("w", &[48, 6, 3, 3])
        .op("{name: y, op: conv2d, inputs: [x, w], groups: 4, padding: [1, 1, 1, 1]}")
        .output("y");
    let conv = s.module();
    let mut s = Spec::new("half_wino", 53);
    s.input("x", &[1, 20, 29, 29])
        .weight("w0", &[20, 20, 1, 1])
        .weight("w", &[40, 20, 3, 3])
        .op("{name: p, op: conv2d, inputs: [x, w0]}")
        .op("{name: c, op: conv2d, inputs: [p, w], padding: [1, 1, 1, 1]}")
        .op("{name: r, op: relu, inputs: [c]}")
        .op("{name: y, op: max_pool2d, inputs: [r], kernel_size: [2, 2]}")
        .output("y");
    let wino = s.module();
    assert!(takes_winograd(
        &wino,
        &Target::resolve("x86_64-avx512").unwrap()
    ));
    for p in [Precision::Bf16Weights, Precision::F16Weights] {
        check_half_everywhere(&gemm, p);
        check_half_everywhere(&conv, p);
        check_half_everywhere(&wino, p);
    }
}

/// `precision: bf16` (both operands of every product rounded to bfloat16, `vdpbf16ps` where the
/// target has AVX-512 BF16): the GEMM shapes that stress the pair packing (odd K, M = 1 and 3,
/// N not a multiple of 16, several K-blocks and row blocks), a product of two activations and a
/// grouped convolution, against the interpreter on the rounded module, on every target here plus
/// `x86_64-avx512-bf16` when this CPU has it.
#[test]
fn bf16_products_match_the_rounded_reference_on_every_target() {
    let p = xla_aot::ir::Precision::Bf16;
    let bf16 = Target::resolve("x86_64-avx512-bf16").unwrap();
    let mut ts = common::compiled_targets();
    if bf16.runs_here() {
        ts.push(bf16);
    } else {
        eprintln!("this CPU has no AVX-512 BF16: vdpbf16ps is compiled, not run");
    }
    let mut cases = Vec::new();
    for (name, m, k, n, seed) in [
        ("bf16_gemv", 1, 301, 70, 71),
        ("bf16_gemm3", 3, 257, 45, 72),
        ("bf16_gemm_blocks", 37, 601, 70, 73),
        ("bf16_gemm_rows", 300, 64, 33, 74),
    ] {
        let mut s = Spec::new(name, seed);
        s.input("x", &[m, k])
            .weight("w", &[n, k])
            .weight("b", &[n])
            .op("{name: d, op: dense, inputs: [x, w, b]}")
            .op("{name: y, op: relu, inputs: [d]}")
            .output("y");
        cases.push(s.module());
    }
    // A hidden layer read only by the next product: rounded in its own register epilogue.
    let mut s = Spec::new("bf16_two_layers", 78);
    s.input("x", &[3, 40])
        .weight("w1", &[64, 40])
        .weight("b1", &[64])
        .weight("w2", &[10, 64])
        .op("{name: h, op: dense, inputs: [x, w1, b1]}")
        .op("{name: r, op: relu, inputs: [h]}")
        .op("{name: y, op: dense, inputs: [r, w2]}")
        .output("y");
    cases.push(s.module());
    let mut s = Spec::new("bf16_act_product", 75);
    s.input("a", &[2, 5, 33])
        .input("b", &[2, 33, 19])
        .op("{name: y, op: matmul, inputs: [a, b]}")
        .output("y");
    cases.push(s.module());
    let mut s = Spec::new("bf16_conv", 76);
    s.input("x", &[1, 24, 9, 11])
        .weight("w", &[48, 6, 3, 3])
        .op("{name: y, op: conv2d, inputs: [x, w], groups: 4, padding: [1, 1, 1, 1]}")
        .output("y");
    cases.push(s.module());
    let opts = CompileOptions {
        precision: Some(p),
        ..common::default_options()
    };
    for m in &cases {
        let ins = random_inputs(m, 7);
        let rounded = xla_aot::compile::optimize(m, &opts).unwrap().module;
        let expected = evaluate(&rounded, &ins).unwrap();
        for t in &ts {
            let tag = format!("kernels-{}-{p}-{}", m.name, t.name);
            let actual = common::run_compiled_with(m, t, &ins, &tag, &opts);
            for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
                if let Err(msg) = check_close(a, e) {
                    panic!("{tag} output {i}: {msg}");
                }
            }
        }
    }
}

/// The bf16 GEMM is `vdpbf16ps` on a target with AVX-512 BF16 (the host's `x86_64-avx512-bf16`
/// or any CPU), and f32 FMA on the rounded values on AVX-512 without it.
#[test]
fn bf16_gemm_uses_vdpbf16ps_where_the_target_has_it() {
    let mut s = Spec::new("bf16_asm", 77);
    s.input("x", &[8, 129])
        .weight("w", &[40, 129])
        .op("{name: y, op: dense, inputs: [x, w]}")
        .output("y");
    let m = s.module();
    let mut opts = CompileOptions {
        precision: Some(xla_aot::ir::Precision::Bf16),
        ..common::default_options()
    };
    opts.codegen.assembly = true;
    let asm = |name: &str| {
        let t = Target::resolve(name).unwrap();
        let art = compile_model(&m, &t, &opts).unwrap();
        art.assembly.unwrap_or_default()
    };
    let with = asm("x86_64-avx512-bf16");
    assert!(
        with.contains("vdpbf16ps"),
        "x86_64-avx512-bf16: no vdpbf16ps"
    );
    let without = asm("x86_64-avx512");
    assert!(
        !without.contains("vdpbf16ps"),
        "x86_64-avx512 has vdpbf16ps"
    );
    assert!(without.contains("vfmadd231ps"), "x86_64-avx512: no FMA");
}

#[test]
fn int8_valued_weights_are_stored_one_byte_each_and_match() {
    // A dense layer whose weight is exactly int8 × a per-output-channel scale (a quantized
    // model's dequantized weight): stored as int8 panels and scales (`packing.rs`
    // `int8_columns`), the products bit for bit the f32 path's; M = 1 (matrix-vector) and M = 5.
    for (rows, seed) in [(1, 61), (5, 62)] {
        let mut s = Spec::new(&format!("q8_gemm{rows}"), seed);
        s.input("x", &[rows, 300])
            .weight_int8("w", &[70, 300])
            .weight("b", &[70])
            .op("{name: d, op: dense, inputs: [x, w, b]}")
            .op("{name: y, op: relu, inputs: [d]}")
            .output("y");
        let m = s.module();
        check_everywhere(&m);
        let t = Target::resolve("x86_64-avx2").unwrap();
        let art = compile_model(&m, &t, &CompileOptions::default()).unwrap();
        let manifest: serde_json::Value = serde_json::from_str(&art.manifest).unwrap();
        // The weight in 1 byte per value; the bias (and a scalar) in f32.
        let bytes = manifest["weights_bytes"].as_u64().unwrap();
        assert!(
            (70 * 300 + 70 * 4..70 * 300 + 70 * 4 + 16).contains(&bytes),
            "weights_bytes {bytes}"
        );
    }
}

#[test]
fn int8_valued_convolution_kernels_are_stored_one_byte_each_and_match() {
    // Convolution kernels exactly int8 × a per-output-channel scale, packed for the pixels ×
    // channels path (`int8_conv_columns`): a 1×1 with a bias and ReLU in registers (36 channels:
    // a partial panel) and a grouped 3×3 with stride 2 (not Winograd; two groups of panels).
    let mut s = Spec::new("q8_conv", 63);
    s.input("x", &[1, 20, 11, 13])
        .weight_int8("w1", &[36, 20, 1, 1])
        .weight("b1", &[36])
        .weight_int8("w2", &[24, 18, 3, 3])
        .op("{name: c1, op: conv2d, inputs: [x, w1, b1]}")
        .op("{name: r1, op: relu, inputs: [c1]}")
        .op("{name: y, op: conv2d, inputs: [r1, w2], strides: [2, 2], padding: [1, 1, 1, 1], groups: 2}")
        .output("y");
    let m = s.module();
    check_everywhere(&m);
    let t = Target::resolve("x86_64-avx512").unwrap();
    let art = compile_model(&m, &t, &CompileOptions::default()).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&art.manifest).unwrap();
    // int8 panels (padded to whole panels) and one f32 scale per padded column; f32 would be
    // 4 · (36·20 + 24·18·9) = 18,432 bytes.
    let bytes = manifest["weights_bytes"].as_u64().unwrap();
    assert!(bytes < 18_432 / 2, "weights_bytes {bytes}");
}

#[test]
fn matrix_products_match_the_interpreter_on_every_target() {
    // M = 1 (matrix-vector: several panels per tile), N not a multiple of any panel width.
    let mut s = Spec::new("gemv", 1);
    s.input("x", &[1, 300])
        .weight("w", &[130, 300])
        .weight("b", &[130])
        .op("{name: y, op: dense, inputs: [x, w, b]}")
        .output("y");
    check_everywhere(&s.module());
    // Partial row and column tiles, two K-blocks (K > 256), an output fusion epilogue.
    let mut s = Spec::new("gemm_edges", 2);
    s.input("x", &[37, 300])
        .weight("w", &[70, 300])
        .op("{name: d, op: dense, inputs: [x, w]}")
        .op("{name: y, op: relu, inputs: [d]}")
        .output("y");
    check_everywhere(&s.module());
    // Several row blocks (M = 600), a 3-D input whose leading dims collapse into M.
    let mut s = Spec::new("gemm_rows", 3);
    s.input("x", &[2, 300, 20])
        .weight("w", &[40, 20])
        .op("{name: y, op: dense, inputs: [x, w]}")
        .output("y");
    check_everywhere(&s.module());
    // Rows of A 4 KiB apart (K = 1024): at most 8 rows per tile, balanced (20 = 7 + 7 + 6).
    let mut s = Spec::new("gemm_sets", 10);
    s.input("x", &[20, 1024])
        .weight("w", &[40, 1024])
        .op("{name: y, op: dense, inputs: [x, w]}")
        .output("y");
    check_everywhere(&s.module());
    // Two activations: batched, and with the rhs transposed (laid out free-dims-minor).
    let mut s = Spec::new("bmm", 4);
    s.input("a", &[3, 29, 40])
        .input("b", &[3, 40, 33])
        .input("c", &[2, 19, 24])
        .input("d", &[2, 17, 24])
        .op("{name: ab, op: matmul, inputs: [a, b]}")
        .op("{name: dct, op: matmul, inputs: [d, c], transpose_b: true}")
        .output("ab")
        .output("dct");
    check_everywhere(&s.module());
}

#[test]
fn convolutions_match_the_interpreter_on_every_target() {
    // Pixels × channels: NCHW model input, NHWC internal result (stride 2, asymmetric padding),
    // then channels × pixels into the NCHW output (dilation 2, width 37: partial chunks, masks).
    let mut s = Spec::new("conv_paths", 5);
    s.input("x", &[1, 5, 23, 37])
        .weight("w1", &[12, 5, 3, 3])
        .weight("w2", &[7, 12, 3, 3])
        .op("{name: c1, op: conv2d, inputs: [x, w1], strides: [1, 1], padding: [1, 1, 1, 1]}")
        .op("{name: r1, op: relu, inputs: [c1]}")
        .op("{name: c2, op: conv2d, inputs: [r1, w2], strides: [1, 1], padding: [2, 1, 0, 2], dilations: [1, 2]}")
        .output("c2");
    check_everywhere(&s.module());
    // Channels × pixels without padding (every position interior) on rows narrower than a
    // vector: the partial chunk keeps its masks, so no load passes the input's last row (the
    // harness's guard page would fault).
    let mut s = Spec::new("conv_narrow", 11);
    s.input("x", &[2, 2, 9, 7])
        .weight("w", &[3, 2, 2, 2])
        .op("{name: y, op: conv2d, inputs: [x, w]}")
        .output("y");
    check_everywhere(&s.module());
    // NHWC inputs of 6 and 9 channels into a padded 3x3 and a 1x1 convolution: on NEON the
    // pixels x channels tiles take four channels per step (`conv.rs` CHANNEL_QUAD) and the rest
    // one by one, in border tiles (padding: zero lines) and interior ones.
    let mut s = Spec::new("conv_quads", 9);
    s.input("x", &[1, 3, 9, 11])
        .weight("w1", &[6, 3, 1, 1])
        .weight("w2", &[9, 6, 3, 3])
        .weight("w3", &[4, 9, 1, 1])
        .op("{name: c1, op: conv2d, inputs: [x, w1]}")
        .op("{name: r1, op: relu, inputs: [c1]}")
        .op("{name: c2, op: conv2d, inputs: [r1, w2], padding: [1, 1, 1, 1]}")
        .op("{name: r2, op: relu, inputs: [c2]}")
        .op("{name: c3, op: conv2d, inputs: [r2, w3]}")
        .output("c3");
    check_everywhere(&s.module());
    // Strided NHWC chain with 40 output channels (a full and a partial panel), then depthwise
    // (stride 2, padding) and a 1x1 convolution, as in a MobileNet block.
    let mut s = Spec::new("conv_block", 6);
    s.input("x", &[2, 3, 30, 27])
        .weight("w1", &[40, 3, 3, 3])
        .weight("dw", &[40, 1, 3, 3])
        .weight("pw", &[24, 40, 1, 1])
        .op("{name: c1, op: conv2d, inputs: [x, w1], strides: [2, 2], padding: [1, 0, 1, 1]}")
        .op("{name: r1, op: relu6, inputs: [c1]}")
        .op("{name: d, op: conv2d, inputs: [r1, dw], strides: [2, 2], padding: [1, 1, 1, 1], groups: 40}")
        .op("{name: r2, op: relu6, inputs: [d]}")
        .op("{name: p, op: conv2d, inputs: [r2, pw]}")
        .op("{name: r3, op: relu, inputs: [p]}")
        .op("{name: y, op: global_avg_pool, inputs: [r3]}")
        .output("y")
        .output("r3");
    check_everywhere(&s.module());
    // An `H × 1` feature map (a keyword-spotting model's), channels-minor between 1×1
    // convolutions: 5×1 and 10×1 depthwise windows with stride, uneven padding along H and a
    // residual, and a 5×1 convolution (the pixels × channels tiles), whose pixels the kernels
    // tile along H (`ConvShape::columns_as_rows`).
    let mut s = Spec::new("conv_column", 14);
    s.input("x", &[1, 12, 29, 1])
        .weight("w1", &[12, 12, 1, 1])
        .weight("dw", &[12, 1, 5, 1])
        .weight("dw2", &[12, 1, 10, 1])
        .weight("pw", &[8, 12, 1, 1])
        .weight("pw2", &[8, 12, 1, 1])
        .weight("w5", &[16, 12, 5, 1])
        .weight("pw3", &[8, 16, 1, 1])
        .op("{name: c1, op: conv2d, inputs: [x, w1]}")
        .op("{name: r1, op: relu, inputs: [c1]}")
        .op("{name: d, op: conv2d, inputs: [r1, dw], strides: [2, 1], padding: [2, 0, 1, 0], groups: 12}")
        .op("{name: d2, op: conv2d, inputs: [r1, dw2], padding: [4, 0, 5, 0], groups: 12}")
        .op("{name: a, op: add, inputs: [d2, r1]}")
        .op("{name: r2, op: relu6, inputs: [d]}")
        .op("{name: y, op: conv2d, inputs: [r2, pw]}")
        .op("{name: y2, op: conv2d, inputs: [a, pw2]}")
        .op("{name: c5, op: conv2d, inputs: [r1, w5], padding: [2, 0, 2, 0]}")
        .op("{name: r5, op: relu, inputs: [c5]}")
        .op("{name: y3, op: conv2d, inputs: [r5, pw3]}")
        .output("y")
        .output("y2")
        .output("y3");
    check_everywhere(&s.module());
}

/// Whether `compile` gave `m` kernel scratch on `t`, i.e. some convolution took the Winograd path.
fn takes_winograd(m: &Module, t: &Target) -> bool {
    let art = compile_model(m, t, &CompileOptions::default()).unwrap();
    art.plan.scratch.is_some()
}

#[test]
fn winograd_convolutions_match_the_interpreter_on_every_target() {
    // F(4,3): 29x29 maps (partial tiles on the right and bottom edges), 20 input channels (a
    // vector and single-lane tails), 40 output channels (a full and a partial panel), a bias and
    // relu in registers, two images.
    let mut s = Spec::new("wino_f4", 41);
    s.input("x", &[2, 20, 29, 29])
        .weight("w0", &[20, 20, 1, 1])
        .weight("w", &[40, 20, 3, 3])
        .weight("b", &[40])
        .op("{name: p, op: conv2d, inputs: [x, w0]}")
        .op("{name: c, op: conv2d, inputs: [p, w, b], padding: [1, 1, 1, 1]}")
        .op("{name: r, op: relu, inputs: [c]}")
        .op("{name: y, op: global_avg_pool, inputs: [r]}")
        .output("y");
    let m = s.module();
    assert!(takes_winograd(
        &m,
        &Target::resolve("x86_64-avx512").unwrap()
    ));
    check_everywhere(&m);
    // F(2,3) (7x9: too few 4x4 tiles), asymmetric padding, and a residual add + relu epilogue.
    let mut s = Spec::new("wino_f2", 42);
    s.input("x", &[1, 32, 7, 9])
        .weight("w0", &[32, 32, 1, 1])
        .weight("w", &[32, 32, 3, 3])
        .op("{name: p, op: conv2d, inputs: [x, w0]}")
        .op("{name: q, op: relu, inputs: [p]}")
        .op("{name: c, op: conv2d, inputs: [q, w], padding: [1, 0, 1, 2]}")
        .op("{name: z, op: global_avg_pool, inputs: [c]}")
        .output("z")
        .op("{name: c2, op: conv2d, inputs: [q, w], padding: [1, 1, 1, 1]}")
        .op("{name: s2, op: add, inputs: [c2, q]}")
        .op("{name: r2, op: relu, inputs: [s2]}")
        .op("{name: y, op: global_avg_pool, inputs: [r2]}")
        .output("y");
    let m = s.module();
    assert!(takes_winograd(
        &m,
        &Target::resolve("x86_64-avx512").unwrap()
    ));
    check_everywhere(&m);
    // Several bands of tile rows per image (96x96, 16 channels: 24 tile rows, 19 per band).
    let mut s = Spec::new("wino_bands", 43);
    s.input("x", &[1, 16, 96, 96])
        .weight("w0", &[16, 16, 1, 1])
        .weight("w", &[16, 16, 3, 3])
        .op("{name: p, op: conv2d, inputs: [x, w0]}")
        .op("{name: c, op: conv2d, inputs: [p, w], padding: [1, 1, 1, 1]}")
        .op("{name: y, op: max_pool2d, inputs: [c], kernel_size: [2, 2]}")
        .output("y");
    let m = s.module();
    assert!(takes_winograd(
        &m,
        &Target::resolve("aarch64-neon").unwrap()
    ));
    check_everywhere(&m);
}

/// The slices of concatenations assembled in place (`arena/concat_views.rs`) in `m`'s plan on
/// `t`, as (value, concatenation) names.
fn assembled_slices(m: &Module, t: &Target) -> Vec<(String, String)> {
    let art = compile_model(m, t, &CompileOptions::default()).unwrap();
    art.plan
        .slices
        .iter()
        .map(|s| (s.name.clone(), s.of.clone()))
        .collect()
}

#[test]
fn concatenations_assembled_in_place_match_the_interpreter_on_every_target() {
    // A fire-module-like block: three convolutions with bias and ReLU in their registers write
    // into their slices of one concatenation, which a 1x1 convolution then reads. 5 channels put
    // the second slice at a byte offset that is not a multiple of 16; the 3x3 with 32 channels
    // takes Winograd on x86, the 5x5 a direct path; the grouped one the channels-by-pixels path.
    let mut s = Spec::new("concat_views", 51);
    s.input("x", &[1, 16, 13, 11])
        .weight("ws", &[16, 16, 1, 1])
        .weight("w1", &[5, 16, 1, 1])
        .weight("b1", &[5])
        .weight("w2", &[32, 16, 3, 3])
        .weight("b2", &[32])
        .weight("w3", &[7, 16, 5, 5])
        .weight("w4", &[8, 4, 3, 3])
        .weight("wo", &[12, 52, 1, 1])
        .op("{name: q0, op: conv2d, inputs: [x, ws]}")
        .op("{name: q, op: relu, inputs: [q0]}")
        .op("{name: c1, op: conv2d, inputs: [q, w1, b1]}")
        .op("{name: r1, op: relu, inputs: [c1]}")
        .op("{name: c2, op: conv2d, inputs: [q, w2, b2], padding: [1, 1, 1, 1]}")
        .op("{name: r2, op: relu, inputs: [c2]}")
        .op("{name: c3, op: conv2d, inputs: [q, w3], padding: [2, 2, 2, 2]}")
        .op("{name: c4, op: conv2d, inputs: [q, w4], padding: [1, 1, 1, 1], groups: 4}")
        .op("{name: cat, op: concat, inputs: [r1, r2, c3, c4], axis: 1}")
        .op("{name: y, op: conv2d, inputs: [cat, wo]}")
        .output("y");
    let m = s.module();
    let t = Target::resolve("x86_64-avx512").unwrap();
    assert!(takes_winograd(&m, &t));
    let slices = assembled_slices(&m, &t);
    assert_eq!(slices.len(), 4, "{slices:?}");
    assert!(
        slices.iter().all(|(_, of)| of == &slices[0].1),
        "{slices:?}"
    );
    check_everywhere(&m);
    // A concatenation that is a model output, or whose operand another op also reads, keeps
    // its copy.
    let mut s = Spec::new("concat_kept", 52);
    s.input("x", &[1, 8, 9, 9])
        .weight("w1", &[8, 8, 1, 1])
        .weight("w2", &[8, 8, 3, 3])
        .op("{name: c1, op: conv2d, inputs: [x, w1]}")
        .op("{name: c2, op: conv2d, inputs: [x, w2], padding: [1, 1, 1, 1]}")
        .op("{name: cat, op: concat, inputs: [c1, c2], axis: 1}")
        .output("cat")
        .op("{name: c3, op: conv2d, inputs: [x, w1]}")
        .op("{name: c4, op: conv2d, inputs: [x, w2], padding: [1, 1, 1, 1]}")
        .op("{name: cat2, op: concat, inputs: [c3, c4], axis: 1}")
        .op("{name: z, op: add, inputs: [cat2, cat2]}")
        .op("{name: s, op: add, inputs: [c3, c3]}")
        .output("z")
        .output("s");
    let m = s.module();
    assert_eq!(assembled_slices(&m, &t), vec![]);
    check_everywhere(&m);
}

#[test]
fn channel_shuffles_match_the_interpreter_on_every_target() {
    // ShuffleNet's block: a grouped 1x1 convolution, bias and ReLU, then the channel shuffle
    // (4 groups of 7 channels: a partial vector per group) into a depthwise convolution; and a
    // shuffle of 3 groups of 16 channels feeding the output through an add.
    let mut s = Spec::new("shuffle", 44);
    s.input("x", &[2, 28, 9, 11])
        .weight("w0", &[28, 28, 1, 1])
        .weight("g", &[28, 7, 1, 1])
        .weight("b", &[28])
        .weight("dw", &[28, 1, 3, 3])
        .weight("w3", &[48, 28, 1, 1])
        .op("{name: p, op: conv2d, inputs: [x, w0]}")
        .op("{name: c, op: conv2d, inputs: [p, g, b], groups: 4}")
        .op("{name: r, op: relu, inputs: [c]}")
        .op("{name: r5, op: reshape, inputs: [r], shape: [2, 4, 7, 9, 11]}")
        .op("{name: t, op: transpose, inputs: [r5], perm: [0, 2, 1, 3, 4]}")
        .op("{name: sh, op: reshape, inputs: [t], shape: [2, 28, 9, 11]}")
        .op("{name: d, op: conv2d, inputs: [sh, dw], padding: [1, 1, 1, 1], groups: 28}")
        .op("{name: q, op: conv2d, inputs: [d, w3]}")
        .op("{name: q5, op: reshape, inputs: [q], shape: [2, 3, 16, 9, 11]}")
        .op("{name: qt, op: transpose, inputs: [q5], perm: [0, 2, 1, 3, 4]}")
        .op("{name: qs, op: reshape, inputs: [qt], shape: [2, 48, 9, 11]}")
        .op("{name: y, op: global_avg_pool, inputs: [qs]}")
        .output("y");
    check_everywhere(&s.module());
    // Shuffles that end at grouped convolutions (`passes/shuffle_sink.rs`), which read their
    // input through them: 4 groups of 6 past a ReLU and a depthwise conv into a 1×1 conv with
    // 3 groups of 8 input channels (a multiple of 4: unrolled runs), then 2 groups of 6 past a
    // ReLU into a padded 3×3 conv with 4 groups of 3 (not a multiple of 2: one division per
    // channel; padding reads the zero line).
    let mut s = Spec::new("shuffle_grouped", 45);
    s.input("x", &[2, 24, 9, 11])
        .weight("w0", &[24, 24, 1, 1])
        .weight("g", &[24, 6, 1, 1])
        .weight("b", &[24])
        .weight("dw", &[24, 1, 3, 3])
        .weight("g2", &[12, 8, 1, 1])
        .weight("g3", &[8, 3, 3, 3])
        .op("{name: p, op: conv2d, inputs: [x, w0]}")
        .op("{name: c, op: conv2d, inputs: [p, g, b], groups: 4}")
        .op("{name: r, op: relu, inputs: [c]}")
        .op("{name: r5, op: reshape, inputs: [r], shape: [2, 4, 6, 9, 11]}")
        .op("{name: t, op: transpose, inputs: [r5], perm: [0, 2, 1, 3, 4]}")
        .op("{name: sh, op: reshape, inputs: [t], shape: [2, 24, 9, 11]}")
        .op("{name: d, op: conv2d, inputs: [sh, dw], padding: [1, 1, 1, 1], groups: 24}")
        .op("{name: q, op: conv2d, inputs: [d, g2], groups: 3}")
        .op("{name: q5, op: reshape, inputs: [q], shape: [2, 2, 6, 9, 11]}")
        .op("{name: qt, op: transpose, inputs: [q5], perm: [0, 2, 1, 3, 4]}")
        .op("{name: qs, op: reshape, inputs: [qt], shape: [2, 12, 9, 11]}")
        .op("{name: qr, op: relu, inputs: [qs]}")
        .op("{name: y, op: conv2d, inputs: [qr, g3], padding: [1, 1, 1, 1], groups: 4}")
        .output("y");
    let m = s.module();
    let opt = xla_aot::compile::optimize(&m, &Default::default()).unwrap();
    let text = xla_aot::ir::print_module(&opt.module);
    assert_eq!(
        text.matches(".sunk = ").count(),
        6,
        "both shuffles move to their convs:\n{text}"
    );
    check_everywhere(&m);
}

#[test]
fn a_shuffle_into_a_staged_pointwise_output_is_stored_first() {
    // A ShuffleNet unit's last step: channels-minor data shuffled (4 groups of 6) into a grouped
    // 1×1 convolution that is a model output (NCHW): the staged path reads its input plainly,
    // so the shuffle is stored by its own kernel rather than read through (`channel_prologue`).
    // And the NCHW input shuffled into a padded 3×3 with 2 output channels per group, which
    // would run channels × pixels unmapped: through the map it is packed (`core/packing.rs`).
    let mut s = Spec::new("shuffle_staged", 47);
    s.input("x", &[1, 24, 7, 9])
        .weight("w0", &[24, 24, 1, 1])
        .weight("g", &[16, 6, 1, 1])
        .weight("g2", &[8, 6, 3, 3])
        .op("{name: x5, op: reshape, inputs: [x], shape: [1, 4, 6, 7, 9]}")
        .op("{name: xt, op: transpose, inputs: [x5], perm: [0, 2, 1, 3, 4]}")
        .op("{name: xs, op: reshape, inputs: [xt], shape: [1, 24, 7, 9]}")
        .op("{name: z, op: conv2d, inputs: [xs, g2], padding: [1, 1, 1, 1], groups: 4}")
        .op("{name: p, op: conv2d, inputs: [x, w0]}")
        .op("{name: r, op: relu, inputs: [p]}")
        .op("{name: r5, op: reshape, inputs: [r], shape: [1, 4, 6, 7, 9]}")
        .op("{name: t, op: transpose, inputs: [r5], perm: [0, 2, 1, 3, 4]}")
        .op("{name: sh, op: reshape, inputs: [t], shape: [1, 24, 7, 9]}")
        .op("{name: y, op: conv2d, inputs: [sh, g], groups: 4}")
        .output("y")
        .output("z");
    let m = s.module();
    let text = xla_aot::ir::print_module(
        &xla_aot::compile::optimize(&m, &Default::default())
            .unwrap()
            .module,
    );
    let read_through = text
        .split("\n}\n")
        .filter(|f| f.contains(" transpose(") && f.contains(" convolution("))
        .count();
    assert_eq!(read_through, 1, "only z's shuffle is read through:\n{text}");
    check_everywhere(&m);
}

#[test]
fn convolutions_read_channel_slices_in_place_on_every_target() {
    // ShuffleNet v2's block: the input's channels split in two halves, one convolved (1×1,
    // depthwise 3×3, 1×1), both concatenated; and a strided slice (every other channel) into a
    // padded 3×3 convolution, and a slice into a grouped one. Each slice read by a convolution is
    // its prologue (`passes/fusion.rs` `channel_prologue`), never stored, but the last: a grouped
    // 1×1 into a model output runs staged, which reads a stored input.
    let mut s = Spec::new("slice_conv", 46);
    s.input("x", &[2, 24, 7, 9])
        .weight("w0", &[24, 24, 1, 1])
        .weight("a", &[12, 12, 1, 1])
        .weight("dw", &[12, 1, 3, 3])
        .weight("b", &[12, 12, 1, 1])
        .weight("w3", &[10, 12, 3, 3])
        .weight("g", &[8, 3, 1, 1])
        .op("{name: p, op: conv2d, inputs: [x, w0]}")
        .op("{name: pr, op: relu, inputs: [p]}")
        .op("{name: h1, op: slice, inputs: [pr], starts: [0], ends: [12], axes: [1]}")
        .op("{name: h2, op: slice, inputs: [pr], starts: [12], ends: [24], axes: [1]}")
        .op("{name: c1, op: conv2d, inputs: [h2, a]}")
        .op("{name: r1, op: relu, inputs: [c1]}")
        .op("{name: d, op: conv2d, inputs: [r1, dw], padding: [1, 1, 1, 1], groups: 12}")
        .op("{name: c2, op: conv2d, inputs: [d, b]}")
        .op("{name: y, op: concat, inputs: [h1, c2], axis: 1}")
        .op("{name: ev, op: slice, inputs: [pr], starts: [1], ends: [24], axes: [1], steps: [2]}")
        .op("{name: z, op: conv2d, inputs: [ev, w3], padding: [1, 1, 1, 1]}")
        .op("{name: gs, op: slice, inputs: [pr], starts: [3], ends: [15], axes: [1]}")
        .op("{name: q, op: conv2d, inputs: [gs, g], groups: 4}")
        .output("y")
        .output("z")
        .output("q");
    let m = s.module();
    let opt = xla_aot::compile::optimize(&m, &Default::default()).unwrap();
    let text = xla_aot::ir::print_module(&opt.module);
    let prologues = text
        .split("\n}\n")
        .filter(|f| f.trim_start().starts_with("%fused"))
        .filter(|f| f.contains(" slice(") && f.contains(" convolution("))
        .count();
    assert_eq!(prologues, 2, "two slices read in place:\n{text}");
    check_everywhere(&m);
}

#[test]
fn grouped_convolutions_match_the_interpreter_on_every_target() {
    // Channels-minor chain (pixels × channels with panels per group): 3 groups of 5 input and 5
    // output channels (odd, a partial vector), stride 2, asymmetric padding, dilation; then a
    // 1×1 with 5 groups of 3 → 8 channels, and a model output of a grouped 1×1 (5 groups of 8 → 3) fed by
    // channels-minor data (stored at the output's channel stride).
    let mut s = Spec::new("conv_groups_nhwc", 21);
    s.input("x", &[2, 6, 13, 11])
        .weight("w0", &[15, 6, 3, 3])
        .weight("wg", &[15, 5, 3, 3])
        .weight("w1", &[40, 3, 1, 1])
        .weight("w2", &[15, 8, 1, 1])
        .op("{name: c0, op: conv2d, inputs: [x, w0], padding: [1, 1, 1, 1]}")
        .op("{name: r0, op: relu, inputs: [c0]}")
        .op("{name: g, op: conv2d, inputs: [r0, wg], strides: [2, 1], padding: [1, 0, 2, 1], dilations: [1, 2], groups: 3}")
        .op("{name: rg, op: relu, inputs: [g]}")
        .op("{name: p, op: conv2d, inputs: [rg, w1], groups: 5}")
        .op("{name: rp, op: relu6, inputs: [p]}")
        .op("{name: q, op: conv2d, inputs: [rp, w2], groups: 5}")
        .output("q");
    check_everywhere(&s.module());
    // 40 output channels per group (a full and a partial panel on every target), internal.
    let mut s = Spec::new("conv_groups_wide", 22);
    s.input("x", &[1, 16, 7, 9])
        .weight("w0", &[16, 16, 1, 1])
        .weight("wg", &[80, 8, 1, 1])
        .op("{name: c0, op: conv2d, inputs: [x, w0]}")
        .op("{name: r0, op: relu, inputs: [c0]}")
        .op("{name: g, op: conv2d, inputs: [r0, wg], groups: 2}")
        .op("{name: rg, op: relu, inputs: [g]}")
        .op("{name: y, op: global_avg_pool, inputs: [rg]}")
        .output("y");
    check_everywhere(&s.module());
    // Channels-major input and output (channels × pixels per group): 4 groups of 2 → 3 with
    // padding and dilation on a 37-wide row, a channel multiplier of 2 (groups = C, 2 outputs
    // each), and a plain depthwise convolution of a model input.
    let mut s = Spec::new("conv_groups_nchw", 23);
    s.input("x", &[1, 8, 9, 37])
        .weight("wg", &[12, 2, 3, 3])
        .weight("wm", &[16, 1, 3, 3])
        .weight("wd", &[8, 1, 3, 3])
        .op("{name: g, op: conv2d, inputs: [x, wg], padding: [1, 2, 1, 0], dilations: [2, 1], groups: 4}")
        .op("{name: m, op: conv2d, inputs: [x, wm], padding: [1, 1, 1, 1], groups: 8}")
        .op("{name: d, op: conv2d, inputs: [x, wd], strides: [1, 1], padding: [1, 1, 1, 1], groups: 8}")
        .output("g")
        .output("m")
        .output("d");
    check_everywhere(&s.module());
    // A pointwise grouped convolution from channels-minor data into the model output (the input
    // is staged channels-major per group and chunk: 35 pixels, a partial chunk on every
    // target), a pointwise one over whole NCHW rows (run as one row of 49 pixels), and a
    // depthwise convolution of the NCHW input feeding channels-minor convolutions (its pixels
    // stored at the output's pixel stride).
    let mut s = Spec::new("conv_groups_staged", 24);
    s.input("x", &[2, 12, 5, 7])
        .input("z", &[1, 6, 7, 7])
        .weight("w0", &[12, 4, 1, 1])
        .weight("w1", &[20, 3, 1, 1])
        .weight("wz", &[9, 2, 1, 1])
        .weight("wd", &[12, 1, 3, 3])
        .weight("wp", &[8, 12, 1, 1])
        .op("{name: c0, op: conv2d, inputs: [x, w0], groups: 3}")
        .op("{name: r0, op: relu, inputs: [c0]}")
        .op("{name: q, op: conv2d, inputs: [r0, w1], groups: 4}")
        .op("{name: qz, op: conv2d, inputs: [z, wz], groups: 3}")
        .op("{name: d, op: conv2d, inputs: [x, wd], padding: [1, 1, 1, 1], groups: 12}")
        .op("{name: rd, op: relu, inputs: [d]}")
        .op("{name: p, op: conv2d, inputs: [rd, wp]}")
        .op("{name: rp, op: relu, inputs: [p]}")
        .op("{name: y, op: global_avg_pool, inputs: [rp]}")
        .output("q")
        .output("qz")
        .output("y");
    check_everywhere(&s.module());
    // Staged with 20 channels per group (square blocks transposed in registers plus a remainder
    // of channels, whole chunks of pixels plus a partial one).
    let mut s = Spec::new("conv_groups_staged_wide", 26);
    s.input("x", &[2, 6, 7, 9])
        .weight("w0", &[40, 6, 1, 1])
        .weight("w1", &[40, 20, 1, 1])
        .op("{name: c0, op: conv2d, inputs: [x, w0]}")
        .op("{name: r0, op: relu, inputs: [c0]}")
        .op("{name: q, op: conv2d, inputs: [r0, w1], groups: 2}")
        .output("q");
    check_everywhere(&s.module());
    // Few output channels per group (5: panels mostly empty) over long sums from NCHW input:
    // channels × pixels into channels-minor results, pointwise (one row of 54 pixels) and 3×3
    // with padding.
    let mut s = Spec::new("conv_groups_narrow", 25);
    s.input("x", &[1, 80, 6, 9])
        .input("z", &[1, 36, 6, 11])
        .weight("wp", &[10, 40, 1, 1])
        .weight("wz", &[10, 18, 3, 3])
        .op("{name: p, op: conv2d, inputs: [x, wp], groups: 2}")
        .op("{name: rp, op: relu, inputs: [p]}")
        .op("{name: yp, op: global_avg_pool, inputs: [rp]}")
        .op("{name: q, op: conv2d, inputs: [z, wz], padding: [1, 1, 1, 1], groups: 2}")
        .op("{name: rq, op: relu, inputs: [q]}")
        .op("{name: yq, op: global_avg_pool, inputs: [rq]}")
        .output("yp")
        .output("yq");
    check_everywhere(&s.module());
}

#[test]
fn residual_adds_in_registers_match_the_interpreter_on_every_target() {
    // A residual (a value of the output's shape) added to the accumulators before the store,
    // on each path: pixels × channels (NHWC residual), staged pointwise and channels × pixels
    // into the model output (NHWC and NCHW residuals, partial chunks), and a dense layer.
    let mut s = Spec::new("residuals", 31);
    s.input("x", &[2, 8, 5, 7])
        .input("a", &[5, 24])
        .input("b", &[5, 20])
        .weight("w0", &[8, 8, 3, 3])
        .weight("w1", &[8, 2, 1, 1])
        .weight("w2", &[8, 8, 3, 3])
        .weight("wd", &[24, 20])
        .op("{name: c0, op: conv2d, inputs: [x, w0], padding: [1, 1, 1, 1]}")
        .op("{name: r0, op: relu, inputs: [c0]}")
        .op("{name: c1, op: conv2d, inputs: [r0, w0], padding: [1, 1, 1, 1]}")
        .op("{name: s1, op: add, inputs: [c1, r0]}")
        .op("{name: r1, op: relu, inputs: [s1]}")
        .op("{name: q, op: conv2d, inputs: [r1, w1], groups: 4}")
        .op("{name: sq, op: add, inputs: [r1, q]}")
        .op("{name: c2, op: conv2d, inputs: [x, w2], padding: [1, 1, 1, 1]}")
        .op("{name: s2, op: sub, inputs: [x, c2]}")
        .op("{name: d, op: matmul, inputs: [a, wd]}")
        .op("{name: sd, op: add, inputs: [d, b]}")
        .output("sq")
        .output("s2")
        .output("sd");
    check_everywhere(&s.module());
}

#[test]
fn requantizing_epilogues_match_the_interpreter_on_every_target() {
    // A quantized model's residual block tail: the convolution requantized (scale, saturate,
    // round, the QDQ pair's s32 round trip, dequantize) plus a dequantized residual, then
    // requantized after ReLU: register steps with a divide, the round trip and a residual with
    // its own multiply (`cpu/epilogue.rs`); the longer tail (`MAX_REGISTER_STEPS`) is swept over
    // the stored result. Inputs and weights are seeded, so any rounding flip would be stable.
    let text = "HloModule requant\n\nENTRY %main {
  %x = f32[2,8,5,7]{3,2,1,0} parameter(0)
  %r = f32[2,16,5,7]{3,2,1,0} parameter(1)
  %w = f32[16,8,1,1]{3,2,1,0} parameter(2)
  %conv = f32[2,16,5,7]{3,2,1,0} convolution(%x, %w), window={size=1x1}, dim_labels=bf01_oi01->bf01
  %s = f32[] constant(0.03125)
  %sb = f32[2,16,5,7]{3,2,1,0} broadcast(%s), dimensions={}
  %lo = f32[] constant(-128)
  %lob = f32[2,16,5,7]{3,2,1,0} broadcast(%lo), dimensions={}
  %hi = f32[] constant(127)
  %hib = f32[2,16,5,7]{3,2,1,0} broadcast(%hi), dimensions={}
  %m = f32[] constant(12582912)
  %mb = f32[2,16,5,7]{3,2,1,0} broadcast(%m), dimensions={}
  %q0 = f32[2,16,5,7]{3,2,1,0} divide(%conv, %sb)
  %q1 = f32[2,16,5,7]{3,2,1,0} clamp(%lob, %q0, %hib)
  %q2 = f32[2,16,5,7]{3,2,1,0} add(%q1, %mb)
  %q3 = f32[2,16,5,7]{3,2,1,0} subtract(%q2, %mb)
  %qi = s32[2,16,5,7]{3,2,1,0} convert(%q3)
  %qf = f32[2,16,5,7]{3,2,1,0} convert(%qi)
  %d = f32[2,16,5,7]{3,2,1,0} multiply(%qf, %sb)
  %rd = f32[2,16,5,7]{3,2,1,0} multiply(%r, %sb)
  %y = f32[2,16,5,7]{3,2,1,0} add(%d, %rd)
  %zero = f32[] constant(0)
  %zb = f32[2,16,5,7]{3,2,1,0} broadcast(%zero), dimensions={}
  %relu = f32[2,16,5,7]{3,2,1,0} maximum(%y, %zb)
  %t0 = f32[2,16,5,7]{3,2,1,0} divide(%relu, %sb)
  %t1 = f32[2,16,5,7]{3,2,1,0} clamp(%lob, %t0, %hib)
  %t2 = f32[2,16,5,7]{3,2,1,0} add(%t1, %mb)
  %t3 = f32[2,16,5,7]{3,2,1,0} subtract(%t2, %mb)
  %ti = s32[2,16,5,7]{3,2,1,0} convert(%t3)
  %tf = f32[2,16,5,7]{3,2,1,0} convert(%ti)
  %out = f32[2,16,5,7]{3,2,1,0} multiply(%tf, %sb)
  ROOT %outputs = (f32[2,16,5,7]{3,2,1,0}, f32[2,16,5,7]{3,2,1,0}) tuple(%y, %out), names={y, out}
}
"
    .replace("s32[", "i32[");
    let m = xla_aot::ir::parse_module(&text).unwrap();
    check_everywhere(&m);
}

#[test]
fn full_min_and_max_reductions_match_the_interpreter_on_every_target() {
    // A dynamic quantization's range: the min and the max of every element of a fused chain (a
    // concatenation, a transpose and an exponential), each over the operand's minor-most
    // physical dim in 8 running values (`cpu/reduce.rs` `reduce_all_partials`): 37 elements a
    // row take 4 blocks and a tail of 5. A sum over everything keeps the generic loops.
    let text = "HloModule full_range\n\nENTRY %main {
  %a = f32[3,37]{1,0} parameter(0)
  %b = f32[3,37]{1,0} parameter(1)
  %c = f32[6,37]{1,0} concatenate(%a, %b), dimensions={0}
  %t = f32[37,6]{1,0} transpose(%c), dimensions={1,0}
  %e = f32[37,6]{1,0} exponential(%t)
  %hi = f32[] reduce(%c), dimensions={0,1}, kind=max
  %lo = f32[] reduce(%e), dimensions={0,1}, kind=min
  %lo2 = f32[] reduce(%c), dimensions={0,1}, kind=min
  %sum = f32[] reduce(%c), dimensions={0,1}, kind=add
  ROOT %outputs = (f32[], f32[], f32[], f32[]) tuple(%hi, %lo, %lo2, %sum), names={hi, lo, lo2, sum}
}
";
    let m = xla_aot::ir::parse_module(text).unwrap();
    check_everywhere(&m);
}

#[test]
fn pooling_of_channels_minor_data_matches_the_interpreter_on_every_target() {
    // conv -> relu -> max pool (3x3, stride 2, padding) -> conv -> avg pool: both pools read and
    // write channels-minor data (layout assignment carries NHWC through them); a spatial max and
    // a global average over channels-minor tensors reduce in registers. 29 channels take every
    // tail width (AVX-512: 16 + 8 + 4 + 1 lanes; AVX2: 8 × 3 + 4 + 1; NEON: 4 × 7 + 1).
    let mut s = Spec::new("pools", 8);
    s.input("x", &[1, 3, 17, 19])
        .weight("w1", &[29, 3, 3, 3])
        .weight("w2", &[12, 29, 1, 1])
        .op("{name: c1, op: conv2d, inputs: [x, w1], padding: [1, 1, 1, 1]}")
        .op("{name: r1, op: relu, inputs: [c1]}")
        .op("{name: p1, op: max_pool2d, inputs: [r1], kernel_size: [3, 3], strides: [2, 2], padding: [1, 1, 1, 1]}")
        .op("{name: c2, op: conv2d, inputs: [p1, w2]}")
        .op("{name: p2, op: avg_pool2d, inputs: [c2], kernel_size: [2, 2], strides: [2, 2]}")
        .op("{name: y, op: relu, inputs: [p2]}")
        .op("{name: g1, op: reduce_max, inputs: [r1], axes: [2, 3]}")
        .op("{name: g2, op: global_avg_pool, inputs: [p1]}")
        .output("y")
        .output("g1")
        .output("g2");
    let m = s.module();
    let mut opt = m.clone();
    xla_aot::passes::Pipeline::default_pipeline()
        .run(&mut opt, &mut |_, _, _| {})
        .unwrap();
    let text = xla_aot::ir::print_module(&opt);
    assert!(
        text.lines().any(|l| l.contains("{1,3,2,0} reduce-window")),
        "a channels-minor pool:\n{text}"
    );
    check_everywhere(&m);
}

#[test]
fn quantized_activations_stored_as_bytes_pool_to_the_interpreter_on_every_target() {
    // Quantized convolutions whose requantized results only max pools read: stored one byte
    // each (`cpu/byte_storage.rs`) where the convolution takes an int8 kernel: uint8 after ReLU
    // (an image's 3 channels into 64: two panels per tile, packed 64-byte stores on AVX-512BW;
    // the pool partly in the padding) and int8 (40 channels: a partial panel, stored lane by
    // lane), each pool writing its slice of a concatenation in place. The input's scale is a
    // power of two, so it folds into the int8 weights exactly and they stay int8 columns.
    let mut s = Spec::new("bytes", 17);
    s.input("x", &[1, 3, 23, 21])
        .scalar("sx", 0.015625)
        .scalar("s1", 0.05)
        .scalar("s2", 0.03)
        .weight_int8("w1", &[64, 3, 3, 3])
        .weight("b1", &[64])
        .weight_int8("w2", &[40, 3, 3, 3])
        .op("{name: qx, op: quantize, inputs: [x, sx]}")
        .op("{name: dx, op: dequantize, inputs: [qx, sx]}")
        .op("{name: c1, op: conv2d, inputs: [dx, w1, b1], strides: [2, 2]}")
        .op("{name: r1, op: relu, inputs: [c1]}")
        .op("{name: q1, op: quantize, inputs: [r1, s1]}")
        .op("{name: d1, op: dequantize, inputs: [q1, s1]}")
        .op("{name: p1, op: max_pool2d, inputs: [d1], kernel_size: [3, 3], strides: [2, 2], padding: [1, 1, 1, 1]}")
        .op("{name: c2, op: conv2d, inputs: [dx, w2], strides: [2, 2]}")
        .op("{name: q2, op: quantize, inputs: [c2, s2], dtype: i8}")
        .op("{name: d2, op: dequantize, inputs: [q2, s2]}")
        .op("{name: p2, op: max_pool2d, inputs: [d2], kernel_size: [3, 3], strides: [2, 2], padding: [1, 1, 1, 1]}")
        .op("{name: y, op: concat, inputs: [p1, p2], axis: 1}")
        .op("{name: z, op: relu, inputs: [y]}")
        .output("z");
    let m = s.module();
    check_everywhere(&m);
    // A fire module: two quantized convolutions (16 channels each, a partial panel on AVX-512)
    // concatenated in place and requantized with one scale, read by an int8 convolution that
    // stages the bytes as they are (`conv/int8.rs`).
    let mut f = Spec::new("bytes_fire", 18);
    f.input("x", &[1, 8, 9, 11])
        .scalar("sx", 0.0625)
        .scalar("s", 0.125)
        .weight_int8("wa", &[16, 8, 1, 1])
        .weight_int8("wb", &[16, 8, 3, 3])
        .weight_int8("w3", &[40, 32, 1, 1])
        .op("{name: qx, op: quantize, inputs: [x, sx]}")
        .op("{name: dx, op: dequantize, inputs: [qx, sx]}")
        .op("{name: ca, op: conv2d, inputs: [dx, wa]}")
        .op("{name: ra, op: relu, inputs: [ca]}")
        .op("{name: cb, op: conv2d, inputs: [dx, wb], padding: [1, 1, 1, 1]}")
        .op("{name: rb, op: relu, inputs: [cb]}")
        .op("{name: y, op: concat, inputs: [ra, rb], axis: 1}")
        .op("{name: qy, op: quantize, inputs: [y, s]}")
        .op("{name: dy, op: dequantize, inputs: [qy, s]}")
        .op("{name: z, op: conv2d, inputs: [dy, w3]}")
        .op("{name: rz, op: relu, inputs: [z]}")
        .op("{name: g, op: global_avg_pool, inputs: [rz]}")
        .output("g");
    let fire = f.module();
    check_everywhere(&fire);
    // Integer inputs (scale 1), weights and bias, as a QDQ model's convolutions read them:
    // the sums take no column scale and start from the bias (`kernel.rs` `sum_bias`), for a
    // result stored as bytes (read by a pool) and one stored as f32 (a model output); 40
    // channels: a partial panel on AVX-512.
    let mut g = Spec::new("bytes_bias", 19);
    g.input("x", &[1, 8, 13, 11])
        .scalar("sx", 1.0)
        .scalar("s1", 0.37)
        .weight_ints("w1", &[40, 8, 3, 3], 1.0)
        .weight_ints("b1", &[40], 4.0)
        .weight_ints("w2", &[24, 8, 1, 1], 1.0)
        .weight_ints("b2", &[24], 4.0)
        .op("{name: qx, op: quantize, inputs: [x, sx]}")
        .op("{name: dx, op: dequantize, inputs: [qx, sx]}")
        .op("{name: c1, op: conv2d, inputs: [dx, w1, b1], padding: [1, 1, 1, 1]}")
        .op("{name: r1, op: relu, inputs: [c1]}")
        .op("{name: q1, op: quantize, inputs: [r1, s1]}")
        .op("{name: d1, op: dequantize, inputs: [q1, s1]}")
        .op("{name: p1, op: max_pool2d, inputs: [d1], kernel_size: [2, 2], strides: [2, 2]}")
        .op("{name: c2, op: conv2d, inputs: [dx, w2, b2]}")
        .op("{name: q2, op: quantize, inputs: [c2, s1], dtype: i8}")
        .op("{name: d2, op: dequantize, inputs: [q2, s1]}")
        .output("p1")
        .output("d2");
    check_everywhere(&g.module());
    // The convolutions store bytes where an int8 kernel computes them (every CPU target), the
    // fire module's concatenation too.
    for t in ["x86_64-avx512-vnni", "x86_64-avx2", "aarch64-neon"] {
        let t = Target::resolve(t).unwrap();
        let art = compile_model(&m, &t, &CompileOptions::default()).unwrap();
        let plan = xla_aot::arena::plan_text(&art.plan);
        for d in ["u8", "i8"] {
            assert!(
                plan.contains(&format!("(stored as {d})")),
                "{}:\n{plan}",
                t.name
            );
        }
        let art = compile_model(&fire, &t, &CompileOptions::default()).unwrap();
        let plan = xla_aot::arena::plan_text(&art.plan);
        assert!(plan.contains("cat (stored as u8)"), "{}:\n{plan}", t.name);
    }
}

/// Compiles `m` for `t` and links it with the C program `source` (a path in the repository)
/// into a scratch directory: (directory, executable, arena size).
fn link_with(
    m: &Module,
    t: &Target,
    source: &str,
    tag: &str,
) -> (std::path::PathBuf, std::path::PathBuf, usize) {
    link_with_options(m, t, source, tag, &CompileOptions::default())
}

/// Runs `m` through `tests/harness/parallel.c` with `threads` threads; returns the hook's call count.
fn hook_calls(m: &Module, t: &Target, threads: usize) -> usize {
    hook_calls_with(m, t, threads, &CompileOptions::default())
}

#[test]
fn the_thread_hook_splits_large_kernels_and_changes_no_bit() {
    // A 160³ product (8 MFLOP), a 3x3 convolution of 32 channels on 40x40 (15 MFLOP) and its
    // depthwise sibling: each large enough to be split; the small dense layer after them is not.
    // Then grouped convolutions (7 MFLOP, and a staged pointwise one into the output, 1.6 MFLOP):
    // each task stages into its own stack buffer.
    let mut s = Spec::new("threaded", 9);
    s.input("a", &[160, 160])
        .weight("w", &[160, 160])
        .input("x", &[1, 16, 40, 40])
        .weight("k", &[32, 16, 3, 3])
        .weight("dw", &[32, 1, 3, 3])
        .weight("k2", &[8, 32, 1, 1])
        .op("{name: y, op: matmul, inputs: [a, w]}")
        .op("{name: c, op: conv2d, inputs: [x, k], padding: [1, 1, 1, 1]}")
        .op("{name: r, op: relu, inputs: [c]}")
        .op("{name: d, op: conv2d, inputs: [r, dw], padding: [1, 1, 1, 1], groups: 32}")
        .op("{name: e, op: conv2d, inputs: [d, k2]}")
        .input("g", &[1, 64, 20, 20])
        .weight("kg", &[64, 16, 3, 3])
        .weight("kp", &[64, 32, 1, 1])
        .op("{name: gc, op: conv2d, inputs: [g, kg], padding: [1, 1, 1, 1], groups: 4}")
        .op("{name: gr, op: relu, inputs: [gc]}")
        .op("{name: gp, op: conv2d, inputs: [gr, kp], groups: 2}")
        .output("y")
        .output("e")
        .output("gp");
    let m = s.module();
    for t in common::compiled_targets() {
        let calls = hook_calls(&m, &t, 3);
        // The product and the convolution (and the depthwise one, 0.9 MFLOP, stays whole).
        assert!(calls >= 2, "{}: {calls} hook calls", t.name);
    }
}

#[test]
fn bf16_products_split_between_threads_change_no_bit() {
    // `precision: bf16`: each task packs its own rows of A into its stack buffer; a 160³ product
    // split by columns and a 300-row one split by row tiles give one thread's bits.
    let mut s = Spec::new("bf16_threaded", 19);
    s.input("a", &[160, 160])
        .weight("w", &[160, 160])
        .input("b", &[300, 96])
        .weight("v", &[40, 96])
        .op("{name: y, op: matmul, inputs: [a, w]}")
        .op("{name: z, op: dense, inputs: [b, v]}")
        .output("y")
        .output("z");
    let m = s.module();
    let opts = CompileOptions {
        precision: Some(xla_aot::ir::Precision::Bf16),
        ..common::default_options()
    };
    let mut ts = common::compiled_targets();
    ts.extend(
        Target::resolve("x86_64-avx512-bf16")
            .ok()
            .filter(|t| t.runs_here()),
    );
    for t in ts {
        let calls = hook_calls_with(&m, &t, 3, &opts);
        assert!(calls >= 1, "{}: {calls} hook calls", t.name);
    }
}

#[test]
fn bf16_activations_are_packed_into_the_arena_scratch_per_task() {
    // `precision: bf16` on AVX-512 BF16: the product packs A (as bfloat16 pairs) into per-task
    // slices of the arena's kernel scratch (`gemm_pack.rs`), not into a stack buffer: the plan
    // reserves one 64 KiB row block per task, at most 16 tasks. An f32 product reads A in place
    // and reserves none. Split between 3 threads it gives one thread's bits, and it matches the
    // rounded reference (odd M and K, partial panels, a bias + ReLU epilogue).
    let mut s = Spec::new("bf16_scratch", 29);
    s.input("x", &[301, 515])
        .weight("w", &[230, 515])
        .weight("b", &[230])
        .op("{name: d, op: dense, inputs: [x, w, b]}")
        .op("{name: y, op: relu, inputs: [d]}")
        .output("y");
    let m = s.module();
    let bf16 = Target::resolve("x86_64-avx512-bf16").unwrap();
    let opts = CompileOptions {
        precision: Some(xla_aot::ir::Precision::Bf16),
        ..common::default_options()
    };
    let scratch = |t: &Target, o: &CompileOptions| compile_model(&m, t, o).unwrap().plan.scratch;
    let f32_target = Target::resolve("x86_64-avx512").unwrap();
    assert_eq!(scratch(&f32_target, &common::default_options()), None);
    let (_, bytes) = scratch(&bf16, &opts).expect("kernel scratch for the bf16 product");
    // 22 row tiles of 14 rows (more than the 8 column chunks: tasks split the rows), so 16
    // tasks; each slice a row block of 4 tiles (64 KiB / 14 rows of K-blocks of 512 k) of 256
    // pair dwords a row.
    assert_eq!(bytes, 16 * (4 * 14) * 256 * 4);
    if !bf16.runs_here() {
        eprintln!("this CPU has no AVX-512 BF16: the bf16 product is compiled, not run");
        return;
    }
    assert!(hook_calls_with(&m, &bf16, 3, &opts) >= 1);
    let ins = random_inputs(&m, 7);
    let rounded = xla_aot::compile::optimize(&m, &opts).unwrap().module;
    let expected = evaluate(&rounded, &ins).unwrap();
    let actual = common::run_compiled_with(&m, &bf16, &ins, "kernels-bf16-scratch", &opts);
    check_close(&actual[0], &expected[0]).unwrap();
}

#[test]
fn the_thread_hook_splits_pooling_elementwise_and_reductions_and_changes_no_bit() {
    // No dot, no convolution: a max pool (294 Ki window taps), a large fused elementwise loop
    // (a sigmoid-weighted x over 288 Ki elements), a transpose to channels-minor and a global
    // average pool (reads 288 Ki) each split their outermost loop between the tasks; a small
    // elementwise op (64 elements) does not. The harness checks the outputs bit for bit
    // against one thread.
    let mut s = Spec::new("loopthreads", 17);
    s.input("x", &[1, 32, 96, 96])
        .input("t", &[8, 8])
        .op("{name: p, op: max_pool2d, inputs: [x], kernel_size: [3, 3], strides: [2, 2], padding: [1, 1, 1, 1]}")
        .op("{name: e, op: silu, inputs: [x]}")
        .op("{name: h, op: transpose, inputs: [x], perm: [0, 2, 3, 1]}")
        .op("{name: g, op: global_avg_pool, inputs: [x]}")
        .op("{name: r, op: relu, inputs: [t]}")
        .output("p")
        .output("e")
        .output("h")
        .output("g")
        .output("r");
    let m = s.module();
    for t in common::compiled_targets() {
        let calls = hook_calls(&m, &t, 3);
        assert!(calls >= 4, "{}: {calls} hook calls", t.name);
    }
    // Small loops (64 and 16 elements) never call the hook: one call, the large silu's.
    let mut s = Spec::new("smallloops", 18);
    s.input("t", &[1, 1, 8, 8])
        .input("x", &[1, 32, 96, 96])
        .op("{name: r, op: relu, inputs: [t]}")
        .op("{name: q, op: max_pool2d, inputs: [t], kernel_size: [2, 2], strides: [2, 2]}")
        .op("{name: e, op: silu, inputs: [x]}")
        .output("r")
        .output("q")
        .output("e");
    let m = s.module();
    let t = Target::resolve("host").unwrap();
    assert_eq!(hook_calls(&m, &t, 2), 1);
}

#[test]
fn the_benchmark_harness_builds_and_times_a_model_on_two_threads() {
    // bench/harness.c is what bench/run.py times; keep it compiling and correct here.
    let mut s = Spec::new("benchsmoke", 13);
    s.input("a", &[128, 128])
        .weight("w", &[128, 128])
        .op("{name: y, op: matmul, inputs: [a, w]}")
        .output("y");
    let m = s.module();
    let t = Target::resolve("host").unwrap();
    let (dir, exe, arena) = link_with(&m, &t, "bench/harness.c", "bench");
    let ins = random_inputs(&m, 3);
    let inp = dir.join("a.bin");
    std::fs::write(&inp, ins[0].bytes().unwrap()).unwrap();
    let outp = dir.join("y.bin");
    let r = std::process::Command::new(&exe)
        .args(["2", "0.01", &arena.to_string(), "1", "1"])
        .arg(&inp)
        .arg((128 * 128 * 4).to_string())
        .arg(&outp)
        .arg((128 * 128 * 4).to_string())
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let line = String::from_utf8_lossy(&r.stdout);
    assert!(line.contains("\"median_ns\""), "{line}");
    let expected = evaluate(&m, &ins).unwrap();
    let got = xla_aot::ir::Literal {
        dtype: xla_aot::ir::DType::F32,
        dims: vec![128, 128],
        data: xla_aot::ir::LiteralData::Dense(std::fs::read(&outp).unwrap().into()),
    };
    check_close(&got, &expected[0]).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_profiler_hook_sees_every_kernel_twice_in_order() {
    // tests/harness/profiler.c: (0, 0), (0, 1), (1, 0), ... for the manifest's kernels, nothing
    // once unregistered, and the same bits either way.
    let mut s = Spec::new("profiled", 17);
    s.input("x", &[1, 4, 10, 10])
        .weight("w", &[8, 4, 3, 3])
        .weight("d", &[8, 1, 3, 3])
        .op("{name: c, op: conv2d, inputs: [x, w], padding: [1, 1, 1, 1]}")
        .op("{name: r, op: relu, inputs: [c]}")
        .op("{name: e, op: conv2d, inputs: [r, d], groups: 8}")
        .op("{name: y, op: global_avg_pool, inputs: [e]}")
        .output("y");
    let m = s.module();
    for t in common::compiled_targets() {
        let kernels = compile_model(&m, &t, &CompileOptions::default())
            .unwrap()
            .kernels
            .len();
        let (dir, exe, arena) = link_with(&m, &t, "xla-aot/tests/harness/profiler.c", "profiler");
        let (_, runner) = toolchain(&t);
        let ins = random_inputs(&m, 5);
        let mut args = vec![
            kernels.to_string(),
            arena.to_string(),
            "1".into(),
            "1".into(),
        ];
        let p = dir.join("in0.bin");
        std::fs::write(&p, ins[0].bytes().unwrap()).unwrap();
        args.push(p.display().to_string());
        args.push(ins[0].bytes().unwrap().len().to_string());
        args.push(dir.join("out0.bin").display().to_string());
        args.push(
            m.entry
                .inst(m.entry.outputs[0].value)
                .shape
                .size_bytes()
                .to_string(),
        );
        let mut cmd = if runner.is_empty() {
            std::process::Command::new(&exe)
        } else {
            let mut c = std::process::Command::new(&runner[0]);
            c.args(&runner[1..]).arg(&exe);
            c
        };
        let r = cmd.args(&args).output().unwrap();
        assert!(
            r.status.success(),
            "{}: {}",
            t.name,
            String::from_utf8_lossy(&r.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&r.stdout).trim(),
            format!("events: {}", 2 * kernels),
            "{}",
            t.name
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
