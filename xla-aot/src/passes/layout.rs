//! Layout assignment: weights are re-laid at compile time so the kernels that read them walk
//! memory contiguously.
//!
//! Contract: today one rule, for dots (dense layers, matmuls) whose right-hand side is a constant
//! read by nothing else: the CPU dot kernel's innermost loop runs over the rhs free dimensions
//! (the output columns), so those dimensions become the minor-most in the constant's layout
//! (`[out, in]` weights are stored `in`-major, the `out` index contiguous) and the innermost loop
//! loads consecutive weights instead of striding by the input width. The emitter writes the
//! constant's bytes in that layout (`codegen/cpu.rs`, `relayout`). Parameters and outputs keep
//! their row-major layout (the C API), and no layout conversion is ever needed at run time: kernels
//! address every buffer through its layout. Runs before fusion, so fused computations see the
//! final layouts.

use super::Pass;
use super::rewrite::users;
use crate::ir::{Layout, Module, Op};

/// The layout-assignment pass.
pub struct LayoutAssignment;

impl Pass for LayoutAssignment {
    fn name(&self) -> &'static str {
        "layout-assignment"
    }

    fn run(&self, m: &mut Module) -> bool {
        let c = &m.entry;
        let (users_of, outs) = users(c);
        let mut changes = Vec::new();
        for (w, inst) in c.instructions.iter().enumerate() {
            if !matches!(inst.op, Op::Constant(_)) || outs[w] > 0 || users_of[w].is_empty() {
                continue;
            }
            // Every user must be a dot reading it as rhs, with the same free dims.
            let mut wanted: Option<Vec<usize>> = None;
            let ok = users_of[w].iter().all(|u| {
                let ui = c.inst(*u);
                let Op::Dot(d) = &ui.op else { return false };
                if ui.operands[1].index() != w || ui.operands[0].index() == w {
                    return false;
                }
                let free: Vec<usize> = (0..inst.shape.rank())
                    .filter(|i| !d.rhs_batch.contains(i) && !d.rhs_contracting.contains(i))
                    .collect();
                match &wanted {
                    None => {
                        wanted = Some(free);
                        true
                    }
                    Some(f) => *f == free,
                }
            });
            let Some(free) = wanted.filter(|_| ok) else {
                continue;
            };
            // Free dims minor-most (the last free dim fastest), then the others, last fastest.
            let mut m2m: Vec<usize> = free.iter().rev().copied().collect();
            m2m.extend((0..inst.shape.rank()).rev().filter(|d| !free.contains(d)));
            let layout = Layout {
                minor_to_major: m2m,
            };
            if layout != inst.shape.layout {
                changes.push((w, layout));
            }
        }
        let changed = !changes.is_empty();
        for (w, layout) in changes {
            m.entry.instructions[w].shape.layout = layout;
        }
        changed
    }
}
