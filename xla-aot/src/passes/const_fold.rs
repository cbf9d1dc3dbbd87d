//! Constant folding: an instruction whose operands are all constants (or broadcasts of constants)
//! is evaluated at compile time by the reference interpreter and replaced by its value.
//!
//! Limits (`limits.rs`): a broadcast alone is never folded (it would only make a constant
//! bigger); nothing is evaluated whose operands (broadcasts expanded) or result exceed
//! [`FOLD_MAX_TENSOR_BYTES`], so the interpreter never allocates more than a bounded amount; a
//! result that is one repeated value becomes `broadcast(scalar constant)`; any other result is
//! kept only up to [`CONST_FOLD_MEM_BUDGET`] bytes, and at most [`FOLD_TOTAL_BYTES`] of such
//! constants are made in one compile, so folding never bloats the library. A declined fold leaves
//! the instruction to run time: the module stays correct.

use super::Pass;
use super::rewrite::{Rewriter, rebuild};
use crate::interp::evaluate;
use crate::ir::{Builder, InstId, Instruction, Literal, Module, Op, Shape};
pub use crate::limits::CONST_FOLD_MEM_BUDGET;
use crate::limits::{FOLD_MAX_TENSOR_BYTES, FOLD_TOTAL_BYTES};
use std::cell::Cell;

/// The constant-folding pass. It counts the bytes of the dense constants it made, over every run
/// of one pipeline (one compile), against [`FOLD_TOTAL_BYTES`].
#[derive(Default)]
pub struct ConstantFolding {
    made_bytes: Cell<usize>,
}

/// Bytes the interpreter holds for a value of `shape` (it computes in 32-bit elements).
fn eval_bytes(shape: &Shape) -> usize {
    shape.element_count().saturating_mul(4)
}

/// Whether a (new) value is a constant or a broadcast of one.
fn constant_like(rw: &Rewriter, id: InstId) -> bool {
    let inst = rw.new_inst(id);
    match &inst.op {
        Op::Constant(l) => !l.is_elided(),
        Op::Broadcast { .. } => constant_like(rw, inst.operands[0]),
        _ => false,
    }
}

/// Copies the constant-like subgraph of `id` into `b`; returns its id there.
fn copy_into(rw: &Rewriter, b: &mut Builder, id: InstId) -> InstId {
    let inst = rw.new_inst(id);
    match &inst.op {
        Op::Constant(l) => b.constant(&inst.name, l.clone()),
        Op::Broadcast { dimensions } => {
            let x = copy_into(rw, b, inst.operands[0]);
            b.broadcast(&inst.name, x, dimensions.clone(), inst.shape.dims.clone())
                .expect("a verified broadcast stays valid")
        }
        _ => unreachable!("only constant-like values are copied"),
    }
}

/// Evaluates `inst` (operands: new ids of constant-like values).
fn fold(rw: &Rewriter, inst: &Instruction, operands: &[InstId]) -> Option<Literal> {
    let mut b = Builder::new("fold");
    let ops: Vec<InstId> = operands.iter().map(|&o| copy_into(rw, &mut b, o)).collect();
    let id = match &inst.op {
        Op::Reshape => b
            .reshape(&inst.name, ops[0], inst.shape.dims.clone())
            .ok()?,
        op => b.add(&inst.name, op.clone(), &ops).ok()?,
    };
    b.output("y", id);
    evaluate(&b.finish(), &[]).ok()?.pop()
}

/// `lit` as (scalar, true) if every element is bitwise the same.
fn splat(lit: &Literal) -> Option<Literal> {
    let bytes = lit.bytes()?;
    let w = lit.dtype.size_bytes();
    let first = bytes.get(..w)?;
    if bytes.chunks(w).all(|c| c == first) {
        Some(Literal {
            dtype: lit.dtype,
            dims: Vec::new(),
            data: crate::ir::LiteralData::Dense(first.to_vec().into()),
        })
    } else {
        None
    }
}

impl Pass for ConstantFolding {
    fn name(&self) -> &'static str {
        "constant-folding"
    }

    fn run(&self, m: &mut Module) -> bool {
        rebuild(m, |rw, old, inst, operands| {
            let foldable = !operands.is_empty()
                && !matches!(
                    inst.op,
                    Op::Broadcast { .. } | Op::Parameter { .. } | Op::Constant(_)
                )
                && operands.iter().all(|&o| constant_like(rw, o))
                && eval_bytes(&inst.shape) <= FOLD_MAX_TENSOR_BYTES
                && operands
                    .iter()
                    .all(|&o| eval_bytes(&rw.new_inst(o).shape) <= FOLD_MAX_TENSOR_BYTES);
            let folded = if foldable {
                fold(rw, inst, &operands)
            } else {
                None
            };
            let Some(lit) = folded else {
                rw.copy(old);
                return false;
            };
            if let Some(scalar) = splat(&lit).filter(|_| !lit.dims.is_empty()) {
                let s = rw.constant(&format!("{}.value", inst.name), scalar);
                let id = rw.push(Instruction {
                    name: inst.name.clone(),
                    op: Op::Broadcast {
                        dimensions: Vec::new(),
                    },
                    operands: vec![s],
                    shape: Shape::new(inst.shape.dtype, inst.shape.dims.clone()),
                });
                rw.replace(old, id);
                true
            } else if let Some(n) = lit
                .bytes()
                .map(|b| b.len())
                .filter(|&n| n <= CONST_FOLD_MEM_BUDGET)
                .filter(|&n| self.made_bytes.get() + n <= FOLD_TOTAL_BYTES)
            {
                self.made_bytes.set(self.made_bytes.get() + n);
                let id = rw.constant(&inst.name, lit);
                rw.replace(old, id);
                true
            } else {
                rw.copy(old);
                false
            }
        })
    }
}
