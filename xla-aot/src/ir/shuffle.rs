//! The channel shuffle pattern (ShuffleNet's block) as the importers emit it: `reshape` of
//! `[N, G·K, H, W]` to `[N, G, K, H, W]`, `transpose` `{0,2,1,3,4}`, `reshape` back to
//! `[N, G·K, H, W]`; output channel `j·G + g` is input channel `g·K + j`.
//!
//! Contract: [`channel_shuffle_at`] recognises the pattern from its last reshape, by dims and
//! opcodes only (layouts and users are the callers' concern: layout assignment and the CPU's
//! fused loops). [`conv_input`] is where a convolution inside an output fusion reads its input:
//! a fusion parameter, or a parameter through a channel shuffle (`passes/fusion.rs`
//! `shuffle_prologue`), whose channel `s` the kernels read at [`ChannelShuffle::source`]`(s)`.

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

/// The value a convolution operand `x` of computation `c` reads its elements from, and the
/// channel shuffle between, if `x` is one.
pub fn conv_input(c: &Computation, x: InstId) -> (InstId, Option<ChannelShuffle>) {
    match channel_shuffle_at(c, x) {
        Some(s) => (s.input, Some(s)),
        None => (x, None),
    }
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
