//! Tiled matrix products for the GPU: a block of 16×16 threads computes a 16×16 output tile,
//! staging 16-wide K-slices of both operands through shared memory.
//!
//! Contract: a `dot` whose [`geometry`] has at least [`TILE`] rows, columns
//! and contracting elements ([`tiled_geometry`]), and a convolution without groups whose implicit
//! GEMM (rows: output pixels, columns: output channels, K: input channels × taps, the input read
//! through the window with zeros in the padding) is that large ([`conv_pays`]), become tiled
//! kernels: both are a [`Product`], operands addressed by closures. Each thread
//! `t` of a block (row `t / 16`, column `t % 16` of the tile) loads one element of each operand
//! slice (zero outside the matrix), the block waits at a barrier, each thread accumulates its
//! element's 16 products from shared memory, and the block waits again before the next slice;
//! every loaded element serves 16 threads instead of one. Products are accumulated in K order
//! with `llvm.fmuladd`, as the per-element kernel does (`grid.rs`); with `precision: f16` the
//! tiles hold halves and each 16-wide K-slice is one f16 block sum (`fma.rn.f16`) added into the
//! f32 accumulator, the per-element kernel's blocks (`half.rs`).
//!
//! In an output fusion (dot + bias + GELU, convolution + batch norm + ReLU6) whose root has the
//! heavy op's shape, each thread applies the fused epilogue to the element it stored (`Finish`),
//! as the per-element kernel does after its product.
//!
//! The same phase bodies have two forms. On the device (`GridForm::Device`): the kernel runs once per thread
//! (`gid = block · 256 + t`), the tiles are `addrspace(3)` (`.shared`) arrays and the barriers
//! `bar.sync 0`. Host emulation (`GridForm::Host`): the kernel runs once per *block*
//! (`gid = block`) and runs each phase for all 256 threads before the next one starts, which is
//! exactly what the barriers guarantee; the tiles and each thread's accumulator are stack
//! arrays. The host kernel exports `<kernel>_threads_per_call` (= 256) so that an emulating
//! driver (`tests/harness/fake_cuda.c`) knows to call it once per block.

use super::Cg;
use crate::codegen::core::Kernel;
use crate::codegen::core::layout::{Geometry, geometry, physical_strides};
use crate::ir::{DType, DotDims, Shape, Window};
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::module::Linkage;
use inkwell::values::{FloatValue, IntValue, PointerValue};

/// Tile side: 16×16 threads is one block of `ptx::BLOCK_THREADS` (256), and a 16-element
/// K-slice of both operands is 2 KiB of shared memory: far below any SM's limit.
pub const TILE: usize = 16;

/// Threads per block of a tiled kernel.
pub const TILE_THREADS: usize = TILE * TILE;

