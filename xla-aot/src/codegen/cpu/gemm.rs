//! Register-blocked matrix multiply: the kernel behind every `dot` whose operands collapse to
//! `C[b, m, n] = Σ_k A[b, m, k] · B[b, k, n]` with `n` contiguous in `C` (and in `B` unless `B`
//! is a packed weight).
//!
//! Contract:
//! - [`geometry`] decides whether a dot takes this path; the same answer decides, at compile
//!   time, whether its weight operand is stored packed ([`pack`]), so the two never disagree.
//! - A *panel* is `NR = nv · lanes` columns of `B`. A packed weight is `⌈N/NR⌉` panels, each
//!   `K × NR` floats contiguous (zero-padded past `N`), so the micro-kernel streams it with
//!   unit-stride vector loads and never reads a column twice per row tile.
//! - The micro-kernel keeps an `mr × nv` tile of vector accumulators in registers
//!   ([`Tiles::for_target`] derives `mr`, `nv`, the K-block and the row block from the target's
//!   vector width, register count and cache sizes) and accumulates with `llvm.fmuladd` in
//!   increasing `k`: every output element is the same sum in the same order as the reference's
//!   loop, so results do not depend on the tile sizes.
//! - Work is split into tasks by output tiles (column panels, or row tiles when there are fewer
//!   panels than threads); the kernel runs them through the app's parallel-for hook
//!   (`parallel.rs`) when one is registered and the product is large enough to pay for it.
//! - The f32 kernel reads A in place; the bf16 and int8 kernels pack it, each task into its own
//!   slice of the arena's kernel scratch (`gemm_pack.rs`, which [`gemm_tiles`] and the task split
//!   are shared with, so the buffer plan reserves what the kernel uses).

use super::Cg;
use super::byte_store::Finished;
use super::epilogue::{RegEpilogue, TilePos};
use super::gemm_pack::{self, APack};
use super::gemm_tiles::{Kind, gemm_tiles, units};
pub use super::gemm_tiles::{balanced, rows_for_issue};
use super::vector::{Locality, VecCol, vectors};
use crate::codegen::core::Kernel;
use crate::codegen::core::layout::Geometry;
use crate::codegen::core::packing::Tiles;
use crate::ir::{DType, Precision, Shape};
use inkwell::types::VectorType;
use inkwell::values::{FunctionValue, IntValue, PointerValue, VectorValue};
use inkwell::{AddressSpace, IntPredicate};

/// Matrix-vector products (one row tile) stream their packed panels from L3 or memory: each
/// panel's line this many K steps ahead is prefetched (with 16-float panels, 1 KiB ahead per
/// stream: about the L3 latency, ~50 ns, at the ~20 GB/s one stream of a core draws).
const STREAM_PREFETCH_K: u64 = 16;

/// Bytes per cache line of every CPU target (x86-64 and Arm cores alike).
const CACHE_LINE: usize = 64;

/// The static plan of one GEMM kernel.
struct Plan {
    t: Tiles,
    /// Panels per column chunk (several for thin products, see `gemm_tiles::MIN_CHAINS`).
    pp: usize,
    packed: bool,
    /// Column chunks: full ones, then one partial chunk if `n` is not a multiple.
    full_chunks: usize,
    part_cols: usize,
    full_rows: usize,
    part_rows: usize,
    /// Split tasks over column chunks (else over row tiles).
    split_cols: bool,
    /// Column chunks outside the K-blocks ([`chunks_outer`]): each chunk's output tile stays in
    /// L1 across the K-blocks instead of making a round trip through memory per K-block.
    chunks_outer: bool,
    /// Tiles of several rows prefetch the next column chunk's panels at their own K step: the
    /// packed weight is larger than the L2 and there are at most [`STREAM_ROW_TILES`] row tiles.
    prefetch_next: bool,
    /// `vdpbf16ps` on bfloat16 pairs (`gemm_bf16.rs`): B is packed in pairs, A is packed per row
    /// block.
    bf16: bool,
    /// f16 products summed in f16 blocks (`gemm_f16.rs`): B is packed in f16, `precision: f16`
    /// on a target with FP16 arithmetic.
    f16: bool,
    /// `vpdpbusd` on int8 quads (`gemm_i8.rs`) with this byte offset of A: B is packed in quads,
    /// A is packed per row block.
    vnni: Option<i32>,
    /// The output fusion's register epilogue and the role of each output dim.
    epi: Option<(RegEpilogue, Vec<DimRole>)>,
    /// The epilogue's first step, an integer per-column bias, where the int8 kernel adds it to
    /// its i32 sums' start instead (`kernel.rs` `sum_bias`); `epi` then holds the other steps.
    sum_bias: Option<RegEpilogue>,
    /// A stored as bytes of this type and bias (`byte_storage.rs`), which the int8 kernel's
    /// packing widens where it would convert f32.
    a_bytes: Option<(DType, i32)>,
    /// The bf16 or int8 kernel packs A into per-task slices of the kernel scratch (`gemm_pack.rs`);
    /// `None`: into a stack buffer.
    slices: Option<APack>,
}

