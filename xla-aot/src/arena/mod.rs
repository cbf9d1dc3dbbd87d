//! Buffer assignment: where every HLO value lives at run time.
//!
//! Contract (v1): the schedule is the instruction order. Parameters live in the caller's input
//! buffers, outputs are written straight into the caller's output buffers, constants are read-only
//! data in the library, a `reshape` that is not an output aliases its operand (same bytes, row-major
//! layout), and every other value gets a 64-byte-aligned slice of one arena. Two values share arena
//! bytes only when their live ranges `[definition, last use]` do not overlap. [`plan`] also reports
//! the lower bound no plan for this schedule can beat: the most bytes live at any one step.

use crate::ir::{InstId, Module, Op};

/// Alignment of every arena slice and of the arena itself: a cache line, and the widest vector
/// (AVX-512) load.
pub const ARENA_ALIGN: usize = 64;

/// Where a value lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loc {
    /// The caller's input `i`.
    Input(usize),
    /// The caller's output `i`.
    Output(usize),
    /// Read-only data in the library.
    Constant,
    /// `offset` bytes into the arena.
    Arena(usize),
    /// The same bytes as another value (a reshape).
    Alias(InstId),
}

/// One arena slice, for the manifest and dumps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buffer {
    /// The instruction whose value it holds.
    pub name: String,
    /// Byte offset in the arena.
    pub offset: usize,
    /// Bytes (rounded up to [`ARENA_ALIGN`]).
    pub size: usize,
    /// First and last step (instruction index) at which it is live.
    pub live: [usize; 2],
}

/// The result of buffer assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferPlan {
    /// Location of each instruction's value.
    pub locs: Vec<Loc>,
    /// Arena bytes needed (a multiple of [`ARENA_ALIGN`]).
    pub arena_size: usize,
    /// Most bytes live at once under this schedule.
    pub lower_bound: usize,
    /// The arena slices, in definition order.
    pub buffers: Vec<Buffer>,
    /// Outputs whose value is computed elsewhere (a parameter, a constant, an alias, or a value
    /// that is already another output) and must be copied into the output buffer: (output index,
    /// instruction).
    pub copies: Vec<(usize, InstId)>,
}

fn align(n: usize) -> usize {
    n.div_ceil(ARENA_ALIGN) * ARENA_ALIGN
}

/// Follows aliases to the value that owns the bytes.
pub fn root(locs: &[Loc], mut id: InstId) -> InstId {
    while let Loc::Alias(of) = locs[id.index()] {
        id = of;
    }
    id
}

/// Assigns every value of the entry computation a location.
pub fn plan(m: &Module) -> BufferPlan {
    let c = &m.entry;
    let n = c.instructions.len();
    let mut locs = vec![Loc::Constant; n];
    let mut copies = Vec::new();
    let mut output_of: Vec<Option<usize>> = vec![None; n];
    for (k, o) in c.outputs.iter().enumerate() {
        let inst = c.inst(o.value);
        let direct = !matches!(inst.op, Op::Parameter { .. } | Op::Constant(_))
            && output_of[o.value.index()].is_none();
        if direct {
            output_of[o.value.index()] = Some(k);
        } else {
            copies.push((k, o.value));
        }
    }
    for (i, inst) in c.instructions.iter().enumerate() {
        locs[i] = match (&inst.op, output_of[i]) {
            (Op::Parameter { index }, _) => Loc::Input(*index),
            (Op::Constant(_), _) => Loc::Constant,
            (_, Some(k)) => Loc::Output(k),
            (Op::Reshape, None) => Loc::Alias(inst.operands[0]),
            _ => Loc::Arena(usize::MAX), // placed below
        };
    }
    // Live ranges of arena values, following aliases to their owners.
    let mut last = vec![0usize; n];
    for (i, inst) in c.instructions.iter().enumerate() {
        last[i] = last[i].max(i);
        for &o in &inst.operands {
            let r = root(&locs, o);
            last[r.index()] = last[r.index()].max(i);
        }
    }
    for &(_, v) in &copies {
        let r = root(&locs, v);
        last[r.index()] = n; // read by the copy after the last instruction
    }
    // First fit over free intervals, in definition order; a value's bytes are released after its
    // last use, so an operand and its user never share bytes (no in-place reuse in v1).
    let mut free: Vec<(usize, usize)> = Vec::new(); // (offset, size), sorted, coalesced
    let mut top = 0usize;
    let mut buffers = Vec::new();
    let mut releases: Vec<Vec<usize>> = vec![Vec::new(); n + 1];
    let mut live_bytes = vec![0usize; n + 1];
    for i in 0..n {
        if locs[i] == Loc::Arena(usize::MAX) {
            let size = align(c.instructions[i].shape.size_bytes().max(1));
            let offset = match free.iter().position(|&(_, s)| s >= size) {
                Some(k) => {
                    let (off, s) = free[k];
                    if s == size {
                        free.remove(k);
                    } else {
                        free[k] = (off + size, s - size);
                    }
                    off
                }
                None => {
                    let off = top;
                    top += size;
                    off
                }
            };
            locs[i] = Loc::Arena(offset);
            for step in live_bytes.iter_mut().take(last[i] + 1).skip(i) {
                *step += size;
            }
            releases[last[i]].push(buffers.len());
            buffers.push(Buffer {
                name: c.instructions[i].name.clone(),
                offset,
                size,
                live: [i, last[i]],
            });
        }
        // Release what dies at this step, after the definition: a value never shares bytes with
        // its own operands.
        for &b in &releases[i] {
            release(&mut free, buffers[b].offset, buffers[b].size);
        }
    }
    BufferPlan {
        locs,
        arena_size: top,
        lower_bound: live_bytes.into_iter().max().unwrap_or(0),
        buffers,
        copies,
    }
}

fn release(free: &mut Vec<(usize, usize)>, offset: usize, size: usize) {
    let k = free.partition_point(|&(o, _)| o < offset);
    free.insert(k, (offset, size));
    // Coalesce with neighbours.
    if k + 1 < free.len() && free[k].0 + free[k].1 == free[k + 1].0 {
        free[k].1 += free[k + 1].1;
        free.remove(k + 1);
    }
    if k > 0 && free[k - 1].0 + free[k - 1].1 == free[k].0 {
        free[k - 1].1 += free[k].1;
        free.remove(k);
    }
}

/// The plan as text (one line per arena buffer), for tests and dumps.
pub fn plan_text(p: &BufferPlan) -> String {
    let mut s = format!(
        "arena_size={} lower_bound={} buffers={}\n",
        p.arena_size,
        p.lower_bound,
        p.buffers.len()
    );
    for b in &p.buffers {
        s.push_str(&format!(
            "  {:>8} +{:<8} live [{}, {}]  %{}\n",
            b.offset, b.size, b.live[0], b.live[1], b.name
        ));
    }
    s
}
