//! Register epilogues: the elementwise tail of an output fusion (bias, folded batch norm, ReLU,
//! ReLU6, ...) applied to a micro-kernel's accumulator tile before it is stored, so the result
//! is written once and never read back.
//!
//! Contract: [`recognize`] accepts a fused computation whose root is reached from the dot or
//! convolution by a chain of single-use elementwise steps — `add`, `subtract`, `multiply`,
//! `divide`, `maximum`, `minimum` with a *uniform* other operand, or `clamp` with uniform
//! bounds — where a uniform operand is a scalar parameter (possibly broadcast) or a rank-1
//! parameter broadcast along one output dim (a per-channel or per-column vector); a binary step
//! may also take a parameter of the output's shape (a residual), read at the tile's own elements
//! through its layout, after a chain of such steps of its own (`Operand::Full`: a quantized
//! residual's dequantization; not in [`recognize_operand`]'s reduction chains); `round-bf16`
//! (`precision: bf16` rounds a product's operand where it is computed, `compile/bf16_operands.rs`);
//! and `convert(convert(x, s32), f32)` (`Step::IntRoundTrip`: a quantized model's
//! `QuantizeLinear → DequantizeLinear` pair, truncating and saturating as `core/elemental.rs`
//! `convert` does); and `multiply-q31` of f32 integers by uniform i32 multipliers and shifts
//! (`Step::MulQ31`: an integer TFLite model's requantization, `front/tflite/int8.rs`).
//! Anything else gives `None` and the
//! kernel keeps the separate epilogue loop. Each step is emitted with the same instruction (and
//! operand order) as the scalar code of `core/elemental.rs`, so the two give bit-identical results.

use super::Cg;
use super::vector::VecCol;
use crate::codegen::core::Kernel;
use crate::codegen::core::fixed_point;
use crate::codegen::core::layout::physical_strides;
use crate::ir::{BinaryOp, Computation, DType, InstId, Op, UnaryOp};
use inkwell::types::VectorType;
use inkwell::values::{AsValueRef, IntValue, VectorValue};
use inkwell::{FloatPredicate, IntPredicate};

/// An operand of an epilogue step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// A scalar parameter of the fusion.
    Scalar(usize),
    /// A rank-1 parameter indexed by output dim `dim`.
    Along { param: usize, dim: usize },
    /// A parameter of the output's shape, element strides `strides` (its layout), with `steps`
    /// applied to it (none for a plain residual).
    Full {
        param: usize,
        strides: Vec<u64>,
        steps: Vec<Step>,
    },
}

/// One step; `value_first` says whether the running value is the first operand (it matters for
/// `subtract`, and for which NaN a `maximum` of two NaNs returns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Binary {
        op: BinaryOp,
        other: Operand,
        value_first: bool,
    },
    /// `clamp(lo, x, hi)` of instruction `x` (its value range may prove it NaN-free: then a
    /// bound that is a number takes one `maxps`/`minps`).
    Clamp { lo: Operand, hi: Operand, x: InstId },
    /// `round-bf16` (`UnaryOp::RoundBf16`).
    RoundBf16,
    /// `round-f16` (`UnaryOp::RoundF16`).
    RoundF16,
    /// `convert(convert(x, s32), f32)` of instruction `x`: truncated toward zero and saturated
    /// to i32 (NaN gives 0), then back to f32; only the NaN test where `x`'s range holds
    /// integers an s32 holds (`Emitter::fits_s32`).
    IntRoundTrip { x: InstId },
    /// `multiply-q31(x, m, s)` of f32 instruction `x` (integers; `ir/fixed_point.rs`) with
    /// uniform i32 operands: to s32 as `convert` does, the fixed-point multiply on i32 lanes
    /// (`core/fixed_point.rs`), back to f32.
    /// `at` is the `multiply-q31` itself, `m_at` and `s_at` its multiplier and shift operands
    /// (their value ranges let the kernel skip the saturation test and the left shift, round
    /// with fewer instructions, and keep the next integer steps in i32).
    MulQ31 {
        m: Operand,
        s: Operand,
        x: InstId,
        at: InstId,
        m_at: InstId,
        s_at: InstId,
    },
}

/// The recognised chain, applied in order to the heavy op's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegEpilogue {
    pub steps: Vec<Step>,
}

/// Where an output dim lies in a micro-tile.
#[derive(Clone, Copy)]
pub enum TilePos<'ctx> {
    /// Along the tile's rows: index `row` of [`Cg::apply_epilogue`].
    Row,
    /// Along a vector's lanes: index `col + lane`.
    Col,
    /// The same for the whole tile.
    At(IntValue<'ctx>),
}

/// The uniform f32 operand that instruction `id` of `comp` is, if it is one.
fn uniform(comp: &Computation, id: InstId) -> Option<Operand> {
    uniform_of(comp, id, DType::F32)
}

