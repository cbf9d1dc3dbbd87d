//! Rounds the operands of dots and convolutions of a `precision: bf16` (`precision: f16`) module
//! (`ir/precision.rs`) to bfloat16 (IEEE half), in the IR, so the reference interpreter computes what the
//! library computes.
//!
//! Contract: [`round_operands`] runs after the optimisation pipeline and after
//! `weight_rounding.rs` has rounded the constant weights, and before the buffer plan. For every
//! dot and convolution (an entry instruction, or the heavy op of an output fusion, as
//! `codegen/core/packing.rs` `heavy_in` finds them) each f32 operand that is not a constant
//! (constants are rounded weights by then) is rounded by a `round-bf16` (`UnaryOp::RoundBf16`;
//! `round-f16`, `UnaryOp::RoundF16`, for `f16`: below, bf16 stands for either), once per value however many products read it:
//! - where products are the value's only readers and a loop or output fusion computes it, at the
//!   root of that fusion (the value itself becomes the rounded one: no kernel, no buffer more; an
//!   output fusion's register epilogue applies it in registers, `codegen/cpu/epilogue.rs`);
//! - otherwise by a new instruction placed just before the value's first product. Where the value
//!   is also read by a fusion's other instructions (its epilogue), only the product's read is
//!   rounded: the fusion gains a parameter for the rounded value.
//!
//! Everything else is untouched, so after it every product of the module multiplies bfloat16
//! values exactly in f32 and accumulates in f32: the compiled code (f32 FMA on the rounded values,
//! or `vdpbf16ps`, `codegen/cpu/gemm_bf16.rs`) differs from the interpreter only in summation
//! order.
//!
//! Why not in the pipeline: a rounding between a pad, transpose or batch norm and its product
//! would stop the passes that fold those into the product (window padding, contracting dims,
//! folded weights); after the pipeline, the products are the ones the library computes.

use crate::codegen::core::packing::heavy_in;
use crate::ir::{Computation, DType, FusionKind, InstId, Instruction, Module, Op, UnaryOp};
use crate::passes::rewrite::{Rewriter, rebuild};

/// Rounds every non-constant f32 operand of `m`'s dots and convolutions to bfloat16 when
/// `m.precision` says so (`Precision::rounds_operands`); how many `round-bf16` it added.
pub fn round_operands(m: &mut Module) -> usize {
    let Some(round_op) = m.precision.operand_rounding() else {
        return 0;
    };
    let suffix = m.precision.name();
    // Which entry values each product reads as its operands (lhs, rhs).
    let n = m.entry.instructions.len();
    let reads: Vec<Option<(InstId, InstId)>> = (0..n)
        .map(|i| heavy_in(m, InstId(i as u32)).map(|(_, l, r, _)| (l, r)))
        .collect();
    let needs = |c: &Computation, v: InstId| {
        let inst = c.inst(v);
        inst.shape.dtype == DType::F32
            && !matches!(inst.op, Op::Constant(_))
            && inst.op != Op::Unary(round_op)
    };
    // Values read only as the operands products round: rounded where they are computed.
    let c = &m.entry;
    let mut uses = vec![0usize; n];
    let mut product_uses = vec![0usize; n];
    for o in &c.outputs {
        uses[o.value.index()] += 1;
    }
    for inst in &c.instructions {
        for &o in &inst.operands {
            uses[o.index()] += 1;
        }
        for j in rounded_slots(inst) {
            product_uses[inst.operands[j].index()] += 1;
        }
    }
    let at_root: Vec<bool> = (0..n)
        .map(|v| {
            let inst = &c.instructions[v];
            needs(c, InstId(v as u32))
                && uses[v] == product_uses[v]
                && matches!(&inst.op, Op::Fusion { kind: FusionKind::Loop | FusionKind::Output, computation }
                    if computation.outputs.len() == 1)
        })
        .collect();
    let mut rounded: Vec<Option<InstId>> = vec![None; n];
    let mut added = 0;
    let old = m.entry.clone();
    rebuild(m, |rw, id, inst, mut operands| {
        let mut new = inst.clone();
        let mut changed = false;
        if let Some((lhs, rhs)) = reads[id.index()] {
            let mut round = |rw: &mut Rewriter, v: InstId| -> InstId {
                if let Some(r) = rounded[v.index()] {
                    return r;
                }
                let src = old.inst(v);
                let r = rw.push(Instruction {
                    name: format!("{}.{suffix}", src.name),
                    op: Op::Unary(round_op),
                    operands: vec![rw.get(v)],
                    shape: src.shape.clone(),
                });
                rounded[v.index()] = Some(r);
                added += 1;
                r
            };
            match &inst.op {
                Op::Dot(_) | Op::Convolution { .. } => {
                    for (j, v) in [lhs, rhs].into_iter().enumerate() {
                        if needs(&old, v) {
                            operands[j] = round(rw, v);
                            changed = true;
                        }
                    }
                }
                Op::Fusion {
                    kind: FusionKind::Output,
                    computation,
                } => {
                    let mut comp = (**computation).clone();
                    for (slot, v) in [lhs, rhs].into_iter().enumerate() {
                        if !needs(&old, v) {
                            continue;
                        }
                        let r = round(rw, v);
                        match heavy_param(&comp, slot) {
                            Some((index, true)) => operands[index] = r,
                            Some((_, false)) => {
                                comp = with_own_param(&comp, slot, operands.len(), suffix);
                                operands.push(r);
                            }
                            None => continue,
                        }
                        changed = true;
                    }
                    new.op = Op::Fusion {
                        kind: FusionKind::Output,
                        computation: Box::new(comp),
                    };
                }
                _ => {}
            }
        }
        // A value only products read, computed by a fusion: rounded at the fusion's root (after
        // its own operands, when it is a product too).
        if at_root[id.index()] {
            new.op = rounded_root(&new.op, round_op, suffix);
            added += 1;
            changed = true;
        }
        new.operands = operands;
        let id2 = rw.push(new);
        rw.replace(id, id2);
        if at_root[id.index()] {
            rounded[id.index()] = Some(id2);
        }
        changed
    });
    added
}

