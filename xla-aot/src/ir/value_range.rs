//! Value ranges: for every entry instruction, an interval holding each of its elements, and
//! whether they are all integers. The integer kernels (`cpu/gemm_i8.rs`) ask it whether a
//! product's f32 data operand holds only integers of one 8-bit range: the shifted activations
//! `convert(q) − zero_point` of a quantized model, which they then multiply as bytes.
//!
//! Contract: [`ranges`] is sound for the values the compiled code computes. `nan` is false only
//! where no element can be NaN: f32 parameters may be NaN, and NaN spreads through arithmetic,
//! `maximum`/`minimum` and `clamp`; only a conversion to an integer type (NaN gives 0) and
//! arithmetic on finite ranges that cannot overflow make values NaN-free again. An interval with
//! `integer` set holds integers only, exactly representable in its element type, and no NaN.
//! f32 arithmetic is bounded outward by one rounding step ([`widen`]), and a NaN-free f32 result
//! whose every value is at least 2^23 in magnitude is an integer (f32's spacing there is 1 or
//! more): the rounding trick of `front/onnx/quant.rs`, `(c + 1.5·2^23) − 1.5·2^23`, is recognised
//! as giving integers that way. A dot or convolution of NaN-free finite operands is bounded by
//! `K · max|x| · max|w|` (so a quantized model's requantization chains are NaN-free).
//! Ops the analysis does not follow give [`Range::ANY`] (every f32 or i32, NaN included).
//! It never looks at run-time data: entry parameters are bounded by their C API type only (a
//! uint8 input is [0, 255]).

use crate::ir::{
    BinaryOp, Computation, DType, InstId, Instruction, Module as Hlo, Op, ReduceKind, UnaryOp,
};

/// Largest bound a dot or convolution result may have for the analysis to call it finite: far
/// below f32's largest value (3.4e38), so no partial sum in any summation order (Winograd's
/// transforms scale by at most a few dozen) overflows.
const MAX_PRODUCT_BOUND: f64 = 1e30;

/// Below this magnitude every integer is an exact f32 (2^24); sums and products of such integers
/// are exact while they stay below it.
pub const F32_EXACT_INT: f64 = 16_777_216.0;

/// 1.5·2^23: `(c + 1.5·2^23) − 1.5·2^23` rounds any `|c| < 2^22` half to even in two f32 adds
/// (the sum lies in [2^23, 2^24), where f32 values are spaced 1): the rounding every
/// quantization lowers to (`front/onnx/quant.rs`, `front/spec/lower/quant.rs`, `quant/fake.rs`),
/// which `passes/exact_integers.rs` and `codegen/cpu/byte_store.rs` recognise.
pub const ROUND_SHIFT: f32 = 12_582_912.0;

/// From this magnitude on every f32 is an integer (2^23: the spacing of [2^23, 2^24) is 1).
const F32_ALL_INT: f64 = 8_388_608.0;

/// Constants with more elements than this are not scanned (weights; ranges are wanted for the
/// scalars and per-channel vectors of quantization arithmetic): their range is the type's.
const MAX_SCANNED: usize = 1 << 16;

/// Where the elements of a value lie.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// Every element is at least this (`-inf`: unbounded).
    pub lo: f64,
    /// Every element is at most this (`+inf`: unbounded).
    pub hi: f64,
    /// Every element is an integer (and none is NaN).
    pub integer: bool,
    /// Some element may be NaN.
    pub nan: bool,
}

impl Range {
    /// Nothing known: any value, NaN included.
    pub const ANY: Range = Range {
        lo: f64::NEG_INFINITY,
        hi: f64::INFINITY,
        integer: false,
        nan: true,
    };

    fn int(lo: f64, hi: f64) -> Range {
        Range {
            lo,
            hi,
            integer: true,
            nan: false,
        }
    }

    /// NaN-free and bounded by finite values.
    fn finite(&self) -> bool {
        !self.nan && self.lo.is_finite() && self.hi.is_finite()
    }

    /// The largest magnitude.
    pub fn magnitude(&self) -> f64 {
        self.lo.abs().max(self.hi.abs())
    }

