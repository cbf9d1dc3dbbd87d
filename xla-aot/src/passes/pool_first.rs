//! Max and min pooling before monotone elementwise chains: `pool(f(x)) → f(pool(x))`.
//!
//! A max (min) `reduce-window` of `f(x)`, where `f` is a chain of elementwise functions each
//! non-decreasing in `x` and the same function at every position of a window, equals `f` of the
//! max (min) of `x`: the largest `x` of a window gives the largest `f(x)`. The rewrite pools first
//! and applies the chain to the pooled values only. A 3×3, stride-2 max pool reads each value
//! about 2.25 times, so a bias + ReLU before it ran 2.25 times per value (squeezenet's and
//! resnet50's first pools), and a quantize → dequantize chain of an int8 model 9 times per output
//! (`reduce-window` fusions compute their operand inline, per window tap).
//!
//! Contract, for a max or min `reduce-window` `R` of f32 data:
//! - The chain is walked up from `R`'s operand while each step is read by nothing but the next
//!   step (or `R`), and is one of: `add` (either side), `subtract` (data on the left),
//!   `multiply` or `divide` (data on the left for divide) by a constant side whose every value
//!   is positive and finite, `maximum`/`minimum`, `clamp` (data in the middle), `exp`, `tanh`,
//!   `logistic`, `erf`, `softplus`, the bf16/f16 roundings, and `convert` between f32 and i32.
//!   IEEE rounding is monotone, so each of these is non-decreasing in its data operand. Binary
//!   steps must be f32 (integer arithmetic can wrap).
//! - A side operand is a scalar, or a `broadcast` that repeats its operand along every windowed
//!   dim (the window has size, stride, padding or dilation there), or a splat constant: the same
//!   value for every position of a window.
//! - Every window holds at least one element of the input (padding smaller than the window), so
//!   the identity of the padding never reaches `f`.
//! - `log`, `sqrt`, `power`, `negate`, `abs`, and anything not listed stop the chain. With NaN
//!   inputs the results may differ from pooling after the chain (both are NaN-derived).
//! - The walk stops at a value of integers of one byte's range (`Range::byte_type`: a quantized
//!   model's requantization) that ends a convolution's register epilogue (`fusion.rs`,
//!   `convolution_epilogue`): the convolution then finishes the values in its registers and a
//!   CPU stores them one byte each (`codegen/cpu/byte_storage.rs`), so the pool reads a quarter
//!   of the f32 result's bytes; pooled first, the convolution would store its raw f32 sums
//!   (squeezenet's int8 stem: 3.1 MB written and read back from L3).
//!
//! - A max/min pool of a concatenation along a dim the window does not move (read by nothing
//!   else) becomes a concatenation of pools of its operands, `pool(concat(a, b)) =
//!   concat(pool(a), pool(b))`, so each pool can then move before its own operand's chain
//!   (squeezenet's pools of two convolution branches; an int8 model's requantized branches).
//!
//! The old chain is left for DCE; the rewritten chain has the pooled shape.

use super::Pass;
use super::fusion::convolution_epilogue;
use super::rewrite::{Rewriter, rebuild, users};
use crate::ir::value_range::Range;
use crate::ir::{
    BinaryOp, Computation, DType, InstId, Instruction, Literal, Module, Op, ReduceKind, Shape,
    UnaryOp, Window,
};
use std::collections::HashMap;

/// The pool-first pass.
pub struct PoolFirst;

/// Whether dim `d` of a window moves (any size, stride, padding or dilation other than 1/0).
fn windowed(w: &Window, d: usize) -> bool {
    w.size[d] != 1
        || w.stride[d] != 1
        || w.pad_low[d] != 0
        || w.pad_high[d] != 0
        || w.dilation[d] != 1
}

/// The one value of a constant with every element equal (bits), as f32 (also
/// `concat_sink.rs`'s uniform operands).
pub(super) fn splat(l: &Literal) -> Option<f32> {
    let v = l.to_f32_vec()?;
    let first = *v.first()?;
    v.iter()
        .all(|x| x.to_bits() == first.to_bits())
        .then_some(first)
}

/// A side operand that is the same at every position of a window: how to rebuild it at the
/// pooled shape.
#[derive(Clone, Copy)]
enum Side {
    /// A scalar: used as it is.
    Scalar(InstId),
    /// `broadcast(operand)` with these dims, at the new shape.
    Broadcast(InstId),
    /// A full-shape splat constant: broadcast of a scalar constant of this value.
    Splat(f32),
}

