//! Concatenations assembled in place: producers write straight into their slice of the
//! concatenation's buffer, so the concatenation itself copies nothing.
//!
//! Contract: [`find`] picks the entry `concatenate` instructions whose every operand is a value
//! that (1) only this concatenation reads, and only once, (2) lives in the arena (not a
//! parameter, constant, output or reshape alias), (3) has the concatenation's layout, and (4)
//! is computed by a kernel the backend can make write through the concatenation's strides
//! (`strided`: the CPU's direct and Winograd convolutions); the concatenation itself must live
//! in the arena too. Each such operand gets a [`ConcatView`]: it is placed at its slice of the
//! concatenation's buffer (the first element of its range along the concatenated dimension), its
//! kernel writes with the concatenation's element strides, and the concatenation has no kernel.
//! XLA's buffer assignment does the same for concatenations whose operands can be given slices
//! of the output ("concat fusion" by aliasing). The buffer is live from the first operand's
//! definition to the concatenation's last use (`arena::plan`).

use crate::ir::{Computation, InstId, Op};

/// Where a value is written: into concatenation `concat`, starting at element `offset` of its
/// buffer (in the concatenation's physical layout), with the concatenation's strides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConcatView {
    pub concat: InstId,
    pub offset: usize,
}

/// The views of every value of `c` written into an assembled concatenation (`None` for the
/// rest), given which values are still to be placed in the arena (`in_arena`) and which the
/// backend can write with strides (`strided`).
pub fn find(
    c: &Computation,
    in_arena: &dyn Fn(InstId) -> bool,
    strided: &dyn Fn(InstId) -> bool,
) -> Vec<Option<ConcatView>> {
    let n = c.instructions.len();
    let mut readers = vec![0usize; n];
    for inst in &c.instructions {
        for &o in &inst.operands {
            readers[o.index()] += 1;
        }
    }
    let mut views = vec![None; n];
    for (i, inst) in c.instructions.iter().enumerate() {
        let Op::Concatenate { dimension } = inst.op else {
            continue;
        };
        let id = InstId(i as u32);
        let ok = in_arena(id)
            && inst.operands.iter().all(|&o| {
                let oi = c.inst(o);
                readers[o.index()] == 1
                    && in_arena(o)
                    && oi.shape.layout == inst.shape.layout
                    && oi.shape.dtype == inst.shape.dtype
                    && strided(o)
            });
        if !ok {
            continue;
        }
        let stride = element_stride(&inst.shape, dimension);
        let mut start = 0;
        for &o in &inst.operands {
            views[o.index()] = Some(ConcatView {
                concat: id,
                offset: start * stride,
            });
            start += c.inst(o).shape.dims[dimension];
        }
    }
    views
}

/// The distance in elements between neighbours along dimension `d` of `s`'s physical layout.
fn element_stride(s: &crate::ir::Shape, d: usize) -> usize {
    s.layout
        .minor_to_major
        .iter()
        .take_while(|&&m| m != d)
        .map(|&m| s.dims[m])
        .product()
}
