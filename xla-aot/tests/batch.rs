//! Batch buckets (`batch_sizes`): one library with a variant per size; `<name>_run_batch` with
//! every n from 1 to the largest bucket equals running each item alone, reads and writes exactly
//! n items (guard pages, sentinels), and refuses n out of range, on the host and on aarch64 under
//! qemu. Spec errors name the problem.

mod common;

use common::{repo, scratch};
use std::path::Path;
use std::process::Command;
use xla_aot::front::spec_from_str;
use xla_aot::target::Target;

const SPEC: &str = "name: bm\ninputs:\n  - {name: x, dtype: f32, shape: [1, 3, 8, 8]}\n  - {name: t, dtype: f32, shape: [1, 10]}\noutputs: [probs, feat]\nbatch_sizes: [1, 4, 16]\nconstants:\n  - {name: w, shape: [4, 3, 3, 3], value: [0.1, -0.2, 0.3, 0.05, 0.15, -0.25, 0.2, 0.1, -0.1, 0.3, 0.2, 0.1, -0.3, 0.2, 0.1, 0.05, -0.05, 0.25, 0.1, 0.2, 0.3, -0.1, 0.0, 0.1, 0.2, -0.2, 0.1, 0.3, 0.1, -0.2, 0.2, 0.15, 0.05, -0.1, 0.2, 0.1, 0.05, 0.1, 0.2, -0.3, 0.1, 0.2, 0.0, 0.1, -0.2, 0.3, 0.1, 0.2, -0.1, 0.05, 0.15, 0.2, -0.1, 0.1, 0.3, 0.2, 0.1, -0.05, 0.1, 0.2, 0.1, -0.2, 0.3, 0.1, 0.2, 0.1, -0.1, 0.2, 0.1, 0.05, 0.1, 0.2, -0.2, 0.1, 0.3, 0.1, 0.2, -0.1, 0.1, 0.2, 0.1, 0.05, -0.1, 0.2, 0.1, 0.3, -0.2, 0.1, 0.2, 0.1, 0.1, -0.1, 0.2, 0.05, 0.1, 0.2, 0.1, -0.3, 0.2, 0.1, 0.1, 0.2, -0.1, 0.1, 0.2, 0.05, 0.1, 0.2]}\n  - {name: fc, shape: [10, 4], value: [0.1, 0.2, -0.1, 0.3, -0.2, 0.1, 0.4, 0.1, 0.3, -0.3, 0.2, 0.1, 0.1, 0.1, -0.2, 0.2, 0.2, -0.1, 0.1, 0.3, 0.05, 0.2, 0.1, -0.2, 0.3, 0.1, -0.1, 0.2, 0.1, 0.2, 0.3, -0.1, -0.1, 0.2, 0.2, 0.1, 0.2, 0.1, -0.3, 0.1]}\nops:\n  - {name: c, op: conv2d, inputs: [x, w], padding: [1]}\n  - {name: r, op: relu, inputs: [c]}\n  - {name: g, op: global_avg_pool, inputs: [r]}\n  - {name: feat, op: flatten, inputs: [g]}\n  - {name: logits, op: dense, inputs: [feat, fc]}\n  - {name: shifted, op: add, inputs: [logits, t]}\n  - {name: probs, op: softmax, inputs: [shifted], axis: -1}\n";

fn model() -> xla_aot::front::Model {
    spec_from_str(Path::new("bm.yaml"), SPEC).unwrap()
}