/// Most row tiles of a product whose packed weight streams from beyond the L2 for which the
/// tiles prefetch the next column chunk's panels ([`Plan::prefetch_next`]): with few row tiles,
/// the first tile of each chunk waiting on memory is a large share of the time (the 40-row head
/// of issue 46, 7 row tiles on AVX2, medians of 1-second runs interleaved on a shared AMD EPYC:
/// 14.8-15.7 ms with it, 15.2-16.7 without, both with [`chunks_outer`]). Into the L2 only: into
/// the L1 it evicted the current panel where the panels stream from L3 (the bidirectional LSTM's
/// 40 × 512 → 2 048 products slowed 10-25%). Taller products amortise that wait and would only
/// pay the extra load slot.
const STREAM_ROW_TILES: usize = 8;

/// Whether the column chunks of a GEMM run outside its K-blocks: an f32 product (A read in
/// place, so no packed A is redone per chunk) of several K-blocks whose whole A fits in three
/// quarters of the L2 (the rest holds the streaming panels), so that every chunk's K-blocks
/// re-read A from L2 while the chunk's output tile stays in L1 across them. With the K-blocks
/// outside, the whole output makes a round trip per K-block: the 40 × 1 024 → 8 210 head of
/// issue 46 (A 160 KB) wrote and re-read its 1.3 MB output four times.
fn chunks_outer(g: &Geometry, t: &Tiles, kind: Kind, target: &crate::target::Target) -> bool {
    let f32_a = !kind.bf16 && !kind.vnni;
    f32_a && g.k > t.kc && (g.m * g.k * 4) as u64 * 4 <= target.l2_bytes * 3
}

/// Where an output dim of a dot lies in the micro-tile (for a register epilogue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DimRole {
    Row,
    Col,
    Unit,
}

impl DimRole {
    /// Where a register epilogue finds this dim in the tile.
    fn tile_pos<'ctx>(self, cg: &Cg<'_, 'ctx>) -> TilePos<'ctx> {
        match self {
            DimRole::Row => TilePos::Row,
            DimRole::Col => TilePos::Col,
            DimRole::Unit => TilePos::At(cg.i64(0)),
        }
    }
}

/// The role of each output dim of a dot with geometry `g` whose first `lfree` output dims are
/// the lhs's free dims, if a register epilogue can address the tile: no batch dims, and the rows
/// (columns) are at most one non-unit output dim.
pub(super) fn dim_roles(g: &Geometry, out: &Shape, lfree: usize) -> Option<Vec<DimRole>> {
    if !g.batch.is_empty() || out.dtype != DType::F32 {
        return None;
    }
    let mut roles = Vec::with_capacity(out.rank());
    let (mut rows, mut cols) = (0, 0);
    for (d, &size) in out.dims.iter().enumerate() {
        roles.push(if size == 1 {
            DimRole::Unit
        } else if d < lfree {
            rows += 1;
            DimRole::Row
        } else {
            cols += 1;
            DimRole::Col
        });
    }
    (rows <= 1 && cols <= 1).then_some(roles)
}

