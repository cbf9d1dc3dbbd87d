//! ONNX models of the patterns real exports use (a detector head with Resize, Concat, Split and
//! Sigmoid and dynamic batch/height/width; a CNN + bidirectional LSTM text reader with a dynamic
//! width; an `If` on a scalar int64 input), fixed at build time with the flags their
//! `flags.txt` lists (`--input-shape`, `--dim`, `--freeze`) and compared with onnxruntime:
//! max |a - e| <= [`REL_OF_MAX`] × max |e|, through the library (`front::load_spec_with`,
//! `compile::run_host`), a `graph:` spec with the same settings, and the CLI.
//!
//! The models come from `scripts/onnx_patterns.py`, written to `$XLA_AOT_ONNX_PATTERNS_DIR`
//! (`scripts/test.sh` sets it); without the variable the test says it is skipped.

mod common;

use std::path::{Path, PathBuf};
use xla_aot::front::inputs::{
    Frozen, InputOverrides, InputRef, parse_dim, parse_freeze, parse_input_shape,
};
use xla_aot::ir::Literal;

/// The issue's bound, as for the light models.
const REL_OF_MAX: f64 = 1e-4;

const MODELS: &[&str] = &["detector", "crnn", "if_rate"];

fn data_dir() -> Option<PathBuf> {
    let Some(d) = std::env::var_os("XLA_AOT_ONNX_PATTERNS_DIR") else {
        eprintln!(
            "onnx pattern tests skipped: XLA_AOT_ONNX_PATTERNS_DIR is not set (run scripts/onnx_patterns.py --out DIR and set it, or use scripts/test.sh)"
        );
        return None;
    };
    Some(PathBuf::from(d))
}

/// The flags of `flags.txt` as overrides, and as CLI arguments.
fn flags(dir: &Path) -> (InputOverrides, Vec<String>) {
    let text = std::fs::read_to_string(dir.join("flags.txt")).unwrap();
    let args: Vec<String> = text.lines().map(str::to_string).collect();
    let mut o = InputOverrides::default();
    for pair in args.chunks(2) {
        match pair[0].as_str() {
            "--input-shape" => o.shapes.push(parse_input_shape(&pair[1]).unwrap()),
            "--dim" => o.dims.push(parse_dim(&pair[1]).unwrap()),
            "--freeze" => o.freeze.push(parse_freeze(&pair[1]).unwrap()),
            f => panic!("unknown flag {f}"),
        }
    }
    (o, args)
}

fn npys(dir: &Path, stem: &str) -> Vec<Literal> {
    (0..)
        .map(|j| dir.join(format!("{stem}_{j}.npy")))
        .take_while(|p| p.exists())
        .map(|p| common::npy(&p))
        .collect()
}

fn check(name: &str, got: &[Literal], want: &[Literal]) {
    assert_eq!(got.len(), want.len(), "{name}: output count");
    for (g, w) in got.iter().zip(want) {
        assert_eq!(g.dims, w.dims, "{name}: output dims");
        let (g, w) = (g.to_f64_vec(), w.to_f64_vec());
        let scale = w.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let worst = g
            .iter()
            .zip(&w)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= REL_OF_MAX * scale,
            "{name}: max error {worst:.3e} over {REL_OF_MAX} x max |y| {scale:.3e}"
        );
        eprintln!("ok    {name}: max error {:.2e} of max |y|", worst / scale);
    }
}

#[test]
fn patterns_match_onnxruntime_with_dims_and_inputs_fixed_at_build_time() {
    let Some(root) = data_dir() else { return };
    for name in MODELS {
        let dir = root.join(name);
        let model = dir.join(format!("{name}.onnx"));
        let (overrides, args) = flags(&dir);
        let inputs = npys(&dir, "input");
        let want = npys(&dir, "output");

        // The library path.
        let m = xla_aot::front::load_spec_with(&model, &overrides)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .module;
        assert_eq!(
            m.entry.parameters().len(),
            inputs.len(),
            "{name}: run-time inputs"
        );
        let got = xla_aot::compile::run_host(&m, &inputs).unwrap();
        check(name, &got, &want);

        // The same settings in a `graph:` spec.
        let mut spec = format!("name: {name}_spec\ngraph:\n  onnx: {name}.onnx\n");
        let list = |v: Vec<String>| v.join(", ");
        if !overrides.shapes.is_empty() {
            spec += &format!(
                "  input_shapes: {{{}}}\n",
                list(
                    overrides
                        .shapes
                        .iter()
                        .map(|(r, d)| format!("{}: {d:?}", name_of(r)))
                        .collect()
                )
            );
        }
        if !overrides.dims.is_empty() {
            spec += &format!(
                "  dims: {{{}}}\n",
                list(
                    overrides
                        .dims
                        .iter()
                        .map(|(s, n)| format!("{s}: {n}"))
                        .collect()
                )
            );
        }
        if !overrides.freeze.is_empty() {
            spec += &format!(
                "  freeze: {{{}}}\n",
                list(
                    overrides
                        .freeze
                        .iter()
                        .map(|(r, v)| match v {
                            Frozen::Values(x) => format!("{}: {x:?}", name_of(r)),
                            other => panic!("{name}: {other:?} in flags.txt"),
                        })
                        .collect()
                )
            );
        }
        let spec_path = dir.join("model.yaml");
        std::fs::write(&spec_path, &spec).unwrap();
        let m = xla_aot::front::load_spec(&spec_path)
            .unwrap_or_else(|e| panic!("{name}: {e}\n{spec}"))
            .module;
        check(
            &format!("{name} (graph: spec)"),
            &xla_aot::compile::run_host(&m, &inputs).unwrap(),
            &want,
        );

        // The CLI compiles it for a target with the same flags.
        let out = common::scratch(&format!("patterns-{name}"));
        let r = std::process::Command::new(env!("CARGO_BIN_EXE_xla-aot"))
            .arg("compile")
            .arg(&model)
            .args(["--target", "x86_64-avx2", "--out-dir"])
            .arg(&out)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(
            r.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(out.join(format!("lib{name}.a")).is_file());
        // Without the flags, the error names what to fix.
        let r = std::process::Command::new(env!("CARGO_BIN_EXE_xla-aot"))
            .args(["inspect"])
            .arg(&model)
            .output()
            .unwrap();
        assert_eq!(r.status.code(), Some(1), "{name} without flags");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains("--"), "{name}: the error names a flag: {err}");
    }
}

