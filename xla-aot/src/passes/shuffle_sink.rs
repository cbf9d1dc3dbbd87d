//! Channel shuffles moved to the convolution that reads them: `conv(f(shuffle(x)))` →
//! `conv(shuffle(f'(x)))`, and a dense convolution of a shuffle reads the unshuffled channels.
//!
//! ShuffleNet's block is grouped 1×1 conv → bias, ReLU → channel shuffle → depthwise conv → bias
//! → grouped 1×1 conv. As imported, the shuffle (`ir/shuffle.rs`) sits between the first conv's
//! epilogue and the depthwise conv, so it is a kernel of its own that reads and writes every
//! value once (12% of the light shufflenet) and keeps the bias and ReLU out of the conv's
//! epilogue. A per-channel step commutes with a channel permutation once its per-channel
//! constants are permuted too, so the shuffle can move down to the next convolution that mixes
//! channels, which reads its input channels through the permutation for free
//! (`passes/fusion.rs` `shuffle_prologue`, `cpu/conv.rs`' channel table).
//!
//! Contract, for a channel shuffle `S` (output channel `s` is input channel `π(s)`):
//! - The chain below `S` is walked while each value has one reader (and is no model output):
//!   unary elementwise ops and `convert`; binary elementwise ops whose other operand is a scalar,
//!   a broadcast scalar, or a broadcast along dim 1 of a 1-D f32 constant; `clamp` with such
//!   bounds; a depthwise convolution (`groups == C`, one input channel per group) of a constant
//!   f32 kernel. It ends at a convolution reading the chain as its input:
//!   - a dense convolution (`groups == 1`) of a constant f32 kernel: the shuffle disappears and
//!     the kernel's input channels are permuted (`W'[o, π(s)] = W[o, s]`);
//!   - a grouped convolution: the steps run on the unshuffled channels and the shuffle is rebuilt
//!     right before the convolution (at the chain's spatial size).
//!
//!   Anything else refuses the rewrite (the shuffle stays where it is).
//! - Each step is rebuilt with its per-channel constants permuted (`v'[π(s)] = v[s]`; a
//!   depthwise kernel along its output channels), so every value is bit for bit the same value
//!   at its unshuffled position: the rewrite changes no arithmetic.
//!
//! The old chain is left for DCE.

use super::Pass;
use super::rewrite::{Rewriter, rebuild, users};
use crate::ir::shuffle::{ChannelShuffle, channel_shuffle_at};
use crate::ir::{Computation, DType, InstId, Instruction, Literal, Module, Op, Shape};
use std::collections::HashMap;

/// The shuffle-sinking pass.
pub struct ShuffleSink;

/// How the chain below a shuffle ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// A dense convolution: its kernel's input channels absorb the permutation.
    Dense,
    /// A grouped convolution: the shuffle is rebuilt right before it.
    Grouped,
}

/// A rewrite: the shuffle, the steps below it (top first), the convolution ending the chain.
struct Plan {
    shuffle: ChannelShuffle,
    /// The shuffle's last reshape.
    at: InstId,
    steps: Vec<InstId>,
    /// The convolution reading the last step.
    conv: InstId,
    end: End,
}

/// `values` (row-major, `dims`) with the slices along `dim` moved: slice `s` goes to `perm[s]`.
fn permute_along(dims: &[usize], values: &[f32], dim: usize, perm: &[usize]) -> Vec<f32> {
    let inner: usize = dims[dim + 1..].iter().product();
    let n = dims[dim];
    let mut out = vec![0.0; values.len()];
    for (o, block) in values.chunks(n * inner).enumerate() {
        for s in 0..n {
            let to = o * n * inner + perm[s] * inner;
            out[to..to + inner].copy_from_slice(&block[s * inner..(s + 1) * inner]);
        }
    }
    out
}

/// The f32 values of constant `id`.
fn constant_f32(c: &Computation, id: InstId) -> Option<Vec<f32>> {
    match &c.inst(id).op {
        Op::Constant(l) if l.dtype == DType::F32 => l.to_f32_vec(),
        _ => None,
    }
}