impl Plan {
    fn chunk_width(&self) -> usize {
        self.pp * self.t.nr()
    }

    fn chunks(&self) -> usize {
        self.full_chunks + usize::from(self.part_cols > 0)
    }

    fn row_tiles(&self) -> usize {
        self.full_rows + usize::from(self.part_rows > 0)
    }

    fn vectors(&self, cols: usize) -> Vec<VecCol> {
        vectors(cols, self.t.lanes, self.packed)
    }
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// `C = A · B` for the dot of kernel `k` (`a`, `b`, `c` are its buffers; `b` packed or not).
    pub(super) fn gemm(
        &self,
        k: &Kernel<'ctx>,
        g: &Geometry,
        (ai, bi): (usize, usize),
        packed: bool,
        epi: Option<(RegEpilogue, Vec<DimRole>)>,
    ) {
        let bf16 = packed && self.be.bf16_pairs.get();
        let f16 = packed
            && self.be.half_rhs.get() == Some(DType::F16)
            && self.hlo.precision == Precision::F16
            && self.target.has_f16_arith();
        let vnni = self.be.vnni.get().filter(|_| packed);
        // An integer bias, the epilogue's first step along the columns, goes into the int8
        // sums' start (`kernel.rs` `sum_bias`: exact), as the int8 convolutions' does.
        let (sum_bias, epi) = match epi {
            Some((e, roles))
                if vnni.is_some()
                    && self.be.sum_bias.get()
                    && roles.get(1) == Some(&DimRole::Col) =>
            {
                let rest = RegEpilogue {
                    steps: e.steps[1..].to_vec(),
                };
                let bias = RegEpilogue {
                    steps: e.steps[..1].to_vec(),
                };
                (Some(bias), Some((rest, roles)))
            }
            other => (None, other),
        };
        let kind = Kind {
            bf16,
            f16,
            vnni: vnni.is_some(),
        };
        let a_bytes = self
            .be
            .args_stored
            .borrow()
            .get(ai)
            .copied()
            .flatten()
            .map(|d| {
                let bias = self.be.args_bias.borrow().get(ai).copied().unwrap_or(0);
                (d, bias)
            });
        assert!(
            a_bytes.is_none() || vnni.is_some(),
            "byte_storage.rs gives a dot byte operands only on the int8 kernel"
        );
        let t = gemm_tiles(g, self.target, kind);
        // Each task packs A (bf16 pairs, int8 quads) into its own slice of the kernel scratch
        // (its last argument) when the buffer plan reserved it, else into a stack buffer.
        let slices = (bf16 || vnni.is_some())
            .then(|| gemm_pack::a_pack(g, &t, kind))
            .filter(|p| self.be.a_pack.get() == Some(*p));
        let (pp, _, split_cols) = units(g, &t);
        let cw = pp * t.nr();
        let chunks_outer = chunks_outer(g, &t, kind, self.target);
        let plan = Plan {
            t,
            pp,
            packed,
            full_chunks: g.n / cw,
            part_cols: g.n % cw,
            full_rows: g.m / t.mr,
            part_rows: g.m % t.mr,
            split_cols,
            chunks_outer,
            prefetch_next: packed
                && (g.k * g.n * 4) as u64 > self.target.l2_bytes
                && g.m.div_ceil(t.mr) <= STREAM_ROW_TILES,
            bf16,
            f16,
            vnni,
            epi,
            sum_bias,
            a_bytes,
            slices,
        };
        let units = if plan.split_cols {
            plan.chunks()
        } else {
            plan.row_tiles()
        };
        // No more tasks than the scratch has slices.
        let units = slices.map_or(units, |p| units.min(p.tasks));
        let bufs: Vec<PointerValue<'ctx>> = std::iter::once(k.out)
            .chain(k.args.iter().copied())
            .collect();
        self.run_tasks(
            k,
            &bufs,
            &k.noalias,
            units,
            g.flops(),
            &|cg, f, p, ti, nt| {
                let tk = Kernel {
                    f,
                    out: p[0],
                    args: p[1..].to_vec(),
                    noalias: k.noalias.clone(),
                };
                cg.gemm_task(f, g, &plan, &tk, (tk.args[ai], tk.args[bi], tk.out), ti, nt);
            },
        );
    }

