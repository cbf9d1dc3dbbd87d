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

use super::epilogue::{RegEpilogue, Role};
use super::{Cg, Kernel, physical_strides};
use crate::ir::{DType, DotDims, Shape};
use crate::target::Target;
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::types::VectorType;
use inkwell::values::{BasicValue, FunctionValue, IntValue, PointerValue, VectorValue};

/// Independent accumulator chains that keep the FMA units busy: FMA latency (4 cycles on
/// Skylake, Zen 2-4 and Cortex-A78) times FMA pipes (2). A tile with fewer accumulators (a
/// matrix-vector product, M = 1) covers several panels at once to reach this many.
const MIN_CHAINS: usize = 8;

/// Bytes between addresses that map to the same L1D set, and the ways of a set, of the x86-64
/// cores the targets describe (32 KiB, 8 ways, 64-byte lines: 4 KiB). Arm L1Ds differ (A72:
/// 2 ways, A78: 4 ways of 16 KiB); there the rule is a weaker approximation.
const L1_SET_STRIDE: u64 = 4096;
const L1_WAYS: usize = 8;

/// Matrix-vector products (one row tile) stream their packed panels from L3 or memory: each
/// panel's line this many K steps ahead is prefetched (with 16-float panels, 1 KiB ahead per
/// stream: about the L3 latency, ~50 ns, at the ~20 GB/s one stream of a core draws).
const STREAM_PREFETCH_K: u64 = 16;

/// Most rows of one micro-tile; more than this only adds broadcasts a tile of this height
/// already amortises (BLIS' AVX-512 kernels use 12-14 rows).
const MAX_MR: usize = 14;

/// Smallest K-block: below this, loading and storing the accumulator tile per block costs more
/// than the block's FMAs.
const MIN_KC: usize = 64;

/// Largest K-block (targets with a large L1D and narrow panels): past this the accumulator
/// tile's loads and stores are already negligible.
const MAX_KC: usize = 512;

/// Tile sizes for one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tiles {
    /// f32 lanes per vector register.
    pub lanes: u32,
    /// Vector registers per panel row (panel width `nr = nv · lanes`).
    pub nv: usize,
    /// Rows per micro-tile.
    pub mr: usize,
    /// K-block: one packed panel's K-block (`kc · nr` floats) fills half the L1D, the other half
    /// holding the rows of A it meets. (Measured with AVX-512: a panel filling the whole L1D ran
    /// gemm256 at half speed; gemm512 and gemm1024 were 3-7% faster with it.)
    pub kc: usize,
    /// Row tiles per row block: a row block of `A` times one K-block fills half the L2.
    pub mc_tiles: usize,
}

impl Tiles {
    pub fn for_target(t: &Target) -> Tiles {
        let lanes = t.vector_bits / 32;
        let regs = t.vector_registers as usize;
        // 128-bit vectors with 32 registers (NEON): 3 vectors per panel row (the classic 8x12
        // kernel); otherwise 2, which keeps 16-register x86 at 6 rows.
        let nv = if lanes == 4 && regs >= 32 { 3 } else { 2 };
        // Accumulators, one register per B vector and one for the broadcast A value.
        let mr = ((regs - nv - 1) / nv).clamp(1, MAX_MR);
        let nr = nv * lanes as usize;
        let kc = (t.l1d_bytes as usize / 2 / (nr * 4)).clamp(MIN_KC, MAX_KC) / 8 * 8;
        let mc_tiles = ((t.l2_bytes as usize / 2) / (kc * 4) / mr).max(1);
        Tiles {
            lanes,
            nv,
            mr,
            kc,
            mc_tiles,
        }
    }

    /// Columns per packed panel.
    pub fn nr(&self) -> usize {
        self.nv * self.lanes as usize
    }
}

/// Rows per tile when `m` rows are cut into tiles of at most `mr`: as even as possible, so
/// 16 rows with `mr` 14 are two tiles of 8, not 14 and a 2-row tile that wastes registers.
pub fn balanced(m: usize, mr: usize) -> usize {
    let tiles = m.div_ceil(mr).max(1);
    m.div_ceil(tiles).max(1)
}

