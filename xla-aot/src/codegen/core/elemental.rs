//! The elemental emitter: one element of an elementwise op, a fused computation or a reduction
//! step, as scalar LLVM values.
//!
//! Contract: every function here computes one value from the values it is given, with the
//! reference interpreter's semantics (NaN-propagating max/min, saturating f32 → i32, clamped
//! gather indices) and in the interpreter's order of operations; no function loops over a
//! buffer. Both backends build every elementwise kernel, fused expression and epilogue from
//! these, so a fused value is the same bits on a CPU and on a GPU.

use super::emitter::{Backend, Emitter, Ix, Kernel};
use super::math::{self, MathFn};
use crate::ir::{BinaryOp, CompareDir, Computation, DType, InstId, Op, ReduceKind, Shape, UnaryOp};
use inkwell::values::{BasicValueEnum, FloatValue, IntValue};
use inkwell::{FloatPredicate, IntPredicate};

impl<'a, 'ctx, B: Backend<'ctx>> Emitter<'a, 'ctx, B> {
    /// `convert` of one element (registers: pred is i1, i32, f32), with the interpreter's rules:
    /// f32 → i32 truncates and saturates, NaN gives 0; anything → pred is `x != 0`.
    pub(crate) fn convert(
        &self,
        x: BasicValueEnum<'ctx>,
        from: DType,
        to: DType,
    ) -> BasicValueEnum<'ctx> {
        let b = &self.b;
        let i32t = self.ctx.i32_type();
        let f32t = self.ctx.f32_type();
        match (from, to) {
            _ if from == to => x,
            (DType::F32, DType::I32) => {
                let x = x.into_float_value();
                // 2^31 is exact in f32; every f32 below it (and at least -2^31) converts exactly.
                let limit = 2147483648.0f64;
                let t = b.build_float_to_signed_int(x, i32t, "").unwrap();
                let hi = self.fcmp(FloatPredicate::OGE, x, f32t.const_float(limit));
                let lo = self.fcmp(FloatPredicate::OLT, x, f32t.const_float(-limit));
                let nan = self.fcmp(FloatPredicate::UNO, x, x);
                let t = self.select(hi, i32t.const_int(i32::MAX as u64, false).into(), t.into());
                let t = self.select(lo, i32t.const_int(i32::MIN as u64, true).into(), t);
                self.select(nan, i32t.const_zero().into(), t)
            }
            (DType::I32, DType::F32) => b
                .build_signed_int_to_float(x.into_int_value(), f32t, "")
                .unwrap()
                .into(),
            (DType::Pred, DType::F32) => b
                .build_unsigned_int_to_float(x.into_int_value(), f32t, "")
                .unwrap()
                .into(),
            (DType::Pred, _) => b
                .build_int_z_extend(x.into_int_value(), i32t, "")
                .unwrap()
                .into(),
            (DType::F32, _) => self
                .fcmp(FloatPredicate::UNE, x.into_float_value(), f32t.const_zero())
                .into(),
            _ => b
                .build_int_compare(IntPredicate::NE, x.into_int_value(), i32t.const_zero(), "")
                .unwrap()
                .into(),
        }
    }

    pub(crate) fn unary(&self, u: UnaryOp, x: FloatValue<'ctx>) -> FloatValue<'ctx> {
        let b = &self.b;
        match u {
            UnaryOp::Negate => b.build_float_neg(x, "").unwrap(),
            UnaryOp::Abs => self.call(self.fabs, &[x.into()]).into_float_value(),
            UnaryOp::Sqrt => self.call(self.sqrt, &[x.into()]).into_float_value(),
            UnaryOp::Rsqrt => {
                let s = self.call(self.sqrt, &[x.into()]).into_float_value();
                b.build_float_div(self.f32c(1.0), s, "").unwrap()
            }
            UnaryOp::Exp => self
                .call(math::get(self.ctx, self.m, MathFn::Exp), &[x.into()])
                .into_float_value(),
            UnaryOp::Log => self
                .call(math::get(self.ctx, self.m, MathFn::Log), &[x.into()])
                .into_float_value(),
            UnaryOp::Tanh => self
                .call(math::get(self.ctx, self.m, MathFn::Tanh), &[x.into()])
                .into_float_value(),
            UnaryOp::Logistic => self
                .call(math::get(self.ctx, self.m, MathFn::Logistic), &[x.into()])
                .into_float_value(),
            UnaryOp::Sine => self
                .call(math::get(self.ctx, self.m, MathFn::Sin), &[x.into()])
                .into_float_value(),
            UnaryOp::Cosine => self
                .call(math::get(self.ctx, self.m, MathFn::Cos), &[x.into()])
                .into_float_value(),
            UnaryOp::Erf => self
                .call(math::get(self.ctx, self.m, MathFn::Erf), &[x.into()])
                .into_float_value(),
            // The integer code of `half_round.rs`, on a one-lane vector.
            UnaryOp::RoundBf16 => self.on_one_lane(x, &|v| self.round_bf16_bits(v)),
            UnaryOp::RoundF16 => self.on_one_lane(x, &|v| self.round_f16_exact(v)),
            UnaryOp::Softplus => {
                // max(x, 0) + log1p(t) with t = e^-|x| in (0, 1]: no overflow for large |x|.
                // log1p(t) = log(u)·t/(u - 1) with u = 1 + t (Kahan), exact where u rounds to 1.
                let ax = self.call(self.fabs, &[x.into()]).into_float_value();
                let nax = b.build_float_neg(ax, "").unwrap();
                let t = self.unary(UnaryOp::Exp, nax);
                let u = b.build_float_add(self.f32c(1.0), t, "").unwrap();
                let um1 = b.build_float_sub(u, self.f32c(1.0), "").unwrap();
                let lu = self.unary(UnaryOp::Log, u);
                let q = b.build_float_div(t, um1, "").unwrap();
                let l = b.build_float_mul(lu, q, "").unwrap();
                let exact = self.fcmp(FloatPredicate::OEQ, um1, self.f32c(0.0));
                let l1p = self.select(exact, t.into(), l.into()).into_float_value();
                let pos = self.fmax(x, self.f32c(0.0), true);
                b.build_float_add(pos, l1p, "").unwrap()
            }
        }
    }

    pub(crate) fn binary(
        &self,
        op: BinaryOp,
        x: FloatValue<'ctx>,
        y: FloatValue<'ctx>,
    ) -> FloatValue<'ctx> {
        let b = &self.b;
        match op {
            BinaryOp::Add => b.build_float_add(x, y, "").unwrap(),
            BinaryOp::Subtract => b.build_float_sub(x, y, "").unwrap(),
            BinaryOp::Multiply => b.build_float_mul(x, y, "").unwrap(),
            BinaryOp::Divide => b.build_float_div(x, y, "").unwrap(),
            BinaryOp::Maximum => self.fmax(x, y, true),
            BinaryOp::Minimum => self.fmax(x, y, false),
            BinaryOp::Power => self
                .call(
                    math::get(self.ctx, self.m, MathFn::Pow),
                    &[x.into(), y.into()],
                )
                .into_float_value(),
        }
    }

    /// `op` on two i32 values (wrapping add, subtract and multiply; signed max and min), as
    /// `BinaryOp::eval_i32`.
    pub(crate) fn binary_i32(
        &self,
        op: BinaryOp,
        x: IntValue<'ctx>,
        y: IntValue<'ctx>,
    ) -> IntValue<'ctx> {
        let b = &self.b;
        let pick = |p: IntPredicate| {
            let c = b.build_int_compare(p, x, y, "").unwrap();
            b.build_select(c, x, y, "").unwrap().into_int_value()
        };
        match op {
            BinaryOp::Add => b.build_int_add(x, y, "").unwrap(),
            BinaryOp::Subtract => b.build_int_sub(x, y, "").unwrap(),
            BinaryOp::Multiply => b.build_int_mul(x, y, "").unwrap(),
            BinaryOp::Maximum => pick(IntPredicate::SGT),
            BinaryOp::Minimum => pick(IntPredicate::SLT),
            // Shape inference admits no other op on i32.
            BinaryOp::Divide | BinaryOp::Power => self.ctx.i32_type().const_zero(),
        }
    }

    /// `multiply-q31` of one i32: TFLite's `MultiplyByQuantizedMultiplier(x, m, shift)`
    /// (`fixed_point.rs`).
    pub(crate) fn mul_q31(
        &self,
        x: IntValue<'ctx>,
        m: IntValue<'ctx>,
        s: IntValue<'ctx>,
    ) -> IntValue<'ctx> {
        let i32t = self.ctx.i32_type();
        let i64t = self.ctx.i64_type();
        let c32 = |v: i64| i32t.const_int(v as u64, true);
        let c64 = |v: i64| i64t.const_int(v as u64, true);
        let lanes = super::fixed_point::Lanes {
            c32: &c32,
            c64: &c64,
            t32: i32t,
            t64: i64t,
            high_mul: None,
            round_shift: None,
        };
        super::fixed_point::emit_mul_q31(
            &self.b,
            &lanes,
            (x, m, s),
            super::fixed_point::Facts::NONE,
        )
    }

    pub(crate) fn combine(
        &self,
        kind: ReduceKind,
        acc: FloatValue<'ctx>,
        v: FloatValue<'ctx>,
    ) -> FloatValue<'ctx> {
        match kind {
            ReduceKind::Add => self.b.build_float_add(acc, v, "").unwrap(),
            ReduceKind::Max => self.fmax(acc, v, true),
            ReduceKind::Min => self.fmax(acc, v, false),
        }
    }

    pub(crate) fn identity(&self, kind: ReduceKind) -> FloatValue<'ctx> {
        match kind {
            ReduceKind::Add => self.f32c(0.0),
            ReduceKind::Max => self.f32c(f64::NEG_INFINITY),
            ReduceKind::Min => self.f32c(f64::INFINITY),
        }
    }

    /// The value of fused instruction `id` at `ix`, computed inline from the kernel arguments.
    pub(crate) fn value_of(
        &self,
        comp: &Computation,
        id: InstId,
        ix: Ix<'_, 'ctx>,
        k: &Kernel<'ctx>,
        heavy: Option<InstId>,
    ) -> BasicValueEnum<'ctx> {
        let inst = comp.inst(id);
        if Some(id) == heavy {
            return self.load_ix(k.out, ix, &inst.shape);
        }
        if let Op::Parameter { index } = inst.op {
            if inst.shape.rank() == 0 && inst.shape.dtype == DType::F32 {
                if let Some(c) = self.scalar_consts.borrow().get(index).copied().flatten() {
                    return self.f32c(c as f64).into();
                }
            }
            let byte = self.arg_bytes.borrow().get(index).copied().flatten();
            if let (Some(d), DType::F32 | DType::I32) = (byte, inst.shape.dtype) {
                let mut s = inst.shape.clone();
                s.dtype = d;
                let v = self.load_ix(k.args[index], ix, &s).into_int_value();
                let i = if d == DType::U8 {
                    self.b.build_int_z_extend(v, self.ctx.i32_type(), "")
                } else {
                    self.b.build_int_s_extend(v, self.ctx.i32_type(), "")
                }
                .unwrap();
                if inst.shape.dtype == DType::I32 {
                    return i.into();
                }
                return self
                    .b
                    .build_signed_int_to_float(i, self.ctx.f32_type(), "")
                    .unwrap()
                    .into();
            }
            return self.load_ix(k.args[index], ix, &inst.shape);
        }
        let idx = match ix {
            Ix::Multi(idx) => idx.to_vec(),
            Ix::Linear(off) => self.unravel(off, &inst.shape.dims),
        };
        if let Op::Concatenate { dimension } = inst.op {
            let pin = self
                .concat_pins
                .borrow()
                .iter()
                .find(|p| p.id == id)
                .copied();
            if let Some(pin) = pin {
                let mut sub = idx.clone();
                sub[dimension] = self
                    .b
                    .build_int_sub(idx[dimension], self.i64(pin.start as u64), "")
                    .unwrap();
                return self.value_of(comp, inst.operands[pin.operand], Ix::Multi(&sub), k, heavy);
            }
        }
        if let Some(x) = self.exact_round_trip(comp, id) {
            // `convert(convert(x, s32), f32)` of an integer the s32 holds is `x`; only a NaN the
            // ranges do not follow still becomes 0 (`Range::fits_s32`).
            let v = self
                .value_of(comp, x, Ix::Multi(&idx), k, heavy)
                .into_float_value();
            let nan = self.fcmp(FloatPredicate::UNO, v, v);
            return self.select(nan, self.f32c(0.0).into(), v.into());
        }
        let shapes: Vec<Shape> = inst
            .operands
            .iter()
            .map(|&o| comp.inst(o).shape.clone())
            .collect();
        let at = |j: usize, sub: Ix<'_, 'ctx>| self.value_of(comp, inst.operands[j], sub, k, heavy);
        self.elemental(&inst.op, &inst.shape, &shapes, &idx, &at)
    }

    /// The f32 `x` when instruction `id` of `comp` is `convert(convert(x, s32), f32)` and `x`
    /// holds only integers an s32 holds (`Emitter::fits_s32`).
    fn exact_round_trip(&self, comp: &Computation, id: InstId) -> Option<InstId> {
        let inst = comp.inst(id);
        let Op::Convert { to: DType::F32 } = inst.op else {
            return None;
        };
        let mid = comp.inst(inst.operands[0]);
        let x = *mid.operands.first()?;
        (matches!(mid.op, Op::Convert { to: DType::I32 })
            && comp.inst(x).shape.dtype == DType::F32
            && self.fits_s32(Some(comp), x))
        .then_some(x)
    }

    /// The value of elemental op `op` (result `shape`, operands `opnds`) at output index `idx`;
    /// operand `j`'s elements come from `at(j, ...)`.
    pub(crate) fn elemental(
        &self,
        op: &Op,
        shape: &Shape,
        opnds: &[Shape],
        idx: &[IntValue<'ctx>],
        at_ix: &dyn Fn(usize, Ix<'_, 'ctx>) -> BasicValueEnum<'ctx>,
    ) -> BasicValueEnum<'ctx> {
        let out_dims = &shape.dims;
        let shape_of = |j: usize| &opnds[j];
        let at = |j: usize, oidx: &[IntValue<'ctx>]| at_ix(j, Ix::Multi(oidx));
        match op {
            Op::Unary(u) => self.unary(*u, at(0, idx).into_float_value()).into(),
            Op::Binary(bop) => {
                let (x, y) = (at(0, idx), at(1, idx));
                if x.is_int_value() {
                    return self
                        .binary_i32(*bop, x.into_int_value(), y.into_int_value())
                        .into();
                }
                self.binary(*bop, x.into_float_value(), y.into_float_value())
                    .into()
            }
            Op::MulQ31 => {
                let i = |j: usize| at(j, idx).into_int_value();
                if shape_of(0).dtype == DType::F32 {
                    // Integers held in f32: to s32 as `convert` does, and the result back.
                    let x = self
                        .convert(at(0, idx), DType::F32, DType::I32)
                        .into_int_value();
                    let q = self.mul_q31(x, i(1), i(2));
                    return self.convert(q.into(), DType::I32, DType::F32);
                }
                self.mul_q31(i(0), i(1), i(2)).into()
            }
            Op::Compare(dir) => {
                let (a, b) = (at(0, idx), at(1, idx));
                if a.is_int_value() {
                    // i32 (and the integer types computed in it) compare signed; pred (i1)
                    // unsigned, so false < true.
                    let signed = shape_of(0).dtype != DType::Pred;
                    let p = match (dir, signed) {
                        (CompareDir::Eq, _) => IntPredicate::EQ,
                        (CompareDir::Ne, _) => IntPredicate::NE,
                        (CompareDir::Lt, true) => IntPredicate::SLT,
                        (CompareDir::Le, true) => IntPredicate::SLE,
                        (CompareDir::Gt, true) => IntPredicate::SGT,
                        (CompareDir::Ge, true) => IntPredicate::SGE,
                        (CompareDir::Lt, false) => IntPredicate::ULT,
                        (CompareDir::Le, false) => IntPredicate::ULE,
                        (CompareDir::Gt, false) => IntPredicate::UGT,
                        (CompareDir::Ge, false) => IntPredicate::UGE,
                    };
                    return self
                        .b
                        .build_int_compare(p, a.into_int_value(), b.into_int_value(), "")
                        .unwrap()
                        .into();
                }
                let p = match dir {
                    CompareDir::Eq => FloatPredicate::OEQ,
                    CompareDir::Ne => FloatPredicate::UNE,
                    CompareDir::Lt => FloatPredicate::OLT,
                    CompareDir::Le => FloatPredicate::OLE,
                    CompareDir::Gt => FloatPredicate::OGT,
                    CompareDir::Ge => FloatPredicate::OGE,
                };
                self.fcmp(p, a.into_float_value(), b.into_float_value())
                    .into()
            }
            Op::Select => self.select(at(0, idx).into_int_value(), at(1, idx), at(2, idx)),
            Op::Convert { to } => self.convert(at(0, idx), shape_of(0).dtype, *to),
            Op::Clamp => {
                let bound = |j: usize| -> FloatValue<'ctx> {
                    if shape_of(j).rank() == 0 {
                        at(j, &[]).into_float_value()
                    } else {
                        at(j, idx).into_float_value()
                    }
                };
                let x = at(1, idx).into_float_value();
                let lo = self.fmax(x, bound(0), true);
                let r = self.fmax(lo, bound(2), false);
                // NaN stays NaN (fmax already propagates it).
                r.into()
            }
            Op::Fma => {
                let f = |j: usize| at(j, idx).into_float_value();
                self.fma_exact(f(0), f(1), f(2)).into()
            }
            Op::Broadcast { dimensions } => {
                let s = shape_of(0);
                let oi: Vec<IntValue> = dimensions
                    .iter()
                    .enumerate()
                    .map(|(i, &d)| if s.dims[i] == 1 { self.i64(0) } else { idx[d] })
                    .collect();
                at(0, &oi)
            }
            Op::Reshape => match reshape_groups(&shape_of(0).dims, out_dims) {
                // Dims that only split or merge: the operand's index group by group (a dim
                // kept as it is costs nothing; a channel shuffle's 68 = 4·17 one division).
                Some(groups) => {
                    let mut oi = Vec::with_capacity(shape_of(0).rank());
                    let in_dims = &shape_of(0).dims;
                    for (o, i) in groups {
                        if o.len() == 1 && i.len() == 1 {
                            oi.push(idx[o.start]);
                        } else {
                            let lin = self.linear(&idx[o.clone()], &out_dims[o]);
                            oi.extend(self.unravel(lin, &in_dims[i]));
                        }
                    }
                    at(0, &oi)
                }
                // Same row-major offset.
                None => at_ix(0, Ix::Linear(self.linear(idx, out_dims))),
            },
            Op::Transpose { permutation } => {
                let mut oi = vec![self.i64(0); idx.len()];
                for (i, &p) in permutation.iter().enumerate() {
                    oi[p] = idx[i];
                }
                at(0, &oi)
            }
            Op::Slice {
                starts, strides, ..
            } => {
                let oi: Vec<IntValue> = idx
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let m = self
                            .b
                            .build_int_mul(v, self.i64(strides[i] as u64), "")
                            .unwrap();
                        self.b
                            .build_int_add(m, self.i64(starts[i] as u64), "")
                            .unwrap()
                    })
                    .collect();
                at(0, &oi)
            }
            Op::Pad { low, .. } => {
                let s = shape_of(0);
                let mut valid = self.ctx.bool_type().const_int(1, false);
                let mut oi = Vec::with_capacity(idx.len());
                for (i, &v) in idx.iter().enumerate() {
                    let p = self
                        .b
                        .build_int_sub(v, self.i64(low[i] as u64), "")
                        .unwrap();
                    valid = self
                        .b
                        .build_and(valid, self.in_range(p, s.dims[i]), "")
                        .unwrap();
                    oi.push(self.clamp_index(p, s.dims[i]));
                }
                let x = at(0, &oi);
                let pad = at(1, &[]);
                self.select(valid, x, pad)
            }
            Op::Concatenate { dimension } => {
                let d = *dimension;
                let mut start = 0usize;
                let mut result: Option<BasicValueEnum> = None;
                for j in 0..opnds.len() {
                    let s = shape_of(j);
                    let p = self
                        .b
                        .build_int_sub(idx[d], self.i64(start as u64), "")
                        .unwrap();
                    let mut oi = idx.to_vec();
                    oi[d] = self.clamp_index(p, s.dims[d]);
                    let v = at(j, &oi);
                    result = Some(match result {
                        None => v,
                        Some(prev) => {
                            let here = self
                                .b
                                .build_int_compare(IntPredicate::SGE, p, self.i64(0), "")
                                .unwrap();
                            self.select(here, v, prev)
                        }
                    });
                    start += s.dims[d];
                }
                result.expect("concatenate has operands")
            }
            Op::Gather => {
                let table = shape_of(0).dims.clone();
                let ids = shape_of(1).dims.clone();
                let r = ids.len();
                let _ = &ids;
                let row = at(1, &idx[..r]).into_int_value();
                let row = self
                    .b
                    .build_int_s_extend(row, self.ctx.i64_type(), "")
                    .unwrap();
                let row = self.clamp_index(row, table[0]);
                let mut ti = vec![row];
                ti.extend_from_slice(&idx[r..]);
                at(0, &ti)
            }
            other => unreachable!("{} is not elemental", other.opcode()),
        }
    }
}

