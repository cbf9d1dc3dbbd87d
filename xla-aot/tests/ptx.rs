//! The PTX backend (`codegen/gpu/ptx.rs`): every kernel of every example becomes a `.entry` that
//! ptxas accepts for sm_80 (the `cuda-x86_64` target), sm_87 (Jetson Orin) and sm_90 (Hopper),
//! takes one pointer per planned launch argument, and references no global (weights live in the
//! device arena). The kernels' logic is checked on the host by `tests/grid.rs`.
//!
//! ptxas comes from the PyPI wheel `nvidia-cuda-nvcc-cu12` (`.ci/run` installs it into `.venv`
//! and sets `XLA_AOT_PTXAS`); without it this test fails and says how to install it.

mod common;

use common::{EXAMPLES, repo, scratch};
use std::path::PathBuf;
use xla_aot::codegen::gpu::ptx;
use xla_aot::front::load_spec;

fn ptxas() -> PathBuf {
    if let Some(p) = std::env::var_os("XLA_AOT_PTXAS") {
        return PathBuf::from(p);
    }
    let venv_lib = repo().join(".venv/lib");
    if let Ok(dirs) = std::fs::read_dir(&venv_lib) {
        for d in dirs.flatten() {
            let p = d.path().join("site-packages/nvidia/cuda_nvcc/bin/ptxas");
            if p.exists() {
                return p;
            }
        }
    }
    if std::process::Command::new("ptxas")
        .arg("--version")
        .output()
        .is_ok()
    {
        return PathBuf::from("ptxas");
    }
    panic!(
        "ptxas not found: python3 -m venv .venv && .venv/bin/pip install nvidia-cuda-nvcc-cu12 \
         (or set XLA_AOT_PTXAS to a ptxas binary)"
    );
}

/// A model with the decode-time ops (`sample`, `top-k`), beside the examples.
const SAMPLER: &str = "name: sampler\ninputs:\n  - {name: logits, dtype: f32, shape: [4, 100]}\n  - {name: seed, dtype: i32, shape: []}\n  - {name: step, dtype: i32, shape: []}\noutputs: [token, indices]\nops:\n  - {name: token, op: sample, inputs: [logits, seed, step], temperature: 0.8, top_k: 40, top_p: 0.9}\n  - {name: indices, op: top_k_indices, inputs: [logits], k: 8}\n";

#[test]
fn every_example_kernel_assembles_for_orin_and_hopper() {
    let ptxas = ptxas();
    for ex in EXAMPLES.iter().copied().chain(["sampler"]) {
        let mut m = if ex == "sampler" {
            xla_aot::front::spec_from_str(std::path::Path::new("sampler.yaml"), SAMPLER)
                .unwrap()
                .module
        } else {
            load_spec(&repo().join("examples").join(ex).join("model.yaml"))
                .unwrap()
                .module
        };
        xla_aot::passes::Pipeline::default_pipeline()
            .run(&mut m, &mut |_, _, _| {})
            .unwrap();
        let plan = xla_aot::arena::plan(&m);
        for sm in ["sm_80", "sm_87", "sm_90"] {
            let module = ptx::compile(&m, &plan, sm).unwrap();
            assert!(!module.launches.is_empty(), "{ex}: no kernels");
            for k in &module.launches {
                assert!(k.elements > 0, "{ex}: {} has an empty grid", k.entry);
                let head = format!(".visible .entry {}(", k.entry);
                let at = module
                    .ptx
                    .find(&head)
                    .unwrap_or_else(|| panic!("{ex}: no .entry {}", k.entry));
                let params = &module.ptx[at..at + module.ptx[at..].find(')').unwrap()];
                assert_eq!(
                    params.matches(".param .u64").count(),
                    k.args.len(),
                    "{ex}: {} takes one pointer per launch argument",
                    k.entry
                );
                for &a in &k.args {
                    assert!(a < module.layout.size, "{ex}: argument outside the arena");
                }
            }
            assert!(
                module.ptx.contains(&format!(".target {sm}")),
                "{ex}: not labelled {sm}"
            );
            assert!(
                !module
                    .ptx
                    .lines()
                    .any(|l| l.starts_with(".global") || l.starts_with(".const")),
                "{ex}: the PTX holds data; weights belong in the device arena"
            );
            let dir = scratch(&format!("ptx-{ex}-{sm}"));
            let file = dir.join(format!("{ex}.ptx"));
            std::fs::write(&file, &module.ptx).unwrap();
            let out = std::process::Command::new(&ptxas)
                .arg(format!("-arch={sm}"))
                .arg(&file)
                .arg("-o")
                .arg(dir.join(format!("{ex}.cubin")))
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", ptxas.display()));
            assert!(
                out.status.success(),
                "{ex}: ptxas -arch={sm} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

#[test]
#[ignore = "prints the PTX of simplenet; run with --ignored --nocapture"]
fn print_simplenet_ptx() {
    let mut m = load_spec(&repo().join("examples/simplenet/model.yaml"))
        .unwrap()
        .module;
    xla_aot::passes::Pipeline::default_pipeline()
        .run(&mut m, &mut |_, _, _| {})
        .unwrap();
    let plan = xla_aot::arena::plan(&m);
    println!("{}", ptx::compile(&m, &plan, "sm_87").unwrap().ptx);
}
