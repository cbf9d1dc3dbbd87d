//! The byte dot product of the int8 kernels (`gemm_i8.rs`, `conv/int8.rs`), per ISA: one output
//! lane sums the products of 4 bytes of a row of A (a broadcast dword) and 4 int8 weights of one
//! column (a quad of `core/packing.rs` `write_int8_quads`), or on Helium of 16 and 16, into
//! exact i32.
//!
//! Contract: the kernels hold one accumulator ([`QuadDot::acc_type`]) per output vector of
//! `lanes` i32, made by [`Cg::dot_begin`] from the starting sums, grown by [`Cg::dot_steps`]
//! (the K loop: per step one vector of A's broadcast quad and one of B's quads, `<lanes x i32>`,
//! 4 bytes a lane, through [`Cg::dot_quads`]; Helium's own loop below), and read by
//! [`Cg::dot_end`] as `<lanes x i32>` sums. Every kind computes the same integers:
//! - [`DotKind::Vnni`] (AVX-512 VNNI): `vpdpbusd` on 16 lanes, A's bytes unsigned;
//! - [`DotKind::Madd`] (x86-64 without VNNI: AVX-512BW on 16 lanes, AVX2 on 8, SSE2 on 4):
//!   `vpmaddwd` twice, A's bytes unsigned. Each dword (a column's 4 bytes, or the broadcast
//!   row's) is read as two words, whose bytes are widened apart: the weights' low bytes (k `4q`,
//!   `4q+2`) sign-extended by a left then arithmetic right shift by 8, their high ones (k `4q+1`,
//!   `4q+3`) by an arithmetic right shift; the row's zero-extended by a mask and a logical
//!   shift. `vpmaddwd` of the low words with the low words and of the high with the high each
//!   give one i32 per column (two products of at most 255 · 128 in magnitude: exact), whose sum
//!   is the column's 4-byte dot. Not `vpmaddubsw` on the bytes as they come: its i16 sum of two
//!   u8·s8 products saturates (2 · 255 · 128 > 32767). The weights' widening is shared by the
//!   tile's rows and the row's by its columns (LLVM keeps one copy of each per quad step).
//! - [`DotKind::Signs`] (AVX2, for a kernel whose weights hold no −128,
//!   `core/packing/signs.rs`): A's bytes signed; `vpmaddubsw` of `|a|` (`vpabsb`: at most 128,
//!   read unsigned) and `sign(a)·b` (`vpsignb`: at most 127 in magnitude, as `b` is never −128)
//!   gives i16 sums of two products within ±2 · 128 · 127 (no saturation), which `vpmaddwd` by
//!   ones sums into i32. Its tiles are `Madd`'s. About 10% faster than `Madd` on Zen 5
//!   (`bench/int8_gemm.py --target x86_64-avx2 --symmetric`: 192 against 172 GOP/s).
//! - [`DotKind::Sdot`] (aarch64 with dotprod): `sdot` on 4 lanes, A's bytes signed;
//! - [`DotKind::Neon`] (baseline aarch64 NEON): per 16 bytes `smull` + `smull2` (8 products
//!   each, s8·s8 in i16: at most 2^14 in magnitude, exact) and `sadalp` (pairwise sums into
//!   i32), into two registers per accumulator (each lane holds half a column: k `4q, 4q+1` or
//!   `4q+2, 4q+3`), which `addp` folds into the 4 columns at the end. No i16 sum of two products
//!   is kept (`smlal`), as 2 · 128 · 128 does not fit in i16.
//! - [`DotKind::Smlad`] (Cortex-M with the DSP extension and no vector unit: M4, M7, M33): one
//!   lane, A's bytes signed. Per quad `sxtb16` of each dword and of the dword rotated right by 8
//!   (`sxtb16 r, r, ror #8`) sign-extends bytes 0 and 2, then 1 and 3, into the two halfwords of
//!   a register; `smlad` of A's and B's evens, then of their odds, adds the two halfword products
//!   of each to the accumulator (`a0·b0 + a2·b2`, `a1·b1 + a3·b3`). Each product is at most 2^14
//!   in magnitude and `smlad` adds them in 32 bits: exact. The weights need no rearrangement (the
//!   same unpacking of both operands pairs the right bytes); a row's unpacked halves are shared by
//!   the tile's columns and a column's by its rows. A convolution's staged rows are widened
//!   once per tile instead ([`Cg::widen_quads`], [`QuadDot::wide_a`]: each quad two dwords of
//!   halfwords, as CMSIS-NN's `arm_nn_mat_mult_kernel_s8_s16` reads its activations): a row
//!   then takes two loads and one register in the K loop instead of a load, two `sxtb16` and
//!   two registers, and the 3 × 2 tile's loop went from 41 to 34 instructions per quad step
//!   (MLPerf Tiny on the M4, instructions per inference: kws 7.37 M → 6.91 M, vww 23.6 M →
//!   22.6 M, resnet 27.7 M → 24.4 M). With a constant count of steps that loop is one
//!   inline-assembly block (`smlad_loop.rs`): 26 instructions per step, where LLVM's register
//!   allocation left 34 to 41 (kws 6.30 M → 5.60 M, vww 21.5 M → 19.3 M, resnet 24.3 M →
//!   21.6 M).
//!
//! - [`DotKind::Mve`] (Cortex-M with Helium: M55): four lanes (the f32 tiles'), each an output
//!   column whose weights are stored 16 k side by side (`core/packing.rs` `MVE_K`) instead of a
//!   quad; one `vmlava.s8` multiplies 16 signed bytes of a row by 16 of a column and adds the sum
//!   to the column's i32 accumulator in a core register (each product at most 2^14, 16 of them
//!   well inside i32: exact). The row's 16 bytes are loaded once per step and shared by the
//!   tile's columns. Its K loop is [`Cg::dot_steps`]'s own: the accumulators are scalars, one
//!   per column, gathered into `<4 x i32>` after the loop. CMSIS-NN's Helium kernels
//!   (`arm_nn_mat_mul_core_4x_s8`) make the same `vmladava` products, four rows against one
//!   column.
//!
//! A's bytes are `a + o` with `o` the unsigned offset of `value_range::Range::u8_offset` plus
//! [`byte_shift`].

