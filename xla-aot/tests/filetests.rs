//! Text tests of the passes, in the style of Cranelift's filetests and XLA's HLO FileCheck tests.
//!
//! Each `xla-aot/filetests/<dir>/<case>.hlo` holds a `// RUN: pass, pass...` line (or
//! `// RUN: pipeline` for the default pipeline), a comment saying what it shows, the input module,
//! and after a `// EXPECTED` line the exact module the passes must produce (run to a fixed point and
//! verified). Regenerate the expectations with `XLA_AOT_BLESS=1 cargo test --test filetests` and
//! review the diff. A `// SAME-VALUES` line also evaluates the input and the rewritten module on
//! seeded f32 inputs with the interpreter and requires bit-identical outputs (for rewrites that
//! change no arithmetic).

use std::path::{Path, PathBuf};
use xla_aot::interp::evaluate;
use xla_aot::ir::{Literal, Module, Op, parse_module, print_module, verify};
use xla_aot::passes::Pipeline;

const EXPECTED: &str = "// EXPECTED\n";

/// Seeded f32 inputs for every parameter of `m` (values in [-3, 4), some negative).
fn seeded_inputs(m: &Module) -> Vec<Literal> {
    let mut params: Vec<(usize, Vec<usize>)> = m
        .entry
        .instructions
        .iter()
        .filter_map(|i| match i.op {
            Op::Parameter { index } => Some((index, i.shape.dims.clone())),
            _ => None,
        })
        .collect();
    params.sort();
    params
        .into_iter()
        .map(|(p, dims)| {
            let n: usize = dims.iter().product();
            let v: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 + p * 31) % 97) as f32 / 13.0 - 3.0)
                .collect();
            Literal::from_f32(dims, &v)
        })
        .collect()
}

fn cases(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            v.extend(cases(&p));
        } else if p.extension().is_some_and(|x| x == "hlo") {
            v.push(p);
        }
    }
    v.sort();
    v
}

#[test]
fn pass_filetests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("filetests");
    let bless = std::env::var_os("XLA_AOT_BLESS").is_some();
    let files = cases(&root);
    assert!(files.len() >= 25, "found only {} filetests", files.len());
    let mut failures = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        let (input, expected) = match text.split_once(EXPECTED) {
            Some((i, e)) => (i.to_string(), Some(e.to_string())),
            None => (text.clone(), None),
        };
        let run = input
            .lines()
            .find_map(|l| l.strip_prefix("// RUN:"))
            .unwrap_or_else(|| panic!("{rel}: no `// RUN:` line"))
            .trim()
            .to_string();
        let pipeline = if run == "pipeline" {
            Pipeline::default_pipeline()
        } else {
            let names: Vec<&str> = run.split(',').map(str::trim).collect();
            Pipeline::of(&names).unwrap_or_else(|| panic!("{rel}: unknown pass in `{run}`"))
        };
        let mut m = parse_module(&input).unwrap_or_else(|e| panic!("{rel}: {e}"));
        verify(&m).unwrap_or_else(|e| panic!("{rel}: input does not verify: {e}"));
        let before = m.clone();
        pipeline
            .run(&mut m, &mut |_, _, _| {})
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        if input.lines().any(|l| l.trim() == "// SAME-VALUES") {
            let inputs = seeded_inputs(&before);
            let (a, b) = (
                evaluate(&before, &inputs).unwrap_or_else(|e| panic!("{rel}: {e}")),
                evaluate(&m, &inputs).unwrap_or_else(|e| panic!("{rel}: {e}")),
            );
            if a != b {
                failures.push(format!("{rel}: the rewritten module computes other values"));
            }
        }
        let got = print_module(&m);
        if bless {
            std::fs::write(f, format!("{input}{EXPECTED}{got}")).unwrap();
        } else if expected.as_deref() != Some(got.as_str()) {
            failures.push(format!(
                "{rel}:\n--- expected\n{}--- got\n{got}",
                expected.unwrap_or_default()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
