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
//! do not fit.

use super::epilogue::{RegEpilogue, Role};
use super::gemm;
use super::{Cg, Kernel};
use crate::ir::{DType, ReduceKind, Shape};
use inkwell::values::{IntValue, VectorValue};

/// Channel vectors reduced together: their running values stay in registers (4 of 16 or 32).
const VECTORS_PER_PASS: usize = 4;

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// `out = reduce(kind, dims, chain(k.args[param]))`, `x` the argument's shape.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reduce_in_registers(
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
        let t = gemm::Tiles::for_target(self.target);
        let vecs = gemm::vectors(x.dims[m], t.lanes, false);
        // Outer loops: kept dims other than m; inner: reduced dims, both in memory order.
        let phys: Vec<usize> = x.layout.minor_to_major.iter().rev().copied().collect();
        let outer: Vec<usize> = phys
            .iter()
            .copied()
            .filter(|d| *d != m && !dims.contains(d))
            .collect();
        let inner: Vec<usize> = phys.iter().copied().filter(|d| dims.contains(d)).collect();
        let combine = |cg: &Self, a: VectorValue<'ctx>, b: VectorValue<'ctx>| match kind {
            ReduceKind::Add => cg.b.build_float_add(a, b, "").unwrap(),
            ReduceKind::Max => cg.vfmax(a, b, true),
            ReduceKind::Min => cg.vfmax(a, b, false),
        };
        let outer_sizes: Vec<usize> = outer.iter().map(|&d| x.dims[d]).collect();
        let inner_sizes: Vec<usize> = inner.iter().map(|&d| x.dims[d]).collect();
        self.loop_nest(&outer_sizes, &mut |cg, o| {
            for group in vecs.chunks(VECTORS_PER_PASS) {
                let accs: Vec<_> = group
                    .iter()
                    .map(|v| {
                        let p = cg.slot(k.f, cg.vec_ty(v.lanes).into());
                        cg.b.build_store(p, cg.splat(cg.identity(kind), v.lanes))
                            .unwrap();
                        p
                    })
                    .collect();
                cg.loop_nest(&inner_sizes, &mut |cg, r| {
                    let mut idx: Vec<IntValue<'ctx>> = vec![cg.i64(0); x.rank()];
                    for (j, &d) in outer.iter().enumerate() {
                        idx[d] = o[j];
                    }
                    for (j, &d) in inner.iter().enumerate() {
                        idx[d] = r[j];
                    }
                    for (v, &acc) in group.iter().zip(&accs) {
                        idx[m] = cg.i64(v.col as u64);
                        let off = cg.offset(&idx, x);
                        let mut val = cg.vload(k.args[param], off, v.lanes);
                        if !chain.steps.is_empty() {
                            let role = |d: usize| {
                                if d == m { Role::Col } else { Role::At(idx[d]) }
                            };
                            val = cg.apply_epilogue(
                                chain,
                                k,
                                val,
                                cg.i64(0),
                                cg.i64(v.col as u64),
                                v,
                                &role,
                            );
                        }
                        let old = cg.b.build_load(acc, "").unwrap().into_vector_value();
                        cg.b.build_store(acc, combine(cg, old, val)).unwrap();
                    }
                });
                let mut oidx: Vec<IntValue<'ctx>> = vec![cg.i64(0); kept.len()];
                for (j, &d) in outer.iter().enumerate() {
                    let pos = kept.iter().position(|&kd| kd == d).unwrap();
                    oidx[pos] = o[j];
                }
                for (v, &acc) in group.iter().zip(&accs) {
                    oidx[m_out] = cg.i64(v.col as u64);
                    let off = cg.offset(&oidx, out);
                    let val = cg.b.build_load(acc, "").unwrap().into_vector_value();
                    cg.store_lanes(k.out, off, val, v.store);
                }
            }
        });
        true
    }
}
