//! Text tests of the passes, in the style of Cranelift's filetests and XLA's HLO FileCheck tests.
//!
//! Each `xla-aot/filetests/<dir>/<case>.hlo` holds a `// RUN: pass, pass...` line (or
//! `// RUN: pipeline` for the default pipeline), a comment saying what it shows, the input module,
//! and after a `// EXPECTED` line the exact module the passes must produce (run to a fixed point and
//! verified). Regenerate the expectations with `XLA_AOT_BLESS=1 cargo test --test filetests` and
//! review the diff.

use std::path::{Path, PathBuf};
use xla_aot::ir::{parse_module, print_module, verify};
use xla_aot::passes::Pipeline;

const EXPECTED: &str = "// EXPECTED\n";

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
        pipeline
            .run(&mut m, &mut |_, _, _| {})
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
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
