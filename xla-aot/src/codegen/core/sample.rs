//! Kernels of `top-k` and `sample`: the decode-time ops, one output element at a time.
//!
//! Contract: both kernels follow the reference definitions in `interp/sample.rs` step for step
//! (docs/sampling.md), in f32 and integer arithmetic in the same order, so a compiled `sample`
//! draws the token the interpreter draws (up to the last-ulp difference of the inline `exp`,
//! which moves a draw only when it lands within a few ulps of a boundary) and the same token on
//! every target. Each output element is computed on its own from its row (`loop_nest_physical`
//! visits every element on a CPU and one element per GPU thread in the grid form), with fixed trip
//! counts: no data-dependent control flow beyond the row loops.

use super::emitter::{Backend, Emitter, Ix, Kernel};
use crate::ir::{DType, Shape, UnaryOp};
use inkwell::values::{BasicValueEnum, IntValue};
use inkwell::{FloatPredicate, IntPredicate};

/// The low word of a packed top-k candidate is `INDEX_BIAS - index` (see `top_k_kernel`).
const INDEX_BIAS: u64 = 0xFFFF_FFFE;

/// Bisection steps over a 32-bit key range (enough to close any interval of 2^32 keys).
const BISECTION_STEPS: usize = 32;

/// Philox-4x32 multipliers, key increments and rounds (as in `interp/sample.rs`).
const PHILOX_M: [u64; 2] = [0xD251_1F53, 0xCD9E_8D57];
const PHILOX_W: [u64; 2] = [0x9E37_79B9, 0xBB67_AE85];
const PHILOX_ROUNDS: usize = 10;

type At<'x, 'ctx> = &'x dyn Fn(usize, Ix<'_, 'ctx>) -> BasicValueEnum<'ctx>;

