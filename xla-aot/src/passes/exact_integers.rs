//! Integer steps that the value ranges prove exact disappear: a quantized model's requantization
//! leaves `q + zero_point`, its s32 round trip and `− zero_point` between every two products,
//! which compute nothing once the ranges show `q` is an integer.
//!
//! Contract: with the ranges of `ir/value_range.rs` (sound for the compiled code, NaN included):
//! - `convert(convert(x, s32), f32)` becomes `x` where `x` is an f32 of the same shape whose
//!   range holds only integers an s32 holds, and no NaN (`Range::fits_s32`): truncation and
//!   saturation then change nothing, and no NaN turns into 0;
//! - `convert(convert(x, f32), s32)` becomes `x` where `x` is an s32 of at most 2^24 in
//!   magnitude (every such integer is an exact f32);
//! - `subtract(add(x, c), c)` and `add(subtract(x, c), c)`, with `c` one scalar integer (a
//!   constant or its broadcast, the same instruction or the same value), become `x` where `x` is
//!   an integer range with `|x| + |c| ≤ 2^24`: both steps are then exact in f32.
//! - `clamp(lo, x, hi)` with scalar constant bounds becomes `x` where `x`'s range is NaN-free
//!   and within them, and `x` is never −0 where `lo` is 0 (the rounding's result, or no zero);
//! - A requantization from one scale to another, `round(clamp(lo, (x · a) / b, hi))` with the
//!   rounding written `(· + k) − k` and `a`, `b`, `lo`, `hi`, `k` scalar constants, where `x` is
//!   an integer range of at most [`MAX_ENUMERATED`] values (a concatenation of quantized
//!   branches, each dequantized with its scale and quantized with the concatenation's): every
//!   `x` in the range is evaluated in f32 exactly as the chain computes it, and
//!   - where every result is `x` itself, and `x` is itself the result of such a rounding
//!     (`(clamp(·) + k) − k`: never −0, and NaN only where the clamp passes it, as this one
//!     would), the chain becomes `x` (equal scales: squeezenet's second branch of every fire
//!     module);
//!   - else where `round(clamp(lo, x · r, hi))` gives every result, for `r` the f32 nearest
//!     `a / b` or a neighbour, `(x · a) / b` becomes `x · r`: a division costs 10–16 cycles a
//!     vector (`vdivps`) in a convolution's epilogue, a multiply one.
//! - A quantization of a model input `x`, `round(clamp(lo, x / b, hi))` (integer bounds of at
//!   most 2^16, `b` a scalar constant), takes `x / b` as `x · r` (`r = 1/b` rounded)
//!   corrected once with the residual (Markstein: two fused multiply-adds), `x · r` where the
//!   correction is NaN (infinite `x`). The correction is within an ulp of `x / b`, so the two
//!   can only round to different integers where `x / b` is within a few ulps of a half-integer;
//!   those `x` are checked at compile time, and the rewrite refused if one differs. (An
//!   exhaustive run over all 2^32 `x` for five divisors, all-ones significands included, found
//!   no difference after the rounding, 2026-12-04.) Costs a `vdivps` less per vector.
//!
//! Every rewrite gives bit for bit the value it replaces, so the interpreter and every target
//! compute what they computed before. The replaced steps are left for DCE.

use super::Pass;
use super::rewrite::Rewriter;
use super::rewrite::{rebuild, users};
use crate::ir::value_range::{self, F32_EXACT_INT, ROUND_SHIFT, Range};
use crate::ir::{
    BinaryOp, CompareDir, Computation, DType, InstId, Instruction, Literal, Module, Op,
};

/// Most integers a requantization is evaluated at to prove a rewrite (`2^16`: any 8- or 16-bit
/// quantized value, zero point subtracted; 65536 evaluations of five f32 steps at compile time).
const MAX_ENUMERATED: f64 = 65_536.0;