/// Whether `id` (old) is a side operand of window `w`, and its values when they are known.
fn side(c: &Computation, id: InstId, w: &Window) -> Option<(Side, Option<Vec<f32>>)> {
    let inst = c.inst(id);
    if inst.shape.rank() == 0 {
        let vals = match &inst.op {
            Op::Constant(l) => l.to_f32_vec(),
            _ => None,
        };
        return Some((Side::Scalar(id), vals));
    }
    match &inst.op {
        Op::Broadcast { dimensions } => {
            let x = &c.inst(inst.operands[0]).shape;
            let repeats = (0..inst.shape.rank()).filter(|&d| windowed(w, d)).all(|d| {
                dimensions
                    .iter()
                    .position(|&r| r == d)
                    .is_none_or(|i| x.dims[i] == 1)
            });
            let vals = match &c.inst(inst.operands[0]).op {
                Op::Constant(l) => l.to_f32_vec(),
                _ => None,
            };
            repeats.then_some((Side::Broadcast(id), vals))
        }
        Op::Constant(l) => splat(l).map(|v| (Side::Splat(v), Some(vec![v]))),
        _ => None,
    }
}

/// One step of the chain: the old instruction, which operand is the data, and its sides.
struct Step {
    old: InstId,
    data: usize,
    sides: Vec<(usize, Side)>,
}

/// The step `id` is, if it is non-decreasing in one operand and the rest are sides.
fn step(c: &Computation, id: InstId, w: &Window) -> Option<Step> {
    let inst = c.inst(id);
    let positive = |v: &Option<Vec<f32>>| {
        v.as_ref()
            .is_some_and(|v| !v.is_empty() && v.iter().all(|x| x.is_finite() && *x > 0.0))
    };
    let one_side = |data: usize, need_positive: bool| {
        let s = 1 - data;
        let (sd, vals) = side(c, inst.operands[s], w)?;
        (!need_positive || positive(&vals)).then(|| Step {
            old: id,
            data,
            sides: vec![(s, sd)],
        })
    };
    match &inst.op {
        Op::Unary(u) => matches!(
            u,
            UnaryOp::Exp
                | UnaryOp::Tanh
                | UnaryOp::Logistic
                | UnaryOp::Erf
                | UnaryOp::Softplus
                | UnaryOp::RoundBf16
                | UnaryOp::RoundF16
        )
        .then(|| Step {
            old: id,
            data: 0,
            sides: Vec::new(),
        }),
        Op::Convert { to } => {
            let from = c.inst(inst.operands[0]).shape.dtype;
            matches!(
                (from, to),
                (DType::F32, DType::I32) | (DType::I32, DType::F32)
            )
            .then(|| Step {
                old: id,
                data: 0,
                sides: Vec::new(),
            })
        }
        // Integer arithmetic can wrap, which is not monotone.
        Op::Binary(_) if inst.shape.dtype != DType::F32 => None,
        Op::Binary(b) => match b {
            BinaryOp::Add | BinaryOp::Maximum | BinaryOp::Minimum => {
                one_side(0, false).or_else(|| one_side(1, false))
            }
            BinaryOp::Subtract => one_side(0, false),
            BinaryOp::Multiply => one_side(0, true).or_else(|| one_side(1, true)),
            BinaryOp::Divide => one_side(0, true),
            BinaryOp::Power => None,
        },
        Op::Clamp => {
            let lo = side(c, inst.operands[0], w)?.0;
            let hi = side(c, inst.operands[2], w)?.0;
            Some(Step {
                old: id,
                data: 1,
                sides: vec![(0, lo), (2, hi)],
            })
        }
        _ => None,
    }
}

/// The window of `r` if it is a max or min `reduce-window` of f32 data (what both rewrites take).
fn max_min_pool(r: &Instruction) -> Option<&Window> {
    match &r.op {
        Op::ReduceWindow { kind, window }
            if *kind != ReduceKind::Add && r.shape.dtype == DType::F32 =>
        {
            Some(window)
        }
        _ => None,
    }
}

/// The chain under `R` (bottom first) and its input, if `R` is a pool the rewrite applies to.
fn chain(
    c: &Computation,
    r: InstId,
    (users, outs): (&[Vec<InstId>], &[usize]),
    ranges: &[Range],
) -> Option<(Vec<Step>, InstId)> {
    let ri = c.inst(r);
    let window = max_min_pool(ri)?;
    // Every window holds an input element.
    let covered = (0..window.rank())
        .all(|d| window.pad_low[d] < window.size[d] && window.pad_high[d] < window.size[d]);
    if !covered {
        return None;
    }
    let mut steps = Vec::new();
    let mut cur = ri.operands[0];
    let mut reader = r;
    loop {
        if ranges[cur.index()].byte_type().is_some() && convolution_epilogue(c, users, cur.index())
        {
            break;
        }
        let only_reader = users[cur.index()].iter().all(|&u| u == reader) && outs[cur.index()] == 0;
        let Some(s) = only_reader.then(|| step(c, cur, window)).flatten() else {
            break;
        };
        reader = cur;
        cur = c.inst(cur).operands[s.data];
        steps.push(s);
    }
    (!steps.is_empty() && c.inst(cur).shape.dtype == DType::F32).then_some((steps, cur))
}