/// Whether operand `id` of a step over `channels` channels is the same for every channel, or a
/// per-channel constant that can be permuted.
fn side_ok(c: &Computation, id: InstId, channels: usize) -> bool {
    let inst = c.inst(id);
    if inst.shape.rank() == 0 {
        return true;
    }
    let Op::Broadcast { dimensions } = &inst.op else {
        return false;
    };
    let x = inst.operands[0];
    let xs = &c.inst(x).shape;
    xs.rank() == 0
        || (dimensions == &[1]
            && xs.dims == [channels]
            && constant_f32(c, x).is_some_and(|v| v.len() == channels))
}

/// Whether convolution `inst` is depthwise over `channels` channels with a constant f32 kernel.
fn depthwise_const(c: &Computation, inst: &Instruction, channels: usize) -> bool {
    let Op::Convolution {
        feature_group_count: g,
        ..
    } = inst.op
    else {
        return false;
    };
    let w = &c.inst(inst.operands[1]).shape;
    g == channels
        && w.dims.first() == Some(&channels)
        && w.dims.get(1) == Some(&1)
        && constant_f32(c, inst.operands[1]).is_some()
}

/// The rewrite of the shuffle whose last reshape is `at`, if the chain below it allows one.
fn plan(c: &Computation, at: InstId, users: &[Vec<InstId>], outs: &[usize]) -> Option<Plan> {
    let shuffle = channel_shuffle_at(c, at)?;
    let channels = shuffle.groups * shuffle.per_group;
    if c.inst(at).shape.dtype != DType::F32 {
        return None;
    }
    let mut steps = Vec::new();
    let mut cur = at;
    loop {
        let mut readers = users[cur.index()].clone();
        readers.dedup();
        let ([u], 0) = (readers.as_slice(), outs[cur.index()]) else {
            return None;
        };
        let ui = c.inst(*u);
        let reads_once = ui.operands.iter().filter(|&&o| o == cur).count() == 1;
        // Steps keep the channels; the convolution ending the chain may change them.
        let keeps = ui.shape.rank() == 4 && ui.shape.dims[1] == channels;
        let is_conv = matches!(ui.op, Op::Convolution { .. });
        if !reads_once || !(keeps || is_conv) {
            return None;
        }
        let others_ok = || {
            ui.operands
                .iter()
                .filter(|&&o| o != cur)
                .all(|&o| side_ok(c, o, channels))
        };
        match &ui.op {
            Op::Convolution {
                feature_group_count: g,
                ..
            } if ui.operands[0] == cur => {
                if keeps && depthwise_const(c, ui, channels) {
                    steps.push(*u);
                    cur = *u;
                    continue;
                }
                let end = if *g == 1 && constant_f32(c, ui.operands[1]).is_some() {
                    End::Dense
                } else if *g > 1 && *g < channels && !steps.is_empty() {
                    End::Grouped
                } else {
                    return None;
                };
                return Some(Plan {
                    shuffle,
                    at,
                    steps,
                    conv: *u,
                    end,
                });
            }
            Op::Unary(_) | Op::Convert { .. } => {}
            Op::Binary(_) | Op::Clamp if others_ok() => {}
            _ => return None,
        }
        steps.push(*u);
        cur = *u;
    }
}

/// Operand `id` of a rebuilt step: per-channel constants permuted by `perm`.
fn rebuild_side(rw: &mut Rewriter, id: InstId, perm: &[usize]) -> InstId {
    let inst = rw.old.inst(id).clone();
    let Op::Broadcast { .. } = &inst.op else {
        return rw.get(id);
    };
    let x = inst.operands[0];
    let xi = rw.old.inst(x).clone();
    if xi.shape.rank() == 0 {
        return rw.get(id);
    }
    let v = constant_f32(rw.old, x).expect("side_ok checked a constant");
    let k = rw.constant(
        &format!("{}.unshuffled", xi.name),
        Literal::from_f32(
            xi.shape.dims.clone(),
            &permute_along(&xi.shape.dims, &v, 0, perm),
        ),
    );
    rw.push(Instruction {
        name: format!("{}.unshuffled", inst.name),
        operands: vec![k],
        ..inst
    })
}

