//! Tiled matrix products for the GPU: a block of 16×16 threads computes a 16×16 output tile,
//! staging 16-wide K-slices of both operands through shared memory.
//!
//! Contract: in grid mode a plain `dot` whose [`gemm::geometry`] has at least [`TILE`] rows,
//! columns and contracting elements ([`tiled_geometry`]) becomes a tiled kernel. Each thread
//! `t` of a block (row `t / 16`, column `t % 16` of the tile) loads one element of each operand
//! slice (zero outside the matrix), the block waits at a barrier, each thread accumulates its
//! element's 16 products from shared memory, and the block waits again before the next slice;
//! every loaded element serves 16 threads instead of one. Products are accumulated in K order
//! with `llvm.fmuladd`, as the per-element kernel does (`grid.rs`).
//!
//! In an output fusion (dot + bias + GELU, say) whose root has the dot's shape, each thread
//! applies the fused epilogue to the element it stored (`Finish`), as the per-element kernel
//! does after its dot.
//!
//! The same phase bodies have two forms. PTX (`Cg::ptx`): the kernel runs once per thread
//! (`gid = block · 256 + t`), the tiles are `addrspace(3)` (`.shared`) arrays and the barriers
//! `bar.sync 0`. Host emulation (grid mode for a CPU): the kernel runs once per *block*
//! (`gid = block`) and runs each phase for all 256 threads before the next one starts, which is
//! exactly what the barriers guarantee; the tiles and each thread's accumulator are stack
//! arrays. The host kernel exports `<kernel>_threads_per_call` (= 256) so that an emulating
//! driver (`tests/harness/fake_cuda.c`) knows to call it once per block.

use super::gemm::{self, Geometry};
use super::{Cg, Kernel};
use crate::ir::{DType, DotDims, Shape};
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::module::Linkage;
use inkwell::values::{IntValue, PointerValue};

/// Tile side: 16×16 threads is one block of `ptx::BLOCK_THREADS` (256), and a 16-element
/// K-slice of both operands is 2 KiB of shared memory: far below any SM's limit.
pub const TILE: usize = 16;

/// Threads per block of a tiled kernel.
pub const TILE_THREADS: usize = TILE * TILE;

/// The geometry of a dot a tiled kernel computes, when one pays: below 16 rows or columns most
/// of a 16×16 block would idle (a batch-1 dense layer is a matrix-vector product, where each
/// thread's column of weights is already read once, coalesced, by the per-element kernel).
pub fn tiled_geometry(d: &DotDims, lhs: &Shape, rhs: &Shape, out: &Shape) -> Option<Geometry> {
    let g = gemm::geometry(d, lhs, rhs, out)?;
    (g.m >= TILE && g.n >= TILE && g.k >= TILE && g.b_n_unit).then_some(g)
}

/// The output dims of `dot(lhs, ..)` split as (batch dims, lhs free dims, rhs free dims).
pub fn out_dims<'s>(
    d: &DotDims,
    lhs: &Shape,
    out: &'s Shape,
) -> (&'s [usize], &'s [usize], &'s [usize]) {
    let nb = d.lhs_batch.len();
    let nl = lhs.rank() - nb - d.lhs_contracting.len();
    let (batch, rest) = out.dims.split_at(nb);
    let (lfree, rfree) = rest.split_at(nl);
    (batch, lfree, rfree)
}

/// Blocks of the tiled kernel of `g`.
pub fn tiled_blocks(g: &Geometry) -> usize {
    let batch: usize = g.batch.iter().map(|b| b.0).product();
    batch * g.m.div_ceil(TILE) * g.n.div_ceil(TILE)
}

