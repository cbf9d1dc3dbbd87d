//! Accuracy of the inline math of generated code (`codegen/core/math.rs`), measured against the
//! reference interpreter (f64 math rounded once to f32) over dense sweeps of each function's
//! useful range. The bounds asserted here are the ones documented in docs/codegen.md.

mod common;

use xla_aot::compile::run_host;
use xla_aot::front::spec_from_str;
use xla_aot::interp::evaluate;
use xla_aot::ir::Literal;

/// Points per function.
const POINTS: usize = 1 << 16;

/// Largest error in units of the reference's last place (|reference| · 2^-23), ignoring elements
/// whose absolute error is at most `atol`.
fn max_ulp(got: &[f32], want: &[f32], atol: f32) -> (f64, usize) {
    let mut worst = (0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() || g.is_nan() {
            assert_eq!(w.is_nan(), g.is_nan(), "NaN mismatch at {i}: {g} vs {w}");
            continue;
        }
        if w.is_infinite() || g.is_infinite() {
            assert_eq!(g, w, "at {i}");
            continue;
        }
        let d = ((g as f64) - (w as f64)).abs();
        if d <= atol as f64 {
            continue;
        }
        let ulp = (w.abs() as f64 * f32::EPSILON as f64).max(f32::MIN_POSITIVE as f64);
        let e = d / ulp;
        if e > worst.0 {
            worst = (e, i);
        }
    }
    worst
}

#[test]
fn inline_math_is_within_its_documented_bounds() {
    // (op, lowest input, highest input, max ulp, absolute error always accepted)
    let cases: &[(&str, f32, f32, f64, f32)] = &[
        ("exp", -87.0, 88.0, 2.0, 0.0),
        ("log", 1e-30, 1e30, 2.0, 0.0),
        ("tanh", -10.0, 10.0, 3.0, 0.0),
        ("sigmoid", -80.0, 80.0, 3.0, 0.0),
        // erf: relative error near 0 (series), absolute 1.5e-7 where |erf| >= 0.84 (A&S 7.1.26):
        // that is ≤ 2 ulp of 1.0, so 3 ulp overall.
        ("erf", -6.0, 6.0, 3.0, 0.0),
        // gelu: where 1 + erf cancels (x << 0) erf's absolute error 1.5e-7, scaled by 0.5|x| ≤ 4,
        // stays absolute: up to 6e-7 on outputs that are themselves ~0.
        ("gelu", -8.0, 8.0, 4.0, 6e-7),
        // softplus = max(x, 0) + log1p(e^-|x|): exp's and log's errors, and one rounding each of
        // 1 + t, the quotient and the sum; the sweep covers both tails (e^x underflows below -87).
        ("softplus", -100.0, 100.0, 3.0, 0.0),
        // sin, cos: Cephes' reduction and polynomials. The third part of π/4 is an f32, 2⁻²⁴
        // of 3.8e-8 off, times the octant (≤ 10,431 for |x| ≤ 8192): 2.4e-11 absolute, which
        // near a zero of the result is several ulp.
        ("sin", -100.0, 100.0, 2.0, 0.0),
        ("cos", -100.0, 100.0, 2.0, 0.0),
        ("sin", -8192.0, 8192.0, 2.0, 2.5e-11),
        ("cos", -8192.0, 8192.0, 2.0, 2.5e-11),
    ];
    let mut lines = Vec::new();
    for &(op, lo, hi, bound, atol) in cases {
        let spec = format!(
            "name: m\ninputs:\n  - {{name: x, dtype: f32, shape: [{POINTS}]}}\noutputs: [y]\nops:\n  - {{name: y, op: {op}, inputs: [x]}}\n"
        );
        let m = spec_from_str(std::path::Path::new("math.yaml"), &spec)
            .unwrap()
            .module;
        let xs: Vec<f32> = (0..POINTS)
            .map(|i| {
                let t = i as f64 / (POINTS - 1) as f64;
                if op == "log" {
                    // Geometric sweep over the positive range.
                    ((lo as f64).ln() + t * ((hi as f64).ln() - (lo as f64).ln())).exp() as f32
                } else {
                    (lo as f64 + t * (hi - lo) as f64) as f32
                }
            })
            .collect();
        let input = Literal::from_f32(vec![POINTS], &xs);
        let want = evaluate(&m, std::slice::from_ref(&input)).unwrap()[0]
            .to_f32_vec()
            .unwrap();
        let got = run_host(&m, &[input]).unwrap()[0].to_f32_vec().unwrap();
        let (ulps, at) = max_ulp(&got, &want, atol);
        lines.push(format!(
            "{op:<8} max {ulps:.2} ulp at x = {} (bound {bound})",
            xs[at]
        ));
        assert!(
            ulps <= bound,
            "{op}: {ulps:.2} ulp at x = {} (got {}, want {})",
            xs[at],
            got[at],
            want[at]
        );
    }
    // Special values.
    let spec = "name: m\ninputs:\n  - {name: x, dtype: f32, shape: [6]}\noutputs: [e, l, t, s, si, co]\nops:\n  - {name: e, op: exp, inputs: [x]}\n  - {name: l, op: log, inputs: [x]}\n  - {name: t, op: tanh, inputs: [x]}\n  - {name: s, op: softplus, inputs: [x]}\n  - {name: si, op: sin, inputs: [x]}\n  - {name: co, op: cos, inputs: [x]}\n";
    let m = spec_from_str(std::path::Path::new("special.yaml"), spec)
        .unwrap()
        .module;
    let x = Literal::from_f32(
        vec![6],
        &[f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -1.0, 100.0],
    );
    let got = run_host(&m, std::slice::from_ref(&x)).unwrap();
    let want = evaluate(&m, &[x]).unwrap();
    for (g, w) in got.iter().zip(&want) {
        let (g, w) = (g.to_f32_vec().unwrap(), w.to_f32_vec().unwrap());
        for (a, b) in g.iter().zip(&w) {
            assert!(
                a == b || (a.is_nan() && b.is_nan()),
                "special value: got {g:?}, want {w:?}"
            );
        }
    }
    eprintln!("{}", lines.join("\n"));
}