    /// The range of a C API (or IR) element type.
    fn of_dtype(d: DType) -> Range {
        match d {
            DType::Pred => Range::int(0.0, 1.0),
            DType::I8 => Range::int(-128.0, 127.0),
            DType::U8 => Range::int(0.0, 255.0),
            DType::I16 => Range::int(-32768.0, 32767.0),
            DType::U16 => Range::int(0.0, 65535.0),
            DType::I32 | DType::I64 | DType::U32 | DType::U64 => {
                Range::int(i32::MIN as f64, i32::MAX as f64)
            }
            DType::F16 | DType::BF16 | DType::F32 => Range::ANY,
        }
    }

    fn union(self, o: Range) -> Range {
        Range {
            lo: self.lo.min(o.lo),
            hi: self.hi.max(o.hi),
            integer: self.integer && o.integer,
            nan: self.nan || o.nan,
        }
    }

    /// Whether every element is an integer that an s32 holds (so `convert(convert(x, s32), f32)`
    /// gives `x` back); a NaN the analysis did not follow (the rounding trick's `integer` claim
    /// does not follow NaN through a `clamp`) still converts to 0, so users keep that test.
    pub fn fits_s32(&self) -> bool {
        self.integer && self.lo > i32::MIN as f64 && self.hi < i32::MAX as f64
    }

    /// The 8-bit offset of an integer range that fits one byte: `o` such that every `x + o` is in
    /// [0, 255] (`Some(-lo)`), the bias the integer kernels add to make activations `u8`.
    pub fn u8_offset(&self) -> Option<i32> {
        (self.integer && self.lo.is_finite() && self.hi.is_finite() && self.hi - self.lo <= 255.0)
            .then_some(-self.lo as i32)
    }

    /// The byte type holding every value of an integer, NaN-free range exactly, if one does:
    /// `U8` for ranges within [0, 255], else `I8` for ranges within [−128, 127] (a quantized
    /// activation stored one byte per element, `codegen/cpu/byte_storage.rs`).
    pub fn byte_type(&self) -> Option<DType> {
        if !self.integer || self.nan {
            return None;
        }
        if self.lo >= 0.0 && self.hi <= 255.0 {
            Some(DType::U8)
        } else if self.lo >= -128.0 && self.hi <= 127.0 {
            Some(DType::I8)
        } else {
            None
        }
    }

    /// How an integer, NaN-free range is held one byte per element: `(d, bias)` with every value
    /// `x` stored as the byte `x + bias` of type `d` exactly. A range that [`Range::byte_type`]
    /// holds takes its type and bias 0; any other range at most 255 wide takes `U8` and the bias
    /// [`Range::u8_offset`] (a quantized activation centred by a zero point other than the byte
    /// types' own, str_ww's `x − z`: `codegen/cpu/byte_storage.rs`).
    pub fn biased_byte(&self) -> Option<(DType, i32)> {
        if self.nan {
            return None;
        }
        match self.byte_type() {
            Some(d) => Some((d, 0)),
            None => self.u8_offset().map(|o| (DType::U8, o)),
        }
    }
}

/// A result computed in f32 lying in `[lo, hi]` before rounding (`nan`: or NaN): integer when
/// `integer` and exact, else bounded outward by one rounding step; integer anyway where every
/// value is at least 2^23 in magnitude and none is NaN. Bounds beyond f32's largest value are
/// infinite (the value may overflow).
fn widen(lo: f64, hi: f64, integer: bool, nan: bool, dtype: DType) -> Range {
    if lo.is_nan() || hi.is_nan() {
        return Range::ANY;
    }
    let big = f64::from(f32::MAX);
    let lo = if lo < -big { f64::NEG_INFINITY } else { lo };
    let hi = if hi > big { f64::INFINITY } else { hi };
    if nan && dtype == DType::F32 {
        return Range {
            lo,
            hi,
            integer: false,
            nan: true,
        };
    }
    if dtype != DType::F32 {
        // i32 arithmetic: exact within the type (wrapping is not followed: give up).
        let full = Range::of_dtype(DType::I32);
        return if integer && lo >= full.lo && hi <= full.hi {
            Range::int(lo, hi)
        } else {
            Range::ANY
        };
    }
    if integer && lo.abs() <= F32_EXACT_INT && hi.abs() <= F32_EXACT_INT {
        return Range::int(lo, hi);
    }
    if (lo >= F32_ALL_INT && hi < F32_EXACT_INT) || (hi <= -F32_ALL_INT && lo > -F32_EXACT_INT) {
        // Spacing 1: every result is the exact value rounded to a neighbouring integer.
        return Range::int(lo.floor(), hi.ceil());
    }
    let ulp = |x: f64| x.abs() * f64::from(f32::EPSILON);
    let (lo, hi) = (lo - ulp(lo), hi + ulp(hi));
    let all_int = lo >= F32_ALL_INT || hi <= -F32_ALL_INT;
    Range {
        lo: if all_int { lo.floor() } else { lo },
        hi: if all_int { hi.ceil() } else { hi },
        integer: all_int && lo.is_finite() && hi.is_finite(),
        nan: false,
    }
}