/// The operand positions of entry instruction `inst` that a product reads as its operand and
/// this pass rounds: a dot's or convolution's two, an output fusion's parameters that only its
/// heavy op reads.
fn rounded_slots(inst: &Instruction) -> Vec<usize> {
    match &inst.op {
        Op::Dot(_) | Op::Convolution { .. } => vec![0, 1],
        Op::Fusion {
            kind: FusionKind::Output,
            computation,
        } => (0..2)
            .filter_map(|slot| match heavy_param(computation, slot) {
                Some((index, true)) => Some(index),
                _ => None,
            })
            .collect(),
        _ => vec![],
    }
}

/// A fusion `op` with a `round_op` (named `.suffix`) put on its (single) output.
fn rounded_root(op: &Op, round_op: UnaryOp, suffix: &str) -> Op {
    let Op::Fusion { kind, computation } = op else {
        unreachable!("only fusions are rounded at their root")
    };
    let mut comp = (**computation).clone();
    let root = comp.outputs[0].value;
    let r = comp.inst(root);
    comp.instructions.push(Instruction {
        name: format!("{}.{suffix}", r.name),
        op: Op::Unary(round_op),
        operands: vec![root],
        shape: r.shape.clone(),
    });
    comp.outputs[0].value = InstId((comp.instructions.len() - 1) as u32);
    Op::Fusion {
        kind: *kind,
        computation: Box::new(comp),
    }
}

/// The heavy op of an output fusion's computation (its first dot or convolution).
fn heavy(comp: &Computation) -> Option<InstId> {
    comp.instructions
        .iter()
        .position(|h| matches!(h.op, Op::Dot(_) | Op::Convolution { .. }))
        .map(|i| InstId(i as u32))
}

/// The parameter index the heavy op of `comp` reads as operand `slot` (0: lhs, 1: rhs), and
/// whether only the heavy op reads that parameter.
fn heavy_param(comp: &Computation, slot: usize) -> Option<(usize, bool)> {
    let h = heavy(comp)?;
    let p = comp.inst(h).operands[slot];
    let Op::Parameter { index } = comp.inst(p).op else {
        return None;
    };
    let readers = comp
        .instructions
        .iter()
        .flat_map(|i| &i.operands)
        .filter(|&&o| o == p)
        .count();
    Some((index, readers == 1))
}

