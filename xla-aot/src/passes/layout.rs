//! Layout assignment: weights are re-laid at compile time so the kernels that read them walk
//! memory contiguously.
//!
//! Contract: four rules. Convolutions (and the same-shape elementwise chain that follows them,
//! which fusion turns into their epilogue, through spatial pooling) produce channels-minor (NHWC, `{1,3,2,0}`) results
//! unless that chain reaches a model output, and so do concatenations whose every operand ends
//! such a chain (with their own chains): the CPU kernel for that layout runs its innermost loop
//! over output channels, contiguous in the output and, with the kernel re-laid `{0,3,2,1}`
//! (output channel minor), in the weights. And for dots (dense layers, matmuls) whose right-hand side is a constant
//! read by nothing else: the CPU dot kernel's innermost loop runs over the rhs free dimensions
//! (the output columns), so those dimensions become the minor-most in the constant's layout
//! (`[out, in]` weights are stored `in`-major, the `out` index contiguous) and the innermost loop
//! loads consecutive weights instead of striding by the input width. The emitter writes the
//! constant's bytes in that layout (`codegen/core/packing.rs`, `relayout`). A dot's rhs computed in the
//! model and read only by dots gets the same treatment (free dims minor, then contracting, then
//! batch dims), written so by its producer. Parameters and outputs keep
//! their row-major layout (the C API); a parameter's NHWC-to-NCHW transpose and its elementwise
//! chain read only as convolution inputs of more than [`PLANAR_INPUT_MAX_CHANNELS`] channels
//! are channels-minor (the transpose becomes a copy). No layout conversion is ever needed at run time: kernels
//! address every buffer through its layout. Runs before fusion, so fused computations see the
//! final layouts.

use super::Pass;
use super::rewrite::users;
use crate::ir::shuffle::channel_shuffle_at;
use crate::ir::{Layout, Module, Op};