/// What an instruction becomes.
enum Rewrite {
    /// An existing value, bit for bit.
    Same(InstId),
    /// `x · r` (`x` f32 of the instruction's shape).
    Scale { x: InstId, r: f32 },
    /// `x / b` as [`markstein`] computes it, with `r = 1/b` rounded.
    Reciprocal { x: InstId, b: f32, r: f32 },
}

/// The exact-integers pass.
pub struct ExactIntegers;

impl Pass for ExactIntegers {
    fn name(&self) -> &'static str {
        "exact-integers"
    }

    fn run(&self, m: &mut Module) -> bool {
        let ranges = value_range::ranges(m);
        let (users, outs) = users(&m.entry);
        let plan: Vec<Option<Rewrite>> = m
            .entry
            .ids()
            .map(|id| {
                exact(&m.entry, &ranges, id)
                    .map(Rewrite::Same)
                    .or_else(|| requantization(&m.entry, &ranges, &users, &outs, id))
                    .or_else(|| reciprocal(&m.entry, &ranges, &users, &outs, id))
            })
            .collect();
        if plan.iter().all(Option::is_none) {
            return false;
        }
        rebuild(m, |rw, id, inst, _| match plan[id.index()] {
            Some(Rewrite::Same(x)) => {
                let new = rw.get(x);
                rw.replace(id, new);
                true
            }
            Some(Rewrite::Scale { x, r }) => {
                let kb = splat(rw, inst, "ratio", r);
                let new = push(
                    rw,
                    inst,
                    "scaled",
                    Op::Binary(BinaryOp::Multiply),
                    &[rw.get(x), kb],
                );
                rw.replace(id, new);
                true
            }
            Some(Rewrite::Reciprocal { x, b, r }) => {
                let (x, rb, nb) = (
                    rw.get(x),
                    splat(rw, inst, "recip", r),
                    splat(rw, inst, "neg_divisor", -b),
                );
                let q = push(rw, inst, "q", Op::Binary(BinaryOp::Multiply), &[x, rb]);
                let e = push(rw, inst, "residual", Op::Fma, &[q, nb, x]);
                let q1 = push(rw, inst, "corrected", Op::Fma, &[e, rb, q]);
                let nan = rw.push(Instruction {
                    name: format!("{}.nan", inst.name),
                    op: Op::Compare(CompareDir::Ne),
                    operands: vec![q1, q1],
                    shape: inst.shape.with_dtype(DType::Pred),
                });
                let new = push(rw, inst, "quotient", Op::Select, &[nan, q, q1]);
                rw.replace(id, new);
                true
            }
            None => {
                rw.copy(id);
                false
            }
        })
    }
}

/// The value instruction `id` of `c` equals exactly, when it is one of the contract's steps.
fn exact(c: &Computation, ranges: &[Range], id: InstId) -> Option<InstId> {
    let inst = c.inst(id);
    match inst.op {
        Op::Convert { to: DType::F32 } => {
            let mid = c.inst(inst.operands[0]);
            let x = *mid.operands.first()?;
            let xs = &c.inst(x).shape;
            (matches!(mid.op, Op::Convert { to: DType::I32 })
                && xs.dtype == DType::F32
                && *xs == inst.shape
                && ranges[x.index()].fits_s32())
            .then_some(x)
        }
        Op::Convert { to: DType::I32 } => {
            // An s32 through f32 and back: exact below 2^24 (an integer TFLite model's values
            // are held in f32 between its integer ops, `front/tflite/lower.rs`).
            let mid = c.inst(inst.operands[0]);
            let x = *mid.operands.first()?;
            let xs = &c.inst(x).shape;
            let r = ranges[x.index()];
            (matches!(mid.op, Op::Convert { to: DType::F32 })
                && *xs == inst.shape
                && r.integer
                && r.magnitude() <= F32_EXACT_INT)
                .then_some(x)
        }
        Op::Binary(op @ (BinaryOp::Add | BinaryOp::Subtract)) => {
            let inverse = if op == BinaryOp::Add {
                BinaryOp::Subtract
            } else {
                BinaryOp::Add
            };
            let (inner, c2) = (inst.operands[0], inst.operands[1]);
            let i = c.inst(inner);
            if i.op != Op::Binary(inverse) {
                return None;
            }
            let (x, c1) = (i.operands[0], i.operands[1]);
            let (v1, v2) = (scalar(c, c1)?, scalar(c, c2)?);
            let r = ranges[x.index()];
            let exact = v1.to_bits() == v2.to_bits()
                && v1.fract() == 0.0
                && r.integer
                && r.lo.abs().max(r.hi.abs()) + f64::from(v1.abs()) <= F32_EXACT_INT;
            (exact && c.inst(x).shape == inst.shape).then_some(x)
        }
        Op::Clamp => {
            // A clamp its operand's range already satisfies: an equal-scale requantization
            // becomes the identity but leaves the concatenation's own clamp after it.
            let x = inst.operands[1];
            let (lo, hi) = (scalar(c, inst.operands[0])?, scalar(c, inst.operands[2])?);
            let r = ranges[x.index()];
            let inside = !r.nan && r.lo >= f64::from(lo) && r.hi <= f64::from(hi);
            // `clamp(0, −0, ·)` may give +0: only a value that is never −0 (the rounding's
            // `(v + k) − k`), or none near a zero bound, goes.
            let no_zero_bound = lo != 0.0 || r.lo > 0.0 || rounding(c, x).is_some();
            (inside && no_zero_bound && c.inst(x).shape == inst.shape).then_some(x)
        }
        _ => None,
    }
}

