//! The integer GEMM micro-kernel on AVX-512 VNNI: `vpdpbusd` (`llvm.x86.avx512.vpdpbusd.512`),
//! 16 i32 accumulators += 16 × 4 products of an unsigned byte and a signed byte each, for the
//! dots of quantized models: int8 weights times activations that hold integers of one byte's
//! range (`ir/value_range.rs`), such as `convert(q) − zero_point`.
//!
//! Contract (the parts of `gemm.rs`'s kernel that differ; tiles, tasks, register epilogue and
//! store are `gemm.rs`'s):
//! - B is an int8 weight stored as VNNI quads (`core/packing.rs` `write_int8_quads`): one 512-bit
//!   load is 16 columns × k `4q..4q+3`; after the panels, each padded column's f32 scale `s`, then
//!   the i32 sum of its int8 values `Σq`.
//! - A's integers plus the dot's byte offset `o` (`Packings::reads_vnni`) are unsigned bytes; they
//!   are packed per row block and K-block into a stack buffer of at most
//!   `gemm_bf16::A_BLOCK_BYTES` ([`Cg::pack_a_quads`]): row `r` of the block at dword `r · kc/4`,
//!   quad `q` (k `k0 + 4q + b` in byte `b`, zero past K) at `+ q`; the micro-kernel broadcasts
//!   one dword per row and quad.
//! - Per K-block, `Σ (a + o)·q` is summed exactly in i32 (no overflow below 2^31: K ≤ 65536),
//!   the first K-block starting from `−o·Σq` so the offset cancels; the block's sum then enters
//!   the f32 accumulator tile as `acc + f32(sum) · s`. With unit scales (the zero-point-shifted
//!   integers of onnxruntime's QLinear kernels, `front/onnx/quant.rs`) and sums below 2^24 this
//!   is bit for bit the f32 kernel's result; otherwise it is the exact product sum rounded once,
//!   within the f32 reference's summation error.

use super::Cg;
use super::gemm_bf16::A_BLOCK_BYTES;
use super::vector::VecCol;
use crate::codegen::core::layout::Geometry;
use crate::codegen::core::packing::Tiles;
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::types::VectorType;
use inkwell::values::{FunctionValue, IntValue, PointerValue, VectorValue};

/// Stores the f32 tile's starting value (zero, or C) into its accumulators.
pub(super) type Init<'f, 'a, 'ctx> = dyn Fn(&Cg<'a, 'ctx>) + 'f;

/// Lanes of one `vpdpbusd` accumulator (a zmm of i32).
const LANES: u32 = 16;

/// The K-block of the int8 kernel: 4× the f32 kernel's (`Tiles::kc`), so a panel's K-block
/// (`kc · nr` bytes) takes the L1D share an f32 one does; a multiple of 4, so blocks start at a
/// quad.
pub(super) fn kc(t: &Tiles) -> usize {
    (t.kc * 4).max(4)
}

