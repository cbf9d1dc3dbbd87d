//! The reference interpreter against the independent numpy implementation
//! (`scripts/gen_golden.py`): every op case and every example.

mod common;

use common::{GOLDEN_ATOL, GOLDEN_RTOL, case_inputs, compare, golden_cases, npy};
use xla_aot::front::load_spec;
use xla_aot::interp::evaluate;

#[test]
fn interpreter_matches_numpy_golden_vectors() {
    let cases = golden_cases();
    assert!(
        cases.len() > 100,
        "expected the full golden set, found {}",
        cases.len()
    );
    let mut failures = Vec::new();
    let mut worst_overall = (0.0f64, String::new());
    for (name, dir, spec) in &cases {
        let model = load_spec(spec).unwrap_or_else(|e| panic!("{name}: {e}"));
        let inputs = case_inputs(&model.module, dir);
        let outputs = evaluate(&model.module, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (o, actual) in model.module.entry.outputs.iter().zip(&outputs) {
            let expected = npy(&dir.join("expected").join(format!("{}.npy", o.name)));
            match compare(actual, &expected, GOLDEN_ATOL, GOLDEN_RTOL) {
                Ok((r, i)) => {
                    if r > worst_overall.0 {
                        worst_overall = (r, format!("{name}/{} at {i}", o.name));
                    }
                    if r > 1.0 {
                        failures.push(format!(
                            "{name}/{}: element {i} off by {r:.2}x the tolerance",
                            o.name
                        ));
                    }
                }
                Err(e) => failures.push(format!("{name}/{}: {e}", o.name)),
            }
        }
    }
    eprintln!(
        "{} golden cases; worst error {:.3} of the tolerance ({})",
        cases.len(),
        worst_overall.0,
        worst_overall.1
    );
    assert!(
        failures.is_empty(),
        "golden mismatches:\n{}",
        failures.join("\n")
    );
}
