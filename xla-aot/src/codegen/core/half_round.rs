//! `round-bf16` and `round-f16` on the bits of f32 vectors: the one integer implementation both
//! the scalar elemental code (`elemental.rs`, on one-lane vectors) and the CPU's vector code
//! (`cpu/vector.rs`, register epilogues and the half-precision GEMMs) build on.
//!
//! Contract: each function gives, lane by lane, the bits `ir/half.rs` gives (`f32_to_bf16`,
//! `f32_to_f16`, widened back): nearest even, a bfloat16 NaN keeps its upper half made quiet, an
//! IEEE half beyond 65504 is infinity, its subnormals round at 2⁻²⁴, a NaN stays itself. No
//! library call and no target feature: a backend with hardware conversions may use those first.

use super::emitter::{Backend, Emitter};
use inkwell::types::VectorType;
use inkwell::values::{FloatValue, VectorValue};
use inkwell::{FloatPredicate, IntPredicate};

impl<'a, 'ctx, B: Backend<'ctx>> Emitter<'a, 'ctx, B> {
    /// A splat of the 32-bit integer `v` with `x`'s lane count.
    fn splat_bits(&self, x: VectorValue<'ctx>, v: u64) -> VectorValue<'ctx> {
        let c = self.ctx.i32_type().const_int(v, false);
        VectorType::const_vector(&vec![c; x.get_type().get_size() as usize])
    }

    /// The f32 bits of `x` (f32 lanes) rounded to bfloat16: the result's upper halves are the
    /// bfloat16 values, its lower halves zero (i32 lanes).
    pub(crate) fn round_bf16_bits(&self, x: VectorValue<'ctx>) -> VectorValue<'ctx> {
        let n = x.get_type().get_size();
        let c = |v: u64| self.splat_bits(x, v);
        let b = &self.b;
        let bits = b
            .build_bit_cast(x, self.ctx.i32_type().vec_type(n), "")
            .unwrap()
            .into_vector_value();
        let lsb = b.build_right_shift(bits, c(16), false, "").unwrap();
        let lsb = b.build_and(lsb, c(1), "").unwrap();
        let up = b.build_int_add(bits, c(0x7fff), "").unwrap();
        let up = b.build_int_add(up, lsb, "").unwrap();
        let num = b.build_and(up, c(0xffff_0000), "").unwrap();
        let nan = b.build_and(bits, c(0xffff_0000), "").unwrap();
        let nan = b.build_or(nan, c(0x0040_0000), "").unwrap();
        let is_nan = b
            .build_float_compare(FloatPredicate::UNO, x, x, "")
            .unwrap();
        b.build_select(is_nan, nan, num, "")
            .unwrap()
            .into_vector_value()
    }

    /// `x` (f32 lanes) rounded to IEEE half and widened back, with integer operations.
    pub(crate) fn round_f16_exact(&self, x: VectorValue<'ctx>) -> VectorValue<'ctx> {
        let n = x.get_type().get_size();
        let c = |v: u64| self.splat_bits(x, v);
        let b = &self.b;
        let i32v = self.ctx.i32_type().vec_type(n);
        let bits = b.build_bit_cast(x, i32v, "").unwrap().into_vector_value();
        let sign = b.build_and(bits, c(0x8000_0000), "").unwrap();
        let a = b.build_and(bits, c(0x7fff_ffff), "").unwrap();
        // |x| from 2⁻¹⁴ up: nearest even at the 13th bit, infinity past 65504.
        let lsb = b.build_right_shift(a, c(13), false, "").unwrap();
        let lsb = b.build_and(lsb, c(1), "").unwrap();
        let up = b.build_int_add(a, c(0xfff), "").unwrap();
        let up = b.build_int_add(up, lsb, "").unwrap();
        let up = b.build_and(up, c(0xffff_e000), "").unwrap();
        let big = b
            .build_int_compare(IntPredicate::UGT, up, c(0x477f_e000), "")
            .unwrap();
        let normal = b.build_select(big, c(0x7f80_0000), up, "").unwrap();
        // Below 2⁻¹⁴ (the halves' subnormals): adding and removing 0.5 rounds at 2⁻²⁴.
        let ax = b
            .build_bit_cast(a, x.get_type(), "")
            .unwrap()
            .into_vector_value();
        let half = self.f32c(0.5);
        let half = VectorType::const_vector(&vec![half; n as usize]);
        let sub = b.build_float_add(ax, half, "").unwrap();
        let sub = b.build_float_sub(sub, half, "").unwrap();
        let sub = b.build_bit_cast(sub, i32v, "").unwrap();
        let tiny = b
            .build_int_compare(IntPredicate::ULT, a, c(0x3880_0000), "")
            .unwrap();
        let r = b
            .build_select(tiny, sub, normal, "")
            .unwrap()
            .into_vector_value();
        let r = b.build_or(r, sign, "").unwrap();
        let r = b.build_bit_cast(r, x.get_type(), "").unwrap();
        let is_nan = b
            .build_float_compare(FloatPredicate::UNO, x, x, "")
            .unwrap();
        b.build_select(is_nan, x, r.into_vector_value(), "")
            .unwrap()
            .into_vector_value()
    }

    /// `f` applied to the scalar `x` as a one-lane vector (LLVM keeps it scalar).
    pub(crate) fn on_one_lane(
        &self,
        x: FloatValue<'ctx>,
        f: &dyn Fn(VectorValue<'ctx>) -> VectorValue<'ctx>,
    ) -> FloatValue<'ctx> {
        let zero = self.ctx.i32_type().const_zero();
        let v = self
            .b
            .build_insert_element(x.get_type().vec_type(1).get_undef(), x, zero, "")
            .unwrap();
        let r = f(v);
        let r = self.b.build_extract_element(r, zero, "").unwrap();
        self.b
            .build_bit_cast(r, x.get_type(), "")
            .unwrap()
            .into_float_value()
    }
}
