//! `sample` against the distribution it promises: with fixed logits and 100k draws (one per row,
//! the row being the generator's counter), the empirical frequencies match the analytic
//! temperature / top-k / top-p distribution (chi-square, p > 0.001), compiled for the host and
//! for aarch64 (under qemu), and every compiled draw equals the interpreter's.

mod common;

use std::path::Path;
use xla_aot::front::spec_from_str;
use xla_aot::ir::{Literal, Module};
use xla_aot::target::Target;

/// Draws per configuration (the number).
const DRAWS: usize = 100_000;
/// The chi-square test's significance level: a correct sampler fails it once in 1000 runs per
/// configuration; the draws are deterministic, so a pass is a pass forever.
const ALPHA: f64 = 0.001;

/// Logits with well separated probabilities (no filter boundary is near a tie).
const LOGITS: [f32; 8] = [2.0, 1.0, 0.5, 0.0, -0.5, -1.0, 1.5, 0.2];

/// (temperature, top_k, top_p).
const CONFIGS: [(f32, i32, f32); 4] = [(0.7, 0, 1.0), (1.0, 3, 1.0), (1.3, 0, 0.8), (1.0, 5, 0.6)];

fn model(t: f32, k: i32, p: f32) -> Module {
    let text = format!(
        "name: sampler\ninputs:\n  - {{name: logits, dtype: f32, shape: [{DRAWS}, {}]}}\n  - {{name: seed, dtype: i32, shape: []}}\n  - {{name: step, dtype: i32, shape: []}}\noutputs: [token]\nops:\n  - {{name: token, op: sample, inputs: [logits, seed, step], temperature: {t}, top_k: {k}, top_p: {p}}}\n",
        LOGITS.len()
    );
    spec_from_str(Path::new("sampler.yaml"), &text)
        .unwrap()
        .module
}

/// The analytic distribution of the definition (docs/sampling.md), in f64.
fn distribution(t: f32, k: i32, p: f32) -> Vec<f64> {
    let z: Vec<f64> = LOGITS.iter().map(|&x| x as f64 / t as f64).collect();
    let mut sorted = z.clone();
    sorted.sort_by(|a, b| b.partial_cmp(a).unwrap());
    let tau = if k > 0 && (k as usize) < z.len() {
        sorted[k as usize - 1]
    } else {
        f64::NEG_INFINITY
    };
    let m = sorted[0];
    let mut w: Vec<f64> = z
        .iter()
        .map(|&x| if x >= tau { (x - m).exp() } else { 0.0 })
        .collect();
    if p > 0.0 && p < 1.0 {
        let total: f64 = w.iter().sum();
        let mut ws: Vec<f64> = w.clone();
        ws.sort_by(|a, b| b.partial_cmp(a).unwrap());
        // The largest threshold whose weights at or above it reach p · total.
        let mut acc = 0.0;
        let mut thr = 0.0;
        for x in ws {
            acc += x;
            thr = x;
            if acc >= p as f64 * total {
                break;
            }
        }
        for x in w.iter_mut() {
            if *x < thr {
                *x = 0.0;
            }
        }
    }
    let total: f64 = w.iter().sum();
    w.iter().map(|x| x / total).collect()
}

/// ln Γ(a) (Lanczos, g = 7, n = 9; accurate to ~1e-15 for a > 0).
fn ln_gamma(a: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = a - 1.0;
    let mut s = C[0];
    for (i, c) in C.iter().enumerate().skip(1) {
        s += c / (x + i as f64);
    }
    let t = x + 7.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + s.ln()
}

/// The regularised upper incomplete gamma Q(a, x) (series below a + 1, continued fraction above).
fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let lead = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut sum, mut term, mut n) = (1.0 / a, 1.0 / a, a);
        for _ in 0..1000 {
            n += 1.0;
            term *= x / n;
            sum += term;
            if term.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        1.0 - sum * lead
    } else {
        // Lentz's method.
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..1000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-15 {
                break;
            }
        }
        lead * h
    }
}

/// The p-value of the draws under `probs`; tokens outside the support fail outright.
fn chi_square_p(tokens: &[i32], probs: &[f64]) -> Result<f64, String> {
    let mut counts = vec![0usize; probs.len()];
    for &t in tokens {
        let t = t as usize;
        if t >= probs.len() || probs[t] == 0.0 {
            return Err(format!("token {t} is outside the support {probs:?}"));
        }
        counts[t] += 1;
    }
    let n = tokens.len() as f64;
    let mut stat = 0.0;
    let mut cells = 0;
    for (c, &p) in counts.iter().zip(probs) {
        if p > 0.0 {
            let e = n * p;
            stat += (*c as f64 - e).powi(2) / e;
            cells += 1;
        }
    }
    if cells < 2 {
        return Ok(1.0);
    }
    Ok(gamma_q((cells - 1) as f64 / 2.0, stat / 2.0))
}