use super::Cg;
use crate::codegen::core::packing::quad_dot_lanes;
use crate::target::{Arch, Optimize, Target};
use inkwell::types::VectorType;
use inkwell::values::{BasicValueEnum, FunctionValue, IntValue, PointerValue, VectorValue};
use inkwell::{AddressSpace, IntPredicate};

/// Which instruction sequence makes the products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DotKind {
    Vnni,
    Madd,
    Signs,
    Sdot,
    Neon,
    Smlad,
    Mve,
}

impl DotKind {
    /// The kind `target` takes: where `packing::quad_dot_lanes` has a dot product; `None`
    /// elsewhere (PTX, Helium, x86-64 vectors wider than the ISA's integer ones). Which kernels
    /// take it at all is `core/packing.rs`'s `quad_dot_lanes`.
    pub(super) fn of(target: &Target) -> Option<DotKind> {
        quad_dot_lanes(target)?;
        Some(if target.has_avx512_vnni() {
            DotKind::Vnni
        } else if target.arch == Arch::X86_64 {
            DotKind::Madd
        } else if target.arch == Arch::Arm && target.has_helium() {
            DotKind::Mve
        } else if target.arch == Arch::Arm {
            DotKind::Smlad
        } else if target.has_dotprod() {
            DotKind::Sdot
        } else {
            DotKind::Neon
        })
    }

    /// Vector registers one accumulator takes (the kernels size their tiles by it).
    pub(super) fn registers(self) -> usize {
        if self == DotKind::Neon { 2 } else { 1 }
    }

    /// Vector registers one B vector takes while the products run: two for `Madd` (its low and
    /// high bytes widened to words) and `Smlad` (its even and odd bytes as halfwords), else one.
    pub(super) fn b_registers(self) -> usize {
        if matches!(self, DotKind::Madd | DotKind::Smlad) {
            2
        } else {
            1
        }
    }

    /// Registers the kernels' tiles may fill (accumulators, B's vectors): `target`'s vector
    /// registers, or for `Smlad`, whose values live in the core registers, [`SMLAD_REGISTERS`].
    pub(super) fn tile_registers(self, target: &Target) -> usize {
        if self == DotKind::Smlad {
            SMLAD_REGISTERS
        } else {
            target.vector_registers as usize
        }
    }
}

/// Core registers an `smlad` tile's accumulators and B's unpacked halves may take: of the 13 a
/// Thumb-2 function allocates freely (r0–r12, lr; sp and pc are not, r7 is the frame pointer
/// where one is kept), the loop needs its staged-row and weight pointers, its counter and the
/// row's two unpacked halves. 10 gives a tile of 3 rows × 2 columns (6 accumulators and 4 halves
/// of B); LLVM spills some of it, but fewer instructions per multiply-accumulate remain than
/// with 2 × 2 (8: its spills and pointer reloads took 35 instructions per 16 products). MLPerf
/// Tiny int8 models on the M4 board (instructions per inference, 2026-12-07): 6 → kws 9.29 M,
/// vww 30.2 M; 8 → 8.70 M, 28.1 M, resnet 33.7 M; 10 → 8.34 M, 26.2 M, 33.3 M; 12 → 8.49 M,
/// 27.3 M, 35.1 M; 16 → 8.84 M, 26.9 M, 35.0 M.
pub(super) const SMLAD_REGISTERS: usize = 10;

/// Output pixels per tile of a Helium int8 convolution, which takes one column vector (4
/// columns) at a time: 8 accumulators in core registers beside the row, weight and counter
/// registers, each step 2 row loads, 4 weight loads and 8 `vmlava`s. MLPerf Tiny on the M55
/// (instructions per inference, 2026-12-07): 1 pixel × 8 columns → kws 1.51 M, resnet 7.15 M;
/// 2 × 4 → 1.45 M, 6.13 M; 3 × 4 → 1.43 M, 6.27 M (and 30 % more of resnet's code).
pub(super) const MVE_ROWS: usize = 2;

/// Most steps per iteration of an `smlad` K loop with a constant count (the largest count up to
/// it that divides the steps): the loop's counter, compare and branch, and the pointer and
/// accumulator moves LLVM adds around them, were 10 of its 34 instructions per quad step of a
/// 3 × 2 tile. MLPerf Tiny on the M4 (instructions per inference, 2026-12-07): 1 → kws 6.91 M,
/// vww 22.6 M, resnet 24.4 M; 2 → 6.47 M, 21.9 M, 23.3 M; 4 → 6.32 M, 21.1 M, 22.1 M
/// (resnet's code 137 KB → 156 KB: `--optimize size` keeps one step per iteration). A
/// convolution's widened rows take the hand-allocated loop instead (`smlad_loop.rs`).
const SMLAD_UNROLL: u64 = 4;