/// The one value of a scalar f32 constant or of a broadcast of one.
fn scalar(c: &Computation, id: InstId) -> Option<f32> {
    let inst = c.inst(id);
    match &inst.op {
        Op::Constant(lit) if lit.dtype == DType::F32 && lit.element_count() == 1 => {
            lit.to_f32_vec()?.first().copied()
        }
        Op::Broadcast { .. } if c.inst(inst.operands[0]).shape.element_count() == 1 => {
            scalar(c, inst.operands[0])
        }
        _ => None,
    }
}

/// `(v + k) − k` in f32 where `(up, down)` are its two steps and `k` their constant, if `id` is
/// such a rounding: `(k, operand of the add)`.
fn rounding(c: &Computation, id: InstId) -> Option<(f32, InstId)> {
    let sub = c.inst(id);
    if sub.op != Op::Binary(BinaryOp::Subtract) {
        return None;
    }
    let add = c.inst(sub.operands[0]);
    if add.op != Op::Binary(BinaryOp::Add) {
        return None;
    }
    let (k1, k2) = (scalar(c, add.operands[1])?, scalar(c, sub.operands[1])?);
    (k1.to_bits() == k2.to_bits()).then_some((k1, add.operands[0]))
}

/// The single reader of `id`, if it has exactly one and is no output.
fn only_reader(users: &[Vec<InstId>], outs: &[usize], id: InstId) -> Option<InstId> {
    match users[id.index()].as_slice() {
        &[u] if outs[id.index()] == 0 => Some(u),
        _ => None,
    }
}

/// The last step `(· + k) − k` of the rounding after division `d`'s clamp, where each step
/// before it has `d`'s chain as its only reader.
fn rounding_after(users: &[Vec<InstId>], outs: &[usize], d: InstId) -> Option<InstId> {
    let cl = only_reader(users, outs, d)?;
    let add = only_reader(users, outs, cl)?;
    only_reader(users, outs, add)
}

/// `(k, lo, hi)` where `f` is `(clamp(lo, d, hi) + k) − k` with scalar constants `k`, `lo`, `hi`.
fn rounded_clamp(c: &Computation, d: InstId, f: InstId) -> Option<(f32, f32, f32)> {
    let (k, cl) = rounding(c, f)?;
    let cli = c.inst(cl);
    if cli.op != Op::Clamp || cli.operands[1] != d {
        return None;
    }
    Some((k, scalar(c, cli.operands[0])?, scalar(c, cli.operands[2])?))
}

