//! Buffer assignment: where every HLO value lives at run time.
//!
//! Contract: the schedule is the instruction order (the `schedule` pass chooses it). Parameters live
//! in the caller's input buffers, outputs are written straight into the caller's output buffers,
//! constants are read-only data in the library, a `reshape` that is not an output aliases its
//! operand (same bytes, row-major layout), and every other value gets a 64-byte-aligned slice of
//! one arena. Two values share arena bytes only when their live ranges `[definition, last use]` do
//! not overlap; several placement strategies run and the smallest arena is kept. [`plan`] also
//! reports the lower bound no plan for this schedule can beat: the most bytes live at any one step.
//! [`plan_with_views`] also lets the backend assemble concatenations in place: their operands
//! live in slices of the concatenation's buffer (`concat_views.rs`), and store values in a byte
//! type (`BufferPlan::stored`: the CPU's quantized activations, `codegen/cpu/byte_storage.rs`),
//! one byte per element, never shared in place.
//! Inputs and outputs passed in another dtype than the IR's get staging slices after all that
//! (`staging.rs`).

pub mod concat_views;
pub mod staging;

use crate::ir::{DType, FusionKind, InstId, Instruction, Module, Op};
pub use concat_views::ConcatView;
pub use staging::Staging;

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
    /// The byte type its elements are stored in, when not the value's own
    /// ([`BufferPlan::stored`]).
    pub stored: Option<DType>,
}

/// A value written into its slice of an assembled concatenation's buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    /// The value.
    pub name: String,
    /// The concatenation.
    pub of: String,
    /// Byte offset of its first element in the arena, and the bytes of its elements (interleaved
    /// with its siblings' when the concatenated dimension is not the outermost).
    pub offset: usize,
    pub size: usize,
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
    /// The placement strategy that gave the smallest arena.
    pub strategy: &'static str,
    /// Per instruction: the operand whose arena slice it overwrites in place, if any (its kernel
    /// then takes those two buffers without `noalias`).
    pub in_place: Vec<Option<InstId>>,
    /// Outputs whose value is computed elsewhere (a parameter, a constant, an alias, or a value
    /// that is already another output) and must be copied into the output buffer: (output index,
    /// instruction).
    pub copies: Vec<(usize, InstId)>,
    /// The staging slices of the inputs and outputs whose C API dtype differs from the IR's, after
    /// the model's own slices (`staging.rs`; included in `arena_size`).
    pub staging: Vec<Staging>,
    /// Kernel scratch: `(offset, bytes)` of one slice at the end of the arena that any kernel may
    /// use while it runs (kernels run one at a time); `None` until a backend reserves it with
    /// [`reserve_scratch`].
    pub scratch: Option<(usize, usize)>,
    /// Whether Winograd convolutions may use the kernel scratch (else only the GEMMs that pack
    /// A take it, `codegen/cpu/gemm_pack.rs`): [`BufferPlan::winograd_scratch`].
    pub scratch_winograd: bool,
    /// Per instruction: the concatenation whose buffer it is written into (`concat_views.rs`);
    /// its location is then its slice of that buffer, and its kernel writes with the
    /// concatenation's strides.
    pub views: Vec<Option<ConcatView>>,
    /// Per instruction: a concatenation its operands assemble in place (it has no kernel).
    pub assembled: Vec<bool>,
    /// The values written into assembled concatenations, for the manifest and dumps.
    pub slices: Vec<Slice>,
    /// Per instruction: the byte type (`U8`, `I8`) its f32 value is stored in, one byte per
    /// element, when the backend stores it so (integers of the type's range: its producer
    /// converts, its readers convert back, exactly).
    pub stored: Vec<Option<DType>>,
    /// `--checks` builds: the offset of the arena's in-use word (one [`ARENA_ALIGN`] slice at
    /// the end), set by the entry points while a call runs; `None` otherwise
    /// ([`reserve_canary`]).
    pub canary: Option<usize>,
}

/// Appends `bytes` of kernel scratch to the arena (no-op for 0): the CPU backend's Winograd
/// convolutions keep their transformed tiles there (`codegen/core/winograd.rs`) when `winograd`,
/// and its bf16 and int8 GEMMs pack A there (`codegen/cpu/gemm_pack.rs`).
pub fn reserve_scratch(mut p: BufferPlan, bytes: usize, winograd: bool) -> BufferPlan {
    p.scratch_winograd = winograd;
    if bytes > 0 {
        let offset = align(p.arena_size);
        p.scratch = Some((offset, align(bytes)));
        p.arena_size = offset + align(bytes);
    }
    p
}

