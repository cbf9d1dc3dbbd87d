//! Batch-norm folding: per-channel scales and shifts after a convolution or a dense layer move
//! into its weights and bias, at compile time.
//!
//! After constant folding, an inference batch norm is `y = x·s + t` with per-channel constants `s`
//! and `t` broadcast along the channel dimension. With `P` a convolution (channel = output dim 1,
//! kernel dim 0) or a dot with constant weights (channel = the output's last dim, the weights'
//! free dim), and each intermediate used only once:
//! - `P(x, W) · s` → `P(x, W·s)` (the kernel scaled per output channel);
//! - `(P(x, W) + b) · s` → `P(x, W·s) + b·s`;
//! - `(P + b) + t` → `P + (b + t)`.
//!
//! The folded model computes the same function up to f32 rounding (the products are rounded once,
//! at compile time, instead of once per element at run time).
//!
//! A kernel of integers applied to data of integers (`ir/value_range.rs`) keeps its integers
//! unless the scales are integers too: those are the shifted int8 weights and activations of a
//! quantized model's integer path (`front/onnx/quant.rs` `qlinear_exact`), whose
//! sums are exact in f32 and then scaled once by the requantization multiplier, in onnxruntime's
//! order; folding the multiplier in would round every product instead (requantized outputs then
//! land a step away from onnxruntime's) and keep the integer kernels (`cpu/gemm_i8.rs`,
//! `cpu/conv/int8.rs`) from being bit for bit the f32 ones.

use super::Pass;
use super::rewrite::{Rewriter, users};
use crate::ir::{BinaryOp, Computation, InstId, Instruction, Literal, Module, Op, Shape};

/// The batch-norm folding pass.
pub struct BatchNormFolding;

/// A channel-producing op: (output channel dim, weight constant, weight channel axis).
fn channel_op(c: &Computation, p: InstId) -> Option<(usize, InstId, usize)> {
    let inst = c.inst(p);
    let weight = *inst.operands.get(1)?;
    if !matches!(&c.inst(weight).op, Op::Constant(l) if !l.is_elided()) {
        return None;
    }
    match &inst.op {
        Op::Convolution { .. } => Some((1, weight, 0)),
        Op::Dot(d) if d.lhs_batch.is_empty() && d.rhs_batch.is_empty() => {
            let rank = c.inst(weight).shape.rank();
            let free: Vec<usize> = (0..rank)
                .filter(|i| !d.rhs_contracting.contains(i))
                .collect();
            (free.len() == 1).then(|| (inst.shape.rank() - 1, weight, free[0]))
        }
        _ => None,
    }
}

/// The per-channel values of `b` along output dim `ch` with `n` channels: a broadcast of an
/// `[n]` constant mapped to `ch`, or a splat.
fn per_channel(c: &Computation, b: InstId, ch: usize, n: usize) -> Option<Vec<f32>> {
    let inst = c.inst(b);
    match &inst.op {
        Op::Broadcast { dimensions } => {
            let src = c.inst(inst.operands[0]);
            match (&src.op, dimensions.as_slice()) {
                (Op::Constant(l), [d]) if *d == ch && l.dims == [n] => l.to_f32_vec(),
                (Op::Constant(l), []) => l.to_f32_vec().map(|v| vec![v[0]; n]),
                _ => None,
            }
        }
        Op::Constant(l) if l.dims.iter().product::<usize>() == 1 => {
            l.to_f32_vec().map(|v| vec![v[0]; n])
        }
        _ => None,
    }
}

/// `w` scaled by `s[k]` along `axis`; `None` when `keep_integers` and `w` holds only integers
/// that the scales would make fractional (module doc).
fn scale_weights(w: &Literal, axis: usize, s: &[f32], keep_integers: bool) -> Option<Literal> {
    let v = w.to_f32_vec()?;
    let integers = |x: &[f32]| x.iter().all(|v| v.fract() == 0.0);
    if keep_integers && integers(&v) && !integers(s) {
        return None;
    }
    let inner: usize = w.dims[axis + 1..].iter().product();
    let n = w.dims[axis];
    let out: Vec<f32> = v
        .iter()
        .enumerate()
        .map(|(i, &x)| (x as f64 * s[(i / inner) % n] as f64) as f32)
        .collect();
    Some(Literal::from_f32(w.dims.clone(), &out))
}

impl BatchNormFolding {
    /// The operand pair of a binary op as (value, per-channel constant) in either order.
    fn split(c: &Computation, x: &Instruction, want: BinaryOp) -> Option<(InstId, InstId)> {
        if x.op != Op::Binary(want) {
            return None;
        }
        let (a, b) = (x.operands[0], x.operands[1]);
        let is_bcast = |id: InstId| matches!(c.inst(id).op, Op::Broadcast { .. } | Op::Constant(_));
        if is_bcast(b) && !is_bcast(a) {
            Some((a, b))
        } else if is_bcast(a) && !is_bcast(b) {
            Some((b, a))
        } else {
            None
        }
    }
}

