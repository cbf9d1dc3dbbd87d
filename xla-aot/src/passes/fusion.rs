//! Fusion: groups of instructions become one kernel, so their intermediates never touch memory.
//!
//! Contract: the pass visits instructions from the outputs back (consumers before producers).
//! Every value that must exist in memory (an output, or one some consumer cannot compute inline)
//! roots a group; a group absorbs producers of its members when [`FusionPass::decide`] says yes,
//! and every decision, yes or no, is logged with its reason (`fusion.log` in dumps). Groups with
//! more than one instruction become `fusion` instructions calling a fused computation:
//! - `loop`: elementwise ops, broadcasts, reshapes, slices, pads, concatenations, gathers;
//! - `input`: a reduce or reduce-window whose operand is computed inline; a reduce-window may
//!   also carry an elementwise epilogue of its shape and layout ([`pool_epilogue`]);
//! - `output`: a dot or convolution followed by an elementwise epilogue (bias, activation,
//!   residual add) applied to its result in place; a grouped convolution may also read its input
//!   through a channel shuffle or slice ([`channel_prologue`]), the one operand chain a heavy op inlines.
//!
//! Cost model. A producer with one consumer is always fused (it saves a store and a load per
//! element and costs nothing). A producer with `k > 1` consumers is recomputed in each consumer it
//! is fused into; that is allowed only when `(k − 1)·cost ≤ (k + 1)·TRAFFIC_COST_PER_ELEMENT`:
//! the extra arithmetic may not exceed the memory traffic it saves (one store and `k` loads).
//! Under a reduce-window each element is computed once per window reading it, so `k` is
//! multiplied by that count (LRN's `pow` is not recomputed for each of a max pool's windows).
//! That rule looks at one producer at a time; a chain of cheap steps each read twice passes it at
//! every step, so a value whose operands are computed inline too is recomputed in at most
//! [`MAX_RECOMPUTING_FUSIONS`] fusions: past that it is stored, and the pass groups again with it
//! read from memory everywhere (else every fusion of a recurrence recomputes it from the start).
//! Reductions, dots and convolutions are never recomputed, and neither is a value some consumer
//! reads from memory anyway (a dot or convolution operand): it is stored, so recomputing it saves
//! nothing, and a convolution under it would lose its epilogue.
//!
//! Size bound. A group stops absorbing elementwise producers once the sum of its members' costs
//! would pass [`MAX_FUSION_COST`] (`limits.rs`): LLVM's time on one kernel grows faster than
//! linearly with its body (a 10,000-op chain fused into one kernel took 953 s), so a long chain
//! becomes several kernels, each storing one intermediate. The generated body computes a value
//! once per path from the root to it, so the group also tracks each member's copies and stops
//! absorbing producers once the body *as generated* would pass [`MAX_EXPANDED_FUSION_COST`]: a
//! chain whose every step reads the previous one twice grows exponentially otherwise.

use super::Pass;
use super::rewrite::users;
use crate::ir::inst::table::{self, Cost};
use crate::ir::shuffle::conv_input;
use crate::ir::{
    BinaryOp, Computation, DType, FusionKind, InstId, Instruction, Module, Op, Output, ReduceKind,
    Shape,
};
use crate::limits::{MAX_EXPANDED_FUSION_COST, MAX_FUSION_COST};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

/// Cost of moving one element through memory (a store or a load), in "simple arithmetic op"
/// units: on the cores we target a cached load/store issues at about the rate of two simple ALU
/// ops, so recomputing a value is worth it only while it costs less than two ops per access saved.
pub const TRAFFIC_COST_PER_ELEMENT: u32 = 2;

/// Per-element cost of computing an instruction, in simple-op units: the op table's cost class
/// (`ir/inst/table.rs`: index remaps and simple arithmetic 1, division and square roots 4,
/// transcendental polynomials 20, `pow` 40).
pub fn cost(op: &Op) -> u32 {
    match op {
        Op::Unary(u) => u.info().cost.units(),
        Op::Binary(b) => b.info().cost.units(),
        _ => Cost::Simple.units(),
    }
}

/// Whether an instruction can be computed element by element from its operands' elements: an
/// elementwise op or an index remap (the op table's class).
pub fn is_elemental(op: &Op) -> bool {
    op.is_elementwise() || is_remap(op)
}

