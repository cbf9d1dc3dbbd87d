//! The GPU kernels' host emulation: every example compiled in grid form (each kernel computes
//! the one output element its index names, `codegen/gpu/grid.rs`) and run over the whole grid
//! on the host, against the reference interpreter. The same kernel bodies become the PTX
//! kernels (`codegen/gpu/ptx.rs`); `tests/ptx.rs` checks those with ptxas. Tiled products (shared
//! memory and barriers, `codegen/gpu/tiled.rs`) are checked on partial tiles.

mod common;

use common::{EXAMPLES, case_inputs, check_close, repo, run_compiled_with};
use xla_aot::compile::CompileOptions;
use xla_aot::front::load_spec;
use xla_aot::interp::evaluate;
use xla_aot::target::Target;

#[test]
fn every_example_matches_the_interpreter_when_run_over_its_grid() {
    let t = Target::resolve("x86_64").unwrap();
    let mut opts = CompileOptions::default();
    opts.codegen.grid = true;
    for ex in EXAMPLES {
        let dir = repo().join("examples").join(ex);
        let m = load_spec(&dir.join("model.yaml")).unwrap().module;
        let inputs = case_inputs(&m, &dir.join("golden"));
        let expected = evaluate(&m, &inputs).unwrap();
        let actual = run_compiled_with(&m, &t, &inputs, &format!("grid-{ex}"), &opts);
        for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
            if let Err(msg) = check_close(a, e) {
                panic!("{ex} output {i} in grid form: {msg}");
            }
        }
    }
}

/// Tiled products (`codegen/gpu/tiled.rs`: 16×16 blocks staging K-slices through shared memory,
/// the host emulation running each phase for the whole block before the next) on shapes that
/// leave partial tiles in every dim, with batch dims, with a transposed lhs, fused with a bias
/// and ReLU, and convolutions (strided, padded, dilated, fused) as implicit GEMMs: in grid form on
/// the host they match the interpreter, and their PTX holds the shared tiles and the barriers,
/// one block per 16×16 tile.
#[test]
fn tiled_products_match_the_interpreter_on_partial_tiles() {
    let cases = [
        (
            "f32[17,33]{1,0}",
            "f32[33,18]{1,0}",
            "f32[17,18]{1,0}",
            "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
            2 * 2,
        ),
        (
            "f32[3,20,17]{2,1,0}",
            "f32[3,17,19]{2,1,0}",
            "f32[3,20,19]{2,1,0}",
            "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
            3 * 2 * 2,
        ),
        (
            "f32[40,16]{1,0}",
            "f32[40,32]{1,0}",
            "f32[16,32]{1,0}",
            "lhs_contracting_dims={0}, rhs_contracting_dims={0}",
            2,
        ),
    ];
    for (i, (a, b, y, dims, blocks)) in cases.iter().enumerate() {
        let text = format!(
            "HloModule tiled{i}\n\nENTRY %main {{\n  %a = {a} parameter(0)\n  %b = {b} parameter(1)\n  \
             %y = {y} dot(%a, %b), {dims}\n  ROOT %outputs = ({y}) tuple(%y), names={{y}}\n}}\n"
        );
        tiled_case(i, &text, *blocks);
    }
    // An output fusion: dot + per-column bias + ReLU, the epilogue applied by each thread.
    let fused = "HloModule fused\n\nENTRY %main {\n  %a = f32[20,24]{1,0} parameter(0)\n  \
                 %b = f32[24,40]{1,0} parameter(1)\n  %bias = f32[40]{0} parameter(2)\n  \
                 %y = f32[20,40]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
                 %bb = f32[20,40]{1,0} broadcast(%bias), dimensions={1}\n  \
                 %z = f32[20,40]{1,0} add(%y, %bb)\n  %zero = f32[] constant(0)\n  \
                 %zb = f32[20,40]{1,0} broadcast(%zero), dimensions={}\n  \
                 %r = f32[20,40]{1,0} maximum(%z, %zb)\n  \
                 ROOT %outputs = (f32[20,40]{1,0}) tuple(%r), names={r}\n}\n";
    tiled_case(3, fused, 2 * 3);
    // Convolutions as implicit GEMMs: stride 2 with padding (rows: 2·5·5 pixels, K = 3·3·3,
    // 17 output channels), and a dilated one fused with a per-channel bias.
    let conv = "HloModule conv\n\nENTRY %main {\n  %x = f32[2,3,9,10]{3,2,1,0} parameter(0)\n  \
                %w = f32[17,3,3,3]{3,2,1,0} parameter(1)\n  \
                %y = f32[2,17,5,5]{3,2,1,0} convolution(%x, %w), window={size=3x3 stride=2x2 pad=1_1x1_1}, \
                dim_labels=bf01_oi01->bf01\n  \
                ROOT %outputs = (f32[2,17,5,5]{3,2,1,0}) tuple(%y), names={y}\n}\n";
    tiled_case(4, conv, 4 * 2);
    let dilated = "HloModule dilated\n\nENTRY %main {\n  %x = f32[1,8,12,12]{3,2,1,0} parameter(0)\n  \
                   %w = f32[20,8,3,3]{3,2,1,0} parameter(1)\n  %bias = f32[20]{0} parameter(2)\n  \
                   %y = f32[1,20,8,8]{3,2,1,0} convolution(%x, %w), window={size=3x3 rhs_dilate=2x2}, \
                   dim_labels=bf01_oi01->bf01\n  \
                   %bb = f32[1,20,8,8]{3,2,1,0} broadcast(%bias), dimensions={1}\n  \
                   %z = f32[1,20,8,8]{3,2,1,0} add(%y, %bb)\n  \
                   ROOT %outputs = (f32[1,20,8,8]{3,2,1,0}) tuple(%z), names={z}\n}\n";
    tiled_case(5, dilated, 4 * 2);
}