/// The contract's requantization rewrites of `id`: the identity at the rounding's last step,
/// or `x · r` at the division.
fn requantization(
    c: &Computation,
    ranges: &[Range],
    users: &[Vec<InstId>],
    outs: &[usize],
    id: InstId,
) -> Option<Rewrite> {
    // Find the division `d` and the rounding `f` after it, starting from either.
    let inst = c.inst(id);
    let (d, f) = match inst.op {
        Op::Binary(BinaryOp::Divide) => (id, rounding_after(users, outs, id)?),
        Op::Binary(BinaryOp::Subtract) => {
            let (_, cl) = rounding(c, id)?;
            (*c.inst(cl).operands.get(1)?, id)
        }
        _ => return None,
    };
    let (k, lo, hi) = rounded_clamp(c, d, f)?;
    let di = c.inst(d);
    if di.op != Op::Binary(BinaryOp::Divide) {
        return None;
    }
    let b = scalar(c, di.operands[1])?;
    let mi = c.inst(di.operands[0]);
    if mi.op != Op::Binary(BinaryOp::Multiply) {
        return None;
    }
    let (x, a) = match (scalar(c, mi.operands[1]), scalar(c, mi.operands[0])) {
        (Some(a), _) => (mi.operands[0], a),
        (None, Some(a)) => (mi.operands[1], a),
        _ => return None,
    };
    let xr = ranges[x.index()];
    let xs = &c.inst(x).shape;
    let small = xr.lo.is_finite() && xr.hi.is_finite() && xr.hi - xr.lo <= MAX_ENUMERATED;
    if !xr.integer || !small || xs.dtype != DType::F32 || *xs != inst.shape {
        return None;
    }
    let tail = |v: f32| {
        let clamped = v.max(lo).min(hi);
        (clamped + k) - k
    };
    let values = || (xr.lo as i64..=xr.hi as i64).map(|v| v as f32);
    let chain: Vec<f32> = values().map(|v| tail((v * a) / b)).collect();
    let identity = values()
        .zip(&chain)
        .all(|(v, y)| v.to_bits() == y.to_bits())
        && rounding(c, x).is_some_and(|(_, xc)| c.inst(xc).op == Op::Clamp);
    if id == f {
        return identity.then_some(Rewrite::Same(x));
    }
    if identity {
        // The rounding's own rewrite makes the division dead.
        return None;
    }
    let nearest = (f64::from(a) / f64::from(b)) as f32;
    // The ratio and its two neighbours in magnitude (`f32::next_up` is newer than the MSRV).
    let bits = nearest.to_bits();
    [bits, bits.wrapping_sub(1), bits.wrapping_add(1)]
        .into_iter()
        .map(f32::from_bits)
        .filter(|r| r.is_finite())
        .find(|&r| {
            values()
                .zip(&chain)
                .all(|(v, y)| tail(v * r).to_bits() == y.to_bits())
        })
        .map(|r| Rewrite::Scale { x, r })
}

/// A broadcast of the scalar constant `v` to `inst`'s shape, named after it.
fn splat(rw: &mut Rewriter, inst: &Instruction, what: &str, v: f32) -> InstId {
    let k = rw.constant(&format!("{}.{what}", inst.name), Literal::scalar_f32(v));
    push(
        rw,
        inst,
        &format!("{what}.b"),
        Op::Broadcast {
            dimensions: Vec::new(),
        },
        &[k],
    )
}

/// A new instruction of `inst`'s shape, named after it.
fn push(rw: &mut Rewriter, inst: &Instruction, what: &str, op: Op, operands: &[InstId]) -> InstId {
    rw.push(Instruction {
        name: format!("{}.{what}", inst.name),
        op,
        operands: operands.to_vec(),
        shape: inst.shape.clone(),
    })
}

/// Largest clamp bound (in magnitude) of a quantization [`reciprocal`] rewrites (`2^16`: any
/// 8- or 16-bit zero point and range; [`RECIPROCAL_PROBES`] values checked per half-integer).
const MAX_QUANTIZED: f32 = 65_536.0;