/// Most fusions that may each recompute one value whose operands are computed inline too. The
/// cost rule of [`FusionPass::decide`] looks at one producer at a time: a chain of cheap steps,
/// each read by the next step and by one other fusion (an LSTM's cell state `c_t = f·c_{t-1} +
/// i·g`, read by `c_{t+1}` and by `tanh(c_t)`), passes it at every step, so every step's fusion
/// recomputed the chain from the first step: quadratic work, 80 kernels of up to 228
/// instructions in issue 46's bidirectional LSTM over 40 steps (their elementwise kernels 1.5 ms
/// → 0.36 ms with the bound). Eight: at 4, densenet121's pooled features (read by the layers
/// of a dense block) and TFLite's int8 softmax steps were stored too; at 8 none of MLPerf
/// Tiny's models or onnx's light models changes, and a chain is stored every few steps.
const MAX_RECOMPUTING_FUSIONS: usize = 8;

/// How a refusal by [`MAX_RECOMPUTING_FUSIONS`] starts (the pass stores those values and groups
/// again).
const RECOMPUTE_BOUND: &str = "MAX_RECOMPUTING_FUSIONS";

/// Whether an op only moves elements (a broadcast, reshape, slice, transpose, ...): recomputing
/// it reads what storing it would have, so its copies need no bound.
fn is_remap(op: &Op) -> bool {
    table::opcode_info(op.opcode()).is_some_and(|i| i.class == table::Class::Remap)
}

fn is_heavy(op: &Op) -> bool {
    matches!(op, Op::Dot(_) | Op::Convolution { .. })
}

/// Whether an instruction reads its operands from memory, never inline: the consumers
/// [`FusionPass::decide`] refuses every producer into.
fn reads_operands_from_memory(op: &Op) -> bool {
    is_heavy(op)
        || matches!(
            op,
            Op::Argmax { .. } | Op::TopK { .. } | Op::Sample | Op::Fusion { .. }
        )
}

/// What the cost model needs to know about a producer.
#[derive(Clone, Copy)]
struct Producer {
    /// Its instruction index.
    index: usize,
    /// How many distinct instructions read it.
    users: usize,
    /// Whether it is a model output.
    is_output: bool,
    /// In how many groups its consumer is computed (a duplicated consumer duplicates it too).
    consumer_copies: usize,
    /// A user that reads it from memory whatever is decided here (a dot or convolution operand,
    /// argmax, top-k, sample), so it is stored anyway.
    stored_for: Option<usize>,
    /// The convolution whose epilogue chain it ends ([`convolution_epilogue`]).
    ends_conv_epilogue: Option<usize>,
    /// Whether its values are integers of one byte's range (`Range::byte_type`).
    byte_range: bool,
    /// In how many groups it is computed already.
    computed_in: usize,
    /// Whether one of its operands is itself elementwise arithmetic other fusions may compute
    /// inline (not a parameter, constant, index remap, reduction, dot or convolution).
    computed_operand: bool,
}

/// A group being formed.
struct Group {
    root: usize,
    kind: FusionKind,
    members: BTreeSet<usize>,
    /// Members whose value reaches the root through same-shape elementwise ops only: an output
    /// fusion's dot or convolution must be one of them (its epilogue reads it at the same index).
    direct: BTreeSet<usize>,
    /// The member whose result the epilogue members finish: an output fusion's dot or
    /// convolution, or the pool of an input fusion rooted at its epilogue.
    heavy: Option<usize>,
    /// Sum of the members' per-element [`cost`]s: the size of the kernel's loop body.
    cost: u32,
    /// Per member: how many times the kernel's body computes it (the generated code computes a
    /// value once per path from the root to it: a value read twice is emitted twice).
    copies: HashMap<usize, u64>,
    /// Σ copies × cost: the size of the body as generated.
    expanded: u64,
}

/// The fusion pass; `log` keeps the decisions of the last run.
#[derive(Default)]
pub struct FusionPass {
    log: Mutex<Vec<String>>,
}

