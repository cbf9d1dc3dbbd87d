//! Sequence buckets (`seq_buckets`): `<name>_run_seq(arena, len, ...)` with every len from 1 to the
//! longest bucket equals the interpreter on the padded, masked bucket, and a masked mean over the
//! sequence does not depend on which bucket ran (padding never leaks in), on the host and on
//! aarch64 under qemu.

mod common;

use common::scratch;
use std::path::Path;
use std::process::Command;
use xla_aot::front::spec_from_str;
use xla_aot::ir::Literal;
use xla_aot::target::Target;

const MAX: usize = 32;
const C: usize = 8;

fn spec() -> String {
    let w: Vec<String> = (0..C * C)
        .map(|i| format!("{:.3}", ((i * 37 % 17) as f32 - 8.0) / 10.0))
        .collect();
    format!(
        "name: sq\ninputs:\n  - {{name: x, dtype: f32, shape: [1, 16, {C}]}}\n  - {{name: mask, dtype: f32, shape: [1, 16]}}\noutputs: [h, pooled]\nseq_buckets: {{sizes: [8, 16, 32], inputs: [x], outputs: [h], mask: mask}}\nconstants:\n  - {{name: w, shape: [{C}, {C}], value: [{}]}}\nops:\n  - {{name: h, op: dense, inputs: [x, w]}}\n  - {{name: m3, op: reshape, inputs: [mask], shape: [1, -1, 1]}}\n  - {{name: hm, op: mul, inputs: [h, m3]}}\n  - {{name: total, op: reduce_sum, inputs: [hm], axes: [1]}}\n  - {{name: count, op: reduce_sum, inputs: [mask], axes: [1], keepdims: true}}\n  - {{name: pooled, op: div, inputs: [total, count]}}\n",
        w.join(", ")
    )
}

