//! Compiled code against the reference interpreter: every example on every target this machine
//! can run (x86-64 natively, aarch64 under qemu), through a C harness that also checks the C API
//! contract (statuses, guard pages, two threads).

mod common;

use common::{EXAMPLES, check_close, repo, run_compiled};
use xla_aot::front::load_spec;
use xla_aot::interp::evaluate;
use xla_aot::target::Target;

#[test]
fn examples_match_the_interpreter_on_every_target() {
    for t in common::compiled_targets() {
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
    if common::in_pass_loop() {
        // .ci/run's loop over the passes: this test already disables each one itself.
        eprintln!("note: XLA_AOT_DISABLE_PASSES is set; skipped");
        return;
    }
    let t = Target::resolve("x86_64-avx2").unwrap();
    if !t.runs_here() {
        eprintln!("note: this CPU cannot run x86_64-avx2; skipped");
        return;
    }
    let mut variants: Vec<(String, xla_aot::compile::CompileOptions)> = xla_aot::passes::PASS_NAMES
        .iter()
        .map(|p| {
            (
                format!("without {p}"),
                xla_aot::compile::CompileOptions {
                    disabled_passes: vec![p.to_string()],
                    ..Default::default()
                },
            )
        })
        .collect();
    variants.push((
        "without the pipeline".into(),
        xla_aot::compile::CompileOptions {
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

/// Two stored exponentials in a row: the second reads the first only at the element it writes
/// and is its last reader, so it overwrites it in place and the arena holds one slice, not two.
#[test]
fn in_place_reuse_halves_the_arena_and_stays_correct() {
    let text = "HloModule inplace\n\nENTRY %main {\n  %x = f32[1024]{0} parameter(0)\n  %t1 = f32[1024]{0} exponential(%x)\n  %s = f32[] reduce(%t1), dimensions={0}, kind=add\n  %sb = f32[1024]{0} broadcast(%s), dimensions={}\n  %d = f32[1024]{0} subtract(%t1, %sb)\n  %t2 = f32[1024]{0} exponential(%d)\n  %hi = f32[] reduce(%t2), dimensions={0}, kind=max\n  %lo = f32[] reduce(%t2), dimensions={0}, kind=min\n  ROOT %outputs = (f32[], f32[]) tuple(%hi, %lo), names={hi,lo}\n}\n";
    let m = xla_aot::ir::parse_module(text).unwrap();
    let t = Target::resolve("x86_64-avx2").unwrap();
    let art = xla_aot::compile::compile_model(&m, &t, &Default::default()).unwrap();
    assert!(
        art.plan.strategy.starts_with("in-place"),
        "strategy {}",
        art.plan.strategy
    );
    assert_eq!(
        art.plan.arena_size,
        4096 + 64,
        "one 4 KiB slice for t1 and t2, plus the scalar sum"
    );
    if !t.runs_here() {
        return;
    }
    let x = xla_aot::driver::random_input(xla_aot::ir::DType::F32, &[1024], 3);
    let expected = evaluate(&m, std::slice::from_ref(&x)).unwrap();
    let actual = common::run_compiled(&m, &t, &[x], "inplace");
    for (a, e) in actual.iter().zip(&expected) {
        check_close(a, e).unwrap();
    }
}

/// One `x86_64-multi` library per example, run with each variant forced through
/// `<name>_force_isa` and once unforced: every variant this CPU can run matches the interpreter
/// (and passes the harness's guard pages and two threads) and gives exactly the bytes of its
/// single-ISA library; the unforced run picks the best one this CPU runs (its two threads
/// racing through the first call's detection); a variant it cannot run is refused. The harness
/// also checks that an unknown name is refused.
#[test]
fn multi_isa_libraries_match_the_interpreter_with_each_variant_forced() {
    const TEST: &str = "multi_isa_libraries_match_the_interpreter_with_each_variant_forced";
    if common::one_target_per_pass(TEST) || common::host_isa_capped(TEST) {
        return;
    }
    let t = Target::resolve("x86_64-multi").unwrap();
    if !t.runs_here() {
        eprintln!("note: not an x86-64 host; skipped");
        return;
    }
    let isas: Vec<&str> = t
        .variants
        .iter()
        .map(|v| xla_aot::target::isa::isa_of(v).unwrap().name)
        .collect();
    let best = t
        .variants
        .iter()
        .zip(&isas)
        .find(|(v, _)| v.runs_here())
        .map(|(_, i)| *i)
        .unwrap();
    let mut forced: Vec<Option<&str>> = isas.iter().map(|i| Some(*i)).collect();
    forced.push(None);
    for ex in EXAMPLES {
        let dir = repo().join("examples").join(ex);
        let m = load_spec(&dir.join("model.yaml")).unwrap().module;
        let inputs = common::case_inputs(&m, &dir.join("golden"));
        let expected = evaluate(&m, &inputs).unwrap();
        let runs = common::run_compiled_forced(
            &m,
            &t,
            &inputs,
            &format!("{ex}-multi"),
            &common::default_options(),
            &forced,
        );
        for ((want, v), (ran, result)) in forced
            .iter()
            .zip(t.variants.iter().map(Some).chain(std::iter::once(None)))
            .zip(runs)
        {
            let runs_here = v.is_none_or(|v| v.runs_here());
            let actual = match result {
                Ok(a) => a,
                Err(msg) => {
                    assert!(
                        !runs_here,
                        "{ex}: {want:?} refused on a CPU that runs it: {msg}"
                    );
                    eprintln!("{ex}: {want:?} refused (this CPU cannot run it)");
                    continue;
                }
            };
            assert!(
                runs_here,
                "{ex}: {want:?} accepted on a CPU that cannot run it"
            );
            assert_eq!(ran, want.unwrap_or(best), "{ex}: the variant that ran");
            for ((o, a), e) in m.entry.outputs.iter().zip(&actual).zip(&expected) {
                match check_close(a, e) {
                    Ok(r) => eprintln!(
                        "{ex}/{} on x86_64-multi ({ran}): worst {r:.3} of the tolerance",
                        o.name
                    ),
                    Err(msg) => panic!("{ex}/{} on x86_64-multi ({ran}): {msg}", o.name),
                }
            }
        }
    }
}

/// The dispatch on CPUs this machine is not: each example's `x86_64-multi` library under
/// `qemu-x86_64 -cpu Haswell` (AVX2, no AVX-512: QEMU does not emulate it) picks `avx2` and
/// refuses `avx512`, and under `-cpu Nehalem` (SSE4.2, no AVX) picks `sse2`, refuses `avx2` and
/// `avx512`, and matches the interpreter (guard pages and threads included). The AVX2 code is
/// not run under QEMU 7.2: its emulated `vmaskmovps` reads the masked-off bytes too and faults on
/// the harness's guard pages (real CPUs suppress those faults; without guard pages it computes
/// the native results). Skipped without `qemu-x86_64`.
#[test]
fn multi_isa_libraries_pick_avx2_or_sse2_on_emulated_cpus_without_avx512() {
    if common::one_target_per_pass(
        "multi_isa_libraries_pick_avx2_or_sse2_on_emulated_cpus_without_avx512",
    ) {
        return;
    }
    let t = Target::resolve("x86_64-multi").unwrap();
    let qemu = std::process::Command::new("qemu-x86_64")
        .arg("--version")
        .output();
    if !t.runs_here() || qemu.is_err() {
        eprintln!("note: no x86-64 host or no qemu-x86_64; skipped");
        return;
    }
    // (forced variant, QEMU CPU model, the variant expected to run; None: refused)
    let runs: &[(Option<&str>, &str, Option<&str>)] = &[
        (None, "Haswell", Some("avx2")),
        (Some("avx512"), "Haswell", None),
        (None, "Nehalem", Some("sse2")),
        (Some("avx2"), "Nehalem", None),
        (Some("avx512"), "Nehalem", None),
    ];
    // The AVX2 code is not run under QEMU (see above): Haswell runs check the dispatch only.
    emulated_runs_match(&t, runs, "multi-qemu", |cpu| cpu == "Haswell");
}

/// `aarch64-multi` under `qemu-aarch64`: with `-cpu cortex-a72` (Armv8.0-A) the library picks
/// `neon` and refuses `dotprod`; with `-cpu neoverse-n1` (Armv8.2-A with dotprod) it picks
/// `dotprod`; each matches the interpreter. The harness passes `getauxval(AT_HWCAP)` first.
#[test]
fn aarch64_multi_isa_libraries_follow_the_hwcap_they_are_given() {
    if common::one_target_per_pass("aarch64_multi_isa_libraries_follow_the_hwcap_they_are_given") {
        return;
    }
    let t = Target::resolve("aarch64-multi").unwrap();
    // (forced variant, QEMU CPU model, the variant expected to run; None: refused)
    let runs: &[(Option<&str>, &str, Option<&str>)] = &[
        (None, "cortex-a72", Some("neon")),
        (Some("dotprod"), "cortex-a72", None),
        (None, "neoverse-n1", Some("dotprod")),
        (Some("neon"), "neoverse-n1", Some("neon")),
    ];
    emulated_runs_match(&t, runs, "aarch64-multi", |_| false);
}

/// Each example's library for the multi-ISA target `t`, run under QEMU once per `runs` entry
/// (forced variant or none, QEMU CPU model, the variant expected to run or None for a refusal),
/// matches the interpreter where it runs; `isa_only(cpu)`: that CPU's runs check the variant the
/// dispatch selects but not the outputs (`common::run_compiled_emulated`).
fn emulated_runs_match(
    t: &Target,
    runs: &[(Option<&str>, &str, Option<&str>)],
    tag: &str,
    isa_only: impl Fn(&str) -> bool,
) {
    let plan: Vec<(Option<&str>, Option<&str>, bool)> = runs
        .iter()
        .map(|(f, cpu, _)| (*f, Some(*cpu), isa_only(cpu)))
        .collect();
    for ex in EXAMPLES {
        let dir = repo().join("examples").join(ex);
        let m = load_spec(&dir.join("model.yaml")).unwrap().module;
        let inputs = common::case_inputs(&m, &dir.join("golden"));
        let expected = evaluate(&m, &inputs).unwrap();
        let results = common::run_compiled_emulated(
            &m,
            t,
            &inputs,
            &format!("{ex}-{tag}"),
            &common::default_options(),
            &plan,
        );
        for ((forced, cpu, want), (ran, result)) in runs.iter().zip(results) {
            match (want, result) {
                (None, Err(_)) => {}
                (None, Ok(_)) => panic!("{ex} on {cpu}: {forced:?} accepted, ran {ran}"),
                (Some(_), Err(msg)) => panic!("{ex} on {cpu}: refused: {msg}"),
                (Some(w), Ok(actual)) => {
                    assert_eq!(ran, *w, "{ex} on {cpu}: the variant selected");
                    for ((o, a), e) in m.entry.outputs.iter().zip(&actual).zip(&expected) {
                        match check_close(a, e) {
                            Ok(r) => eprintln!(
                                "{ex}/{} on {} ({ran}, {cpu}): worst {r:.3} of the tolerance",
                                o.name, t.name
                            ),
                            Err(msg) => panic!("{ex}/{} on {cpu} ({ran}): {msg}", o.name),
                        }
                    }
                }
            }
        }
    }
}