/// Rows per tile for `count` rows in tiles of at most `rows_max` rows of `nv` accumulator vectors
/// each (a tile's remainder is its own, smaller tile): the choice with the least FMA issue time,
/// where a tile's K-step costs `max(rows · nv, MIN_CHAINS)` FMA slots (fewer chains than that
/// wait on FMA latency). Ties go to taller tiles (fewer weight loads). Example: 32 output pixels
/// with 2 vectors per row and at most 6 rows: 6-row tiles leave a 2-row tile that costs as much as
/// a 4-row one (68 slots), 8 tiles of 4 rows take 64 (mobilenet_block on AVX2: 34.5 -> 30 µs).
pub fn rows_for_issue(count: usize, rows_max: usize, nv: usize) -> usize {
    let cost = |r: usize| {
        let (full, part) = (count / r, count % r);
        let tile = |rows: usize| (rows * nv).max(MIN_CHAINS);
        full * tile(r) + if part > 0 { tile(part) } else { 0 }
    };
    (1..=rows_max.clamp(1, count.max(1)))
        .rev()
        .min_by_key(|&r| cost(r))
        .unwrap_or(1)
}

/// A dot seen as a batch of row-major-ish matrix products (element strides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    /// Batch dims: (size, lhs stride, rhs stride, out stride).
    pub batch: Vec<(usize, u64, u64, u64)>,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// Stride of `m` and of `k` in the lhs.
    pub a_m: u64,
    pub a_k: u64,
    /// Stride of `k` in the rhs (its `n` has stride 1 when the rhs is not packed).
    pub b_k: u64,
    /// Whether the rhs's `n` has stride 1 (needed unless it is packed).
    pub b_n_unit: bool,
    /// Stride of `m` in the output (its `n` has stride 1).
    pub c_m: u64,
}

impl Geometry {
    pub fn flops(&self) -> u64 {
        let b: usize = self.batch.iter().map(|x| x.0).product();
        2 * (b * self.m * self.n * self.k) as u64
    }
}

/// `dims` (in the given order) as one index: its size and stride, if each dim's stride is the
/// next one's times its size (dims of size 1 are ignored: any stride will do for them).
fn collapse(all_dims: &[usize], strides: &[u64], dims: &[usize]) -> Option<(usize, u64)> {
    let kept: Vec<usize> = dims.iter().copied().filter(|&d| all_dims[d] != 1).collect();
    let size: usize = kept.iter().map(|&d| all_dims[d]).product();
    let Some(&last) = kept.last() else {
        return Some((1, 1));
    };
    for w in kept.windows(2) {
        if strides[w[0]] != strides[w[1]] * all_dims[w[1]] as u64 {
            return None;
        }
    }
    Some((size, strides[last]))
}

/// The matrix-product view of `dot(lhs, rhs) -> out`, or `None` when the dims do not collapse
/// (the kernel then uses the general loop nest).
pub fn geometry(d: &DotDims, lhs: &Shape, rhs: &Shape, out: &Shape) -> Option<Geometry> {
    if [lhs, rhs, out].iter().any(|s| s.dtype != DType::F32)
        || d.lhs_contracting.len() != 1
        || d.rhs_contracting.len() != 1
    {
        return None;
    }
    let (ls, rs, os) = (
        physical_strides(lhs),
        physical_strides(rhs),
        physical_strides(out),
    );
    let nb = d.lhs_batch.len();
    let lfree: Vec<usize> = (0..lhs.rank())
        .filter(|i| !d.lhs_batch.contains(i) && !d.lhs_contracting.contains(i))
        .collect();
    let rfree: Vec<usize> = (0..rhs.rank())
        .filter(|i| !d.rhs_batch.contains(i) && !d.rhs_contracting.contains(i))
        .collect();
    let (m, a_m) = collapse(&lhs.dims, &ls, &lfree)?;
    let k = lhs.dims[d.lhs_contracting[0]];
    let a_k = ls[d.lhs_contracting[0]];
    let (n, b_n) = collapse(&rhs.dims, &rs, &rfree)?;
    let b_k = rs[d.rhs_contracting[0]];
    let out_m: Vec<usize> = (nb..nb + lfree.len()).collect();
    let out_n: Vec<usize> = (nb + lfree.len()..out.rank()).collect();
    let (_, c_m) = collapse(&out.dims, &os, &out_m)?;
    let (_, c_n) = collapse(&out.dims, &os, &out_n)?;
    if c_n != 1 && n > 1 {
        return None;
    }
    let batch = (0..nb)
        .map(|b| {
            (
                lhs.dims[d.lhs_batch[b]],
                ls[d.lhs_batch[b]],
                rs[d.rhs_batch[b]],
                os[b],
            )
        })
        .collect();
    Some(Geometry {
        batch,
        m,
        k,
        n,
        a_m,
        a_k,
        b_k,
        b_n_unit: b_n == 1 || n == 1,
        c_m,
    })
}

