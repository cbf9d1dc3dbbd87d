//! The HLO text importer on hand-written modules: names, errors (file, line, what to do), weight
//! bindings, and the CLI taking a `.hlo.txt` file as SPEC. JAX's own output is checked by
//! `jax_import.rs`.

mod common;

use common::{repo, scratch};
use std::path::{Path, PathBuf};
use std::process::Command;
use xla_aot::front::load_spec;
use xla_aot::ir::Literal;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The error text of loading `text` as `model.hlo.txt`.
fn error_of(tag: &str, text: &str) -> String {
    let d = scratch(tag);
    let p = write(&d, "model.hlo.txt", text);
    match load_spec(&p) {
        Ok(_) => panic!("{tag}: imported, expected an error"),
        Err(e) => e.to_string(),
    }
}

const HEAD: &str = "HloModule jit_f\n\nENTRY main.4 {\n  x.1 = f32[2,3]{1,0} parameter(0)\n";

#[test]
fn names_come_from_the_file_stem_and_the_parameters() {
    let d = scratch("names");
    let p = write(
        &d,
        "my-model.hlo.txt",
        &format!(
            "{HEAD}  w.2 = f32[2,3]{{1,0}} parameter(1)\n  a.3 = f32[2,3]{{1,0}} add(x.1, w.2)\n  ROOT t.4 = (f32[2,3]{{1,0}}, f32[2,3]{{1,0}}) tuple(a.3, x.1)\n}}\n"
        ),
    );
    let m = load_spec(&p).unwrap().module;
    assert_eq!(m.name, "my_model");
    let params: Vec<&str> = m
        .entry
        .parameters()
        .iter()
        .map(|&i| m.entry.inst(i).name.as_str())
        .collect();
    assert_eq!(params, ["x", "w"]);
    let outs: Vec<&str> = m.entry.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(outs, ["out_0", "out_1"]);
}

#[test]
fn errors_name_the_line_and_say_what_to_do() {
    let cases: &[(&str, String, &[&str])] = &[
        (
            "opcode",
            format!("{HEAD}  ROOT s.2 = f32[2,3]{{1,0}} cbrt(x.1)\n}}\n"),
            &[
                "opcode `cbrt` is not supported",
                "model.hlo.txt:5:",
                "supported opcodes:",
            ],
        ),
        (
            "elided",
            format!(
                "{HEAD}  c.2 = f32[2,3]{{1,0}} constant({{...}})\n  ROOT a.3 = f32[2,3]{{1,0}} add(x.1, c.2)\n}}\n"
            ),
            &["elided", "model.hlo.txt:5:", "print_large_constants=True"],
        ),
        (
            "truncated",
            HEAD.to_string(),
            &["never closed", "truncated"],
        ),
        (
            "not_hlo",
            "name: m\ninputs: []\n".to_string(),
            &["does not look like XLA HLO text", "model.hlo.txt:1:1"],
        ),
        (
            "f64",
            "HloModule m\nENTRY e {\n  ROOT x.1 = f64[2]{0} parameter(0)\n}\n".to_string(),
            &["element type `f64`", "model.hlo.txt:3:", "float32"],
        ),
        (
            "dynamic_shape",
            "HloModule m\nENTRY e {\n  ROOT x.1 = f32[<=4]{0} parameter(0)\n}\n".to_string(),
            &["static shapes", "model.hlo.txt:3:"],
        ),
        (
            "undefined",
            format!("{HEAD}  ROOT a.2 = f32[2,3]{{1,0}} add(x.1, y.7)\n}}\n"),
            &["operand `y.7` is not defined", "model.hlo.txt:5:"],
        ),
        (
            "attribute",
            format!(
                "{HEAD}  ROOT t.2 = f32[3,2]{{0,1}} transpose(x.1), dimensions={{1,0}}, foo=bar\n}}\n"
            ),
            &[
                "attribute `foo` of `transpose` is not supported",
                "model.hlo.txt:5:",
            ],
        ),
        (
            "shape_mismatch",
            format!("{HEAD}  ROOT t.2 = f32[2,3]{{1,0}} transpose(x.1), dimensions={{1,0}}\n}}\n"),
            &["xla-aot computes f32[3,2] for `t.2` but the file says f32[2,3]"],
        ),
        (
            "reducer",
            format!(
                "r {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] multiply(a, b)\n}}\n\n{HEAD}  c.2 = f32[] constant(1)\n  ROOT p.3 = f32[2]{{0}} reduce(x.1, c.2), dimensions={{1}}, to_apply=r\n}}\n"
            ),
            &["not a single add, maximum or minimum", "model.hlo.txt:12:"],
        ),
        (
            "bitcast",
            format!("{HEAD}  ROOT b.2 = f32[3,2]{{1,0}} bitcast(x.1)\n}}\n"),
            &["opcode `bitcast` is not supported"],
        ),
        (
            "totalorder",
            format!("{HEAD}  ROOT c.2 = pred[2,3]{{1,0}} compare(x.1, x.1), direction=EQ, type=TOTALORDER\n}}\n"),
            &["comparison type `TOTALORDER` is not supported"],
        ),
        (
            "deep_tuple",
            format!("{HEAD}  ROOT t.2 = {}f32[]{} tuple(x.1)\n}}\n", "(".repeat(100_000), ")".repeat(100_000)),
            &["nest deeper than 64"],
        ),
        (
            "huge",
            "HloModule m\nENTRY e {\n  ROOT c = f32[4294967296,4294967296,0]{2,1,0} constant({})\n}\n".to_string(),
            &["more elements than xla-aot supports"],
        ),
        (
            "duplicate_parameter",
            "HloModule m\nENTRY e {\n  x = f32[3]{0} parameter(0)\n  y = f32[3]{0} parameter(0)\n  ROOT a = f32[3]{0} add(x, y)\n}\n".to_string(),
            &[
                "parameter number 0 is used twice: `x` (line 3) already has it",
                "model.hlo.txt:4:",
            ],
        ),
    ];
    for (tag, text, needles) in cases {
        let e = error_of(tag, text);
        for n in *needles {
            assert!(e.contains(n), "{tag}: `{n}` not in:\n{e}");
        }
    }
}

