//! The GEMM micro-kernel of `precision: bf16` on AVX-512 BF16: `vdpbf16ps`
//! (`llvm.x86.avx512bf16.dpbf16ps.512`), 16 f32 accumulators += 16 × 2 bfloat16 products each.
//!
//! Contract (the parts of `gemm.rs`'s kernel that differ; tiles, tasks, the accumulator tile's
//! load, register epilogue and store are `gemm.rs`'s):
//! - B is a packed weight stored as bfloat16 pairs (`core/packing.rs` `pack_gemm_pairs`): one
//!   512-bit load is 16 columns × k `2q, 2q+1`.
//! - A is rounded to bfloat16 (nearest even, as `round-bf16`: in a `precision: bf16` module it
//!   already holds rounded values, so this is exact; `vcvtneps2bf16`, 32 k into 16 pairs per two
//!   instructions) and packed per row block and K-block into the task's slice of the arena's
//!   kernel scratch (`gemm_pack.rs`; a stack buffer when the buffer plan reserved none), of at
//!   most [`A_BLOCK_BYTES`] ([`Cg::pack_a_pairs`]): row `r` of the block at
//!   dword `r · kc/2`, pair `q` (k `k0 + 2q` in the low half, `k0 + 2q + 1` in the high half, zero
//!   past K) at `+ q`. The micro-kernel broadcasts one dword per row and pair (`vdpbf16ps`'s
//!   `{1to16}` memory operand).
//! - Products of bfloat16 values are exact in f32 and each `vdpbf16ps` adds two of them to the
//!   accumulator, so an output element is the reference's sum of the same products in another
//!   order (pairs, the odd k first): within summation-order error of the interpreter on the
//!   module. The instruction treats bfloat16 subnormals as zero (|x| < 2⁻¹²⁶), a difference far
//!   below that error.

use super::Cg;
use super::vector::VecCol;
use crate::codegen::core::layout::Geometry;
use crate::codegen::core::packing::Tiles;
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::types::VectorType;
use inkwell::values::{FunctionValue, IntValue, PointerValue, VectorValue};

/// Bytes of the buffer a task packs one row block of A into (bounds the row block): 64 KiB, which
/// stays in L2 while every column panel of the K-block passes over it. The buffer is the task's
/// slice of the arena's kernel scratch (`gemm_pack.rs`), or, in a kernel compiled against a plan
/// that reserved none, a stack buffer.
pub(super) const A_BLOCK_BYTES: usize = 64 * 1024;

/// Lanes of one `vdpbf16ps` accumulator (a zmm of f32).
const LANES: u32 = 16;

/// The K-block of the bf16 kernel: 4× the f32 kernel's (`Tiles::kc`), so a panel's K-block
/// (`kc · nr · 2` bytes) fills the L1D where an f32 one fills half of it; even, so blocks start
/// at a pair. Measured on Zen 5 (48 KiB L1D, targets say 32 KiB): K-block 512 against 256 ran
/// gemm512 3% and gemm1024 6-12% faster (fewer passes over the accumulator tile and repacks of
/// A); 1024 gained 1-3% more on gemm1024 with a slice past the L1D, 128 lost 1-5%.
pub(super) fn kc(t: &Tiles) -> usize {
    (t.kc * 4).max(2) / 2 * 2
}