impl FusionPass {
    /// Whether producer `p` joins group `g` as an operand of member `i`, and why (`users_of`:
    /// every instruction's readers).
    fn decide(
        &self,
        c: &Computation,
        users_of: &[Vec<InstId>],
        g: &Group,
        i: usize,
        prod: Producer,
    ) -> Result<&'static str, String> {
        let Producer {
            index: p,
            users: n_users,
            is_output,
            consumer_copies: dup_groups,
            stored_for,
            ends_conv_epilogue,
            byte_range,
            computed_in,
            computed_operand,
        } = prod;
        let (pi, ci) = (&c.instructions[p], &c.instructions[i]);
        match &pi.op {
            Op::Parameter { .. } | Op::Constant(_) => {
                return Err("parameters and constants are read from memory".into());
            }
            Op::Fusion { .. } => return Err("the producer is already a fusion".into()),
            _ => {}
        }
        if let Some(verdict) = channel_prologue(c, users_of, ci, p, n_users, is_output) {
            return verdict;
        }
        if reads_operands_from_memory(&ci.op) {
            return Err(format!(
                "the consumer ({}) reads its operands from memory: recomputing an operand element for every use would multiply its cost",
                ci.op.opcode()
            ));
        }
        if matches!(g.kind, FusionKind::Input) && !is_elemental(&pi.op) && !is_heavy(&pi.op) {
            return Err(format!(
                "a {} cannot be computed inline inside a reduction",
                pi.op.opcode()
            ));
        }
        if is_output {
            return Err("the producer is a model output, so it is stored anyway".into());
        }
        if ends_conv_epilogue.is_some() && byte_range && matches!(ci.op, Op::ReduceWindow { .. }) {
            return Err(
                "the epilogue stays with its convolution, which finishes the byte-range values in \
                 its registers (stored one byte each on a CPU, codegen/cpu/byte_storage.rs), \
                 instead of the pool computing them for every window tap"
                    .into(),
            );
        }
        let holds_other = ends_conv_epilogue.is_some_and(|conv| {
            g.heavy.is_some_and(|h| h != conv) || other_heavy_below(c, g.root, conv)
        });
        if ends_conv_epilogue.is_some() && byte_range && (n_users > 1 || holds_other) {
            // Joining here would leave the convolution behind (it joins at most one fusion,
            // and this one holds a dot or convolution already, or is one of several readers):
            // it would store its raw sums, four bytes each, and every reader would recompute
            // the chain (pretrainedResnet_quant's residual branches, 2026-12-07).
            return Err(format!(
                "the epilogue stays with its convolution, which finishes the byte-range values \
                 once in its registers (stored one byte each on a CPU), instead of {} \
                 recomputing them from the convolution's stored sums",
                if n_users > 1 {
                    format!("each of its {n_users} consumers")
                } else {
                    "a fusion that holds a dot or convolution already".to_string()
                }
            ));
        }
        if matches!(pi.op, Op::ReduceWindow { .. }) {
            return pool_epilogue(g, &c.instructions[g.root], i, ci, pi, n_users, dup_groups);
        }
        if matches!(
            pi.op,
            Op::Reduce { .. } | Op::Argmax { .. } | Op::TopK { .. } | Op::Sample
        ) {
            return Err(format!(
                "the producer is a reduction ({}): inlining it would redo the whole reduction for every element",
                pi.op.opcode()
            ));
        }
        if let Some(h) = g.heavy.filter(|&h| is_heavy(&c.instructions[h].op)) {
            let read = |o: &InstId| o.index() == p || conv_input(c, *o).0.index() == p;
            if c.instructions[h].operands.iter().any(read) {
                return Err(format!(
                    "the fusion's {} reads this value from memory, so it is stored anyway",
                    c.instructions[h].op.opcode()
                ));
            }
        }
        if is_heavy(&pi.op) {
            if pi.operands.iter().any(|o| g.members.contains(&o.index())) {
                return Err(format!(
                    "an operand of the {} is computed inside this fusion, but the {} must read it from memory",
                    pi.op.opcode(),
                    pi.op.opcode()
                ));
            }
            if g.heavy.is_some() {
                return Err("the fusion already holds a dot or convolution".into());
            }
            if !matches!(g.kind, FusionKind::Loop) {
                return Err("only elementwise epilogues fuse with a dot or convolution".into());
            }
            if ci.shape.layout != pi.shape.layout {
                return Err(
                    "the epilogue's layout differs from the result's, so it cannot run in place"
                        .into(),
                );
            }
            if !(ci.op.is_elementwise() && g.direct.contains(&i) && ci.shape.same_type(&pi.shape)) {
                return Err("the epilogue does not read the dot/convolution result elementwise at the same index".into());
            }
            if !c.instructions[g.root].shape.same_type(&pi.shape) {
                return Err(format!(
                    "the epilogue's result is {}, not the {}'s {}, so it cannot be stored in place",
                    c.instructions[g.root].shape.dtype,
                    pi.op.opcode(),
                    pi.shape.dtype
                ));
            }
            if n_users != 1 {
                return Err(format!(
                    "the {} has {n_users} users and is never recomputed",
                    pi.op.opcode()
                ));
            }
            if dup_groups != 1 {
                return Err(format!(
                    "its consumer %{} is recomputed in {dup_groups} fusions, and a {} is never recomputed",
                    ci.name,
                    pi.op.opcode()
                ));
            }
            return Ok("output fusion: epilogue applied to the result in place");
        }
        if ends_conv_epilogue.is_some() && matches!(ci.op, Op::Concatenate { .. }) && g.root == i {
            return Err(
                "the epilogue stays with its convolution, so the convolution can write the \
                 finished value straight into its slice of the concatenation"
                    .into(),
            );
        }
        if matches!(ci.op, Op::Concatenate { .. }) && g.root == i && epilogue_of_pool(c, pi) {
            return Err(
                "the epilogue stays with its max or min pool, so the pool can write the finished \
                 value straight into its slice of the concatenation"
                    .into(),
            );
        }
        if !is_elemental(&pi.op) {
            return Err(format!(
                "{} is not computed element by element",
                pi.op.opcode()
            ));
        }
        if g.cost.saturating_add(cost(&pi.op)) > MAX_FUSION_COST {
            return Err(format!(
                "the kernel's body would cost more than {MAX_FUSION_COST} op-units per element \
                 (MAX_FUSION_COST, see docs/limits.md): code generation grows faster than linearly \
                 with a kernel's size, so a longer chain is split into kernels"
            ));
        }
        // Under a windowed reduction every element is computed once per window that reads it.
        let copies = n_users.max(dup_groups) * window_reads(c, g);
        if copies <= 1 {
            return Ok("single consumer: saves one store and one load per element");
        }
        if let Some(u) = stored_for {
            // Recomputing it here saves no store and reads its operands instead of it; worse, a
            // convolution or dot under it loses its epilogue (ResNet's residual blocks).
            return Err(format!(
                "%{} reads it from memory, so it is stored anyway: recomputing it here saves nothing",
                c.instructions[u].name
            ));
        }
        if computed_in >= MAX_RECOMPUTING_FUSIONS && computed_operand && !is_remap(&pi.op) {
            return Err(format!(
                "{RECOMPUTE_BOUND}: {computed_in} fusions compute it already: its operands \
                 are computed inline too, so each further copy would drag their chain along (an \
                 LSTM's cell state recomputed from the first step in every step), so it is stored"
            ));
        }
        let k = copies as u32;
        let recompute = (k - 1) * cost(&pi.op);
        let saved = (k + 1) * TRAFFIC_COST_PER_ELEMENT;
        if recompute <= saved {
            Ok("cheap to recompute in each consumer")
        } else {
            Err(format!(
                "{} with {copies} consumers: recomputing it costs {recompute} op-units per element, more than the {saved} its memory traffic costs",
                pi.op.opcode()
            ))
        }
    }
}