    /// The body of task `ti` of `nt`.
    #[allow(clippy::too_many_arguments)]
    fn gemm_task(
        &self,
        f: FunctionValue<'ctx>,
        g: &Geometry,
        plan: &Plan,
        tk: &Kernel<'ctx>,
        (a, b, c): (PointerValue<'ctx>, PointerValue<'ctx>, PointerValue<'ctx>),
        ti: IntValue<'ctx>,
        nt: IntValue<'ctx>,
    ) {
        let t = &plan.t;
        let (rl, rh, cl, ch) = if plan.split_cols {
            let (lo, hi) = self.share(ti, nt, plan.chunks());
            (self.i64(0), self.i64(plan.row_tiles() as u64), lo, hi)
        } else {
            let (lo, hi) = self.share(ti, nt, plan.row_tiles());
            (lo, hi, self.i64(0), self.i64(plan.chunks() as u64))
        };
        let bsizes: Vec<usize> = g.batch.iter().map(|x| x.0).collect();
        let nkb = g.k.div_ceil(t.kc);
        let nrb = plan.row_tiles().div_ceil(t.mc_tiles);
        let apack = match plan.slices {
            // This task's slice of the kernel scratch (the last argument).
            Some(p) => {
                let scratch = *tk.args.last().expect("the scratch argument");
                let dwords = self
                    .b
                    .build_pointer_cast(
                        scratch,
                        self.ctx.i32_type().ptr_type(AddressSpace::default()),
                        "",
                    )
                    .unwrap();
                Some(self.gep(dwords, self.mul(ti, p.slice_dwords as u64)))
            }
            None if plan.vnni.is_some() => Some(self.a_quads_buffer(f, t)),
            None => plan.bf16.then(|| self.a_pairs_buffer(f, t)),
        };
        self.loop_nest(&bsizes, &mut |cg, bi| {
            let mut offs = [cg.i64(0), cg.i64(0), cg.i64(0)];
            for (j, &(_, sa, sb, sc)) in g.batch.iter().enumerate() {
                offs[0] = cg.add(offs[0], cg.mul(bi[j], sa));
                offs[1] = cg.add(offs[1], cg.mul(bi[j], sb));
                offs[2] = cg.add(offs[2], cg.mul(bi[j], sc));
            }
            let (a, b, c) = (cg.gep(a, offs[0]), cg.gep(b, offs[1]), cg.gep(c, offs[2]));
            // One K-block `kb` of column chunks [cl, ch).
            let k_block =
                |cg: &Self, kb: IntValue<'ctx>, (cl, ch): (IntValue<'ctx>, IntValue<'ctx>)| {
                    let k0 = cg.mul(kb, t.kc as u64);
                    // One K-block: its length a constant (the `smlad` loop's count of steps is then
                    // known, `quad_dot.rs`).
                    let klen = if nkb == 1 {
                        cg.i64(g.k as u64)
                    } else {
                        cg.umin(
                            cg.i64(t.kc as u64),
                            cg.b.build_int_sub(cg.i64(g.k as u64), k0, "").unwrap(),
                        )
                    };
                    let first =
                        cg.b.build_int_compare(IntPredicate::EQ, kb, cg.i64(0), "")
                            .unwrap();
                    let last =
                        cg.b.build_int_compare(IntPredicate::EQ, kb, cg.i64(nkb as u64 - 1), "")
                            .unwrap();
                    cg.for_loop(nrb, &mut |cg, rb| {
                        let lo = cg.umax(cg.mul(rb, t.mc_tiles as u64), rl);
                        let hi = cg.umin(cg.mul(cg.add(rb, cg.i64(1)), t.mc_tiles as u64), rh);
                        let apack = apack.map(|buf| {
                            let r0 = cg.mul(lo, t.mr as u64);
                            let r1 = cg.umin(cg.mul(hi, t.mr as u64), cg.i64(g.m as u64));
                            match plan.vnni {
                                Some(o) => cg.pack_a_quads(
                                    a,
                                    g,
                                    buf,
                                    t.kc.div_ceil(4),
                                    (r0, r1),
                                    (k0, klen),
                                    (o, plan.a_bytes),
                                ),
                                None => {
                                    cg.pack_a_pairs(a, g, buf, t.kc.div_ceil(2), (r0, r1), k0, klen)
                                }
                            }
                            (buf, r0)
                        });
                        cg.for_range(cl, ch, &mut |cg, jr| {
                            cg.for_range(lo, hi, &mut |cg, ir| {
                                cg.tile_variants(
                                    f,
                                    g,
                                    plan,
                                    tk,
                                    (a, b, c),
                                    ir,
                                    jr,
                                    (k0, klen),
                                    (first, last),
                                    apack,
                                );
                            });
                        });
                    });
                };
            if plan.chunks_outer {
                cg.for_range(cl, ch, &mut |cg, jr| {
                    let next = cg.add(jr, cg.i64(1));
                    cg.for_loop(nkb, &mut |cg, kb| k_block(cg, kb, (jr, next)));
                });
            } else {
                cg.for_loop(nkb, &mut |cg, kb| k_block(cg, kb, (cl, ch)));
            }
        });
    }

