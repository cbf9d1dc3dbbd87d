//! The channel shuffle pattern (ShuffleNet's block) as the importers emit it: `reshape` of
//! `[N, G·K, H, W]` to `[N, G, K, H, W]`, `transpose` `{0,2,1,3,4}`, `reshape` back to
//! `[N, G·K, H, W]`; output channel `j·G + g` is input channel `g·K + j`.
//!
//! Contract: [`channel_shuffle_at`] recognises the pattern from its last reshape, by dims and
//! opcodes only (layouts and users are the callers' concern: layout assignment and the CPU's
//! fused loops). [`conv_input`] is where a convolution inside an output fusion reads its input:
//! a fusion parameter, or a parameter through a [`ChannelMap`] (`passes/fusion.rs`
//! `channel_prologue`): a channel shuffle, or a slice along the channels (ONNX `Split`), whose
//! channel `s` the kernels read at source channel [`ChannelMap::source`]`(s)`.

use super::{Computation, InstId, Op};

/// A channel shuffle of `input` in `groups` groups of `per_group` channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelShuffle {
    pub input: InstId,
    pub groups: usize,
    pub per_group: usize,
}

impl ChannelShuffle {
    /// The input channel that output channel `s` holds: `s = j·G + g` holds `g·K + j`.
    pub fn source(&self, s: usize) -> usize {
        (s % self.groups) * self.per_group + s / self.groups
    }
}

/// How a 4-D `[N, C, H, W]` value's channels come from its input's, pixels unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelMap {
    /// A channel shuffle ([`channel_shuffle_at`]).
    Shuffle(ChannelShuffle),
    /// A slice of the channels: channel `s` is input channel `start + s·step`.
    Slice { start: usize, step: usize },
}

impl ChannelMap {
    /// The input channel that channel `s` holds.
    pub fn source(&self, s: usize) -> usize {
        match self {
            ChannelMap::Shuffle(sh) => sh.source(s),
            ChannelMap::Slice { start, step } => start + s * step,
        }
    }
}

/// The value a convolution operand `x` of computation `c` reads its elements from, and the
/// channel map between, if `x` is a channel shuffle or a channel slice of it.
pub fn conv_input(c: &Computation, x: InstId) -> (InstId, Option<ChannelMap>) {
    if let Some(s) = channel_shuffle_at(c, x) {
        return (s.input, Some(ChannelMap::Shuffle(s)));
    }
    match channel_slice_at(c, x) {
        Some(m) => (c.inst(x).operands[0], Some(m)),
        None => (x, None),
    }
}

/// The channel map of `id` if it is a slice of a 4-D value along dim 1 only.
pub fn channel_slice_at(c: &Computation, id: InstId) -> Option<ChannelMap> {
    let inst = c.inst(id);
    let Op::Slice {
        starts,
        limits,
        strides,
    } = &inst.op
    else {
        return None;
    };
    let x = &c.inst(*inst.operands.first()?).shape;
    let whole = |d: usize| starts[d] == 0 && limits[d] == x.dims[d] && strides[d] == 1;
    (inst.shape.rank() == 4 && x.rank() == 4 && [0, 2, 3].iter().all(|&d| whole(d))).then_some(
        ChannelMap::Slice {
            start: starts[1],
            step: strides[1],
        },
    )
}

/// The channel shuffle whose last reshape is `id`, if it is one.
pub fn channel_shuffle_at(c: &Computation, id: InstId) -> Option<ChannelShuffle> {
    let back = c.inst(id);
    if back.op != Op::Reshape || back.shape.rank() != 4 {
        return None;
    }
    let t = c.inst(back.operands[0]);
    if !matches!(&t.op, Op::Transpose { permutation } if permutation == &[0, 2, 1, 3, 4]) {
        return None;
    }
    let r = c.inst(t.operands[0]);
    let input = r.operands.first().copied()?;
    let (d, xd) = (&r.shape.dims, &back.shape.dims);
    (r.op == Op::Reshape
        && d.len() == 5
        && c.inst(input).shape.dims == *xd
        && d[0] == xd[0]
        && d[1] * d[2] == xd[1]
        && d[3..] == xd[2..])
        .then_some(ChannelShuffle {
            input,
            groups: d[1],
            per_group: d[2],
        })
}
