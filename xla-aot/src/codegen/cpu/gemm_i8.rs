//! The integer GEMM micro-kernel: i32 accumulators += products of 4 bytes each, with the
//! target's 4-byte dot product (`quad_dot.rs`: `vpdpbusd` on AVX-512 VNNI, `vpmaddwd` on other
//! x86-64, `sdot` on aarch64 with dotprod, `smull`/`sadalp` on baseline NEON); for the dots of quantized models: int8 weights
//! times activations that hold integers of one byte's range (`ir/value_range.rs`), such as
//! `convert(q) − zero_point`.
//!
//! Contract (the parts of `gemm.rs`'s kernel that differ; tiles, tasks, register epilogue and
//! store are `gemm.rs`'s):
//! - B is an int8 weight stored as VNNI quads (`core/packing.rs` `write_int8_quads`): one load of
//!   `lanes` i32 is `lanes` columns × k `4q..4q+3` (on Helium a column's 16 k, `packing::dot_k`);
//!   after the panels, each padded column's f32 scale `s`, then the i32 sum of its int8 values
//!   `Σq`.
//! - A's integers plus the dot's byte offset `o` are the bytes the instruction reads: `o` is the
//!   unsigned offset of `Packings::reads_vnni` plus `quad_dot::byte_shift` (0 for the unsigned
//!   bytes of `vpdpbusd` and `vpmaddwd`, −128 for the signed ones of aarch64, `Cpu.vnni`); they
//!   are packed per row block and K-block into the task's slice of the arena's kernel scratch
//!   (`gemm_pack.rs`; a stack buffer when the buffer plan reserved none), of at most
//!   `gemm_bf16::A_BLOCK_BYTES` ([`Cg::pack_a_quads`]):
//!   row `r` of the block at dword `r · kc/4`, quad `q` (k `k0 + 4q + b` in byte `b`, zero past
//!   K) at `+ q`; the micro-kernel broadcasts one dword per row and quad.
//! - `Σ (a + o)·q` is summed exactly in i32 (no overflow below 2^31: K ≤ 65536), starting from
//!   `−o·Σq` so the offset cancels: the sums are the same integers whichever instruction made
//!   them. Between K-blocks the tile's sums wait in C as i32 bits (C is the f32 output, 4 bytes
//!   an element; nothing reads it before the last K-block has stored its floats); after the last
//!   block each becomes `f32(sum) · s`, the register epilogue and the store of `gemm.rs`. So an
//!   output is the exact product sum rounded once, then scaled once: the same bits on every
//!   target whatever its K-blocks (`Tiles::kc`), and with unit scales (the zero-point-shifted
//!   integers of onnxruntime's QLinear kernels, `front/onnx/quant.rs`) and sums below 2^24 bit
//!   for bit the f32 kernel's result.

use super::Cg;
use super::gemm_bf16::A_BLOCK_BYTES;
use super::quad_dot::{DotKind, MVE_GEMM_ROWS};
use super::vector::VecCol;
use crate::codegen::core::layout::Geometry;
use crate::codegen::core::packing::{Tiles, dot_k};
use crate::ir::DType;
use inkwell::AddressSpace;
use inkwell::IntPredicate;
use inkwell::types::VectorType;
use inkwell::values::{FunctionValue, IntValue, PointerValue, VectorValue};

/// Stores the f32 tile's starting value (zero, or C: the previous K-blocks' sums as bits) into
/// its accumulators.
pub(super) type Init<'f, 'a, 'ctx> = dyn Fn(&Cg<'a, 'ctx>) + 'f;

/// k packed per vector step of A (16 bytes: 4 quads), where A's k is contiguous.
const PACK_K: u32 = 16;

/// The K-block of the int8 kernel: 4× the f32 kernel's (`Tiles::kc`), so a panel's K-block
/// (`kc · nr` bytes) takes the L1D share an f32 one does; a multiple of 4, so blocks start at a
/// quad.
pub(super) fn kc(t: &Tiles) -> usize {
    (t.kc * 4).max(4)
}

/// Rows of an int8 micro-tile on `target`: the f32 tile's (`Tiles::mr`), fewer where the dot
/// product takes more registers (`quad_dot.rs`) so that everything stays in registers: on
/// baseline NEON (two per accumulator) the accumulators, one register per B vector, the
/// broadcast row and `smull`'s two products; with `vpmaddwd` the accumulators, two per B vector
/// (its widened low and high bytes), two for the row's and two for the products; with `smlad`
/// the accumulators and B's halves in the core registers left by the loop
/// (`quad_dot::SMLAD_REGISTERS`).
pub(super) fn mr(t: &Tiles, target: &crate::target::Target) -> usize {
    let regs = target.vector_registers as usize;
    match DotKind::of(target) {
        Some(d @ DotKind::Neon) => {
            (regs.saturating_sub(t.nv + 3) / (t.nv * d.registers())).clamp(1, t.mr)
        }
        Some(d @ DotKind::Madd) => {
            (regs.saturating_sub(t.nv * d.b_registers() + 4) / t.nv).clamp(1, t.mr)
        }
        Some(DotKind::Mve) => MVE_GEMM_ROWS,
        Some(d @ DotKind::Smlad) => (d
            .tile_registers(target)
            .saturating_sub(t.nv * d.b_registers())
            / t.nv)
            .clamp(1, t.mr),
        _ => t.mr,
    }
}