/// Whether a dot with this geometry reads its rhs packed, when the rhs is a weight.
pub fn packable(g: &Geometry) -> bool {
    g.batch.is_empty()
}

/// Packs a weight (`bytes` in logical row-major order, shape `rhs`) into panels of `nr` columns:
/// panel `p` holds `B[k, p·nr + j]` at float `(p·K + k)·nr + j`, zero past `N`.
pub fn pack(bytes: &[u8], rhs: &Shape, d: &DotDims, nr: usize) -> Vec<u8> {
    let rank = rhs.rank();
    let mut strides = vec![1usize; rank];
    for i in (0..rank.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * rhs.dims[i + 1];
    }
    let kd = d.rhs_contracting[0];
    let free: Vec<usize> = (0..rank)
        .filter(|i| !d.rhs_batch.contains(i) && *i != kd)
        .collect();
    let k = rhs.dims[kd];
    let n: usize = free.iter().map(|&i| rhs.dims[i]).product();
    // Offset of column j: unravel j over the free dims.
    let col_off: Vec<usize> = (0..n)
        .map(|mut j| {
            let mut off = 0;
            for &fd in free.iter().rev() {
                off += (j % rhs.dims[fd]) * strides[fd];
                j /= rhs.dims[fd];
            }
            off
        })
        .collect();
    let panels = n.div_ceil(nr);
    let mut out = vec![0u8; panels * k * nr * 4];
    for p in 0..panels {
        for kk in 0..k {
            for j in 0..nr.min(n - p * nr) {
                let src = (kk * strides[kd] + col_off[p * nr + j]) * 4;
                let dst = ((p * k + kk) * nr + j) * 4;
                out[dst..dst + 4].copy_from_slice(&bytes[src..src + 4]);
            }
        }
    }
    out
}

/// One vector of a column chunk: its first column (relative to the chunk), its lanes, and how
/// many of them are real output columns.
#[derive(Clone, Copy)]
pub(super) struct VecCol {
    pub(super) col: usize,
    pub(super) lanes: u32,
    pub(super) store: u32,
}

/// The static plan of one GEMM kernel.
struct Plan {
    t: Tiles,
    /// Panels per column chunk (several for thin products, see [`MIN_CHAINS`]).
    pp: usize,
    packed: bool,
    /// Column chunks: full ones, then one partial chunk if `n` is not a multiple.
    full_chunks: usize,
    part_cols: usize,
    full_rows: usize,
    part_rows: usize,
    /// Split tasks over column chunks (else over row tiles).
    split_cols: bool,
    /// The output fusion's register epilogue and the role of each output dim.
    epi: Option<(RegEpilogue, Vec<DimRole>)>,
}

/// Where an output dim of a dot lies in the micro-tile (for a register epilogue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum DimRole {
    Row,
    Col,
    Unit,
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

