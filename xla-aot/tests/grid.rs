//! The GPU kernels' host emulation: every example compiled in grid form (each kernel computes
//! the one output element its index names, `codegen/cpu/grid.rs`) and run over the whole grid
//! on the host, against the reference interpreter. The same kernel bodies become the PTX
//! kernels (`codegen/ptx.rs`); `tests/ptx.rs` checks those with ptxas. Tiled products (shared
//! memory and barriers, `codegen/cpu/tiled.rs`) are checked on partial tiles.

mod common;

use common::{EXAMPLES, case_inputs, check_close, repo, run_compiled_with};
use xla_aot::emit::CompileOptions;
use xla_aot::interp::evaluate;
use xla_aot::spec::load_spec;
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

/// Tiled products (`codegen/cpu/tiled.rs`: 16×16 blocks staging K-slices through shared memory,
/// the host emulation running each phase for the whole block before the next) on shapes that
/// leave partial tiles in every dim, with batch dims, and with a transposed lhs: in grid form on
/// the host they match the interpreter, and their PTX holds the shared tiles and the barriers.
#[test]
fn tiled_products_match_the_interpreter_on_partial_tiles() {
    let cases = [
        (
            "f32[17,33]{1,0}",
            "f32[33,18]{1,0}",
            "f32[17,18]{1,0}",
            "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        ),
        (
            "f32[3,20,17]{2,1,0}",
            "f32[3,17,19]{2,1,0}",
            "f32[3,20,19]{2,1,0}",
            "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
        ),
        (
            "f32[40,16]{1,0}",
            "f32[40,32]{1,0}",
            "f32[16,32]{1,0}",
            "lhs_contracting_dims={0}, rhs_contracting_dims={0}",
        ),
    ];
    let t = Target::resolve("x86_64").unwrap();
    let mut opts = CompileOptions::default();
    opts.codegen.grid = true;
    for (i, (a, b, y, dims)) in cases.iter().enumerate() {
        let text = format!(
            "HloModule tiled{i}\n\nENTRY %main {{\n  %a = {a} parameter(0)\n  %b = {b} parameter(1)\n  \
             %y = {y} dot(%a, %b), {dims}\n  ROOT %outputs = ({y}) tuple(%y), names={{y}}\n}}\n"
        );
        let m = xla_aot::ir::parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
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
            panic!("case {i} ({a} x {b}) in grid form: {msg}");
        }
        let plan = xla_aot::arena::plan(&m);
        let ptx = xla_aot::codegen::ptx::compile(&m, &plan, "sm_87").unwrap();
        assert!(
            ptx.ptx.contains(".shared") && ptx.ptx.matches("bar.sync").count() >= 2,
            "case {i}: the product is tiled"
        );
        let blocks: usize = ptx.launches.iter().map(|l| l.blocks() as usize).sum();
        let expected_blocks = match i {
            0 => 2 * 2,
            1 => 3 * 2 * 2,
            _ => 2,
        };
        assert_eq!(
            blocks, expected_blocks,
            "case {i}: one block per 16x16 tile"
        );
    }
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
    let ptx = xla_aot::codegen::ptx::compile(&m, &plan, "sm_87").unwrap();
    assert!(!ptx.ptx.contains("bar.sync"), "no barrier in the mlp");
}