const HARNESS: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include "sq.h"
static _Alignas(64) unsigned char arena[SQ_ARENA_SIZE + 64];
int main(int argc, char **argv) {
    (void)argc;
    float x[32 * 8], h[33 * 8], pooled[8];
    FILE *f = fopen(argv[1], "rb");
    if (!f || fread(x, sizeof x, 1, f) != 1) return 2;
    fclose(f);
    FILE *o = fopen(argv[2], "wb");
    for (int len = 1; len <= SQ_MAX_SEQ; len++) {
        for (int k = 0; k < 33 * 8; k++) h[k] = 12345.0f; /* sentinel past len positions */
        int s = sq_run_seq(arena, len, x, h, pooled);
        if (s != 0) { fprintf(stderr, "len %d: status %d\n", len, s); return 3; }
        for (int k = len * 8; k < 33 * 8; k++) if (h[k] != 12345.0f) { fprintf(stderr, "len %d: wrote past len\n", len); return 3; }
        fwrite(h, sizeof(float), len * 8, o);
        fwrite(pooled, sizeof(float), 8, o);
    }
    fclose(o);
    if (sq_run_seq(arena, 0, x, h, pooled) != XLA_AOT_STATUS_BAD_ARGUMENT) return 4;
    if (sq_run_seq(arena, SQ_MAX_SEQ + 1, x, h, pooled) != XLA_AOT_STATUS_BAD_ARGUMENT) return 4;
    /* The caller's x holds len positions: an output on them is refused, one just after is not. */
    if (sq_run_seq(arena, 2, x, x + 2 * 8 - 1, pooled) != XLA_AOT_STATUS_OVERLAP) return 5;
    if (sq_run_seq(arena, 2, x, x + 2 * 8, pooled) != XLA_AOT_STATUS_OK) return 5;
    return 0;
}
"#;

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn run_seq_matches_the_padded_masked_bucket_for_every_length() {
    let text = spec();
    let model = spec_from_str(Path::new("sq.yaml"), &text).unwrap();
    let x: Vec<f32> = (0..MAX * C)
        .map(|i| ((i * 2654435761usize % 1000) as f32 - 500.0) / 250.0)
        .collect();
    // Expected, from the interpreter: bucket S >= len, x padded with zeros, mask 1 below len.
    let mut expected = Vec::new();
    let mut pooled_by_len = Vec::new();
    for len in 1..=MAX {
        let (s, m) = model.buckets.iter().find(|(s, _)| *s >= len).unwrap();
        let mut xs = vec![0f32; s * C];
        xs[..len * C].copy_from_slice(&x[..len * C]);
        let mask: Vec<f32> = (0..*s).map(|t| (t < len) as u8 as f32).collect();
        let out = xla_aot::interp::evaluate(
            m,
            &[
                Literal::from_f32(vec![1, *s, C], &xs),
                Literal::from_f32(vec![1, *s], &mask),
            ],
        )
        .unwrap();
        let h = out[0].to_f32_vec().unwrap();
        let pooled = out[1].to_f32_vec().unwrap();
        expected.extend_from_slice(&h[..len * C]);
        expected.extend_from_slice(&pooled);
        pooled_by_len.push(pooled);
    }
    assert!(pooled_by_len.iter().all(|p| p.len() == C));
    let dir = scratch("seq");
    std::fs::write(
        dir.join("x.bin"),
        x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
    )
    .unwrap();
    std::fs::write(dir.join("main.c"), HARNESS).unwrap();
    // The multi-ISA targets: the sequence buckets once per variant, behind the ISA dispatch.
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
        let art = xla_aot::compile::compile_model_buckets(
            &model.module,
            &model.buckets,
            model.seq.as_ref(),
            &t,
            &common::default_options(),
        )
        .unwrap();
        let d = dir.join(target);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("libsq.a"), &art.archive).unwrap();
        std::fs::write(d.join("sq.h"), &art.header).unwrap();
        let (cc, runner) = common::toolchain(&t);
        let exe = d.join("seq_harness");
        let r = Command::new(&cc)
            .args(["-O1", "-std=c11", "-Wall", "-Werror"])
            .arg(format!("-I{}", d.display()))
            .arg(dir.join("main.c"))
            .arg(d.join("libsq.a"))
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap();
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
        let mut cmd = if runner.is_empty() {
            Command::new(&exe)
        } else {
            let mut c = Command::new(&runner[0]);
            c.args(&runner[1..]).arg(&exe);
            c
        };
        let out = d.join("out.bin");
        let r = cmd.arg(dir.join("x.bin")).arg(&out).output().unwrap();
        assert!(
            r.status.success(),
            "{target}: {:?} {}",
            r.status,
            String::from_utf8_lossy(&r.stderr)
        );
        let got = f32s(&std::fs::read(&out).unwrap());
        assert_eq!(got.len(), expected.len(), "{target}");
        for (k, (a, e)) in got.iter().zip(&expected).enumerate() {
            assert!(
                (a - e).abs() <= 1e-5 * (1.0 + e.abs()),
                "{target}: value {k}: {a} vs {e}"
            );
        }
    }
    // Padding never leaks: the pooled mean for a length is the same from every bucket holding it.
    for len in 1..=8 {
        let mut means = Vec::new();
        for (s, m) in &model.buckets {
            let mut xs = vec![0f32; s * C];
            xs[..len * C].copy_from_slice(&x[..len * C]);
            for v in xs[len * C..].iter_mut() {
                *v = 100.0; // garbage in the padding: the mask must hide it
            }
            let mask: Vec<f32> = (0..*s).map(|t| (t < len) as u8 as f32).collect();
            let out = xla_aot::interp::evaluate(
                m,
                &[
                    Literal::from_f32(vec![1, *s, C], &xs),
                    Literal::from_f32(vec![1, *s], &mask),
                ],
            )
            .unwrap();
            means.push(out[1].to_f32_vec().unwrap());
        }
        for m in &means[1..] {
            for (a, b) in m.iter().zip(&means[0]) {
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "len {len}: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn seq_spec_errors_name_the_problem() {
    let text = spec();
    for (from, to, want) in [
        (
            "sizes: [8, 16, 32]",
            "sizes: [8, 32]",
            "written for length 16, which is not in `sizes`",
        ),
        (
            "inputs: [x], outputs",
            "inputs: [y], outputs",
            "`y` is not an input of the spec",
        ),
        (
            "mask: mask}",
            "mask: x}",
            "must be an f32 input whose last dim is the length",
        ),
        ("outputs: [h], mask", "outputs: [], mask", "output `h` is"),
    ] {
        let t = text.replace(from, to);
        let e = spec_from_str(Path::new("sq.yaml"), &t)
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{to}: {e}");
    }
    let both = text.replace("seq_buckets:", "batch_sizes: [1]\nseq_buckets:");
    let e = spec_from_str(Path::new("sq.yaml"), &both)
        .unwrap_err()
        .to_string();
    assert!(e.contains("not both"), "{e}");
}
