//! Compiled code against the reference interpreter: every example on every target this machine
//! can run (x86-64 natively, aarch64 under qemu), through a C harness that also checks the C API
//! contract (statuses, guard pages, two threads).

mod common;

use common::{EXAMPLES, check_close, repo, run_compiled};
use xla_aot::interp::evaluate;
use xla_aot::spec::load_spec;
use xla_aot::target::Target;

/// The targets tested here; x86-64 ones only where the CPU has the instructions.
pub fn test_targets() -> Vec<Target> {
    let mut v = Vec::new();
    for name in ["x86_64-avx2", "x86_64-avx512", "aarch64-neon"] {
        let t = Target::resolve(name).unwrap();
        if t.arch == xla_aot::target::Arch::X86_64 && !t.runs_here() {
            eprintln!("note: this CPU cannot run {name}; skipped");
            continue;
        }
        v.push(t);
    }
    v
}

#[test]
fn examples_match_the_interpreter_on_every_target() {
    for t in test_targets() {
        for ex in EXAMPLES {
            let dir = repo().join("examples").join(ex);
            let m = load_spec(&dir.join("model.yaml")).unwrap().module;
            let inputs = common::case_inputs(&m, &dir.join("golden"));
            let expected = evaluate(&m, &inputs).unwrap();
            let actual = run_compiled(&m, &t, &inputs, &format!("{ex}-{}", t.name));
            for ((o, a), e) in m.entry.outputs.iter().zip(&actual).zip(&expected) {
                match check_close(a, e) {
                    Ok(r) => eprintln!(
                        "{ex}/{} on {}: worst {r:.3} of the tolerance",
                        o.name, t.name
                    ),
                    Err(msg) => panic!("{ex}/{} on {}: {msg}", o.name, t.name),
                }
            }
        }
    }
}

#[test]
fn examples_match_with_each_pass_disabled_and_without_the_pipeline() {
    let t = Target::resolve("x86_64-avx2").unwrap();
    if !t.runs_here() {
        eprintln!("note: this CPU cannot run x86_64-avx2; skipped");
        return;
    }
    let mut variants: Vec<(String, xla_aot::emit::CompileOptions)> = xla_aot::passes::PASS_NAMES
        .iter()
        .map(|p| {
            (
                format!("without {p}"),
                xla_aot::emit::CompileOptions {
                    disabled_passes: vec![p.to_string()],
                    ..Default::default()
                },
            )
        })
        .collect();
    variants.push((
        "without the pipeline".into(),
        xla_aot::emit::CompileOptions {
            no_pipeline: true,
            ..Default::default()
        },
    ));
    for ex in EXAMPLES {
        let dir = repo().join("examples").join(ex);
        let m = load_spec(&dir.join("model.yaml")).unwrap().module;
        let inputs = common::case_inputs(&m, &dir.join("golden"));
        let expected = evaluate(&m, &inputs).unwrap();
        for (what, opts) in &variants {
            let actual = common::run_compiled_with(
                &m,
                &t,
                &inputs,
                &format!("{ex}-{}", what.replace(' ', "-")),
                opts,
            );
            for ((o, a), e) in m.entry.outputs.iter().zip(&actual).zip(&expected) {
                if let Err(msg) = check_close(a, e) {
                    panic!("{ex}/{} {what}: {msg}", o.name);
                }
            }
        }
    }
}
