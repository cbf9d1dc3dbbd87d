//! The K loop of a `precision: f16` GEMM micro-tile on a target with FP16 arithmetic (aarch64
//! `+fullfp16`): f16 products summed in f16 (`fmla v.8h`) within blocks of [`F16_K_BLOCK`] k,
//! each block's sum widened (`fcvtl`) and added into the tile's f32 accumulators.
//!
//! Contract:
//! - `gemm.rs` takes this path for a dot whose weight is packed in f16 panels
//!   (`Cpu::half_rhs == F16`) when the module's precision is `f16` and
//!   `Target::has_f16_arith`; its K-block (`Tiles::kc`) is then a multiple of [`F16_K_BLOCK`] (or
//!   the whole K), so the f16 blocks are `[16j, 16j + 16)` of k, whatever the tiling.
//! - A is read as f32 and narrowed (`fcvt h, s`): in a `precision: f16` module it holds values
//!   rounded by `round-f16` (`compile/bf16_operands.rs`), so the narrowing is exact; B's panels
//!   are loaded as halves as they are stored (2 bytes per value), not widened.
//! - Within a block, every output element is `h ← fma(a_k, b_k, h)` rounded to f16 at each step,
//!   in increasing k from `h = 0`; then `acc ← acc + f32(h)` in f32, blocks in increasing k. So the
//!   result is independent of the tile sizes, and differs from the reference interpreter's f32
//!   sum of the same rounded products by the f16 sums' rounding (2⁻¹¹ of the running block sum
//!   per step): `run --compare` and the tests use the `f16` bound of `driver/compare.rs`.
//! - Adjacent vectors of one panel are paired into 8 halves (`.8h`), a lone 4-lane vector is a
//!   `.4h`.

use super::Cg;
use super::vector::VecCol;
use crate::codegen::core::layout::Geometry;
use crate::ir::{DType, F16_K_BLOCK};
use inkwell::values::{FunctionValue, IntValue, PointerValue, VectorValue};

/// Halves in one 128-bit NEON register (`.8h`): the widest f16 vector a group of a panel's
/// vectors forms.
const F16_LANES: u32 = 8;

/// A run of adjacent vectors of one panel computed as one f16 vector.
struct Group {
    /// Indices into the tile's `cols`.
    members: Vec<usize>,
    lanes: u32,
}