/// What a thread does with its finished element: given the output's logical index, compute and
/// store the fused epilogue (the heavy value is already in the output buffer there).
pub(super) type Finish<'f, 'a, 'ctx> = &'f dyn Fn(&Cg<'a, 'ctx>, &[IntValue<'ctx>]);

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// The tiled product `out = a · b` of geometry `g` (`bufs`: the two operand buffers) whose
    /// output has dims `out_dims` (batch dims, then the lhs free dims, then the rhs free dims);
    /// `finish` applies an output fusion's epilogue to each stored element.
    pub(super) fn dot_tiled(
        &self,
        k: &Kernel<'ctx>,
        g: &Geometry,
        bufs: (PointerValue<'ctx>, PointerValue<'ctx>),
        out_dims: (&[usize], &[usize], &[usize]),
        finish: Option<Finish<'_, 'a, 'ctx>>,
    ) {
        let gid = self.gid.get().expect("tiled kernels exist in grid mode");
        let f32t = self.ctx.f32_type();
        let tile_ty = f32t.array_type(TILE_THREADS as u32);
        let threads = self.i64(TILE_THREADS as u64);
        let (block, thread) = if self.ptx {
            (
                self.b.build_int_unsigned_div(gid, threads, "").unwrap(),
                Some(self.b.build_int_unsigned_rem(gid, threads, "").unwrap()),
            )
        } else {
            (gid, None)
        };
        // The invocations: threads on the GPU, blocks in the host emulation.
        let blocks = tiled_blocks(g);
        self.grid_size.set(Some(if self.ptx {
            blocks * TILE_THREADS
        } else {
            blocks
        }));
        if !self.ptx {
            self.export_threads_per_call(k);
        }
        // Shared tiles (a K-slice of each operand) and each thread's accumulator.
        let (a_tile, b_tile, acc) = if self.ptx {
            let shared = |name: &str| {
                let g = self.m.add_global(
                    tile_ty,
                    Some(AddressSpace::from(3u16)),
                    &format!("{}_{name}", k.f.get_name().to_str().unwrap_or("tile")),
                );
                g.set_linkage(Linkage::Internal);
                g.set_initializer(&tile_ty.get_undef());
                g.set_alignment(16);
                g.as_pointer_value()
            };
            (
                shared("a_tile"),
                shared("b_tile"),
                self.slot(k.f, f32t.into()),
            )
        } else {
            (
                self.slot(k.f, tile_ty.into()),
                self.slot(k.f, tile_ty.into()),
                self.slot(k.f, tile_ty.into()),
            )
        };
        // Element `t` of a tile array (the accumulator is one scalar per thread on the GPU).
        let elem = |cg: &Self, arr: PointerValue<'ctx>, t: IntValue<'ctx>| unsafe {
            cg.b.build_in_bounds_gep(arr, &[cg.i64(0), t], "").unwrap()
        };
        let acc_of = |cg: &Self, t: IntValue<'ctx>| {
            if cg.ptx { acc } else { elem(cg, acc, t) }
        };
        // Which tile of which matrix of the batch this block computes.
        let tiles_n = g.n.div_ceil(TILE) as u64;
        let tiles_m = g.m.div_ceil(TILE) as u64;
        let bn = self
            .b
            .build_int_unsigned_rem(block, self.i64(tiles_n), "")
            .unwrap();
        let rest = self
            .b
            .build_int_unsigned_div(block, self.i64(tiles_n), "")
            .unwrap();
        let bm = self
            .b
            .build_int_unsigned_rem(rest, self.i64(tiles_m), "")
            .unwrap();
        let mut batch = self
            .b
            .build_int_unsigned_div(rest, self.i64(tiles_m), "")
            .unwrap();
        let (mut a_base, mut b_base, mut c_base) = (self.i64(0), self.i64(0), self.i64(0));
        let mut batch_index = Vec::new();
        for &(size, ls, rs, os) in g.batch.iter().rev() {
            let i = self
                .b
                .build_int_unsigned_rem(batch, self.i64(size as u64), "")
                .unwrap();
            batch_index.insert(0, i);
            batch = self
                .b
                .build_int_unsigned_div(batch, self.i64(size as u64), "")
                .unwrap();
            a_base = self.add(a_base, self.mul(i, ls));
            b_base = self.add(b_base, self.mul(i, rs));
            c_base = self.add(c_base, self.mul(i, os));
        }
        // Thread t's row and column in the tile, and its output element.
        let place = |cg: &Self, t: IntValue<'ctx>| {
            let ty =
                cg.b.build_int_unsigned_div(t, cg.i64(TILE as u64), "")
                    .unwrap();
            let tx =
                cg.b.build_int_unsigned_rem(t, cg.i64(TILE as u64), "")
                    .unwrap();
            let row = cg.add(cg.mul(bm, TILE as u64), ty);
            let col = cg.add(cg.mul(bn, TILE as u64), tx);
            (ty, tx, row, col)
        };
        let below = |cg: &Self, i: IntValue<'ctx>, n: usize| {
            cg.b.build_int_compare(IntPredicate::ULT, i, cg.i64(n as u64), "")
                .unwrap()
        };
        // Each phase runs for this thread on the GPU, for every thread of the block on the host.
        let each_thread = |cg: &Self, body: &dyn Fn(&Self, IntValue<'ctx>)| match thread {
            Some(t) => body(cg, t),
            None => cg.for_loop(TILE_THREADS, &mut |cg, t| body(cg, t)),
        };
        let barrier = |cg: &Self| {
            if cg.ptx {
                let f = inkwell::intrinsics::Intrinsic::find("llvm.nvvm.barrier0")
                    .and_then(|i| i.get_declaration(cg.m, &[]))
                    .expect("LLVM 14 has llvm.nvvm.barrier0");
                cg.b.build_call(f, &[], "").unwrap();
            }
        };
        each_thread(self, &|cg, t| {
            cg.b.build_store(acc_of(cg, t), cg.f32c(0.0)).unwrap();
        });
        self.for_loop(g.k.div_ceil(TILE), &mut |cg, slice| {
            let k0 = cg.mul(slice, TILE as u64);
            // Phase 1: thread (ty, tx) loads A[row, k0 + tx] and B[k0 + ty, col] (0 outside).
            each_thread(cg, &|cg, t| {
                let (ty, tx, row, col) = place(cg, t);
                let ka = cg.add(k0, tx);
                let kb = cg.add(k0, ty);
                let load = |cg: &Self,
                            buf: PointerValue<'ctx>,
                            ok: IntValue<'ctx>,
                            off: IntValue<'ctx>| {
                    // Out-of-range threads read element 0 (always there) and keep zero.
                    let at = cg.select(ok, off.into(), cg.i64(0).into()).into_int_value();
                    let v = cg.load(buf, at, DType::F32);
                    cg.select(ok, v, cg.f32c(0.0).into())
                };
                let a_ok =
                    cg.b.build_and(below(cg, row, g.m), below(cg, ka, g.k), "")
                        .unwrap();
                let a_off = cg.add(a_base, cg.add(cg.mul(row, g.a_m), cg.mul(ka, g.a_k)));
                let a = load(cg, bufs.0, a_ok, a_off);
                let b_ok =
                    cg.b.build_and(below(cg, kb, g.k), below(cg, col, g.n), "")
                        .unwrap();
                let b_off = cg.add(b_base, cg.add(cg.mul(kb, g.b_k), col));
                let b = load(cg, bufs.1, b_ok, b_off);
                cg.b.build_store(elem(cg, a_tile, t), a).unwrap();
                cg.b.build_store(elem(cg, b_tile, t), b).unwrap();
            });
            barrier(cg);
            // Phase 2: acc += Σ_j A_tile[ty, j] · B_tile[j, tx], in K order.
            each_thread(cg, &|cg, t| {
                let (ty, tx, _, _) = place(cg, t);
                let p = acc_of(cg, t);
                let mut sum = cg.b.build_load(p, "").unwrap().into_float_value();
                for j in 0..TILE as u64 {
                    let ai = cg.add(cg.mul(ty, TILE as u64), cg.i64(j));
                    let bi = cg.add(cg.i64(j * TILE as u64), tx);
                    let a = cg.b.build_load(elem(cg, a_tile, ai), "").unwrap();
                    let b = cg.b.build_load(elem(cg, b_tile, bi), "").unwrap();
                    sum = cg.fma(a.into_float_value(), b.into_float_value(), sum);
                }
                cg.b.build_store(p, sum).unwrap();
            });
            barrier(cg);
        });
        // Phase 3: each thread inside the matrix stores its element.
        each_thread(self, &|cg, t| {
            let (_, _, row, col) = place(cg, t);
            let ok =
                cg.b.build_and(below(cg, row, g.m), below(cg, col, g.n), "")
                    .unwrap();
            cg.if_then(ok, &mut |cg| {
                let v = cg.b.build_load(acc_of(cg, t), "").unwrap();
                let off = cg.add(c_base, cg.add(cg.mul(row, g.c_m), col));
                cg.store(k.out, off, v, DType::F32);
                if let Some(finish) = finish {
                    let mut idx = batch_index.clone();
                    idx.extend(cg.unravel(row, out_dims.1));
                    idx.extend(cg.unravel(col, out_dims.2));
                    debug_assert_eq!(
                        idx.len(),
                        out_dims.0.len() + out_dims.1.len() + out_dims.2.len()
                    );
                    finish(cg, &idx);
                }
            });
        });
    }

    /// `<kernel>_threads_per_call`: the host emulation of a tiled kernel covers a whole block
    /// per call.
    fn export_threads_per_call(&self, k: &Kernel<'ctx>) {
        let name = format!(
            "{}_threads_per_call",
            k.f.get_name().to_str().unwrap_or("kernel")
        );
        let i32t = self.ctx.i32_type();
        let g = self.m.add_global(i32t, None, &name);
        g.set_initializer(&i32t.const_int(TILE_THREADS as u64, false));
        g.set_constant(true);
    }
}