/// Longest epilogue chain [`convolution_epilogue`] follows (bias, batch norm's scale and shift,
/// activation, clamp: real f32 exports stay under 8; a quantized model's requantization adds a
/// scale, a saturating clamp, the rounding's add and subtract, the zero point, the integer round
/// trip and the dequantization: 12 on onnxruntime's QDQ exports).
const MAX_EPILOGUE_CHAIN: usize = 16;

/// The f32 operand `x` of `convert(convert(x, s32), f32)` at `id` (the integer round trip a
/// quantized model leaves between `QuantizeLinear` and `DequantizeLinear`), when the inner convert
/// is read by nothing else; `codegen/cpu/epilogue.rs` applies it as one step.
fn int_round_trip(
    c: &Computation,
    single_user: &dyn Fn(usize) -> bool,
    id: InstId,
) -> Option<InstId> {
    let outer = c.inst(id);
    let Op::Convert { to: DType::F32 } = outer.op else {
        return None;
    };
    let inner = c.inst(outer.operands[0]);
    let x = *inner.operands.first()?;
    (matches!(inner.op, Op::Convert { to: DType::I32 })
        && single_user(outer.operands[0].index())
        && c.inst(x).shape.dtype == DType::F32
        && c.inst(x).shape.dims == outer.shape.dims)
        .then_some(x)
}

/// Whether `p` is the last step of a convolution's epilogue that a micro-kernel applies in its
/// registers: a chain of `add`, `subtract`, `multiply`, `divide`, `maximum`, `minimum` or
/// `clamp` steps (and integer round trips, [`int_round_trip`], and `multiply-q31`) of the result's shape, each but the last read by the next only, from a convolution read by
/// nothing else, whose other operands are per-channel or scalar (broadcasts of values with at
/// most one dim longer than one, or scalars) — the chains `codegen/cpu/epilogue.rs` recognises.
/// Such a chain is better fused with its convolution than with a concatenation consuming it:
/// the convolution then writes the finished values into the concatenation's buffer
/// (`arena/concat_views.rs`). Another chain would be swept over the convolution's output, one
/// more pass over memory than applying it while concatenating.
pub(super) fn convolution_epilogue(c: &Computation, users_of: &[Vec<InstId>], p: usize) -> bool {
    epilogue_convolution(c, users_of, p).is_some()
}