/// The range of every entry instruction of `hlo`.
pub fn ranges(hlo: &Hlo) -> Vec<Range> {
    let params: Vec<Range> = (0..hlo.entry.parameters().len())
        .map(|k| Range::of_dtype(hlo.input_dtype(k)))
        .collect();
    computation(&hlo.entry, &params)
}

/// The ranges of `c`'s instructions, with parameter `i` in `params[i]` (a fused computation's:
/// the ranges of the fusion's operands).
pub fn computation(c: &Computation, params: &[Range]) -> Vec<Range> {
    let mut out: Vec<Range> = Vec::with_capacity(c.instructions.len());
    for inst in &c.instructions {
        let of = |o: InstId| out[o.index()];
        let dims = |o: InstId| c.inst(o).shape.dims.clone();
        let r = instruction(inst, &of, &dims, params);
        out.push(r);
    }
    out
}

fn instruction(
    inst: &Instruction,
    of: &dyn Fn(InstId) -> Range,
    dims: &dyn Fn(InstId) -> Vec<usize>,
    params: &[Range],
) -> Range {
    let dt = inst.shape.dtype;
    let ops: Vec<Range> = inst.operands.iter().map(|&o| of(o)).collect();
    let r = match &inst.op {
        Op::Parameter { index } => params.get(*index).copied().unwrap_or(Range::ANY),
        Op::Constant(lit) => constant(lit),
        Op::Unary(UnaryOp::Negate) => widen(-ops[0].hi, -ops[0].lo, ops[0].integer, ops[0].nan, dt),
        Op::Unary(UnaryOp::Abs) => {
            let a = ops[0];
            let lo = if a.lo <= 0.0 && a.hi >= 0.0 {
                0.0
            } else {
                a.lo.abs().min(a.hi.abs())
            };
            widen(lo, a.magnitude(), a.integer, a.nan, dt)
        }
        Op::Dot(_) | Op::Convolution { .. } => {
            // |Σ x·w| ≤ K · max|x| · max|w|, K the terms of each sum: a kernel `[O, C/G,
            // window...]`'s elements per output channel, a dot's contracted elements.
            let (x, w) = (ops[0], ops[1]);
            let wd = dims(inst.operands[1]);
            let k: usize = match &inst.op {
                Op::Dot(d) => d.rhs_contracting.iter().map(|&i| wd[i]).product(),
                _ => wd.iter().skip(1).product(),
            };
            let bound = k as f64 * x.magnitude() * w.magnitude();
            if x.finite() && w.finite() && bound <= MAX_PRODUCT_BOUND {
                widen(-bound, bound, false, false, dt)
            } else {
                Range::ANY
            }
        }
        Op::Binary(op) => binary(*op, ops[0], ops[1], dt),
        Op::Convert { to } => convert(ops[0], *to),
        Op::Compare(_) => Range::int(0.0, 1.0),
        Op::MulQ31 => mul_q31(ops[0], ops[1], ops[2], dt),
        Op::Select => ops[1].union(ops[2]),
        Op::Clamp => {
            // NaN passes through (`core/elemental.rs`).
            let (l, x, h) = (ops[0], ops[1], ops[2]);
            Range {
                lo: x.lo.max(l.lo).min(h.lo),
                hi: x.hi.max(l.hi).min(h.hi),
                integer: l.integer && x.integer && h.integer,
                nan: l.nan || x.nan || h.nan,
            }
        }
        // One rounding instead of two: the bounds of the product and the sum hold for it too.
        Op::Fma => binary(
            BinaryOp::Add,
            binary(BinaryOp::Multiply, ops[0], ops[1], dt),
            ops[2],
            dt,
        ),
        Op::Broadcast { .. } | Op::Reshape | Op::Transpose { .. } | Op::Slice { .. } => ops[0],
        Op::Pad { .. } => ops[0].union(ops[1]),
        Op::Concatenate { .. } => ops
            .iter()
            .copied()
            .reduce(Range::union)
            .unwrap_or(Range::ANY),
        Op::Reduce {
            kind: ReduceKind::Max | ReduceKind::Min,
            ..
        } => ops[0],
        Op::ReduceWindow {
            kind: ReduceKind::Max | ReduceKind::Min,
            window,
        } => {
            // Padded cells hold the identity (±inf): only a window with a real element keeps
            // the operand's range, which holds when padding is shorter than the window.
            let dense = (0..window.size.len())
                .all(|d| window.pad_low[d] < window.size[d] && window.pad_high[d] < window.size[d]);
            if dense { ops[0] } else { Range::ANY }
        }
        Op::Gather => ops[0],
        Op::Argmax { .. } => Range::int(0.0, i32::MAX as f64),
        Op::Fusion { computation: c, .. } => {
            let inner = computation(c, &ops);
            c.outputs
                .first()
                .map_or(Range::ANY, |o| inner[o.value.index()])
        }
        _ => Range::ANY,
    };
    // An i32 or pred value is an integer of its type whatever the analysis followed.
    if dt != DType::F32 && !r.integer {
        return Range::of_dtype(dt);
    }
    r
}

