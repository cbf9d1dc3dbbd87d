//! The C harness and the generated library together under AddressSanitizer and
//! UndefinedBehaviorSanitizer (issue 19): every example, on the best x86-64 target this CPU runs,
//! with the harness's guard pages, status checks and two threads, and any report fatal
//! (`-fno-sanitize-recover=all`). The library's own code is not instrumented (LLVM compiled it
//! ahead of time); ASan watches every buffer the harness hands it and the harness's use of the
//! results, UBSan the harness's arithmetic on them, and the guard pages the library's bounds.

mod common;

use common::{EXAMPLES, case_inputs, check_close, default_options, repo, run_compiled_cflags};
use xla_aot::front::load_spec;
use xla_aot::interp::evaluate;
use xla_aot::target::Target;

/// The flags the harness and its link get.
const SANITIZE: &[&str] = &[
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
];

#[test]
fn examples_run_clean_under_asan_and_ubsan() {
    let t = ["x86_64-avx512", "x86_64-avx2", "x86_64"]
        .iter()
        .map(|n| Target::resolve(n).unwrap())
        .find(|t| t.runs_here())
        .unwrap();
    for ex in EXAMPLES {
        let dir = repo().join("examples").join(ex);
        let m = load_spec(&dir.join("model.yaml")).unwrap().module;
        let inputs = case_inputs(&m, &dir.join("golden"));
        let expected = evaluate(&m, &inputs).unwrap();
        let tag = format!("asan-{ex}-{}", t.name);
        let got = run_compiled_cflags(&m, &t, &inputs, &tag, &default_options(), SANITIZE);
        for (g, e) in got.iter().zip(&expected) {
            check_close(g, e).unwrap_or_else(|msg| panic!("{tag}: {msg}"));
        }
    }
}
