//! ONNX models of the patterns real exports use (a detector head with Resize, Concat, Split and
//! Sigmoid and dynamic batch/height/width; a CNN + bidirectional LSTM text reader with a dynamic
//! width; an `If` on a scalar int64 input), fixed at build time with the flags their
//! `flags.txt` lists (`--input-shape`, `--dim`, `--freeze`) and compared with onnxruntime:
//! max |a - e| <= [`REL_OF_MAX`] × max |e|, through the library (`front::load_spec_with`,
//! `compile::run_host`), a `graph:` spec with the same settings, and the CLI.
//!
//! Models whose inputs and outputs keep their ONNX element types at the C API (int64 token ids
//! and an ArgMax, a uint8 image and a bool mask, a float16 export, bfloat16 weights; `ir/api.rs`)
//! run through the library and compiled into a C program through the header, for x86-64 and for
//! aarch64 under qemu, and match onnxruntime in type and value.
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
    let args: Vec<String> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
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

/// Models whose inputs and outputs keep their ONNX element types at the C API.
const TYPED_MODELS: &[&str] = &["tokens", "image_u8", "half", "bf16_weights"];

/// float16 outputs: onnxruntime rounds inside the graph (float16 MatMul and Add), the compiler
/// computes in f32 and rounds once at the output, so they may differ by an ulp of float16 (2^-10
/// relative) of the largest term.
const F16_REL_OF_MAX: f64 = 2e-3;

/// Compares outputs of C API dtypes: the same dtype and dims as onnxruntime's, integers and bools
/// exactly, floats within the bound of their type.
fn check_typed(name: &str, got: &[Literal], want: &[Literal]) {
    use xla_aot::ir::DType;
    assert_eq!(got.len(), want.len(), "{name}: output count");
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            (g.dtype, &g.dims),
            (w.dtype, &w.dims),
            "{name}: output {j} type"
        );
        let (a, e) = (g.to_f64_vec(), w.to_f64_vec());
        let scale = e.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let worst = a
            .iter()
            .zip(&e)
            .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
        let bound = match g.dtype {
            DType::F32 => REL_OF_MAX * scale,
            DType::F16 | DType::BF16 => F16_REL_OF_MAX * scale,
            _ => 0.0,
        };
        assert!(
            worst <= bound,
            "{name}: output {j} ({}): max error {worst:.3e} over {bound:.3e}\n got {a:?}\nwant {e:?}",
            g.dtype
        );
        eprintln!(
            "ok    {name}: output {j} {}{:?}: max error {worst:.2e} (max |y| {scale:.2e})",
            g.dtype, g.dims
        );
    }
}

/// The C element type of a dtype as the header declares it, and how main.c prints one value.
fn c_elem(d: xla_aot::ir::DType) -> (&'static str, &'static str) {
    use xla_aot::ir::DType;
    match d {
        DType::F32 => ("float", "printf(\"%.9g\\n\", (double)v[i]);"),
        DType::I64 => ("int64_t", "printf(\"%lld\\n\", (long long)v[i]);"),
        DType::I32 => ("int32_t", "printf(\"%d\\n\", (int)v[i]);"),
        DType::F16 | DType::BF16 => ("uint16_t", "printf(\"%u\\n\", (unsigned)v[i]);"),
        _ => ("uint8_t", "printf(\"%u\\n\", (unsigned)v[i]);"),
    }
}

/// A C program that runs `name` through its header on `inputs` and prints every output value (one
/// a line; float16 as its bits); with an int64 input, it first checks that a value outside the
/// i32 range is `XLA_AOT_STATUS_BAD_ARGUMENT`.
fn typed_main(name: &str, m: &xla_aot::ir::Module, inputs: &[Literal]) -> String {
    use xla_aot::ir::DType;
    let upper = name.to_ascii_uppercase();
    let mut s = format!(
        "#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n#include \"{name}.h\"\nstatic _Alignas(64) unsigned char arena[{upper}_ARENA_SIZE + 1];\n"
    );
    let mut args = Vec::new();
    for (k, lit) in inputs.iter().enumerate() {
        let (t, _) = c_elem(lit.dtype);
        let vals: Vec<String> = match lit.dtype {
            DType::F32 => lit
                .to_f32_vec()
                .unwrap()
                .iter()
                .map(|v| format!("{v:e}f"))
                .collect(),
            DType::F16 | DType::BF16 => lit
                .bytes()
                .unwrap()
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]).to_string())
                .collect(),
            DType::I64 => lit
                .to_f64_vec()
                .iter()
                .map(|v| format!("{}LL", *v as i64))
                .collect(),
            _ => lit.to_f64_vec().iter().map(|v| v.to_string()).collect(),
        };
        s += &format!("static {t} in{k}[] = {{{}}};\n", vals.join(", "));
        args.push(format!("in{k}"));
    }
    let outs = m.entry.outputs.len();
    for k in 0..outs {
        let n = m.entry.inst(m.entry.outputs[k].value).shape.element_count();
        let (t, _) = c_elem(m.output_dtype(k));
        s += &format!("static {t} out{k}[{n}];\n");
        args.push(format!("out{k}"));
    }
    s += "int main(void) {\n";
    if let Some(k) = inputs.iter().position(|l| l.dtype == DType::I64) {
        s += &format!(
            "    int64_t keep = in{k}[0];\n    in{k}[0] = (int64_t)1 << 40;\n    if ({name}_run(arena, {a}) != XLA_AOT_STATUS_BAD_ARGUMENT) return 4;\n    in{k}[0] = keep;\n",
            a = args.join(", ")
        );
    }
    s += &format!(
        "    int st = {name}_run(arena, {});\n    if (st != XLA_AOT_STATUS_OK) {{ printf(\"status %d\\n\", st); return 2; }}\n",
        args.join(", ")
    );
    for k in 0..outs {
        let (_, print) = c_elem(m.output_dtype(k));
        let n = m.entry.inst(m.entry.outputs[k].value).shape.element_count();
        s += &format!(
            "    {{ const void *p = out{k}; const __typeof__(out{k}[0]) *v = p; for (int i = 0; i < {n}; i++) {print} }}\n"
        );
    }
    s += "    return 0;\n}\n";
    s
}

