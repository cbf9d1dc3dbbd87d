//! Half precisions in the GPU's products (issue 18, `ir/precision.rs`): how a dot or convolution
//! reads a weight stored in a half type, and the f16 arithmetic of `precision: f16`.
//!
//! Contract:
//! - A weight `Packings::for_gpu` stores in a half type (every half weight precision: the weights
//!   of f32 dots and convolutions, in their assigned layout) reaches its kernel as an `i16*`
//!   (`Gpu::weight` says which type); [`Cg::load_weight`] widens each value to f32: IEEE half with
//!   `fpext` (`cvt.f32.f16` on the device, F16C on a host that has it, else exact integer code),
//!   bfloat16 by a shift into the upper half. With `f16-weights`, `bf16-weights` and `bf16` the
//!   arithmetic is the f32 kernels' (for `bf16`, `round-bf16` instructions have rounded the other
//!   operands, `compile/bf16_operands.rs`, so the products are exact in f32).
//! - With `precision: f16` ([`Cg::f16_sums`]) every f32 dot and convolution sums its products in
//!   f16 within blocks of [`F16_K_BLOCK`] consecutive k of its linear K (a dot's contracting dims
//!   in row-major order; a convolution's input channel, then its taps), as `cpu/gemm_f16.rs` does
//!   on aarch64: each block sum starts at 0, each step `s = a·b + s` is rounded once to f16
//!   ([`Cg::block_fma`]: `fma.rn.f16` on the device), and the block sums, widened
//!   (`cvt.f32.f16`), are added into the f32 accumulator in increasing k. The operands are f16
//!   values already (`round-f16` and the weight rounding), so narrowing them (`cvt.rn.f16.f32`)
//!   is exact; a weight stored as f16 is loaded as a half, not converted at all.
//! - The host emulation (`GridForm::Host`) keeps block terms and sums as f32 values holding
//!   halves ([`Cg::block_type`]) and forms each step without FMA or library calls, to the same
//!   bits as `fma.rn.f16`: `a·b` (exact in f64) plus `s` in f64 (exact wherever the f16 rounding
//!   could depend on the lost bits: a sum spanning more than 53 bits has a term far below half
//!   an f16 ulp of the other), rounded to f32 *to odd* (2 bits or more beyond f16's 11, so no
//!   double rounding), then to f16 by `round-f16`'s integer code (`core/half_round.rs`).

use super::Cg;
use crate::ir::{DType, F16_K_BLOCK, Precision};
use inkwell::FloatPredicate;
use inkwell::types::FloatType;
use inkwell::values::{FloatValue, FunctionValue, IntValue, PointerValue};

