//! Kernel choice on a CPU: for each instruction, which code computes it.
//!
//! Contract: a kernel is an internal, `noinline` function of its buffers (the output first)
//! that computes its whole output. Dots take the GEMM micro-kernel (`gemm.rs`) when their
//! geometry has unit-stride columns or a packed weight, convolutions the Winograd kernel
//! (`winograd.rs`) when their weight is stored Winograd-transformed, else one of the direct
//! micro-kernels (`conv.rs`) when `conv::choose` finds a path, reductions the register or
//! scalar fast paths (`reduce.rs`) when their layouts allow; everything else, and what those
//! refuse, takes the general loops (`loops.rs`, `core/ops.rs`); a loop fusion ending in a
//! channel shuffle loops within groups (`fused_loop_shuffle`). In an output fusion a chain of
//! per-channel or scalar steps is applied to the micro-kernel's accumulators before they are
//! stored (`epilogue.rs`); otherwise the epilogue sweeps the output after the heavy op. Whether
//! a weight is read packed is asked of the module's [`Packings`](crate::codegen::core::packing::Packings),
//! never decided here.

use super::epilogue::{Operand, RegEpilogue, Step};
use super::{Cg, conv, epilogue, gemm, quad_dot};
use crate::codegen::core::concat_runs::ConcatRuns;
use crate::codegen::core::layout::geometry;
use crate::codegen::core::ops::{At, epilogue_pool};
use crate::codegen::core::{CodegenError, Ix, Kernel, KernelAbi};
use crate::ir::shuffle::{ChannelShuffle, channel_shuffle_at};
use crate::ir::value_range::{F32_EXACT_INT, Range};
use crate::ir::{
    BinaryOp, Computation, DType, DotDims, FusionKind, InstId, Instruction, Op, Shape, Window,
};
use inkwell::module::Linkage;
use inkwell::values::{BasicValueEnum, FunctionValue, IntValue, PointerValue};