/// The dim a concatenation joins along.
fn concat_dim(cat: &Instruction) -> usize {
    match cat.op {
        Op::Concatenate { dimension } => dimension,
        _ => unreachable!("a concatenation"),
    }
}

/// Whether `r` is a max/min pool of a concatenation (read by nothing else) along a dim the
/// window does not move: `pool(concat(a, b)) = concat(pool(a), pool(b))`, after which each pool
/// can move before its own operand's chain.
fn split_concat(c: &Computation, r: InstId, users: &[Vec<InstId>], outs: &[usize]) -> bool {
    let ri = c.inst(r);
    let Some(window) = max_min_pool(ri) else {
        return false;
    };
    let x = ri.operands[0];
    let Op::Concatenate { dimension } = c.inst(x).op else {
        return false;
    };
    !windowed(window, dimension) && users[x.index()].iter().all(|&u| u == r) && outs[x.index()] == 0
}

/// A side operand rebuilt at `shape` (the pooled dims, the side's element type).
fn rebuild_side(rw: &mut Rewriter, side: Side, dims: &[usize], name: &str) -> InstId {
    match side {
        Side::Scalar(old) => rw.get(old),
        Side::Broadcast(old) => {
            let b = rw.old.inst(old).clone();
            let x = rw.get(b.operands[0]);
            rw.push(Instruction {
                name: format!("{name}.side"),
                shape: Shape::new(b.shape.dtype, dims.to_vec()),
                operands: vec![x],
                op: b.op,
            })
        }
        Side::Splat(v) => {
            let s = rw.constant(&format!("{name}.splat"), Literal::scalar_f32(v));
            rw.push(Instruction {
                name: format!("{name}.side"),
                shape: Shape::new(DType::F32, dims.to_vec()),
                operands: vec![s],
                op: Op::Broadcast {
                    dimensions: Vec::new(),
                },
            })
        }
    }
}

impl Pass for PoolFirst {
    fn name(&self) -> &'static str {
        "pool-first"
    }

    fn run(&self, m: &mut Module) -> bool {
        let (users, outs) = users(&m.entry);
        let ranges = crate::ir::value_range::ranges(m);
        let mut plans: HashMap<InstId, (Vec<Step>, InstId)> = m
            .entry
            .ids()
            .filter_map(|r| chain(&m.entry, r, (&users, &outs), &ranges).map(|p| (r, p)))
            .collect();
        let splits: Vec<InstId> = m
            .entry
            .ids()
            .filter(|&r| split_concat(&m.entry, r, &users, &outs))
            .collect();
        if plans.is_empty() && splits.is_empty() {
            return false;
        }
        rebuild(m, |rw, old, inst, _ops| {
            if splits.contains(&old) {
                // One pool per operand of the concatenation, joined after.
                let cat = rw.old.inst(inst.operands[0]).clone();
                let mut pooled = Vec::with_capacity(cat.operands.len());
                for (j, &o) in cat.operands.iter().enumerate() {
                    let mut dims = rw.old.inst(o).shape.dims.clone();
                    for (d, e) in dims.iter_mut().enumerate() {
                        if d != concat_dim(&cat) {
                            *e = inst.shape.dims[d];
                        }
                    }
                    pooled.push(rw.push(Instruction {
                        name: format!("{}.{j}", inst.name),
                        op: inst.op.clone(),
                        operands: vec![rw.get(o)],
                        shape: Shape::new(inst.shape.dtype, dims),
                    }));
                }
                let id = rw.push(Instruction {
                    name: format!("{}.cat", inst.name),
                    op: cat.op.clone(),
                    operands: pooled,
                    shape: Shape::new(inst.shape.dtype, inst.shape.dims.clone()),
                });
                rw.replace(old, id);
                return true;
            }
            let Some((steps, x)) = plans.remove(&old) else {
                rw.copy(old);
                return false;
            };
            let dims = inst.shape.dims.clone();
            let mut cur = rw.push(Instruction {
                name: inst.name.clone(),
                op: inst.op.clone(),
                operands: vec![rw.get(x)],
                shape: Shape::new(DType::F32, dims.clone()),
            });
            for s in steps.iter().rev() {
                let si = rw.old.inst(s.old).clone();
                let mut operands = vec![cur; si.operands.len()];
                for &(j, sd) in &s.sides {
                    operands[j] = rebuild_side(rw, sd, &dims, &si.name);
                }
                cur = rw.push(Instruction {
                    name: format!("{}.pooled", si.name),
                    op: si.op,
                    operands,
                    shape: Shape::new(si.shape.dtype, dims.clone()),
                });
            }
            rw.replace(old, cur);
            true
        })
    }
}