/// The vectors covering `cols` columns: whole vectors, then (unless a whole vector is always
/// readable, `whole`) single-lane ones for the rest.
pub(super) fn vectors(cols: usize, lanes: u32, whole: bool) -> Vec<VecCol> {
    let lanes = lanes as usize;
    let mut v = Vec::new();
    let mut c = 0;
    while c < cols {
        if c + lanes <= cols || whole {
            v.push(VecCol {
                col: c,
                lanes: lanes as u32,
                store: lanes.min(cols - c) as u32,
            });
            c += lanes;
        } else {
            v.push(VecCol {
                col: c,
                lanes: 1,
                store: 1,
            });
            c += 1;
        }
    }
    v
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    pub(super) fn vec_ty(&self, lanes: u32) -> VectorType<'ctx> {
        self.ctx.f32_type().vec_type(lanes)
    }

    pub(super) fn vec_fmuladd(&self, lanes: u32) -> FunctionValue<'ctx> {
        inkwell::intrinsics::Intrinsic::find("llvm.fmuladd")
            .expect("llvm.fmuladd exists")
            .get_declaration(self.m, &[self.vec_ty(lanes).into()])
            .expect("vector fmuladd")
    }

    /// A `lanes`-wide load at `p + off` (element-aligned).
    pub(super) fn vload(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        lanes: u32,
    ) -> VectorValue<'ctx> {
        let vp = self
            .b
            .build_pointer_cast(
                self.gep(p, off),
                self.vec_ty(lanes).ptr_type(AddressSpace::default()),
                "",
            )
            .unwrap();
        let v = self.b.build_load(vp, "").unwrap();
        v.as_instruction_value().unwrap().set_alignment(4).unwrap();
        v.into_vector_value()
    }

    pub(super) fn vstore(&self, p: PointerValue<'ctx>, off: IntValue<'ctx>, v: VectorValue<'ctx>) {
        let vp = self
            .b
            .build_pointer_cast(
                self.gep(p, off),
                v.get_type().ptr_type(AddressSpace::default()),
                "",
            )
            .unwrap();
        let st = self.b.build_store(vp, v).unwrap();
        st.set_alignment(4).unwrap();
    }

    pub(super) fn splat(
        &self,
        x: inkwell::values::FloatValue<'ctx>,
        lanes: u32,
    ) -> VectorValue<'ctx> {
        let undef = self.vec_ty(lanes).get_undef();
        let v = self
            .b
            .build_insert_element(undef, x, self.ctx.i32_type().const_zero(), "")
            .unwrap();
        let mask = self.ctx.i32_type().vec_type(lanes).const_zero();
        self.b.build_shuffle_vector(v, undef, mask, "").unwrap()
    }

    pub(super) fn add(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> IntValue<'ctx> {
        self.b.build_int_add(a, b, "").unwrap()
    }

    pub(super) fn mul(&self, a: IntValue<'ctx>, b: u64) -> IntValue<'ctx> {
        self.b.build_int_mul(a, self.i64(b), "").unwrap()
    }

    pub(super) fn umin(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> IntValue<'ctx> {
        let lt = self
            .b
            .build_int_compare(IntPredicate::ULT, a, b, "")
            .unwrap();
        self.b.build_select(lt, a, b, "").unwrap().into_int_value()
    }

    pub(super) fn umax(&self, a: IntValue<'ctx>, b: IntValue<'ctx>) -> IntValue<'ctx> {
        let gt = self
            .b
            .build_int_compare(IntPredicate::UGT, a, b, "")
            .unwrap();
        self.b.build_select(gt, a, b, "").unwrap().into_int_value()
    }

    /// Stores the first `n` lanes of `x` at `p + off`.
    pub(super) fn store_lanes(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        x: VectorValue<'ctx>,
        n: u32,
    ) {
        if n == x.get_type().get_size() {
            self.vstore(p, off, x);
            return;
        }
        for l in 0..n {
            let e = self
                .b
                .build_extract_element(x, self.ctx.i32_type().const_int(l as u64, false), "")
                .unwrap();
            self.store(p, self.add(off, self.i64(l as u64)), e, DType::F32);
        }
    }

    /// `C = A · B` for the dot of kernel `k` (`a`, `b`, `c` are its buffers; `b` packed or not).
    pub(super) fn gemm(
        &self,
        k: &Kernel<'ctx>,
        g: &Geometry,
        (ai, bi): (usize, usize),
        packed: bool,
        epi: Option<(RegEpilogue, Vec<DimRole>)>,
    ) {
        let mut t = Tiles::for_target(self.target);
        if g.m <= t.mr {
            // One row tile: no panel is reused across row tiles, so K-blocking only breaks each
            // panel's stream into pieces. Stream every panel whole.
            t.kc = g.k.max(1);
        }
        if (g.a_m * 4) % L1_SET_STRIDE == 0 && g.m > L1_WAYS {
            // Rows of A a multiple of 4 KiB apart share one L1 set: a tile reading more of them
            // than the set has ways evicts its own rows every step (gemm1024 ran at 65%).
            t.mr = t.mr.min(L1_WAYS);
        }
        t.mr = rows_for_issue(g.m, t.mr, t.nv);
        let rows_per_tile = t.mr;
        let pp = MIN_CHAINS
            .div_ceil(rows_per_tile * t.nv)
            .clamp(1, 4)
            .min(g.n.div_ceil(t.nr()).max(1));
        let cw = pp * t.nr();
        let plan = Plan {
            t,
            pp,
            packed,
            full_chunks: g.n / cw,
            part_cols: g.n % cw,
            full_rows: g.m / t.mr,
            part_rows: g.m % t.mr,
            split_cols: g.n.div_ceil(cw) >= g.m.div_ceil(t.mr),
            epi,
        };
        let units = if plan.split_cols {
            plan.chunks()
        } else {
            plan.row_tiles()
        };
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
        self.loop_nest(&bsizes, &mut |cg, bi| {
            let mut offs = [cg.i64(0), cg.i64(0), cg.i64(0)];
            for (j, &(_, sa, sb, sc)) in g.batch.iter().enumerate() {
                offs[0] = cg.add(offs[0], cg.mul(bi[j], sa));
                offs[1] = cg.add(offs[1], cg.mul(bi[j], sb));
                offs[2] = cg.add(offs[2], cg.mul(bi[j], sc));
            }
            let (a, b, c) = (cg.gep(a, offs[0]), cg.gep(b, offs[1]), cg.gep(c, offs[2]));
            cg.for_loop(nkb, &mut |cg, kb| {
                let k0 = cg.mul(kb, t.kc as u64);
                let klen = cg.umin(
                    cg.i64(t.kc as u64),
                    cg.b.build_int_sub(cg.i64(g.k as u64), k0, "").unwrap(),
                );
                let first =
                    cg.b.build_int_compare(IntPredicate::EQ, kb, cg.i64(0), "")
                        .unwrap();
                let last =
                    cg.b.build_int_compare(IntPredicate::EQ, kb, cg.i64(nkb as u64 - 1), "")
                        .unwrap();
                cg.for_loop(nrb, &mut |cg, rb| {
                    let lo = cg.umax(cg.mul(rb, t.mc_tiles as u64), rl);
                    let hi = cg.umin(cg.mul(cg.add(rb, cg.i64(1)), t.mc_tiles as u64), rh);
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
                                k0,
                                klen,
                                (first, last),
                            );
                        });
                    });
                });
            });
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
        k0: IntValue<'ctx>,
        klen: IntValue<'ctx>,
        first: (IntValue<'ctx>, IntValue<'ctx>),
    ) {
        let full_cols = plan.vectors(plan.chunk_width());
        let part_cols = plan.vectors(plan.part_cols);
        let cols_variant = |cg: &Self, rows: usize| {
            let run = |cg: &Self, cols: &[VecCol]| {
                cg.micro_tile(f, g, plan, tk, bufs, rows, cols, ir, jr, k0, klen, first);
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
        ir: IntValue<'ctx>,
        jr: IntValue<'ctx>,
        k0: IntValue<'ctx>,
        klen: IntValue<'ctx>,
        (first, last): (IntValue<'ctx>, IntValue<'ctx>),
    ) {
        let t = &plan.t;
        let nr = t.nr() as u64;
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
        self.if_else(
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
        // Where each B vector starts (k = 0) and its step per k.
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
        let fmas: Vec<FunctionValue<'ctx>> =
            cols.iter().map(|v| self.vec_fmuladd(v.lanes)).collect();
        let kend = self.add(k0, klen);
        let prefetch = (rows == 1 && plan.packed).then(|| {
            let i8p = self.ctx.i8_type().ptr_type(AddressSpace::default());
            let i32t = self.ctx.i32_type();
            let ty = self
                .ctx
                .void_type()
                .fn_type(&[i8p.into(), i32t.into(), i32t.into(), i32t.into()], false);
            self.m
                .get_function("llvm.prefetch.p0i8")
                .unwrap_or_else(|| self.m.add_function("llvm.prefetch.p0i8", ty, None))
        });
        self.for_range(k0, kend, &mut |cg, kk| {
            if let Some(pf) = prefetch {
                // One line per panel (the vector at the panel's first column), ahead of the loads.
                let ahead = cg.mul(cg.add(kk, cg.i64(STREAM_PREFETCH_K)), b_step);
                for (v, &base) in cols.iter().zip(&b_base) {
                    if v.col as u64 % nr != 0 {
                        continue;
                    }
                    let p = unsafe { cg.b.build_gep(b, &[cg.add(base, ahead)], "").unwrap() };
                    let p =
                        cg.b.build_pointer_cast(
                            p,
                            cg.ctx.i8_type().ptr_type(AddressSpace::default()),
                            "",
                        )
                        .unwrap();
                    let i32c = |v: u64| cg.ctx.i32_type().const_int(v, false);
                    // read, high locality (keep in all levels), data cache.
                    cg.b.build_call(
                        pf,
                        &[p.into(), i32c(0).into(), i32c(3).into(), i32c(1).into()],
                        "",
                    )
                    .unwrap();
                }
            }
            let bv: Vec<VectorValue<'ctx>> = cols
                .iter()
                .zip(&b_base)
                .map(|(v, &base)| cg.vload(b, cg.add(base, cg.mul(kk, b_step)), v.lanes))
                .collect();
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
        let store_all = |cg: &Self, apply: bool| {
            for (i, row) in acc.iter().enumerate() {
                for (v, p) in cols.iter().zip(row) {
                    let off = c_off(cg, i, v);
                    let mut x = cg.b.build_load(*p, "").unwrap().into_vector_value();
                    if let (true, Some((epi, roles))) = (apply, &plan.epi) {
                        let r = cg.add(row0, cg.i64(i as u64));
                        let col = cg.add(col0, cg.i64(v.col as u64));
                        let role = |d: usize| match roles[d] {
                            DimRole::Row => Role::Row,
                            DimRole::Col => Role::Col,
                            DimRole::Unit => Role::At(cg.i64(0)),
                        };
                        x = cg.apply_epilogue(epi, tk, x, r, col, v, &role);
                    }
                    cg.store_lanes(c, off, x, v.store);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Layout;

    fn shape(dims: &[usize]) -> Shape {
        Shape::new(DType::F32, dims.to_vec())
    }

    fn mm() -> DotDims {
        DotDims {
            lhs_batch: vec![],
            lhs_contracting: vec![1],
            rhs_batch: vec![],
            rhs_contracting: vec![0],
        }
    }

    #[test]
    fn row_tiles_minimise_fma_issue_time() {
        // 32 pixels, 2 vectors per row, at most 6 rows: 8 tiles of 4 (64 slots), not 6,6,6,6,6,2.
        assert_eq!(rows_for_issue(32, 6, 2), 4);
        // Ties go to the tallest tile: 14 + 14 + 4 costs what 8 tiles of 4 do.
        assert_eq!(rows_for_issue(32, 14, 2), 14);
        // Whole tiles when they fit; one short row count is one tile.
        assert_eq!(rows_for_issue(36, 6, 2), 6);
        assert_eq!(rows_for_issue(3, 6, 2), 3);
        assert_eq!(rows_for_issue(0, 6, 2), 1);
    }

    #[test]
    fn tiles_follow_the_target() {
        let t = |n: &str| Tiles::for_target(&Target::resolve(n).unwrap());
        let avx512 = t("x86_64-avx512");
        assert_eq!((avx512.lanes, avx512.nv, avx512.mr), (16, 2, 14));
        assert_eq!(avx512.kc, 128); // 16 KiB / (32 columns · 4 bytes)
        let avx2 = t("x86_64-avx2");
        assert_eq!((avx2.lanes, avx2.nv, avx2.mr), (8, 2, 6));
        let neon = t("aarch64-neon");
        assert_eq!((neon.lanes, neon.nv, neon.mr), (4, 3, 9));
    }

    #[test]
    fn packing_puts_panels_first() {
        // B = [[0, 1, 2], [3, 4, 5]] (K = 2, N = 3) in panels of 2 columns.
        let bytes: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let packed = pack(&bytes, &shape(&[2, 3]), &mm(), 2);
        let floats: Vec<f32> = packed
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(floats, vec![0., 1., 3., 4., 2., 0., 5., 0.]);
    }

    #[test]
    fn geometry_of_a_dense_layer_and_a_transposed_operand() {
        let g = geometry(&mm(), &shape(&[4, 8]), &shape(&[8, 5]), &shape(&[4, 5])).unwrap();
        assert_eq!(
            (g.m, g.k, g.n, g.a_m, g.a_k, g.b_k, g.c_m),
            (4, 8, 5, 8, 1, 5, 5)
        );
        assert!(g.b_n_unit);
        // rhs [N, K] (contracting dim 1): its n has stride K, so only a packed weight fits.
        let d = DotDims {
            rhs_contracting: vec![1],
            ..mm()
        };
        let g = geometry(&d, &shape(&[4, 8]), &shape(&[5, 8]), &shape(&[4, 5])).unwrap();
        assert!(!g.b_n_unit);
        // An output whose columns are not contiguous does not fit.
        let mut out = shape(&[4, 5]);
        out.layout = Layout {
            minor_to_major: vec![0, 1],
        };
        assert!(geometry(&mm(), &shape(&[4, 8]), &shape(&[8, 5]), &out).is_none());
    }
}
