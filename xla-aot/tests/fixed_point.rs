//! The IR's integer arithmetic for TFLite's quantized kernels, compiled for every CPU target this
//! machine runs (x86-64 AVX2 and AVX-512 where the CPU has them, aarch64 under qemu): the op
//! `multiply-q31` (TFLite's `MultiplyByQuantizedMultiplier`, `ir/fixed_point.rs`) and i32 `add`,
//! `subtract`, `multiply`, `maximum`, `minimum` equal the reference interpreter bit for bit on
//! seeded values that cover the edges (zero, ±1, the i32 extremes, ties of both roundings, every
//! shift from −31 to 31, Q31 multipliers from 2^30 to 2^31 − 1, and `x = m = i32::MIN`).

mod common;

use xla_aot::ir::fixed_point::quantize_multiplier;
use xla_aot::ir::{BinaryOp, Builder, DType, Literal, Op, Shape};
use xla_aot::util::rng::SplitMix64;

/// Elements per input: enough for every edge and a few thousand random draws.
const N: usize = 4096;

fn inputs() -> Vec<Literal> {
    let mut rng = SplitMix64(43);
    let edges = [
        0,
        1,
        -1,
        2,
        -2,
        3,
        -3,
        i32::MAX,
        i32::MIN,
        1 << 30,
        -(1 << 30),
        255,
        -256,
    ];
    let mut x = Vec::with_capacity(N);
    let mut m = Vec::with_capacity(N);
    let mut s = Vec::with_capacity(N);
    for i in 0..N {
        let r = rng.next_u64();
        x.push(match i % 4 {
            0 => edges[(r as usize) % edges.len()],
            // Accumulators of int8 products (|x| < 2^24) and anything.
            1 => ((r >> 8) as i32) >> 8,
            _ => r as i32,
        });
        let (mult, shift) = match i % 5 {
            0 => (i32::MIN, (r >> 40) as i32 % 32),
            1 => {
                let q = quantize_multiplier(
                    2f64.powf(-24.0 + 26.0 * ((r >> 33) as f64 / (1u64 << 31) as f64)),
                );
                (q.significand, q.shift)
            }
            2 => (
                (1 << 30) + ((r >> 34) as i32 & ((1 << 30) - 1)),
                (r >> 20) as i32 % 32,
            ),
            3 => ((r >> 32) as i32, -((r >> 20) as i32 % 32)),
            _ => (1 << 30, ((r >> 20) % 63) as i32 - 31),
        };
        m.push(mult);
        s.push(shift);
    }
    vec![
        Literal::from_i32(vec![N], &x),
        Literal::from_i32(vec![N], &m),
        Literal::from_i32(vec![N], &s),
    ]
}

#[test]
fn integer_arithmetic_compiles_to_the_interpreters_bits_on_every_cpu_target() {
    let mut b = Builder::new("fixed_point");
    let i32s = || Shape::new(DType::I32, vec![N]);
    let x = b.parameter("x", i32s()).unwrap();
    let m = b.parameter("m", i32s()).unwrap();
    let s = b.parameter("s", i32s()).unwrap();
    let q = b.add("q", Op::MulQ31, &[x, m, s]).unwrap();
    b.output("q", q);
    for (name, op) in [
        ("sum", BinaryOp::Add),
        ("difference", BinaryOp::Subtract),
        ("product", BinaryOp::Multiply),
        ("max", BinaryOp::Maximum),
        ("min", BinaryOp::Minimum),
    ] {
        let y = b.add(name, Op::Binary(op), &[x, m]).unwrap();
        b.output(name, y);
    }
    let module = b.finish();
    let ins = inputs();
    let want = xla_aot::interp::evaluate(&module, &ins).unwrap();
    // The interpreter is the definition: spot-check it against ir::fixed_point directly.
    let (xs, ms, ss) = (
        ins[0].to_i32_vec().unwrap(),
        ins[1].to_i32_vec().unwrap(),
        ins[2].to_i32_vec().unwrap(),
    );
    let q = want[0].to_i32_vec().unwrap();
    for i in 0..N {
        let m = xla_aot::ir::fixed_point::QuantizedMultiplier {
            significand: ms[i],
            shift: ss[i],
        };
        assert_eq!(
            q[i],
            xla_aot::ir::fixed_point::multiply_by_quantized_multiplier(xs[i], m)
        );
    }
    for t in common::compiled_targets() {
        let got = common::run_compiled(&module, &t, &ins, "fixed-point");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let (g, w) = (g.to_i32_vec().unwrap(), w.to_i32_vec().unwrap());
            let bad: Vec<usize> = (0..N).filter(|&i| g[i] != w[i]).collect();
            assert!(
                bad.is_empty(),
                "{}: output {k}: {} of {N} differ, first at {}: x {} m {} s {}: {} != {}",
                t.name,
                bad.len(),
                bad[0],
                xs[bad[0]],
                ms[bad[0]],
                ss[bad[0]],
                g[bad[0]],
                w[bad[0]]
            );
        }
        eprintln!(
            "ok    {}: multiply-q31 and i32 arithmetic equal the interpreter",
            t.name
        );
    }
}
