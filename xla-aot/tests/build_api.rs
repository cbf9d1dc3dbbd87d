//! `xla_aot::Build`, as a build script uses it: outputs, cache, errors, dumps.

mod common;

use common::{repo, scratch};
use xla_aot::Build;

/// A private copy of simplenet (spec + weights) whose files the test may change.
fn simplenet_copy(tag: &str) -> std::path::PathBuf {
    let dir = scratch(tag);
    let ex = repo().join("examples/simplenet");
    for f in ["model.yaml", "weights.safetensors"] {
        std::fs::copy(ex.join(f), dir.join(f)).unwrap();
    }
    dir
}

#[test]
fn outputs_bindings_and_cache() {
    let src = simplenet_copy("build-cache");
    let out = src.join("out");
    let build = || {
        Build::new(src.join("model.yaml"))
            .target("x86_64-avx2")
            .out_dir(&out)
            .cargo_metadata(false)
            .try_compile("net")
            .unwrap()
    };
    let first = build();
    assert!(first.compiled);
    for f in ["libnet.a", "net.h", "net.json", "net.rs"] {
        assert!(first.dir.join(f).is_file(), "{f} missing");
    }
    let rs = std::fs::read_to_string(first.dir.join("net.rs")).unwrap();
    assert!(
        rs.contains("pub mod net")
            && rs.contains("pub const X_LEN: usize = 3072;")
            && rs.contains("fn net_run("),
        "{rs}"
    );
    // Nothing changed: nothing compiles.
    assert!(!build().compiled);
    // An unrelated file changes: nothing compiles.
    std::fs::write(src.join("notes.txt"), "unrelated").unwrap();
    assert!(!build().compiled);
    // One weight byte changes: exactly one compilation, then cached again.
    let w = src.join("weights.safetensors");
    let mut bytes = std::fs::read(&w).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&w, bytes).unwrap();
    assert!(build().compiled);
    assert!(!build().compiled);
    // Keeping convolutions direct is another key.
    let direct = || {
        Build::new(src.join("model.yaml"))
            .target("x86_64-avx2")
            .no_winograd(true)
            .out_dir(&out)
            .cargo_metadata(false)
            .try_compile("net")
            .unwrap()
    };
    assert!(direct().compiled);
    assert!(!direct().compiled);
    assert!(build().compiled);
    // So is a weight precision, and the header says which.
    let half = || {
        Build::new(src.join("model.yaml"))
            .target("x86_64-avx2")
            .precision(xla_aot::ir::Precision::Bf16Weights)
            .out_dir(&out)
            .cargo_metadata(false)
            .try_compile("net")
            .unwrap()
    };
    assert!(half().compiled);
    let cached = half();
    assert!(!cached.compiled);
    let h = std::fs::read_to_string(cached.dir.join("net.h")).unwrap();
    assert!(h.contains("Precision bf16-weights"), "{h}");
    assert!(build().compiled);
    // Another target is another key.
    let other = Build::new(src.join("model.yaml"))
        .target("aarch64-neon")
        .out_dir(&out)
        .cargo_metadata(false)
        .try_compile("net")
        .unwrap();
    assert!(other.compiled);
}

#[test]
fn spec_errors_are_messages_and_dumps_are_written() {
    let src = simplenet_copy("build-errors");
    std::fs::write(src.join("bad.yaml"), "name: m\ninputs:\n  - {name: x, dtype: f32, shape: [1, 4]}\noutputs: [y]\nops:\n  - {name: y, op: rleu, inputs: [x]}\n").unwrap();
    let err = Build::new(src.join("bad.yaml"))
        .target("x86_64-avx2")
        .out_dir(src.join("out"))
        .cargo_metadata(false)
        .try_compile("m")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.yaml:6:19") && err.contains("did you mean `relu`?"),
        "{err}"
    );
    let dump = src.join("dump");
    Build::new(src.join("model.yaml"))
        .target("x86_64-avx2")
        .out_dir(src.join("out"))
        .dump_to(&dump)
        .cargo_metadata(false)
        .try_compile("net")
        .unwrap();
    assert!(dump.join("fusion.log").is_file() && dump.join("00.parsed.hlo.txt").is_file());
}

