//! The GPU kernels' host emulation: every example compiled in grid form (each kernel computes
//! the one output element its index names, `codegen/cpu/grid.rs`) and run over the whole grid
//! on the host, against the reference interpreter. The same kernel bodies become the PTX
//! kernels (`codegen/ptx.rs`); `tests/ptx.rs` checks those with ptxas.

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