fn constant(lit: &crate::ir::Literal) -> Range {
    if lit.element_count() > MAX_SCANNED {
        // A weight: only its magnitude and whether it is finite (one pass over its bytes).
        return match (lit.dtype, lit.bytes()) {
            (DType::F32, Some(b)) => {
                let m = b
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]).abs())
                    .fold(0.0f32, |m, v| if v > m || v.is_nan() { v } else { m });
                if m.is_finite() {
                    Range {
                        lo: -f64::from(m),
                        hi: f64::from(m),
                        integer: false,
                        nan: false,
                    }
                } else {
                    Range::ANY
                }
            }
            (d, _) => Range::of_dtype(d),
        };
    }
    let values: Vec<f64> = match lit.dtype {
        DType::F32 => match lit.to_f32_vec() {
            Some(v) => v.into_iter().map(f64::from).collect(),
            None => return Range::ANY,
        },
        DType::I32 => match lit.to_i32_vec() {
            Some(v) => v.into_iter().map(f64::from).collect(),
            None => return Range::of_dtype(DType::I32),
        },
        d => return Range::of_dtype(d),
    };
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return Range::ANY;
    }
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Range {
        lo,
        hi,
        integer: values.iter().all(|v| v.fract() == 0.0),
        nan: false,
    }
}

fn binary(op: BinaryOp, a: Range, b: Range, dt: DType) -> Range {
    let both = a.integer && b.integer;
    // inf − inf, 0 · inf: NaN unless both operands are finite.
    let nan = !(a.finite() && b.finite());
    let quotients = |a: Range, b: Range| [a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi];
    let products = |a: Range, b: Range| [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi];
    let spread = |p: [f64; 4], integer: bool| {
        if p.iter().any(|v| v.is_nan()) {
            return Range::ANY;
        }
        let lo = p.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = p.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        widen(lo, hi, integer, nan, dt)
    };
    match op {
        BinaryOp::Add => widen(a.lo + b.lo, a.hi + b.hi, both, nan, dt),
        BinaryOp::Subtract => widen(a.lo - b.hi, a.hi - b.lo, both, nan, dt),
        BinaryOp::Multiply => spread(products(a, b), both),
        // f32 only: a quotient by a divisor that excludes 0 (an integer quotient is not followed).
        BinaryOp::Divide if dt == DType::F32 && (b.lo > 0.0 || b.hi < 0.0) => {
            spread(quotients(a, b), false)
        }
        BinaryOp::Maximum => Range {
            lo: a.lo.max(b.lo),
            hi: a.hi.max(b.hi),
            integer: both,
            nan: a.nan || b.nan,
        },
        BinaryOp::Minimum => Range {
            lo: a.lo.min(b.lo),
            hi: a.hi.min(b.hi),
            integer: both,
            nan: a.nan || b.nan,
        },
        BinaryOp::Divide | BinaryOp::Power => Range::ANY,
    }
}