/// Most channels of a model input that stays planar (channels-major) into its first
/// convolution: the int8 kernel stages up to 4 planar channels as whole pixel dwords
/// (`codegen/cpu/conv/int8.rs`, narrow staging: vww's 3-channel stem, 3.54 M → 2.12 M
/// instructions on the M4); wider inputs are read channels-minor.
const PLANAR_INPUT_MAX_CHANNELS: usize = 4;

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
            let constant = matches!(inst.op, Op::Constant(_));
            let intermediate = !constant
                && !matches!(inst.op, Op::Parameter { .. })
                && inst.shape.layout == Layout::row_major(inst.shape.rank());
            if !(constant || intermediate) || outs[w] > 0 {
                continue;
            }
            let Some((free, contracting, batch)) = dot_rhs_dims(c, &users_of[w], w) else {
                continue;
            };
            // Free dims minor-most (the last free dim fastest). A weight keeps the others in
            // order, last fastest; an intermediate (attention's keys, a matmul of two
            // activations) puts the contracting dims next and batch dims major, so the dot
            // kernel loads its columns as vectors; its producer (a transpose, usually fused)
            // writes that order directly.
            let mut m2m: Vec<usize> = free.iter().rev().copied().collect();
            if constant {
                m2m.extend((0..inst.shape.rank()).rev().filter(|d| !free.contains(d)));
            } else {
                m2m.extend(contracting.iter().rev());
                m2m.extend(batch.iter().rev());
            }
            let layout = Layout {
                minor_to_major: m2m,
            };
            if layout != inst.shape.layout {
                changes.push((w, layout));
            }
        }
        // Convolutions (and concatenations of them): the result and its same-shape elementwise
        // chain become channels-minor.
        let channels_minor = Layout {
            minor_to_major: vec![1, 3, 2, 0],
        };
        let kernel_oc_minor = Layout {
            minor_to_major: vec![0, 3, 2, 1],
        };
        let is_output: Vec<bool> = (0..c.instructions.len()).map(|i| outs[i] > 0).collect();
        // Chains start at convolutions and at concatenations whose every operand ends an
        // accepted chain (Inception and DenseNet blocks, SqueezeNet's fire modules): the
        // concatenation then copies channel runs per pixel and what reads it (pools, the next
        // convolution) keeps the fast layout. Instructions are in topological order, so a
        // concatenation's operands are decided before it is reached.
        let mut accepted = vec![false; c.instructions.len()];
        for (i, inst) in c.instructions.iter().enumerate() {
            let seed = match inst.op {
                Op::Convolution { .. } => inst.shape.rank() == 4,
                Op::Concatenate { .. } => {
                    inst.shape.rank() == 4 && inst.operands.iter().all(|o| accepted[o.index()])
                }
                _ => false,
            };
            if !seed || accepted[i] {
                continue;
            }
            let chain = channels_minor_chain(c, &users_of, &is_output, i);
            let row_major = Layout::row_major(4);
            if chain
                .iter()
                .any(|&j| is_output[j] || c.instructions[j].shape.layout != row_major)
            {
                continue;
            }
            for &j in &chain {
                accepted[j] = true;
                changes.push((j, channels_minor.clone()));
            }
            if !matches!(inst.op, Op::Convolution { .. }) {
                continue;
            }
            let w = inst.operands[1].index();
            let only_convs = users_of[w].iter().all(|u| {
                matches!(c.inst(*u).op, Op::Convolution { .. })
                    && c.inst(*u).operands[1].index() == w
                    && c.inst(*u).operands[0].index() != w
            });
            if matches!(c.instructions[w].op, Op::Constant(_))
                && !is_output[w]
                && only_convs
                && c.instructions[w].shape.layout == row_major
            {
                changes.push((w, kernel_oc_minor.clone()));
            }
        }
        // Model inputs on their way into convolutions: an NHWC parameter's transpose to NCHW
        // and its elementwise chain (TFLite's int8 `convert(q) − z`) read only as convolution
        // inputs become channels-minor too, so the transpose is a copy and the convolution
        // reads channels-minor data (str_ww's first depthwise layer over 40 channels of a
        // 30 × 1 image: 50 k instructions on the M55 on the channels-major path).
        for (i, inst) in c.instructions.iter().enumerate() {
            let from_nhwc = matches!(&inst.op, Op::Transpose { permutation } if permutation == &[0, 3, 1, 2])
                && matches!(c.inst(inst.operands[0]).op, Op::Parameter { .. })
                && inst.shape.rank() == 4
                && inst.shape.dims[1] > PLANAR_INPUT_MAX_CHANNELS;
            if !from_nhwc {
                continue;
            }
            let mut chain = vec![i];
            let mut k = 0;
            let mut feeds_convs = true;
            while k < chain.len() && feeds_convs {
                let at = chain[k];
                for u in &users_of[at] {
                    let ui = c.inst(*u);
                    if ui.op.is_elementwise() && ui.shape.dims == inst.shape.dims {
                        if !chain.contains(&u.index()) {
                            chain.push(u.index());
                        }
                    } else if !(matches!(ui.op, Op::Convolution { .. })
                        && ui.operands[0].index() == at
                        && ui.operands[1].index() != at)
                    {
                        feeds_convs = false;
                    }
                }
                k += 1;
            }
            let row_major = Layout::row_major(4);
            if feeds_convs
                && chain
                    .iter()
                    .all(|&j| !is_output[j] && c.instructions[j].shape.layout == row_major)
            {
                changes.extend(chain.into_iter().map(|j| (j, channels_minor.clone())));
            }
        }
        changes.sort_by_key(|(i, _)| *i);
        changes.dedup_by_key(|(i, _)| *i);
        let changed = !changes.is_empty();
        for (w, layout) in changes {
            m.entry.instructions[w].shape.layout = layout;
        }
        changed
    }
}