/// The dims of a reshape `from` → `to` in matching groups: consecutive output dims and
/// consecutive input dims with the same product, each group as small as possible (a dim of
/// size 1 joins the group before it, or the first group), so that the input index of a group
/// depends only on the output index of the same group. `None` when a size-0 dim makes the
/// grouping ambiguous.
pub(crate) fn reshape_groups(
    from: &[usize],
    to: &[usize],
) -> Option<Vec<(std::ops::Range<usize>, std::ops::Range<usize>)>> {
    if from.contains(&0) || to.contains(&0) {
        return None;
    }
    let (mut groups, mut i, mut o) = (Vec::new(), 0, 0);
    while i < from.len() || o < to.len() {
        let (i0, o0) = (i, o);
        let (mut pi, mut po) = (1usize, 1usize);
        if i < from.len() {
            pi = from[i];
            i += 1;
        }
        if o < to.len() {
            po = to[o];
            o += 1;
        }
        while pi != po {
            if pi < po && i < from.len() {
                pi *= from[i];
                i += 1;
            } else if po < pi && o < to.len() {
                po *= to[o];
                o += 1;
            } else {
                return None;
            }
        }
        // Trailing 1s belong to this group.
        while i < from.len() && from[i] == 1 && (o >= to.len() || to[o] != 1) {
            i += 1;
        }
        while o < to.len() && to[o] == 1 && (i >= from.len() || from[i] != 1) {
            o += 1;
        }
        groups.push((o0..o, i0..i));
    }
    Some(groups)
}

#[cfg(test)]
mod tests {
    use super::reshape_groups;

    #[test]
    fn reshape_groups_split_and_merge() {
        // A channel shuffle's reshapes: 68 = 4·17, the spatial dims kept.
        assert_eq!(
            reshape_groups(&[1, 68, 14, 14], &[1, 4, 17, 14, 14]),
            Some(vec![(0..1, 0..1), (1..3, 1..2), (3..4, 2..3), (4..5, 3..4)])
        );
        // Flatten: one group; scalars and unit dims.
        assert_eq!(reshape_groups(&[2, 3, 4], &[24]), Some(vec![(0..1, 0..3)]));
        assert_eq!(reshape_groups(&[1], &[]), Some(vec![(0..0, 0..1)]));
        assert_eq!(reshape_groups(&[6, 1], &[2, 3]), Some(vec![(0..2, 0..2)]));
        // 6·4 → 4·6 has no finer grouping than the whole.
        assert_eq!(reshape_groups(&[6, 4], &[4, 6]), Some(vec![(0..2, 0..2)]));
        assert_eq!(reshape_groups(&[0, 3], &[3, 0]), None);
    }
}