/// `convert` to `to`: f32 → i32 rounds toward zero and saturates (NaN gives 0).
/// `multiply-q31(x, m, s)` (`ir/fixed_point.rs`): `x` (converted to s32) times `m·2^(s − 31)`,
/// rounded twice, each rounding moving the result by at most one. An integer result; an f32
/// result is an exact integer only below 2^24. A left shift that may wrap gives the type's range.
fn mul_q31(x: Range, m: Range, s: Range, dt: DType) -> Range {
    let xi = convert(x, DType::I32);
    let i32_range = Range::of_dtype(DType::I32);
    let s_hi = s.hi.clamp(-31.0, 31.0);
    let wraps = xi.magnitude() * 2f64.powf(s_hi.max(0.0)) >= 2f64.powi(31);
    let bound = (xi.magnitude() * m.magnitude() * 2f64.powf(s_hi - 31.0)).floor() + 2.0;
    if wraps || !bound.is_finite() || bound > i32_range.hi {
        return match dt {
            DType::F32 => Range {
                lo: i32_range.lo,
                hi: i32_range.hi,
                integer: false,
                nan: false,
            },
            _ => i32_range,
        };
    }
    if dt == DType::F32 && bound > F32_EXACT_INT {
        return Range {
            lo: -bound,
            hi: bound,
            integer: false,
            nan: false,
        };
    }
    Range::int(-bound, bound)
}