/// `cols` cut into groups of adjacent vectors of one panel (`nr` columns) of at most
/// [`F16_LANES`] lanes.
fn groups(cols: &[VecCol], nr: usize) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for (j, v) in cols.iter().enumerate() {
        if let Some(g) = out.last_mut() {
            let prev = &cols[*g.members.last().expect("groups are not empty")];
            let adjacent = prev.col + prev.lanes as usize == v.col;
            let same_panel = prev.col / nr == v.col / nr;
            if adjacent && same_panel && g.lanes + v.lanes <= F16_LANES {
                g.members.push(j);
                g.lanes += v.lanes;
                continue;
            }
        }
        out.push(Group {
            members: vec![j],
            lanes: v.lanes,
        });
    }
    out
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// `acc[i][j] += A[row0 + i, k] · B[k, cols[j]]` for `k ∈ [k0, k0 + klen)`, B packed in f16
    /// panels of `nr` columns (`pp` per chunk `jr`), in f16 blocks as the module doc says.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn f16_k_loop(
        &self,
        f: FunctionValue<'ctx>,
        g: &Geometry,
        (nr, pp): (usize, usize),
        (a, b): (PointerValue<'ctx>, PointerValue<'ctx>),
        acc: &[Vec<PointerValue<'ctx>>],
        cols: &[VecCol],
        row0: IntValue<'ctx>,
        (jr, k0, klen): (IntValue<'ctx>, IntValue<'ctx>, IntValue<'ctx>),
    ) {
        let nr64 = nr as u64;
        let half = self.ctx.f16_type();
        let grs = groups(cols, nr);
        // Each group's offset in B at k = 0 (its first vector's column in its panel).
        let b_base: Vec<IntValue<'ctx>> = grs
            .iter()
            .map(|gr| {
                let v = &cols[gr.members[0]];
                let panel = self.add(self.mul(jr, pp as u64), self.i64(v.col as u64 / nr64));
                self.add(
                    self.mul(panel, g.k as u64 * nr64),
                    self.i64(v.col as u64 % nr64),
                )
            })
            .collect();
        let a_row: Vec<IntValue<'ctx>> = (0..acc.len())
            .map(|i| self.mul(self.add(row0, self.i64(i as u64)), g.a_m))
            .collect();
        let hacc: Vec<Vec<PointerValue<'ctx>>> = acc
            .iter()
            .map(|_| {
                grs.iter()
                    .map(|gr| self.slot(f, half.vec_type(gr.lanes).into()))
                    .collect()
            })
            .collect();
        let fmas: Vec<FunctionValue<'ctx>> = grs
            .iter()
            .map(|gr| {
                inkwell::intrinsics::Intrinsic::find("llvm.fma")
                    .expect("llvm.fma exists")
                    .get_declaration(self.m, &[half.vec_type(gr.lanes).into()])
                    .expect("vector fma")
            })
            .collect();
        let kend = self.add(k0, klen);
        let blocks = self
            .b
            .build_int_unsigned_div(
                self.add(klen, self.i64(F16_K_BLOCK as u64 - 1)),
                self.i64(F16_K_BLOCK as u64),
                "",
            )
            .unwrap();
        self.for_range(self.i64(0), blocks, &mut |cg, kb| {
            let kb0 = cg.add(k0, cg.mul(kb, F16_K_BLOCK as u64));
            let kb1 = cg.umin(cg.add(kb0, cg.i64(F16_K_BLOCK as u64)), kend);
            for row in &hacc {
                for (p, gr) in row.iter().zip(&grs) {
                    cg.b.build_store(*p, half.vec_type(gr.lanes).const_zero())
                        .unwrap();
                }
            }
            cg.for_range(kb0, kb1, &mut |cg, kk| {
                let bv: Vec<VectorValue<'ctx>> = grs
                    .iter()
                    .zip(&b_base)
                    .map(|(gr, &base)| cg.vload_f16(b, cg.add(base, cg.mul(kk, nr64)), gr.lanes))
                    .collect();
                let ak = cg.mul(kk, g.a_k);
                for (i, row) in hacc.iter().enumerate() {
                    let x = cg
                        .load(a, cg.add(a_row[i], ak), DType::F32)
                        .into_float_value();
                    let x = cg.b.build_float_trunc(x, half, "").unwrap();
                    for (j, gr) in grs.iter().enumerate() {
                        let s = cg.splat_f16(x, gr.lanes);
                        let old = cg.b.build_load(row[j], "").unwrap();
                        let new = cg.call(fmas[j], &[s.into(), bv[j].into(), old]);
                        cg.b.build_store(row[j], new).unwrap();
                    }
                }
            });
            // The block's sums, widened into the f32 accumulators of their vectors.
            for (row_h, row_f) in hacc.iter().zip(acc) {
                for (p, gr) in row_h.iter().zip(&grs) {
                    let h = cg.b.build_load(*p, "").unwrap().into_vector_value();
                    let mut lane = 0;
                    for &j in &gr.members {
                        let v = &cols[j];
                        let part = if gr.members.len() == 1 {
                            h
                        } else {
                            let mask: Vec<_> = (lane..lane + v.lanes)
                                .map(|l| cg.ctx.i32_type().const_int(l as u64, false))
                                .collect();
                            cg.b.build_shuffle_vector(
                                h,
                                h.get_type().get_undef(),
                                inkwell::types::VectorType::const_vector(&mask),
                                "",
                            )
                            .unwrap()
                        };
                        lane += v.lanes;
                        let w = cg.b.build_float_ext(part, cg.vec_ty(v.lanes), "").unwrap();
                        let old = cg.b.build_load(row_f[j], "").unwrap().into_vector_value();
                        let sum = cg.b.build_float_add(old, w, "").unwrap();
                        cg.b.build_store(row_f[j], sum).unwrap();
                    }
                }
            }
        });
    }

    /// `lanes` halves at `p + off` (`p` an `i16*`: f16 panels) as an f16 vector, not widened.
    fn vload_f16(
        &self,
        p: PointerValue<'ctx>,
        off: IntValue<'ctx>,
        lanes: u32,
    ) -> VectorValue<'ctx> {
        self.load_vector(p, off, self.ctx.f16_type().vec_type(lanes), 2)
    }

    /// `x` (an f16) in every one of `lanes` lanes.
    fn splat_f16(&self, x: inkwell::values::FloatValue<'ctx>, lanes: u32) -> VectorValue<'ctx> {
        let undef = self.ctx.f16_type().vec_type(lanes).get_undef();
        let v = self
            .b
            .build_insert_element(undef, x, self.ctx.i32_type().const_zero(), "")
            .unwrap();
        let mask = self.ctx.i32_type().vec_type(lanes).const_zero();
        self.b.build_shuffle_vector(v, undef, mask, "").unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(col: usize, lanes: u32) -> VecCol {
        VecCol {
            col,
            lanes,
            store: lanes,
        }
    }

    #[test]
    fn vectors_of_a_panel_pair_into_eight_halves() {
        // Two panels of 12 columns (3 NEON vectors each): 8 + 4 per panel, never across panels.
        let cols: Vec<VecCol> = (0..6).map(|j| col(4 * j, 4)).collect();
        let g = groups(&cols, 12);
        let shape: Vec<(Vec<usize>, u32)> = g.into_iter().map(|g| (g.members, g.lanes)).collect();
        assert_eq!(
            shape,
            vec![(vec![0, 1], 8), (vec![2], 4), (vec![3, 4], 8), (vec![5], 4)]
        );
    }
}