/// A constant kernel `w` with its dim `dim` permuted by `perm`.
fn permuted_kernel(rw: &mut Rewriter, w: InstId, dim: usize, perm: &[usize]) -> InstId {
    let wi = rw.old.inst(w).clone();
    let v = constant_f32(rw.old, w).expect("a constant kernel");
    rw.constant(
        &format!("{}.unshuffled", wi.name),
        Literal::from_f32(
            wi.shape.dims.clone(),
            &permute_along(&wi.shape.dims, &v, dim, perm),
        ),
    )
}

impl Pass for ShuffleSink {
    fn name(&self) -> &'static str {
        "shuffle-sinking"
    }

    fn run(&self, m: &mut Module) -> bool {
        let (users, outs) = users(&m.entry);
        let mut plans: HashMap<InstId, Plan> = HashMap::new();
        for id in m.entry.ids() {
            if let Some(p) = plan(&m.entry, id, &users, &outs) {
                plans.insert(p.conv, p);
            }
        }
        if plans.is_empty() {
            return false;
        }
        rebuild(m, |rw, old, inst, _| {
            let Some(p) = plans.remove(&old) else {
                rw.copy(old);
                return false;
            };
            // Unshuffled channel `π(s)` holds what shuffled channel `s` held.
            let perm: Vec<usize> = (0..p.shuffle.groups * p.shuffle.per_group)
                .map(|s| p.shuffle.source(s))
                .collect();
            let mut cur = rw.get(p.shuffle.input);
            let mut prev = p.at;
            for &s in &p.steps {
                let si = rw.old.inst(s).clone();
                let operands = si
                    .operands
                    .iter()
                    .enumerate()
                    .map(|(j, &o)| match (o == prev, &si.op) {
                        (true, _) => cur,
                        (false, Op::Convolution { .. }) if j == 1 => {
                            permuted_kernel(rw, o, 0, &perm)
                        }
                        _ => rebuild_side(rw, o, &perm),
                    })
                    .collect();
                cur = rw.push(Instruction {
                    name: format!("{}.unshuffled", si.name),
                    operands,
                    ..si
                });
                prev = s;
            }
            let conv = match p.end {
                End::Dense => {
                    let w = permuted_kernel(rw, inst.operands[1], 1, &perm);
                    Instruction {
                        operands: vec![cur, w],
                        ..inst.clone()
                    }
                }
                End::Grouped => {
                    let x = cur;
                    let shuffled = rebuild_shuffle(rw, p.at, x);
                    Instruction {
                        operands: vec![shuffled, rw.get(inst.operands[1])],
                        ..inst.clone()
                    }
                }
            };
            let id = rw.push(conv);
            rw.replace(old, id);
            true
        })
    }
}

/// The shuffle ending at old `at`, rebuilt over new value `x` (its spatial dims may differ).
fn rebuild_shuffle(rw: &mut Rewriter, at: InstId, x: InstId) -> InstId {
    let back = rw.old.inst(at).clone();
    let t = rw.old.inst(back.operands[0]).clone();
    let split = rw.old.inst(t.operands[0]).clone();
    let xd = rw.new_inst(x).shape.dims.clone();
    let with_space = |s: &Shape| {
        let mut dims = s.dims.clone();
        let n = dims.len();
        dims[n - 2..].copy_from_slice(&xd[2..]);
        Shape::new(s.dtype, dims)
    };
    let a = rw.push(Instruction {
        name: format!("{}.sunk", split.name),
        shape: with_space(&split.shape),
        operands: vec![x],
        op: split.op,
    });
    let b = rw.push(Instruction {
        name: format!("{}.sunk", t.name),
        shape: with_space(&t.shape),
        operands: vec![a],
        op: t.op,
    });
    rw.push(Instruction {
        name: format!("{}.sunk", back.name),
        shape: with_space(&back.shape),
        operands: vec![b],
        op: back.op,
    })
}