/// Steps an `sdot` K loop takes per row load ([`Cg::sdot_lane_steps`]): the four dwords of one
/// 128-bit register, each the indexed operand of one `sdot`.
const SDOT_LANE_STEPS: u64 = 4;

/// Rows of a Helium int8 GEMM tile: one row against the panel's 8 columns (8 accumulators).
pub(super) const MVE_GEMM_ROWS: usize = 1;

/// What a target's dot product adds to the unsigned byte offset of its data operand
/// (`Range::u8_offset`): 0 where it reads unsigned bytes (`vpdpbusd`, `vpmaddwd`), −128 where it
/// reads signed ones (`vpmaddubsw` on signs, taken where `signs`: the kernel's quads hold no
/// −128 on a target where that counts; `sdot`, `smull`: `a + o − 128` is in [−128, 127] exactly
/// when `a + o` is in [0, 255]).
pub(super) fn byte_shift(target: &Target, signs: bool) -> i32 {
    match DotKind::of(target) {
        Some(DotKind::Vnni) => 0,
        Some(DotKind::Madd) if !signs => 0,
        _ => -128,
    }
}

/// The target's dot product, with its intrinsics declared in the module.
#[derive(Clone, Copy)]
pub(super) struct QuadDot<'ctx> {
    pub kind: DotKind,
    /// i32 lanes (output columns) of one accumulator: 16 for `vpdpbusd`, the tiles' 16, 8 or 4
    /// for `vpmaddwd`, else 4.
    pub lanes: u32,
    /// `vpdpbusd`, `vpmaddwd` (`pmaddw.d.512`, `avx2.pmadd.wd` or `sse2.pmadd.wd` by the lanes),
    /// `sdot`, (Neon) `saddlp.v4i32.v8i16`, (Smlad) `arm.smlad`, or (Mve)
    /// `arm.mve.vmldava.v16i8`.
    f: FunctionValue<'ctx>,
    /// The kind's other intrinsics: `smull.v8i16` and `addp.v4i32` (Neon), `psign.b` and
    /// `pmadd.ub.sw` (Signs), `arm.sxtb16` (Smlad, twice).
    more: Option<(FunctionValue<'ctx>, FunctionValue<'ctx>)>,
    /// `Smlad` only: the rows were widened ([`Cg::widen_quads`]): each quad is two dwords, its
    /// even and its odd bytes as signed halfwords, loaded as they are instead of unpacked.
    pub wide_a: bool,
}

