//! `examples/c-app`: the Makefile compiles simplenet with xla-aot, links it with the C compiler
//! alone and runs it, natively and for aarch64 under qemu; the outputs equal the golden ones.

mod common;

use common::{check_close, npy, repo, scratch};
use std::process::Command;
use xla_aot::ir::{Literal, LiteralData};

fn make(extra: &[&str], build: &std::path::Path) -> String {
    let out = Command::new("make")
        .arg("-C")
        .arg(repo().join("examples/c-app"))
        .arg(format!("XLA_AOT={}", env!("CARGO_BIN_EXE_xla-aot")))
        .arg(format!("BUILD={}", build.display()))
        .args(extra)
        .output()
        .expect("make runs");
    assert!(
        out.status.success(),
        "make {extra:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn c_app_runs_natively_and_under_qemu_with_golden_results() {
    let golden = repo().join("examples/simplenet/golden");
    let x = npy(&golden.join("inputs/x.npy"));
    let expected = npy(&golden.join("expected/y.npy"));
    for (name, extra) in [
        ("host", vec![]),
        (
            "aarch64",
            vec![
                "TARGET=aarch64-neon",
                "APP_CC=aarch64-linux-gnu-gcc",
                "RUN=qemu-aarch64 -L /usr/aarch64-linux-gnu",
            ],
        ),
    ] {
        let dir = scratch(&format!("c-app-{name}"));
        let build = dir.join("build");
        // Demo mode: prints a summary.
        let stdout = make(&extra, &build);
        assert!(
            stdout.contains("simplenet: y[1,16,32,32]") && stdout.contains("status 0"),
            "{name}: {stdout}"
        );
        // File mode: golden input in, output compared with the golden output.
        let (xin, yout) = (dir.join("x.bin"), dir.join("y.bin"));
        std::fs::write(&xin, x.bytes().unwrap()).unwrap();
        let mut args = extra.clone();
        let a = format!("ARGS={} {}", xin.display(), yout.display());
        args.push(&a);
        make(&args, &build);
        let y = Literal {
            dtype: expected.dtype,
            dims: expected.dims.clone(),
            data: LiteralData::Dense(std::fs::read(&yout).unwrap().into()),
        };
        if let Err(msg) = check_close(&y, &expected) {
            panic!("{name}: output differs from the golden one: {msg}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
