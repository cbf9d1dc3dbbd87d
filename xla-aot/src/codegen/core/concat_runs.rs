//! Concatenations along a loop's innermost dimension, read without selects.
//!
//! Contract: [`ConcatRuns::find`] walks a fused computation from an instruction along the edges
//! that carry dimension `m` of its index unchanged (same-shape elementwise ops, windows of size
//! one on `m`, concatenations along `m`) and records every concatenation along `m` it meets, with
//! the offset of its range in the start's index. The innermost loop over `m` then splits at
//! every operand boundary ([`ConcatRuns::runs`]); within a run each recorded concatenation reads
//! one known operand, so the emitter (`Emitter::value_of`) skips the per-element choice (two
//! clamps and a select per operand, which keep LLVM from widening the loop) and the loop loads
//! one operand's contiguous channels. A concatenation also reachable along any other edge (a
//! reshape, a broadcast, a gather) or at two offsets could be read at an index outside the
//! run, so it is not recorded, and neither is anything when the runs would be too many to pay for their code.
//! Pins are only set inside `Emitter::for_runs` and cleared after the loop.

use crate::ir::{Computation, InstId, Op};
use std::collections::{HashMap, HashSet};

/// The most runs an innermost loop is split into: each run repeats the loop body (a few loads
/// and a store). DenseNet-121's last block-3 layer reads 25 feature maps through nested
/// concatenations, DenseNet-201's 49; 64 keeps both.
pub const MAX_CONCAT_RUNS: usize = 64;

/// One concatenation read along the loop dimension: where its range starts in the loop's index
/// and where each operand starts in its own.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Recorded {
    id: InstId,
    offset: usize,
    /// Operand starts along the dimension, then the concatenation's extent.
    starts: Vec<usize>,
}

/// The concatenations an innermost loop reads, and the runs it splits into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConcatRuns {
    recorded: Vec<Recorded>,
    bounds: Vec<usize>,
}

/// A pinned concatenation: within the current run, instruction `id` reads operand `operand`,
/// whose index along the dimension is the concatenation's minus `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin {
    pub id: InstId,
    pub operand: usize,
    pub start: usize,
}

impl ConcatRuns {
    /// The concatenations along `m` read from `start` (whose dimension `m` has `extent`
    /// elements) in `comp`, or `None` when there are none worth splitting for.
    pub fn find(comp: &Computation, start: InstId, m: usize, extent: usize) -> Option<ConcatRuns> {
        Self::find_with(comp, start, m, extent, false)
    }

    /// [`ConcatRuns::find`] for a loop over an outer dimension `m`, walking also through
    /// concatenations along other dimensions (they carry `m` unchanged): an LSTM's output, the
    /// two directions concatenated along one dimension, each the steps along another.
    pub fn find_outer(
        comp: &Computation,
        start: InstId,
        m: usize,
        extent: usize,
    ) -> Option<ConcatRuns> {
        Self::find_with(comp, start, m, extent, true)
    }

    fn find_with(
        comp: &Computation,
        start: InstId,
        m: usize,
        extent: usize,
        through_others: bool,
    ) -> Option<ConcatRuns> {
        let mut offsets: HashMap<InstId, usize> = HashMap::new();
        let mut recorded = Vec::new();
        let mut elsewhere: HashSet<InstId> = HashSet::new();
        let mut stack = vec![(start, 0usize)];
        while let Some((id, offset)) = stack.pop() {
            if let Some(&o) = offsets.get(&id) {
                // Read at two offsets (a broadcast bias both halves share): index-dependent
                // below, so nothing under it is pinned.
                if o != offset {
                    elsewhere.insert(id);
                }
                continue;
            }
            offsets.insert(id, offset);
            let inst = comp.inst(id);
            match &inst.op {
                Op::Concatenate { dimension } if *dimension == m => {
                    let mut starts = vec![0];
                    for &o in &inst.operands {
                        let s = *starts.last().unwrap();
                        stack.push((o, offset + s));
                        starts.push(s + comp.inst(o).shape.dims[m]);
                    }
                    recorded.push(Recorded { id, offset, starts });
                }
                Op::Concatenate { .. } if through_others => {
                    stack.extend(inst.operands.iter().map(|&o| (o, offset)));
                }
                Op::ReduceWindow { window, .. }
                    if window.size[m] == 1
                        && window.stride[m] == 1
                        && window.pad_low[m] == 0
                        && window.pad_high[m] == 0
                        && window.dilation[m] == 1 =>
                {
                    stack.push((inst.operands[0], offset));
                }
                op if op.is_elementwise() => {
                    for &o in &inst.operands {
                        if comp.inst(o).shape.dims == inst.shape.dims {
                            stack.push((o, offset));
                        } else {
                            elsewhere.insert(o);
                        }
                    }
                }
                _ => elsewhere.extend(inst.operands.iter().copied()),
            }
        }
        if recorded.is_empty() {
            return None;
        }
        // Everything reachable along an edge that changes the index must not be pinned.
        let mut stack: Vec<InstId> = elsewhere.iter().copied().collect();
        while let Some(id) = stack.pop() {
            for &o in &comp.inst(id).operands {
                if elsewhere.insert(o) {
                    stack.push(o);
                }
            }
        }
        recorded.retain(|r| !elsewhere.contains(&r.id));
        let mut bounds: Vec<usize> = vec![0, extent];
        for r in &recorded {
            bounds.extend(r.starts.iter().map(|s| r.offset + s));
        }
        bounds.sort_unstable();
        bounds.dedup();
        if recorded.is_empty() || bounds.len() - 1 > MAX_CONCAT_RUNS {
            return None;
        }
        Some(ConcatRuns { recorded, bounds })
    }

