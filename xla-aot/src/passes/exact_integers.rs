//! Integer steps that the value ranges prove exact disappear: a quantized model's requantization
//! leaves `q + zero_point`, its s32 round trip and `− zero_point` between every two products,
//! which compute nothing once the ranges show `q` is an integer.
//!
//! Contract: with the ranges of `ir/value_range.rs` (sound for the compiled code, NaN included):
//! - `convert(convert(x, s32), f32)` becomes `x` where `x` is an f32 of the same shape whose
//!   range holds only integers an s32 holds, and no NaN (`Range::fits_s32`): truncation and
//!   saturation then change nothing, and no NaN turns into 0;
//! - `subtract(add(x, c), c)` and `add(subtract(x, c), c)`, with `c` one scalar integer (a
//!   constant or its broadcast, the same instruction or the same value), become `x` where `x` is
//!   an integer range with `|x| + |c| ≤ 2^24`: both steps are then exact in f32.
//!
//! Every rewrite gives bit for bit the value it replaces, so the interpreter and every target
//! compute what they computed before. The replaced steps are left for DCE.

use super::Pass;
use super::rewrite::rebuild;
use crate::ir::value_range::{self, Range};
use crate::ir::{BinaryOp, Computation, DType, InstId, Module, Op};

/// Below this magnitude every integer is an exact f32 (2^24).
const F32_EXACT_INT: f64 = 16_777_216.0;

/// The exact-integers pass.
pub struct ExactIntegers;

impl Pass for ExactIntegers {
    fn name(&self) -> &'static str {
        "exact-integers"
    }

    fn run(&self, m: &mut Module) -> bool {
        let ranges = value_range::ranges(m);
        let same: Vec<Option<InstId>> = m
            .entry
            .ids()
            .map(|id| exact(&m.entry, &ranges, id))
            .collect();
        if same.iter().all(Option::is_none) {
            return false;
        }
        rebuild(m, |rw, id, _, _| match same[id.index()] {
            Some(x) => {
                let new = rw.get(x);
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
