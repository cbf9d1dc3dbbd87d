//! Malformed specs: each `tests/malformed/<case>.yaml` must fail with exit code 1 and exactly the
//! message in `<case>.stderr` (file:line:column, what was found, what was expected, a hint).
//! Regenerate the expected messages with `XLA_AOT_BLESS=1 cargo test --test malformed` and review
//! the diff.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn malformed_specs_fail_with_their_messages() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/malformed");
    let bless = std::env::var_os("XLA_AOT_BLESS").is_some();
    let mut cases: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 25,
        "at least 25 malformed specs, found {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for case in &cases {
        let out = Command::new(env!("CARGO_BIN_EXE_xla-aot"))
            .args(["inspect", case])
            .current_dir(&dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{case} panicked:\n{stderr}");
        if out.status.code() != Some(1) || !out.stdout.is_empty() {
            failures.push(format!(
                "{case}: exit {:?}, stdout {} bytes\n{stderr}",
                out.status.code(),
                out.stdout.len()
            ));
            continue;
        }
        let golden = dir.join(case.replace(".yaml", ".stderr"));
        if bless {
            std::fs::write(&golden, &stderr).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_default();
        if expected != stderr {
            failures.push(format!(
                "{case}: message differs\n--- expected\n{expected}--- actual\n{stderr}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