impl<'ctx> QuadDot<'ctx> {
    /// The type of one accumulator: `<lanes x i32>`, or two of them (`<8 x i32>`) for Neon.
    pub(super) fn acc_type(&self, cg: &Cg<'_, 'ctx>) -> VectorType<'ctx> {
        cg.ctx
            .i32_type()
            .vec_type(self.lanes * self.kind.registers() as u32)
    }
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// The target's dot product ([`QuadDot`]); only asked where `Packings::reads_vnni` chose
    /// quads (`packing::quad_dot_lanes`).
    pub(super) fn quad_dot(&self) -> QuadDot<'ctx> {
        let kind = match DotKind::of(self.target).expect("quads only where the target has a dot") {
            DotKind::Madd if self.be.vnni_signs.get() => DotKind::Signs,
            kind => kind,
        };
        let i32t = self.ctx.i32_type();
        let declare = |name: &str, ret: VectorType<'ctx>, args: &[VectorType<'ctx>]| {
            self.m.get_function(name).unwrap_or_else(|| {
                let args: Vec<_> = args.iter().map(|t| (*t).into()).collect();
                self.m.add_function(name, ret.fn_type(&args, false), None)
            })
        };
        let (v4, b16) = (i32t.vec_type(4), self.ctx.i8_type().vec_type(16));
        match kind {
            DotKind::Vnni => {
                let v16 = i32t.vec_type(16);
                QuadDot {
                    kind,
                    lanes: 16,
                    f: declare("llvm.x86.avx512.vpdpbusd.512", v16, &[v16, v16, v16]),
                    more: None,
                    wide_a: false,
                }
            }
            DotKind::Madd => {
                let lanes = quad_dot_lanes(self.target).expect("a kind has lanes");
                let (v, w) = (
                    i32t.vec_type(lanes),
                    self.ctx.i16_type().vec_type(2 * lanes),
                );
                let name = match lanes {
                    16 => "llvm.x86.avx512.pmaddw.d.512",
                    8 => "llvm.x86.avx2.pmadd.wd",
                    _ => "llvm.x86.sse2.pmadd.wd",
                };
                QuadDot {
                    kind,
                    lanes,
                    f: declare(name, v, &[w, w]),
                    more: None,
                    wide_a: false,
                }
            }
            DotKind::Signs => {
                let (v8, w16, b32) = (
                    i32t.vec_type(8),
                    self.ctx.i16_type().vec_type(16),
                    self.ctx.i8_type().vec_type(32),
                );
                QuadDot {
                    kind,
                    lanes: 8,
                    f: declare("llvm.x86.avx2.pmadd.wd", v8, &[w16, w16]),
                    more: Some((
                        declare("llvm.x86.avx2.psign.b", b32, &[b32, b32]),
                        declare("llvm.x86.avx2.pmadd.ub.sw", w16, &[b32, b32]),
                    )),
                    wide_a: false,
                }
            }
            DotKind::Sdot => QuadDot {
                kind,
                lanes: 4,
                f: declare("llvm.aarch64.neon.sdot.v4i32.v16i8", v4, &[v4, b16, b16]),
                more: None,
                wide_a: false,
            },
            DotKind::Neon => {
                let (h8, b8) = (
                    self.ctx.i16_type().vec_type(8),
                    self.ctx.i8_type().vec_type(8),
                );
                QuadDot {
                    kind,
                    lanes: 4,
                    f: declare("llvm.aarch64.neon.saddlp.v4i32.v8i16", v4, &[h8]),
                    more: Some((
                        declare("llvm.aarch64.neon.smull.v8i16", h8, &[b8, b8]),
                        declare("llvm.aarch64.neon.addp.v4i32", v4, &[v4, v4]),
                    )),
                    wide_a: false,
                }
            }
            DotKind::Smlad => {
                let declare = |name: &str, args: usize| {
                    self.m.get_function(name).unwrap_or_else(|| {
                        let args = vec![i32t.into(); args];
                        self.m.add_function(name, i32t.fn_type(&args, false), None)
                    })
                };
                let sxtb16 = declare("llvm.arm.sxtb16", 1);
                QuadDot {
                    kind,
                    lanes: 1,
                    f: declare("llvm.arm.smlad", 3),
                    more: Some((sxtb16, sxtb16)),
                    wide_a: false,
                }
            }
            DotKind::Mve => {
                let name = "llvm.arm.mve.vmldava.v16i8";
                let f = self.m.get_function(name).unwrap_or_else(|| {
                    let mut args: Vec<inkwell::types::BasicMetadataTypeEnum<'ctx>> =
                        vec![i32t.into(); 4];
                    args.extend([b16.into(), b16.into()]
                        as [inkwell::types::BasicMetadataTypeEnum<'ctx>; 2]);
                    self.m.add_function(name, i32t.fn_type(&args, false), None)
                });
                QuadDot {
                    kind,
                    lanes: crate::codegen::core::packing::MVE_LANES,
                    f,
                    more: None,
                    wide_a: false,
                }
            }
        }
    }

    /// The K loop of one tile: `steps` dot-product steps of `dot_k` k each
    /// (`core/packing.rs` `dot_k`). At step `s` row `i`'s data operand is at dword
    /// `a_base + a_off[i] + s·dot_k/4` of `a` (an `i32*`: one broadcast dword, or Helium's 16
    /// bytes) and accumulator column `j`'s weights at byte `b_base + b_off[j] + s·b_step` of `b`
    /// (`lanes` columns × `dot_k` bytes); `acc[i][j]` holds the accumulators, in
    /// [`Cg::dot_begin`]'s form, before and after.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn dot_steps(
        &self,
        d: &QuadDot<'ctx>,
        f: FunctionValue<'ctx>,
        acc: &[Vec<PointerValue<'ctx>>],
        steps: IntValue<'ctx>,
        (a, a_base, a_off): (PointerValue<'ctx>, IntValue<'ctx>, &[u64]),
        (b, b_base, b_off, b_step): (PointerValue<'ctx>, IntValue<'ctx>, &[u64], u64),
    ) {
        if d.kind == DotKind::Mve {
            return self.mve_steps(
                d,
                f,
                acc,
                steps,
                (a, a_base, a_off),
                (b, b_base, b_off, b_step),
            );
        }
        // `smlad` with a constant count of steps: a hand-allocated loop, over widened rows or
        // over one packed row (a GEMM's single row, unpacked once per step).
        if let Some(n) = steps
            .get_zero_extended_constant()
            .filter(|_| d.kind == DotKind::Smlad)
        {
            let (a_args, b_args) = ((a, a_base, a_off), (b, b_base, b_off, b_step));
            let emitted = if d.wide_a {
                self.smlad_asm_steps(acc, n, a_args, b_args)
            } else {
                self.smlad_row_asm_steps(acc, n, a_args, b_args)
            };
            if emitted {
                return;
            }
        }
        let i32v = self.ctx.i32_type().vec_type(d.lanes);
        // `smlad`'s row and weight pointers walk by their steps, every load at a constant offset
        // from one of them (`ldr r, [p, #imm]`): computed addresses had taken a third of the
        // loop's instructions and two of its registers. The vector kinds keep the addresses LLVM
        // derives from the step.
        // Widened rows: two dwords per quad (`Cg::widen_quads`).
        let a_dwords: u64 = if d.wide_a { 2 } else { 1 };
        let walked = (d.kind == DotKind::Smlad).then(|| {
            let a_at = self.mul(a_base, a_dwords);
            self.walking_pointers(f, (a, a_at), (b, b_base))
        });
        let step = |cg: &Self, q: IntValue<'ctx>| {
            let (ap, bp) = match walked {
                Some((a_ptr, b_ptr)) => (cg.pointer_at(a_ptr), cg.pointer_at(b_ptr)),
                None => (a, b),
            };
            let bv: Vec<VectorValue<'ctx>> = b_off
                .iter()
                .map(|&o| {
                    let at = match walked {
                        Some(_) => cg.i64(o),
                        None => cg.add(cg.add(b_base, cg.i64(o)), cg.mul(q, b_step)),
                    };
                    cg.load_vector(bp, at, i32v, 4)
                })
                .collect();
            for (i, row) in acc.iter().enumerate() {
                let at = match walked {
                    Some(_) => cg.i64(a_off[i] * a_dwords),
                    None => cg.add(cg.add(a_base, cg.i64(a_off[i])), q),
                };
                if d.wide_a {
                    let word = |o: u64| {
                        cg.b.build_load(cg.gep(ap, cg.i64(a_off[i] * a_dwords + o)), "")
                            .unwrap()
                            .into_int_value()
                    };
                    let halves = (word(0), word(1));
                    for (j, p) in row.iter().enumerate() {
                        let old = cg.b.build_load(*p, "").unwrap().into_vector_value();
                        let new = cg.smlad_halves(d, old, halves, bv[j]);
                        cg.b.build_store(*p, new).unwrap();
                    }
                    continue;
                }
                let s = cg.broadcast_dword(ap, at, d.lanes);
                for (j, p) in row.iter().enumerate() {
                    let old = cg.b.build_load(*p, "").unwrap();
                    let new = cg.dot_quads(d, old, s, bv[j]);
                    cg.b.build_store(*p, new).unwrap();
                }
            }
            if let Some((a_ptr, b_ptr)) = walked {
                cg.b.build_store(a_ptr, cg.gep(ap, cg.i64(a_dwords)))
                    .unwrap();
                cg.b.build_store(b_ptr, cg.gep(bp, cg.i64(b_step))).unwrap();
            }
        };
        // `smlad` with a constant count of steps: up to `SMLAD_UNROLL` per iteration, when
        // optimizing for speed.
        let unroll = match steps.get_zero_extended_constant() {
            Some(n) if d.kind == DotKind::Smlad && self.target.optimize == Optimize::Speed => {
                (1..=SMLAD_UNROLL).rev().find(|u| n % u == 0).unwrap_or(1)
            }
            _ => 1,
        };
        // `sdot`: groups of `SDOT_LANE_STEPS` steps whose row dwords load as one vector, then
        // the steps left one at a time.
        let first = if d.kind == DotKind::Sdot {
            self.sdot_lane_steps(
                d,
                acc,
                steps,
                (a, a_base, a_off),
                (b, b_base, b_off, b_step),
            )
        } else {
            self.i64(0)
        };
        let iters = self
            .b
            .build_int_unsigned_div(steps, self.i64(unroll), "")
            .unwrap();
        self.for_range(first, iters, &mut |cg, q| {
            for u in 0..unroll {
                step(cg, cg.add(cg.mul(q, unroll), cg.i64(u)));
            }
        });
    }

    /// The whole groups of [`SDOT_LANE_STEPS`] steps of an `sdot` K loop: each row's
    /// [`SDOT_LANE_STEPS`] consecutive dwords loaded as one vector, and each step's `sdot` takes
    /// its dword by lane (`sdot v.4s, v.16b, v.4b[i]`: LLVM selects the indexed form for a lane
    /// splat), where the one-step loop broadcast every row's dword with its own `ld1r` and an
    /// address `add` (31 instructions per 15 `sdot`s in squeezenet's last layer on the A78).
    /// Returns the first step left.
    fn sdot_lane_steps(
        &self,
        d: &QuadDot<'ctx>,
        acc: &[Vec<PointerValue<'ctx>>],
        steps: IntValue<'ctx>,
        (a, a_base, a_off): (PointerValue<'ctx>, IntValue<'ctx>, &[u64]),
        (b, b_base, b_off, b_step): (PointerValue<'ctx>, IntValue<'ctx>, &[u64], u64),
    ) -> IntValue<'ctx> {
        let group = SDOT_LANE_STEPS;
        let i32v = self.ctx.i32_type().vec_type(d.lanes);
        let rowv = self.ctx.i32_type().vec_type(group as u32);
        let groups = self
            .b
            .build_int_unsigned_div(steps, self.i64(group), "")
            .unwrap();
        self.for_range(self.i64(0), groups, &mut |cg, g| {
            let q0 = cg.mul(g, group);
            let rows: Vec<VectorValue<'ctx>> = a_off
                .iter()
                .map(|&o| cg.load_vector(a, cg.add(cg.add(a_base, cg.i64(o)), q0), rowv, 4))
                .collect();
            for u in 0..group {
                let q = cg.add(q0, cg.i64(u));
                let bv: Vec<VectorValue<'ctx>> = b_off
                    .iter()
                    .map(|&o| {
                        let at = cg.add(cg.add(b_base, cg.i64(o)), cg.mul(q, b_step));
                        cg.load_vector(b, at, i32v, 4)
                    })
                    .collect();
                let lane = cg.ctx.i32_type().const_int(u, false);
                let mask = VectorType::const_vector(&vec![lane; d.lanes as usize]);
                for (i, row) in acc.iter().enumerate() {
                    let s =
                        cg.b.build_shuffle_vector(rows[i], rowv.get_undef(), mask, "")
                            .unwrap();
                    for (j, p) in row.iter().enumerate() {
                        let old = cg.b.build_load(*p, "").unwrap();
                        let new = cg.dot_quads(d, old, s, bv[j]);
                        cg.b.build_store(*p, new).unwrap();
                    }
                }
            }
        });
        self.mul(groups, group)
    }

    /// Two stack slots holding `a + a_at` and `b + b_at` (elements of each pointer's type), for a
    /// K loop whose pointers walk by their steps ([`Cg::dot_steps`], [`Cg::mve_steps`]).
    fn walking_pointers(
        &self,
        f: FunctionValue<'ctx>,
        (a, a_at): (PointerValue<'ctx>, IntValue<'ctx>),
        (b, b_at): (PointerValue<'ctx>, IntValue<'ctx>),
    ) -> (PointerValue<'ctx>, PointerValue<'ctx>) {
        let slot = |p: PointerValue<'ctx>, at: IntValue<'ctx>| {
            let s = self.slot(f, p.get_type().into());
            self.b.build_store(s, self.gep(p, at)).unwrap();
            s
        };
        (slot(a, a_at), slot(b, b_at))
    }

    /// The pointer a [`Cg::walking_pointers`] slot holds now.
    fn pointer_at(&self, slot: PointerValue<'ctx>) -> PointerValue<'ctx> {
        self.b.build_load(slot, "").unwrap().into_pointer_value()
    }

    /// [`Cg::dot_steps`] with `vmlava.s8` (module doc): each `<4 x i32>` accumulator split into
    /// four scalar slots for the loop (LLVM keeps them in core registers; a vector phi would
    /// move every sum between a core and a vector register), gathered again after it; the row
    /// and weight pointers walk by their steps, every load at a constant offset from one of them
    /// (`vldrb.u8 q, [r, #imm]`, post-incremented).
    #[allow(clippy::too_many_arguments)]
    fn mve_steps(
        &self,
        d: &QuadDot<'ctx>,
        f: FunctionValue<'ctx>,
        acc: &[Vec<PointerValue<'ctx>>],
        steps: IntValue<'ctx>,
        (a, a_base, a_off): (PointerValue<'ctx>, IntValue<'ctx>, &[u64]),
        (b, b_base, b_off, b_step): (PointerValue<'ctx>, IntValue<'ctx>, &[u64], u64),
    ) {
        use crate::codegen::core::packing::MVE_K;
        let (i32t, i8t) = (self.ctx.i32_type(), self.ctx.i8_type());
        let b16 = i8t.vec_type(MVE_K as u32);
        let lanes = d.lanes as u64;
        let i8p = i8t.ptr_type(AddressSpace::default());
        let a8 = self.b.build_pointer_cast(a, i8p, "").unwrap();
        let scalars: Vec<Vec<Vec<PointerValue<'ctx>>>> = acc
            .iter()
            .map(|row| {
                row.iter()
                    .map(|p| {
                        let v = self.b.build_load(*p, "").unwrap().into_vector_value();
                        (0..lanes)
                            .map(|c| {
                                let s = self.slot(f, i32t.into());
                                let x = self
                                    .b
                                    .build_extract_element(v, i32t.const_int(c, false), "")
                                    .unwrap();
                                self.b.build_store(s, x).unwrap();
                                s
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let (a_ptr, b_ptr) = self.walking_pointers(f, (a8, self.mul(a_base, 4)), (b, b_base));
        let zero = i32t.const_zero();
        self.for_range(self.i64(0), steps, &mut |cg, _| {
            // The rows' 16 bytes first, then each column's 16 weights against every row: at most
            // rows + 1 vector registers live.
            let ap = cg.pointer_at(a_ptr);
            let av: Vec<BasicValueEnum<'ctx>> = a_off
                .iter()
                .map(|&o| cg.load_vector(ap, cg.i64(4 * o), b16, 4).into())
                .collect();
            cg.b.build_store(a_ptr, cg.gep(ap, cg.i64(MVE_K as u64)))
                .unwrap();
            let bp = cg.pointer_at(b_ptr);
            for (j, &o) in b_off.iter().enumerate() {
                for c in 0..lanes {
                    let w = cg.load_vector(bp, cg.i64(o + c * MVE_K as u64), b16, 1);
                    for (i, row) in scalars.iter().enumerate() {
                        let p = row[j][c as usize];
                        let old = cg.b.build_load(p, "").unwrap();
                        let new = cg.call(
                            d.f,
                            &[zero.into(), zero.into(), zero.into(), old, av[i], w.into()],
                        );
                        cg.b.build_store(p, new).unwrap();
                    }
                }
            }
            cg.b.build_store(b_ptr, cg.gep(bp, cg.i64(b_step))).unwrap();
        });
        for (row, srow) in acc.iter().zip(&scalars) {
            for (p, sp) in row.iter().zip(srow) {
                let mut v = d.acc_type(self).get_undef();
                for (c, s) in sp.iter().enumerate() {
                    let x = self.b.build_load(*s, "").unwrap().into_int_value();
                    v = self
                        .b
                        .build_insert_element(v, x, i32t.const_int(c as u64, false), "")
                        .unwrap();
                }
                self.b.build_store(*p, v).unwrap();
            }
        }
    }

    /// An accumulator holding the sums `start` (`<lanes x i32>`). Neon: column `c`'s sum in lane
    /// `2c` of the two registers, zero in the others (what [`Cg::dot_end`]'s `addp` folds).
    pub(super) fn dot_begin(
        &self,
        d: &QuadDot<'ctx>,
        start: VectorValue<'ctx>,
    ) -> VectorValue<'ctx> {
        if d.kind != DotKind::Neon {
            return start;
        }
        let zero = start.get_type().const_zero();
        let mask: Vec<_> = [0u64, 4, 1, 4, 2, 4, 3, 4]
            .iter()
            .map(|&i| self.ctx.i32_type().const_int(i, false))
            .collect();
        self.b
            .build_shuffle_vector(start, zero, VectorType::const_vector(&mask), "")
            .unwrap()
    }

    /// `acc + dot(a, b)`: `a` the broadcast quad of a row, `b` the weights' quads, both
    /// `<lanes x i32>`.
    pub(super) fn dot_quads(
        &self,
        d: &QuadDot<'ctx>,
        acc: BasicValueEnum<'ctx>,
        a: VectorValue<'ctx>,
        b: VectorValue<'ctx>,
    ) -> BasicValueEnum<'ctx> {
        if d.kind == DotKind::Vnni {
            return self.call(d.f, &[acc, a.into(), b.into()]);
        }
        if d.kind == DotKind::Madd {
            return self.madd_quads(d, acc.into_vector_value(), a, b).into();
        }
        if d.kind == DotKind::Signs {
            return self.sign_quads(d, acc.into_vector_value(), a, b).into();
        }
        if d.kind == DotKind::Smlad {
            return self.smlad_quads(d, acc.into_vector_value(), a, b).into();
        }
        let b16 = self.ctx.i8_type().vec_type(16);
        let a = self
            .b
            .build_bit_cast(a, b16, "")
            .unwrap()
            .into_vector_value();
        let b = self
            .b
            .build_bit_cast(b, b16, "")
            .unwrap()
            .into_vector_value();
        if d.kind == DotKind::Sdot {
            // The row second: LLVM selects the indexed `sdot` (`v.4b[i]`) for a lane splat only
            // as the instruction's last operand (the products commute).
            return self.call(d.f, &[acc, b.into(), a.into()]);
        }
        // Neon: smull / smull2 on each half, sadalp into the matching register.
        let Some((smull, _)) = d.more else {
            unreachable!("a Neon dot declares smull")
        };
        let half = |v: VectorValue<'ctx>, hi: bool| {
            let base = if hi { 8 } else { 0 };
            let mask: Vec<_> = (0..8u64)
                .map(|i| self.ctx.i32_type().const_int(base + i, false))
                .collect();
            self.b
                .build_shuffle_vector(v, b16.get_undef(), VectorType::const_vector(&mask), "")
                .unwrap()
        };
        let sums: Vec<VectorValue<'ctx>> = [false, true]
            .iter()
            .map(|&hi| {
                let p = self.call(smull, &[half(a, hi).into(), half(b, hi).into()]);
                self.call(d.f, &[p]).into_vector_value()
            })
            .collect();
        let both_mask: Vec<_> = (0..8u64)
            .map(|i| self.ctx.i32_type().const_int(i, false))
            .collect();
        let both = self
            .b
            .build_shuffle_vector(sums[0], sums[1], VectorType::const_vector(&both_mask), "")
            .unwrap();
        self.b
            .build_int_add(acc.into_vector_value(), both, "")
            .unwrap()
            .into()
    }

    /// `acc + dot(a, b)` with `vpmaddwd` (module doc): the low bytes of each word of `a` times
    /// those of `b`, plus the high bytes times the high bytes, `a`'s zero-extended to words and
    /// `b`'s sign-extended.
    fn madd_quads(
        &self,
        d: &QuadDot<'ctx>,
        acc: VectorValue<'ctx>,
        a: VectorValue<'ctx>,
        b: VectorValue<'ctx>,
    ) -> VectorValue<'ctx> {
        let w = self.ctx.i16_type().vec_type(2 * d.lanes);
        let eight = self.ctx.i16_type().const_int(8, false);
        let eight = VectorType::const_vector(&vec![eight; 2 * d.lanes as usize]);
        let byte = self.ctx.i16_type().const_int(0xff, false);
        let byte = VectorType::const_vector(&vec![byte; 2 * d.lanes as usize]);
        let words = |v: VectorValue<'ctx>, signed: bool| {
            let v = self.b.build_bit_cast(v, w, "").unwrap().into_vector_value();
            let low = if signed {
                let up = self.b.build_left_shift(v, eight, "").unwrap();
                self.b.build_right_shift(up, eight, true, "").unwrap()
            } else {
                self.b.build_and(v, byte, "").unwrap()
            };
            let high = self.b.build_right_shift(v, eight, signed, "").unwrap();
            (low, high)
        };
        let ((a_lo, a_hi), (b_lo, b_hi)) = (words(a, false), words(b, true));
        let lo = self.call(d.f, &[a_lo.into(), b_lo.into()]);
        let hi = self.call(d.f, &[a_hi.into(), b_hi.into()]);
        // The two halves first: the accumulator's chain takes one add per quad step.
        let both = self
            .b
            .build_int_add(lo.into_vector_value(), hi.into_vector_value(), "")
            .unwrap();
        self.b.build_int_add(acc, both, "").unwrap()
    }

    /// `acc + dot(a, b)` with `sxtb16` and `smlad` on one lane (module doc).
    fn smlad_quads(
        &self,
        d: &QuadDot<'ctx>,
        acc: VectorValue<'ctx>,
        a: VectorValue<'ctx>,
        b: VectorValue<'ctx>,
    ) -> VectorValue<'ctx> {
        let a = self.sxtb16_halves(d, self.lane0(a));
        self.smlad_halves(d, acc, a, b)
    }

    /// `acc + dot(a, b)` for a row already unpacked into its even and odd halves `a`.
    fn smlad_halves(
        &self,
        d: &QuadDot<'ctx>,
        acc: VectorValue<'ctx>,
        (a_even, a_odd): (IntValue<'ctx>, IntValue<'ctx>),
        b: VectorValue<'ctx>,
    ) -> VectorValue<'ctx> {
        let i32t = self.ctx.i32_type();
        let (b_even, b_odd) = self.sxtb16_halves(d, self.lane0(b));
        let sum = self.call(d.f, &[a_even.into(), b_even.into(), self.lane0(acc).into()]);
        let sum = self.call(d.f, &[a_odd.into(), b_odd.into(), sum]);
        self.b
            .build_insert_element(acc, sum.into_int_value(), i32t.const_zero(), "")
            .unwrap()
    }

    /// Lane 0 of an `smlad` operand (`<1 x i32>`).
    fn lane0(&self, v: VectorValue<'ctx>) -> IntValue<'ctx> {
        self.b
            .build_extract_element(v, self.ctx.i32_type().const_zero(), "")
            .unwrap()
            .into_int_value()
    }

    /// A quad's bytes 0 and 2, and (rotated right by 8: LLVM folds the rotation into `sxtb16`'s
    /// `ror #8`) bytes 1 and 3, as signed halfwords.
    fn sxtb16_halves(
        &self,
        d: &QuadDot<'ctx>,
        v: IntValue<'ctx>,
    ) -> (IntValue<'ctx>, IntValue<'ctx>) {
        let Some((sxtb16, _)) = d.more else {
            unreachable!("a Smlad dot declares sxtb16")
        };
        let i32t = self.ctx.i32_type();
        let down = self
            .b
            .build_right_shift(v, i32t.const_int(8, false), false, "")
            .unwrap();
        let up = self
            .b
            .build_left_shift(v, i32t.const_int(24, false), "")
            .unwrap();
        let rotated = self.b.build_or(down, up, "").unwrap();
        let unpack = |x: IntValue<'ctx>| self.call(sxtb16, &[x.into()]).into_int_value();
        (unpack(v), unpack(rotated))
    }

    /// The `quads` quads at dword `quads` of `buf` (an `i32*` of twice as many dwords) widened
    /// in place for an `smlad` K loop: quad `q`'s even bytes as signed halfwords at dword `2q`,
    /// its odd ones at `2q + 1` ([`QuadDot::wide_a`]). Front to back, each store lands below
    /// every quad not yet read (`2q + 1 < quads + q + 1`), so one buffer holds both forms: the
    /// stack keeps one staging buffer (a separate widened copy had added 3.5 KB to resnet's
    /// stack high-water mark on the M4). Unpacked once here, a staged row is loaded as it is by
    /// every column panel and tap that reads it: the K loop's row takes one register instead
    /// of two, and a 3 × 2 tile fits the core registers.
    pub(super) fn widen_quads(&self, d: &QuadDot<'ctx>, buf: PointerValue<'ctx>, quads: usize) {
        self.for_loop(quads, &mut |cg, q| {
            let src = cg.add(q, cg.i64(quads as u64));
            let v =
                cg.b.build_load(cg.gep(buf, src), "")
                    .unwrap()
                    .into_int_value();
            let (even, odd) = cg.sxtb16_halves(d, v);
            let at = cg.mul(q, 2);
            cg.b.build_store(cg.gep(buf, at), even).unwrap();
            cg.b.build_store(cg.gep(buf, cg.add(at, cg.i64(1))), odd)
                .unwrap();
        });
    }

    /// `acc + dot(a, b)` with `vpmaddubsw` on signs (module doc): `|a|` times `sign(a)·b` in
    /// i16 pairs, summed into i32 by `vpmaddwd` with ones.
    fn sign_quads(
        &self,
        d: &QuadDot<'ctx>,
        acc: VectorValue<'ctx>,
        a: VectorValue<'ctx>,
        b: VectorValue<'ctx>,
    ) -> VectorValue<'ctx> {
        let Some((sign, ubsw)) = d.more else {
            unreachable!("a Signs dot declares psign and pmaddubsw")
        };
        let b32 = self.ctx.i8_type().vec_type(32);
        let a = self
            .b
            .build_bit_cast(a, b32, "")
            .unwrap()
            .into_vector_value();
        let b = self.b.build_bit_cast(b, b32, "").unwrap();
        // |a| as a select: LLVM selects vpabsb for it.
        let neg = self.b.build_int_neg(a, "").unwrap();
        let is_neg = self
            .b
            .build_int_compare(IntPredicate::SLT, a, b32.const_zero(), "")
            .unwrap();
        let abs = self.b.build_select(is_neg, neg, a, "").unwrap();
        let signed = self.call(sign, &[b, a.into()]);
        let pairs = self.call(ubsw, &[abs, signed]);
        let one = self.ctx.i16_type().const_int(1, false);
        let ones = VectorType::const_vector(&[one; 16]);
        let sums = self.call(d.f, &[pairs, ones.into()]);
        self.b
            .build_int_add(acc, sums.into_vector_value(), "")
            .unwrap()
    }

    /// The `<lanes x i32>` sums of accumulator `acc` (Neon: `addp` of its two registers).
    pub(super) fn dot_end(&self, d: &QuadDot<'ctx>, acc: VectorValue<'ctx>) -> VectorValue<'ctx> {
        let (DotKind::Neon, Some((_, addp))) = (d.kind, d.more) else {
            return acc;
        };
        let part = |base: u64| {
            let mask: Vec<_> = (0..4u64)
                .map(|i| self.ctx.i32_type().const_int(base + i, false))
                .collect();
            self.b
                .build_shuffle_vector(
                    acc,
                    acc.get_type().get_undef(),
                    VectorType::const_vector(&mask),
                    "",
                )
                .unwrap()
        };
        self.call(addp, &[part(0).into(), part(4).into()])
            .into_vector_value()
    }
}