/// Floats checked on each side of `b · h` for each half-integer `h` between the clamp bounds:
/// [`markstein`] and the division are both within 2 ulps of `x / b`, so they can only round to
/// different integers where `x / b` lies within 2 ulps of some `h`, which is within 8 ulps of
/// `x` from `b · h`; 16 leaves a margin.
const RECIPROCAL_PROBES: u32 = 16;

/// `x / b` with the reciprocal `r = 1/b` (rounded) and no division, as the rewrite computes it:
/// `q = x·r`, the residual `e = fma(q, −b, x)`, `q' = fma(e, r, q)` (Markstein's correction:
/// within an ulp of `x / b`), or `q` where `q'` is NaN (an infinite or NaN `x`, an overflowing
/// `x·r`: the division's own result there, or one beyond every clamp bound).
fn markstein(x: f32, b: f32, r: f32) -> f32 {
    let q = x * r;
    let e = q.mul_add(-b, x);
    let q1 = e.mul_add(r, q);
    if q1.is_nan() { q } else { q1 }
}

/// A quantization `round(clamp(lo, x / b, hi))` (rounding `(· + k) − k`, `b`, `lo`, `hi`
/// scalar constants, `lo` and `hi` integers of at most [`MAX_QUANTIZED`]) of a model input `x`
/// (raw f32 values; a small integer range is [`requantization`]'s): `x / b` becomes [`markstein`]'s
/// sequence (a multiply, two fused multiply-adds, a NaN test: a `vdivps` costs 10–16 cycles a
/// vector, the input quantization of a model was divide-bound). Checked at every `x` where the
/// two could round to different integers ([`RECIPROCAL_PROBES`] around `b · h` for every
/// half-integer `h` in `(lo, hi)`); the rewrite is refused if any differs.
fn reciprocal(
    c: &Computation,
    ranges: &[Range],
    users: &[Vec<InstId>],
    outs: &[usize],
    id: InstId,
) -> Option<Rewrite> {
    let di = c.inst(id);
    if di.op != Op::Binary(BinaryOp::Divide) || di.shape.dtype != DType::F32 {
        return None;
    }
    let x = di.operands[0];
    let b = scalar(c, di.operands[1])?;
    // Only a model input's quantization: elsewhere (densenet's batch-normalized concatenations)
    // the NaN test's select kept the chain out of the fusions that read it (143 → 243 kernels,
    // 27 → 41 ms).
    let input = matches!(c.inst(x).op, Op::Parameter { .. });
    if !input || ranges[x.index()].integer || c.inst(x).shape != di.shape {
        return None;
    }
    let (k, lo, hi) = rounded_clamp(c, id, rounding_after(users, outs, id)?)?;
    if k != ROUND_SHIFT {
        return None;
    }
    let bounds_ok = |v: f32| v.fract() == 0.0 && v.abs() <= MAX_QUANTIZED;
    // A divisor far from 1 could make the residual subnormal; none of a real scale is.
    let b_ok = b.is_normal() && (2f32.powi(-60)..=2f32.powi(60)).contains(&b.abs());
    if !bounds_ok(lo) || !bounds_ok(hi) || lo > hi || !b_ok {
        return None;
    }
    let r = 1.0 / b;
    let tail = |v: f32| (v.max(lo).min(hi) + k) - k;
    let agree = |x: f32| tail(markstein(x, b, r)).to_bits() == tail(x / b).to_bits();
    let edges = [0.0, f32::MAX, f32::INFINITY, f32::MIN_POSITIVE, 1e-45];
    if !edges.iter().all(|&e| agree(e) && agree(-e)) || !agree(f32::NAN) {
        return None;
    }
    let mut h = lo + 0.5;
    while h < hi {
        let at = (f64::from(b) * f64::from(h)) as f32;
        let bits = at.to_bits();
        let near = (0..=2 * RECIPROCAL_PROBES)
            .map(|i| bits.wrapping_add(i).wrapping_sub(RECIPROCAL_PROBES));
        if !near.map(f32::from_bits).all(agree) {
            return None;
        }
        h += 1.0;
    }
    Some(Rewrite::Reciprocal { x, b, r })
}