/// The convolution whose epilogue chain `p` ends ([`convolution_epilogue`]).
fn epilogue_convolution(c: &Computation, users_of: &[Vec<InstId>], p: usize) -> Option<usize> {
    let single_user = |x: usize| users_of[x].iter().collect::<BTreeSet<_>>().len() == 1;
    let uniform = |o: InstId| {
        let oi = c.inst(o);
        match oi.op {
            Op::Broadcast { .. } => {
                let src = &c.inst(oi.operands[0]).shape;
                src.dims.iter().filter(|&&d| d != 1).count() <= 1
            }
            Op::Constant(_) | Op::Parameter { .. } => oi.shape.element_count() == 1,
            _ => false,
        }
    };
    let mut at = p;
    for _ in 0..MAX_EPILOGUE_CHAIN {
        let inst = &c.instructions[at];
        if let Some(x) = int_round_trip(c, &single_user, InstId(at as u32)) {
            if !single_user(x.index()) {
                return None;
            }
            if matches!(c.inst(x).op, Op::Convolution { .. }) {
                return Some(x.index());
            }
            at = x.index();
            continue;
        }
        let step = matches!(
            inst.op,
            Op::Binary(
                BinaryOp::Add
                    | BinaryOp::Subtract
                    | BinaryOp::Multiply
                    | BinaryOp::Divide
                    | BinaryOp::Maximum
                    | BinaryOp::Minimum
            ) | Op::Clamp
                | Op::MulQ31
        );
        if !step {
            return None;
        }
        let mut chain = inst.operands.iter().filter(|&&o| !uniform(o));
        let (Some(&next), None) = (chain.next(), chain.next()) else {
            return None;
        };
        let ni = c.inst(next);
        if ni.shape.dims != inst.shape.dims || !single_user(next.index()) {
            return None;
        }
        if matches!(ni.op, Op::Convolution { .. }) {
            return Some(next.index());
        }
        at = next.index();
    }
    None
}

/// Most instructions [`other_heavy_below`] visits.
const HEAVY_SEARCH_LIMIT: usize = 64;

/// Whether a dot or convolution other than `except` reaches `root` (or the value a pool or
/// reduction at `root` reduces) through elementwise ops of its shape: one the group rooted
/// there will hold as its heavy op, however the walk orders the decisions.
fn other_heavy_below(c: &Computation, root: usize, except: usize) -> bool {
    // A pool or reduction's input fusion: from the value it reduces (resnet's last residual ADD
    // feeds its average pool).
    let root = match c.instructions[root].op {
        Op::Reduce { .. } | Op::ReduceWindow { .. } => c.instructions[root].operands[0].index(),
        _ => root,
    };
    let dims = &c.instructions[root].shape.dims;
    let mut stack = vec![root];
    let mut seen = BTreeSet::new();
    while let Some(at) = stack.pop() {
        if !seen.insert(at) || seen.len() > HEAVY_SEARCH_LIMIT {
            continue;
        }
        let inst = &c.instructions[at];
        if is_heavy(&inst.op) {
            if at != except {
                return true;
            }
            continue;
        }
        if inst.op.is_elementwise() && inst.shape.dims == *dims {
            stack.extend(inst.operands.iter().map(|o| o.index()));
        }
    }
    false
}

/// Whether producer `p` joins convolution `ci` as its *channel prologue*: `p` is what `ci` reads
/// as its input, and either the last reshape of a channel shuffle (`ir/shuffle.rs`) read by a
/// grouped f32 convolution (`1 < groups < C`; `passes/shuffle_sink.rs` moves shuffles there and
/// folds them into dense ones), or a slice along the channels (ONNX `Split`) read by an f32
/// convolution that is not depthwise. The convolution reads each input channel at its source
/// channel in the sliced or shuffled value's input (`cpu/conv.rs`, `cpu/loops.rs`,
/// `gpu/grid.rs`), so the slice or shuffle is never stored; a shuffle's transpose and first
/// reshape then join as its single-consumer operands, and the source stays a kernel argument
/// (read from memory). `None` when `p` is neither.
fn channel_prologue(
    c: &Computation,
    users_of: &[Vec<InstId>],
    ci: &Instruction,
    p: usize,
    n_users: usize,
    is_output: bool,
) -> Option<Result<&'static str, String>> {
    let Op::Convolution {
        feature_group_count: groups,
        ref window,
    } = ci.op
    else {
        return None;
    };
    if ci.operands[0].index() != p {
        return None;
    }
    let id = InstId(p as u32);
    let pi = &c.instructions[p];
    let w = &c.inst(ci.operands[1]).shape;
    let single = |x: InstId| users_of[x.index()].len() == 1;
    // The staged pointwise path (channels-minor input, a model output's NCHW result) reads its
    // input plainly; through a map the convolution would take the packed path and store its
    // output lane by lane, 4× slower than the shuffle stored first (the ShuffleNet unit of
    // `bench/onnx_vs_ort.py`: 38 µs for the mapped kernel against 4.7 + 10.4).
    let staged = |src: InstId| {
        let read = Shape {
            layout: c.inst(src).shape.layout.clone(),
            ..pi.shape.clone()
        };
        crate::codegen::core::packing::conv_staged(window, groups, &read, w, &ci.shape)
    };
    const STAGED: &str = "the convolution would run staged (pointwise into a model output), which reads its input plainly";
    if crate::ir::shuffle::channel_slice_at(c, id).is_some() {
        let depthwise = groups > 1 && w.dims.get(1) == Some(&1) && w.dims[0] == groups;
        return Some(if pi.shape.dtype != DType::F32 || depthwise {
            Err(
                "a channel slice is read in place only by an f32 convolution that is not depthwise"
                    .into(),
            )
        } else if staged(pi.operands[0]) {
            Err(STAGED.into())
        } else if is_output || n_users != 1 {
            Err("the channel slice has other readers, so it is stored".into())
        } else {
            Ok("slice prologue: the convolution reads its input channels in the sliced value")
        });
    }
    let s = crate::ir::shuffle::channel_shuffle_at(c, id)?;
    let channels = s.groups * s.per_group;
    let t = pi.operands[0];
    let split = c.inst(t).operands[0];
    Some(
        if pi.shape.dtype != DType::F32 || !(1 < groups && groups < channels) {
            Err("a channel shuffle is read in place only by a grouped f32 convolution".into())
        } else if staged(s.input) {
            Err(STAGED.into())
        } else if is_output || n_users != 1 || !single(t) || !single(split) {
            Err(
                "the shuffled value (or a step of the shuffle) has other readers, so it is stored"
                    .into(),
            )
        } else {
            Ok(
                "shuffle prologue: the grouped convolution reads each input channel at its source position",
            )
        },
    )
}