/// One term of a blocked sum: the two factors (block-typed, [`Cg::block_type`]) and, where some
/// k contribute nothing (a convolution's padding), whether this one counts.
pub(super) type Term<'ctx> = (FloatValue<'ctx>, FloatValue<'ctx>, Option<IntValue<'ctx>>);

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// Whether the module's products sum in f16 blocks (`precision: f16`).
    pub(super) fn f16_sums(&self) -> bool {
        self.hlo.precision == Precision::F16
    }

    /// IEEE half bits `h` (an `i16`) as f32.
    fn f16_bits_to_f32(&self, h: IntValue<'ctx>) -> FloatValue<'ctx> {
        if self.be.on_device() || self.target.has_f16_convert() {
            let hv = self.b.build_bit_cast(h, self.ctx.f16_type(), "").unwrap();
            return self
                .b
                .build_float_ext(hv.into_float_value(), self.ctx.f32_type(), "")
                .unwrap();
        }
        let (bits, _) = self.convert_bits(h, DType::F16, DType::F32);
        self.b
            .build_bit_cast(bits, self.ctx.f32_type(), "")
            .unwrap()
            .into_float_value()
    }

    /// The weight at element `off` of `buf`, stored as `Gpu::weight` says, as f32.
    pub(super) fn load_weight(
        &self,
        buf: PointerValue<'ctx>,
        off: IntValue<'ctx>,
    ) -> FloatValue<'ctx> {
        match self.be.weight.get() {
            DType::F16 => {
                let h = self.load(buf, off, DType::F16).into_int_value();
                self.f16_bits_to_f32(h)
            }
            DType::BF16 => {
                let h = self.load(buf, off, DType::BF16).into_int_value();
                let w = self
                    .b
                    .build_int_z_extend(h, self.ctx.i32_type(), "")
                    .unwrap();
                let bits = self
                    .b
                    .build_left_shift(w, self.ctx.i32_type().const_int(16, false), "")
                    .unwrap();
                self.b
                    .build_bit_cast(bits, self.ctx.f32_type(), "")
                    .unwrap()
                    .into_float_value()
            }
            _ => self.load(buf, off, DType::F32).into_float_value(),
        }
    }

    /// The type of a block sum's terms: `half` on the device, f32 (holding halves) on the host.
    pub(super) fn block_type(&self) -> FloatType<'ctx> {
        if self.be.on_device() {
            self.ctx.f16_type()
        } else {
            self.ctx.f32_type()
        }
    }

    /// f32 `x` as a block term: narrowed to half on the device (`cvt.rn.f16.f32`), rounded to a
    /// half value on the host (exact for the already rounded operands either way).
    pub(super) fn to_block(&self, x: FloatValue<'ctx>) -> FloatValue<'ctx> {
        if self.be.on_device() {
            self.b
                .build_float_trunc(x, self.ctx.f16_type(), "")
                .unwrap()
        } else {
            self.on_one_lane(x, &|v| self.round_f16_exact(v))
        }
    }

    /// The weight at element `off` of `buf` as a block term (a weight stored as f16 is loaded as
    /// a half on the device: no conversion).
    pub(super) fn load_weight_block(
        &self,
        buf: PointerValue<'ctx>,
        off: IntValue<'ctx>,
    ) -> FloatValue<'ctx> {
        match self.be.weight.get() {
            DType::F16 if self.be.on_device() => {
                let h = self.load(buf, off, DType::F16);
                self.b
                    .build_bit_cast(h, self.ctx.f16_type(), "")
                    .unwrap()
                    .into_float_value()
            }
            DType::F16 => self.load_weight(buf, off),
            _ => self.to_block(self.load_weight(buf, off)),
        }
    }

    /// `a·b + s` rounded once to f16: `llvm.fma.f16` (`fma.rn.f16`) on the device; on the host
    /// the same value from f64 arithmetic, round-to-odd f32 and `round-f16` (the contract).
    pub(super) fn block_fma(
        &self,
        a: FloatValue<'ctx>,
        b: FloatValue<'ctx>,
        s: FloatValue<'ctx>,
    ) -> FloatValue<'ctx> {
        if self.be.on_device() {
            let fma = inkwell::intrinsics::Intrinsic::find("llvm.fma")
                .and_then(|i| i.get_declaration(self.m, &[a.get_type().into()]))
                .expect("LLVM 14 has llvm.fma");
            return self
                .call(fma, &[a.into(), b.into(), s.into()])
                .into_float_value();
        }
        let (f64t, f32t, i32t) = (
            self.ctx.f64_type(),
            self.ctx.f32_type(),
            self.ctx.i32_type(),
        );
        let b_ = &self.b;
        let wide = |x: FloatValue<'ctx>| b_.build_float_ext(x, f64t, "").unwrap();
        // The product of two halves is exact in f64, and so is its sum with a half wherever the
        // sum could round onto an f16 tie.
        let p = b_.build_float_mul(wide(a), wide(b), "").unwrap();
        let t = b_.build_float_add(p, wide(s), "").unwrap();
        // Round to odd at f32: truncate toward zero, and set the last bit when inexact.
        let r = b_.build_float_trunc(t, f32t, "").unwrap();
        let back = b_.build_float_ext(r, f64t, "").unwrap();
        let fabs = inkwell::intrinsics::Intrinsic::find("llvm.fabs")
            .and_then(|i| i.get_declaration(self.m, &[f64t.into()]))
            .expect("LLVM 14 has llvm.fabs");
        let abs = |x: FloatValue<'ctx>| self.call(fabs, &[x.into()]).into_float_value();
        let inexact = self.fcmp(FloatPredicate::ONE, back, t);
        let away = self.fcmp(FloatPredicate::OGT, abs(back), abs(t));
        let bits = b_.build_bit_cast(r, i32t, "").unwrap().into_int_value();
        let down = b_
            .build_int_sub(bits, i32t.const_int(1, false), "")
            .unwrap();
        let bits = self
            .select(
                b_.build_and(inexact, away, "").unwrap(),
                down.into(),
                bits.into(),
            )
            .into_int_value();
        let odd = b_.build_or(bits, i32t.const_int(1, false), "").unwrap();
        let bits = self.select(inexact, odd.into(), bits.into());
        let r = b_
            .build_bit_cast(bits, f32t, "")
            .unwrap()
            .into_float_value();
        self.on_one_lane(r, &|v| self.round_f16_exact(v))
    }

    /// A block sum as f32 (`cvt.f32.f16` on the device).
    pub(super) fn widen_block(&self, s: FloatValue<'ctx>) -> FloatValue<'ctx> {
        if self.be.on_device() {
            self.b.build_float_ext(s, self.ctx.f32_type(), "").unwrap()
        } else {
            s
        }
    }

    /// `Σ_{kk < k} a(kk)·b(kk)` as `precision: f16` forms it (the contract): f16 sums of blocks
    /// of [`F16_K_BLOCK`] consecutive `kk`, widened and added into an f32 total in increasing
    /// `kk`. `term(kk)` gives the block-typed factors of linear index `kk` (an `i64`). Returns the
    /// f32 total; `f` is the kernel (for its stack slots).
    pub(super) fn f16_block_sum(
        &self,
        f: FunctionValue<'ctx>,
        k: usize,
        term: &dyn Fn(&Self, IntValue<'ctx>) -> Term<'ctx>,
    ) -> FloatValue<'ctx> {
        let acc = self.slot(f, self.ctx.f32_type().into());
        let sum = self.slot(f, self.block_type().into());
        self.b.build_store(acc, self.f32c(0.0)).unwrap();
        // One block of `len` steps from `base`, straight-line (a whole block) or as a loop.
        let block = |cg: &Self, base: IntValue<'ctx>, len: usize| {
            cg.b.build_store(sum, cg.block_type().const_zero()).unwrap();
            let step = |cg: &Self, kk: IntValue<'ctx>| {
                let (a, b, counts) = term(cg, kk);
                let s = cg.b.build_load(sum, "").unwrap().into_float_value();
                let next = cg.block_fma(a, b, s);
                let next = match counts {
                    Some(c) => cg.select(c, next.into(), s.into()).into_float_value(),
                    None => next,
                };
                cg.b.build_store(sum, next).unwrap();
            };
            if len == F16_K_BLOCK {
                for j in 0..len as u64 {
                    step(cg, cg.add(base, cg.i64(j)));
                }
            } else {
                cg.for_loop(len, &mut |cg, j| step(cg, cg.add(base, j)));
            }
            let s = cg.b.build_load(sum, "").unwrap().into_float_value();
            let total = cg.b.build_load(acc, "").unwrap().into_float_value();
            let total = cg.b.build_float_add(total, cg.widen_block(s), "").unwrap();
            cg.b.build_store(acc, total).unwrap();
        };
        let (full, rest) = (k / F16_K_BLOCK, k % F16_K_BLOCK);
        if full > 0 {
            self.for_loop(full, &mut |cg, i| {
                block(cg, cg.mul(i, F16_K_BLOCK as u64), F16_K_BLOCK)
            });
        }
        if rest > 0 {
            block(self, self.i64((full * F16_K_BLOCK) as u64), rest);
        }
        self.b.build_load(acc, "").unwrap().into_float_value()
    }
}