fn inputs() -> Vec<Literal> {
    let rows: Vec<f32> = (0..DRAWS).flat_map(|_| LOGITS).collect();
    vec![
        Literal::from_f32(vec![DRAWS, LOGITS.len()], &rows),
        Literal::from_i32(vec![], &[1234]),
        Literal::from_i32(vec![], &[7]),
    ]
}

#[test]
fn the_gamma_function_and_q_are_right() {
    // Γ(5) = 24; Q(1, x) = e^-x; Q(k/2, x/2) for df = 2 is e^(-x/2).
    assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12);
    for x in [0.1, 1.0, 3.0, 10.0] {
        assert!((gamma_q(1.0, x) - (-x).exp()).abs() < 1e-12, "{x}");
    }
    // The chi-square critical value for df = 7 at p = 0.001 is 24.322.
    assert!((gamma_q(3.5, 24.322 / 2.0) - 0.001).abs() < 2e-6);
}

#[test]
fn draws_follow_the_analytic_distribution_on_the_host_and_on_aarch64() {
    let inputs = inputs();
    let mut targets = vec![Target::resolve("host").unwrap()];
    targets.push(Target::resolve("aarch64-neon").unwrap());
    for (t, k, p) in CONFIGS {
        let m = model(t, k, p);
        let probs = distribution(t, k, p);
        let reference = xla_aot::interp::evaluate(&m, &inputs).unwrap();
        let ref_tokens = reference[0].to_i32_vec().unwrap();
        let pv = chi_square_p(&ref_tokens, &probs).unwrap();
        eprintln!("T={t} k={k} p={p}: interpreter p-value {pv:.4} ({probs:.3?})");
        assert!(
            pv > ALPHA,
            "interpreter: p-value {pv} for T={t} k={k} p={p}"
        );
        for target in &targets {
            let out = common::run_compiled(&m, target, &inputs, &format!("sample-{}", target.name));
            let tokens = out[0].to_i32_vec().unwrap();
            let pv = chi_square_p(&tokens, &probs)
                .unwrap_or_else(|e| panic!("{} T={t} k={k} p={p}: {e}", target.name));
            eprintln!("  {}: p-value {pv:.4}", target.name);
            assert!(
                pv > ALPHA,
                "{}: p-value {pv} for T={t} k={k} p={p}",
                target.name
            );
            let differ = tokens
                .iter()
                .zip(&ref_tokens)
                .filter(|(a, b)| a != b)
                .count();
            assert_eq!(
                differ, 0,
                "{}: {differ} of {DRAWS} draws differ from the interpreter's",
                target.name
            );
        }
    }
}

#[test]
fn greedy_and_top_k_one_are_argmax() {
    let inputs = inputs();
    for (t, k) in [(0.0, 0), (1.0, 1)] {
        let m = model(t, k, 1.0);
        let out = xla_aot::compile::run_host(&m, &inputs).unwrap();
        assert!(out[0].to_i32_vec().unwrap().iter().all(|&x| x == 0));
    }
}

/// Edge rows (review findings): NaN first in a top-k row, +inf and all -inf logits, a weight
/// below the smallest normal float: compiled and interpreted results are identical bytes.
#[test]
fn edge_rows_agree_compiled_and_interpreted() {
    let text = "name: edges\ninputs:\n  - {name: logits, dtype: f32, shape: [5, 4]}\n  - {name: seed, dtype: i32, shape: []}\n  - {name: step, dtype: i32, shape: []}\noutputs: [token, values, indices]\nops:\n  - {name: token, op: sample, inputs: [logits, seed, step], temperature: 1.0}\n  - {name: values, op: top_k, inputs: [logits], k: 4}\n  - {name: indices, op: top_k_indices, inputs: [logits], k: 4}\n";
    let m = spec_from_str(Path::new("edges.yaml"), text).unwrap().module;
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    #[rustfmt::skip]
    let rows = [
        nan, 1.0, nan, -inf,
        0.0, inf, 1.0, inf,
        -inf, -inf, -inf, -inf,
        -90.0, 0.0, -95.0, -1.0,
        2.0, 2.0, 2.0, 2.0,
    ];
    for step in 0..50 {
        let inputs = vec![
            Literal::from_f32(vec![5, 4], &rows),
            Literal::from_i32(vec![], &[12121362]),
            Literal::from_i32(vec![], &[step]),
        ];
        let want = xla_aot::interp::evaluate(&m, &inputs).unwrap();
        let got = xla_aot::compile::run_host(&m, &inputs).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.bytes(), w.bytes(), "output {i} at step {step}");
        }
        let idx = want[2].to_i32_vec().unwrap();
        assert_eq!(&idx[..4], &[0, 2, 1, 3], "NaNs rank first, in index order");
        let tok = want[0].to_i32_vec().unwrap();
        assert!(tok[1] == 1 || tok[1] == 3, "a +inf logit wins: {}", tok[1]);
    }
}
