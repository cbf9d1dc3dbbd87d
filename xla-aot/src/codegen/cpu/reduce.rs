//! Spatial reductions of channels-minor data in vector registers (global average pooling after
//! a convolution, the sum of an NHWC tensor over H and W).
//!
//! Contract: [`Cg::reduce_in_registers`] handles `reduce(chain(x))` where `x` is a kernel
//! argument whose minor-most dim is kept (and is the output's minor-most dim too) and `chain` is
//! a register epilogue (`epilogue.rs`, possibly empty): for every vector of contiguous kept
//! elements it keeps the running values in registers while walking the reduced positions in
//! memory order, applying the chain to each loaded vector. Every output element combines its
//! inputs one at a time in that order, as the scalar kernel does, so the results are the same
//! bits; only the loads and the adds are wide. Returns `false` (emitting nothing) when the shapes
//! do not fit, or when the kept minor-most dim holds more than [`MAX_UNROLLED_REDUCE_VECTORS`]
//! vectors (their code is unrolled: a [2, 262144] column sum emitted 32,768 vectors' worth and took
//! 139 s to compile).
//!
//! The scalar paths of the same ops ([`Cg::reduce`], [`Cg::reduce_window`]) come first when their
//! layouts allow: a reduction keeping the input's minor-most dim accumulates into the output in
//! input memory order, one along the contiguous dim keeps `REDUCE_PARTIALS` running values, and
//! channels-minor pooling runs its innermost loop along the channels; anything else takes the
//! generic loops (`core/ops.rs`). Every path combines each output element's inputs in the same
//! order, but for a min or a max of every element (exact in any order), which keeps
//! `REDUCE_PARTIALS` running values along the operand's minor-most physical dim.

use super::Cg;
use super::epilogue::{self, RegEpilogue, TilePos};
use super::vector::{VecCol, vectors};
use crate::codegen::core::ops::{At, epilogue_pool};
use crate::codegen::core::packing::Tiles;
use crate::codegen::core::{Ix, Kernel};
use crate::ir::{Computation, DType, InstId, Op, ReduceKind, Shape, Window};
use crate::limits::MAX_UNROLLED_REDUCE_VECTORS;
use inkwell::IntPredicate;
use inkwell::values::{FloatValue, IntValue, PointerValue};

/// Running values of a reduction along a contiguous dim: FMA/add latency (4 cycles) times the
/// two pipes of current x86-64 and Arm cores. A power of two (combined by a balanced tree).
const REDUCE_PARTIALS: usize = 8;

/// Channel vectors reduced together: their running values stay in registers (4 of 16 or 32).
const VECTORS_PER_PASS: usize = 4;

/// Bytes in the width of one f32 lane: a byte pool's vectors are this many times wider.
const BYTES_PER_F32: u32 = 4;