/// The instructions that take `seed`'s channels-minor layout with it: its same-shape
/// elementwise users, spatial pools (whose kernel then runs along channels) and channel
/// shuffles, transitively.
fn channels_minor_chain(
    c: &crate::ir::Computation,
    users_of: &[Vec<crate::ir::InstId>],
    is_output: &[bool],
    seed: usize,
) -> Vec<usize> {
    let mut chain = vec![seed];
    // Members at or after a spatial pool: a model output reading one of them stays out of the
    // chain (it reads the pooled, small, channels-minor value and writes the C API's layout)
    // instead of keeping the whole chain row-major, as when a pool's epilogue (`pool_first.rs`
    // moves a ReLU after the pool) is the model's output.
    let mut pooled = vec![false];
    let mut k = 0;
    while k < chain.len() {
        let dims = &c.instructions[chain[k]].shape.dims;
        let after_pool = pooled[k];
        for u in &users_of[chain[k]] {
            if after_pool && is_output[u.index()] {
                continue;
            }
            let ui = c.inst(*u);
            let spatial_pool = matches!(&ui.op, Op::ReduceWindow { window, .. }
                if ui.shape.rank() == 4 && window.size[0] == 1 && window.size[1] == 1
                    && window.pad_low[1] == 0 && window.pad_high[1] == 0
                    && window.stride[1] == 1 && window.dilation[1] == 1)
                && !is_output[u.index()];
            // Elementwise ops, and windows along channels that keep the shape (LRN's sum of
            // squares over neighbouring channels).
            let same_shape = (ui.op.is_elementwise()
                || matches!(ui.op, Op::ReduceWindow { .. }) && !is_output[u.index()])
                && ui.shape.dims == *dims;
            if (same_shape || spatial_pool) && !chain.contains(&u.index()) {
                chain.push(u.index());
                pooled.push(after_pool || spatial_pool);
            }
            if let Some(s) = channel_shuffle(c, users_of, chain[k], u.index()) {
                if !is_output[s] && !chain.contains(&s) {
                    chain.push(s);
                    pooled.push(after_pool);
                }
            }
        }
        k += 1;
    }
    chain
}

/// The end of a channel shuffle of `x` starting at its user `r`: `reshape` to
/// `[N, g, C/g, H, W]`, `transpose` `{0,2,1,3,4}`, `reshape` back to `x`'s `[N, C, H, W]`
/// (ShuffleNet's block, `ir/shuffle.rs`), each step the only user of the one before. The result
/// permutes `x`'s channels only, so it keeps `x`'s channels-minor layout (the CPU's fused loop
/// reads it group by group) and the depthwise convolution after it reads channels-minor data;
/// the 5-D steps are computed inline.
fn channel_shuffle(
    c: &crate::ir::Computation,
    users_of: &[Vec<crate::ir::InstId>],
    x: usize,
    r: usize,
) -> Option<usize> {
    let only_user = |i: usize| match users_of[i].as_slice() {
        [u] => Some(u.index()),
        _ => None,
    };
    let back = only_user(only_user(r)?)?;
    channel_shuffle_at(c, crate::ir::InstId(back as u32))
        .is_some_and(|s| s.input.index() == x)
        .then_some(back)
}

/// The rhs (free, contracting, batch) dims of `w` when every user reads it as the rhs of a dot
/// (and not as its lhs), all with the same dims.
fn dot_rhs_dims(
    c: &crate::ir::Computation,
    users: &[crate::ir::InstId],
    w: usize,
) -> Option<(Vec<usize>, Vec<usize>, Vec<usize>)> {
    let rank = c.instructions[w].shape.rank();
    let mut wanted = None;
    for u in users {
        let ui = c.inst(*u);
        let Op::Dot(d) = &ui.op else { return None };
        if ui.operands[1].index() != w || ui.operands[0].index() == w {
            return None;
        }
        let free: Vec<usize> = (0..rank)
            .filter(|i| !d.rhs_batch.contains(i) && !d.rhs_contracting.contains(i))
            .collect();
        let dims = (free, d.rhs_contracting.clone(), d.rhs_batch.clone());
        match &wanted {
            None => wanted = Some(dims),
            Some(f) if *f != dims => return None,
            Some(_) => {}
        }
    }
    wanted
}
