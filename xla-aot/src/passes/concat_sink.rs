//! Elementwise chains moved before the concatenation they read: `f(concat(a, b))` →
//! `concat(f(a), f(b))`, so each piece of `f` fuses into the kernel that computes its operand.
//!
//! A quantized model concatenates dequantized branches and quantizes the result (squeezenet's
//! fire modules: `Q(concat(DQ(conv₁), DQ(conv₂)))`, the QDQ form `quantize_static` writes). As
//! imported, the requantization of each branch and the quantization after the concatenation run
//! in one kernel that reads both convolutions' raw results and writes the concatenation: a pass
//! over 4 bytes per element in and out (squeezenet uint8: 107 µs of its first fire module's 300).
//! Moved before the concatenation, each branch's whole chain is elementwise on a convolution's
//! result, so it becomes that convolution's register epilogue, and the concatenation is then
//! assembled in place (`arena/concat_views.rs`): no kernel at all.
//!
//! Contract, for an entry `concatenate` `C` along dim `d`:
//! - The chain below `C` is walked while the value has exactly one reader, which reads it once,
//!   and is no model output: each step an elementwise op (`Unary`, `Binary`, `convert`, `clamp`,
//!   `fma`, `compare`, `select`) whose other operands are *uniform along `d`*: a scalar, a
//!   `broadcast` whose operand has no extent above one along `d`, or an f32 splat constant.
//! - Every operand of `C` must come from a dot, a convolution or a max or min pool through
//!   elementwise steps with one non-uniform operand each (or be one): where no kernel would
//!   absorb the pieces, the rewrite would only trade one kernel for several.
//! - The steps are rebuilt per operand at that operand's dims (uniform operands rebuilt at the
//!   piece's dims), in the same order with the same operands, so every element is computed by
//!   the same operations on the same values: the rewrite changes no arithmetic.
//!
//! The old chain is left for DCE.

use super::Pass;
use super::pool_first::splat;
use super::rewrite::{Rewriter, rebuild, users};
use crate::ir::{Computation, DType, InstId, Instruction, Literal, Module, Op, ReduceKind, Shape};
use std::collections::HashMap;

/// The concat-sinking pass.
pub struct ConcatSink;

/// A rewrite: the concatenation, its dim, and the steps below it (top first), each with the
/// operand slot that reads the chain.
struct Plan {
    concat: InstId,
    dim: usize,
    steps: Vec<(InstId, usize)>,
}

/// Whether `id` is the same at every index along dim `d` of its (full) shape.
fn uniform(c: &Computation, id: InstId, d: usize) -> bool {
    let inst = c.inst(id);
    if inst.shape.rank() == 0 {
        return true;
    }
    match &inst.op {
        Op::Broadcast { dimensions } => {
            let x = &c.inst(inst.operands[0]).shape;
            dimensions
                .iter()
                .position(|&r| r == d)
                .is_none_or(|i| x.dims[i] == 1)
        }
        Op::Constant(l) => l.dtype == DType::F32 && splat(l).is_some(),
        _ => false,
    }
}

/// Whether `op` is an elementwise op the chain may contain.
fn elementwise(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_)
            | Op::Binary(_)
            | Op::Convert { .. }
            | Op::Clamp
            | Op::Fma
            | Op::MulQ31
            | Op::Compare(_)
            | Op::Select
    )
}

/// Whether `id` is a dot, a convolution or a max or min pool, or reached from one through
/// elementwise steps whose other operands are all scalars, broadcasts or constants: a kernel
/// would absorb a piece of the chain as its epilogue.
fn from_heavy(c: &Computation, mut id: InstId) -> bool {
    loop {
        let inst = c.inst(id);
        match &inst.op {
            Op::Dot(_) | Op::Convolution { .. } => return true,
            // A max or min pool takes its epilogue into its kernel too (`fusion.rs`
            // `pool_epilogue`): squeezenet_qdq_s8's pools before a fire module's concatenation
            // (`pool_first.rs`) and the zero-point subtraction after it.
            Op::ReduceWindow {
                kind: ReduceKind::Max | ReduceKind::Min,
                ..
            } => return true,
            op if elementwise(op) => {
                let mut data = inst.operands.iter().filter(|&&o| {
                    let oi = c.inst(o);
                    oi.shape.rank() > 0 && !matches!(oi.op, Op::Broadcast { .. } | Op::Constant(_))
                });
                match (data.next(), data.next()) {
                    (Some(&o), None) => id = o,
                    _ => return false,
                }
            }
            _ => return false,
        }
    }
}