fn convert(x: Range, to: DType) -> Range {
    match to {
        DType::F32 => widen(x.lo, x.hi, x.integer, x.nan, DType::F32),
        DType::Pred => Range::int(0.0, 1.0),
        _ => {
            let full = Range::of_dtype(to);
            if x.lo.is_nan() || x.hi.is_nan() {
                return full;
            }
            // NaN converts to 0: an f32 range that may hold NaN includes 0.
            let (lo, hi) = if x.integer && !x.nan {
                (x.lo, x.hi)
            } else {
                (x.lo.trunc().min(0.0), x.hi.trunc().max(0.0))
            };
            Range::int(lo.max(full.lo), hi.min(full.hi))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::parse_module;

    fn of(text: &str) -> Vec<Range> {
        ranges(&parse_module(text).expect("parses"))
    }

    #[test]
    fn quantize_then_dequantize_is_an_integer_byte_range() {
        // `front/onnx/quant.rs`: saturate(round(t) + z) with z = 128, as i32, then the next
        // product's dequantization `convert(q) − z`.
        let r = of("HloModule m

ENTRY %main {
  %t = f32[4]{0} parameter(0)
  %lo = f32[] constant(-128)
  %hi = f32[] constant(127)
  %c = f32[4]{0} clamp(%lo, %t, %hi)
  %k = f32[] constant(12582912)
  %kb = f32[4]{0} broadcast(%k), dimensions={}
  %up = f32[4]{0} add(%c, %kb)
  %r = f32[4]{0} subtract(%up, %kb)
  %z = f32[] constant(128)
  %zb = f32[4]{0} broadcast(%z), dimensions={}
  %q = f32[4]{0} add(%r, %zb)
  %qi = i32[4]{0} convert(%q)
  %qf = f32[4]{0} convert(%qi)
  %a = f32[4]{0} subtract(%qf, %zb)
  ROOT %outputs = (f32[4]{0}) tuple(%a), names={a}
}
");
        // The input may be NaN, which passes the clamp and the rounding: not integers until the
        // s32 conversion (NaN → 0).
        assert_eq!(
            r[3],
            Range {
                lo: -128.0,
                hi: 127.0,
                integer: false,
                nan: true
            }
        );
        assert!(r[6].nan && !r[6].integer && !r[7].integer && !r[10].integer);
        assert_eq!(r[11], Range::int(0.0, 255.0));
        assert_eq!(r[13], Range::int(-128.0, 127.0));
        assert_eq!(r[13].u8_offset(), Some(128));
        assert_eq!(r[13].byte_type(), Some(DType::I8));
        assert_eq!(r[11].byte_type(), Some(DType::U8));
        assert_eq!(r[3].byte_type(), None, "may be NaN");
        assert_eq!(
            Range::int(-1.0, 200.0).byte_type(),
            None,
            "one byte's span, no byte type"
        );
    }

    #[test]
    fn a_requantized_product_of_integers_is_nan_free_and_integer() {
        // conv(q, w) of NaN-free integers is bounded; its requantization (scale, saturate,
        // round) then holds integers an s32 holds, so its s32 round trip is exact.
        let r = of("HloModule m

ENTRY %main {
  %x = f32[1,2,3,3]{3,2,1,0} parameter(0)
  %xi = i32[1,2,3,3]{3,2,1,0} convert(%x)
  %q = f32[1,2,3,3]{3,2,1,0} convert(%xi)
  %w = f32[4,2,1,1]{3,2,1,0} constant({1, -2, 3, 0.5, 2, 1, -1, 4})
  %c = f32[1,4,3,3]{3,2,1,0} convolution(%q, %w), window={size=1x1}, dim_labels=bf01_oi01->bf01
  %s = f32[] constant(0.25)
  %sb = f32[1,4,3,3]{3,2,1,0} broadcast(%s), dimensions={}
  %d = f32[1,4,3,3]{3,2,1,0} divide(%c, %sb)
  %lo = f32[] constant(-128)
  %lob = f32[1,4,3,3]{3,2,1,0} broadcast(%lo), dimensions={}
  %hi = f32[] constant(127)
  %hib = f32[1,4,3,3]{3,2,1,0} broadcast(%hi), dimensions={}
  %cl = f32[1,4,3,3]{3,2,1,0} clamp(%lob, %d, %hib)
  %k = f32[] constant(12582912)
  %kb = f32[1,4,3,3]{3,2,1,0} broadcast(%k), dimensions={}
  %up = f32[1,4,3,3]{3,2,1,0} add(%cl, %kb)
  %rd = f32[1,4,3,3]{3,2,1,0} subtract(%up, %kb)
  ROOT %outputs = (f32[1,4,3,3]{3,2,1,0}) tuple(%rd), names={rd}
}
");
        assert!(
            !r[4].nan && r[4].lo.is_finite() && !r[4].integer,
            "{:?}",
            r[4]
        );
        assert!(!r[7].nan, "{:?}", r[7]);
        assert_eq!(r[16], Range::int(-128.0, 127.0));
        assert!(r[16].fits_s32());
        // The same chain over a parameter that may be NaN is not.
        assert!(r[1].integer && !of("HloModule m\n\nENTRY %main {\n  %x = f32[4]{0} parameter(0)\n  %k = f32[] constant(12582912)\n  %kb = f32[4]{0} broadcast(%k), dimensions={}\n  %up = f32[4]{0} add(%x, %kb)\n  ROOT %outputs = (f32[4]{0}) tuple(%up), names={up}\n}\n")[3].integer);
    }

    #[test]
    fn unknown_floats_and_wide_integers_have_no_byte_offset() {
        let r = of("HloModule m

ENTRY %main {
  %x = f32[4]{0} parameter(0)
  %i = i32[4]{0} convert(%x)
  %f = f32[4]{0} convert(%i)
  ROOT %outputs = (f32[4]{0}) tuple(%f), names={f}
}
");
        assert_eq!(r[0], Range::ANY);
        assert!(
            !r[2].integer,
            "2^31 is beyond f32's exact integers: {:?}",
            r[2]
        );
        assert!(r[1].integer && r[1].u8_offset().is_none());
    }
}
