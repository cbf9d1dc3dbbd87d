//! The HLO text form: `parse(print(m)) == m` for every example and golden case, the elided form
//! of `xla-aot inspect` parses too, and the parser and verifier name what is wrong.

mod common;

use common::{EXAMPLES, golden_cases, repo};
use std::process::Command;
use xla_aot::front::load_spec;
use xla_aot::ir::{PrintOptions, parse_module, print_module, print_module_with, verify};

#[test]
fn print_then_parse_is_identity() {
    for (name, _, spec) in golden_cases() {
        let m = load_spec(&spec)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .module;
        let text = print_module(&m);
        let back = parse_module(&text).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
        assert!(back == m, "{name}: round trip changed the module");
        verify(&back).unwrap();
        // The readable form elides weights; it parses, verifies and prints the same again.
        let short = print_module_with(&m, &PrintOptions::readable());
        let back = parse_module(&short).unwrap_or_else(|e| panic!("{name}: {e}\n{short}"));
        verify(&back).unwrap();
        assert_eq!(
            print_module_with(&back, &PrintOptions::readable()),
            short,
            "{name}"
        );
    }
}

#[test]
fn inspect_prints_parseable_hlo_for_every_example() {
    for ex in EXAMPLES {
        let spec = repo().join("examples").join(ex).join("model.yaml");
        for flag in [None, Some("--print-large-constants")] {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_xla-aot"));
            cmd.arg("inspect").arg(&spec);
            cmd.args(flag);
            let out = cmd.output().unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "{ex}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8(out.stdout).unwrap();
            let m = parse_module(&text).unwrap_or_else(|e| panic!("{ex}: {e}"));
            verify(&m).unwrap();
            if flag.is_some() {
                assert!(
                    m == load_spec(&spec).unwrap().module,
                    "{ex}: full text differs from the module"
                );
            }
        }
    }
}

#[test]
fn constants_round_trip_bit_exactly() {
    let text = "HloModule k\n\nENTRY %main {\n  %x = f32[3]{0} parameter(0)\n  \
                %c = f32[3]{0} constant({-0.0, nan(0x7fc00001), 1.0000001e-38})\n  \
                %y = f32[3]{0} add(%x, %c)\n  ROOT %outputs = (f32[3]{0}) tuple(%y), names={y}\n}\n";
    let m = parse_module(text).unwrap();
    verify(&m).unwrap();
    assert_eq!(print_module(&m), text);
}