#[test]
fn weights_bind_parameters_by_name_and_unused_weights_are_errors() {
    let d = scratch("bind");
    std::fs::create_dir_all(d.join("w")).unwrap();
    let w = Literal::from_f32(vec![2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    std::fs::write(d.join("w/fc.weight.npy"), xla_aot::ir::npy::write_npy(&w)).unwrap();
    write(
        &d,
        "g.hlo.txt",
        &format!(
            "{HEAD}  fc_weight.2 = f32[2,3]{{1,0}} parameter(1)\n  ROOT a.3 = f32[2,3]{{1,0}} add(x.1, fc_weight.2)\n}}\n"
        ),
    );
    let spec = write(
        &d,
        "m.yaml",
        "name: bound\ngraph: {hlo: g.hlo.txt}\nparams: w\n",
    );
    let m = load_spec(&spec).unwrap().module;
    assert_eq!(m.name, "bound");
    assert_eq!(
        m.entry.parameters().len(),
        1,
        "the weight became a constant"
    );
    let x = Literal::from_f32(vec![2, 3], &[0.5; 6]);
    let y = xla_aot::compile::run_host(&m, &[x]).unwrap();
    assert_eq!(y[0].to_f32_vec().unwrap(), [1.5, 2.5, 3.5, 4.5, 5.5, 6.5]);

    // A weight that binds nothing.
    write(
        &d,
        "h.hlo.txt",
        &format!("{HEAD}  ROOT n.2 = f32[2,3]{{1,0}} negate(x.1)\n}}\n"),
    );
    let spec = write(
        &d,
        "n.yaml",
        "name: unbound\ngraph: {hlo: h.hlo.txt}\nparams: w\n",
    );
    let e = load_spec(&spec).unwrap_err().to_string();
    assert!(e.contains("weight `fc.weight` binds no input"), "{e}");

    // Both graph kinds at once.
    let spec = write(
        &d,
        "b.yaml",
        "name: both\ngraph: {hlo: h.hlo.txt, onnx: m.onnx}\n",
    );
    let e = load_spec(&spec).unwrap_err().to_string();
    assert!(
        e.contains("exactly one of `onnx`, `hlo` and `tflite`") && e.contains("b.yaml:2:"),
        "{e}"
    );
}

#[test]
fn a_select_over_a_compare_is_computed_right_unfused() {
    // Regression: the buffer plan wrote the f32 select over its dying 1-byte pred operand.
    let d = scratch("inplace");
    let p = write(
        &d,
        "m.hlo.txt",
        &format!(
            "{HEAD}  z.2 = f32[] constant(0)\n  b.3 = f32[2,3]{{1,0}} broadcast(z.2), dimensions={{}}\n  c.4 = pred[2,3]{{1,0}} compare(x.1, b.3), direction=GT\n  n.5 = f32[2,3]{{1,0}} negate(x.1)\n  ROOT s.6 = f32[2,3]{{1,0}} select(c.4, x.1, n.5)\n}}\n"
        ),
    );
    let m = load_spec(&p).unwrap().module;
    let x = Literal::from_f32(vec![2, 3], &[1.0, -2.0, 3.0, -4.0, 5.0, -6.0]);
    let y = xla_aot::compile::run_host(&m, &[x]).unwrap();
    assert_eq!(y[0].to_f32_vec().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
}

#[test]
fn the_cli_compiles_and_runs_an_hlo_file_with_inputs_by_position() {
    let case = repo().join("tests/jax/softmax_axis1");
    let out = scratch("cli");
    let bin = env!("CARGO_BIN_EXE_xla-aot");
    let r = Command::new(bin)
        .args(["compile", "--target", "host", "--out-dir"])
        .arg(&out)
        .arg(case.join("model.hlo.txt"))
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let header = std::fs::read_to_string(out.join("model.h")).unwrap();
    assert!(header.contains("int model_run("), "{header}");
    let r = Command::new(bin)
        .arg("run")
        .arg(case.join("model.hlo.txt"))
        .arg("--input")
        .arg(format!("0={}", case.join("input_0.npy").display()))
        .arg("--output-dir")
        .arg(&out)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let got = common::npy(&out.join("out.npy"));
    let want = common::npy(&case.join("output_0.npy"));
    let (g, w) = (got.to_f32_vec().unwrap(), want.to_f32_vec().unwrap());
    assert!(
        g.iter().zip(&w).all(|(a, b)| (a - b).abs() <= 1e-6),
        "{g:?} vs {w:?}"
    );
}

/// Mutated modules per run (3000 were checked once, 2026-12-01, without a panic).
const MUTATION_CASES: usize = 600;

/// Replacement tokens for the mutation test: numbers, names, brackets, attribute pieces.
const TOKENS: &[&str] = &[
    "0",
    "1",
    "-1",
    "3",
    "99999999999",
    "f64",
    "s32",
    "pred",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ",",
    "=",
    "x.1",
    "ROOT",
    "%",
    "/*",
    "*/",
    "\"",
    "{...}",
    "dimensions={7}",
    "index=9",
    "to_apply=r",
    "\u{3000}",
    "é",
    "\n",
    "<=",
    "inf",
    "nan",
    "tuple",
    "call",
    "reduce",
    "iota",
    "dot",
];

#[test]
fn mutated_hlo_text_never_panics_the_importer() {
    // Deterministic mutations of every JAX export: replace, delete or insert a token at random
    // places, or truncate. The importer must return a module or an error, never panic.
    let mut rng = xla_aot::util::rng::SplitMix64(20261201);
    let dir = scratch("mutate");
    let mut texts = Vec::new();
    for e in std::fs::read_dir(repo().join("tests/jax"))
        .unwrap()
        .flatten()
    {
        if let Ok(t) = std::fs::read_to_string(e.path().join("model.hlo.txt")) {
            texts.push(t);
        }
    }
    texts.sort();
    let (mut ok, mut errors) = (0, 0);
    for case in 0..MUTATION_CASES {
        let text = &texts[case % texts.len()];
        let mut chars: Vec<char> = text.chars().collect();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(chars.len().max(1));
            match rng.below(4) {
                0 => chars.truncate(at),
                1 => {
                    let end = (at + 1 + rng.below(8)).min(chars.len());
                    chars.drain(at..end);
                }
                _ => {
                    let t = TOKENS[rng.below(TOKENS.len())];
                    let end = (at + rng.below(4)).min(chars.len());
                    chars.splice(at..end, t.chars());
                }
            }
        }
        let mutated: String = chars.into_iter().collect();
        let p = write(&dir, "m.hlo.txt", &mutated);
        let r = std::panic::catch_unwind(|| load_spec(&p).map(|_| ()).map_err(|e| e.to_string()));
        match r {
            Ok(Ok(())) => ok += 1,
            Ok(Err(e)) => {
                assert!(
                    !e.contains("internal compiler error"),
                    "case {case}: {e}\n{mutated}"
                );
                errors += 1;
            }
            Err(_) => panic!("case {case}: the importer panicked on:\n{mutated}"),
        }
    }
    eprintln!("{MUTATION_CASES} mutated modules: {ok} imported, {errors} errors, no panic");
}