/// The uniform operand of element type `dtype` that instruction `id` of `comp` is, if it is one.
fn uniform_of(comp: &Computation, id: InstId, dtype: DType) -> Option<Operand> {
    let inst = comp.inst(id);
    if inst.shape.dtype != dtype {
        return None;
    }
    match &inst.op {
        Op::Parameter { index } if inst.shape.rank() == 0 => Some(Operand::Scalar(*index)),
        Op::Broadcast { dimensions } => {
            let src = comp.inst(inst.operands[0]);
            let Op::Parameter { index } = src.op else {
                return None;
            };
            // The source dims longer than one: none (one value everywhere, whatever numpy
            // broadcasting stretched), or one that is the output dim it maps to (a per-channel
            // vector, also when shaped [C, 1, 1] as old BatchNormalization exports write it:
            // its other dims have one element, so element `j` is at offset `j`).
            let long: Vec<usize> = (0..src.shape.rank())
                .filter(|&k| src.shape.dims[k] != 1)
                .collect();
            match long.as_slice() {
                [] => Some(Operand::Scalar(index)),
                &[k] if src.shape.dims[k] == inst.shape.dims[dimensions[k]] => {
                    Some(Operand::Along {
                        param: index,
                        dim: dimensions[k],
                    })
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// The register epilogue of fused computation `comp` whose heavy op is `heavy`.
pub fn recognize(comp: &Computation, heavy: InstId) -> Option<RegEpilogue> {
    let root = comp.outputs.first()?.value;
    if comp.outputs.len() != 1 {
        return None;
    }
    chain(comp, root, &|id| id == heavy, true)
        .map(|(e, _)| e)
        .filter(|e| e.step_count() <= MAX_REGISTER_STEPS)
}

/// 2^31: an f32 strictly inside `(−2^31, 2^31)` converts to i32 without saturating.
const INT_LIMIT: f64 = 2_147_483_648.0;

/// 2^24: integers up to this magnitude are exact in f32 (`ir/value_range.rs` `F32_EXACT_INT`).
const F32_EXACT: f64 = crate::ir::value_range::F32_EXACT_INT;

/// Most steps (a residual's own steps included) a register epilogue applies; a longer chain is
/// swept over the stored result instead (`kernel.rs`). Every step's constants are live across
/// the micro-kernel's tile: a quantized ResNet block's tail (its requantization, the residual's
/// dequantization, the add, ReLU and the requantization after it: 24 steps) spilled some 260
/// times in the tile and ran 764 µs, against 548 µs as the convolution plus the sweep
/// (resnet50 uint8 QDQ, 1×1 convolution to 256×56×56, Zen 5, 2026-12-03). The 7 steps of a
/// requantized squeeze convolution gain in registers (squeezenet: 32 → 29 µs).
const MAX_REGISTER_STEPS: usize = 12;

impl RegEpilogue {
    /// No steps: values are stored as computed.
    pub fn none() -> RegEpilogue {
        RegEpilogue { steps: Vec::new() }
    }

    /// The steps applied, a residual's own steps included.
    pub fn step_count(&self) -> usize {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Binary {
                    other: Operand::Full { steps, .. },
                    ..
                } => 1 + steps.len(),
                _ => 1,
            })
            .sum()
    }

    /// The strides of every [`Operand::Full`] the chain reads.
    pub fn full_strides(&self) -> Vec<&[u64]> {
        let mut out = Vec::new();
        for s in &self.steps {
            if let Step::Binary {
                other: Operand::Full { strides, .. },
                ..
            } = s
            {
                out.push(strides.as_slice());
            }
        }
        out
    }
}

/// The parameter of `dims` (a residual) that instruction `id` of `comp` is, possibly after a
/// chain of uniform steps (a quantized residual's `(q − zero_point) · scale`), if it is one.
fn full(comp: &Computation, id: InstId, dims: &[usize]) -> Option<Operand> {
    let inst = comp.inst(id);
    if inst.shape.dtype != DType::F32 || inst.shape.dims != dims {
        return None;
    }
    if let Op::Parameter { index } = inst.op {
        return Some(Operand::Full {
            param: index,
            strides: physical_strides(&inst.shape),
            steps: Vec::new(),
        });
    }
    let is_base = |id: InstId| {
        let i = comp.inst(id);
        matches!(i.op, Op::Parameter { .. }) && i.shape.dims == dims
    };
    let (e, base) = chain(comp, id, &is_base, false)?;
    let b = comp.inst(base);
    match b.op {
        Op::Parameter { index } if b.shape.dtype == DType::F32 => Some(Operand::Full {
            param: index,
            strides: physical_strides(&b.shape),
            steps: e.steps,
        }),
        _ => None,
    }
}

/// The chain from `top` down to a parameter of the same shape (a reduction's fused operand):
/// the steps and that parameter's index.
pub fn recognize_operand(comp: &Computation, top: InstId) -> Option<(RegEpilogue, usize)> {
    let dims = comp.inst(top).shape.dims.clone();
    let is_base = |id: InstId| {
        let i = comp.inst(id);
        matches!(i.op, Op::Parameter { .. }) && i.shape.dims == dims
    };
    let (e, base) = chain(comp, top, &is_base, false)?;
    match comp.inst(base).op {
        Op::Parameter { index } => Some((e, index)),
        _ => None,
    }
}

/// The f32 `x` of `convert(convert(x, s32), f32)` at `id`, when the s32 value has no other
/// reader.
fn int_round_trip(comp: &Computation, users: &[usize], id: InstId) -> Option<InstId> {
    let outer = comp.inst(id);
    let Op::Convert { to: DType::F32 } = outer.op else {
        return None;
    };
    let mid = outer.operands[0];
    let inner = comp.inst(mid);
    let x = *inner.operands.first()?;
    (matches!(inner.op, Op::Convert { to: DType::I32 })
        && users[mid.index()] == 1
        && comp.inst(x).shape.dtype == DType::F32)
        .then_some(x)
}

/// Steps from `top` down to the first instruction `is_base` accepts (applied bottom-up).
fn chain(
    comp: &Computation,
    top: InstId,
    is_base: &dyn Fn(InstId) -> bool,
    residuals: bool,
) -> Option<(RegEpilogue, InstId)> {
    let root = top;
    let dims = comp.inst(top).shape.dims.clone();
    let mut users = vec![0usize; comp.instructions.len()];
    for inst in &comp.instructions {
        for &o in &inst.operands {
            users[o.index()] += 1;
        }
    }
    // Walk from the root down to the heavy op.
    let mut steps = Vec::new();
    let mut at = root;
    while !is_base(at) {
        let inst = comp.inst(at);
        if inst.shape.dims != dims || inst.shape.dtype != DType::F32 {
            return None;
        }
        if let Some(x) = int_round_trip(comp, &users, at) {
            if users[x.index()] != 1 && !is_base(x) {
                return None;
            }
            steps.push(Step::IntRoundTrip { x });
            at = x;
            continue;
        }
        let (next, step) = match &inst.op {
            Op::Binary(
                op @ (BinaryOp::Add
                | BinaryOp::Subtract
                | BinaryOp::Multiply
                | BinaryOp::Divide
                | BinaryOp::Maximum
                | BinaryOp::Minimum),
            ) => {
                let (a, b) = (inst.operands[0], inst.operands[1]);
                if let Some(u) = uniform(comp, b) {
                    (
                        a,
                        Step::Binary {
                            op: *op,
                            other: u,
                            value_first: true,
                        },
                    )
                } else if let Some(u) = uniform(comp, a) {
                    (
                        b,
                        Step::Binary {
                            op: *op,
                            other: u,
                            value_first: false,
                        },
                    )
                } else if let Some(u) = full(comp, b, &dims).filter(|_| residuals) {
                    (
                        a,
                        Step::Binary {
                            op: *op,
                            other: u,
                            value_first: true,
                        },
                    )
                } else if let Some(u) = full(comp, a, &dims).filter(|_| residuals) {
                    (
                        b,
                        Step::Binary {
                            op: *op,
                            other: u,
                            value_first: false,
                        },
                    )
                } else {
                    return None;
                }
            }
            Op::Clamp => {
                let lo = uniform(comp, inst.operands[0])?;
                let hi = uniform(comp, inst.operands[2])?;
                let x = inst.operands[1];
                (x, Step::Clamp { lo, hi, x })
            }
            Op::MulQ31 => {
                let m = uniform_of(comp, inst.operands[1], DType::I32)?;
                let s = uniform_of(comp, inst.operands[2], DType::I32)?;
                let x = inst.operands[0];
                let step = Step::MulQ31 {
                    m,
                    s,
                    x,
                    at,
                    m_at: inst.operands[1],
                    s_at: inst.operands[2],
                };
                (x, step)
            }
            Op::Unary(UnaryOp::RoundBf16) => (inst.operands[0], Step::RoundBf16),
            Op::Unary(UnaryOp::RoundF16) => (inst.operands[0], Step::RoundF16),
            _ => return None,
        };
        // Every value on the chain feeds only the next step; a parameter at the bottom is a
        // buffer and may have other readers.
        let param_base = is_base(next) && matches!(comp.inst(next).op, Op::Parameter { .. });
        if users[next.index()] != 1 && !param_base {
            return None;
        }
        steps.push(step);
        at = next;
    }
    steps.reverse();
    Some((RegEpilogue { steps }, at))
}

impl<'a, 'ctx> Cg<'a, 'ctx> {
    /// `max`/`min` of two vectors with the scalar code's NaN rule (`fmax` in `core/emitter.rs`): the first
    /// operand wins when it is larger (smaller) or NaN.
    pub(super) fn vfmax(
        &self,
        a: VectorValue<'ctx>,
        b: VectorValue<'ctx>,
        max: bool,
    ) -> VectorValue<'ctx> {
        self.vfmax_with(a, b, max, false, false)
    }

    /// [`Cg::vfmax`]; `b_is_number`: `b` is a splat of a constant that is not NaN, and "a is
    /// larger, or a is NaN" is then one unordered compare, the same result in fewer instructions
    /// (LLVM does not always find it: ReLU6's upper bound kept four instructions per vector);
    /// with `a_nan_free` too (`a`'s value range has no NaN) the compare is ordered, which is the
    /// same result again and `maxps a, b` exactly: one instruction for a compare and a blend.
    pub(super) fn vfmax_with(
        &self,
        a: VectorValue<'ctx>,
        b: VectorValue<'ctx>,
        max: bool,
        b_is_number: bool,
        a_nan_free: bool,
    ) -> VectorValue<'ctx> {
        let take_a = if b_is_number {
            let p = match (max, a_nan_free) {
                (true, false) => FloatPredicate::UGT,
                (true, true) => FloatPredicate::OGT,
                (false, false) => FloatPredicate::ULT,
                (false, true) => FloatPredicate::OLT,
            };
            self.b.build_float_compare(p, a, b, "").unwrap()
        } else if let Some((f, rounding)) = self.x86_max_ps(a.get_type().get_size(), max) {
            // `a > b ? a : b` is `maxps a, b` exactly (b when unordered or equal); only a NaN
            // `a` needs a select after it. LLVM folds the generic form back into two compares
            // and a mask `or` (five instructions per vector, the cost of a max pool's window).
            let mut args = vec![a.into(), b.into()];
            if rounding {
                // _MM_FROUND_CUR_DIRECTION
                args.push(self.ctx.i32_type().const_int(4, false).into());
            }
            let m = self.call(f, &args).into_vector_value();
            let nan = self
                .b
                .build_float_compare(FloatPredicate::UNO, a, a, "")
                .unwrap();
            return self
                .b
                .build_select(nan, a, m, "")
                .unwrap()
                .into_vector_value();
        } else {
            let p = if max {
                FloatPredicate::OGT
            } else {
                FloatPredicate::OLT
            };
            let gt = self.b.build_float_compare(p, a, b, "").unwrap();
            let nan = self
                .b
                .build_float_compare(FloatPredicate::UNO, a, a, "")
                .unwrap();
            self.b.build_or(gt, nan, "").unwrap()
        };
        self.b
            .build_select(take_a, a, b, "")
            .unwrap()
            .into_vector_value()
    }

    /// The f32 elements `off + l·step` of buffer `p` in lanes `l < v.store` of a vector (the
    /// other lanes zero).
    fn gather_lanes(
        &self,
        p: inkwell::values::PointerValue<'ctx>,
        off: IntValue<'ctx>,
        step: u64,
        v: &VecCol,
    ) -> VectorValue<'ctx> {
        let mut r = self.vec_ty(v.lanes).const_zero();
        for l in 0..v.store {
            let at = self.add(off, self.i64(l as u64 * step));
            let e = self.load(p, at, DType::F32).into_float_value();
            let lane = self.ctx.i32_type().const_int(l as u64, false);
            r = self.b.build_insert_element(r, e, lane, "").unwrap();
        }
        r
    }

    /// `convert(convert(x, s32), f32)` lane by lane, with `core/elemental.rs` `convert`'s
    /// instructions: truncation, saturation at ±2^31, NaN to 0, then back to f32.
    fn vint_round_trip(&self, x: VectorValue<'ctx>) -> VectorValue<'ctx> {
        let t = self.vto_s32(x);
        self.b
            .build_signed_int_to_float(t, self.vec_ty(x.get_type().get_size()), "")
            .unwrap()
    }

    /// `convert(x, s32)` lane by lane (`core/elemental.rs` `convert`): truncation, saturation at
    /// ±2^31, NaN to 0.
    fn vto_s32(&self, x: VectorValue<'ctx>) -> VectorValue<'ctx> {
        let b = &self.b;
        let lanes = x.get_type().get_size();
        let i32t = self.ctx.i32_type();
        let splat_i = |c: i32| {
            VectorType::const_vector(&vec![i32t.const_int(c as u64, true); lanes as usize])
        };
        // 2^31 is exact in f32; every f32 below it (and at least -2^31) converts exactly.
        let limit = self.splat(self.f32c(2147483648.0), lanes);
        let neg_limit = self.splat(self.f32c(-2147483648.0), lanes);
        let t = b
            .build_float_to_signed_int(x, i32t.vec_type(lanes), "")
            .unwrap();
        let hi = b
            .build_float_compare(FloatPredicate::OGE, x, limit, "")
            .unwrap();
        let lo = b
            .build_float_compare(FloatPredicate::OLT, x, neg_limit, "")
            .unwrap();
        let nan = b
            .build_float_compare(FloatPredicate::UNO, x, x, "")
            .unwrap();
        let t = b
            .build_select(hi, splat_i(i32::MAX), t, "")
            .unwrap()
            .into_vector_value();
        let t = b
            .build_select(lo, splat_i(i32::MIN), t, "")
            .unwrap()
            .into_vector_value();
        b.build_select(nan, splat_i(0), t, "")
            .unwrap()
            .into_vector_value()
    }

    /// [`Step::MulQ31`] of the f32 vector `x` whose instruction is `of`, with the i32 vectors
    /// `m` and `s` (the instruction `m_at`): its i32 lanes.
    fn vmul_q31(
        &self,
        x: VectorValue<'ctx>,
        (of, m_at, s_at): (InstId, InstId, InstId),
        (m, s): (VectorValue<'ctx>, VectorValue<'ctx>),
    ) -> VectorValue<'ctx> {
        let lanes = x.get_type().get_size();
        let i32t = self.ctx.i32_type();
        // Finite, NaN-free values inside the i32 range truncate alike with or without the
        // saturation tests (an integer test is not needed: truncation is what both do).
        let plain = self
            .fused_range(of)
            .is_some_and(|r| !r.nan && r.lo > -INT_LIMIT && r.hi < INT_LIMIT);
        let small_x = self
            .fused_range(of)
            .is_some_and(|r| !r.nan && r.magnitude() <= F32_EXACT);
        // An exact sum converted to f32 by the kernel (`|x| ≤ 2^24`): its integers as they were.
        let xi = match self
            .exact_int_of(x)
            .or_else(|| small_x.then(|| self.int_source(x)).flatten())
        {
            Some(i) => i,
            None if plain => self
                .b
                .build_float_to_signed_int(x, i32t.vec_type(lanes), "")
                .unwrap(),
            None => self.vto_s32(x),
        };
        self.vmul_q31_ints(xi, (of, m_at, s_at), (m, s))
    }

    /// `multiply-q31` of the i32 lanes `xi` (the values of fused instruction `of`) by the i32
    /// vectors `m` and `s` (instructions `m_at`, `s_at`): Helium's `vqrdmulh`/`vrshl` or
    /// NEON's `sqrdmulh`/`srshl` on 4 lanes, else the 64-bit products (`fixed_point.rs`).
    pub(super) fn vmul_q31_ints(
        &self,
        xi: VectorValue<'ctx>,
        (of, m_at, s_at): (InstId, InstId, InstId),
        (m, s): (VectorValue<'ctx>, VectorValue<'ctx>),
    ) -> VectorValue<'ctx> {
        let lanes = xi.get_type().get_size();
        let (i32t, i64t) = (self.ctx.i32_type(), self.ctx.i64_type());
        let shifts = self.fused_range(s_at);
        let small_x = self
            .fused_range(of)
            .is_some_and(|r| !r.nan && r.magnitude() <= fixed_point::SHORT_X_LIMIT);
        let facts = fixed_point::Facts {
            m_may_be_min: self.fused_range(m_at).is_none_or(|r| r.lo <= -INT_LIMIT),
            shift_nonpositive: shifts.is_some_and(|r| r.lo >= -31.0 && r.hi <= 0.0),
            short_rounding: small_x && shifts.is_some_and(|r| r.lo >= -31.0 && r.hi <= -1.0),
        };
        let c32 = |v: i64| {
            VectorType::const_vector(&vec![i32t.const_int(v as u64, true); lanes as usize])
        };
        let c64 = |v: i64| {
            VectorType::const_vector(&vec![i64t.const_int(v as u64, true); lanes as usize])
        };
        // Helium's and NEON's Q31 instructions on 4 lanes (`fixed_point::Lanes`).
        let (high_name, shift_name) = match lanes {
            4 if self.target.has_helium() => (
                "llvm.arm.mve.vqrdmulh.v4i32",
                "llvm.arm.mve.vshl.vector.v4i32.v4i32",
            ),
            4 if self.target.has_neon() => (
                "llvm.aarch64.neon.sqrdmulh.v4i32",
                "llvm.aarch64.neon.srshl.v4i32",
            ),
            _ => ("", ""),
        };
        let v4 = i32t.vec_type(4);
        // Two vectors, then `flags` i32 operands.
        let declare = |name: &str, flags: usize| {
            self.m.get_function(name).unwrap_or_else(|| {
                let mut a: Vec<inkwell::types::BasicMetadataTypeEnum<'ctx>> = vec![v4.into(); 2];
                a.resize(2 + flags, i32t.into());
                self.m.add_function(name, v4.fn_type(&a, false), None)
            })
        };
        let intrinsics = (!high_name.is_empty()).then(|| {
            let shift_flags = if self.target.has_helium() { 3 } else { 0 };
            (declare(high_name, 0), declare(shift_name, shift_flags))
        });
        let high = |a: VectorValue<'ctx>, b: VectorValue<'ctx>| {
            let (f, _) = intrinsics.expect("only with the intrinsics");
            self.call(f, &[a.into(), b.into()]).into_vector_value()
        };
        let round_shift = |a: VectorValue<'ctx>, s: VectorValue<'ctx>| {
            let (_, f) = intrinsics.expect("only with the intrinsics");
            let mut args = vec![a.into(), s.into()];
            if self.target.has_helium() {
                // Not saturating, rounding, signed.
                for v in [0u64, 1, 0] {
                    args.push(i32t.const_int(v, false).into());
                }
            }
            self.call(f, &args).into_vector_value()
        };
        // A Cortex-M without Helium has no vector lanes: LLVM splits the lanes' 64-bit products
        // into generic multiplies (`umull`, `mla`, `mul` of a sign word and the carries: some 12
        // instructions a lane, also for a constant `m`). Where `|x| ≤ 2^29` (`small_x`, no left
        // shift), `(2x·m + 2^31) >> 32` is the same high half and never saturates: per lane, the
        // DSP extension's `smmulr` of `x << 1` and `m` (inline assembly: LLVM forms it only for
        // two sign-extended registers, not for a constant).
        let doubled = self.target.arch == crate::target::Arch::Arm
            && self.target.has_arm_dsp()
            && !self.target.has_helium()
            && small_x
            && facts.shift_nonpositive;
        let scalar_high = |a: VectorValue<'ctx>, m: VectorValue<'ctx>| {
            let smmulr = self.ctx.create_inline_asm(
                i32t.fn_type(&[i32t.into(), i32t.into()], false),
                "smmulr $0, $1, $2".to_string(),
                "=r,r,r".to_string(),
                false,
                false,
                None,
                false,
            );
            let mut out = i32t.vec_type(lanes).get_undef();
            for l in 0..lanes {
                let at = i32t.const_int(l as u64, false);
                let lane = |v: VectorValue<'ctx>| {
                    let e = self.b.build_extract_element(v, at, "").unwrap();
                    e.into_int_value()
                };
                let x = lane(a);
                let twice = self.b.build_int_add(x, x, "").unwrap();
                let h = self
                    .b
                    .build_call(
                        inkwell::values::CallableValue::try_from(smmulr).unwrap(),
                        &[twice.into(), lane(m).into()],
                        "",
                    )
                    .unwrap()
                    .try_as_basic_value()
                    .basic()
                    .expect("smmulr returns its high half")
                    .into_int_value();
                out = self.b.build_insert_element(out, h, at, "").unwrap();
            }
            out
        };
        let k = fixed_point::Lanes {
            c32: &c32,
            c64: &c64,
            t32: i32t.vec_type(lanes),
            t64: i64t.vec_type(lanes),
            high_mul: match intrinsics {
                Some(_) => Some(&high as &dyn Fn(_, _) -> _),
                None if doubled => Some(&scalar_high as &dyn Fn(_, _) -> _),
                None => None,
            },
            round_shift: intrinsics.map(|_| &round_shift as &dyn Fn(_, _) -> _),
        };
        fixed_point::emit_mul_q31(&self.b, &k, (xi, m, s), facts)
    }

    /// x86's `maxps`/`minps` of `lanes` floats (`a > b ? a : b`, `a < b ? a : b`) where the
    /// target has that vector width, else `None`; `true` when it takes a rounding operand.
    fn x86_max_ps(
        &self,
        lanes: u32,
        max: bool,
    ) -> Option<(inkwell::values::FunctionValue<'ctx>, bool)> {
        if self.target.arch != crate::target::Arch::X86_64 {
            return None;
        }
        let op = if max { "max" } else { "min" };
        let (name, rounding) = match lanes {
            16 if self.target.vector_bits >= 512 => (format!("llvm.x86.avx512.{op}.ps.512"), true),
            8 if self.target.vector_bits >= 256 => (format!("llvm.x86.avx.{op}.ps.256"), false),
            4 => (format!("llvm.x86.sse.{op}.ps"), false),
            _ => return None,
        };
        let v = self.ctx.f32_type().vec_type(lanes);
        let f = self.m.get_function(&name).unwrap_or_else(|| {
            let ty = if rounding {
                v.fn_type(&[v.into(), v.into(), self.ctx.i32_type().into()], false)
            } else {
                v.fn_type(&[v.into(), v.into()], false)
            };
            self.m.add_function(&name, ty, None)
        });
        Some((f, rounding))
    }

    /// Applies `epi` to the accumulator vector `x` of tile row `row` (index along the row dim)
    /// whose lane 0 is at index `col` along the column dim; `role` says where each output dim
    /// lies; `v` is the vector (its lanes beyond `v.store` are not real columns).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn apply_epilogue(
        &self,
        epi: &RegEpilogue,
        k: &Kernel<'ctx>,
        x: VectorValue<'ctx>,
        row: IntValue<'ctx>,
        col: IntValue<'ctx>,
        v: &VecCol,
        role: &dyn Fn(usize) -> TilePos<'ctx>,
    ) -> VectorValue<'ctx> {
        self.apply_steps(&epi.steps, k, x, row, col, v, role)
    }

    /// [`Cg::apply_epilogue`] of the chain `steps`.
    #[allow(clippy::too_many_arguments)]
    fn apply_steps(
        &self,
        steps: &[Step],
        k: &Kernel<'ctx>,
        x: VectorValue<'ctx>,
        row: IntValue<'ctx>,
        col: IntValue<'ctx>,
        v: &VecCol,
        role: &dyn Fn(usize) -> TilePos<'ctx>,
    ) -> VectorValue<'ctx> {
        let value = |o: &Operand| -> VectorValue<'ctx> {
            match *o {
                Operand::Full {
                    param,
                    ref strides,
                    steps: ref own,
                } => {
                    // Lane 0's element, then one lane per step along the column dim.
                    let (mut off, mut step) = (self.i64(0), 0);
                    for (d, &st) in strides.iter().enumerate() {
                        let i = match role(d) {
                            TilePos::Row => row,
                            TilePos::Col => {
                                step = st;
                                col
                            }
                            TilePos::At(i) => i,
                        };
                        off = self.add(off, self.mul(i, st));
                    }
                    let r = if step == 1 && v.store == v.lanes {
                        self.vload(k.args[param], off, v.lanes)
                    } else {
                        self.gather_lanes(k.args[param], off, step, v)
                    };
                    self.apply_steps(own, k, r, row, col, v, role)
                }
                Operand::Scalar(p) => {
                    // A compile-time scalar (ReLU6's bounds, a folded scale) is emitted as the
                    // number itself: the same value the load would give, so the same result,
                    // and LLVM can fold the NaN tests of a max/min against it.
                    let s = match self.scalar_consts.borrow().get(p).copied().flatten() {
                        Some(c) => self.f32c(c as f64),
                        None => self
                            .load(k.args[p], self.i64(0), DType::F32)
                            .into_float_value(),
                    };
                    self.splat(s, v.lanes)
                }
                Operand::Along { param, dim } => match role(dim) {
                    TilePos::Row => {
                        let s = self.load(k.args[param], row, DType::F32).into_float_value();
                        self.splat(s, v.lanes)
                    }
                    TilePos::At(i) => {
                        let s = self.load(k.args[param], i, DType::F32).into_float_value();
                        self.splat(s, v.lanes)
                    }
                    TilePos::Col if v.store == v.lanes => self.vload(k.args[param], col, v.lanes),
                    TilePos::Col => self.gather_lanes(k.args[param], col, 1, v),
                },
            }
        };
        // An i32 operand (a multiplier or a shift) as a vector of i32 lanes.
        let value_i32 = |o: &Operand| -> VectorValue<'ctx> {
            let ty = self.ctx.i32_type().vec_type(v.lanes);
            let splat = |e: IntValue<'ctx>| {
                let mut r = ty.get_undef();
                for l in 0..v.lanes {
                    let lane = self.ctx.i32_type().const_int(u64::from(l), false);
                    r = self.b.build_insert_element(r, e, lane, "").unwrap();
                }
                r
            };
            let at = |p: usize, i: IntValue<'ctx>| {
                splat(self.load(k.args[p], i, DType::I32).into_int_value())
            };
            match *o {
                Operand::Scalar(p) => at(p, self.i64(0)),
                Operand::Along { param, dim } => match role(dim) {
                    TilePos::Row => at(param, row),
                    TilePos::At(i) => at(param, i),
                    TilePos::Col if v.store == v.lanes => {
                        self.load_vector(k.args[param], col, ty, 4)
                    }
                    TilePos::Col => {
                        let mut r = ty.const_zero();
                        for l in 0..v.store {
                            let i = self.add(col, self.i64(l as u64));
                            let e = self.load(k.args[param], i, DType::I32).into_int_value();
                            let lane = self.ctx.i32_type().const_int(l as u64, false);
                            r = self.b.build_insert_element(r, e, lane, "").unwrap();
                        }
                        r
                    }
                },
                Operand::Full { .. } => unreachable!("recognize() gives multipliers no Full"),
            }
        };
        // Whether an operand is a compile-time number (not NaN): max/min against it are cheaper.
        let number = |o: &Operand| match *o {
            Operand::Scalar(p) => self
                .scalar_consts
                .borrow()
                .get(p)
                .copied()
                .flatten()
                .is_some_and(|c| !c.is_nan()),
            Operand::Along { .. } | Operand::Full { .. } => false,
        };
        let max_min = |a: VectorValue<'ctx>, b: VectorValue<'ctx>, b_number: bool, max: bool| {
            self.vfmax_with(a, b, max, b_number, false)
        };
        // The value as i32 lanes after a `multiply-q31`, and a bound on its magnitude, while
        // the steps after it are integer additions and clamps by integer constants: exact in
        // i32 and in f32 alike while the bound stays within f32's exact integers, so they run
        // as integer instructions (one `ssat`-like clamp in place of f32 compares).
        let mut int: Option<(VectorValue<'ctx>, f64)> = None;
        let int_const = |o: &Operand| -> Option<f32> {
            let Operand::Scalar(p) = *o else { return None };
            let c = self.scalar_consts.borrow().get(p).copied().flatten()?;
            (c.fract() == 0.0 && c.abs() <= 16_777_216.0 && c.to_bits() != (-0.0f32).to_bits())
                .then_some(c)
        };
        let mut x = x;
        for step in steps {
            if let Some((iv, bound)) = int {
                let lanes = iv.get_type().get_size();
                let ci = |c: f32| {
                    VectorType::const_vector(&vec![
                        self.ctx
                            .i32_type()
                            .const_int(c as i64 as u64, true);
                        lanes as usize
                    ])
                };
                let pick = |p: IntPredicate, a: VectorValue<'ctx>, b: VectorValue<'ctx>| {
                    let c = self.b.build_int_compare(p, a, b, "").unwrap();
                    self.b
                        .build_select(c, a, b, "")
                        .unwrap()
                        .into_vector_value()
                };
                let next = match step {
                    Step::Binary {
                        op: op @ (BinaryOp::Add | BinaryOp::Subtract),
                        other,
                        value_first,
                    } => int_const(other)
                        .filter(|c| bound + f64::from(c.abs()) <= F32_EXACT)
                        .map(|c| {
                            let v = match (op, value_first) {
                                (BinaryOp::Add, _) => self.b.build_int_add(iv, ci(c), ""),
                                (_, true) => self.b.build_int_sub(iv, ci(c), ""),
                                (_, false) => self.b.build_int_sub(ci(c), iv, ""),
                            };
                            (v.unwrap(), bound + f64::from(c.abs()))
                        }),
                    Step::Binary {
                        op: op @ (BinaryOp::Maximum | BinaryOp::Minimum),
                        other,
                        ..
                    } => int_const(other).map(|c| {
                        let p = if *op == BinaryOp::Maximum {
                            IntPredicate::SGT
                        } else {
                            IntPredicate::SLT
                        };
                        (pick(p, iv, ci(c)), bound.max(f64::from(c.abs())))
                    }),
                    Step::Clamp { lo, hi, .. } => int_const(lo).zip(int_const(hi)).map(|(l, h)| {
                        let v = pick(IntPredicate::SGT, iv, ci(l));
                        let v = pick(IntPredicate::SLT, v, ci(h));
                        (v, f64::from(l.abs().max(h.abs())))
                    }),
                    _ => None,
                };
                if let Some(n) = next {
                    int = Some(n);
                    continue;
                }
                x = self.exact_f32(iv);
                int = None;
            }
            x = match step {
                Step::Binary {
                    op,
                    other,
                    value_first,
                } => {
                    let o = value(other);
                    let (a, b) = if *value_first { (x, o) } else { (o, x) };
                    match op {
                        BinaryOp::Add => self.b.build_float_add(a, b, "").unwrap(),
                        BinaryOp::Subtract => self.b.build_float_sub(a, b, "").unwrap(),
                        BinaryOp::Multiply => self.b.build_float_mul(a, b, "").unwrap(),
                        BinaryOp::Divide => self.b.build_float_div(a, b, "").unwrap(),
                        BinaryOp::Maximum => max_min(a, b, *value_first && number(other), true),
                        BinaryOp::Minimum => max_min(a, b, *value_first && number(other), false),
                        _ => unreachable!("recognize() admits no other op"),
                    }
                }
                Step::Clamp { lo, hi, x: of } => {
                    // The lower bound's result is NaN-free only where the bound is a number too.
                    let nan_free = self.nan_free(None, *of);
                    let (lo_num, hi_num) = (number(lo), number(hi));
                    let l = self.vfmax_with(x, value(lo), true, lo_num, nan_free);
                    self.vfmax_with(l, value(hi), false, hi_num, nan_free && lo_num)
                }
                Step::RoundBf16 => self.vround_bf16(x),
                Step::RoundF16 => self.vround_f16(x),
                Step::IntRoundTrip { x: of } if self.fits_s32(None, *of) => {
                    let nan = self
                        .b
                        .build_float_compare(FloatPredicate::UNO, x, x, "")
                        .unwrap();
                    self.b
                        .build_select(nan, x.get_type().const_zero(), x, "")
                        .unwrap()
                        .into_vector_value()
                }
                Step::IntRoundTrip { .. } => self.vint_round_trip(x),
                Step::MulQ31 {
                    m,
                    s,
                    x: of,
                    at,
                    m_at,
                    s_at,
                } => {
                    let q = self.vmul_q31(x, (*of, *m_at, *s_at), (value_i32(m), value_i32(s)));
                    match self.fused_range(*at).map(|r| r.magnitude()) {
                        Some(b) if b <= F32_EXACT => {
                            int = Some((q, b));
                            x
                        }
                        _ => self
                            .b
                            .build_signed_int_to_float(q, self.vec_ty(v.lanes), "")
                            .unwrap(),
                    }
                }
            };
        }
        if let Some((iv, _)) = int {
            x = self.exact_f32(iv);
        }
        x
    }

    /// `iv` converted to f32 where its values are within f32's exact integers (the integer
    /// steps' bound), recorded so that converting it back takes `iv` ([`Cg::exact_int_of`]).
    fn exact_f32(&self, iv: VectorValue<'ctx>) -> VectorValue<'ctx> {
        let lanes = iv.get_type().get_size();
        let x = self
            .b
            .build_signed_int_to_float(iv, self.vec_ty(lanes), "")
            .unwrap();
        self.be
            .exact_casts
            .borrow_mut()
            .insert(x.as_value_ref() as usize);
        x
    }

    /// The i32 lanes an exact conversion ([`Cg::exact_f32`]) made `x` from.
    pub(super) fn exact_int_of(&self, x: VectorValue<'ctx>) -> Option<VectorValue<'ctx>> {
        if !self
            .be
            .exact_casts
            .borrow()
            .contains(&(x.as_value_ref() as usize))
        {
            return None;
        }
        self.int_source(x)
    }

    /// The i32 vector `x` converts, where `x` is a signed int → f32 conversion of one.
    fn int_source(&self, x: VectorValue<'ctx>) -> Option<VectorValue<'ctx>> {
        let inst = x.as_instruction()?;
        if inst.get_opcode() != inkwell::values::InstructionOpcode::SIToFP {
            return None;
        }
        let inkwell::values::Operand::Value(src) = inst.get_operand(0)? else {
            return None;
        };
        let src = src.into_vector_value();
        (src.get_type().get_element_type() == self.ctx.i32_type().into()).then_some(src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parse_module;

    fn fused(text: &str) -> Option<RegEpilogue> {
        let m = parse_module(text).unwrap();
        let Op::Fusion { computation, .. } = &m.entry.instructions.last().unwrap().op else {
            panic!("the last instruction is the fusion")
        };
        let heavy = computation
            .ids()
            .find(|&i| matches!(computation.inst(i).op, Op::Dot(_) | Op::Convolution { .. }))
            .unwrap();
        recognize(computation, heavy)
    }

    const HEAD: &str = "HloModule m\n\n%fused.y {\n  %p0 = f32[2,3]{1,0} parameter(0)\n  %p1 = f32[3,4]{1,0} parameter(1)\n  %p2 = f32[4]{0} parameter(2)\n  %p3 = f32[] parameter(3)\n  %d = f32[2,4]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n";
    const TAIL: &str = "}\n\nENTRY %main {\n  %x = f32[2,3]{1,0} parameter(0)\n  %w = f32[3,4]{1,0} constant({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})\n  %b = f32[4]{0} constant({1, 2, 3, 4})\n  %z = f32[] constant(0)\n  %y = f32[2,4]{1,0} fusion(%x, %w, %b, %z), kind=output, calls=%fused.y\n  ROOT %outputs = (f32[2,4]{1,0}) tuple(%y), names={y}\n}\n";

    #[test]
    fn bias_then_relu_is_a_register_epilogue() {
        let body = "  %bb = f32[2,4]{1,0} broadcast(%p2), dimensions={1}\n  %a = f32[2,4]{1,0} add(%d, %bb)\n  %zb = f32[2,4]{1,0} broadcast(%p3), dimensions={}\n  %r = f32[2,4]{1,0} maximum(%zb, %a)\n  ROOT %outputs = (f32[2,4]{1,0}) tuple(%r), names={r}\n";
        let e = fused(&format!("{HEAD}{body}{TAIL}")).unwrap();
        assert_eq!(
            e.steps,
            vec![
                Step::Binary {
                    op: BinaryOp::Add,
                    other: Operand::Along { param: 2, dim: 1 },
                    value_first: true
                },
                Step::Binary {
                    op: BinaryOp::Maximum,
                    other: Operand::Scalar(3),
                    value_first: false
                },
            ]
        );
    }

    #[test]
    fn a_residual_of_the_output_shape_is_read_in_registers() {
        // relu(d + x) with x a [2, 4] parameter: a Full operand with x's strides.
        let head = HEAD.replace(
            "%p3 = f32[] parameter(3)",
            "%p3 = f32[2,4]{0,1} parameter(3)",
        );
        let tail = TAIL.replace("%z = f32[] constant(0)", "%z = f32[2,4]{0,1} parameter(1)");
        let body = "  %a = f32[2,4]{1,0} add(%p3, %d)\n  ROOT %outputs = (f32[2,4]{1,0}) tuple(%a), names={a}\n";
        let e = fused(&format!("{head}{body}{tail}")).unwrap();
        assert_eq!(
            e.steps,
            vec![Step::Binary {
                op: BinaryOp::Add,
                other: Operand::Full {
                    param: 3,
                    strides: vec![1, 2],
                    steps: Vec::new(),
                },
                value_first: false
            }]
        );
    }

    #[test]
    fn a_column_vector_shaped_with_ones_is_a_per_column_operand() {
        // The scale of an old BatchNormalization export: [4, 1] broadcast along dims {1, 0}
        // (4 along the output's columns); a [1, 1] one is a scalar.
        let head = HEAD
            .replace(
                "%p2 = f32[4]{0} parameter(2)",
                "%p2 = f32[4,1]{1,0} parameter(2)",
            )
            .replace(
                "%p3 = f32[] parameter(3)",
                "%p3 = f32[1,1]{1,0} parameter(3)",
            );
        let tail = TAIL
            .replace("%b = f32[4]{0} constant", "%b = f32[4,1]{1,0} constant")
            .replace("%z = f32[] constant(0)", "%z = f32[1,1]{1,0} constant({0})");
        let body = "  %bb = f32[2,4]{1,0} broadcast(%p2), dimensions={1,0}\n  %a = f32[2,4]{1,0} multiply(%d, %bb)\n  %zb = f32[2,4]{1,0} broadcast(%p3), dimensions={0,1}\n  %r = f32[2,4]{1,0} add(%a, %zb)\n  ROOT %outputs = (f32[2,4]{1,0}) tuple(%r), names={r}\n";
        let e = fused(&format!("{head}{body}{tail}")).unwrap();
        assert_eq!(
            e.steps,
            vec![
                Step::Binary {
                    op: BinaryOp::Multiply,
                    other: Operand::Along { param: 2, dim: 1 },
                    value_first: true
                },
                Step::Binary {
                    op: BinaryOp::Add,
                    other: Operand::Scalar(3),
                    value_first: true
                },
            ]
        );
    }

    #[test]
    fn a_requantization_and_a_dequantized_residual_are_register_steps() {
        // ((d / s) → s32 → f32) + x·s with x a [2, 4] parameter: the quantize-dequantize pair is
        // one step, the residual carries its own multiply.
        let head = HEAD.replace(
            "%p2 = f32[4]{0} parameter(2)",
            "%p2 = f32[2,4]{1,0} parameter(2)",
        );
        let tail = TAIL.replace(
            "%b = f32[4]{0} constant({1, 2, 3, 4})",
            "%b = f32[2,4]{1,0} parameter(1)",
        );
        let body = "  %sb = f32[2,4]{1,0} broadcast(%p3), dimensions={}\n  %q = f32[2,4]{1,0} divide(%d, %sb)\n  %i = i32[2,4]{1,0} convert(%q)\n  %f = f32[2,4]{1,0} convert(%i)\n  %r = f32[2,4]{1,0} multiply(%p2, %sb)\n  %a = f32[2,4]{1,0} add(%f, %r)\n  ROOT %outputs = (f32[2,4]{1,0}) tuple(%a), names={a}\n";
        let e = fused(&format!("{head}{body}{tail}")).unwrap();
        assert_eq!(
            e.steps,
            vec![
                Step::Binary {
                    op: BinaryOp::Divide,
                    other: Operand::Scalar(3),
                    value_first: true
                },
                Step::IntRoundTrip { x: InstId(6) },
                Step::Binary {
                    op: BinaryOp::Add,
                    other: Operand::Full {
                        param: 2,
                        strides: vec![4, 1],
                        steps: vec![Step::Binary {
                            op: BinaryOp::Multiply,
                            other: Operand::Scalar(3),
                            value_first: true
                        }]
                    },
                    value_first: true
                },
            ]
        );
        assert_eq!(e.step_count(), 4);
    }

    #[test]
    fn a_chain_longer_than_the_registers_hold_is_swept() {
        let mut body = String::from(
            "  %sb = f32[2,4]{1,0} broadcast(%p3), dimensions={}\n  %v0 = f32[2,4]{1,0} add(%d, %sb)\n",
        );
        for k in 1..=MAX_REGISTER_STEPS {
            body += &format!("  %v{k} = f32[2,4]{{1,0}} add(%v{}, %sb)\n", k - 1);
        }
        body += &format!(
            "  ROOT %outputs = (f32[2,4]{{1,0}}) tuple(%v{MAX_REGISTER_STEPS}), names={{v}}\n"
        );
        assert_eq!(fused(&format!("{HEAD}{body}{TAIL}")), None);
    }

    #[test]
    fn a_value_used_twice_is_not() {
        // x · relu-ish(x): the dot's value feeds two ops.
        let body = "  %m = f32[2,4]{1,0} multiply(%d, %d)\n  ROOT %outputs = (f32[2,4]{1,0}) tuple(%m), names={m}\n";
        assert_eq!(fused(&format!("{HEAD}{body}{TAIL}")), None);
    }
}