/// Each case: HLO text and the start of the verifier's message; the message must also quote the
/// failing instruction.
#[test]
fn verifier_names_the_failing_instruction() {
    let cases = [
        (
            "%x = f32[2,3]{1,0} parameter(0)\n  %y = f32[2,3]{1,0} add(%x, %x)\n  %z = f32[3,2]{1,0} negate(%y)",
            "declared shape f32[3,2]{1,0} differs from the inferred shape f32[2,3]{1,0}",
            "%z = f32[3,2]{1,0} negate(%y)",
        ),
        (
            "%x = f32[2,3]{1,0} parameter(0)\n  %w = f32[4,3]{1,0} parameter(1)\n  %z = f32[2,4]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
            "dot pairs lhs dim 1 (extent 3) with rhs dim 0 (extent 4)",
            "%z = f32[2,4]{1,0} dot(%x, %w)",
        ),
        (
            "%x = f32[2,3]{1,0} parameter(0)\n  %z = f32[2,3,4]{2,1,0} broadcast(%x), dimensions={1,0}",
            "broadcast dimensions [1,0] must be increasing",
            "%z = f32[2,3,4]{2,1,0} broadcast(%x), dimensions={1,0}",
        ),
        (
            "%x = f32[2,3]{1,0} parameter(0)\n  %z = f32[7]{0} reshape(%x)",
            "reshape from [2,3] to [7] changes the element count",
            "%z = f32[7]{0} reshape(%x)",
        ),
        (
            "%x = f32[2,3]{1,0} parameter(1)\n  %z = f32[2,3]{1,0} negate(%x)",
            "parameter indices [1] are not exactly 0..1",
            "in: %main",
        ),
        (
            "%x = i32[2]{0} parameter(0)\n  %z = i32[2]{0} exponential(%x)",
            "exponential needs a float operand",
            "%z = i32[2]{0} exponential(%x)",
        ),
        (
            "%x = f32[1,3,8,8]{3,2,1,0} parameter(0)\n  %w = f32[4,3,3,3]{3,2,1,0} parameter(1)\n  %z = f32[1,4,8,8]{3,2,1,0} convolution(%x, %w), window={size=3x3}, dim_labels=bf01_oi01->bf01",
            "declared shape f32[1,4,8,8]{3,2,1,0} differs from the inferred shape f32[1,4,6,6]{3,2,1,0}",
            "convolution(%x, %w)",
        ),
        (
            "%x = f32[4]{0} parameter(0)\n  %z = f32[5]{0} slice(%x), slice={[0:5:1]}",
            "slice [0:5:1] does not fit dim 0 of extent 4",
            "%z = f32[5]{0} slice(%x)",
        ),
    ];
    for (body, message, quoted) in cases {
        let text = format!(
            "HloModule v\n\nENTRY %main {{\n  {body}\n  ROOT %outputs = () tuple(), names={{}}\n}}\n"
        );
        let m = parse_module(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let err = verify(&m).expect_err(message).to_string();
        assert!(err.contains(message), "expected `{message}` in:\n{err}");
        assert!(
            err.contains(quoted),
            "expected the instruction `{quoted}` in:\n{err}"
        );
    }
}

#[test]
fn verifier_rejects_a_module_without_outputs() {
    let text = "HloModule v\n\nENTRY %main {\n  %x = f32[4]{0} parameter(0)\n  ROOT %outputs = () tuple(), names={}\n}\n";
    let err = verify(&parse_module(text).unwrap()).unwrap_err();
    assert!(err.to_string().contains("no outputs"), "{err}");
}

#[test]
fn parse_errors_give_line_and_column() {
    let cases = [
        ("HloModul m\n", 1, 1, "expected `HloModule`"),
        (
            "HloModule m\n\nENTRY %main {\n  %x = f32[4]{0} parameter(0)\n  %y = f32[4]{0} frobnicate(%x)\n}\n",
            5,
            18,
            "unknown opcode `frobnicate`",
        ),
        (
            "HloModule m\n\nENTRY %main {\n  %y = f32[4]{0} negate(%x)\n}\n",
            4,
            25,
            "operand `%x` is not defined on an earlier line",
        ),
        (
            "HloModule m\n\nENTRY %main {\n  %x = f32[4]{0} parameter(0)\n  %c = f32[2]{0} constant({1.0, 2.0, 3.0})\n}\n",
            5,
            42,
            "needs 2 element(s), found 3",
        ),
        (
            "HloModule m\n\nENTRY %main {\n  %x = f32[4]{1} parameter(0)\n}\n",
            4,
            14,
            "layout must be a permutation",
        ),
        (
            "HloModule m\n\nENTRY %main {\n  %x = f32[4]{0} parameter(0)\n  %y = f32[4]{0} negate(%x), dimensions={0}\n}\n",
            5,
            30,
            "attribute `dimensions` does not apply to negate",
        ),
        (
            "HloModule m\n\nENTRY %main {\n  %x = f32[4]{0} parameter(0)\n",
            4,
            1,
            "unexpected end of text",
        ),
    ];
    for (text, line, column, msg) in cases {
        let e = parse_module(text).expect_err(msg);
        assert!(e.message.contains(msg), "expected `{msg}`, got {e}");
        assert_eq!((e.line, e.column), (line, column), "{msg}: {e}");
    }
}