#[test]
fn run_batch_equals_items_run_alone_on_host_and_aarch64() {
    let model = model();
    assert_eq!(
        model.buckets.iter().map(|(b, _)| *b).collect::<Vec<_>>(),
        [1, 4, 16]
    );
    let harness = repo().join("xla-aot/tests/harness/batch_harness.c");
    // x86_64-multi: the buckets and their dispatcher once per variant, behind the ISA dispatch.
    for target in [
        "x86_64-avx2",
        "aarch64-neon",
        "x86_64-multi",
        "aarch64-multi",
    ] {
        let t = Target::resolve(target).unwrap();
        if t.arch == xla_aot::target::Arch::X86_64 && !t.runs_here() {
            continue;
        }
        let opts = common::default_options();
        let art =
            xla_aot::compile::compile_model_buckets(&model.module, &model.buckets, None, &t, &opts)
                .unwrap_or_else(|e| panic!("{target}: {e}"));
        let dir = scratch(&format!("batch-{target}"));
        std::fs::write(dir.join("libbm.a"), &art.archive).unwrap();
        std::fs::write(dir.join("bm.h"), &art.header).unwrap();
        let (cc, runner) = common::toolchain(&t);
        let exe = dir.join("batch_harness");
        let out = Command::new(&cc)
            .args(["-O1", "-std=c11", "-Wall", "-Werror", "-DMODEL=bm"])
            .arg(&harness)
            .arg(dir.join("libbm.a"))
            .args(["-lm", "-o"])
            .arg(&exe)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let arena = art
            .header
            .lines()
            .find_map(|l| l.strip_prefix("#define BM_ARENA_SIZE "))
            .unwrap()
            .trim()
            .to_string();
        let c = &model.module.entry;
        let mut args = vec![arena, "16".into(), "2".into(), "2".into()];
        for &p in &c.parameters() {
            args.push(c.inst(p).shape.size_bytes().to_string());
        }
        for o in &c.outputs {
            args.push(c.inst(o.value).shape.size_bytes().to_string());
        }
        let mut cmd = if runner.is_empty() {
            Command::new(&exe)
        } else {
            let mut c = Command::new(&runner[0]);
            c.args(&runner[1..]).arg(&exe);
            c
        };
        let r = cmd.args(&args).output().unwrap();
        assert!(
            r.status.success(),
            "{target}: {}{}",
            String::from_utf8_lossy(&r.stdout),
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(
            art.header
                .contains("int bm_run_batch(void *arena, int32_t n,")
        );
    }
}

/// The buckets share the weights: the optimised object of three buckets holds no more constant
/// bytes than the declared batch's alone (the variants pack the weights the same way, and LLVM
/// merges identical private constants).
#[test]
fn buckets_store_each_weight_once() {
    let model = model();
    let t = Target::resolve("x86_64-avx2").unwrap();
    let mut opts = common::default_options();
    opts.codegen.ir = true;
    let constant_bytes = |ir: &str| -> usize {
        ir.lines()
            .filter(|l| l.contains(".const.") && l.contains("private unnamed_addr constant ["))
            .map(|l| {
                let n = l.split("constant [").nth(1).unwrap();
                n.split(" x ").next().unwrap().parse::<usize>().unwrap()
            })
            .sum()
    };
    let one = xla_aot::compile::compile_model(&model.module, &t, &opts).unwrap();
    let all =
        xla_aot::compile::compile_model_buckets(&model.module, &model.buckets, None, &t, &opts)
            .unwrap();
    let (one, all) = (
        constant_bytes(&one.ir.unwrap().1),
        constant_bytes(&all.ir.unwrap().1),
    );
    assert!(one > 0);
    assert_eq!(all, one, "weights stored more than once across the buckets");
}

#[test]
fn batch_spec_errors_name_the_problem() {
    let cases = [
        (
            "batch_sizes: [1, 4, 16]",
            "batch_sizes: [4, 1]",
            "batch sizes must increase",
        ),
        (
            "batch_sizes: [1, 4, 16]",
            "batch_sizes: [2, 4]",
            "written for batch 1, which is not in `batch_sizes`",
        ),
        (
            "batch_sizes: [1, 4, 16]",
            "batch_sizes: [0, 4]",
            "outside [1, 4096]",
        ),
        (
            "{name: t, dtype: f32, shape: [1, 10]}",
            "{name: t, dtype: f32, shape: [2, 5]}",
            "has batch 2 but the first input has 1",
        ),
    ];
    for (from, to, want) in cases {
        let text = SPEC.replace(from, to);
        let e = spec_from_str(Path::new("bm.yaml"), &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{to}: {e}");
    }
    // An output that does not keep the batch first.
    let text = SPEC
        .replace("outputs: [probs, feat]", "outputs: [probs, total]")
        .replace(
            "  - {name: probs, op: softmax",
            "  - {name: total, op: reduce_sum, inputs: [feat]}\n  - {name: probs, op: softmax",
        );
    let e = spec_from_str(Path::new("bm.yaml"), &text)
        .unwrap_err()
        .to_string();
    assert!(e.contains("its dim 0 must be the batch"), "{e}");
}

/// Prints the manifest index of every kernel the profiler hook saw start, in order.
const PROFILED_BATCH: &str = r#"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "xla_aot_runtime.h"
int bm_run_batch_ptrs(void *arena, int32_t n, const void *const *inputs, void *const *outputs);
void bm_set_profiler(XlaAotProfiler hook, void *ctx);
static int open_kernel = -1, bad = 0;
static void hook(void *ctx, uint32_t kernel, uint32_t phase) {
    (void)ctx;
    if (phase == 0) { if (open_kernel != -1) bad = 1; open_kernel = (int)kernel; printf("%u\n", kernel); }
    else { if (open_kernel != (int)kernel) bad = 1; open_kernel = -1; }
}
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    size_t arena_size = strtoull(argv[2], NULL, 10);
    void *arena = aligned_alloc(64, arena_size / 64 * 64 + 64);
    const void *in[2] = {calloc(n, 3 * 8 * 8 * 4), calloc(n, 10 * 4)};
    void *out[2] = {calloc(n, 10 * 4), calloc(n, 4 * 4)};
    bm_set_profiler(hook, NULL);
    if (bm_run_batch_ptrs(arena, n, in, out) != 0 || bad) return 3;
    return 0;
}
"#;

#[test]
fn a_bucket_reports_its_kernels_with_their_manifest_indices() {
    // n = 3 runs the 4-item bucket: the hook sees exactly that bucket's kernels, numbered as in
    // the manifest (after the 1-item model's), each opened and closed in turn.
    let model = model();
    let t = Target::resolve("host").unwrap();
    let art = xla_aot::compile::compile_model_buckets(
        &model.module,
        &model.buckets,
        None,
        &t,
        &common::default_options(),
    )
    .unwrap();
    let dir = scratch("batch-profiler");
    std::fs::write(dir.join("libbm.a"), &art.archive).unwrap();
    std::fs::write(dir.join("main.c"), PROFILED_BATCH).unwrap();
    let exe = dir.join("profiled");
    let out = Command::new("cc")
        .args(["-O1", "-std=c11", "-Wall", "-Werror", "-I"])
        .arg(repo().join("runtime-min/include"))
        .arg(dir.join("main.c"))
        .arg(dir.join("libbm.a"))
        .args(["-lm", "-o"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let arena = art
        .header
        .lines()
        .find_map(|l| l.strip_prefix("#define BM_ARENA_SIZE "))
        .unwrap()
        .trim()
        .to_string();
    let r = Command::new(&exe).args(["3", &arena]).output().unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let seen: Vec<usize> = String::from_utf8_lossy(&r.stdout)
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    let expected: Vec<usize> = art
        .kernels
        .iter()
        .enumerate()
        .filter(|(_, k)| k.name.starts_with("bm_b4_"))
        .map(|(i, _)| i)
        .collect();
    assert!(!expected.is_empty() && expected[0] > 0, "{:?}", art.kernels);
    assert_eq!(seen, expected);
}