/// Whether `pi` is elementwise on a max or min pool's result (the pool's epilogue,
/// [`pool_epilogue`]), its other operands broadcasts or constants.
fn epilogue_of_pool(c: &Computation, pi: &Instruction) -> bool {
    pi.op.is_elementwise()
        && pi.operands.iter().any(|&o| {
            matches!(
                c.inst(o).op,
                Op::ReduceWindow {
                    kind: ReduceKind::Max | ReduceKind::Min,
                    ..
                }
            )
        })
        && pi.operands.iter().all(|&o| {
            matches!(
                c.inst(o).op,
                Op::ReduceWindow { .. } | Op::Broadcast { .. } | Op::Constant(_)
            )
        })
}

/// Whether pool `pi` (any `reduce-window`) joins group `g` as the operand of its elementwise epilogue member
/// `ci` (index `i`): the group becomes an `input` fusion whose pool is computed first and whose
/// epilogue (a bias, ReLU, requantization that `passes/pool_first.rs` moved after the pool) is
/// applied to each pooled value before it is stored, one kernel instead of two.
fn pool_epilogue(
    g: &Group,
    root: &Instruction,
    i: usize,
    ci: &Instruction,
    pi: &Instruction,
    n_users: usize,
    dup_groups: usize,
) -> Result<&'static str, String> {
    if !matches!(g.kind, FusionKind::Loop) || g.heavy.is_some() {
        return Err(
            "the producer is a reduction (reduce-window): only an elementwise epilogue \
             group may hold one, once"
                .into(),
        );
    }
    if !root.shape.same_type(&pi.shape) || root.shape.layout != pi.shape.layout {
        return Err(
            "the epilogue's result is laid out unlike the pool's, so it cannot be stored in place"
                .into(),
        );
    }
    if !(ci.op.is_elementwise() && g.direct.contains(&i) && ci.shape.same_type(&pi.shape)) {
        return Err(
            "the pool's consumer does not read it elementwise at the same index, so inlining \
             it would redo the pool for every element"
                .into(),
        );
    }
    if n_users != 1 || dup_groups != 1 {
        return Err(format!(
            "the pool has {n_users} users in {dup_groups} fusions and is never recomputed"
        ));
    }
    Ok("pool epilogue: applied to each pooled value before it is stored")
}

/// How many windows of the group's reduce-window read each element of its operand (rounded
/// up; 1 for other groups): a 3×3 max pool with stride 2 reads each element ⌈9/4⌉ = 3 times, the
/// 5-channel window of LRN 5 times.
fn window_reads(c: &Computation, g: &Group) -> usize {
    match &c.instructions[g.heavy.unwrap_or(g.root)].op {
        Op::ReduceWindow { window, .. } if g.kind == FusionKind::Input => {
            let taps: usize = window.size.iter().product();
            let steps: usize = window.stride.iter().product();
            taps.div_ceil(steps.max(1)).max(1)
        }
        _ => 1,
    }
}