/// `comp` with its heavy op's operand `slot` read from a new parameter `index` (placed just
/// before the heavy op), the old parameter left to the other readers.
fn with_own_param(comp: &Computation, slot: usize, index: usize, suffix: &str) -> Computation {
    let h = heavy(comp).expect("heavy_param found it");
    let mut rw = Rewriter::new(comp);
    for (i, inst) in comp.instructions.iter().enumerate() {
        if i == h.index() {
            let old = comp.inst(inst.operands[slot]);
            let p = rw.push(Instruction {
                name: format!("{}.{suffix}", old.name),
                op: Op::Parameter { index },
                operands: vec![],
                shape: old.shape.clone(),
            });
            let mut new = inst.clone();
            new.operands = inst.operands.iter().map(|&o| rw.get(o)).collect();
            new.operands[slot] = p;
            let id = rw.push(new);
            rw.replace(InstId(i as u32), id);
        } else {
            rw.copy(InstId(i as u32));
        }
    }
    rw.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Precision;

    fn text(body: &str) -> Module {
        crate::ir::parse_module(&format!(
            "HloModule m, precision=bf16\n\nENTRY %main {{\n{body}}}\n"
        ))
        .unwrap()
    }

    #[test]
    fn both_operands_are_rounded_once() {
        let mut m = text(
            "  %x = f32[2,2]{1,0} parameter(0)\n  \
             %y = f32[2,2]{1,0} parameter(1)\n  \
             %w = f32[2,2]{1,0} constant({1, 2, 3, 4})\n  \
             %a = f32[2,2]{1,0} dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
             %b = f32[2,2]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
             ROOT %outputs = (f32[2,2]{1,0}, f32[2,2]{1,0}) tuple(%a, %b), names={a, b}\n",
        );
        assert_eq!(round_operands(&mut m), 2);
        let printed = crate::ir::print_module(&m);
        assert!(
            printed.contains("%x.bf16 = f32[2,2]{1,0} round-bf16(%x)"),
            "{printed}"
        );
        assert!(printed.contains("dot(%x.bf16, %y.bf16)"), "{printed}");
        assert!(printed.contains("dot(%x.bf16, %w)"), "{printed}");
        crate::ir::verify::verify(&m).unwrap();
    }

    /// A hidden layer (an output fusion) read only by the next product is rounded at its root,
    /// and keeps the rounding of its own input (the bug `tests/kernels.rs` `bf16_two_layers`
    /// found: the root rounding replaced the fusion without its operand's).
    #[test]
    fn a_product_rounded_at_its_root_keeps_its_operand_rounding() {
        let mut m = crate::ir::parse_module(
            "HloModule m, precision=bf16\n\n\
             %fused.r {\n  \
             %p0.x = f32[3,4]{1,0} parameter(0)\n  \
             %p1.w = f32[4,5]{1,0} parameter(1)\n  \
             %h = f32[3,5]{1,0} dot(%p0.x, %p1.w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
             %r = f32[3,5]{1,0} negate(%h)\n  \
             ROOT %outputs = (f32[3,5]{1,0}) tuple(%r), names={r}\n}\n\n\
             ENTRY %main {\n  \
             %x = f32[3,4]{1,0} parameter(0)\n  \
             %w = f32[4,5]{1,0} constant({...})\n  \
             %r = f32[3,5]{1,0} fusion(%x, %w), kind=output, calls=%fused.r\n  \
             %v = f32[5,2]{1,0} constant({...})\n  \
             %y = f32[3,2]{1,0} dot(%r, %v), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
             ROOT %outputs = (f32[3,2]{1,0}) tuple(%y), names={y}\n}\n",
        )
        .unwrap();
        assert_eq!(round_operands(&mut m), 2);
        let printed = crate::ir::print_module(&m);
        assert!(printed.contains("round-bf16(%x)"), "{printed}");
        assert!(printed.contains("fusion(%x.bf16, %w)"), "{printed}");
        assert!(printed.contains("round-bf16(%r)"), "{printed}");
        assert!(printed.contains("dot(%r, %v)"), "{printed}");
        crate::ir::verify::verify(&m).unwrap();
    }

    #[test]
    fn f16_rounds_with_round_f16() {
        let mut m = text(
            "  %x = f32[2,2]{1,0} parameter(0)\n  \
             %w = f32[2,2]{1,0} constant({1, 2, 3, 4})\n  \
             %b = f32[2,2]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
             ROOT %outputs = (f32[2,2]{1,0}) tuple(%b), names={b}\n",
        );
        m.precision = Precision::F16;
        assert_eq!(round_operands(&mut m), 1);
        let printed = crate::ir::print_module(&m);
        assert!(
            printed.contains("%x.f16 = f32[2,2]{1,0} round-f16(%x)"),
            "{printed}"
        );
        assert!(printed.contains("dot(%x.f16, %w)"), "{printed}");
        crate::ir::verify::verify(&m).unwrap();
    }

    #[test]
    fn other_precisions_are_untouched() {
        let mut m = text(
            "  %x = f32[2,2]{1,0} parameter(0)\n  \
             %a = f32[2,2]{1,0} dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
             ROOT %outputs = (f32[2,2]{1,0}) tuple(%a), names={a}\n",
        );
        m.precision = Precision::Bf16Weights;
        assert_eq!(round_operands(&mut m), 0);
    }
}