/// One tiled case: grid form on the host against the interpreter, then the PTX of the fully
/// optimised module: one tiled kernel of `expected_blocks` blocks.
fn tiled_case(i: usize, text: &str, expected_blocks: usize) {
    let t = Target::resolve("x86_64").unwrap();
    let mut opts = CompileOptions::default();
    opts.codegen.grid = true;
    let mut m = xla_aot::ir::parse_module(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let inputs: Vec<_> = m
        .entry
        .parameters()
        .iter()
        .enumerate()
        .map(|(s, &p)| {
            let shape = &m.entry.inst(p).shape;
            xla_aot::driver::random_input(shape.dtype, &shape.dims, 7 + s as u64)
        })
        .collect();
    let expected = evaluate(&m, &inputs).unwrap();
    let actual = run_compiled_with(&m, &t, &inputs, &format!("tiled-{i}"), &opts);
    if let Err(msg) = check_close(&actual[0], &expected[0]) {
        panic!("case {i} in grid form: {msg}\n{text}");
    }
    xla_aot::passes::Pipeline::default_pipeline()
        .run(&mut m, &mut |_, _, _| {})
        .unwrap();
    let plan = xla_aot::arena::plan(&m);
    let ptx = xla_aot::codegen::gpu::ptx::compile(&m, &plan, "sm_87").unwrap();
    assert_eq!(ptx.launches.len(), 1, "case {i}: one kernel");
    assert!(
        ptx.ptx.contains(".shared") && ptx.ptx.matches("bar.sync").count() >= 2,
        "case {i}: the product is tiled"
    );
    assert_eq!(
        ptx.launches[0].blocks() as usize,
        expected_blocks,
        "case {i}: one block per 16x16 tile"
    );
}

/// A batch-1 dense layer stays one thread per output: a 16×16 block would idle 15 rows.
#[test]
fn matrix_vector_products_are_not_tiled() {
    let m = load_spec(&repo().join("examples/mlp/model.yaml"))
        .unwrap()
        .module;
    let mut m = m;
    xla_aot::passes::Pipeline::default_pipeline()
        .run(&mut m, &mut |_, _, _| {})
        .unwrap();
    let plan = xla_aot::arena::plan(&m);
    let ptx = xla_aot::codegen::gpu::ptx::compile(&m, &plan, "sm_87").unwrap();
    assert!(!ptx.ptx.contains("bar.sync"), "no barrier in the mlp");
}

/// The decode-time ops in grid form (one thread per token or top-k entry): `sample` draws the
/// interpreter's tokens and `top-k` gives its values and indices, and their PTX assembles.
#[test]
fn sampling_ops_match_the_interpreter_in_grid_form() {
    let text = "name: sampler\ninputs:\n  - {name: logits, dtype: f32, shape: [48, 33]}\n  - {name: seed, dtype: i32, shape: []}\n  - {name: step, dtype: i32, shape: []}\noutputs: [token, greedy, values, indices]\nops:\n  - {name: token, op: sample, inputs: [logits, seed, step], temperature: 0.9, top_k: 7, top_p: 0.85}\n  - {name: greedy, op: sample, inputs: [logits, seed, step], temperature: 0}\n  - {name: values, op: top_k, inputs: [logits], k: 5}\n  - {name: indices, op: top_k_indices, inputs: [logits], k: 5}\n";
    let m = xla_aot::front::spec_from_str(std::path::Path::new("sampler.yaml"), text)
        .unwrap()
        .module;
    let inputs = vec![
        xla_aot::driver::random_input(xla_aot::ir::DType::F32, &[48, 33], 5),
        xla_aot::ir::Literal::from_i32(vec![], &[99]),
        xla_aot::ir::Literal::from_i32(vec![], &[3]),
    ];
    let expected = evaluate(&m, &inputs).unwrap();
    let t = Target::resolve("x86_64").unwrap();
    let mut opts = CompileOptions::default();
    opts.codegen.grid = true;
    let actual = run_compiled_with(&m, &t, &inputs, "grid-sampler", &opts);
    for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
        assert_eq!(a.bytes(), e.bytes(), "sampler output {i} in grid form");
    }
}