#[test]
fn cargo_targets_map_to_xla_aot_targets() {
    use xla_aot::target::Target;
    let name = |t: &str, f: &str| Target::for_cargo(t, f).unwrap().name;
    assert_eq!(name("x86_64-unknown-linux-gnu", "fxsr,sse,sse2"), "x86_64");
    assert_eq!(
        name("x86_64-unknown-linux-gnu", "avx,avx2,fma,sse2"),
        "x86_64-avx2"
    );
    assert_eq!(
        name("x86_64-unknown-linux-gnu", "avx2,avx512f,fma"),
        "x86_64-avx512"
    );
    assert_eq!(name("aarch64-unknown-linux-gnu", "neon"), "aarch64-neon");
    assert!(Target::for_cargo("riscv64gc-unknown-linux-gnu", "").is_err());
    assert_eq!(name("thumbv7em-none-eabihf", ""), "cortex-m4f");
    assert_eq!(name("thumbv8m.main-none-eabihf", ""), "cortex-m33");
    let cpu = |t: &str, c: &str| Target::for_cargo_cpu(t, "", Some(c)).unwrap().name;
    assert_eq!(cpu("thumbv7em-none-eabihf", "cortex-m7"), "cortex-m7");
    assert_eq!(cpu("thumbv8m.main-none-eabihf", "cortex-m55"), "cortex-m55");
    // Soft-float: the library uses the FPU.
    assert!(Target::for_cargo("thumbv7em-none-eabi", "").is_err());
    // Build::multi_isa(true).
    let multi = Target::for_cargo_multi_isa("x86_64-unknown-linux-gnu").unwrap();
    assert_eq!(multi.name, "x86_64-multi");
    assert_eq!(multi.variants.len(), 3);
    let arm = Target::for_cargo_multi_isa("aarch64-unknown-linux-gnu").unwrap();
    assert_eq!(arm.name, "aarch64-multi");
    let err = Target::for_cargo_multi_isa("riscv64gc-unknown-linux-gnu")
        .unwrap_err()
        .to_string();
    assert!(err.contains("only x86_64 and aarch64"), "{err}");
}

#[test]
fn an_imported_graph_is_part_of_the_cache_key() {
    let dir = scratch("build-graph");
    let case = repo().join("tests/jax/relu");
    std::fs::copy(case.join("model.hlo.txt"), dir.join("g.hlo.txt")).unwrap();
    std::fs::write(dir.join("m.yaml"), "name: r\ngraph: {hlo: g.hlo.txt}\n").unwrap();
    let out = dir.join("out");
    let build = || {
        Build::new(dir.join("m.yaml"))
            .target("x86_64-avx2")
            .out_dir(&out)
            .cargo_metadata(false)
            .try_compile("r")
            .unwrap()
    };
    assert!(build().compiled);
    assert!(!build().compiled);
    // The HLO text changes (a comment line): the library is rebuilt.
    let mut text = std::fs::read_to_string(dir.join("g.hlo.txt")).unwrap();
    text.push_str("\n// edited\n");
    std::fs::write(dir.join("g.hlo.txt"), text).unwrap();
    assert!(build().compiled);
}

#[test]
fn multi_isa_bindings_have_isa_and_force_isa_and_on_aarch64_set_hwcap() {
    let src = simplenet_copy("build-multi");
    for (target, hwcap) in [("x86_64-multi", false), ("aarch64-multi", true)] {
        let out = src.join(target);
        Build::new(src.join("model.yaml"))
            .target(target)
            .out_dir(&out)
            .cargo_metadata(false)
            .try_compile("net")
            .unwrap();
        let rs = std::fs::read_to_string(out.join("xla-aot/net/net.rs")).unwrap();
        assert!(rs.contains("pub fn isa() -> &'static str"), "{rs}");
        assert!(
            rs.contains("pub fn force_isa(isa: Option<&core::ffi::CStr>)"),
            "{rs}"
        );
        assert_eq!(
            rs.contains("pub fn set_hwcap(hwcap: u64, hwcap2: u64)"),
            hwcap,
            "{rs}"
        );
        let h = std::fs::read_to_string(out.join("xla-aot/net/net.h")).unwrap();
        assert!(h.contains("#define NET_MULTI_ISA 1"), "{h}");
        assert_eq!(
            h.contains("void net_set_hwcap(uint64_t hwcap, uint64_t hwcap2);"),
            hwcap,
            "{h}"
        );
    }
}