fn name_of(r: &InputRef) -> String {
    match r {
        InputRef::Name(n) => n.clone(),
        InputRef::Index(i) => i.to_string(),
    }
}

/// CMake's `xla_aot_add_model(... INPUT_SHAPES ... FREEZE ...)`: the detector with its input shape
/// fixed and the `If` model with `rate` frozen build into a C program that runs the latter and
/// checks onnxruntime's output.
#[test]
fn cmake_fixes_inputs_at_build_time() {
    let Some(root) = data_dir() else { return };
    let dir = common::scratch("patterns-cmake");
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let x = common::npy(&root.join("if_rate/input_0.npy"))
        .to_f32_vec()
        .unwrap();
    let y = common::npy(&root.join("if_rate/output_0.npy"))
        .to_f32_vec()
        .unwrap();
    let list = |v: &[f32]| {
        v.iter()
            .map(|f| format!("{f:e}f"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    std::fs::write(
        src.join("main.c"),
        format!(
            r#"#include <math.h>
#include <stdio.h>
#include "detector.h"
#include "if_rate.h"
_Static_assert(DETECTOR_NUM_INPUTS == 1, "one input");
_Static_assert(IF_RATE_NUM_INPUTS == 1, "rate is frozen");
static const unsigned detector_shape[] = DETECTOR_INPUT_IMAGES_SHAPE;
static _Alignas(64) unsigned char arena[IF_RATE_ARENA_SIZE + 64];
int main(void) {{
    static const float x[16] = {{{x}}};
    static const float want[16] = {{{y}}};
    float y[16];
    if (if_rate_run(arena, x, y) != 0) return 2;
    for (int i = 0; i < 16; i++)
        if (fabsf(y[i] - want[i]) > 1e-5f * (1.0f + fabsf(want[i]))) return 3;
    printf("ok %u %u %u %u\n", detector_shape[0], detector_shape[1], detector_shape[2], detector_shape[3]);
    return 0;
}}
"#,
            x = list(&x),
            y = list(&y)
        ),
    )
    .unwrap();
    let cmake = common::repo().join("cmake/xla_aot.cmake");
    std::fs::write(
        src.join("CMakeLists.txt"),
        format!(
            "cmake_minimum_required(VERSION 3.16)\nproject(patterns C)\ninclude({})\n\
             xla_aot_add_model(detector SPEC {} XLA_TARGET x86_64-avx2 INPUT_SHAPES images=1,3,64,96)\n\
             xla_aot_add_model(if_rate SPEC {} XLA_TARGET x86_64-avx2 FREEZE rate=2)\n\
             add_executable(app main.c)\ntarget_link_libraries(app PRIVATE detector if_rate m)\n",
            cmake.display(),
            root.join("detector/detector.onnx").display(),
            root.join("if_rate/if_rate.onnx").display()
        ),
    )
    .unwrap();
    let build = dir.join("build");
    let run = |cmd: &mut std::process::Command| {
        let out = cmd.output().expect("cmake is installed by scripts/test.sh");
        assert!(
            out.status.success(),
            "{cmd:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(std::process::Command::new("cmake")
        .arg("-S")
        .arg(&src)
        .arg("-B")
        .arg(&build)
        .arg(format!(
            "-DXLA_AOT_EXECUTABLE={}",
            env!("CARGO_BIN_EXE_xla-aot")
        )));
    run(std::process::Command::new("cmake")
        .arg("--build")
        .arg(&build));
    if !xla_aot::target::Target::resolve("x86_64-avx2")
        .unwrap()
        .runs_here()
    {
        eprintln!("cmake pattern app built; not run (no AVX2 here)");
        return;
    }
    let out = run(&mut std::process::Command::new(build.join("app")));
    assert_eq!(out.trim(), "ok 1 3 64 96");
    let _ = std::fs::remove_dir_all(&dir);
}