impl BufferPlan {
    /// The kernel scratch bytes a Winograd convolution may take: what the CPU backend decides
    /// Winograd with (`Packings::for_cpu`); 0 in a build without Winograd.
    pub fn winograd_scratch(&self) -> usize {
        match self.scratch {
            Some((_, bytes)) if self.scratch_winograd => bytes,
            _ => 0,
        }
    }
}

/// Appends the in-use word of a `--checks` build to the arena (`codegen/core/canary.rs`).
pub fn reserve_canary(mut p: BufferPlan) -> BufferPlan {
    let offset = align(p.arena_size);
    p.canary = Some(offset);
    p.arena_size = offset + ARENA_ALIGN;
    p
}

fn row_major(s: &crate::ir::Shape) -> bool {
    s.layout == crate::ir::Layout::row_major(s.rank())
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
    plan_with_views(m, &|_| false)
}

/// [`plan`], with the concatenations whose operands' kernels can write through the
/// concatenation's strides (`strided`) assembled in place (`concat_views.rs`).
pub fn plan_with_views(m: &Module, strided: &dyn Fn(InstId) -> bool) -> BufferPlan {
    plan_for_backend(m, strided, &|_| None)
}

/// [`plan_with_views`], with the arena values the backend stores in a byte type (`stored`; an
/// output, input or constant never is; a concatenation's slices are stored as it is).
pub fn plan_for_backend(
    m: &Module,
    strided: &dyn Fn(InstId) -> bool,
    stored: &dyn Fn(InstId) -> Option<DType>,
) -> BufferPlan {
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
            // Same bytes only when both sides are row-major; otherwise the reshape is a copy.
            (Op::Reshape, None)
                if row_major(&inst.shape) && row_major(&c.inst(inst.operands[0]).shape) =>
            {
                Loc::Alias(inst.operands[0])
            }
            _ => Loc::Arena(usize::MAX), // placed below
        };
    }
    let views = concat_views::find(c, &|id| locs[id.index()] == Loc::Arena(usize::MAX), strided);
    let stored: Vec<Option<DType>> = (0..n)
        .map(|i| {
            let id = InstId(i as u32);
            // An input or output too: one stored in its API dtype is read from (written into)
            // the caller's buffer.
            let kept = locs[i] == Loc::Arena(usize::MAX)
                || matches!(locs[i], Loc::Input(_) | Loc::Output(_));
            kept.then(|| stored(id)).flatten()
        })
        .collect();
    // Inputs the backend reads in their API dtype, outputs it writes in theirs: no staging
    // slice (`staging.rs`). A parameter's index is its input position (`ir/verify.rs`).
    let direct = |p: InstId| match c.inst(p).op {
        Op::Parameter { index } => {
            m.api.input(index).is_some() && m.api.input(index) == stored[p.index()]
        }
        _ => c
            .outputs
            .iter()
            .position(|o| o.value == p)
            .is_some_and(|k| m.api.output(k).is_some() && m.api.output(k) == stored[p.index()]),
    };
    // Bytes of value `i` as stored.
    let bytes = |i: usize| {
        let s = &c.instructions[i].shape;
        stored[i].map_or(s.size_bytes(), |d| s.element_count() * d.size_bytes())
    };
    let mut assembled = vec![false; n];
    // A value's interval starts at its definition, an assembled concatenation's at its first
    // operand's.
    let mut first: Vec<usize> = (0..n).collect();
    for (i, v) in views.iter().enumerate() {
        if let Some(v) = v {
            assembled[v.concat.index()] = true;
            first[v.concat.index()] = first[v.concat.index()].min(i);
        }
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
    // Candidates for in-place reuse: an arena value whose kernel reads operand `o` only at the
    // element it writes, where `o` is an arena value of the same size and element size that dies
    // here.
    let mut reuse: Vec<Option<usize>> = vec![None; n];
    for (i, inst) in c.instructions.iter().enumerate() {
        if locs[i] != Loc::Arena(usize::MAX) || views[i].is_some() || assembled[i] {
            continue;
        }
        reuse[i] = inst.operands.iter().map(|o| o.index()).find(|&o| {
            locs[o] == Loc::Arena(usize::MAX)
                    && views[o].is_none()
                    && !assembled[o]
                    && stored[o].is_none()
                    && stored[i].is_none()
                    && last[o] == i
                    && reuse.iter().all(|r| *r != Some(o))
                    && align(c.instructions[o].shape.size_bytes()) == align(inst.shape.size_bytes())
                    // Element `j` of the result must cover exactly the bytes of element `j` of the
                    // operand: a 4-byte select written over its 1-byte pred operand would clobber
                    // predicates it has not read yet.
                    && c.instructions[o].shape.dtype.size_bytes() == inst.shape.dtype.size_bytes()
                    && reads_only_at_output_index(inst, InstId(o as u32))
                    // No other operand may read the same bytes through a reshape.
                    && inst
                        .operands
                        .iter()
                        .all(|&x| x.index() == o || root(&locs, x).index() != o)
        });
    }
    // Two plans: values in their own slices, and values sharing their dying operand's slice
    // (chains of in-place kernels form one interval). The smaller arena wins; ties keep the first.
    let mut best: Option<Candidate> = None;
    for in_place in [false, true] {
        let mut owner: Vec<usize> = (0..n).collect();
        if in_place {
            for i in 0..n {
                if let Some(o) = reuse[i] {
                    owner[i] = owner[o];
                }
            }
        }
        let mut intervals: Vec<Interval> = Vec::new();
        let mut slot_of = vec![usize::MAX; n];
        for i in (0..n).filter(|&i| locs[i] == Loc::Arena(usize::MAX) && views[i].is_none()) {
            let size = align(bytes(i).max(1));
            if owner[i] == i {
                slot_of[i] = intervals.len();
                intervals.push(Interval {
                    size,
                    first: first[i],
                    last: last[i],
                });
            } else {
                let k = slot_of[owner[i]];
                slot_of[i] = k;
                intervals[k].last = intervals[k].last.max(last[i]);
            }
        }
        // Staged inputs: written before the first kernel, read until the parameter's last
        // reader (`staging.rs`).
        let staged_slots: Vec<(usize, usize)> = staging::staged_inputs(m, &direct)
            .into_iter()
            .map(|(k, p, size)| {
                intervals.push(Interval {
                    size: align(size),
                    first: 0,
                    last: last[p.index()],
                });
                (k, intervals.len() - 1)
            })
            .collect();
        let mut live_bytes = vec![0usize; n + 1];
        for iv in &intervals {
            for step in live_bytes.iter_mut().take(iv.last + 1).skip(iv.first) {
                *step += iv.size;
            }
        }
        let lower_bound = live_bytes.into_iter().max().unwrap_or(0);
        // Every placement strategy, the smallest arena wins (ties: the first listed).
        let (strategy, offsets, arena_size) = STRATEGIES
            .iter()
            .map(|&(name, by_size, best_fit)| {
                let (offsets, size) = place(&intervals, by_size, best_fit);
                (name, offsets, size)
            })
            .min_by_key(|(_, _, size)| *size)
            .expect("at least one strategy");
        if best.as_ref().is_none_or(|b| arena_size < b.1) {
            let mut input_at = vec![None; c.parameters().len()];
            for &(k, slot) in &staged_slots {
                input_at[k] = Some(offsets[slot]);
            }
            let per_value: Vec<usize> = (0..n)
                .map(|i| {
                    if slot_of[i] == usize::MAX {
                        0
                    } else {
                        offsets[slot_of[i]]
                    }
                })
                .collect();
            let aliases: Vec<Option<InstId>> = (0..n)
                .map(|i| {
                    if in_place {
                        reuse[i].map(|o| InstId(o as u32))
                    } else {
                        None
                    }
                })
                .collect();
            let name = if in_place {
                IN_PLACE_NAMES[STRATEGIES.iter().position(|s| s.0 == strategy).unwrap()]
            } else {
                strategy
            };
            best = Some((per_value, arena_size, lower_bound, name, aliases, input_at));
        }
    }
    let (per_value, arena_size, lower_bound, strategy, in_place, input_at) =
        best.expect("two plans");
    let mut buffers = Vec::new();
    for i in 0..n {
        if locs[i] == Loc::Arena(usize::MAX) && views[i].is_none() {
            locs[i] = Loc::Arena(per_value[i]);
            buffers.push(Buffer {
                name: c.instructions[i].name.clone(),
                offset: per_value[i],
                size: align(bytes(i).max(1)),
                live: [first[i], last[i]],
                stored: stored[i],
            });
        }
    }
    // Operands of assembled concatenations: their slice of its buffer.
    let mut slices = Vec::new();
    for i in 0..n {
        if let Some(v) = views[i] {
            let Loc::Arena(base) = locs[v.concat.index()] else {
                unreachable!("assembled concatenations live in the arena")
            };
            let inst = &c.instructions[i];
            let offset = base + v.offset * stored[i].unwrap_or(inst.shape.dtype).size_bytes();
            locs[i] = Loc::Arena(offset);
            slices.push(Slice {
                name: inst.name.clone(),
                of: c.inst(v.concat).name.clone(),
                offset,
                size: bytes(i),
            });
        }
    }
    let (staging, arena_size) = staging::place(m, arena_size, &input_at, &direct);
    BufferPlan {
        locs,
        arena_size,
        staging,
        lower_bound,
        buffers,
        copies,
        strategy,
        in_place,
        views,
        assembled,
        slices,
        stored,
        scratch: None,
        scratch_winograd: false,
        canary: None,
    }
}