/// The values main.c printed, as literals of the outputs' C API dtypes.
fn parse_outputs(m: &xla_aot::ir::Module, text: &str) -> Vec<Literal> {
    use xla_aot::ir::{DType, LiteralData};
    let mut lines = text.lines();
    (0..m.entry.outputs.len())
        .map(|k| {
            let shape = &m.entry.inst(m.entry.outputs[k].value).shape;
            let d = m.output_dtype(k);
            let mut bytes = Vec::new();
            for _ in 0..shape.element_count() {
                let t = lines.next().expect("one value a line");
                match d {
                    DType::F32 => bytes.extend(t.parse::<f32>().unwrap().to_le_bytes()),
                    DType::I64 => bytes.extend(t.parse::<i64>().unwrap().to_le_bytes()),
                    DType::I32 => bytes.extend(t.parse::<i32>().unwrap().to_le_bytes()),
                    DType::F16 | DType::BF16 => {
                        bytes.extend(t.parse::<u16>().unwrap().to_le_bytes())
                    }
                    _ => bytes.push(t.parse::<u8>().unwrap()),
                }
            }
            Literal {
                dtype: d,
                dims: shape.dims.clone(),
                data: LiteralData::Dense(bytes.into()),
            }
        })
        .collect()
}

#[test]
fn typed_inputs_and_outputs_match_onnxruntime_through_the_c_api() {
    let Some(root) = data_dir() else { return };
    for name in TYPED_MODELS {
        let dir = root.join(name);
        let model = dir.join(format!("{name}.onnx"));
        assert!(
            model.is_file(),
            "{} is missing: regenerate the directory with scripts/onnx_patterns.py --out {}",
            model.display(),
            root.display()
        );
        let inputs = npys(&dir, "input");
        let want = npys(&dir, "output");
        let m = xla_aot::front::load_spec_with(&model, &InputOverrides::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .module;
        for (k, lit) in inputs.iter().enumerate() {
            assert_eq!(m.input_dtype(k), lit.dtype, "{name}: input {k} C API dtype");
        }
        check_typed(
            name,
            &xla_aot::compile::run_host(&m, &inputs).unwrap(),
            &want,
        );

        // Compiled by the CLI, through the header, on x86-64 and on aarch64 under qemu.
        for target in ["x86_64", "aarch64-neon"] {
            let t = xla_aot::target::Target::resolve(target).unwrap();
            let out = common::scratch(&format!("typed-{name}-{target}"));
            let r = std::process::Command::new(env!("CARGO_BIN_EXE_xla-aot"))
                .arg("compile")
                .arg(&model)
                .args(["--target", target, "--out-dir"])
                .arg(&out)
                .output()
                .unwrap();
            assert_eq!(
                r.status.code(),
                Some(0),
                "{name}: {}",
                String::from_utf8_lossy(&r.stderr)
            );
            let main = out.join("main.c");
            std::fs::write(&main, typed_main(name, &m, &inputs)).unwrap();
            let (cc, runner) = common::toolchain(&t);
            let exe = out.join("app");
            let c = std::process::Command::new(&cc)
                .args(["-O1", "-std=gnu11", "-Wall", "-Werror", "-I"])
                .arg(&out)
                .arg(&main)
                .arg(out.join(format!("lib{name}.a")))
                .arg("-o")
                .arg(&exe)
                .output()
                .unwrap();
            assert!(
                c.status.success(),
                "{name} ({target}): {}",
                String::from_utf8_lossy(&c.stderr)
            );
            let mut cmd = match runner.split_first() {
                Some((r, rest)) => {
                    let mut c = std::process::Command::new(r);
                    c.args(rest).arg(&exe);
                    c
                }
                None => std::process::Command::new(&exe),
            };
            let r = cmd.output().unwrap();
            assert!(
                r.status.success(),
                "{name} ({target}): {:?} {}",
                r.status,
                String::from_utf8_lossy(&r.stdout)
            );
            let got = parse_outputs(&m, &String::from_utf8_lossy(&r.stdout));
            check_typed(&format!("{name} ({target}, C)"), &got, &want);
            let _ = std::fs::remove_dir_all(&out);
        }
    }
}