/// A channel shuffle moved to the grouped convolution after it (`passes/shuffle_sink.rs`), and a
/// strided channel slice read by a convolution: in grid form each convolution reads its input
/// channels at their source positions (`gpu/grid.rs`), matching the interpreter.
#[test]
fn grouped_convolutions_read_through_channel_shuffles_in_grid_form() {
    let list = |n: usize, k: usize| {
        (0..n)
            .map(|i| format!("{}", ((i * k) % 17) as f32 / 8.0 - 1.0))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let text = format!(
        "HloModule shuffle_grid\n\nENTRY %main {{\n\
  %x = f32[1,12,5,6]{{3,2,1,0}} parameter(0)\n\
  %z = f32[] constant(0)\n\
  %zb = f32[1,12,5,6]{{3,2,1,0}} broadcast(%z), dimensions={{}}\n\
  %r = f32[1,12,5,6]{{3,2,1,0}} maximum(%x, %zb)\n\
  %s1 = f32[1,3,4,5,6]{{4,3,2,1,0}} reshape(%r)\n\
  %st = f32[1,4,3,5,6]{{4,3,2,1,0}} transpose(%s1), dimensions={{0,2,1,3,4}}\n\
  %s = f32[1,12,5,6]{{3,2,1,0}} reshape(%st)\n\
  %dw = f32[12,1,3,3]{{3,2,1,0}} constant({{{}}})\n\
  %d = f32[1,12,5,6]{{3,2,1,0}} convolution(%s, %dw), window={{size=3x3 pad=1_1x1_1}}, dim_labels=bf01_oi01->bf01, feature_group_count=12\n\
  %g = f32[6,4,3,3]{{3,2,1,0}} constant({{{}}})\n\
  %y = f32[1,6,5,6]{{3,2,1,0}} convolution(%d, %g), window={{size=3x3 pad=1_1x1_1}}, dim_labels=bf01_oi01->bf01, feature_group_count=3\n\
  %sl = f32[1,5,5,6]{{3,2,1,0}} slice(%r), slice={{[0:1:1], [2:11:2], [0:5:1], [0:6:1]}}\n\
  %h = f32[3,5,3,3]{{3,2,1,0}} constant({{{}}})\n\
  %v = f32[1,3,5,6]{{3,2,1,0}} convolution(%sl, %h), window={{size=3x3 pad=1_1x1_1}}, dim_labels=bf01_oi01->bf01\n\
  ROOT %outputs = (f32[1,6,5,6]{{3,2,1,0}}, f32[1,3,5,6]{{3,2,1,0}}) tuple(%y, %v), names={{y, v}}\n}}\n",
        list(108, 5),
        list(216, 7),
        list(135, 3)
    );
    let m = xla_aot::ir::parse_module(&text).unwrap();
    let inputs = vec![xla_aot::driver::random_input(
        xla_aot::ir::DType::F32,
        &[1, 12, 5, 6],
        11,
    )];
    let opt = xla_aot::compile::optimize(&m, &CompileOptions::default()).unwrap();
    let printed = xla_aot::ir::print_module(&opt.module);
    assert_eq!(printed.matches(".sunk = ").count(), 3, "{printed}");
    assert!(printed.contains("kind=output, calls=%fused.v"), "{printed}");
    let expected = evaluate(&m, &inputs).unwrap();
    let t = Target::resolve("x86_64").unwrap();
    let mut opts = CompileOptions::default();
    opts.codegen.grid = true;
    let actual = run_compiled_with(&m, &t, &inputs, "grid-shuffle", &opts);
    for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
        if let Err(msg) = check_close(a, e) {
            panic!("shuffle_grid output {i} in grid form: {msg}");
        }
    }
}