/// Row tiles per row block: as many as fit `A_BLOCK_BYTES` at `kc/4` dwords a row.
pub(super) fn mc_tiles(t: &Tiles) -> usize {
    (A_BLOCK_BYTES / (t.kc.div_ceil(4) * 4) / t.mr).clamp(1, t.mc_tiles.max(1))
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// A stack buffer of one row block of packed A, `mc · mr` rows of `kc/4` dwords: where a
    /// kernel without kernel scratch packs (`gemm_pack.rs`).
    pub(super) fn a_quads_buffer(&self, f: FunctionValue<'ctx>, t: &Tiles) -> PointerValue<'ctx> {
        self.dword_buffer(f, t.mc_tiles * t.mr * t.kc.div_ceil(4))
    }

    /// Packs rows `[r0, r1)` of A (row `r` at `r·a_m`, `k` at `k·a_k`), `k ∈ [k0, k0 + klen)`,
    /// plus `offset`, as byte quads into `buf` (module doc). A stored as bytes (`a_bytes`: their
    /// type and the bias `byte_storage.rs` added) is widened and adds `offset − bias`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pack_a_quads(
        &self,
        a: PointerValue<'ctx>,
        g: &Geometry,
        buf: PointerValue<'ctx>,
        kc4: usize,
        (r0, r1): (IntValue<'ctx>, IntValue<'ctx>),
        (k0, klen): (IntValue<'ctx>, IntValue<'ctx>),
        (offset, a_bytes): (i32, Option<(DType, i32)>),
    ) {
        let i32t = self.ctx.i32_type();
        let offset = offset - a_bytes.map_or(0, |(_, bias)| bias);
        // Whole groups of the dot product's k (`packing::dot_k`), zero past K.
        let gk = dot_k(self.target) as u64;
        let quads = self.b.build_int_add(klen, self.i64(gk - 1), "").unwrap();
        let quads = self.mul(
            self.b
                .build_int_unsigned_div(quads, self.i64(gk), "")
                .unwrap(),
            gk / 4,
        );
        // 16 k (4 quads) per step where A's k is contiguous.
        let chunks = if g.a_k == 1 {
            self.b
                .build_right_shift(klen, self.i64(4), false, "")
                .unwrap()
        } else {
            self.i64(0)
        };
        let off = i32t.const_int(offset as u64, true);
        let off16 = VectorType::const_vector(&vec![off; PACK_K as usize]);
        self.for_range(r0, r1, &mut |cg, r| {
            let src = cg.add(cg.mul(r, g.a_m), cg.mul(k0, g.a_k));
            let dst = cg.mul(cg.b.build_int_sub(r, r0, "").unwrap(), kc4 as u64);
            cg.for_range(cg.i64(0), chunks, &mut |cg, c| {
                let at = cg.add(src, cg.mul(c, 16));
                let i32v = i32t.vec_type(PACK_K);
                let i = match a_bytes {
                    Some((d, _)) => {
                        let x = cg.load_bytes(a, at, PACK_K);
                        cg.widen_bytes(x, i32v, d)
                    }
                    None => {
                        let x = cg.vload(a, at, PACK_K);
                        cg.b.build_float_to_signed_int(x, i32v, "").unwrap()
                    }
                };
                let i = cg.b.build_int_add(i, off16, "").unwrap();
                let bytes =
                    cg.b.build_int_truncate(i, cg.ctx.i8_type().vec_type(PACK_K), "")
                        .unwrap();
                let d =
                    cg.b.build_bit_cast(bytes, i32t.vec_type(PACK_K / 4), "")
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
                            .unwrap();
                    let v = match a_bytes {
                        Some((DType::U8, _)) => {
                            cg.b.build_int_z_extend(x.into_int_value(), i32t, "")
                                .unwrap()
                        }
                        Some(_) => {
                            cg.b.build_int_s_extend(x.into_int_value(), i32t, "")
                                .unwrap()
                        }
                        None => {
                            cg.b.build_float_to_signed_int(x.into_float_value(), i32t, "")
                                .unwrap()
                        }
                    };
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

    /// The K loop of an int8 micro-tile, then its entry into the f32 tile: for each quad `q` of
    /// the K-block, one B load per vector of `cols` (panel `jr·pp + col/nr`, byte
    /// `((panel·K4 + k0/4 + q)·nr + col%nr)·4`) and one dot product (`quad_dot.rs`) per
    /// accumulator with row `i`'s broadcast dword of `apack`. The sums start from what `init`
    /// stores into `acc` (zero in the first K-block, else C, which holds the previous blocks'
    /// i32 sums as bits) plus, in the first K-block (`first`), `−offset · Σq` and each vector's
    /// integer bias where `bias` gives them (`gemm.rs` `Plan::sum_bias`); in the last
    /// (`last`) `acc = f32(sum) · s`, else `acc` = the sum's bits, for the next block.
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
        (k0, klen): (IntValue<'ctx>, IntValue<'ctx>),
        (first, last): (IntValue<'ctx>, IntValue<'ctx>),
        (offset, bias): (i32, Option<&[VectorValue<'ctx>]>),
    ) {
        let gk = dot_k(self.target);
        let k4 = (g.k.div_ceil(gk) * gk / 4) as u64;
        let nr64 = nr as u64;
        let dp = self.quad_dot();
        let lanes = dp.lanes;
        let i32v = self.ctx.i32_type().vec_type(lanes);
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
        // The tile's first panel at this K-block, then each vector's constant offset from it.
        let b_base = self.mul(
            self.add(self.mul(self.mul(jr, pp as u64), k4), q0),
            4 * nr64,
        );
        let b_off: Vec<u64> = cols
            .iter()
            .map(|v| {
                let (panel, j) = (v.col as u64 / nr64, v.col as u64 % nr64);
                panel * k4 * 4 * nr64 + gk as u64 * j
            })
            .collect();
        // The i32 sums, starting from −offset·Σq in the first K-block.
        let iacc: Vec<Vec<PointerValue<'ctx>>> = acc
            .iter()
            .map(|row| {
                row.iter()
                    .map(|_| self.slot(f, dp.acc_type(self).into()))
                    .collect()
            })
            .collect();
        let start: Vec<VectorValue<'ctx>> = cols
            .iter()
            .enumerate()
            .map(|(j, v)| {
                let (_, col) = col_of(v);
                let at = self.add(
                    self.i64(quads_bytes as u64 + 4 * n_pad as u64),
                    self.mul(col, 4),
                );
                let sums = self.load_vector(b, at, i32v, 4);
                let o = self.ctx.i32_type().const_int((-offset) as u64, true);
                let mut neg = self
                    .b
                    .build_int_mul(sums, VectorType::const_vector(&vec![o; lanes as usize]), "")
                    .unwrap();
                if let Some(b) = bias {
                    neg = self.b.build_int_add(neg, b[j], "").unwrap();
                }
                self.b
                    .build_select(first, neg, i32v.const_zero(), "")
                    .unwrap()
                    .into_vector_value()
            })
            .collect();
        // The sums so far: zero, or C's bits from the previous K-block.
        init(self);
        for (row, irow) in acc.iter().zip(&iacc) {
            for ((p, ip), s) in row.iter().zip(irow).zip(&start) {
                let before = self.b.build_load(*p, "").unwrap();
                let before = self
                    .b
                    .build_bit_cast(before, i32v, "")
                    .unwrap()
                    .into_vector_value();
                let sum = self.b.build_int_add(before, *s, "").unwrap();
                self.b.build_store(*ip, self.dot_begin(&dp, sum)).unwrap();
            }
        }
        let a_off: Vec<u64> = (0..acc.len() as u64).map(|i| i * kc4 as u64).collect();
        let steps = self
            .b
            .build_int_add(klen, self.i64(gk as u64 - 1), "")
            .unwrap();
        let steps = self
            .b
            .build_int_unsigned_div(steps, self.i64(gk as u64), "")
            .unwrap();
        self.dot_steps(
            &dp,
            f,
            &iacc,
            steps,
            (apack, self.mul(row_in_block, kc4 as u64), &a_off),
            (b, b_base, &b_off, gk as u64 * nr64),
        );
        // Into the f32 tile: f32(sum) · s after the last K-block, else the sum's bits; with
        // integer weights (`Packings::reads_unit_scales`: every s is 1, or 0 in a column of
        // zero weights, whose sum is 0) the sum's bits always: `gemm.rs` converts them where it
        // stores the tile, so an integer epilogue (`multiply-q31`) reads the sum as it is
        // (`Cg::int_source`).
        let unit = self.be.unit_scales.get();
        let scales: Vec<VectorValue<'ctx>> = cols
            .iter()
            .map(|v| self.column_scales(b, quads_bytes, col_of(v).1, lanes))
            .collect();
        let f32v = self.vec_ty(lanes);
        for (row, irow) in acc.iter().zip(&iacc) {
            for (j, (p, ip)) in row.iter().zip(irow).enumerate() {
                let sum = self.b.build_load(*ip, "").unwrap().into_vector_value();
                let sum = self.dot_end(&dp, sum);
                let x = self.b.build_signed_int_to_float(sum, f32v, "").unwrap();
                let scaled = if unit {
                    x
                } else {
                    self.b.build_float_mul(x, scales[j], "").unwrap()
                };
                let bits = self.b.build_bit_cast(sum, f32v, "").unwrap();
                let new = if unit {
                    bits
                } else {
                    self.b.build_select(last, scaled.into(), bits, "").unwrap()
                };
                self.b.build_store(*p, new).unwrap();
            }
        }
    }
}
