//! Constant folding: an instruction whose operands are all constants (or broadcasts of constants)
//! is evaluated at compile time by the reference interpreter and replaced by its value.
//!
//! Limits: a broadcast alone is never folded (it would only make a constant bigger); a result that
//! is one repeated value becomes `broadcast(scalar constant)`, whatever its size; any other result
//! is folded only up to [`CONST_FOLD_MEM_BUDGET`] bytes, so folding never bloats the library.

use super::Pass;
use super::rewrite::{Rewriter, rebuild};
use crate::interp::evaluate;
use crate::ir::{Builder, InstId, Instruction, Literal, Module, Op, Shape};

/// Largest folded constant (bytes): 4 MiB, tract's budget for the same pass; weights pre-packed by
/// later passes stay well below it for edge models, and larger results stay computed at run time.
pub const CONST_FOLD_MEM_BUDGET: usize = 4 << 20;

/// The constant-folding pass.
pub struct ConstantFolding;

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
                && operands.iter().all(|&o| constant_like(rw, o));
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
            } else if lit.bytes().map_or(usize::MAX, |b| b.len()) <= CONST_FOLD_MEM_BUDGET {
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
