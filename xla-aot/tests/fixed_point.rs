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

/// `multiply-q31` of integer-valued f32 (an integer TFLite model's requantization,
/// `front/tflite/int8.rs`): alone (the elemental code: f32 → s32 saturating, NaN to 0) and as a
/// dot's register epilogue with per-column multipliers and shifts, a zero point, a clamp and the
/// next layer's centring kept in i32 (`codegen/cpu/epilogue.rs`), equal the interpreter on every
/// CPU target. The values include NaN, ±∞, ±2^31 and a multiplier of `i32::MIN`.
#[test]
fn f32_requantization_compiles_to_the_interpreters_bits_on_every_cpu_target() {
    const R: usize = 24;
    const K: usize = 16;
    const C: usize = 40;
    let mut rng = SplitMix64(7);
    let edges = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        2147483648.0,
        -2147483648.0,
        -2147483904.0,
        0.0,
        -0.0,
        1.5,
        -2.5,
    ];
    let lone: Vec<f32> = (0..N)
        .map(|i| match i % 3 {
            0 => edges[i / 3 % edges.len()],
            _ => (((rng.next_u64() >> 8) as i32) >> (i % 24)) as f32,
        })
        .collect();
    let ints = inputs();
    let mut b = Builder::new("fixed_point_f32");
    let f32s = |d: Vec<usize>| Shape::new(DType::F32, d);
    let x = b.parameter("x", f32s(vec![N])).unwrap();
    let m = b.parameter("m", Shape::new(DType::I32, vec![N])).unwrap();
    let s = b.parameter("s", Shape::new(DType::I32, vec![N])).unwrap();
    let q = b.add("q", Op::MulQ31, &[x, m, s]).unwrap();
    b.output("q", q);
    // Dots of integers with their requantization as the epilogue: of an f32 parameter (any
    // value: the saturating conversion), and of bytes (a known range: the multiply's result
    // stays in i32 through the zero point, the clamp and the centring).
    let a = b.parameter("a", f32s(vec![R, K])).unwrap();
    let ai = b
        .parameter("a_int", Shape::new(DType::I32, vec![R, K]))
        .unwrap();
    let byte = |b: &mut Builder, name: &str, v: i32| {
        let c = b.constant(name, Literal::from_i32(vec![], &[v]));
        b.broadcast(name, c, vec![], vec![R, K]).unwrap()
    };
    let (l8, h8) = (byte(&mut b, "l8", -128), byte(&mut b, "h8", 127));
    let ai = b
        .add("a_lo", Op::Binary(BinaryOp::Maximum), &[ai, l8])
        .unwrap();
    let ai = b
        .add("a_hi", Op::Binary(BinaryOp::Minimum), &[ai, h8])
        .unwrap();
    let a8 = b.add("a8", Op::Convert { to: DType::F32 }, &[ai]).unwrap();
    let wv: Vec<f32> = (0..K * C)
        .map(|_| ((rng.next_u64() >> 56) as i8) as f32)
        .collect();
    let bias: Vec<f32> = (0..C).map(|j| (j as f32 - 20.0) * 97.0).collect();
    // Multipliers and shifts per column: any shift (some left), a multiplier of i32::MIN; and
    // right shifts only, from 1 to 14 (the shorter rounding, `core/fixed_point.rs` `Facts`).
    let (mut mc, mut sc, mut mr, mut sr) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for j in 0..C {
        let qm = quantize_multiplier(2f64.powf(-12.0 + (j % 13) as f64));
        mc.push(if j == 5 { i32::MIN } else { qm.significand });
        sc.push(qm.shift);
        let qr = quantize_multiplier(0.35 * 2f64.powf(-((j % 14) as f64)));
        mr.push(qr.significand);
        sr.push(qr.shift);
    }
    for (tag, input, mc, sc) in [
        ("any", a, &mc, &sc),
        ("bytes", a8, &mc, &sc),
        ("right", a8, &mr, &sr),
    ] {
        let n = |part: &str| format!("{tag}.{part}");
        // One weight for the first two (merged by CSE): the byte dot must not make the other
        // read it as int8 quads. The third's are small (sums of a few hundred, so that the
        // roundings' ties fall inside the clamp) and differ (else CSE merges the dots).
        let wt: Vec<f32> = wv
            .iter()
            .map(|&v| {
                if tag == "right" {
                    (v / 32.0).trunc()
                } else {
                    v
                }
            })
            .collect();
        let w = b.constant(&n("w"), Literal::from_f32(vec![K, C], &wt));
        let dot = b
            .add(
                &n("dot"),
                Op::Dot(xla_aot::ir::DotDims {
                    lhs_batch: vec![],
                    lhs_contracting: vec![1],
                    rhs_batch: vec![],
                    rhs_contracting: vec![0],
                }),
                &[input, w],
            )
            .unwrap();
        let column = |b: &mut Builder, name: &str, v: Literal| {
            let c = b.constant(name, v);
            b.broadcast(name, c, vec![1], vec![R, C]).unwrap()
        };
        let bb = column(&mut b, &n("bias"), Literal::from_f32(vec![C], &bias));
        let acc = b
            .add(&n("acc"), Op::Binary(BinaryOp::Add), &[dot, bb])
            .unwrap();
        let mb = column(&mut b, &n("mult"), Literal::from_i32(vec![C], mc));
        let sb = column(&mut b, &n("shift"), Literal::from_i32(vec![C], sc));
        let scaled = b.add(&n("scaled"), Op::MulQ31, &[acc, mb, sb]).unwrap();
        let splat = |b: &mut Builder, name: &str, v: f32| {
            let c = b.scalar(name, v);
            b.broadcast(name, c, vec![], vec![R, C]).unwrap()
        };
        let z = splat(&mut b, &n("z"), -3.0);
        let off = b
            .add(&n("offset"), Op::Binary(BinaryOp::Add), &[scaled, z])
            .unwrap();
        let lo = b.scalar(&n("lo"), -128.0);
        let hi = b.scalar(&n("hi"), 127.0);
        let cl = b.add(&n("clamp"), Op::Clamp, &[lo, off, hi]).unwrap();
        let z2 = splat(&mut b, &n("z2"), -3.0);
        let centred = b
            .add(&n("centred"), Op::Binary(BinaryOp::Subtract), &[cl, z2])
            .unwrap();
        b.output(&n("requantized"), centred);
    }
    let module = b.finish();
    // Every fifth row holds multiples of 2^26 (sums past 2^31: the saturating conversion),
    // the others bytes; every sum is exact in f32 in any order, as in a quantized model.
    let av: Vec<f32> = (0..R * K)
        .map(|i| match (i / K) % 5 {
            0 => 67108864.0 * ((i % 3) as f32 - 1.0),
            _ => ((rng.next_u64() >> 56) as u8) as f32 - 128.0,
        })
        .collect();
    let ins = vec![
        Literal::from_f32(vec![N], &lone),
        ints[1].clone(),
        ints[2].clone(),
        Literal::from_f32(vec![R, K], &av),
        Literal::from_i32(
            vec![R, K],
            &(0..R * K)
                .map(|_| (rng.next_u64() >> 55) as i32 - 256)
                .collect::<Vec<_>>(),
        ),
    ];
    let want = xla_aot::interp::evaluate(&module, &ins).unwrap();
    for t in common::compiled_targets() {
        let got = common::run_compiled(&module, &t, &ins, "fixed-point-f32");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let (g, w) = (g.to_f32_vec().unwrap(), w.to_f32_vec().unwrap());
            let bad: Vec<usize> = (0..g.len())
                .filter(|&i| g[i].to_bits() != w[i].to_bits())
                .collect();
            assert!(
                bad.is_empty(),
                "{}: output {k}: {} of {} differ, first at {}: {} != {}",
                t.name,
                bad.len(),
                g.len(),
                bad[0],
                g[bad[0]],
                w[bad[0]]
            );
        }
        eprintln!(
            "ok    {}: f32 multiply-q31, alone and as a dot's epilogue, equals the interpreter",
            t.name
        );
    }
}