    /// The runs `[lo, hi)` of the loop dimension, in order.
    pub fn runs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.bounds.windows(2).map(|w| (w[0], w[1]))
    }

    /// The pins that hold on the run starting at `lo`.
    pub fn pins(&self, lo: usize) -> Vec<Pin> {
        self.recorded
            .iter()
            .filter_map(|r| {
                let local = lo.checked_sub(r.offset)?;
                let j = r
                    .starts
                    .windows(2)
                    .position(|w| w[0] <= local && local < w[1])?;
                Some(Pin {
                    id: r.id,
                    operand: j,
                    start: r.starts[j],
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parse_module;

    /// Runs `[lo, hi)`, and per run the pins as (operand, start).
    type Found = (Vec<(usize, usize)>, Vec<Vec<(usize, usize)>>);

    /// The runs of the entry's last instruction along its dimension 1.
    fn runs_of(body: &str) -> Option<Found> {
        let m = parse_module(&format!("HloModule m\n\nENTRY %main {{\n{body}}}\n")).unwrap();
        let c = &m.entry;
        let root = c.outputs[0].value;
        let r = ConcatRuns::find(c, root, 1, c.inst(root).shape.dims[1])?;
        let runs: Vec<(usize, usize)> = r.runs().collect();
        let pins = runs
            .iter()
            .map(|&(lo, _)| r.pins(lo).iter().map(|p| (p.operand, p.start)).collect())
            .collect();
        Some((runs, pins))
    }

    #[test]
    fn a_pool_over_relu_halves_reads_each_half_in_its_run() {
        // SqueezeNet's expand: relu(a + bias), relu(b + bias) concatenated, then a max pool.
        let body = "  %a = f32[1,2,4,4]{1,3,2,0} parameter(0)\n  %b = f32[1,3,4,4]{1,3,2,0} parameter(1)\n  %z = f32[] parameter(2)\n  %za = f32[1,2,4,4]{1,3,2,0} broadcast(%z), dimensions={}\n  %zb = f32[1,3,4,4]{1,3,2,0} broadcast(%z), dimensions={}\n  %ra = f32[1,2,4,4]{1,3,2,0} maximum(%a, %za)\n  %rb = f32[1,3,4,4]{1,3,2,0} maximum(%b, %zb)\n  %c = f32[1,5,4,4]{1,3,2,0} concatenate(%ra, %rb), dimensions={1}\n  %p = f32[1,5,2,2]{1,3,2,0} reduce-window(%c), window={size=1x1x2x2 stride=1x1x2x2}, kind=max\n  ROOT %outputs = (f32[1,5,2,2]{1,3,2,0}) tuple(%p), names={p}\n";
        let (runs, pins) = runs_of(body).unwrap();
        assert_eq!(runs, vec![(0, 2), (2, 5)]);
        assert_eq!(pins, vec![vec![(0, 0)], vec![(1, 2)]]);
    }

    #[test]
    fn nested_concatenations_split_at_every_boundary() {
        let body = "  %a = f32[1,2,3,3]{1,3,2,0} parameter(0)\n  %b = f32[1,3,3,3]{1,3,2,0} parameter(1)\n  %c = f32[1,5,3,3]{1,3,2,0} concatenate(%a, %b), dimensions={1}\n  %d = f32[1,10,3,3]{1,3,2,0} concatenate(%b, %a, %c), dimensions={1}\n  ROOT %outputs = (f32[1,10,3,3]{1,3,2,0}) tuple(%d), names={d}\n";
        let (runs, pins) = runs_of(body).unwrap();
        assert_eq!(runs, vec![(0, 3), (3, 5), (5, 7), (7, 10)]);
        // The outer concatenation reads b, a, then c; c reads a then b.
        assert_eq!(pins[0], vec![(0, 0)]);
        assert_eq!(pins[1], vec![(1, 3)]);
        assert!(pins[2].contains(&(2, 5)) && pins[2].contains(&(0, 0)));
        assert!(pins[3].contains(&(2, 5)) && pins[3].contains(&(1, 2)));
    }

    #[test]
    fn a_concatenation_also_read_through_a_reshape_is_not_pinned() {
        let body = "  %a = f32[1,2,2,2]{3,2,1,0} parameter(0)\n  %b = f32[1,2,2,2]{3,2,1,0} parameter(1)\n  %c = f32[1,4,2,2]{3,2,1,0} concatenate(%a, %b), dimensions={1}\n  %t = f32[1,4,2,2]{3,2,1,0} reshape(%c)\n  %s = f32[1,4,2,2]{3,2,1,0} add(%c, %t)\n  ROOT %outputs = (f32[1,4,2,2]{3,2,1,0}) tuple(%s), names={s}\n";
        assert_eq!(runs_of(body), None);
    }
}