/// The rewrite of concatenation `cat`, if it applies.
fn plan(c: &Computation, cat: InstId, users: &[Vec<InstId>], outs: &[usize]) -> Option<Plan> {
    let Op::Concatenate { dimension: dim } = c.inst(cat).op else {
        return None;
    };
    if !c.inst(cat).operands.iter().all(|&o| from_heavy(c, o)) {
        return None;
    }
    let mut steps = Vec::new();
    let mut cur = cat;
    while let &[u] = users[cur.index()].as_slice() {
        if outs[cur.index()] != 0 {
            break;
        }
        let ui = c.inst(u);
        if !elementwise(&ui.op) {
            break;
        }
        let Some(slot) = ui.operands.iter().position(|&o| o == cur) else {
            break;
        };
        let sides_ok = ui
            .operands
            .iter()
            .enumerate()
            .all(|(j, &o)| j == slot || uniform(c, o, dim));
        if !sides_ok {
            break;
        }
        steps.push((u, slot));
        cur = u;
    }
    (!steps.is_empty()).then_some(Plan {
        concat: cat,
        dim,
        steps,
    })
}

/// Uniform operand `old` rebuilt at `dims` (a scalar is used as it is).
fn rebuild_side(rw: &mut Rewriter, old: InstId, dims: &[usize], name: &str) -> InstId {
    let inst = rw.old.inst(old).clone();
    if inst.shape.rank() == 0 {
        return rw.get(old);
    }
    let (op, x) = match &inst.op {
        Op::Broadcast { .. } => (inst.op.clone(), rw.get(inst.operands[0])),
        Op::Constant(l) => {
            let v = splat(l).expect("uniform constants are splats");
            let s = rw.constant(&format!("{name}.splat"), Literal::scalar_f32(v));
            (
                Op::Broadcast {
                    dimensions: Vec::new(),
                },
                s,
            )
        }
        _ => unreachable!("uniform operands are scalars, broadcasts or splats"),
    };
    rw.push(Instruction {
        name: format!("{name}.side"),
        shape: Shape::new(inst.shape.dtype, dims.to_vec()),
        operands: vec![x],
        op,
    })
}

impl Pass for ConcatSink {
    fn name(&self) -> &'static str {
        "concat-sinking"
    }

    fn run(&self, m: &mut Module) -> bool {
        let (users, outs) = users(&m.entry);
        // Keyed by the chain's last step, where the new concatenation replaces it.
        let mut plans: HashMap<InstId, Plan> = m
            .entry
            .ids()
            .filter_map(|cat| plan(&m.entry, cat, &users, &outs))
            .map(|p| (p.steps.last().expect("non-empty").0, p))
            .collect();
        if plans.is_empty() {
            return false;
        }
        rebuild(m, |rw, old, inst, _ops| {
            let Some(p) = plans.remove(&old) else {
                rw.copy(old);
                return false;
            };
            let cat = rw.old.inst(p.concat).clone();
            let mut pieces = Vec::with_capacity(cat.operands.len());
            for (j, &o) in cat.operands.iter().enumerate() {
                let dims = rw.old.inst(o).shape.dims.clone();
                let mut cur = rw.get(o);
                for &(s, slot) in &p.steps {
                    let si = rw.old.inst(s).clone();
                    let name = format!("{}.{j}", si.name);
                    let mut operands = Vec::with_capacity(si.operands.len());
                    for (k, &so) in si.operands.iter().enumerate() {
                        operands.push(if k == slot {
                            cur
                        } else {
                            rebuild_side(rw, so, &dims, &name)
                        });
                    }
                    cur = rw.push(Instruction {
                        name,
                        op: si.op,
                        operands,
                        shape: Shape::new(si.shape.dtype, dims.clone()),
                    });
                }
                pieces.push(cur);
            }
            let id = rw.push(Instruction {
                name: format!("{}.cat", inst.name),
                op: Op::Concatenate { dimension: p.dim },
                operands: pieces,
                shape: Shape::new(inst.shape.dtype, inst.shape.dims.clone()),
            });
            rw.replace(old, id);
            true
        })
    }
}