    /// Dispatches row tile `ir`, column chunk `jr` to the micro-kernel of its static shape.
    #[allow(clippy::too_many_arguments)]
    fn tile_variants(
        &self,
        f: FunctionValue<'ctx>,
        g: &Geometry,
        plan: &Plan,
        tk: &Kernel<'ctx>,
        bufs: (PointerValue<'ctx>, PointerValue<'ctx>, PointerValue<'ctx>),
        ir: IntValue<'ctx>,
        jr: IntValue<'ctx>,
        ks: (IntValue<'ctx>, IntValue<'ctx>),
        first: (IntValue<'ctx>, IntValue<'ctx>),
        apack: Option<(PointerValue<'ctx>, IntValue<'ctx>)>,
    ) {
        let full_cols = plan.vectors(plan.chunk_width());
        let part_cols = plan.vectors(plan.part_cols);
        let cols_variant = |cg: &Self, rows: usize| {
            let run = |cg: &Self, cols: &[VecCol]| {
                cg.micro_tile(f, g, plan, tk, bufs, rows, cols, (ir, jr), ks, first, apack);
            };
            match (plan.full_chunks > 0, plan.part_cols > 0) {
                (true, false) => run(cg, &full_cols),
                (false, true) => run(cg, &part_cols),
                _ => {
                    let is_full =
                        cg.b.build_int_compare(
                            IntPredicate::ULT,
                            jr,
                            cg.i64(plan.full_chunks as u64),
                            "",
                        )
                        .unwrap();
                    cg.if_else(is_full, &mut |cg| run(cg, &full_cols), &mut |cg| {
                        run(cg, &part_cols)
                    });
                }
            }
        };
        match (plan.full_rows > 0, plan.part_rows > 0) {
            (true, false) => cols_variant(self, plan.t.mr),
            (false, true) => cols_variant(self, plan.part_rows),
            _ => {
                let is_full = self
                    .b
                    .build_int_compare(IntPredicate::ULT, ir, self.i64(plan.full_rows as u64), "")
                    .unwrap();
                self.if_else(is_full, &mut |cg| cols_variant(cg, plan.t.mr), &mut |cg| {
                    cols_variant(cg, plan.part_rows)
                });
            }
        }
    }

    /// One micro-tile: `rows` rows from `ir·mr`, the vectors `cols` of chunk `jr`, over
    /// `k ∈ [k0, k0 + klen)`; starts from zero in the first K-block, else from `C`.
    #[allow(clippy::too_many_arguments)]
    fn micro_tile(
        &self,
        f: FunctionValue<'ctx>,
        g: &Geometry,
        plan: &Plan,
        tk: &Kernel<'ctx>,
        (a, b, c): (PointerValue<'ctx>, PointerValue<'ctx>, PointerValue<'ctx>),
        rows: usize,
        cols: &[VecCol],
        (ir, jr): (IntValue<'ctx>, IntValue<'ctx>),
        (k0, klen): (IntValue<'ctx>, IntValue<'ctx>),
        (first, last): (IntValue<'ctx>, IntValue<'ctx>),
        apack: Option<(PointerValue<'ctx>, IntValue<'ctx>)>,
    ) {
        let t = &plan.t;
        let row0 = self.mul(ir, t.mr as u64);
        let col0 = self.mul(jr, plan.chunk_width() as u64);
        let acc: Vec<Vec<PointerValue<'ctx>>> = (0..rows)
            .map(|_| {
                cols.iter()
                    .map(|v| self.slot(f, self.vec_ty(v.lanes).into()))
                    .collect()
            })
            .collect();
        // Output offset of row i, vector v.
        let c_off = |cg: &Self, i: usize, v: &VecCol| {
            let r = cg.add(row0, cg.i64(i as u64));
            cg.add(cg.mul(r, g.c_m), cg.add(col0, cg.i64(v.col as u64)))
        };
        let init = |cg: &Self| {
            cg.if_else(
                first,
                &mut |cg| {
                    for (i, row) in acc.iter().enumerate() {
                        for (v, p) in cols.iter().zip(row) {
                            let _ = i;
                            cg.b.build_store(*p, cg.vec_ty(v.lanes).const_zero())
                                .unwrap();
                        }
                    }
                },
                &mut |cg| {
                    for (i, row) in acc.iter().enumerate() {
                        for (v, p) in cols.iter().zip(row) {
                            let off = c_off(cg, i, v);
                            let x = if v.store == v.lanes {
                                cg.vload(c, off, v.lanes)
                            } else {
                                let mut x = cg.vec_ty(v.lanes).const_zero();
                                for l in 0..v.store {
                                    let e = cg
                                        .load(c, cg.add(off, cg.i64(l as u64)), DType::F32)
                                        .into_float_value();
                                    x =
                                        cg.b.build_insert_element(
                                            x,
                                            e,
                                            cg.ctx.i32_type().const_int(l as u64, false),
                                            "",
                                        )
                                        .unwrap();
                                }
                                x
                            };
                            cg.b.build_store(*p, x).unwrap();
                        }
                    }
                },
            );
        };
        if let (Some((buf, r0)), Some(offset)) = (apack, plan.vnni) {
            // The integer loop initialises the tile: between K-blocks C holds its i32 sums.
            let row_in_block = self.b.build_int_sub(row0, r0, "").unwrap();
            // Each vector's integer bias (`Plan::sum_bias`): 0 + bias as the epilogue reads it.
            let bias: Option<Vec<VectorValue<'ctx>>> = plan
                .sum_bias
                .as_ref()
                .zip(plan.epi.as_ref())
                .map(|(b, (_, roles))| {
                    cols.iter()
                        .map(|v| {
                            let col = self.add(col0, self.i64(v.col as u64));
                            let role = |d: usize| roles[d].tile_pos(self);
                            // −0 + b is b for every b: the addition folds away.
                            let zero = VectorType::const_vector(&vec![
                                self.ctx
                                    .f32_type()
                                    .const_float(-0.0);
                                v.lanes as usize
                            ]);
                            let bf = self.apply_epilogue(b, tk, zero, row0, col, v, &role);
                            let i32v = self.ctx.i32_type().vec_type(v.lanes);
                            self.b.build_float_to_signed_int(bf, i32v, "").unwrap()
                        })
                        .collect()
                });
            self.i8_k_loop(
                f,
                g,
                (t.nr(), plan.pp),
                b,
                (&acc, &init),
                cols,
                (buf, t.kc.div_ceil(4)),
                (row_in_block, jr),
                (k0, klen),
                (first, last),
                (offset, bias.as_deref()),
            );
        } else if let Some((buf, r0)) = apack {
            init(self);
            let row_in_block = self.b.build_int_sub(row0, r0, "").unwrap();
            self.bf16_k_loop(
                g,
                (t.nr(), plan.pp),
                b,
                &acc,
                cols,
                (buf, t.kc.div_ceil(2)),
                (row_in_block, jr),
                (k0, klen),
                (rows == 1).then_some(STREAM_PREFETCH_K / 2),
            );
        } else if plan.f16 {
            init(self);
            self.f16_k_loop(
                f,
                g,
                (t.nr(), plan.pp),
                (a, b),
                &acc,
                cols,
                row0,
                (jr, k0, klen),
            );
        } else {
            init(self);
            self.f32_k_loop(
                g,
                plan,
                (a, b),
                &acc,
                cols,
                (row0, col0),
                (jr, k0, klen),
                rows,
            );
        }
        // The int8 kernel with integer weights leaves its i32 sums' bits in the tile
        // (`gemm_i8.rs`): f32(sum) after the last K-block, converted here so that the
        // epilogue's integer steps see the sums (`Cg::int_source`).
        let int_sums = plan.vnni.is_some() && apack.is_some() && self.be.unit_scales.get();
        let store_all = |cg: &Self, apply: bool| {
            for (i, row) in acc.iter().enumerate() {
                for (v, p) in cols.iter().zip(row) {
                    let off = c_off(cg, i, v);
                    let mut x = cg.b.build_load(*p, "").unwrap().into_vector_value();
                    if int_sums {
                        let i32v = cg.ctx.i32_type().vec_type(v.lanes);
                        let bits = cg.b.build_bit_cast(x, i32v, "").unwrap();
                        let f =
                            cg.b.build_signed_int_to_float(
                                bits.into_vector_value(),
                                cg.vec_ty(v.lanes),
                                "",
                            )
                            .unwrap();
                        x = if apply {
                            f
                        } else {
                            cg.b.build_select(last, f, x, "")
                                .unwrap()
                                .into_vector_value()
                        };
                    }
                    if let (true, Some((epi, roles))) = (apply, &plan.epi) {
                        let r = cg.add(row0, cg.i64(i as u64));
                        let col = cg.add(col0, cg.i64(v.col as u64));
                        let role = |d: usize| roles[d].tile_pos(cg);
                        x = cg.apply_epilogue(epi, tk, x, r, col, v, &role);
                    }
                    match cg.be.out_stored.get() {
                        // Bytes (`byte_storage.rs`: one K-block, so only finished values).
                        Some(d) if apply => cg.store_finished_bytes(
                            c,
                            &[Finished {
                                off,
                                val: x,
                                ints: false,
                                saturate: false,
                                col: v.col,
                                lanes: v.store,
                            }],
                            d,
                        ),
                        _ => cg.store_lanes(c, off, x, v.store),
                    }
                }
            }
        };
        match (&plan.epi, g.k.div_ceil(t.kc)) {
            (None, _) => store_all(self, false),
            (Some(_), 1) => store_all(self, true),
            (Some(_), _) => self.if_else(last, &mut |cg| store_all(cg, true), &mut |cg| {
                store_all(cg, false)
            }),
        }
    }
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// The K loop of an f32 micro-tile: `acc[i][j] += A[row0 + i, k] · B[k, cols[j]]` for
    /// `k ∈ [k0, k0 + klen)` with `llvm.fmuladd`, B read packed (widened from a narrow type,
    /// int8 panels scaled) or in place.
    #[allow(clippy::too_many_arguments)]
    fn f32_k_loop(
        &self,
        g: &Geometry,
        plan: &Plan,
        (a, b): (PointerValue<'ctx>, PointerValue<'ctx>),
        acc: &[Vec<PointerValue<'ctx>>],
        cols: &[VecCol],
        (row0, col0): (IntValue<'ctx>, IntValue<'ctx>),
        (jr, k0, klen): (IntValue<'ctx>, IntValue<'ctx>, IntValue<'ctx>),
        rows: usize,
    ) {
        let t = &plan.t;
        let nr = t.nr() as u64;
        let b_base: Vec<IntValue<'ctx>> = cols
            .iter()
            .map(|v| {
                if plan.packed {
                    let panel = self.add(self.mul(jr, plan.pp as u64), self.i64(v.col as u64 / nr));
                    self.add(
                        self.mul(panel, g.k as u64 * nr),
                        self.i64(v.col as u64 % nr),
                    )
                } else {
                    self.add(col0, self.i64(v.col as u64))
                }
            })
            .collect();
        let b_step = if plan.packed { nr } else { g.b_k };
        let a_row: Vec<IntValue<'ctx>> = (0..rows)
            .map(|i| self.mul(self.add(row0, self.i64(i as u64)), g.a_m))
            .collect();
        // int8 panels (`Packings::is_int8`): each column's scale, stored after the panels.
        let scales: Option<Vec<VectorValue<'ctx>>> = (plan.packed
            && self.be.half_rhs.get() == Some(DType::I8))
        .then(|| {
            let after_panels = g.n.div_ceil(t.nr()) * g.k * t.nr();
            cols.iter()
                .map(|v| {
                    let panel = self.add(self.mul(jr, plan.pp as u64), self.i64(v.col as u64 / nr));
                    let col = self.add(self.mul(panel, nr), self.i64(v.col as u64 % nr));
                    self.column_scales(b, after_panels, col, v.lanes)
                })
                .collect()
        });
        let fmas: Vec<FunctionValue<'ctx>> =
            cols.iter().map(|v| self.vec_fmuladd(v.lanes)).collect();
        let kend = self.add(k0, klen);
        let prefetch = rows == 1 && plan.packed;
        // A tile of several rows: the next chunk's panels at this K step, one line each (past
        // the last chunk a prefetch reads nothing: it never faults).
        let next_chunk = (rows > 1 && plan.prefetch_next).then(|| (plan.pp * g.k * t.nr()) as u64);
        self.for_range(k0, kend, &mut |cg, kk| {
            if let Some(next) = next_chunk {
                for (v, &base) in cols.iter().zip(&b_base) {
                    if (v.col * 4) % CACHE_LINE != 0 {
                        continue;
                    }
                    let line = cg.add(base, cg.add(cg.i64(next), cg.mul(kk, b_step)));
                    cg.prefetch_to(b, line, Locality::L2);
                }
            }
            if prefetch {
                // One line per panel (the vector at the panel's first column), ahead of the loads.
                let ahead = cg.mul(cg.add(kk, cg.i64(STREAM_PREFETCH_K)), b_step);
                for (v, &base) in cols.iter().zip(&b_base) {
                    if v.col as u64 % nr != 0 {
                        continue;
                    }
                    cg.prefetch(b, cg.add(base, ahead));
                }
            }
            let mut bv: Vec<VectorValue<'ctx>> = cols
                .iter()
                .zip(&b_base)
                .map(|(v, &base)| cg.vload(b, cg.add(base, cg.mul(kk, b_step)), v.lanes))
                .collect();
            if let Some(scales) = &scales {
                // q · s: exactly the weight (`packing.rs` `int8_columns`).
                for (w, s) in bv.iter_mut().zip(scales) {
                    *w = cg.b.build_float_mul(*w, *s, "").unwrap();
                }
            }
            let ak = cg.mul(kk, g.a_k);
            for (i, row) in acc.iter().enumerate() {
                let x = cg
                    .load(a, cg.add(a_row[i], ak), DType::F32)
                    .into_float_value();
                for (j, v) in cols.iter().enumerate() {
                    let s = cg.splat(x, v.lanes);
                    let old = cg.b.build_load(row[j], "").unwrap();
                    let new = cg.call(fmas[j], &[s.into(), bv[j].into(), old]);
                    cg.b.build_store(row[j], new).unwrap();
                }
            }
        });
    }
}