/// CPU kernels: internal functions of their buffers, kept out of line.
const CPU_KERNEL: KernelAbi = KernelAbi {
    index_param: false,
    linkage: Linkage::Internal,
    noinline: true,
};

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// Declares a CPU kernel `void name(T* noalias out, U* noalias in0, ...)`.
    pub(super) fn declare_kernel(
        &self,
        name: &str,
        out: DType,
        ins: &[DType],
        shared: &[bool],
    ) -> Kernel<'ctx> {
        self.declare_kernel_with(CPU_KERNEL, name, out, ins, shared)
    }

    /// A kernel copying `n` elements of dtype `d`.
    pub(super) fn copy_kernel(&self, name: &str, d: DType, n: usize) -> FunctionValue<'ctx> {
        let k = self.declare_kernel(name, d, &[d], &[false]);
        let mut copy = |cg: &Self, i: IntValue<'ctx>| {
            let v = cg.b.build_load(cg.gep(k.args[0], i), "").unwrap();
            cg.b.build_store(cg.gep(k.out, i), v).unwrap();
        };
        self.for_loop(n, &mut copy);
        self.b.build_return(None).unwrap();
        k.f
    }

    /// The kernel computing instruction `id`.
    pub(super) fn kernel(
        &self,
        name: &str,
        id: InstId,
    ) -> Result<FunctionValue<'ctx>, CodegenError> {
        let c = &self.hlo.entry;
        let inst = c.inst(id);
        let ins: Vec<DType> = inst
            .operands
            .iter()
            .map(|&o| c.inst(o).shape.dtype)
            .collect();
        let mut shared: Vec<bool> = inst
            .operands
            .iter()
            .map(|&o| self.plan.in_place[id.index()] == Some(o))
            .collect();
        // A Winograd convolution, and a GEMM that packs A, also take the plan's kernel scratch,
        // after their operands.
        let wino = self.be.packings.winograd(self.hlo, id);
        let a_pack = self.a_pack_of(id);
        let mut ins = ins;
        if wino.is_some() || a_pack.is_some() {
            ins.push(DType::F32);
            shared.push(false);
        }
        self.be.winograd.set(wino);
        self.be.a_pack.set(a_pack);
        // A weight stored in a narrow type is passed as such (an `i16*`, or `i8*` for int8).
        let half = self.be.packings.reads_narrow(self.hlo, id);
        if let Some((w, d)) = half {
            for (j, &o) in inst.operands.iter().enumerate() {
                if o == w {
                    ins[j] = d;
                }
            }
        }
        self.be.half_rhs.set(half.map(|(_, d)| d));
        self.be
            .bf16_pairs
            .set(self.be.packings.reads_bf16_pairs(self.hlo, id));
        let unit = self.be.packings.reads_unit_scales(self.hlo, id);
        self.be.unit_scales.set(unit);
        // The biases an int8 convolution with integer weights may add to its sums (`sum_bias`):
        // rank-1 constant operands, copied only for such a kernel.
        let vector_consts = inst
            .operands
            .iter()
            .map(|&o| match &c.inst(o).op {
                Op::Constant(lit)
                    if unit
                        && lit.dtype == DType::F32
                        && lit.dims.len() == 1
                        && lit.dims[0] <= MAX_SUM_BIAS =>
                {
                    lit.to_f32_vec()
                }
                _ => None,
            })
            .collect();
        self.be.vector_consts.replace(vector_consts);
        let signs = self.be.packings.quads_avoid_min(self.hlo, id);
        self.be.vnni_signs.set(signs);
        let shift = quad_dot::byte_shift(self.target, signs);
        self.be
            .vnni
            .set(self.be.packings.reads_vnni(self.hlo, id).map(|o| o + shift));
        // A value stored in a byte type is passed as such (`byte_storage.rs`).
        let stored = &self.plan.stored;
        let out_stored = stored.get(id.index()).copied().flatten();
        let args_stored: Vec<Option<DType>> = (0..ins.len())
            .map(|j| {
                let o = inst.operands.get(j)?;
                stored.get(o.index()).copied().flatten()
            })
            .collect();
        for (d, s) in ins.iter_mut().zip(&args_stored) {
            if let Some(s) = s {
                *d = *s;
            }
        }
        // The bias of each byte-stored value (`Range::biased_byte`).
        let bias_of = |o: InstId| {
            if stored.get(o.index()).copied().flatten().is_none() {
                return 0;
            }
            let ranges = self
                .entry_ranges
                .get_or_init(|| crate::ir::value_range::ranges(self.hlo));
            ranges[o.index()].biased_byte().map_or(0, |(_, b)| b)
        };
        self.be.out_bias.set(bias_of(id));
        self.be
            .args_bias
            .replace(inst.operands.iter().map(|&o| bias_of(o)).collect());
        self.be.out_stored.set(out_stored);
        self.arg_bytes.replace(args_stored.clone());
        self.be.args_stored.replace(args_stored);
        let k = self.declare_kernel(name, out_stored.unwrap_or(inst.shape.dtype), &ins, &shared);
        self.set_fused_ranges(id);
        *self.scalar_consts.borrow_mut() = inst
            .operands
            .iter()
            .map(|&o| match &c.inst(o).op {
                Op::Constant(lit)
                    if lit.dtype == DType::F32 && lit.dims.iter().product::<usize>() == 1 =>
                {
                    lit.to_f32_vec().and_then(|v| v.first().copied())
                }
                _ => None,
            })
            .collect();
        self.be
            .packed_rhs
            .set(self.be.packings.reads_packed(self.hlo, id));
        // An operand of a concatenation assembled in place writes through its strides.
        *self.be.out_strides.borrow_mut() = self.plan.views[id.index()]
            .map(|v| crate::codegen::core::layout::physical_strides(&c.inst(v.concat).shape));
        // Loop nests split their outermost loop between the hook's tasks (`run_split`).
        let generate = |cg: &Self, k: &Kernel<'ctx>| {
            let operand_shape = |j: usize| &c.inst(inst.operands[j]).shape;
            match &inst.op {
                Op::Fusion { kind, computation } => cg.fused_body(k, *kind, computation),
                Op::Reduce { .. } | Op::ReduceWindow { .. }
                    if cg.reduction_in_registers(
                        k,
                        &inst.op,
                        &inst.shape,
                        operand_shape(0),
                        0,
                        &epilogue::RegEpilogue { steps: vec![] },
                    ) => {}
                _ if !matches!(inst.op, Op::Convolution { .. } | Op::Dot(_))
                    && cg.be.args_stored.borrow().iter().any(Option::is_some) =>
                {
                    unreachable!(
                        "byte_storage.rs stores only what pools, convolutions and dots read"
                    )
                }
                _ => {
                    let shapes: Vec<Shape> = inst
                        .operands
                        .iter()
                        .map(|&o| c.inst(o).shape.clone())
                        .collect();
                    let at = |j: usize, ix: Ix<'_, 'ctx>| cg.load_ix(k.args[j], ix, &shapes[j]);
                    cg.body(k, &inst.op, &inst.shape, &shapes, &at, &k.args);
                }
            }
        };
        match loop_nest_visits(c, inst) {
            Some(visits) => self.run_split(&k, visits, &generate),
            None => generate(self, &k),
        }
        self.be.out_strides.replace(None);
        self.be.out_stored.set(None);
        self.be.args_stored.replace(Vec::new());
        self.be.out_bias.set(0);
        self.be.args_bias.replace(Vec::new());
        self.arg_bytes.replace(Vec::new());
        self.b.build_return(None).unwrap();
        Ok(k.f)
    }

    /// A fused kernel: the fused computation's parameter `i` is kernel argument `i`.
    fn fused_body(&self, k: &Kernel<'ctx>, kind: FusionKind, comp: &Computation) {
        let root = comp.inst(comp.outputs[0].value);
        let shapes = |inst: &Instruction| -> Vec<Shape> {
            inst.operands
                .iter()
                .map(|&o| comp.inst(o).shape.clone())
                .collect()
        };
        match kind {
            FusionKind::Loop => {
                let id = comp.outputs[0].value;
                if let Some((shuffle, chain)) = channel_shuffle(comp, id) {
                    return self.fused_loop_shuffle(k, comp, &shuffle, &chain);
                }
                if self.be.out_stored.get().is_some() {
                    // `byte_storage.rs`: an elementwise root whose values are integers of a byte
                    // type; on 4 lanes where its ops allow (`lanes_loop.rs`).
                    if self.fused_loop_lanes(k, comp) {
                        return;
                    }
                    return self.fused_loop_bytes(k, comp);
                }
                if let Some((m, runs)) = channel_runs(comp, id) {
                    return self.fused_loop_runs(k, comp, m, &runs);
                }
                match outer_runs(comp, id) {
                    Some((d, runs)) => self.fused_loop_outer_runs(k, comp, d, &runs),
                    None => self.fused_loop(k, comp),
                }
            }
            FusionKind::Input => {
                // A global sum of elementwise integer arithmetic, on 4 lanes (`lanes_loop.rs`).
                if self.fused_pool_lanes(k, comp) {
                    return;
                }
                if let Some(pool) = epilogue_pool(comp) {
                    return self.pool_with_epilogue(k, comp, pool);
                }
                if let Some((chain, param)) = epilogue::recognize_operand(comp, root.operands[0]) {
                    let xs = param_shape(comp, param);
                    if self.reduction_in_registers(k, &root.op, &root.shape, &xs, param, &chain) {
                        return;
                    }
                }
                let at =
                    |j: usize, ix: Ix<'_, 'ctx>| self.value_of(comp, root.operands[j], ix, k, None);
                if let Op::ReduceWindow { .. } = root.op {
                    // Read only by the channels-minor pooling, whose operand and result share
                    // their minor-most dimension.
                    *self.be.pool_runs.borrow_mut() =
                        channel_runs(comp, root.operands[0]).map(|(_, r)| r);
                }
                self.body(k, &root.op, &root.shape, &shapes(root), &at, &[]);
                self.be.pool_runs.replace(None);
            }
            FusionKind::Output => {
                let (heavy, bufs) = self.output_fusion_heavy(k, comp);
                let h = comp.inst(heavy);
                let no_at = |_: usize, _: Ix<'_, 'ctx>| -> BasicValueEnum<'ctx> {
                    unreachable!("dot and convolution read buffers")
                };
                // A chain of per-channel / scalar steps is applied to the accumulators before they
                // are stored (`epilogue.rs`); otherwise the epilogue sweeps the output.
                let epi = epilogue::recognize(comp, heavy);
                // An int8 convolution on quads, or an int8 depthwise kernel (the one int8
                // weight read unpacked: `core/packing/depthwise.rs`).
                let int8_depthwise =
                    self.be.half_rhs.get() == Some(DType::I8) && !self.be.packed_rhs.get();
                self.be.sum_bias.set(
                    self.be.unit_scales.get()
                        && (self.be.vnni.get().is_some() || int8_depthwise)
                        && epi.as_ref().is_some_and(|e| {
                            sum_bias(e, self.fused_range(heavy), &self.be.vector_consts.borrow())
                        }),
                );
                self.be.reg_epi.replace(epi);
                self.be.epi_applied.set(false);
                let mut opnds = shapes(h);
                if let Some((m, xs)) = self.conv_channels(comp, heavy) {
                    // The input is read through its channel map, from the parameter's buffer
                    // (decisions see its dims with the buffer's layout, as `core/packing.rs`).
                    opnds[0].layout = xs.layout.clone();
                    self.be.in_channels.set(Some(m));
                    self.be.in_source.replace(Some(xs));
                }
                self.body(k, &h.op, &h.shape, &opnds, &no_at, &bufs);
                self.be.in_channels.set(None);
                self.be.in_source.replace(None);
                self.be.reg_epi.replace(None);
                if self.be.epi_applied.get() {
                    return;
                }
                assert!(
                    self.be.out_stored.get().is_none(),
                    "byte_storage.rs stores only results finished in registers"
                );
                self.output_fusion_sweep(k, comp, heavy);
            }
        }
    }

    /// A loop fusion whose f32 result is stored one byte per element (`byte_storage.rs`: its
    /// values are integers of the byte type, or biased into `U8` by `out_bias`, so the
    /// conversion is exact).
    fn fused_loop_bytes(&self, k: &Kernel<'ctx>, comp: &Computation) {
        let root = comp.inst(comp.outputs[0].value);
        let id = comp.outputs[0].value;
        assert!(
            root.op.is_elementwise(),
            "byte_storage.rs stores loop fusions only with an elementwise root"
        );
        self.loop_nest_physical(&root.shape, &mut |cg, idx| {
            let v = cg.value_of(comp, id, Ix::Multi(idx), k, None);
            // A biased byte (`Range::biased_byte`) is the integer plus the bias.
            let v = match cg.be.out_bias.get() {
                0 => v,
                bias => {
                    let f = cg.ctx.f32_type().const_float(f64::from(bias));
                    cg.b.build_float_add(v.into_float_value(), f, "")
                        .unwrap()
                        .into()
                }
            };
            let byte = cg.exact_bytes(v);
            cg.b.build_store(cg.gep(k.out, cg.offset(idx, &root.shape)), byte)
                .unwrap();
        });
    }

    /// A loop fusion ending in a channel shuffle of channels-minor data, or in elementwise ops
    /// over one (`chain`, the shuffle's readers up to the root: a quantized shuffle's
    /// dequantization): per pixel, output channel `j·G + g` is the shuffled value's channel
    /// `g·K + j`, computed in a loop over `j` with the `G` groups unrolled inside, so each group
    /// reads consecutive channels (vector loads) and the stores interleave (shuffles), where
    /// indexing through the 5-D reshape gathered (shufflenet's int8 shuffles: 50 instructions
    /// an element on aarch64). The chain's other operands are read at the output's index. A
    /// result stored as bytes (`byte_storage.rs`) is converted by `Cg::exact_bytes`.
    fn fused_loop_shuffle(
        &self,
        k: &Kernel<'ctx>,
        comp: &Computation,
        s: &ChannelShuffle,
        chain: &[InstId],
    ) {
        let id = comp.outputs[0].value;
        let shape = &comp.inst(id).shape;
        let bytes = self.be.out_stored.get().is_some();
        self.loop_nest_outer(shape, &mut |cg, idx| {
            cg.for_loop(s.per_group, &mut |cg, j| {
                for g in 0..s.groups {
                    let mut from = idx.clone();
                    from[1] = cg.add(cg.i64((g * s.per_group) as u64), j);
                    let mut v = cg.value_of(comp, s.input, Ix::Multi(&from), k, None);
                    idx[1] = cg.add(cg.mul(j, s.groups as u64), cg.i64(g as u64));
                    let mut below = chain.first().map(|&c| comp.inst(c).operands[0]);
                    for &c in chain {
                        let inst = comp.inst(c);
                        let shapes: Vec<Shape> = inst
                            .operands
                            .iter()
                            .map(|&o| comp.inst(o).shape.clone())
                            .collect();
                        let at = |o: usize, sub: Ix<'_, 'ctx>| {
                            let op = inst.operands[o];
                            if Some(op) == below {
                                v
                            } else {
                                cg.value_of(comp, op, sub, k, None)
                            }
                        };
                        v = cg.elemental(&inst.op, &inst.shape, &shapes, idx, &at);
                        below = Some(c);
                    }
                    let at = cg.offset(idx, shape);
                    if bytes {
                        cg.b.build_store(cg.gep(k.out, at), cg.exact_bytes(v))
                            .unwrap();
                    } else {
                        cg.store(k.out, at, v, shape.dtype);
                    }
                }
            });
        });
    }

    /// A loop fusion whose innermost dimension `m` reads concatenations along it: the loops of
    /// `fused_loop`, with the innermost one split into the runs of `runs`.
    fn fused_loop_runs(&self, k: &Kernel<'ctx>, comp: &Computation, m: usize, runs: &ConcatRuns) {
        let id = comp.outputs[0].value;
        let shape = &comp.inst(id).shape;
        self.loop_nest_outer(shape, &mut |cg, idx| {
            cg.for_runs(shape.dims[m], Some(runs), &mut |cg, i| {
                idx[m] = i;
                let v = cg.value_of(comp, id, Ix::Multi(idx), k, None);
                cg.store(k.out, cg.offset(idx, shape), v, shape.dtype);
            });
        });
    }

    /// A loop fusion whose outer dimension `d` reads concatenations along it (found by
    /// [`outer_runs`]): the loop over `d` split into the runs of `runs`, each run's loop nest over
    /// the other dimensions reading one known operand of each concatenation.
    fn fused_loop_outer_runs(
        &self,
        k: &Kernel<'ctx>,
        comp: &Computation,
        d: usize,
        runs: &ConcatRuns,
    ) {
        let id = comp.outputs[0].value;
        let shape = &comp.inst(id).shape;
        let mut rest = shape.clone();
        rest.dims[d] = 1;
        self.for_runs(shape.dims[d], Some(runs), &mut |cg, i| {
            cg.loop_nest_physical(&rest, &mut |cg, idx| {
                let mut idx = idx.to_vec();
                idx[d] = i;
                let v = cg.value_of(comp, id, Ix::Multi(&idx), k, None);
                cg.store(k.out, cg.offset(&idx, shape), v, shape.dtype);
            });
        });
    }

    /// An input fusion whose root is the elementwise epilogue of a max/min pool
    /// (`passes/fusion.rs`, `pool_epilogue`): in vector registers when the pool's operand and the
    /// epilogue are chains of per-channel steps, else the pool into the output and the epilogue
    /// swept over it.
    fn pool_with_epilogue(&self, k: &Kernel<'ctx>, comp: &Computation, heavy: InstId) {
        let h = comp.inst(heavy);
        let Op::ReduceWindow { kind, window } = &h.op else {
            unreachable!("found as a reduce-window")
        };
        if let (Some(epi), Some((chain, param))) = (
            epilogue::recognize(comp, heavy),
            epilogue::recognize_operand(comp, h.operands[0]),
        ) {
            let xs = param_shape(comp, param);
            if self.pool_in_registers(k, *kind, window, &h.shape, &xs, param, &chain, &epi) {
                return;
            }
        }
        let shapes: Vec<Shape> = h
            .operands
            .iter()
            .map(|&o| comp.inst(o).shape.clone())
            .collect();
        let at = |j: usize, ix: Ix<'_, 'ctx>| self.value_of(comp, h.operands[j], ix, k, None);
        *self.be.pool_runs.borrow_mut() = channel_runs(comp, h.operands[0]).map(|(_, r)| r);
        self.body(k, &h.op, &h.shape, &shapes, &at, &[]);
        self.be.pool_runs.replace(None);
        self.output_fusion_sweep(k, comp, heavy);
    }

    /// The loops computing `op` into `k.out`: operands of elemental ops, reductions and argmax come
    /// from `at`; dot and convolution read the buffers `bufs`.
    fn body(
        &self,
        k: &Kernel<'ctx>,
        op: &Op,
        shape: &Shape,
        opnds: &[Shape],
        at: At<'_, 'ctx>,
        bufs: &[PointerValue<'ctx>],
    ) {
        match op {
            Op::Reduce { kind, dimensions } => self.reduce(k, kind, dimensions, shape, opnds, at),
            Op::ReduceWindow { kind, window } => {
                self.reduce_window(k, kind, window, shape, opnds, at)
            }
            Op::Dot(d) => self.dot(k, d, shape, opnds, bufs),
            Op::Convolution {
                window,
                feature_group_count,
            } => self.convolution(k, window, feature_group_count, shape, opnds, bufs),
            _ => self.generic_body(k, op, shape, opnds, at),
        }
    }

    /// A dot: the GEMM micro-kernel when its geometry allows (unit-stride columns, or a packed
    /// weight), else the general loops.
    fn dot(
        &self,
        k: &Kernel<'ctx>,
        d: &DotDims,
        shape: &Shape,
        opnds: &[Shape],
        bufs: &[PointerValue<'ctx>],
    ) {
        let opnd = |j: usize| &opnds[j];
        if !geometry(d, opnd(0), opnd(1), shape)
            .is_some_and(|g| self.be.packed_rhs.get() || g.b_n_unit)
        {
            self.dot_loops(k, d, shape, opnds, bufs);
            return;
        }
        let g = geometry(d, opnd(0), opnd(1), shape).unwrap();
        let index = |p: PointerValue<'ctx>| k.args.iter().position(|&a| a == p).unwrap();
        let lfree = opnd(0).rank() - d.lhs_batch.len() - d.lhs_contracting.len();
        let epi = self
            .be
            .reg_epi
            .borrow()
            .clone()
            .and_then(|e| gemm::dim_roles(&g, shape, lfree).map(|r| (e, r)));
        self.be.epi_applied.set(epi.is_some());
        self.gemm(
            k,
            &g,
            (index(bufs[0]), index(bufs[1])),
            self.be.packed_rhs.get(),
            epi,
        );
    }

    /// A convolution: a direct micro-kernel when `conv::choose` finds a path, else loops.
    fn convolution(
        &self,
        k: &Kernel<'ctx>,
        window: &Window,
        feature_group_count: &usize,
        shape: &Shape,
        opnds: &[Shape],
        bufs: &[PointerValue<'ctx>],
    ) {
        let opnd = |j: usize| &opnds[j];
        if self.be.in_channels.get().is_some() {
            // Read through a channel map: the packed micro-kernel or the loops read each input
            // channel at its source (`passes/fusion.rs` admits only f32 convs that are not
            // depthwise; `core/packing.rs` gives them no Winograd).
            let packed = self.be.packed_rhs.get();
            if packed {
                let index = |p: PointerValue<'ctx>| k.args.iter().position(|&a| a == p).unwrap();
                let applied = self.conv_fast(
                    k,
                    conv::ConvPath::PixelsByChannels,
                    window,
                    *feature_group_count,
                    (opnd(0), opnd(1), shape),
                    (index(bufs[0]), index(bufs[1])),
                    self.be.reg_epi.borrow().clone(),
                );
                self.be.epi_applied.set(applied);
            } else {
                self.conv_loops(k, window, feature_group_count, shape, opnds, bufs);
            }
            return;
        }
        if let Some(g) = self.be.winograd.get() {
            let index = |p: PointerValue<'ctx>| k.args.iter().position(|&a| a == p).unwrap();
            let epi = self.be.reg_epi.borrow().clone();
            self.conv_winograd(
                k,
                &g,
                window,
                (opnd(0), shape),
                (index(bufs[0]), index(bufs[1])),
                &epi,
            );
            self.be.epi_applied.set(epi.is_some());
            return;
        }
        if conv::choose(
            window,
            *feature_group_count,
            opnd(0),
            opnd(1),
            shape,
            self.be.packed_rhs.get(),
        )
        .is_some()
        {
            let path = conv::choose(
                window,
                *feature_group_count,
                opnd(0),
                opnd(1),
                shape,
                self.be.packed_rhs.get(),
            )
            .unwrap();
            let index = |p: PointerValue<'ctx>| k.args.iter().position(|&a| a == p).unwrap();
            let applied = self.conv_fast(
                k,
                path,
                window,
                *feature_group_count,
                (opnd(0), opnd(1), shape),
                (index(bufs[0]), index(bufs[1])),
                self.be.reg_epi.borrow().clone(),
            );
            self.be.epi_applied.set(applied);
        } else if shape.layout.minor_to_major.first() == Some(&1) {
            self.conv_channels_minor(k, window, *feature_group_count, shape, opnds, bufs);
        } else {
            self.conv_loops(k, window, feature_group_count, shape, opnds, bufs);
        }
    }
}

/// Element visits (elements read and written, window taps counted) of the kernel computing
/// `inst` when its body is a loop nest whose outermost loop may be split between tasks
/// (`parallel.rs`'s `run_split`); `None` for kernels that split their own work (dot,
/// convolution, output fusions) or never do (top-k, sample).
fn loop_nest_visits(c: &Computation, inst: &Instruction) -> Option<u64> {
    let elems = |s: &Shape| s.element_count() as u64;
    let out = elems(&inst.shape);
    let reads: u64 = inst.operands.iter().map(|&o| elems(&c.inst(o).shape)).sum();
    let taps = |op: &Op| match op {
        Op::ReduceWindow { window, .. } => window.size.iter().product::<usize>() as u64,
        _ => 1,
    };
    let visits = |op: &Op| Some((out * taps(op)).max(reads) + out);
    match &inst.op {
        Op::Dot(_)
        | Op::Convolution { .. }
        | Op::TopK { .. }
        | Op::Sample
        | Op::Parameter { .. }
        | Op::Constant(_)
        | Op::Fusion {
            kind: FusionKind::Output,
            ..
        } => None,
        Op::Fusion { computation, .. } => {
            let root = computation.inst(computation.outputs[0].value);
            match root.op {
                Op::TopK { .. } | Op::Sample => None,
                _ => visits(&root.op),
            }
        }
        op => visits(op),
    }
}

/// A channel shuffle at the root of a fused loop, or under a chain of elementwise ops whose
/// other operands are no shuffled values (broadcasts, constants, parameters), with the channels
/// minor in the result: the shuffle and the chain from just above it up to the root.
fn channel_shuffle(comp: &Computation, id: InstId) -> Option<(ChannelShuffle, Vec<InstId>)> {
    if comp.inst(id).shape.layout.minor_to_major.first() != Some(&1) {
        return None;
    }
    let mut chain = Vec::new();
    let mut at = id;
    loop {
        if let Some(s) = channel_shuffle_at(comp, at) {
            chain.reverse();
            return Some((s, chain));
        }
        let inst = comp.inst(at);
        if !inst.op.is_elementwise() || inst.shape.dims != comp.inst(id).shape.dims {
            return None;
        }
        let mut path = inst.operands.iter().filter(|&&o| {
            !matches!(
                comp.inst(o).op,
                Op::Broadcast { .. } | Op::Constant(_) | Op::Parameter { .. }
            )
        });
        let (Some(&below), None) = (path.next(), path.next()) else {
            return None;
        };
        chain.push(at);
        at = below;
    }
}

/// The minor-most dimension of instruction `id` of `comp` and the concatenation runs along it,
/// when a loop over it reads concatenations along that dimension.
fn channel_runs(comp: &Computation, id: InstId) -> Option<(usize, ConcatRuns)> {
    let shape = &comp.inst(id).shape;
    let &m = shape.layout.minor_to_major.first()?;
    ConcatRuns::find(comp, id, m, shape.dims[m]).map(|r| (m, r))
}

/// The outermost dimension of instruction `id` of `comp` whose loop reads concatenations along
/// it, and their runs, when the minor-most one reads none ([`channel_runs`]): without the runs
/// every element chooses among all of a concatenation's operands (issue 46's bidirectional LSTM
/// concatenated its 80 step outputs so, 0.25 ms for 160 KB).
fn outer_runs(comp: &Computation, id: InstId) -> Option<(usize, ConcatRuns)> {
    let shape = &comp.inst(id).shape;
    let outer = shape.layout.minor_to_major.get(1..)?;
    outer
        .iter()
        .rev()
        .find_map(|&d| ConcatRuns::find_outer(comp, id, d, shape.dims[d]).map(|r| (d, r)))
}

/// The shape of fused parameter `param` (the bottom of a recognised operand chain).
fn param_shape(comp: &Computation, param: usize) -> Shape {
    comp.instructions
        .iter()
        .find(|i| i.op == Op::Parameter { index: param })
        .map(|i| i.shape.clone())
        .expect("the chain ends at a parameter")
}

/// Most channels of a bias [`sum_bias`] reads (its values are copied per kernel).
const MAX_SUM_BIAS: usize = 65_536;

/// Whether register epilogue `e` of an int8 convolution with integer weights (its result's value
/// range `sums`) starts by adding a per-channel bias (fusion parameter `p`, whose values
/// `consts[p]` gives) that the i32 sums can take instead: integers, with every
/// `|sum| + |bias|` below 2^24, so `f32(sum) + bias` (exact) is `f32(sum + bias)`.
fn sum_bias(e: &RegEpilogue, sums: Option<Range>, consts: &[Option<Vec<f32>>]) -> bool {
    let Some(Step::Binary {
        op: BinaryOp::Add,
        other: Operand::Along { param, dim: 1 },
        ..
    }) = e.steps.first()
    else {
        return false;
    };
    let Some(Some(bias)) = consts.get(*param) else {
        return false;
    };
    let largest = bias.iter().fold(0f64, |m, &b| m.max(f64::from(b).abs()));
    let integers = bias.iter().all(|b| b.fract() == 0.0);
    sums.is_some_and(|r| !r.nan && r.lo.abs().max(r.hi.abs()) + largest < F32_EXACT_INT) && integers
}