impl<'a, 'ctx, B: Backend<'ctx>> Emitter<'a, 'ctx, B> {
    fn i32c(&self, v: i64) -> IntValue<'ctx> {
        self.ctx.i32_type().const_int(v as u64, true)
    }

    /// The total-order key of an f32 (`interp::sample::order_key`), as i32.
    fn order_key(&self, x: inkwell::values::FloatValue<'ctx>) -> IntValue<'ctx> {
        let b = &self.b;
        let bits = b
            .build_bit_cast(x, self.ctx.i32_type(), "")
            .unwrap()
            .into_int_value();
        let neg = b
            .build_int_compare(IntPredicate::SLT, bits, self.i32c(0), "")
            .unwrap();
        let flipped = b.build_xor(bits, self.i32c(i32::MAX as i64), "").unwrap();
        let key = self.select(neg, flipped.into(), bits.into());
        let nan = self.fcmp(FloatPredicate::UNO, x, x);
        self.select(nan, self.i32c(i32::MAX as i64).into(), key)
            .into_int_value()
    }

    /// The multi-index of element `j` of the row that output element `oidx` reduces.
    fn row_index(oidx: &[IntValue<'ctx>], j: IntValue<'ctx>, last: bool) -> Vec<IntValue<'ctx>> {
        let mut v: Vec<IntValue<'ctx>> = if last {
            oidx[..oidx.len() - 1].to_vec()
        } else {
            oidx.to_vec()
        };
        v.push(j);
        v
    }

    /// `top-k` along the last dimension: element `[r.., j]` is the (j+1)-th largest of row `r`
    /// by (key descending, index ascending), found by j+1 max-below passes over the row.
    pub(crate) fn top_k_kernel(
        &self,
        k: &Kernel<'ctx>,
        indices: bool,
        shape: &Shape,
        opnds: &[Shape],
        at: At<'_, 'ctx>,
    ) {
        let v = *opnds[0].dims.last().expect("rank >= 1");
        let i64t = self.ctx.i64_type();
        let prev = self.slot(k.f, i64t.into());
        let best = self.slot(k.f, i64t.into());
        // Element i packs as key << 32 | (INDEX_BIAS - i): the NaN key at index 0 stays below the
        // i64::MAX start value (INDEX_BIAS < 2^32 - 1; every index fits, MAX_ELEMENTS < 2^31).
        let low_mask = self.i64(0xFFFF_FFFF);
        let bias = self.i64(INDEX_BIAS);
        self.loop_nest_physical(shape, &mut |cg, oidx| {
            let b = &cg.b;
            let j = *oidx.last().expect("rank >= 1");
            b.build_store(prev, i64t.const_int(i64::MAX as u64, true))
                .unwrap();
            let rounds = b.build_int_add(j, cg.i64(1), "").unwrap();
            cg.for_range(cg.i64(0), rounds, &mut |cg, _| {
                let b = &cg.b;
                b.build_store(best, i64t.const_int(i64::MIN as u64, true))
                    .unwrap();
                let p = b.build_load(prev, "").unwrap().into_int_value();
                cg.for_loop(v, &mut |cg, i| {
                    let b = &cg.b;
                    let x = at(0, Ix::Multi(&Self::row_index(oidx, i, true))).into_float_value();
                    let key = b.build_int_s_extend(cg.order_key(x), i64t, "").unwrap();
                    let hi = b.build_left_shift(key, cg.i64(32), "").unwrap();
                    let lo = b.build_int_sub(bias, i, "").unwrap();
                    let c = b.build_or(hi, lo, "").unwrap();
                    let bb = b.build_load(best, "").unwrap().into_int_value();
                    let below = b.build_int_compare(IntPredicate::SLT, c, p, "").unwrap();
                    let more = b.build_int_compare(IntPredicate::SGT, c, bb, "").unwrap();
                    let take = b.build_and(below, more, "").unwrap();
                    b.build_store(best, cg.select(take, c.into(), bb.into()))
                        .unwrap();
                });
                let bb = cg.b.build_load(best, "").unwrap();
                cg.b.build_store(prev, bb).unwrap();
            });
            let b = &cg.b;
            let c = b.build_load(prev, "").unwrap().into_int_value();
            let lo = b.build_and(c, low_mask, "").unwrap();
            let index = b.build_int_sub(bias, lo, "").unwrap();
            let off = cg.offset(oidx, shape);
            if indices {
                let i32v = b.build_int_truncate(index, cg.ctx.i32_type(), "").unwrap();
                cg.store(k.out, off, i32v.into(), DType::I32);
            } else {
                let x = at(0, Ix::Multi(&Self::row_index(oidx, index, true)));
                cg.store(k.out, off, x, DType::F32);
            }
        });
    }

    /// Philox-4x32-10's first output word for counter `(c0, c1, 0, 0)` and key `(k0, 0)`.
    fn philox_word0(
        &self,
        c0: IntValue<'ctx>,
        c1: IntValue<'ctx>,
        k0: IntValue<'ctx>,
    ) -> IntValue<'ctx> {
        let b = &self.b;
        let (i32t, i64t) = (self.ctx.i32_type(), self.ctx.i64_type());
        let mut c = [c0, c1, self.i32c(0), self.i32c(0)];
        let mut key = [k0, self.i32c(0)];
        let mulhilo = |m: u64, x: IntValue<'ctx>| {
            let p = b
                .build_int_mul(
                    i64t.const_int(m, false),
                    b.build_int_z_extend(x, i64t, "").unwrap(),
                    "",
                )
                .unwrap();
            let hi = b.build_right_shift(p, self.i64(32), false, "").unwrap();
            (
                b.build_int_truncate(hi, i32t, "").unwrap(),
                b.build_int_truncate(p, i32t, "").unwrap(),
            )
        };
        for r in 0..PHILOX_ROUNDS {
            if r > 0 {
                for (kk, w) in key.iter_mut().zip(PHILOX_W) {
                    *kk = b.build_int_add(*kk, i32t.const_int(w, false), "").unwrap();
                }
            }
            let (hi0, lo0) = mulhilo(PHILOX_M[0], c[0]);
            let (hi1, lo1) = mulhilo(PHILOX_M[1], c[2]);
            let x0 = b
                .build_xor(b.build_xor(hi1, c[1], "").unwrap(), key[0], "")
                .unwrap();
            let x2 = b
                .build_xor(b.build_xor(hi0, c[3], "").unwrap(), key[1], "")
                .unwrap();
            c = [x0, lo1, x2, lo0];
        }
        c[0]
    }

    /// `sample`: one token per row of logits (operands: logits, seed, step, temperature, top_k,
    /// top_p); see `interp::sample::sample_row` for the definition this follows.
    pub(crate) fn sample_kernel(
        &self,
        k: &Kernel<'ctx>,
        shape: &Shape,
        opnds: &[Shape],
        at: At<'_, 'ctx>,
    ) {
        let v = *opnds[0].dims.last().expect("rank >= 1");
        let (i1t, i32t, i64t, f32t) = (
            self.ctx.bool_type(),
            self.ctx.i32_type(),
            self.ctx.i64_type(),
            self.ctx.f32_type(),
        );
        let s_best = self.slot(k.f, i64t.into());
        let s_m = self.slot(k.f, f32t.into());
        let s_lo = self.slot(k.f, i64t.into());
        let s_hi = self.slot(k.f, i64t.into());
        let s_sum = self.slot(k.f, f32t.into());
        let s_cnt = self.slot(k.f, i64t.into());
        let s_max_bits = self.slot(k.f, i32t.into());
        let s_found = self.slot(k.f, i1t.into());
        let s_result = self.slot(k.f, i64t.into());
        let s_last = self.slot(k.f, i64t.into());
        self.loop_nest_physical(shape, &mut |cg, oidx| {
            let b = &cg.b;
            let x_at = |_: &Self, i: IntValue<'ctx>| {
                let full: Vec<IntValue<'ctx>> = oidx.iter().copied().chain([i]).collect();
                at(0, Ix::Multi(&full)).into_float_value()
            };
            let scalar = |j: usize| at(j, Ix::Multi(&[]));
            let seed = scalar(1).into_int_value();
            let step = scalar(2).into_int_value();
            let temperature = scalar(3).into_float_value();
            let top_k = scalar(4).into_int_value();
            let top_p = scalar(5).into_float_value();
            let row = cg.linear(oidx, &shape.dims);

            // Greedy: the first maximum (argmax's rule).
            b.build_store(s_best, cg.i64(0)).unwrap();
            cg.for_loop(v, &mut |cg, i| {
                let b = &cg.b;
                let x = x_at(cg, i);
                let bi = b.build_load(s_best, "").unwrap().into_int_value();
                let bv = x_at(cg, bi);
                let better = b
                    .build_or(
                        cg.fcmp(FloatPredicate::OGT, x, bv),
                        cg.fcmp(FloatPredicate::UNO, x, x),
                        "",
                    )
                    .unwrap();
                let take = b
                    .build_and(better, cg.fcmp(FloatPredicate::ORD, bv, bv), "")
                    .unwrap();
                b.build_store(s_best, cg.select(take, i.into(), bi.into()))
                    .unwrap();
            });
            let b = &cg.b;
            let greedy_i = b.build_load(s_best, "").unwrap().into_int_value();
            let hot = cg.fcmp(FloatPredicate::OGT, temperature, cg.f32c(0.0));
            let k1 = b
                .build_int_compare(IntPredicate::EQ, top_k, cg.i32c(1), "")
                .unwrap();
            let greedy = b.build_or(b.build_not(hot, "").unwrap(), k1, "").unwrap();

            // 1. z = x / T; m = max z.
            let z_at = |cg: &Self, i: IntValue<'ctx>| {
                cg.b.build_float_div(x_at(cg, i), temperature, "").unwrap()
            };
            b.build_store(s_m, cg.f32c(f64::NEG_INFINITY)).unwrap();
            cg.for_loop(v, &mut |cg, i| {
                let z = z_at(cg, i);
                let m = cg.b.build_load(s_m, "").unwrap().into_float_value();
                let gt = cg.fcmp(FloatPredicate::OGT, z, m);
                cg.b.build_store(s_m, cg.select(gt, z.into(), m.into()))
                    .unwrap();
            });
            let b = &cg.b;
            let m = b.build_load(s_m, "").unwrap().into_float_value();

            // 2. tau = the k-th largest key when 0 < top_k < V, else i32::MIN.
            b.build_store(s_lo, i64t.const_int(i32::MIN as i64 as u64, true))
                .unwrap();
            b.build_store(s_hi, cg.i64(i32::MAX as u64 + 1)).unwrap();
            let k64 = b.build_int_s_extend(top_k, i64t, "").unwrap();
            cg.for_loop(BISECTION_STEPS, &mut |cg, _| {
                let b = &cg.b;
                let lo = b.build_load(s_lo, "").unwrap().into_int_value();
                let hi = b.build_load(s_hi, "").unwrap().into_int_value();
                let half = b
                    .build_right_shift(b.build_int_sub(hi, lo, "").unwrap(), cg.i64(1), true, "")
                    .unwrap();
                let mid = b.build_int_add(lo, half, "").unwrap();
                b.build_store(s_cnt, cg.i64(0)).unwrap();
                cg.for_loop(v, &mut |cg, i| {
                    let b = &cg.b;
                    let key = b
                        .build_int_s_extend(cg.order_key(z_at(cg, i)), i64t, "")
                        .unwrap();
                    let ge = b
                        .build_int_compare(IntPredicate::SGE, key, mid, "")
                        .unwrap();
                    let n = b.build_load(s_cnt, "").unwrap().into_int_value();
                    let one = b.build_int_z_extend(ge, i64t, "").unwrap();
                    b.build_store(s_cnt, b.build_int_add(n, one, "").unwrap())
                        .unwrap();
                });
                let b = &cg.b;
                let n = b.build_load(s_cnt, "").unwrap().into_int_value();
                let ok = b.build_int_compare(IntPredicate::SGE, n, k64, "").unwrap();
                b.build_store(s_lo, cg.select(ok, mid.into(), lo.into()))
                    .unwrap();
                b.build_store(s_hi, cg.select(ok, hi.into(), mid.into()))
                    .unwrap();
            });
            let b = &cg.b;
            let use_k = b
                .build_and(
                    b.build_int_compare(IntPredicate::SGT, top_k, cg.i32c(0), "")
                        .unwrap(),
                    b.build_int_compare(IntPredicate::SLT, top_k, cg.i32c(v as i64), "")
                        .unwrap(),
                    "",
                )
                .unwrap();
            let lo = b.build_load(s_lo, "").unwrap().into_int_value();
            let tau = cg
                .select(
                    use_k,
                    lo.into(),
                    i64t.const_int(i32::MIN as i64 as u64, true).into(),
                )
                .into_int_value();
            // 3. w_i = key_i >= tau ? exp(z_i - m) : 0.
            let w_at = |cg: &Self, i: IntValue<'ctx>| {
                let b = &cg.b;
                let z = z_at(cg, i);
                let key = b.build_int_s_extend(cg.order_key(z), i64t, "").unwrap();
                let keep = b
                    .build_int_compare(IntPredicate::SGE, key, tau, "")
                    .unwrap();
                let e = cg.unary(UnaryOp::Exp, b.build_float_sub(z, m, "").unwrap());
                // 1 at the maximum (also when it is +inf); below the smallest normal f32: 0.
                let at_max = cg.fcmp(FloatPredicate::OEQ, z, m);
                let e = cg
                    .select(at_max, cg.f32c(1.0).into(), e.into())
                    .into_float_value();
                let tiny = cg.fcmp(FloatPredicate::OLT, e, cg.f32c(f32::MIN_POSITIVE as f64));
                let e = cg.select(tiny, cg.f32c(0.0).into(), e.into());
                cg.select(keep, e, cg.f32c(0.0).into()).into_float_value()
            };
            let bits = |cg: &Self, w: inkwell::values::FloatValue<'ctx>| {
                cg.b.build_bit_cast(w, i32t, "").unwrap().into_int_value()
            };
            // Σ_{bits(w_i) >= t} w_i in index order (unsigned compare: w >= 0).
            let sum_at_least = |cg: &Self, t: IntValue<'ctx>| {
                cg.b.build_store(s_sum, cg.f32c(0.0)).unwrap();
                cg.for_loop(v, &mut |cg, i| {
                    let b = &cg.b;
                    let w = w_at(cg, i);
                    let wb = b.build_int_z_extend(bits(cg, w), i64t, "").unwrap();
                    let ge = b.build_int_compare(IntPredicate::UGE, wb, t, "").unwrap();
                    let s = b.build_load(s_sum, "").unwrap().into_float_value();
                    let s2 = b.build_float_add(s, w, "").unwrap();
                    b.build_store(s_sum, cg.select(ge, s2.into(), s.into()))
                        .unwrap();
                });
                cg.b.build_load(s_sum, "").unwrap().into_float_value()
            };
            let total = sum_at_least(cg, cg.i64(0));
            // 4. top-p threshold t.
            let b = &cg.b;
            b.build_store(s_max_bits, cg.i32c(0)).unwrap();
            cg.for_loop(v, &mut |cg, i| {
                let b = &cg.b;
                let wb = bits(cg, w_at(cg, i));
                let mb = b.build_load(s_max_bits, "").unwrap().into_int_value();
                let gt = b.build_int_compare(IntPredicate::UGT, wb, mb, "").unwrap();
                b.build_store(s_max_bits, cg.select(gt, wb.into(), mb.into()))
                    .unwrap();
            });
            let b = &cg.b;
            let need = b.build_float_mul(top_p, total, "").unwrap();
            let mb = b.build_load(s_max_bits, "").unwrap().into_int_value();
            let mb = b.build_int_z_extend(mb, i64t, "").unwrap();
            b.build_store(s_lo, cg.i64(0)).unwrap();
            b.build_store(s_hi, b.build_int_add(mb, cg.i64(1), "").unwrap())
                .unwrap();
            cg.for_loop(BISECTION_STEPS, &mut |cg, _| {
                let b = &cg.b;
                let lo = b.build_load(s_lo, "").unwrap().into_int_value();
                let hi = b.build_load(s_hi, "").unwrap().into_int_value();
                let half = b
                    .build_right_shift(b.build_int_sub(hi, lo, "").unwrap(), cg.i64(1), false, "")
                    .unwrap();
                let mid = b.build_int_add(lo, half, "").unwrap();
                let s = sum_at_least(cg, mid);
                let ok = cg.fcmp(FloatPredicate::OGE, s, need);
                let b = &cg.b;
                b.build_store(s_lo, cg.select(ok, mid.into(), lo.into()))
                    .unwrap();
                b.build_store(s_hi, cg.select(ok, hi.into(), mid.into()))
                    .unwrap();
            });
            let b = &cg.b;
            let use_p = b
                .build_and(
                    cg.fcmp(FloatPredicate::OGT, top_p, cg.f32c(0.0)),
                    cg.fcmp(FloatPredicate::OLT, top_p, cg.f32c(1.0)),
                    "",
                )
                .unwrap();
            let lo = b.build_load(s_lo, "").unwrap().into_int_value();
            let t = cg
                .select(use_p, lo.into(), cg.i64(0).into())
                .into_int_value();
            let total = sum_at_least(cg, t);

            // 5. u from Philox; inverse CDF in index order.
            let b = &cg.b;
            let row32 = b.build_int_truncate(row, i32t, "").unwrap();
            let r0 = cg.philox_word0(step, row32, seed);
            let top24 = b.build_right_shift(r0, cg.i32c(8), false, "").unwrap();
            let u = b
                .build_float_mul(
                    b.build_unsigned_int_to_float(top24, f32t, "").unwrap(),
                    cg.f32c(1.0 / 16_777_216.0),
                    "",
                )
                .unwrap();
            let target = b.build_float_mul(u, total, "").unwrap();
            b.build_store(s_sum, cg.f32c(0.0)).unwrap();
            b.build_store(s_found, i1t.const_zero()).unwrap();
            b.build_store(s_result, cg.i64(0)).unwrap();
            b.build_store(s_last, cg.i64(0)).unwrap();
            cg.for_loop(v, &mut |cg, i| {
                let b = &cg.b;
                let w = w_at(cg, i);
                let wb = b.build_int_z_extend(bits(cg, w), i64t, "").unwrap();
                let kept = b.build_int_compare(IntPredicate::UGE, wb, t, "").unwrap();
                let pos = b
                    .build_and(kept, cg.fcmp(FloatPredicate::OGT, w, cg.f32c(0.0)), "")
                    .unwrap();
                let acc = b.build_load(s_sum, "").unwrap().into_float_value();
                let acc2 = b.build_float_add(acc, w, "").unwrap();
                let acc = cg.select(pos, acc2.into(), acc.into()).into_float_value();
                b.build_store(s_sum, acc).unwrap();
                let found = b.build_load(s_found, "").unwrap().into_int_value();
                let hit = b
                    .build_and(
                        b.build_and(pos, b.build_not(found, "").unwrap(), "")
                            .unwrap(),
                        cg.fcmp(FloatPredicate::OGT, acc, target),
                        "",
                    )
                    .unwrap();
                let res = b.build_load(s_result, "").unwrap();
                b.build_store(s_result, cg.select(hit, i.into(), res))
                    .unwrap();
                b.build_store(s_found, b.build_or(found, hit, "").unwrap())
                    .unwrap();
                let last = b.build_load(s_last, "").unwrap();
                b.build_store(s_last, cg.select(pos, i.into(), last))
                    .unwrap();
            });
            let b = &cg.b;
            let found = b.build_load(s_found, "").unwrap().into_int_value();
            let res = b.build_load(s_result, "").unwrap();
            let last = b.build_load(s_last, "").unwrap();
            let drawn = cg.select(found, res, last);
            let token = cg.select(greedy, greedy_i.into(), drawn).into_int_value();
            let token = cg.b.build_int_truncate(token, i32t, "").unwrap();
            cg.store(k.out, cg.offset(oidx, shape), token.into(), DType::I32);
        });
    }
}
