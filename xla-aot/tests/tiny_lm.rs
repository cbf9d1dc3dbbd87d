//! examples/tiny_lm: the 64-token decoding loop (examples/tiny_lm/main.c around the compiled model
//! step) prints the same token ids on x86_64-avx2, x86_64-avx512 (where this CPU runs it; it is
//! compiled and linked everywhere) and aarch64-neon (under qemu), and the same as the same loop
//! run on the reference interpreter.

mod common;

use common::{repo, scratch};
use std::process::Command;
use xla_aot::front::load_spec;
use xla_aot::ir::Literal;
use xla_aot::target::Target;

/// Positions the model was compiled with (`pos_onehot` is [1, MAX_SEQ]).
const MAX_SEQ: usize = 64;

/// (seed, temperature, top_k, top_p) of each checked loop.
const CONFIGS: [(i32, f32, i32, f32); 3] = [(1, 0.8, 20, 0.95), (7, 1.0, 0, 0.9), (3, 0.0, 0, 1.0)];

fn interpreter_loop(seed: i32, t: f32, k: i32, p: f32) -> Vec<i32> {
    let m = load_spec(&repo().join("examples/tiny_lm/model.yaml"))
        .unwrap()
        .module;
    let mut caches: Vec<Literal> = (0..4)
        .map(|_| Literal::from_f32(vec![2, MAX_SEQ, 16], &[0.0; 2 * MAX_SEQ * 16]))
        .collect();
    let mut token = 0;
    let mut out = Vec::new();
    for step in 0..MAX_SEQ {
        let onehot: Vec<f32> = (0..MAX_SEQ).map(|i| (i == step) as u8 as f32).collect();
        let mask: Vec<f32> = (0..MAX_SEQ)
            .map(|i| if i <= step { 0.0 } else { -1e9 })
            .collect();
        let mut inputs = vec![
            Literal::from_i32(vec![1], &[token]),
            Literal::from_f32(vec![1, MAX_SEQ], &onehot),
            Literal::from_f32(vec![1, MAX_SEQ], &mask),
        ];
        inputs.extend(caches.iter().cloned());
        inputs.push(Literal::from_i32(vec![], &[seed]));
        inputs.push(Literal::from_i32(vec![], &[step as i32]));
        inputs.push(Literal::from_f32(vec![], &[t]));
        inputs.push(Literal::from_i32(vec![], &[k]));
        inputs.push(Literal::from_f32(vec![], &[p]));
        let mut outs = xla_aot::interp::evaluate(&m, &inputs).unwrap();
        token = outs[0].to_i32_vec().unwrap()[0];
        out.push(token);
        caches = outs.split_off(1);
    }
    out
}

/// Builds examples/tiny_lm for `target` in `dir`; returns the program (and whether it can run).
fn build(target: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let ex = repo().join("examples/tiny_lm");
    let r = Command::new(env!("CARGO_BIN_EXE_xla-aot"))
        .args(["compile", "--target", target, "--out-dir"])
        .arg(dir)
        .arg(ex.join("model.yaml"))
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let cc = if target.starts_with("aarch64") {
        "aarch64-linux-gnu-gcc"
    } else {
        "cc"
    };
    let exe = dir.join("tiny_lm");
    let r = Command::new(cc)
        .args(["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg(format!("-I{}", dir.display()))
        .arg(ex.join("main.c"))
        .arg(dir.join("libtiny_lm.a"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} ({e}); install it as .ci/run does"));
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    exe
}

fn tokens_of(stdout: &[u8]) -> Vec<i32> {
    let text = String::from_utf8_lossy(stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("tokens:"))
        .unwrap_or_else(|| panic!("no `tokens:` line in:\n{text}"));
    line.split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect()
}

#[test]
fn the_decoding_loop_prints_the_same_tokens_everywhere() {
    let dir = scratch("tiny_lm");
    let mut programs = Vec::new();
    for target in ["x86_64-avx2", "x86_64-avx512", "aarch64-neon"] {
        let d = dir.join(target);
        std::fs::create_dir_all(&d).unwrap();
        let exe = build(target, &d);
        let t = Target::resolve(target).unwrap();
        if t.arch == xla_aot::target::Arch::X86_64 && !t.runs_here() {
            eprintln!("note: this CPU cannot run {target}; built and linked, not run");
            continue;
        }
        programs.push((target, exe));
    }
    for (seed, t, k, p) in CONFIGS {
        let want = interpreter_loop(seed, t, k, p);
        assert_eq!(want.len(), MAX_SEQ);
        eprintln!("seed {seed} T={t} k={k} p={p}: {want:?}");
        for (target, exe) in &programs {
            let mut cmd = if target.starts_with("aarch64") {
                let mut c = Command::new("qemu-aarch64");
                c.args(["-L", "/usr/aarch64-linux-gnu"]).arg(exe);
                c
            } else {
                Command::new(exe)
            };
            let r = cmd
                .args(["--no-timing", "--seed", &seed.to_string()])
                .args(["--temperature", &t.to_string(), "--top-k", &k.to_string()])
                .args(["--top-p", &p.to_string()])
                .output()
                .unwrap();
            assert!(
                r.status.success(),
                "{target}: {}",
                String::from_utf8_lossy(&r.stderr)
            );
            assert_eq!(tokens_of(&r.stdout), want, "{target}, seed {seed}");
        }
    }
    // Greedy decoding is the argmax every step: a different seed changes nothing.
    assert_eq!(
        interpreter_loop(3, 0.0, 0, 1.0),
        interpreter_loop(99, 0.0, 0, 1.0)
    );
}

#[test]
fn bad_arguments_are_refused_with_usage() {
    let dir = scratch("tiny_lm_args");
    let exe = build("x86_64", &dir);
    for args in [
        &["--top-p", "2"][..],
        &["--tokens", "65"],
        &["--seed"],
        &["--frobnicate", "1"],
    ] {
        let r = Command::new(&exe).args(args).output().unwrap();
        assert_eq!(r.status.code(), Some(1), "{args:?}");
        assert!(
            String::from_utf8_lossy(&r.stderr).contains("usage: tiny_lm"),
            "{args:?}"
        );
    }
}
