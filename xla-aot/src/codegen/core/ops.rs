//! Kernel bodies that need no backend choice: the loops of reductions, windowed reductions,
//! argmax and elementwise ops, and the parts of fused kernels every backend shares.
//!
//! Contract: each body visits the output elements through `loop_nest_physical`, so one body
//! serves both backends: a CPU kernel loops over its whole output, a GPU thread computes its
//! own element (`Backend::elements`). Operands come from `at` (a buffer, or a fused expression
//! computed inline), so the same loops run unfused and fused. Each output element is combined
//! in the interpreter's order. Backends put their faster paths for the same ops in front of
//! these (`cpu/reduce.rs`); dot and convolution have no generic body.

use super::emitter::{Backend, Emitter, Ix, Kernel};
use crate::ir::shuffle::{ChannelMap, conv_input};
use crate::ir::{Computation, DType, InstId, Op, ReduceKind, Shape, Window};
use inkwell::FloatPredicate;
use inkwell::values::{BasicValueEnum, IntValue, PointerValue};

/// Operand `j`'s element at an index.
pub(crate) type At<'x, 'ctx> = &'x dyn Fn(usize, Ix<'_, 'ctx>) -> BasicValueEnum<'ctx>;

impl<'a, 'ctx, B: Backend<'ctx>> Emitter<'a, 'ctx, B> {
    /// The loops computing `op` (any op but a dot or convolution) into `k.out`; operand `j`'s
    /// elements come from `at(j, ..)`.
    pub(crate) fn generic_body(
        &self,
        k: &Kernel<'ctx>,
        op: &Op,
        shape: &Shape,
        opnds: &[Shape],
        at: At<'_, 'ctx>,
    ) {
        let odt = shape.dtype;
        match op {
            Op::Reduce { kind, dimensions } => {
                self.reduce_loops(k, kind, dimensions, shape, opnds, at)
            }
            Op::ReduceWindow { kind, window } => {
                self.reduce_window_loops(k, kind, window, shape, opnds, at)
            }
            Op::Argmax { dimension } => self.argmax(k, dimension, shape, opnds, at),
            Op::TopK { indices, .. } => self.top_k_kernel(k, *indices, shape, opnds, at),
            Op::Sample => self.sample_kernel(k, shape, opnds, at),
            Op::Parameter { .. } | Op::Constant(_) | Op::Fusion { .. } => {
                unreachable!("no loops of their own for parameters, constants and fusions")
            }
            Op::Dot(_) | Op::Convolution { .. } => {
                unreachable!("dot and convolution kernels are the backend's")
            }
            _ => {
                // Elemental ops: one value per output element.
                self.loop_nest_physical(shape, &mut |cg, idx| {
                    let v = cg.elemental(op, shape, opnds, idx, at);
                    cg.store(k.out, cg.offset(idx, shape), v, odt);
                });
            }
        }
    }

    /// `reduce`: per output element, the reduced positions in order into one accumulator.
    pub(crate) fn reduce_loops(
        &self,
        k: &Kernel<'ctx>,
        kind: &ReduceKind,
        dimensions: &[usize],
        shape: &Shape,
        opnds: &[Shape],
        at: At<'_, 'ctx>,
    ) {
        let odt = shape.dtype;
        let opnd = |j: usize| &opnds[j];
        let x = opnd(0).dims.clone();
        let kept: Vec<usize> = (0..x.len()).filter(|d| !dimensions.contains(d)).collect();
        let red: Vec<usize> = dimensions.iter().map(|&d| x[d]).collect();
        let acc = self.slot(k.f, self.ctx.f32_type().into());
        self.loop_nest_physical(shape, &mut |cg, oidx| {
            cg.b.build_store(acc, cg.identity(*kind)).unwrap();
            cg.loop_nest(&red, &mut |cg, ridx| {
                let mut full = vec![cg.i64(0); x.len()];
                for (k2, &d) in kept.iter().enumerate() {
                    full[d] = oidx[k2];
                }
                for (k2, &d) in dimensions.iter().enumerate() {
                    full[d] = ridx[k2];
                }
                let v = at(0, Ix::Multi(&full)).into_float_value();
                let a = cg.b.build_load(acc, "").unwrap().into_float_value();
                cg.b.build_store(acc, cg.combine(*kind, a, v)).unwrap();
            });
            let a = cg.b.build_load(acc, "").unwrap();
            cg.store(k.out, cg.offset(oidx, shape), a, odt);
        });
    }

    /// `reduce-window`: per output element, the window's taps in order (taps in the padding
    /// leave the accumulator as it is).
    pub(crate) fn reduce_window_loops(
        &self,
        k: &Kernel<'ctx>,
        kind: &ReduceKind,
        window: &Window,
        shape: &Shape,
        opnds: &[Shape],
        at: At<'_, 'ctx>,
    ) {
        let odt = shape.dtype;
        let opnd = |j: usize| &opnds[j];
        let x = opnd(0).dims.clone();
        let acc = self.slot(k.f, self.ctx.f32_type().into());
        self.loop_nest_physical(shape, &mut |cg, oidx| {
            cg.b.build_store(acc, cg.identity(*kind)).unwrap();
            cg.loop_nest(&window.size, &mut |cg, tidx| {
                let mut valid = cg.ctx.bool_type().const_int(1, false);
                let mut pos = Vec::with_capacity(x.len());
                for d in 0..x.len() {
                    let p = cg.window_pos(oidx[d], tidx[d], window, d);
                    valid = cg.b.build_and(valid, cg.in_range(p, x[d]), "").unwrap();
                    pos.push(cg.clamp_index(p, x[d]));
                }
                let v = at(0, Ix::Multi(&pos)).into_float_value();
                let a = cg.b.build_load(acc, "").unwrap().into_float_value();
                let nv = cg.select(valid, cg.combine(*kind, a, v).into(), a.into());
                cg.b.build_store(acc, nv).unwrap();
            });
            let a = cg.b.build_load(acc, "").unwrap();
            cg.store(k.out, cg.offset(oidx, shape), a, odt);
        });
    }

    /// `argmax`: the first maximum along `dimension` (a NaN counts as the maximum).
    pub(crate) fn argmax(
        &self,
        k: &Kernel<'ctx>,
        dimension: &usize,
        shape: &Shape,
        opnds: &[Shape],
        at: At<'_, 'ctx>,
    ) {
        let opnd = |j: usize| &opnds[j];
        let x = opnd(0).dims.clone();
        let dim = *dimension;
        let best_i = self.slot(k.f, self.ctx.i64_type().into());
        let best_v = self.slot(k.f, self.ctx.f32_type().into());
        self.loop_nest_physical(shape, &mut |cg, oidx| {
            let full_at = |j: IntValue<'ctx>| -> Vec<IntValue<'ctx>> {
                let mut it = oidx.iter();
                (0..x.len())
                    .map(|dd| if dd == dim { j } else { *it.next().unwrap() })
                    .collect()
            };
            let v0 = at(0, Ix::Multi(&full_at(cg.i64(0))));
            cg.b.build_store(best_v, v0).unwrap();
            cg.b.build_store(best_i, cg.i64(0)).unwrap();
            cg.for_loop(x[dim], &mut |cg, j| {
                let v = at(0, Ix::Multi(&full_at(j))).into_float_value();
                let bv = cg.b.build_load(best_v, "").unwrap().into_float_value();
                let bi = cg.b.build_load(best_i, "").unwrap();
                // First maximum; a NaN counts as the maximum (numpy).
                let better =
                    cg.b.build_or(
                        cg.fcmp(FloatPredicate::OGT, v, bv),
                        cg.fcmp(FloatPredicate::UNO, v, v),
                        "",
                    )
                    .unwrap();
                let best_ok = cg.fcmp(FloatPredicate::ORD, bv, bv);
                let take = cg.b.build_and(better, best_ok, "").unwrap();
                cg.b.build_store(best_v, cg.select(take, v.into(), bv.into()))
                    .unwrap();
                cg.b.build_store(best_i, cg.select(take, j.into(), bi))
                    .unwrap();
            });
            let bi = cg.b.build_load(best_i, "").unwrap().into_int_value();
            let bi32 = cg.b.build_int_truncate(bi, cg.ctx.i32_type(), "").unwrap();
            cg.store(k.out, cg.offset(oidx, shape), bi32.into(), DType::I32);
        });
    }

    /// A loop fusion: every output element computed from the kernel arguments inline (the fused
    /// computation's parameter `i` is kernel argument `i`).
    pub(crate) fn fused_loop(&self, k: &Kernel<'ctx>, comp: &Computation) {
        let root = comp.inst(comp.outputs[0].value);
        let id = comp.outputs[0].value;
        self.loop_nest_physical(&root.shape, &mut |cg, idx| {
            let v = cg.value_of(comp, id, Ix::Multi(idx), k, None);
            cg.store(k.out, cg.offset(idx, &root.shape), v, root.shape.dtype);
        });
    }

    /// An output fusion's heavy op (its dot or convolution) and the buffers of its operands
    /// (parameters of the fusion, so kernel arguments; a convolution's input may be a parameter
    /// through a channel shuffle, `ir/shuffle.rs` `conv_input`: its buffer is the parameter's).
    pub(crate) fn output_fusion_heavy(
        &self,
        k: &Kernel<'ctx>,
        comp: &Computation,
    ) -> (InstId, Vec<PointerValue<'ctx>>) {
        let heavy = comp
            .ids()
            .find(|&i| matches!(comp.inst(i).op, Op::Dot(_) | Op::Convolution { .. }))
            .expect("an output fusion holds a dot or convolution");
        let h = comp.inst(heavy);
        // The heavy op's operands are parameters of the fusion: read their buffers.
        let bufs: Vec<PointerValue<'ctx>> = h
            .operands
            .iter()
            .map(|&o| match comp.inst(conv_input(comp, o).0).op {
                Op::Parameter { index } => k.args[index],
                _ => {
                    unreachable!("fusion inlines no operand of a dot or convolution but a shuffle")
                }
            })
            .collect();
        (heavy, bufs)
    }

    /// The input channel that channel `ch` of a channel map holds ([`ChannelMap::source`]: a
    /// shuffle's `(ch mod G)·K + ch div G`, a slice's `start + ch·step`).
    pub(crate) fn channel_source(&self, m: &ChannelMap, ch: IntValue<'ctx>) -> IntValue<'ctx> {
        let s = match m {
            ChannelMap::Shuffle(s) => s,
            ChannelMap::Slice { start, step } => {
                let scaled = self
                    .b
                    .build_int_mul(ch, self.i64(*step as u64), "")
                    .unwrap();
                return self
                    .b
                    .build_int_add(scaled, self.i64(*start as u64), "")
                    .unwrap();
            }
        };
        let g = self.i64(s.groups as u64);
        let rem = self.b.build_int_unsigned_rem(ch, g, "").unwrap();
        let quo = self.b.build_int_unsigned_div(ch, g, "").unwrap();
        let base = self
            .b
            .build_int_mul(rem, self.i64(s.per_group as u64), "")
            .unwrap();
        self.b.build_int_add(base, quo, "").unwrap()
    }

    /// The channel map an output fusion's convolution `heavy` reads its input through
    /// (`ir/shuffle.rs` `conv_input`), and that input's shape (the fusion parameter's: its dims
    /// and layout give the strides the kernel reads with).
    pub(crate) fn conv_channels(
        &self,
        comp: &Computation,
        heavy: InstId,
    ) -> Option<(ChannelMap, Shape)> {
        let h = comp.inst(heavy);
        if !matches!(h.op, Op::Convolution { .. }) {
            return None;
        }
        let (x, s) = conv_input(comp, h.operands[0]);
        Some((s?, comp.inst(x).shape.clone()))
    }

    /// An output fusion's epilogue, in place: the heavy value is read back from the output
    /// buffer where the heavy op stored it.
    pub(crate) fn output_fusion_sweep(&self, k: &Kernel<'ctx>, comp: &Computation, heavy: InstId) {
        let root = comp.inst(comp.outputs[0].value);
        let id = comp.outputs[0].value;
        self.loop_nest_physical(&root.shape, &mut |cg, idx| {
            let v = cg.value_of(comp, id, Ix::Multi(idx), k, Some(heavy));
            cg.store(k.out, cg.offset(idx, &root.shape), v, root.shape.dtype);
        });
    }
}

/// The pool of an input fusion whose root is the pool's elementwise epilogue
/// (`passes/fusion.rs`, `pool_epilogue`), if `comp` is one: its one `reduce-window`.
pub(crate) fn epilogue_pool(comp: &Computation) -> Option<InstId> {
    let root = comp.inst(comp.outputs.first()?.value);
    if matches!(root.op, Op::Reduce { .. } | Op::ReduceWindow { .. }) {
        return None;
    }
    comp.ids()
        .find(|&id| matches!(comp.inst(id).op, Op::ReduceWindow { .. }))
}
