//! CMake integration: `examples/cmake-app` builds and runs for the host and, with the aarch64
//! toolchain file, under qemu; `xla_aot_add_model` recompiles a model exactly when its spec or
//! weights change.

mod common;

use common::{repo, scratch};
use std::path::Path;
use std::process::Command;

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (install cmake as .ci/run does)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

fn configure_and_build(src: &Path, build: &Path, extra: &[String]) -> String {
    run(Command::new("cmake")
        .arg("-S")
        .arg(src)
        .arg("-B")
        .arg(build)
        .arg(format!(
            "-DXLA_AOT_EXECUTABLE={}",
            env!("CARGO_BIN_EXE_xla-aot")
        ))
        .args(extra));
    run(Command::new("cmake").arg("--build").arg(build))
}

#[test]
fn cmake_app_builds_and_runs_on_host_and_aarch64() {
    let dir = scratch("cmake-app");
    let src = repo().join("examples/cmake-app");
    let toolchain = format!(
        "-DCMAKE_TOOLCHAIN_FILE={}",
        repo()
            .join("cmake/toolchains/aarch64-linux-gnu.cmake")
            .display()
    );
    for (name, extra, runner) in [
        ("host", vec![], vec![]),
        (
            "aarch64",
            vec![toolchain],
            vec!["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"],
        ),
    ] {
        let build = dir.join(name);
        configure_and_build(&src, &build, &extra);
        let exe = build.join("cmake-app");
        let out = if runner.is_empty() {
            run(&mut Command::new(&exe))
        } else {
            run(Command::new(runner[0]).args(&runner[1..]).arg(&exe))
        };
        assert!(
            out.contains("simplenet y: 16384 values, min 0.000000 max 2.792193 mean 0.375083"),
            "{name}: {out}"
        );
        assert!(out.contains("mlp: class 2"), "{name}: {out}");
        // MULTI_ISA: under qemu-aarch64's default CPU (`max`, with dotprod) the dotprod variant.
        let want = if name == "aarch64" {
            "mlp: ran the dotprod variant"
        } else {
            "mlp: ran the "
        };
        assert!(out.contains(want), "{name}: {out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn models_recompile_exactly_when_their_inputs_change() {
    let dir = scratch("cmake-deps");
    let ex = repo().join("examples/simplenet");
    for f in ["model.yaml", "weights.safetensors"] {
        std::fs::copy(ex.join(f), dir.join(f)).unwrap();
    }
    std::fs::write(
        dir.join("main.c"),
        "#include \"simplenet.h\"\nint main(void) { return 0; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("CMakeLists.txt"),
        format!(
            "cmake_minimum_required(VERSION 3.16)\nproject(deps LANGUAGES C)\ninclude({}/cmake/xla_aot.cmake)\nxla_aot_add_model(net SPEC model.yaml XLA_TARGET x86_64-avx2)\nadd_executable(app main.c)\ntarget_link_libraries(app PRIVATE net)\n",
            repo().display()
        ),
    )
    .unwrap();
    let build = dir.join("build");
    let compiles = |log: &str| log.matches("xla-aot: compiling simplenet").count();
    assert_eq!(compiles(&configure_and_build(&dir, &build, &[])), 1);
    // Nothing changed, or an unrelated file changed: no compilation.
    assert_eq!(
        compiles(&run(Command::new("cmake").arg("--build").arg(&build))),
        0
    );
    std::fs::write(dir.join("notes.txt"), "unrelated").unwrap();
    assert_eq!(
        compiles(&run(Command::new("cmake").arg("--build").arg(&build))),
        0
    );
    // A weight file changed: exactly one compilation.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let w = dir.join("weights.safetensors");
    let mut bytes = std::fs::read(&w).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&w, bytes).unwrap();
    assert_eq!(
        compiles(&run(Command::new("cmake").arg("--build").arg(&build))),
        1
    );
    assert_eq!(
        compiles(&run(Command::new("cmake").arg("--build").arg(&build))),
        0
    );
    let _ = std::fs::remove_dir_all(&dir);
}