/// Names of the placement strategies when values reuse their dying operand's slice.
const IN_PLACE_NAMES: &[&str] = &[
    "in-place + first-fit",
    "in-place + best-fit",
    "in-place + greedy-by-size",
];

/// Whether the kernel of `inst` reads operand `o` only at the element it is writing, so it may
/// write its result over `o`: an elementwise op with `o` of its own shape, or a loop fusion in
/// which `o` reaches the root only through elementwise ops of the root's shape.
fn reads_only_at_output_index(inst: &Instruction, o: InstId) -> bool {
    match &inst.op {
        // Every operand of an elementwise op is read at the output index (scalar clamp bounds
        // differ in size, so they never qualify).
        op if op.is_elementwise() => inst.operands.contains(&o),
        Op::Fusion {
            kind: FusionKind::Loop,
            computation,
        } => {
            let c = computation;
            let root = c.outputs[0].value;
            let mut direct = vec![false; c.instructions.len()];
            if c.inst(root).op.is_elementwise() {
                direct[root.index()] = true;
            }
            for i in (0..c.instructions.len()).rev() {
                let ii = &c.instructions[i];
                if !direct[i] {
                    continue;
                }
                for &x in &ii.operands {
                    let xi = c.inst(x);
                    if xi.shape.dims == inst.shape.dims
                        && (xi.op.is_elementwise() || matches!(xi.op, Op::Parameter { .. }))
                    {
                        direct[x.index()] = true;
                    }
                }
            }
            let positions: Vec<usize> = inst
                .operands
                .iter()
                .enumerate()
                .filter(|(_, x)| **x == o)
                .map(|(k, _)| k)
                .collect();
            c.ids().all(|id| {
                let ii = c.inst(id);
                match ii.op {
                    Op::Parameter { index } if positions.contains(&index) => {
                        // Every user of this parameter must be on the direct path.
                        direct[id.index()]
                            && c.instructions
                                .iter()
                                .enumerate()
                                .all(|(u, ui)| !ui.operands.contains(&id) || direct[u])
                    }
                    _ => true,
                }
            })
        }
        _ => false,
    }
}

