//! The dtype conversions of the C API's entry points: inputs passed as int64, uint32, 16- and
//! 8-bit integers, float16 or bfloat16 are converted into their staging slices before the model runs, outputs
//! are converted from theirs after it ran (`ir/api.rs` says which pairs exist,
//! `arena/staging.rs` where the slices are).
//!
//! Contract: each conversion is one loop over the elements, branch-free and without library
//! calls, so the same bits come out on every target and under any floating-point environment
//! (no float op here sees a subnormal operand): int64 and uint32 → i32 record whether any value
//! was outside the i32 range, which the entry point then returns as
//! `XLA_AOT_STATUS_BAD_ARGUMENT` before the model runs; 8- and 16-bit integers → i32 extend;
//! float16 and bfloat16 → f32 are exact; i32 → int64 sign-extends; i32 → narrower or unsigned
//! integers keep the low bits; f32 →
//! float16/bfloat16 round to nearest even (float16 overflow gives infinity, NaN a quiet NaN).

use super::emitter::{Backend, Emitter};
use crate::arena::Staging;
use crate::arena::staging::Side;
use crate::ir::DType;
use inkwell::values::{FunctionValue, IntValue, PointerValue};
use inkwell::{AddressSpace, IntPredicate};

impl<'a, 'ctx, B: Backend<'ctx>> Emitter<'a, 'ctx, B> {
    fn api_int_type(&self, d: DType) -> inkwell::types::IntType<'ctx> {
        match d.size_bytes() {
            1 => self.ctx.i8_type(),
            2 => self.ctx.i16_type(),
            4 => self.ctx.i32_type(),
            _ => self.ctx.i64_type(),
        }
    }

    /// `p` as a pointer to the integer type of `d`'s size (the bits [`Emitter::convert_bits`]
    /// reads and writes).
    pub(crate) fn typed(&self, p: PointerValue<'ctx>, d: DType) -> PointerValue<'ctx> {
        let t = self.api_int_type(d).ptr_type(AddressSpace::default());
        self.b.build_pointer_cast(p, t, "").unwrap()
    }

    /// Converts the inputs with API dtypes into their staging slices and points the model's
    /// arguments (`args`: arena, inputs, outputs) at the staging slices of inputs and outputs.
    /// Returns whether some int64 input is out of range (an i1), and the outputs to convert
    /// after the model ran: (staging slice, caller's buffer).
    pub(crate) fn boundary_in(
        &self,
        f: FunctionValue<'ctx>,
        arena: PointerValue<'ctx>,
        args: &mut [PointerValue<'ctx>],
        nin: usize,
    ) -> (IntValue<'ctx>, Vec<(Staging, PointerValue<'ctx>)>) {
        let mut bad = self.ctx.bool_type().const_zero();
        let mut outs = Vec::new();
        for st in &self.plan.staging {
            let slot = self.gep(arena, self.i64(st.offset as u64));
            match st.side {
                Side::Input(k) => {
                    let caller = args[1 + k];
                    let b = self.convert_loop(f, st, caller, slot, st.api, st.ir);
                    bad = self.b.build_or(bad, b, "").unwrap();
                    args[1 + k] = slot;
                }
                Side::Output(k) => {
                    outs.push((*st, args[1 + nin + k]));
                    args[1 + nin + k] = slot;
                }
            }
        }
        (bad, outs)
    }

    /// Converts the outputs [`Emitter::boundary_in`] staged into the caller's buffers.
    pub(crate) fn boundary_out(
        &self,
        f: FunctionValue<'ctx>,
        arena: PointerValue<'ctx>,
        outs: &[(Staging, PointerValue<'ctx>)],
    ) {
        for (st, caller) in outs {
            let slot = self.gep(arena, self.i64(st.offset as u64));
            self.convert_loop(f, st, slot, *caller, st.ir, st.api);
        }
    }

    /// One loop converting `st.elements` values of dtype `from` at `src` to dtype `to` at `dst`;
    /// returns whether an int64 value was out of the i32 range (false for other conversions).
    fn convert_loop(
        &self,
        f: FunctionValue<'ctx>,
        st: &Staging,
        src: PointerValue<'ctx>,
        dst: PointerValue<'ctx>,
        from: DType,
        to: DType,
    ) -> IntValue<'ctx> {
        let i64t = self.ctx.i64_type();
        let i1 = self.ctx.bool_type();
        let (src, dst) = (self.typed(src, from), self.typed(dst, to));
        let pre = self.b.get_insert_block().unwrap();
        let body = self.ctx.append_basic_block(f, "convert");
        let done = self.ctx.append_basic_block(f, "converted");
        let n = self.i64(st.elements as u64);
        let empty = self
            .b
            .build_int_compare(IntPredicate::EQ, n, self.i64(0), "")
            .unwrap();
        self.b.build_conditional_branch(empty, done, body).unwrap();
        self.b.position_at_end(body);
        let i = self.b.build_phi(i64t, "i").unwrap();
        let acc = self.b.build_phi(i1, "bad").unwrap();
        let iv = i.as_basic_value().into_int_value();
        let x = self
            .b
            .build_load(self.gep(src, iv), "")
            .unwrap()
            .into_int_value();
        let (y, bad) = self.convert_bits(x, from, to);
        self.b.build_store(self.gep(dst, iv), y).unwrap();
        let acc2 = self
            .b
            .build_or(acc.as_basic_value().into_int_value(), bad, "")
            .unwrap();
        let next = self.b.build_int_add(iv, self.i64(1), "").unwrap();
        let more = self
            .b
            .build_int_compare(IntPredicate::ULT, next, n, "")
            .unwrap();
        let latch = self.b.get_insert_block().unwrap();
        i.add_incoming(&[(&self.i64(0), pre), (&next, latch)]);
        acc.add_incoming(&[(&i1.const_zero(), pre), (&acc2, latch)]);
        self.b.build_conditional_branch(more, body, done).unwrap();
        self.b.position_at_end(done);
        let out = self.b.build_phi(i1, "any_bad").unwrap();
        out.add_incoming(&[(&i1.const_zero(), pre), (&acc2, latch)]);
        out.as_basic_value().into_int_value()
    }

    /// One element's bits of dtype `from` as bits of dtype `to` (integers of each size), and
    /// whether the value did not fit.
    pub(crate) fn convert_bits(
        &self,
        x: IntValue<'ctx>,
        from: DType,
        to: DType,
    ) -> (IntValue<'ctx>, IntValue<'ctx>) {
        let b = &self.b;
        let i32t = self.ctx.i32_type();
        let f32t = self.ctx.f32_type();
        let c = |v: u32| i32t.const_int(v as u64, false);
        let ok = self.ctx.bool_type().const_zero();
        let to_t = self.api_int_type(to);
        match (from, to) {
            (DType::I64, _) => {
                let t = b.build_int_truncate(x, i32t, "").unwrap();
                let back = b.build_int_s_extend(t, x.get_type(), "").unwrap();
                let bad = b.build_int_compare(IntPredicate::NE, back, x, "").unwrap();
                (t, bad)
            }
            (DType::U64, _) => {
                // Values of 2^31 and above do not fit i32 (unsigned compare).
                let lim = x.get_type().const_int(1 << 31, false);
                let bad = b.build_int_compare(IntPredicate::UGE, x, lim, "").unwrap();
                (b.build_int_truncate(x, i32t, "").unwrap(), bad)
            }
            (DType::U32, _) => {
                // Values of 2^31 and above do not fit i32: the top bit is set.
                let bad = b.build_int_compare(IntPredicate::SLT, x, c(0), "").unwrap();
                (x, bad)
            }
            (DType::U8 | DType::U16, _) => (b.build_int_z_extend(x, i32t, "").unwrap(), ok),
            (DType::I8 | DType::I16, _) => (b.build_int_s_extend(x, i32t, "").unwrap(), ok),
            (DType::BF16, _) => {
                let w = b.build_int_z_extend(x, i32t, "").unwrap();
                (b.build_left_shift(w, c(16), "").unwrap(), ok)
            }
            (DType::F16, _) => {
                // Normal halves rebias the exponent, subnormals are em * 2^-24 (exact in f32,
                // and a normal f32), infinities and NaNs keep their payload.
                let w = b.build_int_z_extend(x, i32t, "").unwrap();
                let sign = b.build_and(w, c(0x8000), "").unwrap();
                let sign = b.build_left_shift(sign, c(16), "").unwrap();
                let em = b.build_and(w, c(0x7fff), "").unwrap();
                let shifted = b.build_left_shift(em, c(13), "").unwrap();
                let normal = b.build_int_add(shifted, c(0x3800_0000), "").unwrap();
                let special = b.build_or(shifted, c(0x7f80_0000), "").unwrap();
                let sub = b.build_unsigned_int_to_float(em, f32t, "").unwrap();
                let sub = b
                    .build_float_mul(sub, f32t.const_float(2f64.powi(-24)), "")
                    .unwrap();
                let sub = b.build_bit_cast(sub, i32t, "").unwrap().into_int_value();
                let is_sub = b
                    .build_int_compare(IntPredicate::ULT, em, c(0x400), "")
                    .unwrap();
                let is_special = b
                    .build_int_compare(IntPredicate::UGE, em, c(0x7c00), "")
                    .unwrap();
                let v = b.build_select(is_sub, sub, normal, "").unwrap();
                let v = b
                    .build_select(is_special, special, v.into_int_value(), "")
                    .unwrap()
                    .into_int_value();
                (b.build_or(v, sign, "").unwrap(), ok)
            }
            // uint64 outputs wrap as ONNX's unsigned arithmetic does: −1 is 2^64 − 1.
            (DType::I32, DType::I64 | DType::U64) => {
                (b.build_int_s_extend(x, to_t, "").unwrap(), ok)
            }
            (DType::I32, DType::U32) => (x, ok),
            (DType::I32, _) if to.size_bytes() < 4 => {
                (b.build_int_truncate(x, to_t, "").unwrap(), ok)
            }
            (DType::F32, DType::BF16) => {
                let odd = b.build_right_shift(x, c(16), false, "").unwrap();
                let odd = b.build_and(odd, c(1), "").unwrap();
                let bias = b.build_int_add(odd, c(0x7fff), "").unwrap();
                let r = b.build_int_add(x, bias, "").unwrap();
                let r = b.build_right_shift(r, c(16), false, "").unwrap();
                let abs = b.build_and(x, c(0x7fff_ffff), "").unwrap();
                let nan = b
                    .build_int_compare(IntPredicate::UGT, abs, c(0x7f80_0000), "")
                    .unwrap();
                let q = b.build_right_shift(x, c(16), false, "").unwrap();
                let q = b.build_or(q, c(0x40), "").unwrap();
                let v = b.build_select(nan, q, r, "").unwrap().into_int_value();
                (b.build_int_truncate(v, to_t, "").unwrap(), ok)
            }
            // An f32 output passed as a byte (`ir/api_types.rs` `output_bytes`): `convert` to
            // i32 (toward zero, saturating, NaN 0), then the low byte.
            (DType::F32, DType::I8 | DType::U8) => {
                let name = "llvm.fptosi.sat.i32.f32";
                let sat = self.m.get_function(name).unwrap_or_else(|| {
                    self.m
                        .add_function(name, i32t.fn_type(&[f32t.into()], false), None)
                });
                let xf = b.build_bit_cast(x, f32t, "").unwrap();
                let i = b
                    .build_call(sat, &[xf.into()], "")
                    .unwrap()
                    .try_as_basic_value()
                    .basic()
                    .unwrap()
                    .into_int_value();
                (b.build_int_truncate(i, to_t, "").unwrap(), ok)
            }
            (DType::F32, DType::F16) => {
                let sign = b.build_right_shift(x, c(16), false, "").unwrap();
                let sign = b.build_and(sign, c(0x8000), "").unwrap();
                let a = b.build_and(x, c(0x7fff_ffff), "").unwrap();
                // Subnormal halves: adding 0.5 makes the f32 adder round at the half's last bit
                // (an f32 subnormal operand rounds to half zero either way).
                let af = b.build_bit_cast(a, f32t, "").unwrap().into_float_value();
                let s = b.build_float_add(af, f32t.const_float(0.5), "").unwrap();
                let s = b.build_bit_cast(s, i32t, "").unwrap().into_int_value();
                let sub = b.build_int_sub(s, c(0x3f00_0000), "").unwrap();
                // Normal halves: rebias, add the rounding bias (and 1 when the kept bits are odd).
                let odd = b.build_right_shift(a, c(13), false, "").unwrap();
                let odd = b.build_and(odd, c(1), "").unwrap();
                let n = b.build_int_add(a, c(0xc800_0fff), "").unwrap();
                let n = b.build_int_add(n, odd, "").unwrap();
                let n = b.build_right_shift(n, c(13), false, "").unwrap();
                let is_sub = b
                    .build_int_compare(IntPredicate::ULT, a, c(0x3880_0000), "")
                    .unwrap();
                let big = b
                    .build_int_compare(IntPredicate::UGE, a, c(0x4780_0000), "")
                    .unwrap();
                let nan = b
                    .build_int_compare(IntPredicate::UGT, a, c(0x7f80_0000), "")
                    .unwrap();
                let v = b.build_select(is_sub, sub, n, "").unwrap().into_int_value();
                let v = b
                    .build_select(big, c(0x7c00), v, "")
                    .unwrap()
                    .into_int_value();
                let v = b
                    .build_select(nan, c(0x7e00), v, "")
                    .unwrap()
                    .into_int_value();
                let v = b.build_or(v, sign, "").unwrap();
                (b.build_int_truncate(v, to_t, "").unwrap(), ok)
            }
            _ => unreachable!("ir::api::allowed lists the conversions"),
        }
    }
}
