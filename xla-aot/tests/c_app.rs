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

/// Compiles `main.c` in `dir` against the headers there (and runtime-min's) with the strictest
/// flags an app may use, links `lib<model>.a` and runs it; returns its stdout.
fn strict_c(dir: &std::path::Path, model: &str) -> String {
    let exe = dir.join("app");
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(dir)
        .arg("-I")
        .arg(repo().join("runtime-min/include"))
        .arg(dir.join("main.c"))
        .arg(dir.join(format!("lib{model}.a")))
        .args(["-lm", "-o"])
        .arg(&exe)
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "{model}.h does not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success(), "{model}: {run:?}");
    String::from_utf8_lossy(&run.stdout).into_owned()
}

fn compile_to(model: &std::path::Path, dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xla-aot"))
        .arg("compile")
        .arg(model)
        .args(["--target", "host", "--out-dir"])
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn headers_of_colliding_names_compile_with_strict_c11() {
    let dir = scratch("c-names");
    // `a.b`/`a_b` and `int`/`int_` collide as parameters after sanitising, `x`/`X` and `y`/`Y`
    // as macros (M_INPUT_X_SHAPE); the later of each takes a suffix, listed in the header.
    let spec = dir.join("m.yaml");
    std::fs::write(
        &spec,
        "name: m\ninputs:\n\
         \x20 - {name: a.b, dtype: f32, shape: [4]}\n  - {name: a_b, dtype: f32, shape: [4]}\n\
         \x20 - {name: int, dtype: f32, shape: [4]}\n  - {name: int_, dtype: f32, shape: [4]}\n\
         \x20 - {name: x, dtype: f32, shape: [4]}\n  - {name: X, dtype: f32, shape: [4]}\n\
         outputs: [y, Y]\nops:\n\
         \x20 - {name: s1, op: mul, inputs: [a.b, a_b]}\n\
         \x20 - {name: s2, op: sub, inputs: [int, int_]}\n\
         \x20 - {name: s3, op: sub, inputs: [x, X]}\n\
         \x20 - {name: s4, op: add, inputs: [s1, s2]}\n\
         \x20 - {name: y, op: add, inputs: [s4, s3]}\n\
         \x20 - {name: Y, op: relu, inputs: [X]}\n",
    )
    .unwrap();
    let r = compile_to(&spec, &dir);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let header = std::fs::read_to_string(dir.join("m.h")).unwrap();
    assert!(
        header.contains("input `X` is `X_2` (`X` collides with input `x`)")
            && header.contains("input `a_b` is `a_b_2` (`a_b` collides with input `a.b`)"),
        "{header}"
    );
    std::fs::write(
        dir.join("main.c"),
        r#"#include <stdint.h>
#include <stdio.h>
#include "m.h"
#include "xla_aot_runtime.h"

static _Alignas(64) unsigned char arena[M_ARENA_SIZE + 1];

int main(void) {
    float ab[M_INPUT_A_B_SIZE] = {1, 2, 3, 4}, ab2[M_INPUT_A_B_2_SIZE] = {2, 2, 2, 2};
    float i1[M_INPUT_INT__SIZE] = {10, 10, 10, 10}, i2[M_INPUT_INT__2_SIZE] = {1, 2, 3, 4};
    float x[M_INPUT_X_SIZE] = {5, 5, 5, 5}, x2[M_INPUT_X_2_SIZE] = {-1, 1, -1, 1};
    float y[M_OUTPUT_Y_SIZE], y2[M_OUTPUT_Y_2_SIZE];
    /* Misuse is a status, and nothing is written: an output on an input, on another output. */
    int on_input = m_run(arena, ab, ab2, i1, i2, x, x2, ab2, y2);
    int on_output = m_run(arena, ab, ab2, i1, i2, x, x2, y2 + 1, y2);
    int s = m_run(arena, ab, ab2, i1, i2, x, x2, y, y2);
    printf("%d %d %g %d %g %g %g %g %g %g\n", on_input == XLA_AOT_STATUS_OVERLAP, on_output, ab2[0],
           s, y[0], y[1], y[2], y[3], y2[0], y2[1]);
    return s != XLA_AOT_STATUS_OK;
}
"#,
    )
    .unwrap();
    // y = a.b * a_b + (int - int_) + (x - X); Y = relu(X).
    assert_eq!(strict_c(&dir, "m"), "1 -6 2 0 17 16 19 18 0 1\n");

    // Many inputs and outputs: the overlap check loops over a table instead of straight-line
    // code (over 64 pairs); it must find the same overlaps.
    let many = dir.join("many");
    std::fs::create_dir_all(&many).unwrap();
    let n = 12;
    let mut spec = String::from("name: many\ninputs:\n");
    for i in 0..n {
        spec += &format!("  - {{name: x{i}, dtype: f32, shape: [3]}}\n");
    }
    let outs: Vec<String> = (0..n).map(|i| format!("y{i}")).collect();
    spec += &format!("outputs: [{}]\nops:\n", outs.join(", "));
    for i in 0..n {
        spec += &format!("  - {{name: y{i}, op: relu, inputs: [x{i}]}}\n");
    }
    std::fs::write(many.join("many.yaml"), spec).unwrap();
    let r = compile_to(&many.join("many.yaml"), &many);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    std::fs::write(
        many.join("main.c"),
        r#"#include <stdint.h>
#include <stdio.h>
#include "many.h"

static _Alignas(64) unsigned char arena[MANY_ARENA_SIZE + 1];
static float in[MANY_NUM_INPUTS][3], out[MANY_NUM_OUTPUTS][3];

static int run(void) {
    const void *ins[MANY_NUM_INPUTS];
    void *outs[MANY_NUM_OUTPUTS];
    for (int i = 0; i < MANY_NUM_INPUTS; i++) ins[i] = in[i];
    for (int i = 0; i < MANY_NUM_OUTPUTS; i++) outs[i] = out[i];
    return many_run_ptrs(arena, ins, outs);
}

int main(void) {
    for (int i = 0; i < MANY_NUM_INPUTS; i++) for (int j = 0; j < 3; j++) in[i][j] = (float)(i - j);
    const void *ins[MANY_NUM_INPUTS];
    void *outs[MANY_NUM_OUTPUTS];
    for (int i = 0; i < MANY_NUM_INPUTS; i++) ins[i] = in[i];
    for (int i = 0; i < MANY_NUM_OUTPUTS; i++) outs[i] = out[i];
    outs[11] = in[5];
    int a = many_run_ptrs(arena, ins, outs);
    outs[11] = out[2];
    int b = many_run_ptrs(arena, ins, outs);
    outs[11] = out[11];
    outs[0] = (char *)in[11] + 11;
    int c = many_run_ptrs(arena, ins, outs);
    /* Adjacent is not overlapping: input 0 and output 0 share one array, end to start. */
    static float adj[6] = {-1, 2, -3, 0, 0, 0};
    ins[0] = adj;
    outs[0] = adj + 3;
    int d = many_run_ptrs(arena, ins, outs) == XLA_AOT_STATUS_OK && adj[4] == 2.0f && adj[5] == 0.0f;
    ins[0] = in[0];
    int s = run();
    printf("%d %d %d %d %d %g %g\n", a, b, c, d, s, out[11][0], out[1][1]);
    return s;
}
"#,
    )
    .unwrap();
    assert_eq!(strict_c(&many, "many"), "-6 -6 -6 1 0 11 0\n");

    // Names of files given directly that would shadow a standard header or the runtime's take
    // a deterministic rename; a spec that asks for one is an error.
    let hlo = "HloModule h\n\nENTRY %main {\n  %x = f32[2]{0} parameter(0)\n  \
               ROOT %y = f32[2]{0} negate(%x)\n}\n";
    for (file, model) in [
        ("stdint.hlo.txt", "stdint_model"),
        ("xla_aot_runtime.hlo.txt", "_xla_aot_runtime"),
    ] {
        let d = dir.join(model);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(file), hlo).unwrap();
        let r = compile_to(&d.join(file), &d);
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        std::fs::write(
            d.join("main.c"),
            format!(
                "#include <stdint.h>\n#include <stdio.h>\n#include \"{model}.h\"\n#include \"xla_aot_runtime.h\"\n\n\
                 static _Alignas(64) unsigned char arena[{up}_ARENA_SIZE + 1];\n\n\
                 int main(void) {{\n    float x[2] = {{1, -2}}, y[2];\n    uint32_t n = 2;\n    \
                 int s = {model}_run(arena, x, y);\n    printf(\"%d %g %g %u\\n\", s, y[0], y[1], n);\n    \
                 return s != XLA_AOT_STATUS_OK;\n}}\n",
                up = model.to_ascii_uppercase()
            ),
        )
        .unwrap();
        assert_eq!(strict_c(&d, model), "0 -1 2 2\n", "{model}");
    }
    for (name, why) in [
        ("stdint", "would shadow the C standard header <stdint.h>"),
        ("xla_aot_runtime", "belong to the runtime"),
        ("int", "is a C keyword"),
    ] {
        let p = dir.join(format!("{name}.yaml"));
        std::fs::write(
            &p,
            format!("name: {name}\ninputs:\n  - {{name: x, dtype: f32, shape: [2]}}\noutputs: [y]\nops:\n  - {{name: y, op: relu, inputs: [x]}}\n"),
        )
        .unwrap();
        let r = compile_to(&p, &dir.join("refused"));
        let stderr = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(why), "{name}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_checks_build_refuses_an_arena_in_use() {
    let dir = scratch("c-checks");
    let spec = dir.join("chk.yaml");
    std::fs::write(
        &spec,
        "name: chk\ninputs:\n  - {name: x, dtype: f32, shape: [4]}\noutputs: [y]\nops:\n  \
         - {name: t, op: tanh, inputs: [x]}\n  - {name: y, op: relu, inputs: [t]}\n",
    )
    .unwrap();
    let r = Command::new(env!("CARGO_BIN_EXE_xla-aot"))
        .arg("compile")
        .arg(&spec)
        .args(["--target", "host", "--checks", "--out-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    // A profiler hook re-enters the model with the arena it is running on: the nested call is
    // refused, the outer one completes, and the arena is free again afterwards.
    std::fs::write(
        dir.join("main.c"),
        r#"#include <stdint.h>
#include <stdio.h>
#include "chk.h"
#include "xla_aot_runtime.h"

static _Alignas(64) unsigned char arena[CHK_ARENA_SIZE];
static float x[4] = {-1, 0, 1, 2}, y[4], y2[4];
static int nested = 1;

static void hook(void *ctx, uint32_t kernel, uint32_t phase) {
    (void)ctx;
    if (kernel == 0 && phase == 0 && nested == 1) nested = chk_run(arena, x, y2);
}

int main(void) {
    chk_set_profiler(hook, NULL);
    int outer = chk_run(arena, x, y);
    chk_set_profiler(NULL, NULL);
    int again = chk_run(arena, x, y);
    printf("%d %d %d %.4f\n", nested == XLA_AOT_STATUS_ARENA_IN_USE, outer, again, y[3]);
    return 0;
}
"#,
    )
    .unwrap();
    assert_eq!(strict_c(&dir, "chk"), "1 0 0 0.9640\n");
    let _ = std::fs::remove_dir_all(&dir);
}