/// A finished plan variant: offset per instruction, arena size, lower bound, strategy name, and
/// the in-place operand per instruction.
/// A plan: per-value offsets, arena size, lower bound, strategy, in-place aliases, and the
/// staged inputs' offsets (by parameter position).
type Candidate = (
    Vec<usize>,
    usize,
    usize,
    &'static str,
    Vec<Option<InstId>>,
    Vec<Option<usize>>,
);

/// A slice to place: its aligned size and live steps (inclusive).
struct Interval {
    size: usize,
    first: usize,
    last: usize,
}

/// The placement strategies tried: (name, largest buffers first, best-fit gap instead of first-fit).
/// Greedy-by-size is TFLite's arena planner; first- and best-fit in definition order are the
/// classic allocator policies. None dominates, so all run and the smallest arena is kept.
const STRATEGIES: &[(&str, bool, bool)] = &[
    ("first-fit", false, false),
    ("best-fit", false, true),
    ("greedy-by-size", true, true),
];

/// Offsets for `intervals` (in their order) and the arena size: each buffer, in the strategy's
/// order, goes into the first (or smallest) gap between the buffers already placed whose live
/// ranges overlap its own.
fn place(intervals: &[Interval], by_size: bool, best_fit: bool) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..intervals.len()).collect();
    if by_size {
        order.sort_by_key(|&k| (std::cmp::Reverse(intervals[k].size), intervals[k].first));
    }
    let mut offsets = vec![usize::MAX; intervals.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut arena = 0;
    for &k in &order {
        let iv = &intervals[k];
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&q| intervals[q].first <= iv.last && iv.first <= intervals[q].last)
            .map(|&q| (offsets[q], intervals[q].size))
            .collect();
        busy.sort();
        let mut best: Option<(usize, usize)> = None; // (gap size, offset)
        let mut end = 0;
        for (off, size) in busy {
            if off > end && off - end >= iv.size {
                let gap = off - end;
                if best.is_none_or(|(g, _)| best_fit && gap < g) {
                    best = Some((gap, end));
                }
            }
            end = end.max(off + size);
        }
        let offset = best.map_or(end, |(_, o)| o);
        offsets[k] = offset;
        arena = arena.max(offset + iv.size);
        placed.push(k);
    }
    (offsets, arena)
}

