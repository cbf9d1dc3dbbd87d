//! The algebraic simplifier: rewrites that keep the value and remove work.
//!
//! Rules:
//! - `x + 0`, `0 + x`, `x - 0`, `x * 1`, `1 * x`, `x / 1` → `x`, with 0 and 1 given as splat
//!   constants or broadcasts of them (see the note on signed zeros).
//! - `transpose(transpose(x, p), q)` → `transpose(x, p∘q)`, and an identity transpose → `x`.
//! - `reshape(reshape(x))` → `reshape(x)`; a reshape to the same dims → `x`.
//! - `broadcast(broadcast(x))` → one broadcast; a broadcast that maps every dim to itself → `x`.
//! - a slice of the whole tensor, a pad of nothing, a one-operand concatenate, a reduce over no
//!   dims → `x`.
//! - a one-hot product `dot(convert(ids == iota), E)` of a constant table → the gather of its
//!   rows, bit for bit (`one_hot.rs`).
//!
//! Note on `x + 0`: IEEE gives `-0.0 + 0.0 = +0.0`, so removing the add can change the sign of a
//! zero; like XLA we accept that (no op of the spec distinguishes the sign of zero except `div`
//! by zero, whose ±inf would come out of a zero that was computed, not given).

use super::Pass;
use super::rewrite::{Rewriter, rebuild};
use crate::ir::{BinaryOp, InstId, Instruction, Module, Op};

/// The algebraic simplifier pass.
pub struct AlgebraicSimplifier;

/// The value of a splat (a constant with one repeated value, or a broadcast of one), as f32.
pub fn splat_value(rw: &Rewriter, id: InstId) -> Option<f32> {
    let inst = rw.new_inst(id);
    match &inst.op {
        Op::Constant(l) => {
            let v = l.to_f32_vec()?;
            let first = *v.first()?;
            v.iter()
                .all(|x| x.to_bits() == first.to_bits())
                .then_some(first)
        }
        Op::Broadcast { .. } => splat_value(rw, inst.operands[0]),
        _ => None,
    }
}

impl AlgebraicSimplifier {
    /// The replacement of `inst` (operands already remapped), if a rule applies: either an existing
    /// value or a new instruction.
    fn simplify(
        &self,
        rw: &Rewriter,
        inst: &Instruction,
        ops: &[InstId],
    ) -> Option<Result<InstId, Instruction>> {
        let is = |id: InstId, v: f32| splat_value(rw, id) == Some(v);
        let same_shape = |id: InstId| rw.new_inst(id).shape.same_type(&inst.shape);
        match &inst.op {
            Op::Binary(b) => {
                let (x, y) = (ops[0], ops[1]);
                let keep = match b {
                    BinaryOp::Add if is(y, 0.0) || is(y, -0.0) => Some(x),
                    BinaryOp::Add if is(x, 0.0) || is(x, -0.0) => Some(y),
                    BinaryOp::Subtract if is(y, 0.0) => Some(x),
                    BinaryOp::Multiply if is(y, 1.0) => Some(x),
                    BinaryOp::Multiply if is(x, 1.0) => Some(y),
                    BinaryOp::Divide if is(y, 1.0) => Some(x),
                    _ => None,
                };
                keep.filter(|&k| same_shape(k)).map(Ok)
            }
            Op::Transpose { permutation } => {
                if permutation.iter().enumerate().all(|(i, &p)| i == p) {
                    return Some(Ok(ops[0]));
                }
                let inner = rw.new_inst(ops[0]);
                if let Op::Transpose { permutation: p } = &inner.op {
                    // result dim i = inner dim q[i] = x dim p[q[i]]
                    let composed: Vec<usize> = permutation.iter().map(|&q| p[q]).collect();
                    if composed.iter().enumerate().all(|(i, &c)| i == c) {
                        return Some(Ok(inner.operands[0]));
                    }
                    return Some(Err(Instruction {
                        op: Op::Transpose {
                            permutation: composed,
                        },
                        operands: vec![inner.operands[0]],
                        ..inst.clone()
                    }));
                }
                None
            }
            Op::Reshape => {
                if same_shape(ops[0]) {
                    return Some(Ok(ops[0]));
                }
                let inner = rw.new_inst(ops[0]);
                if matches!(inner.op, Op::Reshape) {
                    let x = inner.operands[0];
                    if same_shape(x) {
                        return Some(Ok(x));
                    }
                    return Some(Err(Instruction {
                        operands: vec![x],
                        ..inst.clone()
                    }));
                }
                None
            }
            Op::Broadcast { dimensions } => {
                let inner = rw.new_inst(ops[0]);
                if same_shape(ops[0]) && dimensions.iter().enumerate().all(|(i, &d)| i == d) {
                    return Some(Ok(ops[0]));
                }
                if let Op::Broadcast { dimensions: d1 } = &inner.op {
                    let composed: Vec<usize> = d1.iter().map(|&d| dimensions[d]).collect();
                    return Some(Err(Instruction {
                        op: Op::Broadcast {
                            dimensions: composed,
                        },
                        operands: vec![inner.operands[0]],
                        ..inst.clone()
                    }));
                }
                None
            }
            Op::Slice {
                starts, strides, ..
            } => {
                let full = same_shape(ops[0])
                    && starts.iter().all(|&s| s == 0)
                    && strides.iter().all(|&s| s == 1);
                full.then_some(Ok(ops[0]))
            }
            Op::Pad { low, high } => {
                let none = low.iter().chain(high).all(|&p| p == 0);
                none.then_some(Ok(ops[0]))
            }
            Op::Concatenate { .. } if ops.len() == 1 => Some(Ok(ops[0])),
            Op::Reduce { dimensions, .. } if dimensions.is_empty() => Some(Ok(ops[0])),
            _ => None,
        }
    }
}

impl Pass for AlgebraicSimplifier {
    fn name(&self) -> &'static str {
        "algebraic-simplifier"
    }

    fn run(&self, m: &mut Module) -> bool {
        rebuild(m, |rw, old, inst, ops| {
            if let Some(id) = super::one_hot::gather_of_one_hot(rw, inst, &ops) {
                rw.replace(old, id);
                return true;
            }
            match self.simplify(rw, inst, &ops) {
                Some(Ok(existing)) => {
                    rw.replace(old, existing);
                    true
                }
                Some(Err(new)) => {
                    let id = rw.push(new);
                    rw.replace(old, id);
                    true
                }
                None => {
                    rw.copy(old);
                    false
                }
            }
        })
    }
}
