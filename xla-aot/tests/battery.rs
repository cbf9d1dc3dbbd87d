//! Seeded randomized battery: every spec op with random shapes, strides, paddings, dilations,
//! groups, axes and broadcasts, compiled for every target this machine can run and compared with
//! the reference interpreter. Each round packs one random case of every op into one model (one
//! output per case), so a round costs one compilation per target. Set `XLA_AOT_BATTERY_ROUNDS` to
//! run more rounds than the default.

mod common;

use common::{check_close, run_compiled};
use std::fmt::Write as _;
use xla_aot::driver::random_input;
use xla_aot::front::{spec::op_kinds, spec_from_str};
use xla_aot::interp::evaluate;
use xla_aot::util::rng::SplitMix64;

/// Rounds per run: 3 rounds × 44 ops × 3 targets ≈ 380 compiled op instances.
const DEFAULT_ROUNDS: u64 = 3;

struct Gen {
    rng: SplitMix64,
    inputs: String,
    constants: String,
    ops: String,
    outputs: Vec<String>,
}

impl Gen {
    fn int(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.rng.below(hi - lo + 1)
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.rng.below(v.len())]
    }
    fn shape(&mut self, rank: usize, lo: usize, hi: usize) -> Vec<usize> {
        (0..rank).map(|_| self.int(lo, hi)).collect()
    }
    /// A shape of random rank in `rlo..=rhi`, dims in `lo..=hi`.
    fn shape_r(&mut self, rlo: usize, rhi: usize, lo: usize, hi: usize) -> Vec<usize> {
        let rank = self.int(rlo, rhi);
        self.shape(rank, lo, hi)
    }
    fn input(&mut self, name: &str, dtype: &str, shape: &[usize]) {
        let _ = writeln!(
            self.inputs,
            "  - {{name: {name}, dtype: {dtype}, shape: {shape:?}}}"
        );
    }
    fn constant(&mut self, name: &str, shape: &[usize], positive: bool) {
        let n: usize = shape.iter().product();
        let vals: Vec<String> = (0..n)
            .map(|_| {
                let v = self.rng.normal() * 0.5;
                format!("{:.6}", if positive { v.abs() + 0.5 } else { v })
            })
            .collect();
        let _ = writeln!(
            self.constants,
            "  - {{name: {name}, shape: {shape:?}, value: [{}]}}",
            vals.join(", ")
        );
    }
    fn op(&mut self, line: String, out: &str) {
        let _ = writeln!(self.ops, "  - {line}");
        self.outputs.push(out.to_string());
    }

    /// Appends one random case of `kind` with names prefixed `p`.
    fn case(&mut self, kind: &str, p: &str) {
        let x = format!("{p}x");
        let y = format!("{p}y");
        match kind {
            "conv2d" => {
                let groups = self.pick(&[1, 1, 2, 3]);
                let c = groups * self.int(1, 3);
                let depthwise = self.rng.below(4) == 0;
                let (groups, o) = if depthwise {
                    (c, c * self.int(1, 2))
                } else {
                    (groups, groups * self.int(1, 3))
                };
                let (kh, kw) = (self.int(1, 3), self.int(1, 3));
                let dil = [self.int(1, 2), self.int(1, 2)];
                let pads = [
                    self.int(0, 2),
                    self.int(0, 2),
                    self.int(0, 2),
                    self.int(0, 2),
                ];
                let h = (dil[0] * (kh - 1) + 1)
                    .saturating_sub(pads[0] + pads[2])
                    .max(1)
                    + self.int(0, 6);
                let w = (dil[1] * (kw - 1) + 1)
                    .saturating_sub(pads[1] + pads[3])
                    .max(1)
                    + self.int(0, 6);
                let n = self.int(1, 2);
                self.input(&x, "f32", &[n, c, h, w]);
                self.constant(&format!("{p}w"), &[o, c / groups, kh, kw], false);
                let bias = self.rng.below(2) == 0;
                if bias {
                    self.constant(&format!("{p}b"), &[o], false);
                }
                let strides = [self.int(1, 2), self.int(1, 2)];
                let inputs = if bias {
                    format!("[{x}, {p}w, {p}b]")
                } else {
                    format!("[{x}, {p}w]")
                };
                self.op(format!("{{name: {y}, op: conv2d, inputs: {inputs}, strides: {strides:?}, padding: {pads:?}, dilations: {dil:?}, groups: {groups}}}"), &y);
            }
            "batch_norm" => {
                let s = self.shape_r(2, 4, 1, 5);
                self.input(&x, "f32", &s);
                for (k, pos) in [("g", false), ("be", false), ("m", false), ("v", true)] {
                    self.constant(&format!("{p}{k}"), &[s[1]], pos);
                }
                self.op(format!("{{name: {y}, op: batch_norm, inputs: [{x}, {p}g, {p}be, {p}m, {p}v], epsilon: 0.001}}"), &y);
            }
            "dense" => {
                let mut s = self.shape_r(1, 3, 1, 5);
                let k = self.int(1, 40);
                s.push(k);
                let o = self.int(1, 40);
                self.input(&x, "f32", &s);
                self.constant(&format!("{p}w"), &[o, k], false);
                self.constant(&format!("{p}b"), &[o], false);
                self.op(
                    format!("{{name: {y}, op: dense, inputs: [{x}, {p}w, {p}b]}}"),
                    &y,
                );
            }
            "matmul" => {
                let (m, k, n) = (self.int(1, 9), self.int(1, 20), self.int(1, 9));
                let (ta, tb) = (self.rng.below(2) == 1, self.rng.below(2) == 1);
                let batch: Vec<usize> = self.shape_r(0, 2, 1, 3);
                let mut a = batch.clone();
                a.extend(if ta { [k, m] } else { [m, k] });
                let mut b: Vec<usize> = batch
                    .iter()
                    .map(|&d| if self.rng.below(3) == 0 { 1 } else { d })
                    .collect();
                if self.rng.below(3) == 0 && !b.is_empty() {
                    b.remove(0);
                }
                b.extend(if tb { [n, k] } else { [k, n] });
                let xb = format!("{p}b");
                self.input(&x, "f32", &a);
                self.input(&xb, "f32", &b);
                self.op(format!("{{name: {y}, op: matmul, inputs: [{x}, {xb}], transpose_a: {ta}, transpose_b: {tb}}}"), &y);
            }
            "add" | "sub" | "mul" | "div" | "maximum" | "minimum" | "pow" => {
                let out = self.shape_r(1, 4, 1, 6);
                let mut other: Vec<usize> = out
                    .iter()
                    .map(|&d| if self.rng.below(3) == 0 { 1 } else { d })
                    .collect();
                let drop = self.rng.below(other.len() + 1);
                other.drain(..drop);
                let xb = format!("{p}b");
                let (sa, sb) = if self.rng.below(2) == 0 {
                    (out.clone(), other)
                } else {
                    (other, out.clone())
                };
                self.input(&x, "f32", &sa);
                self.input(&xb, "f32", &sb);
                self.op(
                    format!("{{name: {y}, op: {kind}, inputs: [{x}, {xb}]}}"),
                    &y,
                );
            }
            "max_pool2d" | "avg_pool2d" => {
                let (kh, kw) = (self.int(1, 3), self.int(1, 3));
                let pads = [
                    self.int(0, kh - 1),
                    self.int(0, kw - 1),
                    self.int(0, kh - 1),
                    self.int(0, kw - 1),
                ];
                let s = [
                    self.int(1, 3),
                    self.int(1, 3),
                    kh + self.int(0, 6),
                    kw + self.int(0, 6),
                ];
                self.input(&x, "f32", &s);
                let strides = [self.int(1, 3), self.int(1, 3)];
                let extra = if kind == "avg_pool2d" {
                    format!(", count_include_pad: {}", self.rng.below(2) == 1)
                } else {
                    String::new()
                };
                self.op(format!("{{name: {y}, op: {kind}, inputs: [{x}], kernel_size: [{kh}, {kw}], strides: {strides:?}, padding: {pads:?}{extra}}}"), &y);
            }
            "global_avg_pool" => {
                let s = self.shape(4, 1, 6);
                self.input(&x, "f32", &s);
                self.op(
                    format!("{{name: {y}, op: global_avg_pool, inputs: [{x}]}}"),
                    &y,
                );
            }
            "softmax" | "log_softmax" | "argmax" => {
                let s = self.shape_r(1, 4, 1, 7);
                let axis = self.int(0, s.len() - 1) as i64
                    - if self.rng.below(2) == 0 {
                        s.len() as i64
                    } else {
                        0
                    };
                self.input(&x, "f32", &s);
                let keep = if kind == "argmax" {
                    format!(", keepdims: {}", self.rng.below(2) == 1)
                } else {
                    String::new()
                };
                self.op(
                    format!("{{name: {y}, op: {kind}, inputs: [{x}], axis: {axis}{keep}}}"),
                    &y,
                );
            }
            "layer_norm" => {
                let s = self.shape_r(1, 4, 1, 7);
                let axis = self.int(0, s.len() - 1);
                self.input(&x, "f32", &s);
                self.constant(&format!("{p}g"), &s[axis..], false);
                self.constant(&format!("{p}be"), &s[axis..], false);
                self.op(format!("{{name: {y}, op: layer_norm, inputs: [{x}, {p}g, {p}be], axis: {axis}, epsilon: 0.0001}}"), &y);
            }
            "reduce_sum" | "reduce_mean" | "reduce_max" => {
                let s = self.shape_r(1, 4, 1, 6);
                let mut axes: Vec<usize> =
                    (0..s.len()).filter(|_| self.rng.below(2) == 0).collect();
                if axes.is_empty() {
                    axes.push(0);
                }
                self.input(&x, "f32", &s);
                let keep = self.rng.below(2) == 1;
                self.op(
                    format!(
                        "{{name: {y}, op: {kind}, inputs: [{x}], axes: {axes:?}, keepdims: {keep}}}"
                    ),
                    &y,
                );
            }
            "reshape" | "flatten" => {
                let s = self.shape_r(1, 4, 1, 5);
                self.input(&x, "f32", &s);
                if kind == "reshape" {
                    let n: usize = s.iter().product();
                    self.op(
                        format!(
                            "{{name: {y}, op: reshape, inputs: [{x}], shape: [-1, {}]}}",
                            s[s.len() - 1].min(n)
                        ),
                        &y,
                    );
                } else {
                    let axis = self.int(0, s.len());
                    self.op(
                        format!("{{name: {y}, op: flatten, inputs: [{x}], axis: {axis}}}"),
                        &y,
                    );
                }
            }
            "transpose" => {
                let s = self.shape_r(1, 4, 1, 5);
                let mut perm: Vec<usize> = (0..s.len()).collect();
                for i in (1..perm.len()).rev() {
                    let j = self.rng.below(i + 1);
                    perm.swap(i, j);
                }
                self.input(&x, "f32", &s);
                self.op(
                    format!("{{name: {y}, op: transpose, inputs: [{x}], perm: {perm:?}}}"),
                    &y,
                );
            }
            "concat" => {
                let s = self.shape_r(1, 3, 1, 4);
                let axis = self.int(0, s.len() - 1);
                let n = self.int(1, 3);
                let mut names = Vec::new();
                for j in 0..n {
                    let mut sj = s.clone();
                    sj[axis] = self.int(1, 4);
                    let nm = format!("{p}in{j}");
                    self.input(&nm, "f32", &sj);
                    names.push(nm);
                }
                self.op(
                    format!(
                        "{{name: {y}, op: concat, inputs: [{}], axis: {axis}}}",
                        names.join(", ")
                    ),
                    &y,
                );
            }
            "slice" => {
                let s = self.shape_r(1, 4, 2, 8);
                let ax = self.int(0, s.len() - 1);
                let start = self.int(0, s[ax] - 1) as i64
                    - if self.rng.below(2) == 0 {
                        s[ax] as i64
                    } else {
                        0
                    };
                let end = s[ax] as i64 + self.int(0, 3) as i64;
                let step = self.int(1, 3);
                self.input(&x, "f32", &s);
                self.op(format!("{{name: {y}, op: slice, inputs: [{x}], starts: [{start}], ends: [{end}], axes: [{ax}], steps: [{step}]}}"), &y);
            }
            "pad" => {
                let s = self.shape_r(1, 4, 1, 5);
                let pads: Vec<usize> = (0..2 * s.len()).map(|_| self.int(0, 2)).collect();
                self.input(&x, "f32", &s);
                self.op(
                    format!("{{name: {y}, op: pad, inputs: [{x}], pads: {pads:?}, value: 0.75}}"),
                    &y,
                );
            }
            "top_k" | "top_k_indices" => {
                let s = self.shape_r(1, 3, 1, 7);
                let k = self.int(1, *s.last().unwrap());
                self.input(&x, "f32", &s);
                self.op(
                    format!("{{name: {y}, op: {kind}, inputs: [{x}], k: {k}}}"),
                    &y,
                );
            }
            "sample" => {
                let s = self.shape_r(1, 3, 1, 9);
                self.input(&x, "f32", &s);
                self.input(&format!("{p}seed"), "i32", &[]);
                self.input(&format!("{p}step"), "i32", &[]);
                let t = self.rng.unit() * 1.5;
                let k = self.int(0, *s.last().unwrap());
                let top_p = self.pick(&["1.0", "0.9", "0.5"]);
                self.op(
                    format!("{{name: {y}, op: sample, inputs: [{x}, {p}seed, {p}step], temperature: {t:.3}, top_k: {k}, top_p: {top_p}}}"),
                    &y,
                );
            }
            "embedding" => {
                let (v, d) = (self.int(1, 10), self.int(1, 8));
                let s = self.shape_r(1, 3, 1, 5);
                self.input(&x, "i32", &s);
                self.constant(&format!("{p}t"), &[v, d], false);
                self.op(
                    format!("{{name: {y}, op: embedding, inputs: [{x}, {p}t]}}"),
                    &y,
                );
            }
            "quantize" | "dequantize" => {
                // Per tensor or per channel (axis 1), with or without a zero point, u8 or i8;
                // `dequantize` reads a `quantize` of its own (per tensor) first.
                let s = self.shape_r(1, 4, 1, 6);
                self.input(&x, "f32", &s);
                let per_channel = s.len() >= 2 && self.rng.below(2) == 0;
                let sd: Vec<usize> = if per_channel { vec![s[1]] } else { Vec::new() };
                let n: usize = sd.iter().product();
                let scales: Vec<String> = (0..n)
                    .map(|_| format!("{:.4}", 0.01 + 0.05 * self.rng.unit()))
                    .collect();
                let _ = writeln!(
                    self.constants,
                    "  - {{name: {p}s, shape: {sd:?}, value: [{}]}}",
                    scales.join(", ")
                );
                let dtype = self.pick(&["u8", "i8"]);
                let zp = if self.rng.below(2) == 0 {
                    let z = if dtype == "u8" { 128 } else { -3 };
                    let _ = writeln!(self.constants, "  - {{name: {p}z, value: {z}, dtype: i32}}");
                    format!(", {p}z")
                } else {
                    String::new()
                };
                let axis = if per_channel { ", axis: 1" } else { "" };
                if kind == "quantize" {
                    self.op(
                        format!("{{name: {y}, op: quantize, inputs: [{x}, {p}s{}], dtype: {dtype}{axis}}}", if per_channel { "" } else { &zp }),
                        &y,
                    );
                } else {
                    let _ = writeln!(self.constants, "  - {{name: {p}t, value: 0.03}}");
                    let _ = writeln!(
                        self.ops,
                        "  - {{name: {p}q, op: quantize, inputs: [{x}, {p}t{zp}], dtype: {dtype}}}"
                    );
                    self.op(
                        format!("{{name: {y}, op: dequantize, inputs: [{p}q, {p}s]{axis}}}"),
                        &y,
                    );
                }
            }
            "leaky_relu" | "clamp" | "gelu" => {
                let s = self.shape_r(1, 4, 1, 6);
                self.input(&x, "f32", &s);
                let attr = match kind {
                    "leaky_relu" => format!(", alpha: {:.3}", self.rng.unit() * 0.5),
                    "clamp" => ", min: -0.5, max: 0.75".to_string(),
                    _ => format!(", approximate: {}", self.pick(&["none", "tanh"])),
                };
                self.op(
                    format!("{{name: {y}, op: {kind}, inputs: [{x}]{attr}}}"),
                    &y,
                );
            }
            _ => {
                // Unary ops.
                let s = self.shape_r(1, 4, 1, 9);
                self.input(&x, "f32", &s);
                self.op(format!("{{name: {y}, op: {kind}, inputs: [{x}]}}"), &y);
            }
        }
    }
}