/// The plan as text (one line per arena buffer), for tests and dumps.
pub fn plan_text(p: &BufferPlan) -> String {
    let mut s = format!(
        "arena_size={} lower_bound={} buffers={} strategy={}\n",
        p.arena_size,
        p.lower_bound,
        p.buffers.len(),
        p.strategy
    );
    for b in &p.buffers {
        let stored = b
            .stored
            .map_or(String::new(), |d| format!(" (stored as {d})"));
        s.push_str(&format!(
            "  {:>8} +{:<8} live [{}, {}]  %{}{stored}\n",
            b.offset, b.size, b.live[0], b.live[1], b.name
        ));
    }
    for v in &p.slices {
        s.push_str(&format!(
            "  {:>8} +{:<8} slice of %{} (written through its strides)  %{}\n",
            v.offset, v.size, v.of, v.name
        ));
    }
    if let Some((offset, size)) = p.scratch {
        s.push_str(&format!("  {offset:>8} +{size:<8} kernel scratch\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::rng::SplitMix64;

    fn iv(size: usize, first: usize, last: usize) -> Interval {
        Interval { size, first, last }
    }

    #[test]
    fn greedy_by_size_beats_first_fit_on_a_classic_case() {
        // A small buffer placed first in definition order fragments the arena for a big one.
        let ivs = vec![iv(64, 0, 1), iv(128, 1, 2), iv(192, 2, 3)];
        let (_, first_fit) = place(&ivs, false, false);
        let (_, by_size) = place(&ivs, true, true);
        assert_eq!(first_fit, 384);
        assert_eq!(by_size, 320);
    }

    #[test]
    fn random_plans_never_overlap_and_respect_the_lower_bound() {
        let mut rng = SplitMix64(7);
        for _ in 0..300 {
            let n = 1 + rng.below(30);
            let ivs: Vec<Interval> = (0..n)
                .map(|_| {
                    let first = rng.below(40);
                    iv(64 * (1 + rng.below(8)), first, first + rng.below(10))
                })
                .collect();
            let lower = (0..60)
                .map(|t| {
                    ivs.iter()
                        .filter(|v| v.first <= t && t <= v.last)
                        .map(|v| v.size)
                        .sum::<usize>()
                })
                .max()
                .unwrap();
            for &(_, by_size, best) in STRATEGIES {
                let (offs, arena) = place(&ivs, by_size, best);
                assert!(arena >= lower);
                for a in 0..n {
                    assert!(offs[a] + ivs[a].size <= arena);
                    for b in a + 1..n {
                        let time = ivs[a].first <= ivs[b].last && ivs[b].first <= ivs[a].last;
                        let space =
                            offs[a] < offs[b] + ivs[b].size && offs[b] < offs[a] + ivs[a].size;
                        assert!(!(time && space), "buffers {a} and {b} overlap");
                    }
                }
            }
        }
    }
}