impl Pass for FusionPass {
    fn name(&self) -> &'static str {
        "fusion"
    }

    fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().expect("log lock"))
    }

    fn run(&self, m: &mut Module) -> bool {
        let ranges = crate::ir::value_range::ranges(m);
        // Values the bound on recomputing fusions stored: a second grouping reads them from
        // memory everywhere (the first had let the earliest fusions recompute them).
        let mut stored = BTreeSet::new();
        let (groups, log) = loop {
            let (groups, log, bounded) = self.group(&m.entry, &ranges, &stored);
            if bounded.is_subset(&stored) {
                break (groups, log);
            }
            stored.extend(bounded);
        };
        let changed = groups.iter().any(|g| g.members.len() > 1);
        if changed {
            m.entry = build(&m.entry, &groups);
        }
        *self.log.lock().expect("log lock") = log;
        changed
    }
}

impl FusionPass {
    /// One grouping of `c`'s instructions, with its log (in program order), and the values the
    /// bound on recomputing fusions refused ([`MAX_RECOMPUTING_FUSIONS`]); `stored`: values
    /// refused as operands of every fusion but their own.
    fn group(
        &self,
        c: &Computation,
        ranges: &[crate::ir::value_range::Range],
        stored: &BTreeSet<usize>,
    ) -> (Vec<Group>, Vec<String>, BTreeSet<usize>) {
        let n = c.instructions.len();
        let (users_of, outs) = users(c);
        let mut bounded = BTreeSet::new();
        let mut groups: Vec<Group> = Vec::new();
        let mut member_of: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut log = Vec::new();
        for i in (0..n).rev() {
            let inst = &c.instructions[i];
            if matches!(inst.op, Op::Parameter { .. } | Op::Constant(_)) {
                continue;
            }
            // Absorbed: not an output, and every group of every user holds it.
            let absorbed = outs[i] == 0
                && !users_of[i].is_empty()
                && users_of[i].iter().all(|u| {
                    member_of[u.index()]
                        .iter()
                        .all(|g| member_of[i].contains(g))
                });
            if !absorbed {
                let kind = match inst.op {
                    Op::Reduce { .. } | Op::ReduceWindow { .. } => FusionKind::Input,
                    _ => FusionKind::Loop,
                };
                let mut direct = BTreeSet::new();
                if inst.op.is_elementwise() {
                    direct.insert(i);
                }
                groups.push(Group {
                    root: i,
                    kind,
                    members: BTreeSet::from([i]),
                    direct,
                    heavy: None,
                    cost: cost(&inst.op),
                    copies: HashMap::from([(i, 1)]),
                    expanded: cost(&inst.op) as u64,
                });
                member_of[i].push(groups.len() - 1);
            }
            let mut operands: Vec<usize> = inst.operands.iter().map(|o| o.index()).collect();
            operands.dedup();
            for &g in &member_of[i].clone() {
                for &p in &operands {
                    // Each read of `p` here is one more copy of `p` per copy of `i`.
                    let reads = inst.operands.iter().filter(|o| o.index() == p).count() as u64;
                    let more = reads.saturating_mul(groups[g].copies.get(&i).copied().unwrap_or(1));
                    let pc = cost(&c.instructions[p].op) as u64;
                    if groups[g].members.contains(&p) {
                        let grp = &mut groups[g];
                        *grp.copies.entry(p).or_insert(0) += more;
                        grp.expanded = grp.expanded.saturating_add(more.saturating_mul(pc));
                        continue;
                    }
                    let n_users = users_of[p].iter().collect::<BTreeSet<_>>().len();
                    let prod = Producer {
                        index: p,
                        users: n_users,
                        is_output: outs[p] > 0,
                        consumer_copies: member_of[i].len(),
                        stored_for: users_of[p]
                            .iter()
                            .map(|u| u.index())
                            .find(|&u| reads_operands_from_memory(&c.instructions[u].op)),
                        ends_conv_epilogue: epilogue_convolution(c, &users_of, p),
                        byte_range: ranges[p].byte_type().is_some(),
                        computed_in: member_of[p].len(),
                        computed_operand: c.instructions[p].operands.iter().any(|o| {
                            let op = &c.instructions[o.index()].op;
                            is_elemental(op) && !is_remap(op)
                        }),
                    };
                    let grown = groups[g].expanded.saturating_add(more.saturating_mul(pc));
                    let verdict = if stored.contains(&p) {
                        Err("it is stored (more fusions wanted to recompute it than \
                             MAX_RECOMPUTING_FUSIONS allows), so recomputing it here saves nothing"
                            .to_string())
                    } else if grown > MAX_EXPANDED_FUSION_COST
                        && !matches!(c.instructions[p].op, Op::Parameter { .. } | Op::Constant(_))
                    {
                        Err(format!(
                            "the kernel's body would compute {grown} op-units per element as generated \
                             (a value read along several paths is computed once per path; \
                             MAX_EXPANDED_FUSION_COST = {MAX_EXPANDED_FUSION_COST}), so it is stored"
                        ))
                    } else {
                        self.decide(c, &users_of, &groups[g], i, prod)
                    };
                    let root = &c.instructions[groups[g].root].name;
                    match verdict {
                        Ok(why) => {
                            log.push(format!(
                                "fuse   %{} into %{root} (via %{}): {why}",
                                c.instructions[p].name, inst.name
                            ));
                            let grp = &mut groups[g];
                            grp.members.insert(p);
                            grp.cost = grp.cost.saturating_add(cost(&c.instructions[p].op));
                            *grp.copies.entry(p).or_insert(0) += more;
                            grp.expanded = grown;
                            if is_heavy(&c.instructions[p].op) {
                                grp.heavy = Some(p);
                                grp.kind = FusionKind::Output;
                            }
                            if is_heavy(&inst.op) && grp.heavy.is_none() {
                                // A shuffle prologue joined its convolution (the group's root).
                                grp.heavy = Some(i);
                                grp.kind = FusionKind::Output;
                            }
                            if matches!(c.instructions[p].op, Op::ReduceWindow { .. }) {
                                grp.heavy = Some(p);
                                grp.kind = FusionKind::Input;
                            }
                            // Read at the root's own index: elementwise steps of the same dims
                            // (a `convert` changes the dtype, not the index).
                            if grp.direct.contains(&i)
                                && c.instructions[p].op.is_elementwise()
                                && c.instructions[p].shape.dims == inst.shape.dims
                            {
                                grp.direct.insert(p);
                            }
                            member_of[p].push(g);
                        }
                        Err(why) => {
                            if why.starts_with(RECOMPUTE_BOUND) {
                                bounded.insert(p);
                            }
                            if !matches!(
                                c.instructions[p].op,
                                Op::Parameter { .. } | Op::Constant(_)
                            ) {
                                log.push(format!(
                                    "refuse %{} into %{root} (via %{}): {why}",
                                    c.instructions[p].name, inst.name
                                ));
                            }
                        }
                    }
                }
            }
        }
        log.reverse();
        (groups, log, bounded)
    }
}