impl Pass for BatchNormFolding {
    fn name(&self) -> &'static str {
        "batchnorm-folding"
    }

    fn run(&self, m: &mut Module) -> bool {
        let c = &m.entry;
        let (users, outs) = users(c);
        let single = |id: InstId| users[id.index()].len() == 1 && outs[id.index()] == 0;
        let mut rw = Rewriter::new(c);
        let mut changed = false;
        let ranges = crate::ir::value_range::ranges(m);
        for (i, x) in c.instructions.iter().enumerate() {
            let old = InstId(i as u32);
            let mut done = false;
            if let Some((q, sb)) = Self::split(c, x, BinaryOp::Multiply) {
                // P · s, or (P + b) · s.
                let (p, bias) = match Self::split(c, c.inst(q), BinaryOp::Add) {
                    Some((p, b)) if single(q) => (p, Some(b)),
                    _ => (q, None),
                };
                if let Some((ch, w, axis)) = channel_op(c, p).filter(|_| single(p)) {
                    let n = c.inst(p).shape.dims[ch];
                    let s = per_channel(c, sb, ch, n);
                    let b = bias.map(|b| per_channel(c, b, ch, n));
                    let Op::Constant(wl) = &c.inst(w).op else {
                        unreachable!("channel_op checks")
                    };
                    if let (Some(s), Some(w2)) = (
                        s.clone(),
                        s.as_ref().and_then(|s| {
                            let data = c.inst(p).operands[0];
                            scale_weights(wl, axis, s, ranges[data.index()].integer)
                        }),
                    ) {
                        if b.as_ref().is_none_or(|b| b.is_some()) {
                            let wid = rw.constant(&format!("{}.folded", c.inst(w).name), w2);
                            let pi = c.inst(p);
                            let mut operands: Vec<InstId> =
                                pi.operands.iter().map(|&o| rw.get(o)).collect();
                            operands[1] = wid;
                            // Without a bias the folded op is the value of `x`: keep x's name.
                            let name = if b.is_none() {
                                x.name.clone()
                            } else {
                                pi.name.clone()
                            };
                            let np = rw.push(Instruction {
                                name,
                                operands,
                                ..pi.clone()
                            });
                            let result = match b.flatten() {
                                None => np,
                                Some(b) => {
                                    let bs: Vec<f32> = b
                                        .iter()
                                        .zip(&s)
                                        .map(|(&b, &s)| (b as f64 * s as f64) as f32)
                                        .collect();
                                    add_bias(&mut rw, np, &x.name, ch, &bs, &x.shape)
                                }
                            };
                            rw.replace(old, result);
                            changed = true;
                            done = true;
                        }
                    }
                }
            } else if let Some((q, tb)) = Self::split(c, x, BinaryOp::Add) {
                // (P + b) + t.
                if let Some((p, bb)) =
                    Self::split(c, c.inst(q), BinaryOp::Add).filter(|_| single(q))
                {
                    if let Some((ch, _, _)) = channel_op(c, p) {
                        let n = c.inst(p).shape.dims[ch];
                        if let (Some(b), Some(t)) =
                            (per_channel(c, bb, ch, n), per_channel(c, tb, ch, n))
                        {
                            let sum: Vec<f32> = b
                                .iter()
                                .zip(&t)
                                .map(|(&b, &t)| (b as f64 + t as f64) as f32)
                                .collect();
                            let np = rw.get(p);
                            let result = add_bias(&mut rw, np, &x.name, ch, &sum, &x.shape);
                            rw.replace(old, result);
                            changed = true;
                            done = true;
                        }
                    }
                }
            }
            if !done {
                rw.copy(old);
            }
        }
        if changed {
            m.entry = rw.finish();
        }
        changed
    }
}

/// Appends `p + broadcast(bias along ch)`; returns the add.
fn add_bias(
    rw: &mut Rewriter,
    p: InstId,
    name: &str,
    ch: usize,
    bias: &[f32],
    shape: &Shape,
) -> InstId {
    let bc = rw.constant(
        &format!("{name}.bias"),
        Literal::from_f32(vec![bias.len()], bias),
    );
    let bb = rw.push(Instruction {
        name: format!("{name}.bias_b"),
        op: Op::Broadcast {
            dimensions: vec![ch],
        },
        operands: vec![bc],
        shape: Shape::new(shape.dtype, shape.dims.clone()),
    });
    rw.push(Instruction {
        name: name.to_string(),
        op: Op::Binary(BinaryOp::Add),
        operands: vec![p, bb],
        shape: Shape::new(shape.dtype, shape.dims.clone()),
    })
}