/// One random model holding one case of every op.
fn random_spec(seed: u64) -> String {
    let mut g = Gen {
        rng: SplitMix64(seed),
        inputs: String::new(),
        constants: String::new(),
        ops: String::new(),
        outputs: Vec::new(),
    };
    for (i, kind) in op_kinds().enumerate() {
        g.case(kind, &format!("c{i}_"));
    }
    let mut s = format!("name: battery_{seed}\ninputs:\n{}", g.inputs);
    s.push_str(&format!("outputs: [{}]\n", g.outputs.join(", ")));
    if !g.constants.is_empty() {
        s.push_str(&format!("constants:\n{}", g.constants));
    }
    s.push_str(&format!("ops:\n{}", g.ops));
    s
}

#[test]
fn random_ops_match_the_interpreter_on_every_target() {
    let rounds = std::env::var("XLA_AOT_BATTERY_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ROUNDS);
    let targets = common::compiled_targets();
    let mut failures = Vec::new();
    for round in 0..rounds {
        let text = random_spec(round);
        let path = std::env::temp_dir().join(format!("battery_{round}.yaml"));
        let m = spec_from_str(&path, &text)
            .unwrap_or_else(|e| panic!("round {round}: generated spec is invalid:\n{e}\n{text}"))
            .module;
        let inputs: Vec<_> = m
            .entry
            .parameters()
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let s = &m.entry.inst(p).shape;
                let mut lit = random_input(s.dtype, &s.dims, round * 1000 + i as u64);
                if s.dtype == xla_aot::ir::DType::I32 {
                    // Ids in [-2, 13]: some out of range, exercising the clamp.
                    let v: Vec<i32> = lit.to_i32_vec().unwrap().iter().map(|&x| x - 2).collect();
                    lit = xla_aot::ir::Literal::from_i32(s.dims.clone(), &v);
                }
                lit
            })
            .collect();
        let expected = evaluate(&m, &inputs).unwrap();
        for t in &targets {
            let actual = run_compiled(&m, t, &inputs, &format!("battery{round}-{}", t.name));
            for ((o, a), e) in m.entry.outputs.iter().zip(&actual).zip(&expected) {
                if let Err(msg) = check_close(a, e) {
                    failures.push(format!("round {round} {} on {}: {msg}", o.name, t.name));
                }
            }
        }
        if !failures.is_empty() {
            failures.push(format!("spec of round {round}:\n{text}"));
            break;
        }
    }
    eprintln!(
        "{} rounds x {} ops x {} targets",
        rounds,
        op_kinds().count(),
        targets.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A random graph of ops over tensors of one shape, where ops take any earlier tensor and some
/// intermediates are also outputs: exercises fusion with several consumers, duplication and
/// stored producers.
fn random_graph(seed: u64) -> String {
    let mut rng = SplitMix64(seed);
    let (rows, cols) = (1 + rng.below(4), 2 + rng.below(7));
    let mut s = format!(
        "name: graph_{seed}\ninputs:\n  - {{name: x0, dtype: f32, shape: [{rows}, {cols}]}}\n  - {{name: x1, dtype: f32, shape: [{rows}, {cols}]}}\n"
    );
    let mut w = Vec::new();
    for v in 0..cols * cols {
        w.push(format!(
            "{:.4}",
            ((v * 7 + seed as usize) % 13) as f64 / 13.0 - 0.5
        ));
    }
    s.push_str(&format!(
        "constants:\n  - {{name: w, shape: [{cols}, {cols}], value: [{}]}}\n  - {{name: half, value: 0.5}}\n",
        w.join(", ")
    ));
    s.push_str("ops:\n");
    let mut names = vec!["x0".to_string(), "x1".to_string()];
    let mut outputs = Vec::new();
    let n = 6 + rng.below(10);
    for i in 0..n {
        let a = names[rng.below(names.len())].clone();
        let b = names[rng.below(names.len())].clone();
        let y = format!("t{i}");
        let line = match rng.below(12) {
            0 => format!("{{name: {y}, op: add, inputs: [{a}, {b}]}}"),
            1 => format!("{{name: {y}, op: mul, inputs: [{a}, {b}]}}"),
            2 => format!("{{name: {y}, op: sub, inputs: [{a}, {b}]}}"),
            3 => format!("{{name: {y}, op: maximum, inputs: [{a}, {b}]}}"),
            4 => format!("{{name: {y}, op: tanh, inputs: [{a}]}}"),
            5 => format!("{{name: {y}, op: exp, inputs: [{a}]}}"),
            6 => format!("{{name: {y}, op: relu, inputs: [{a}]}}"),
            7 => format!("{{name: {y}, op: softmax, inputs: [{a}], axis: -1}}"),
            8 => format!("{{name: {y}, op: layer_norm, inputs: [{a}]}}"),
            9 => format!("{{name: {y}, op: dense, inputs: [{a}, w]}}"),
            10 => format!("{{name: {y}, op: mul, inputs: [{a}, half]}}"),
            _ => format!("{{name: {y}, op: gelu, inputs: [{a}]}}"),
        };
        s.push_str(&format!("  - {line}\n"));
        if rng.below(4) == 0 {
            outputs.push(y.clone());
        }
        names.push(y);
    }
    let last = names.last().unwrap().clone();
    if !outputs.contains(&last) {
        outputs.push(last);
    }
    s.push_str(&format!("outputs: [{}]\n", outputs.join(", ")));
    s
}

#[test]
fn random_graphs_match_the_interpreter_with_fusion() {
    let rounds = std::env::var("XLA_AOT_BATTERY_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ROUNDS);
    let t = common::compiled_targets()
        .into_iter()
        .next()
        .expect("a target that runs here");
    for seed in 0..rounds * 4 {
        let text = random_graph(seed);
        let path = std::env::temp_dir().join(format!("graph_{seed}.yaml"));
        let m = spec_from_str(&path, &text)
            .unwrap_or_else(|e| panic!("graph {seed}: invalid:\n{e}\n{text}"))
            .module;
        let inputs: Vec<_> = (0..2)
            .map(|i| {
                let s = &m.entry.inst(m.entry.parameters()[i]).shape;
                random_input(s.dtype, &s.dims, seed * 10 + i as u64)
            })
            .collect();
        let expected = evaluate(&m, &inputs).unwrap();
        let actual = run_compiled(&m, &t, &inputs, &format!("graph{seed}"));
        for ((o, a), e) in m.entry.outputs.iter().zip(&actual).zip(&expected) {
            if let Err(msg) = check_close(a, e) {
                panic!("graph {seed}, output {}: {msg}\n{text}", o.name);
            }
        }
    }
}

/// Random convolution chains whose convolutions are internal (so layout assignment gives them
/// channels-minor results and the NHWC kernel runs): conv → relu → conv (grouped or depthwise
/// half the time) → relu6 → global average pool.
fn random_conv_chain(seed: u64) -> String {
    let mut g = Gen {
        rng: SplitMix64(seed),
        inputs: String::new(),
        constants: String::new(),
        ops: String::new(),
        outputs: Vec::new(),
    };
    let n = g.int(1, 2);
    let c0 = g.int(1, 4);
    let (h, w) = (g.int(5, 9), g.int(5, 9));
    g.input("x", "f32", &[n, c0, h, w]);
    let c1 = g.int(1, 3) * 2;
    let (k1, s1, p1) = (g.int(1, 3), g.int(1, 2), g.int(0, 1));
    g.constant("w1", &[c1, c0, k1, k1], false);
    let _ = writeln!(
        g.ops,
        "  - {{name: a, op: conv2d, inputs: [x, w1], strides: [{s1}, {s1}], padding: [{p1}]}}"
    );
    let _ = writeln!(g.ops, "  - {{name: ar, op: relu, inputs: [a]}}");
    let groups = g.pick(&[1, 2, c1]);
    let c2 = groups * g.int(1, 2);
    let (k2, d2, p2) = (g.int(1, 3), g.int(1, 2), g.int(0, 2));
    g.constant("w2", &[c2, c1 / groups, k2, k2], false);
    g.constant("b2", &[c2], false);
    let _ = writeln!(
        g.ops,
        "  - {{name: b, op: conv2d, inputs: [ar, w2, b2], padding: [{p2}], dilations: [{d2}, {d2}], groups: {groups}}}"
    );
    let _ = writeln!(g.ops, "  - {{name: br, op: relu6, inputs: [b]}}");
    let _ = writeln!(g.ops, "  - {{name: y, op: global_avg_pool, inputs: [br]}}");
    format!(
        "name: conv_chain_{seed}\ninputs:\n{}outputs: [y]\nconstants:\n{}ops:\n{}",
        g.inputs, g.constants, g.ops
    )
}

#[test]
fn random_conv_chains_match_the_interpreter_on_every_target() {
    let rounds = std::env::var("XLA_AOT_BATTERY_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ROUNDS);
    let targets = common::compiled_targets();
    let mut tried = 0;
    for seed in 0..rounds * 8 {
        let text = random_conv_chain(seed);
        let path = std::env::temp_dir().join(format!("conv_chain_{seed}.yaml"));
        // Some random sizes do not fit the windows: those are spec errors, skipped.
        let Ok(model) = spec_from_str(&path, &text) else {
            continue;
        };
        let m = model.module;
        tried += 1;
        let mut opt = m.clone();
        xla_aot::passes::Pipeline::default_pipeline()
            .run(&mut opt, &mut |_, _, _| {})
            .unwrap();
        let text_opt = xla_aot::ir::print_module(&opt);
        assert!(
            text_opt.contains("{1,3,2,0} convolution"),
            "chain {seed}: no channels-minor convolution:\n{text_opt}"
        );
        let s = &m.entry.inst(m.entry.parameters()[0]).shape;
        let inputs = vec![random_input(s.dtype, &s.dims, seed)];
        let expected = evaluate(&m, &inputs).unwrap();
        for t in &targets {
            let actual = run_compiled(&m, t, &inputs, &format!("convchain{seed}-{}", t.name));
            if let Err(msg) = check_close(&actual[0], &expected[0]) {
                panic!("conv chain {seed} on {}: {msg}\n{text}", t.name);
            }
        }
    }
    assert!(tried >= rounds as usize * 4, "only {tried} valid chains");
}