/// Rebuilds the entry with one `fusion` per multi-instruction group (at its root's position);
/// members that no longer have users disappear with DCE.
fn build(c: &Computation, groups: &[Group]) -> Computation {
    let by_root: HashMap<usize, &Group> = groups
        .iter()
        .filter(|g| g.members.len() > 1)
        .map(|g| (g.root, g))
        .collect();
    let mut used_names: BTreeSet<String> = c.instructions.iter().map(|i| i.name.clone()).collect();
    let mut out: Vec<Instruction> = Vec::with_capacity(c.instructions.len());
    for (i, inst) in c.instructions.iter().enumerate() {
        let Some(g) = by_root.get(&i) else {
            out.push(inst.clone());
            continue;
        };
        // Parameters of the fused computation: values read by members but not members.
        let mut params: Vec<usize> = Vec::new();
        for &mbr in &g.members {
            for o in &c.instructions[mbr].operands {
                let o = o.index();
                if !g.members.contains(&o) && !params.contains(&o) {
                    params.push(o);
                }
            }
        }
        let mut local: HashMap<usize, InstId> = HashMap::new();
        let mut body: Vec<Instruction> = Vec::new();
        for (k, &p) in params.iter().enumerate() {
            let pi = &c.instructions[p];
            local.insert(p, InstId(body.len() as u32));
            body.push(Instruction {
                name: format!("p{k}.{}", pi.name),
                op: Op::Parameter { index: k },
                operands: Vec::new(),
                shape: pi.shape.clone(),
            });
        }
        for &mbr in &g.members {
            let mi = &c.instructions[mbr];
            local.insert(mbr, InstId(body.len() as u32));
            body.push(Instruction {
                operands: mi.operands.iter().map(|o| local[&o.index()]).collect(),
                ..mi.clone()
            });
        }
        let base = format!("fused.{}", inst.name);
        let mut cname = base.clone();
        let mut k = 1;
        while used_names.contains(&cname) {
            cname = format!("{base}.{k}");
            k += 1;
        }
        used_names.insert(cname.clone());
        let computation = Computation {
            name: cname,
            outputs: vec![Output {
                name: inst.name.clone(),
                value: local[&i],
            }],
            instructions: body,
        };
        out.push(Instruction {
            name: inst.name.clone(),
            op: Op::Fusion {
                kind: g.kind,
                computation: Box::new(computation),
            },
            operands: params.iter().map(|&p| InstId(p as u32)).collect(),
            shape: inst.shape.clone(),
        });
    }
    Computation {
        name: c.name.clone(),
        instructions: out,
        outputs: c.outputs.clone(),
    }
}