/// Fewest channels [`Cg::pool_in_registers`] takes: below a quarter of an AVX-512 vector most
/// of its lanes would be single-lane tails, and the scalar loops do as well.
const MIN_POOL_CHANNELS: usize = 4;

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// `op` (a reduce or a reduce-window computing `out` from `chain(x)`, `x` the kernel's
    /// argument `param` of shape `xs`) on the register path ([`Cg::reduce_in_registers`],
    /// [`Cg::pool_in_registers`]), if it takes it; `false` leaves the kernel to the loop nest.
    pub(super) fn reduction_in_registers(
        &self,
        k: &Kernel<'ctx>,
        op: &Op,
        out: &Shape,
        xs: &Shape,
        param: usize,
        chain: &RegEpilogue,
    ) -> bool {
        match op {
            Op::Reduce { kind, dimensions } => {
                self.reduce_in_registers(k, *kind, dimensions, out, xs, param, chain)
            }
            Op::ReduceWindow { kind, window } => {
                let none = RegEpilogue::none();
                self.pool_in_registers(k, *kind, window, out, xs, param, chain, &none)
            }
            _ => false,
        }
    }

    /// `out = reduce(kind, dims, chain(k.args[param]))`, `x` the argument's shape.
    #[allow(clippy::too_many_arguments)]
    fn reduce_in_registers(
        &self,
        k: &Kernel<'ctx>,
        kind: ReduceKind,
        dims: &[usize],
        out: &Shape,
        x: &Shape,
        param: usize,
        chain: &RegEpilogue,
    ) -> bool {
        let Some(&m) = x.layout.minor_to_major.first() else {
            return false;
        };
        let kept: Vec<usize> = (0..x.rank()).filter(|d| !dims.contains(d)).collect();
        let Some(m_out) = kept.iter().position(|&d| d == m) else {
            return false;
        };
        if x.dtype != DType::F32
            || out.dtype != DType::F32
            || out.layout.minor_to_major.first() != Some(&m_out)
            || x.dims[m] < 2
        {
            return false;
        }
        let t = Tiles::for_target(self.target);
        let vecs = vectors(x.dims[m], t.lanes, false);
        if vecs.len() > MAX_UNROLLED_REDUCE_VECTORS {
            // Each vector's code is emitted once (unrolled): past the limit the scalar loops do
            // the work in a code size independent of the extent.
            return false;
        }
        // Outer loops: kept dims other than m; inner: reduced dims, both in memory order.
        let phys: Vec<usize> = x.layout.minor_to_major.iter().rev().copied().collect();
        let outer: Vec<usize> = phys
            .iter()
            .copied()
            .filter(|d| *d != m && !dims.contains(d))
            .collect();
        let inner: Vec<usize> = phys.iter().copied().filter(|d| dims.contains(d)).collect();
        let outer_sizes: Vec<usize> = outer.iter().map(|&d| x.dims[d]).collect();
        let inner_sizes: Vec<usize> = inner.iter().map(|&d| x.dims[d]).collect();
        self.loop_nest(&outer_sizes, &mut |cg, o| {
            for group in vecs.chunks(VECTORS_PER_PASS) {
                let accs = cg.vector_accumulators(k, kind, group, None);
                cg.loop_nest(&inner_sizes, &mut |cg, r| {
                    let mut idx: Vec<IntValue<'ctx>> = vec![cg.i64(0); x.rank()];
                    for (j, &d) in outer.iter().enumerate() {
                        idx[d] = o[j];
                    }
                    for (j, &d) in inner.iter().enumerate() {
                        idx[d] = r[j];
                    }
                    let x = (x, param, chain);
                    cg.accumulate_vectors(k, kind, x, &idx, (m, None), group, &accs);
                });
                let mut oidx: Vec<IntValue<'ctx>> = vec![cg.i64(0); kept.len()];
                for (j, &d) in outer.iter().enumerate() {
                    let pos = kept.iter().position(|&kd| kd == d).unwrap();
                    oidx[pos] = o[j];
                }
                cg.store_vectors(
                    k,
                    out,
                    &mut oidx,
                    (m_out, None),
                    group,
                    (&accs, &RegEpilogue::none()),
                );
            }
        });
        true
    }
}

/// The max or min pool of input fusion `comp` when `kernel.rs` `pool_with_epilogue` runs it and
/// its elementwise epilogue on the register path ([`Cg::pool_in_registers`]; sum pools may go to
/// `lanes_loop.rs` first): the pool, its operand's chain and the fused parameter at its bottom.
pub(super) fn pool_epilogue_in_registers(
    comp: &Computation,
    lanes: u32,
) -> Option<(InstId, RegEpilogue, usize)> {
    let heavy = epilogue_pool(comp)?;
    let h = comp.inst(heavy);
    let Op::ReduceWindow { kind, window } = &h.op else {
        return None;
    };
    epilogue::recognize(comp, heavy)?;
    let (chain, param) = epilogue::recognize_operand(comp, h.operands[0])?;
    let x = &comp.inst(h.operands[0]).shape;
    (*kind != ReduceKind::Add && pool_fits_registers(window, &h.shape, x, lanes))
        .then_some((heavy, chain, param))
}