/// Row tiles per row block: as many as fit [`A_BLOCK_BYTES`] at `kc/2` dwords a row.
pub(super) fn mc_tiles(t: &Tiles) -> usize {
    (A_BLOCK_BYTES / (t.kc.div_ceil(2) * 4) / t.mr).clamp(1, t.mc_tiles.max(1))
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// A stack buffer of one row block of packed A, `mc · mr` rows of `kc/2` dwords: where a
    /// kernel without kernel scratch packs (`gemm_pack.rs`).
    pub(super) fn a_pairs_buffer(&self, f: FunctionValue<'ctx>, t: &Tiles) -> PointerValue<'ctx> {
        self.dword_buffer(f, t.mc_tiles * t.mr * t.kc.div_ceil(2))
    }

    /// A stack buffer of `dwords` i32 (`f`'s entry block), as an `i32*`: where the bf16 and int8
    /// kernels pack their A operand when they take no kernel scratch, and where the int8
    /// convolution stages its input rows.
    pub(super) fn dword_buffer(&self, f: FunctionValue<'ctx>, dwords: usize) -> PointerValue<'ctx> {
        let arr = self.slot(f, self.ctx.i32_type().array_type(dwords as u32).into());
        self.b
            .build_pointer_cast(
                arr,
                self.ctx.i32_type().ptr_type(AddressSpace::default()),
                "",
            )
            .unwrap()
    }

    /// The dword at `p + off` (an `i32*`) in all `lanes` lanes: the row operand of `vdpbf16ps`
    /// and of the int8 dot products (`gemm_i8.rs`).
    pub(super) fn broadcast_dword(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        lanes: u32,
    ) -> VectorValue<'ctx> {
        let i32v = self.ctx.i32_type().vec_type(lanes);
        let d = self
            .b
            .build_load(self.gep(p, off), "")
            .unwrap()
            .into_int_value();
        let s = self
            .b
            .build_insert_element(i32v.get_undef(), d, self.ctx.i32_type().const_zero(), "")
            .unwrap();
        self.b
            .build_shuffle_vector(s, i32v.get_undef(), i32v.const_zero(), "")
            .unwrap()
    }

    /// Rounds rows `[r0, r1)` of A (row `r` at `r·a_m`, `k` at `k·a_k`), `k ∈ [k0, k0 + klen)`, to
    /// bfloat16 and packs them as pairs into `buf` (module doc).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pack_a_pairs(
        &self,
        a: PointerValue<'ctx>,
        g: &Geometry,
        buf: PointerValue<'ctx>,
        kc2: usize,
        (r0, r1): (IntValue<'ctx>, IntValue<'ctx>),
        k0: IntValue<'ctx>,
        klen: IntValue<'ctx>,
    ) {
        let pairs = self.b.build_int_add(klen, self.i64(1), "").unwrap();
        let pairs = self
            .b
            .build_right_shift(pairs, self.i64(1), false, "")
            .unwrap();
        // 32 k (16 pairs) per step where A's k is contiguous.
        let chunks = if g.a_k == 1 {
            self.b
                .build_right_shift(klen, self.i64(5), false, "")
                .unwrap()
        } else {
            self.i64(0)
        };
        self.for_range(r0, r1, &mut |cg, r| {
            let src = cg.add(cg.mul(r, g.a_m), cg.mul(k0, g.a_k));
            let dst = cg.mul(cg.b.build_int_sub(r, r0, "").unwrap(), kc2 as u64);
            cg.for_range(cg.i64(0), chunks, &mut |cg, c| {
                let at = cg.add(src, cg.mul(c, 32));
                let (x0, x1) = (
                    cg.vload(a, at, LANES),
                    cg.vload(a, cg.add(at, cg.i64(16)), LANES),
                );
                // 32 k in order as 32 halves are 16 pairs: `vcvtneps2bf16` twice and a
                // concatenation, or the integer rounding and a shift of the even k.
                let i32t = cg.ctx.i32_type();
                let d = match (cg.cvt_bf16(x0), cg.cvt_bf16(x1)) {
                    (Some(h0), Some(h1)) => {
                        let cat = VectorType::const_vector(
                            &(0..32)
                                .map(|j| i32t.const_int(j, false))
                                .collect::<Vec<_>>(),
                        );
                        let h = cg.b.build_shuffle_vector(h0, h1, cat, "").unwrap();
                        cg.b.build_bit_cast(h, i32t.vec_type(LANES), "")
                            .unwrap()
                            .into_vector_value()
                    }
                    _ => {
                        let lo = cg.round_bf16_bits(x0);
                        let hi = cg.round_bf16_bits(x1);
                        let idx = |odd: u64| {
                            VectorType::const_vector(
                                &(0..16)
                                    .map(|j| i32t.const_int(2 * j + odd, false))
                                    .collect::<Vec<_>>(),
                            )
                        };
                        let even = cg.b.build_shuffle_vector(lo, hi, idx(0), "").unwrap();
                        let odd = cg.b.build_shuffle_vector(lo, hi, idx(1), "").unwrap();
                        let even =
                            cg.b.build_right_shift(even, cg.splat_i32(16), false, "")
                                .unwrap();
                        cg.b.build_or(odd, even, "").unwrap()
                    }
                };
                let vp =
                    cg.b.build_pointer_cast(
                        cg.gep(buf, cg.add(dst, cg.mul(c, 16))),
                        d.get_type().ptr_type(AddressSpace::default()),
                        "",
                    )
                    .unwrap();
                let st = cg.b.build_store(vp, d).unwrap();
                st.set_alignment(4).unwrap();
            });
            // The rest one pair at a time; the high half of a last odd k is zero.
            cg.for_range(cg.mul(chunks, 16), pairs, &mut |cg, q| {
                let k = cg.mul(q, 2);
                let x0 = cg.load_f32(a, cg.add(src, cg.mul(k, g.a_k)));
                let k1 = cg.add(k, cg.i64(1));
                let has =
                    cg.b.build_int_compare(IntPredicate::ULT, k1, klen, "")
                        .unwrap();
                // Clamped so the load stays inside A; the value is dropped when past K.
                let k1c = cg.umin(k1, cg.b.build_int_sub(klen, cg.i64(1), "").unwrap());
                let x1 = cg.load_f32(a, cg.add(src, cg.mul(k1c, g.a_k)));
                let v = cg.vec_ty(2).get_undef();
                let v =
                    cg.b.build_insert_element(v, x0, cg.ctx.i32_type().const_zero(), "")
                        .unwrap();
                let v =
                    cg.b.build_insert_element(v, x1, cg.ctx.i32_type().const_int(1, false), "")
                        .unwrap();
                let r = cg.round_bf16_bits(v);
                let i32t = cg.ctx.i32_type();
                let e0 =
                    cg.b.build_extract_element(r, i32t.const_zero(), "")
                        .unwrap()
                        .into_int_value();
                let e1 =
                    cg.b.build_extract_element(r, i32t.const_int(1, false), "")
                        .unwrap()
                        .into_int_value();
                let e1 =
                    cg.b.build_select(has, e1, i32t.const_zero(), "")
                        .unwrap()
                        .into_int_value();
                let e0 =
                    cg.b.build_right_shift(e0, i32t.const_int(16, false), false, "")
                        .unwrap();
                let d = cg.b.build_or(e1, e0, "").unwrap();
                cg.b.build_store(cg.gep(buf, cg.add(dst, q)), d).unwrap();
            });
        });
    }

    fn splat_i32(&self, v: u64) -> VectorValue<'ctx> {
        VectorType::const_vector(&vec![
            self.ctx.i32_type().const_int(v, false);
            LANES as usize
        ])
    }

    fn load_f32(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
    ) -> inkwell::values::FloatValue<'ctx> {
        self.b
            .build_load(self.gep(p, off), "")
            .unwrap()
            .into_float_value()
    }

    /// `llvm.x86.avx512bf16.dpbf16ps.512(acc, a, b)`: `acc[i] += a.bf16[2i]·b.bf16[2i] +
    /// a.bf16[2i+1]·b.bf16[2i+1]` (LLVM 14 passes the bfloat16 pairs as `<16 x i32>`).
    fn dpbf16ps(&self) -> FunctionValue<'ctx> {
        const NAME: &str = "llvm.x86.avx512bf16.dpbf16ps.512";
        self.m.get_function(NAME).unwrap_or_else(|| {
            let f = self.vec_ty(LANES);
            let i = self.ctx.i32_type().vec_type(LANES);
            let ty = f.fn_type(&[f.into(), i.into(), i.into()], false);
            self.m.add_function(NAME, ty, None)
        })
    }

    /// The K loop of a bf16 micro-tile: for each pair `q` of the K-block, one B load per vector
    /// of `cols` (panel `jr·pp + col/nr`, u16 `((panel·K2 + k0/2 + q)·nr + col%nr)·2`) and one
    /// `vdpbf16ps` per accumulator with row `i`'s dword of `apack`; with `prefetch_pairs`, each
    /// panel's line that many pairs ahead is prefetched (a matrix-vector product's stream).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn bf16_k_loop(
        &self,
        g: &Geometry,
        (nr, pp): (usize, usize),
        b: PointerValue<'ctx>,
        acc: &[Vec<PointerValue<'ctx>>],
        cols: &[VecCol],
        (apack, kc2): (PointerValue<'ctx>, usize),
        (row_in_block, jr): (IntValue<'ctx>, IntValue<'ctx>),
        (k0, klen): (IntValue<'ctx>, IntValue<'ctx>),
        prefetch_pairs: Option<u64>,
    ) {
        let k2 = g.k.div_ceil(2) as u64;
        let nr64 = nr as u64;
        let q0 = self
            .b
            .build_right_shift(k0, self.i64(1), false, "")
            .unwrap();
        let b_base: Vec<IntValue<'ctx>> = cols
            .iter()
            .map(|v| {
                let panel = self.add(self.mul(jr, pp as u64), self.i64(v.col as u64 / nr64));
                let at = self.add(self.mul(panel, k2), q0);
                self.mul(
                    self.add(self.mul(at, nr64), self.i64(v.col as u64 % nr64)),
                    2,
                )
            })
            .collect();
        let step = 2 * nr64;
        let a_row: Vec<IntValue<'ctx>> = (0..acc.len())
            .map(|i| self.mul(self.add(row_in_block, self.i64(i as u64)), kc2 as u64))
            .collect();
        let pairs = self.b.build_int_add(klen, self.i64(1), "").unwrap();
        let pairs = self
            .b
            .build_right_shift(pairs, self.i64(1), false, "")
            .unwrap();
        let dp = self.dpbf16ps();
        let i32v = self.ctx.i32_type().vec_type(LANES);
        self.for_range(self.i64(0), pairs, &mut |cg, q| {
            if let Some(ahead) = prefetch_pairs {
                // One line per panel, `ahead` pairs ahead of the loads.
                let ahead = cg.mul(cg.add(q, cg.i64(ahead)), step);
                for (v, &base) in cols.iter().zip(&b_base) {
                    if v.col % nr == 0 {
                        cg.prefetch(b, cg.add(base, ahead));
                    }
                }
            }
            let bv: Vec<VectorValue<'ctx>> = b_base
                .iter()
                .map(|&base| cg.load_vector(b, cg.add(base, cg.mul(q, step)), i32v, 2))
                .collect();
            for (i, row) in acc.iter().enumerate() {
                let s = cg.broadcast_dword(apack, cg.add(a_row[i], q), LANES);
                for (j, _) in cols.iter().enumerate() {
                    let old = cg.b.build_load(row[j], "").unwrap();
                    let new = cg.call(dp, &[old, s.into(), bv[j].into()]);
                    cg.b.build_store(row[j], new).unwrap();
                }
            }
        });
    }
}