/// The geometry of a dot a tiled kernel computes, when one pays: below 16 rows or columns most
/// of a 16×16 block would idle (a batch-1 dense layer is a matrix-vector product, where each
/// thread's column of weights is already read once, coalesced, by the per-element kernel).
pub fn tiled_geometry(d: &DotDims, lhs: &Shape, rhs: &Shape, out: &Shape) -> Option<Geometry> {
    let g = geometry(d, lhs, rhs, out)?;
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

/// What a thread does with its finished element: given the output's logical index, compute and
/// store the fused epilogue (the heavy value is already in the output buffer there).
pub(super) type Finish<'f, 'a, 'ctx> = &'f dyn Fn(&Cg<'a, 'ctx>, &[IntValue<'ctx>]);

/// Element addressing of a product: given (batch, i, j) — (row, k) for A, (k, col) for B,
/// (row, col) for the output — an element offset, and for A whether the element exists (false in
/// a convolution's padding; the tile then holds zero).
type At<'f, 'a, 'ctx> =
    &'f dyn Fn(&Cg<'a, 'ctx>, IntValue<'ctx>, IntValue<'ctx>, IntValue<'ctx>) -> IntValue<'ctx>;
type AtIf<'f, 'a, 'ctx> = &'f dyn Fn(
    &Cg<'a, 'ctx>,
    IntValue<'ctx>,
    IntValue<'ctx>,
    IntValue<'ctx>,
) -> (Option<IntValue<'ctx>>, IntValue<'ctx>);
type Index<'f, 'a, 'ctx> = &'f dyn Fn(
    &Cg<'a, 'ctx>,
    IntValue<'ctx>,
    IntValue<'ctx>,
    IntValue<'ctx>,
) -> Vec<IntValue<'ctx>>;

/// `out[b, row, col] = Σ_k A(b, row, k) · B(b, k, col)` for `b < batch`, as a tiled kernel sees it.
pub(super) struct Product<'f, 'a, 'ctx> {
    pub batch: usize,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: AtIf<'f, 'a, 'ctx>,
    pub b: At<'f, 'a, 'ctx>,
    pub c: At<'f, 'a, 'ctx>,
    /// The output's logical index of (b, row, col), for a fused epilogue.
    pub index: Index<'f, 'a, 'ctx>,
}

/// Whether a convolution of input `x`, kernel `w` and output `out` is large enough to tile.
pub fn conv_pays(groups: usize, x: &Shape, w: &Shape, out: &Shape) -> bool {
    let f32s = [x, w, out].iter().all(|s| s.dtype == DType::F32);
    let pixels: usize = out.dims[0] * out.dims[2..].iter().product::<usize>();
    let k: usize = w.dims[1..].iter().product();
    f32s && groups == 1 && pixels >= TILE && out.dims[1] >= TILE && k >= TILE
}

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
        // Offsets of batch matrix `b` in each operand: its index along every batch dim.
        let batch_offsets = |cg: &Self, b: IntValue<'ctx>, which: usize| {
            let mut rest = b;
            let mut off = cg.i64(0);
            for &(size, ls, rs, os) in g.batch.iter().rev() {
                let i =
                    cg.b.build_int_unsigned_rem(rest, cg.i64(size as u64), "")
                        .unwrap();
                rest =
                    cg.b.build_int_unsigned_div(rest, cg.i64(size as u64), "")
                        .unwrap();
                off = cg.add(off, cg.mul(i, [ls, rs, os][which]));
            }
            off
        };
        let a = |cg: &Self, b, row, kk| {
            let off = cg.add(cg.mul(row, g.a_m), cg.mul(kk, g.a_k));
            (None, cg.add(batch_offsets(cg, b, 0), off))
        };
        let bm =
            |cg: &Self, b, kk, col| cg.add(batch_offsets(cg, b, 1), cg.add(cg.mul(kk, g.b_k), col));
        let c = |cg: &Self, b, row, col| {
            cg.add(batch_offsets(cg, b, 2), cg.add(cg.mul(row, g.c_m), col))
        };
        let index = |cg: &Self, b: IntValue<'ctx>, row, col| {
            let mut idx = cg.unravel(b, out_dims.0);
            idx.extend(cg.unravel(row, out_dims.1));
            idx.extend(cg.unravel(col, out_dims.2));
            idx
        };
        let p = Product {
            batch: g.batch.iter().map(|b| b.0).product(),
            m: g.m,
            n: g.n,
            k: g.k,
            a: &a,
            b: &bm,
            c: &c,
            index: &index,
        };
        self.tiled(k, &p, bufs, finish);
    }

    /// The tiled convolution (an implicit GEMM: no im2col buffer, the load phase reads the input
    /// through the window) of input `x`, kernel `w` into `out`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn conv_tiled(
        &self,
        k: &Kernel<'ctx>,
        window: &Window,
        (x, w, out): (&Shape, &Shape, &Shape),
        bufs: (PointerValue<'ctx>, PointerValue<'ctx>),
        finish: Option<Finish<'_, 'a, 'ctx>>,
    ) {
        let (xs, ws, os) = (
            physical_strides(x),
            physical_strides(w),
            physical_strides(out),
        );
        let sp = window.rank();
        // Rows: (n, output position...); K: (input channel, tap...); columns: output channels.
        let mut row_dims = vec![out.dims[0]];
        row_dims.extend_from_slice(&out.dims[2..]);
        let mut k_dims = vec![w.dims[1]];
        k_dims.extend_from_slice(&window.size);
        let a = |cg: &Self, _b, row, kk| {
            let r = cg.unravel(row, &row_dims);
            let t = cg.unravel(kk, &k_dims);
            let mut ok = cg.ctx.bool_type().const_all_ones();
            let mut off = cg.add(cg.mul(r[0], xs[0]), cg.mul(t[0], xs[1]));
            for d in 0..sp {
                let p = cg.window_pos(r[1 + d], t[1 + d], window, d);
                ok =
                    cg.b.build_and(ok, cg.in_range(p, x.dims[2 + d]), "")
                        .unwrap();
                let p = cg.clamp_index(p, x.dims[2 + d]);
                off = cg.add(off, cg.mul(p, xs[2 + d]));
            }
            (Some(ok), off)
        };
        let b = |cg: &Self, _b, kk, col| {
            let t = cg.unravel(kk, &k_dims);
            let mut off = cg.add(cg.mul(col, ws[0]), cg.mul(t[0], ws[1]));
            for d in 0..sp {
                off = cg.add(off, cg.mul(t[1 + d], ws[2 + d]));
            }
            off
        };
        let index = |cg: &Self, _b, row, col| {
            let r = cg.unravel(row, &row_dims);
            let mut idx = vec![r[0], col];
            idx.extend_from_slice(&r[1..]);
            idx
        };
        let c = |cg: &Self, bb, row, col| {
            let idx = index(cg, bb, row, col);
            cg.strided(&idx, &os)
        };
        let p = Product {
            batch: 1,
            m: row_dims.iter().product(),
            n: out.dims[1],
            k: k_dims.iter().product(),
            a: &a,
            b: &b,
            c: &c,
            index: &index,
        };
        self.tiled(k, &p, bufs, finish);
    }

    /// The tiled kernel of product `p` (operand buffers `bufs`).
    fn tiled(
        &self,
        k: &Kernel<'ctx>,
        p: &Product<'_, 'a, 'ctx>,
        bufs: (PointerValue<'ctx>, PointerValue<'ctx>),
        finish: Option<Finish<'_, 'a, 'ctx>>,
    ) {
        let gid = self.be.gid.get().expect("tiled kernels are grid kernels");
        let f32t = self.ctx.f32_type();
        // With `precision: f16` the tiles hold block terms (halves on the device, `half.rs`) and
        // each K-slice of 16 is one f16 block sum.
        let f16_sums = self.f16_sums();
        let term_ty = if f16_sums { self.block_type() } else { f32t };
        let tile_ty = term_ty.array_type(TILE_THREADS as u32);
        let threads = self.i64(TILE_THREADS as u64);
        let (block, thread) = if self.be.on_device() {
            (
                self.b.build_int_unsigned_div(gid, threads, "").unwrap(),
                Some(self.b.build_int_unsigned_rem(gid, threads, "").unwrap()),
            )
        } else {
            (gid, None)
        };
        // The invocations: threads on the GPU, blocks in the host emulation.
        let blocks = p.batch * p.m.div_ceil(TILE) * p.n.div_ceil(TILE);
        self.be.grid_size.set(Some(if self.be.on_device() {
            blocks * TILE_THREADS
        } else {
            blocks
        }));
        if !self.be.on_device() {
            self.export_threads_per_call(k);
        }
        // Shared tiles (a K-slice of each operand) and each thread's accumulator.
        let (a_tile, b_tile, acc) = if self.be.on_device() {
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
                self.slot(k.f, f32t.array_type(TILE_THREADS as u32).into()),
            )
        };
        // Element `t` of a tile array (the accumulator is one scalar per thread on the GPU).
        let elem = |cg: &Self, arr: PointerValue<'ctx>, t: IntValue<'ctx>| unsafe {
            cg.b.build_in_bounds_gep(arr, &[cg.i64(0), t], "").unwrap()
        };
        let acc_of = |cg: &Self, t: IntValue<'ctx>| {
            if cg.be.on_device() {
                acc
            } else {
                elem(cg, acc, t)
            }
        };
        // Which tile of which matrix of the batch this block computes.
        let tiles_n = p.n.div_ceil(TILE) as u64;
        let tiles_m = p.m.div_ceil(TILE) as u64;
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
        let batch = self
            .b
            .build_int_unsigned_div(rest, self.i64(tiles_m), "")
            .unwrap();
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
            if cg.be.on_device() {
                let f = inkwell::intrinsics::Intrinsic::find("llvm.nvvm.barrier0")
                    .and_then(|i| i.get_declaration(cg.m, &[]))
                    .expect("LLVM 14 has llvm.nvvm.barrier0");
                cg.b.build_call(f, &[], "").unwrap();
            }
        };
        each_thread(self, &|cg, t| {
            cg.b.build_store(acc_of(cg, t), cg.f32c(0.0)).unwrap();
        });
        self.for_loop(p.k.div_ceil(TILE), &mut |cg, slice| {
            let k0 = cg.mul(slice, TILE as u64);
            // Phase 1: thread (ty, tx) loads A[row, k0 + tx] and B[k0 + ty, col] (0 outside).
            each_thread(cg, &|cg, t| {
                let (ty, tx, row, col) = place(cg, t);
                let ka = cg.add(k0, tx);
                let kb = cg.add(k0, ty);
                // Out-of-range threads read element 0 (always there) and keep zero.
                let load =
                    |cg: &Self,
                     ok: IntValue<'ctx>,
                     off: IntValue<'ctx>,
                     read: &dyn Fn(&Self, IntValue<'ctx>) -> FloatValue<'ctx>| {
                        let at = cg.select(ok, off.into(), cg.i64(0).into()).into_int_value();
                        let v = read(cg, at);
                        cg.select(ok, v.into(), term_ty.const_zero().into())
                    };
                let mut a_ok =
                    cg.b.build_and(below(cg, row, p.m), below(cg, ka, p.k), "")
                        .unwrap();
                let (exists, a_off) = (p.a)(cg, batch, row, ka);
                if let Some(e) = exists {
                    a_ok = cg.b.build_and(a_ok, e, "").unwrap();
                }
                let a = load(cg, a_ok, a_off, &|cg, at| {
                    let v = cg.load(bufs.0, at, DType::F32).into_float_value();
                    if f16_sums { cg.to_block(v) } else { v }
                });
                let b_ok =
                    cg.b.build_and(below(cg, kb, p.k), below(cg, col, p.n), "")
                        .unwrap();
                let b_off = (p.b)(cg, batch, kb, col);
                let b = load(cg, b_ok, b_off, &|cg, at| {
                    if f16_sums {
                        cg.load_weight_block(bufs.1, at)
                    } else {
                        cg.load_weight(bufs.1, at)
                    }
                });
                cg.b.build_store(elem(cg, a_tile, t), a).unwrap();
                cg.b.build_store(elem(cg, b_tile, t), b).unwrap();
            });
            barrier(cg);
            // Phase 2: acc += Σ_j A_tile[ty, j] · B_tile[j, tx], in K order (with `f16`: the 16
            // products summed in f16 from zero, then that block sum added into acc).
            each_thread(cg, &|cg, t| {
                let (ty, tx, _, _) = place(cg, t);
                let slot = acc_of(cg, t);
                let acc = cg.b.build_load(slot, "").unwrap().into_float_value();
                let mut sum = if f16_sums { term_ty.const_zero() } else { acc };
                for j in 0..TILE as u64 {
                    let ai = cg.add(cg.mul(ty, TILE as u64), cg.i64(j));
                    let bi = cg.add(cg.i64(j * TILE as u64), tx);
                    let a = cg.b.build_load(elem(cg, a_tile, ai), "").unwrap();
                    let b = cg.b.build_load(elem(cg, b_tile, bi), "").unwrap();
                    let (a, b) = (a.into_float_value(), b.into_float_value());
                    sum = if f16_sums {
                        cg.block_fma(a, b, sum)
                    } else {
                        cg.fma(a, b, sum)
                    };
                }
                if f16_sums {
                    sum = cg.b.build_float_add(acc, cg.widen_block(sum), "").unwrap();
                }
                cg.b.build_store(slot, sum).unwrap();
            });
            barrier(cg);
        });
        // Phase 3: each thread inside the matrix stores its element.
        each_thread(self, &|cg, t| {
            let (_, _, row, col) = place(cg, t);
            let ok =
                cg.b.build_and(below(cg, row, p.m), below(cg, col, p.n), "")
                    .unwrap();
            cg.if_then(ok, &mut |cg| {
                let v = cg.b.build_load(acc_of(cg, t), "").unwrap();
                cg.store(k.out, (p.c)(cg, batch, row, col), v, DType::F32);
                if let Some(finish) = finish {
                    finish(cg, &(p.index)(cg, batch, row, col));
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