/// Row tiles per row block: as many as fit `A_BLOCK_BYTES` at `kc/4` dwords a row.
pub(super) fn mc_tiles(t: &Tiles) -> usize {
    (A_BLOCK_BYTES / (t.kc.div_ceil(4) * 4) / t.mr).clamp(1, t.mc_tiles.max(1))
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// The stack buffer of one row block of packed A: `mc · mr` rows of `kc/4` dwords.
    pub(super) fn a_quads_buffer(&self, f: FunctionValue<'ctx>, t: &Tiles) -> PointerValue<'ctx> {
        self.dword_buffer(f, t.mc_tiles * t.mr * t.kc.div_ceil(4))
    }

    /// Packs rows `[r0, r1)` of A (row `r` at `r·a_m`, `k` at `k·a_k`), `k ∈ [k0, k0 + klen)`,
    /// plus `offset`, as unsigned byte quads into `buf` (module doc).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pack_a_quads(
        &self,
        a: PointerValue<'ctx>,
        g: &Geometry,
        buf: PointerValue<'ctx>,
        kc4: usize,
        (r0, r1): (IntValue<'ctx>, IntValue<'ctx>),
        (k0, klen): (IntValue<'ctx>, IntValue<'ctx>),
        offset: i32,
    ) {
        let i32t = self.ctx.i32_type();
        let quads = self.b.build_int_add(klen, self.i64(3), "").unwrap();
        let quads = self
            .b
            .build_right_shift(quads, self.i64(2), false, "")
            .unwrap();
        // 16 k (4 quads) per step where A's k is contiguous.
        let chunks = if g.a_k == 1 {
            self.b
                .build_right_shift(klen, self.i64(4), false, "")
                .unwrap()
        } else {
            self.i64(0)
        };
        let off = i32t.const_int(offset as u64, true);
        let off16 = VectorType::const_vector(&vec![off; LANES as usize]);
        self.for_range(r0, r1, &mut |cg, r| {
            let src = cg.add(cg.mul(r, g.a_m), cg.mul(k0, g.a_k));
            let dst = cg.mul(cg.b.build_int_sub(r, r0, "").unwrap(), kc4 as u64);
            cg.for_range(cg.i64(0), chunks, &mut |cg, c| {
                let x = cg.vload(a, cg.add(src, cg.mul(c, 16)), LANES);
                let i =
                    cg.b.build_float_to_signed_int(x, i32t.vec_type(LANES), "")
                        .unwrap();
                let i = cg.b.build_int_add(i, off16, "").unwrap();
                let bytes =
                    cg.b.build_int_truncate(i, cg.ctx.i8_type().vec_type(LANES), "")
                        .unwrap();
                let d =
                    cg.b.build_bit_cast(bytes, i32t.vec_type(LANES / 4), "")
                        .unwrap()
                        .into_vector_value();
                let vp =
                    cg.b.build_pointer_cast(
                        cg.gep(buf, cg.add(dst, cg.mul(c, 4))),
                        d.get_type().ptr_type(AddressSpace::default()),
                        "",
                    )
                    .unwrap();
                let st = cg.b.build_store(vp, d).unwrap();
                st.set_alignment(4).unwrap();
            });
            // The rest one quad at a time; bytes past K are zero.
            cg.for_range(cg.mul(chunks, 4), quads, &mut |cg, q| {
                let mut d = i32t.const_zero();
                for byte in 0..4u64 {
                    let k = cg.add(cg.mul(q, 4), cg.i64(byte));
                    let has =
                        cg.b.build_int_compare(IntPredicate::ULT, k, klen, "")
                            .unwrap();
                    // Clamped so the load stays inside A; the value is dropped when past K.
                    let kcl = cg.umin(k, cg.b.build_int_sub(klen, cg.i64(1), "").unwrap());
                    let x =
                        cg.b.build_load(cg.gep(a, cg.add(src, cg.mul(kcl, g.a_k))), "")
                            .unwrap()
                            .into_float_value();
                    let v = cg.b.build_float_to_signed_int(x, i32t, "").unwrap();
                    let v = cg.b.build_int_add(v, off, "").unwrap();
                    let v = cg.b.build_and(v, i32t.const_int(0xff, false), "").unwrap();
                    let v =
                        cg.b.build_select(has, v, i32t.const_zero(), "")
                            .unwrap()
                            .into_int_value();
                    let v =
                        cg.b.build_left_shift(v, i32t.const_int(8 * byte, false), "")
                            .unwrap();
                    d = cg.b.build_or(d, v, "").unwrap();
                }
                cg.b.build_store(cg.gep(buf, cg.add(dst, q)), d).unwrap();
            });
        });
    }

    /// `llvm.x86.avx512.vpdpbusd.512(acc, a, b)`: `acc[i] += Σ_j u8(a.byte[4i+j]) · s8(b.byte[4i+j])`.
    pub(super) fn vpdpbusd(&self) -> FunctionValue<'ctx> {
        const NAME: &str = "llvm.x86.avx512.vpdpbusd.512";
        self.m.get_function(NAME).unwrap_or_else(|| {
            let i = self.ctx.i32_type().vec_type(LANES);
            let ty = i.fn_type(&[i.into(), i.into(), i.into()], false);
            self.m.add_function(NAME, ty, None)
        })
    }

    /// The K loop of an int8 micro-tile, then its entry into the f32 tile: for each quad `q` of
    /// the K-block, one B load per vector of `cols` (panel `jr·pp + col/nr`, byte
    /// `((panel·K4 + k0/4 + q)·nr + col%nr)·4`) and one `vpdpbusd` per accumulator with row `i`'s
    /// broadcast dword of `apack`; then `acc[i][j] = init(i, j) + f32(sum) · s` where `init`
    /// stores the f32 tile's starting value (zero or C) into `acc` first. In the first K-block
    /// (`first`) the sums start from `−offset · Σq`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn i8_k_loop(
        &self,
        f: FunctionValue<'ctx>,
        g: &Geometry,
        (nr, pp): (usize, usize),
        b: PointerValue<'ctx>,
        (acc, init): (&[Vec<PointerValue<'ctx>>], &Init<'_, 'a, 'ctx>),
        cols: &[VecCol],
        (apack, kc4): (PointerValue<'ctx>, usize),
        (row_in_block, jr): (IntValue<'ctx>, IntValue<'ctx>),
        (k0, klen, first): (IntValue<'ctx>, IntValue<'ctx>, IntValue<'ctx>),
        offset: i32,
    ) {
        let k4 = g.k.div_ceil(4) as u64;
        let nr64 = nr as u64;
        let i32v = self.ctx.i32_type().vec_type(LANES);
        let n_pad = g.n.div_ceil(nr) * nr;
        let quads_bytes = n_pad * k4 as usize * 4;
        let q0 = self
            .b
            .build_right_shift(k0, self.i64(2), false, "")
            .unwrap();
        // Padded column of each vector, its panel's first byte at this K-block.
        let col_of = |v: &VecCol| {
            let panel = self.add(self.mul(jr, pp as u64), self.i64(v.col as u64 / nr64));
            (
                panel,
                self.add(self.mul(panel, nr64), self.i64(v.col as u64 % nr64)),
            )
        };
        let b_base: Vec<IntValue<'ctx>> = cols
            .iter()
            .map(|v| {
                let (panel, _) = col_of(v);
                let at = self.add(self.mul(panel, k4), q0);
                self.mul(
                    self.add(self.mul(at, nr64), self.i64(v.col as u64 % nr64)),
                    4,
                )
            })
            .collect();
        // The i32 sums, starting from −offset·Σq in the first K-block.
        let iacc: Vec<Vec<PointerValue<'ctx>>> = acc
            .iter()
            .map(|row| row.iter().map(|_| self.slot(f, i32v.into())).collect())
            .collect();
        let start: Vec<VectorValue<'ctx>> = cols
            .iter()
            .map(|v| {
                let (_, col) = col_of(v);
                let at = self.add(
                    self.i64(quads_bytes as u64 + 4 * n_pad as u64),
                    self.mul(col, 4),
                );
                let sums = self.load_vector(b, at, i32v, 4);
                let o = self.ctx.i32_type().const_int((-offset) as u64, true);
                let neg = self
                    .b
                    .build_int_mul(sums, VectorType::const_vector(&vec![o; LANES as usize]), "")
                    .unwrap();
                self.b
                    .build_select(first, neg, i32v.const_zero(), "")
                    .unwrap()
                    .into_vector_value()
            })
            .collect();
        for row in &iacc {
            for (p, s) in row.iter().zip(&start) {
                self.b.build_store(*p, *s).unwrap();
            }
        }
        let step = 4 * nr64;
        let a_row: Vec<IntValue<'ctx>> = (0..acc.len())
            .map(|i| self.mul(self.add(row_in_block, self.i64(i as u64)), kc4 as u64))
            .collect();
        let quads = self.b.build_int_add(klen, self.i64(3), "").unwrap();
        let quads = self
            .b
            .build_right_shift(quads, self.i64(2), false, "")
            .unwrap();
        let dp = self.vpdpbusd();
        self.for_range(self.i64(0), quads, &mut |cg, q| {
            let bv: Vec<VectorValue<'ctx>> = b_base
                .iter()
                .map(|&base| cg.load_vector(b, cg.add(base, cg.mul(q, step)), i32v, 4))
                .collect();
            for (i, row) in iacc.iter().enumerate() {
                let s = cg.broadcast_dword(apack, cg.add(a_row[i], q));
                for (j, p) in row.iter().enumerate() {
                    let old = cg.b.build_load(*p, "").unwrap();
                    let new = cg.call(dp, &[old, s.into(), bv[j].into()]);
                    cg.b.build_store(*p, new).unwrap();
                }
            }
        });
        // Into the f32 tile: acc = init + f32(sum) · s.
        init(self);
        let scales: Vec<VectorValue<'ctx>> = cols
            .iter()
            .map(|v| self.column_scales(b, quads_bytes, col_of(v).1, LANES))
            .collect();
        let fma = self.vec_fmuladd(LANES);
        for (row, irow) in acc.iter().zip(&iacc) {
            for (j, (p, ip)) in row.iter().zip(irow).enumerate() {
                let sum = self.b.build_load(*ip, "").unwrap().into_vector_value();
                let x = self
                    .b
                    .build_signed_int_to_float(sum, self.vec_ty(LANES), "")
                    .unwrap();
                let old = self.b.build_load(*p, "").unwrap();
                let new = self.call(fma, &[x.into(), scales[j].into(), old]);
                self.b.build_store(*p, new).unwrap();
            }
        }
    }
}