/// Whether [`Cg::pool_in_registers`] takes a pool of `x` into `out` on a target of `lanes`-lane
/// vectors: f32 data whose minor-most dim is the output's, not windowed, at least
/// [`MIN_POOL_CHANNELS`] long and at most [`MAX_UNROLLED_REDUCE_VECTORS`] vectors (each vector's
/// code is emitted once, unrolled: past the limit the scalar loops do the work in a code size
/// independent of the extent).
pub(super) fn pool_fits_registers(window: &Window, out: &Shape, x: &Shape, lanes: u32) -> bool {
    let Some(&m) = out.layout.minor_to_major.first() else {
        return false;
    };
    x.dtype == DType::F32
        && out.dtype == DType::F32
        && x.layout.minor_to_major.first() == Some(&m)
        && x.dims[m] == out.dims[m]
        && x.dims[m] >= MIN_POOL_CHANNELS
        && window.size[m] == 1
        && window.stride[m] == 1
        && window.pad_low[m] == 0
        && window.pad_high[m] == 0
        && window.dilation[m] == 1
        && vectors(x.dims[m], lanes, false).len() <= MAX_UNROLLED_REDUCE_VECTORS
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// `out = reduce-window(kind, window, chain(k.args[param]))` of channels-minor f32 data whose
    /// channels are not windowed (max and average pooling of NHWC maps, with the producer's
    /// per-channel chain: bias, ReLU): per output pixel and group of `VECTORS_PER_PASS` channel
    /// vectors, the running values stay in registers over the window's taps (in window order,
    /// taps in the padding skipped, as [`Cg::reduce_window`]'s loops combine them), and each output
    /// vector is stored once. Returns `false` (emitting nothing) when the shapes do not fit.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pool_in_registers(
        &self,
        k: &Kernel<'ctx>,
        kind: ReduceKind,
        window: &Window,
        out: &Shape,
        x: &Shape,
        param: usize,
        chain: &RegEpilogue,
        epi: &RegEpilogue,
    ) -> bool {
        let t = Tiles::for_target(self.target);
        if !pool_fits_registers(window, out, x, t.lanes) {
            return false;
        }
        let m = out.layout.minor_to_major[0];
        // Stored as bytes (`byte_storage.rs`): pooled as bytes, converted once per output.
        let byte = self.be.args_stored.borrow().get(param).copied().flatten();
        assert!(
            byte.is_none() || chain.steps.is_empty(),
            "byte_storage.rs stores only what bare pools read"
        );
        // Max and min pool the bytes themselves; a sum adds them widened to f32 (exact).
        let byte_acc = byte.filter(|_| kind != ReduceKind::Add);
        // Bytes fill a register with four times the f32 lanes (squeezenet's int8 stem pool on
        // aarch64: 16 channels per `umax`, not 4).
        let lanes = if byte_acc.is_some() {
            t.lanes * BYTES_PER_F32
        } else {
            t.lanes
        };
        let vecs = vectors(x.dims[m], lanes, false);
        self.loop_nest_outer(out, &mut |cg, oidx| {
            let oidx = oidx.clone();
            for group in vecs.chunks(VECTORS_PER_PASS) {
                let accs = cg.vector_accumulators(k, kind, group, byte_acc);
                cg.loop_nest(&window.size, &mut |cg, tidx| {
                    let mut valid = cg.ctx.bool_type().const_int(1, false);
                    let mut pos = Vec::with_capacity(x.rank());
                    for d in 0..x.rank() {
                        let p = cg.window_pos(oidx[d], tidx[d], window, d);
                        if d != m {
                            valid =
                                cg.b.build_and(valid, cg.in_range(p, x.dims[d]), "")
                                    .unwrap();
                        }
                        pos.push(p);
                    }
                    cg.if_then(valid, &mut |cg| {
                        let x = (x, param, chain);
                        cg.accumulate_vectors(k, kind, x, &pos, (m, byte), group, &accs);
                    });
                });
                let mut idx = oidx.clone();
                cg.store_vectors(k, out, &mut idx, (m, byte_acc), group, (&accs, epi));
            }
        });
        true
    }

    /// One slot per vector of `group` holding its running value, set to `kind`'s identity (of
    /// byte type `byte`'s values when pooling bytes).
    fn vector_accumulators(
        &self,
        k: &Kernel<'ctx>,
        kind: ReduceKind,
        group: &[VecCol],
        byte: Option<DType>,
    ) -> Vec<PointerValue<'ctx>> {
        group
            .iter()
            .map(|v| {
                if let Some(d) = byte {
                    let t = self.ctx.i8_type();
                    let p = self.slot(k.f, t.vec_type(v.lanes).into());
                    let first = match (kind, d) {
                        (ReduceKind::Max, DType::U8) => 0,
                        (ReduceKind::Max, _) => 0x80,
                        (_, DType::U8) => 0xff,
                        _ => 0x7f,
                    };
                    let c = t.const_int(first, false);
                    let init = inkwell::types::VectorType::const_vector(&vec![c; v.lanes as usize]);
                    self.b.build_store(p, init).unwrap();
                    return p;
                }
                let p = self.slot(k.f, self.vec_ty(v.lanes).into());
                self.b
                    .build_store(p, self.splat(self.identity(kind), v.lanes))
                    .unwrap();
                p
            })
            .collect()
    }

    /// Combines into each accumulator of `group` the vector of `x` (kernel argument `param`,
    /// through `chain`) at `idx` with its minor-most entry `m` set to the vector's first column.
    #[allow(clippy::too_many_arguments)]
    fn accumulate_vectors(
        &self,
        k: &Kernel<'ctx>,
        kind: ReduceKind,
        (x, param, chain): (&Shape, usize, &RegEpilogue),
        idx: &[IntValue<'ctx>],
        (m, byte): (usize, Option<DType>),
        group: &[VecCol],
        accs: &[PointerValue<'ctx>],
    ) {
        let mut idx = idx.to_vec();
        for (v, &acc) in group.iter().zip(accs) {
            idx[m] = self.i64(v.col as u64);
            let off = self.offset(&idx, x);
            if let (Some(d), ReduceKind::Add) = (byte, kind) {
                let val = self.bytes_to_f32(self.load_bytes(k.args[param], off, v.lanes), d);
                let old = self.b.build_load(acc, "").unwrap().into_vector_value();
                let new = self.b.build_float_add(old, val, "").unwrap();
                self.b.build_store(acc, new).unwrap();
                continue;
            }
            if let Some(d) = byte {
                // The conversion to f32 is monotone: the largest byte is the largest value.
                let val = self.load_bytes(k.args[param], off, v.lanes);
                let old = self.b.build_load(acc, "").unwrap().into_vector_value();
                let pred = match (kind, d) {
                    (ReduceKind::Max, DType::U8) => IntPredicate::UGT,
                    (ReduceKind::Max, _) => IntPredicate::SGT,
                    (_, DType::U8) => IntPredicate::ULT,
                    _ => IntPredicate::SLT,
                };
                let take = self.b.build_int_compare(pred, val, old, "").unwrap();
                let new = self.b.build_select(take, val, old, "").unwrap();
                self.b.build_store(acc, new).unwrap();
                continue;
            }
            let mut val = self.vload(k.args[param], off, v.lanes);
            if !chain.steps.is_empty() {
                let role = |d: usize| {
                    if d == m {
                        TilePos::Col
                    } else {
                        TilePos::At(idx[d])
                    }
                };
                val = self.apply_epilogue(
                    chain,
                    k,
                    val,
                    self.i64(0),
                    self.i64(v.col as u64),
                    v,
                    &role,
                );
            }
            let old = self.b.build_load(acc, "").unwrap().into_vector_value();
            let new = match kind {
                ReduceKind::Add => self.b.build_float_add(old, val, "").unwrap(),
                ReduceKind::Max => self.vfmax(old, val, true),
                ReduceKind::Min => self.vfmax(old, val, false),
            };
            self.b.build_store(acc, new).unwrap();
        }
    }

    /// Stores each accumulator of `group` into `k.out` (shape `out`) at `idx`, its entry `m` set
    /// to the vector's first column.
    fn store_vectors(
        &self,
        k: &Kernel<'ctx>,
        out: &Shape,
        idx: &mut [IntValue<'ctx>],
        (m, byte): (usize, Option<DType>),
        group: &[VecCol],
        (accs, epi): (&[PointerValue<'ctx>], &RegEpilogue),
    ) {
        // Into an assembled concatenation through its strides (`strided_out.rs`), whose
        // minor-most dim is `m` too (same layout).
        let strides = self.out_strides(out);
        for (v, &acc) in group.iter().zip(accs) {
            idx[m] = self.i64(v.col as u64);
            let off = self.strided(idx, &strides);
            let mut val = self.b.build_load(acc, "").unwrap().into_vector_value();
            let out_byte = self.be.out_stored.get();
            if out_byte.is_some() && epi.steps.is_empty() {
                // Bytes in, bytes out (`byte_storage.rs`: the same type, a bare pool).
                assert!(byte.is_some(), "a bare pool stores bytes only of bytes");
                self.store_byte_lanes(k.out, off, val, v.store);
                continue;
            }
            if let Some(d) = byte {
                val = self.bytes_to_f32(val, d);
            }
            if !epi.steps.is_empty() {
                let at = idx.to_vec();
                let role = |d: usize| {
                    if d == m {
                        TilePos::Col
                    } else {
                        TilePos::At(at[d])
                    }
                };
                let col = self.i64(v.col as u64);
                val = self.apply_epilogue(epi, k, val, self.i64(0), col, v, &role);
            }
            if out_byte.is_some() {
                // A pool's epilogue whose integers are stored as bytes (`byte_storage.rs`).
                let bytes = self.exact_bytes(val.into()).into_vector_value();
                self.store_byte_lanes(k.out, off, bytes, v.store);
                continue;
            }
            self.store_lanes(k.out, off, val, v.store);
        }
    }

    /// `reduce` on a CPU: the fastest loop order its layout allows.
    pub(super) fn reduce(
        &self,
        k: &Kernel<'ctx>,
        kind: &ReduceKind,
        dimensions: &[usize],
        shape: &Shape,
        opnds: &[Shape],
        at: At<'_, 'ctx>,
    ) {
        let opnd = |j: usize| &opnds[j];
        if opnd(0)
            .layout
            .minor_to_major
            .first()
            .is_some_and(|d| !dimensions.contains(d))
        {
            self.reduce_kept_minor(k, kind, dimensions, shape, opnds, at);
        } else if matches!(kind, ReduceKind::Max | ReduceKind::Min)
            && shape.dims.iter().product::<usize>() == 1
            && opnd(0).dims[opnd(0).layout.minor_to_major[0]] >= 2 * REDUCE_PARTIALS
        {
            self.reduce_all_partials(k, *kind, shape, &opnds[0], at);
        } else if dimensions.len() == 1
            && opnd(0).layout.minor_to_major.first() == Some(&dimensions[0])
            && opnd(0).dims[dimensions[0]] >= 2 * REDUCE_PARTIALS
        {
            self.reduce_partials(k, kind, dimensions, shape, opnds, at);
        } else {
            self.reduce_loops(k, kind, dimensions, shape, opnds, at);
        }
    }

    fn reduce_kept_minor(
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
        // The input's minor-most dim is kept (a spatial reduction of NHWC data): walk the
        // input in memory order and accumulate into the output, so the inner loop runs
        // along contiguous kept elements and vectorizes. Each output element still sums
        // its inputs one at a time, in order.
        let kept: Vec<usize> = (0..opnd(0).rank())
            .filter(|d| !dimensions.contains(d))
            .collect();
        self.loop_nest_physical(shape, &mut |cg, oidx| {
            cg.store(
                k.out,
                cg.offset(oidx, shape),
                cg.identity(*kind).into(),
                odt,
            );
        });
        self.loop_nest_physical(opnd(0), &mut |cg, xidx| {
            let oidx: Vec<IntValue<'ctx>> = kept.iter().map(|&d| xidx[d]).collect();
            let off = cg.offset(&oidx, shape);
            let a = cg.load(k.out, off, odt).into_float_value();
            let v = at(0, Ix::Multi(xidx)).into_float_value();
            cg.store(k.out, off, cg.combine(*kind, a, v).into(), odt);
        });
    }

    fn reduce_partials(
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
        // A reduction along the contiguous dim (softmax, layer norm): REDUCE_PARTIALS
        // running values over elements j ≡ p (mod REDUCE_PARTIALS), combined by a fixed
        // tree at the end. Independent chains hide the add latency and vectorize; the
        // association is the same on every target.
        let x = opnd(0).dims.clone();
        let rd = dimensions[0];
        let len = x[rd];
        let kept: Vec<usize> = (0..x.len()).filter(|&d| d != rd).collect();
        let accs: Vec<PointerValue<'ctx>> = (0..REDUCE_PARTIALS)
            .map(|_| self.slot(k.f, self.ctx.f32_type().into()))
            .collect();
        self.loop_nest_physical(shape, &mut |cg, oidx| {
            let at_j = |cg: &Self, j: IntValue<'ctx>| {
                let mut full = vec![cg.i64(0); x.len()];
                for (k2, &d) in kept.iter().enumerate() {
                    full[d] = oidx[k2];
                }
                full[rd] = j;
                at(0, Ix::Multi(&full)).into_float_value()
            };
            for &a in &accs {
                cg.b.build_store(a, cg.identity(*kind)).unwrap();
            }
            cg.for_loop(len / REDUCE_PARTIALS, &mut |cg, blk| {
                let j0 =
                    cg.b.build_int_mul(blk, cg.i64(REDUCE_PARTIALS as u64), "")
                        .unwrap();
                for (p, &a) in accs.iter().enumerate() {
                    let j = cg.b.build_int_add(j0, cg.i64(p as u64), "").unwrap();
                    let v = at_j(cg, j);
                    let old = cg.b.build_load(a, "").unwrap().into_float_value();
                    cg.b.build_store(a, cg.combine(*kind, old, v)).unwrap();
                }
            });
            let tail = len / REDUCE_PARTIALS * REDUCE_PARTIALS;
            for (p, &a) in accs.iter().enumerate().take(len % REDUCE_PARTIALS) {
                let v = at_j(cg, cg.i64((tail + p) as u64));
                let old = cg.b.build_load(a, "").unwrap().into_float_value();
                cg.b.build_store(a, cg.combine(*kind, old, v)).unwrap();
            }
            let total = cg.combine_partials(*kind, &accs);
            cg.store(k.out, cg.offset(oidx, shape), total.into(), odt);
        });
    }

    /// A min or max of every element of `x` (a dynamic quantization's range): REDUCE_PARTIALS
    /// running values along `x`'s minor-most physical dim, its other dims walked in memory
    /// order around them, combined by a fixed tree at the end. Min and max are exact and
    /// NaN-propagating whatever the association (`fmax` takes a NaN from either side), so the
    /// value is the generic loops' (a zero's sign may differ between `-0` and `+0`); the
    /// generic loops walked the logical order with one running value, four cycles an element
    /// (dynamic quantization of a tiny transformer's [32, 256] activation took 12 µs).
    fn reduce_all_partials(
        &self,
        k: &Kernel<'ctx>,
        kind: ReduceKind,
        shape: &Shape,
        x: &Shape,
        at: At<'_, 'ctx>,
    ) {
        let minor = x.layout.minor_to_major[0];
        let len = x.dims[minor];
        let mut outer = x.clone();
        outer.dims[minor] = 1;
        let accs: Vec<PointerValue<'ctx>> = (0..REDUCE_PARTIALS)
            .map(|_| self.slot(k.f, self.ctx.f32_type().into()))
            .collect();
        for &a in &accs {
            self.b.build_store(a, self.identity(kind)).unwrap();
        }
        self.loop_nest_physical(&outer, &mut |cg, oidx| {
            let at_j = |j: IntValue<'ctx>| {
                let mut full = oidx.to_vec();
                full[minor] = j;
                at(0, Ix::Multi(&full)).into_float_value()
            };
            let step = |cg: &Self, a: PointerValue<'ctx>, j: IntValue<'ctx>| {
                let v = at_j(j);
                let old = cg.b.build_load(a, "").unwrap().into_float_value();
                cg.b.build_store(a, cg.combine(kind, old, v)).unwrap();
            };
            cg.for_loop(len / REDUCE_PARTIALS, &mut |cg, blk| {
                let j0 =
                    cg.b.build_int_mul(blk, cg.i64(REDUCE_PARTIALS as u64), "")
                        .unwrap();
                for (p, &a) in accs.iter().enumerate() {
                    step(cg, a, cg.b.build_int_add(j0, cg.i64(p as u64), "").unwrap());
                }
            });
            let tail = len / REDUCE_PARTIALS * REDUCE_PARTIALS;
            for (p, &a) in accs.iter().enumerate().take(len % REDUCE_PARTIALS) {
                step(cg, a, cg.i64((tail + p) as u64));
            }
        });
        let total = self.combine_partials(kind, &accs);
        let zero = vec![self.i64(0); shape.rank()];
        self.store(k.out, self.offset(&zero, shape), total.into(), shape.dtype);
    }

    /// The running values in `accs` (REDUCE_PARTIALS of them, a power of two) combined by a
    /// balanced tree: the same association on every target.
    fn combine_partials(&self, kind: ReduceKind, accs: &[PointerValue<'ctx>]) -> FloatValue<'ctx> {
        let mut vals: Vec<FloatValue<'ctx>> = accs
            .iter()
            .map(|&a| self.b.build_load(a, "").unwrap().into_float_value())
            .collect();
        while vals.len() > 1 {
            vals = vals
                .chunks(2)
                .map(|pair| self.combine(kind, pair[0], pair[1]))
                .collect();
        }
        vals[0]
    }

    /// `reduce-window` on a CPU: channels-minor pooling when the channels are not windowed.
    /// Reduce-window kernels: pooling of channels-minor data, windows along the minor-most dim
    /// only, or the general loops.
    pub(super) fn reduce_window(
        &self,
        k: &Kernel<'ctx>,
        kind: &ReduceKind,
        window: &Window,
        shape: &Shape,
        opnds: &[Shape],
        at: At<'_, 'ctx>,
    ) {
        let opnd = |j: usize| &opnds[j];
        if shape.layout.minor_to_major.first().is_some_and(|&m| {
            opnd(0).layout.minor_to_major.first() == Some(&m)
                && window.size[m] == 1
                && window.stride[m] == 1
                && window.pad_low[m] == 0
                && window.pad_high[m] == 0
                && window.dilation[m] == 1
        }) {
            self.pool_channels_minor(k, kind, window, shape, opnds, at);
        } else if along_minor_only(window, shape, &opnds[0]) {
            self.pool_along_minor(k, kind, window, shape, at);
        } else {
            self.reduce_window_loops(k, kind, window, shape, opnds, at);
        }
    }

    /// A window along the minor-most dim only, unit strides, the shape kept (LRN's sum over
    /// neighbouring channels of channels-minor data): per row, the positions whose every tap is
    /// inside run without bounds tests (contiguous loads, so the loop vectorizes); the few at
    /// each end test each tap. Taps combine in window order, padded ones skipped, as in the
    /// general loops.
    fn pool_along_minor(
        &self,
        k: &Kernel<'ctx>,
        kind: &ReduceKind,
        window: &Window,
        shape: &Shape,
        at: At<'_, 'ctx>,
    ) {
        let m = shape.layout.minor_to_major[0];
        let n = shape.dims[m];
        let (size, lo) = (window.size[m], window.pad_low[m]);
        let hi_pad = window.pad_high[m];
        // Positions [first, last) have every tap inside.
        let first = lo.min(n);
        let last = n.saturating_sub(hi_pad).max(first);
        self.loop_nest_outer(shape, &mut |cg, idx| {
            let one = |cg: &Self, c: IntValue<'ctx>, checked: bool| {
                let mut acc = cg.identity(*kind);
                for d in 0..size {
                    let p =
                        cg.b.build_int_sub(cg.add(c, cg.i64(d as u64)), cg.i64(lo as u64), "")
                            .unwrap();
                    let mut ix = idx.clone();
                    ix[m] = if checked { cg.clamp_index(p, n) } else { p };
                    let v = at(0, Ix::Multi(&ix)).into_float_value();
                    let next = cg.combine(*kind, acc, v);
                    acc = if checked {
                        cg.select(cg.in_range(p, n), next.into(), acc.into())
                            .into_float_value()
                    } else {
                        next
                    };
                }
                let mut ix = idx.clone();
                ix[m] = c;
                cg.store(k.out, cg.offset(&ix, shape), acc.into(), shape.dtype);
            };
            cg.for_range(cg.i64(0), cg.i64(first as u64), &mut |cg, c| {
                one(cg, c, true)
            });
            cg.for_range(cg.i64(first as u64), cg.i64(last as u64), &mut |cg, c| {
                one(cg, c, false)
            });
            cg.for_range(cg.i64(last as u64), cg.i64(n as u64), &mut |cg, c| {
                one(cg, c, true)
            });
        });
    }

    fn pool_channels_minor(
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
        // Pooling of channels-minor data: per output pixel and window tap (the validity
        // test hoisted), the innermost loop runs along the contiguous channels and
        // accumulates into the output, so it vectorizes. Each output element combines its
        // taps in the same order as the loop below.
        let x = opnd(0).dims.clone();
        let m = shape.layout.minor_to_major[0];
        self.loop_nest_outer(shape, &mut |cg, oidx| {
            let oidx = oidx.clone();
            cg.for_loop(x[m], &mut |cg, c| {
                let mut idx = oidx.clone();
                idx[m] = c;
                cg.store(
                    k.out,
                    cg.offset(&idx, shape),
                    cg.identity(*kind).into(),
                    odt,
                );
            });
            cg.loop_nest(&window.size, &mut |cg, tidx| {
                let mut valid = cg.ctx.bool_type().const_int(1, false);
                let mut pos = Vec::with_capacity(x.len());
                for d in 0..x.len() {
                    let p = cg.window_pos(oidx[d], tidx[d], window, d);
                    if d != m {
                        valid = cg.b.build_and(valid, cg.in_range(p, x[d]), "").unwrap();
                    }
                    pos.push(p);
                }
                let runs = cg.be.pool_runs.borrow().clone();
                cg.if_then(valid, &mut |cg| {
                    cg.for_runs(x[m], runs.as_ref(), &mut |cg, c| {
                        let mut ipos = pos.clone();
                        ipos[m] = c;
                        let mut idx = oidx.clone();
                        idx[m] = c;
                        let off = cg.offset(&idx, shape);
                        let v = at(0, Ix::Multi(&ipos)).into_float_value();
                        let a = cg.load(k.out, off, odt).into_float_value();
                        cg.store(k.out, off, cg.combine(*kind, a, v).into(), odt);
                    });
                });
            });
        });
    }
}

/// Whether a reduce-window slides along the minor-most dim only (result and operand share it),
/// with unit strides and dilations and the shape kept.
fn along_minor_only(window: &Window, shape: &Shape, x: &Shape) -> bool {
    let Some(&m) = shape.layout.minor_to_major.first() else {
        return false;
    };
    x.layout.minor_to_major.first() == Some(&m)
        && shape.dims == x.dims
        && window.stride.iter().all(|&s| s == 1)
        && window.dilation.iter().all(|&d| d == 1)
        && (0..shape.rank()).all(|d| {
            d == m || (window.size[d] == 1 && window.pad_low[d] == 0 && window.pad_high[d] == 0)
        })
        && window.pad_low[m] + window.pad_high[m] + 1 == window.size[m]
}
