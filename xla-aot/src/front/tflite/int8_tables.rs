//! TFLite's int8 functions of one input integer, and SOFTMAX: RELU, RELU6, RELU_N1_TO_1,
//! RELU_0_TO_1, LEAKY_RELU, LOGISTIC, TANH, HARD_SWISH, RSQRT and ABS as 256-entry tables, and
//! SOFTMAX as a table of exponentials with the row's Q31 reciprocal built from IR integer ops.
//!
//! Contract: each table entry is what TFLite Micro computes for that input integer
//! (`gemmlowp.rs` holds the fixed-point arithmetic, computed here at compile time); at run time
//! the op is one `gather` at `q + 128`. SOFTMAX (`reference_ops::Softmax` of int8, the gemmlowp
//! path) takes its exponentials from a table over the 256 differences from the row's maximum and
//! computes the rest — the row sum of Q12.19 terms, `GetReciprocal` and the final
//! `multiply-q31` — with IR integer ops, for rows of at most [`SOFTMAX_MAX_ROW`] elements (their
//! sum is exact in the f32 reduction).

use super::lower::{Importer, R, Val};
use crate::ir::fixed_point::quantize_multiplier;
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Literal, Op, ReduceKind};
use xla_aot_tflite_schema::tflite::TensorType;

/// The longest int8 SOFTMAX row: its Q12.19 terms (at most 2^19 each) then sum below 2^24,
/// exact in the f32 reduction (MLPerf Tiny's classifiers have rows of 2 to 12).
pub const SOFTMAX_MAX_ROW: usize = 32;

/// The int8 ops computed as tables.
#[derive(Debug, Clone, Copy)]
pub enum UnaryI8 {
    /// RELU (`(0, None)`), RELU_N1_TO_1 (`(−1, Some(1))`), RELU_0_TO_1: requantized and clamped.
    Relu(f32, Option<f32>),
    Relu6,
    Logistic,
    Tanh,
    HardSwish,
    LeakyRelu(f32),
    Rsqrt,
    Abs,
}

/// `RoundingDivideByPOT(e, 12)`: a Q0.31 exponential as a Q12.19 term of the row sum.
fn rounding_divide_by_pot_12(e: i32) -> i32 {
    crate::ir::fixed_point::rounding_divide_by_pot(e, 12)
}

impl Importer<'_, '_> {
    /// An int8 op whose output is a function of its one input integer: the 256-entry table of
    /// `f` over `−128..=127`, gathered at `q + 128`.
    pub fn table_i8(&mut self, f: impl Fn(i32) -> i32) -> R<()> {
        let xt = self.need(0)?;
        let out = self.output_index(0)?;
        if self.tensor(xt).dtype != TensorType::Int8 {
            return Err(self.integer_not_yet());
        }
        let table: Vec<i32> = (-128..=127).map(f).collect();
        let x = self.val(xt)?;
        let t = self
            .b
            .constant(&self.name("table"), Literal::from_i32(vec![256], &table));
        let k = self.splat_i32(128, x.id)?;
        let index = self.binary("index", BinaryOp::Add, x.id, k)?;
        let name = self.name("");
        let y = self
            .b
            .add(&name, Op::Gather, &[t, index])
            .map_err(self.ir())?;
        self.set(
            out,
            Val {
                id: y,
                perm: x.perm,
            },
        );
        Ok(())
    }

    /// int8 RELU, RELU6, RELU_N1_TO_1, LOGISTIC, TANH, HARD_SWISH or LEAKY_RELU (`alpha`) as a
    /// table (`gemmlowp.rs` computes each as TFLite Micro does).
    pub fn unary_i8(&mut self, op: UnaryI8) -> R<()> {
        let xt = self.need(0)?;
        let out = self.output_index(0)?;
        let (s_in, z_in, lo, hi) = self.q_scalar(xt)?;
        match op {
            UnaryI8::Relu(lo_f, hi_f) => {
                // `activations.h` ReluQuantized: requantized to the output, clamped to
                // [max(qmin, Q(lo)), min(qmax, Q(hi))] (RELU: no upper bound).
                let (s_out, z_out, qlo, qhi) = self.q_scalar(out)?;
                let m = quantize_multiplier(f64::from(s_in) / f64::from(s_out));
                let a = qlo.max(Self::quantize_value(lo_f, s_out, z_out));
                let b = hi_f.map_or(qhi, |h| qhi.min(Self::quantize_value(h, s_out, z_out)));
                self.table_i8(|q| {
                    // int32 arithmetic wraps as TFLite Micro's compiled code does.
                    z_out
                        .wrapping_add(crate::ir::fixed_point::multiply_by_quantized_multiplier(
                            q - z_in,
                            m,
                        ))
                        .clamp(a, b)
                })
            }
            UnaryI8::Relu6 => {
                // TFLite Micro's RELU6 clamps in the input's quantization and ignores the
                // output's (`Relu6Prepare`).
                let six = Self::quantize_value(6.0, s_in, z_in).clamp(lo, hi);
                self.table_i8(|q| q.clamp(z_in, six))
            }
            UnaryI8::Logistic | UnaryI8::Tanh => {
                let (m, radius) = super::gemmlowp::logistic_params(s_in);
                let logistic = matches!(op, UnaryI8::Logistic);
                self.table_i8(|q| {
                    if logistic {
                        super::gemmlowp::logistic_i8(q, z_in, m, radius)
                    } else {
                        super::gemmlowp::tanh_i8(q, z_in, m, radius)
                    }
                })
            }
            UnaryI8::HardSwish => {
                let (s_out, z_out, _, _) = self.q_scalar(out)?;
                self.table_i8(|q| super::gemmlowp::hard_swish_i8(q, z_in, s_in, s_out, z_out))
            }
            UnaryI8::Rsqrt | UnaryI8::Abs => {
                let (s_out, z_out, _, _) = self.q_scalar(out)?;
                let rsqrt = matches!(op, UnaryI8::Rsqrt);
                self.table_i8(|q| {
                    if rsqrt {
                        super::gemmlowp::rsqrt_i8(q, z_in, s_in, s_out, z_out)
                    } else {
                        super::gemmlowp::abs_i8(q, z_in, s_in, s_out, z_out)
                    }
                })
            }
            UnaryI8::LeakyRelu(alpha) => {
                let (s_out, z_out, _, _) = self.q_scalar(out)?;
                self.table_i8(|q| {
                    super::gemmlowp::leaky_relu_i8(q, z_in, s_in, alpha, s_out, z_out)
                })
            }
        }
    }

    /// int8 SOFTMAX over the last TFLite dim (`reference_ops::Softmax` of int8, the gemmlowp
    /// path): per element the exponential of `q − max` (a table over the 256 differences), per
    /// row the sum of those rescaled to Q12.19, its reciprocal (`GetReciprocal`, built from IR
    /// integer ops below), then `multiply-q31(e, reciprocal, −exponent) − 128`. The row sum is
    /// added in f32, exact while the row holds at most [`SOFTMAX_MAX_ROW`] elements.
    pub fn softmax_i8(&mut self, beta: f32) -> R<()> {
        let xt = self.need(0)?;
        let out = self.output_index(0)?;
        let (s_in, _, _, _) = self.q_scalar(xt)?;
        let (s_out, z_out, _, _) = self.q_scalar(out)?;
        if z_out != -128 || s_out != 1.0 / 256.0 || self.tensor(out).dtype != TensorType::Int8 {
            return Err(self.err(format!(
                "the output has scale {s_out} and zero point {z_out}; TFLite Micro's int8 SOFTMAX takes 1/256 and −128 only"
            )));
        }
        let x = self.val(xt)?;
        let rank = x.perm.len();
        if rank == 0 {
            return Err(self.err("SOFTMAX of a scalar"));
        }
        let axis = x
            .perm
            .iter()
            .position(|&p| p == rank - 1)
            .unwrap_or(rank - 1);
        let dims = self.b.shape(x.id).dims.clone();
        if dims[axis] > SOFTMAX_MAX_ROW {
            return Err(self.err(format!(
                "an int8 SOFTMAX over {} elements: rows of at most {SOFTMAX_MAX_ROW} are supported (their sum of Q12.19 exponentials stays exact in f32)",
                dims[axis]
            )));
        }
        let (m, diff_min) = super::gemmlowp::softmax_params(beta, s_in);
        // Row maximum, broadcast back.
        let xf = self.convert(x.id, DType::F32, "as_f32")?;
        let mx = crate::front::decompose::reduce(self, "max", ReduceKind::Max, xf, &[axis])?;
        let mx = self.convert(mx, DType::I32, "max_i32")?;
        let kept: Vec<usize> = (0..rank).filter(|&i| i != axis).collect();
        let name = self.name("max_b");
        let mb = self
            .b
            .broadcast(&name, mx, kept.clone(), dims.clone())
            .map_err(self.ir())?;
        let d = self.binary("diff", BinaryOp::Subtract, x.id, mb)?;
        // Tables over d in [−255, 0], indexed by d + 255.
        let exps: Vec<i32> = (-255..=0)
            .map(|d| super::gemmlowp::softmax_exp(d, m, diff_min))
            .collect();
        let terms: Vec<i32> = exps.iter().map(|&e| rounding_divide_by_pot_12(e)).collect();
        let k = self.splat_i32(255, d)?;
        let index = self.binary("index", BinaryOp::Add, d, k)?;
        let gather = |me: &mut Self, v: Vec<i32>, what: &str| -> R<InstId> {
            let t =
                me.b.constant(&me.name(what), Literal::from_i32(vec![256], &v));
            let name = me.name(what);
            me.b.add(&name, Op::Gather, &[t, index]).map_err(me.ir())
        };
        let e = gather(self, exps, "exp")?;
        let term = gather(self, terms, "term")?;
        let tf = self.convert(term, DType::F32, "term_f32")?;
        let sum = crate::front::decompose::reduce(self, "sum", ReduceKind::Add, tf, &[axis])?;
        let sum = self.convert(sum, DType::I32, "sum_i32")?;
        let (rec, expo) = self.reciprocal_q31(sum)?;
        let name = self.name("rec_b");
        let rb = self
            .b
            .broadcast(&name, rec, kept.clone(), dims.clone())
            .map_err(self.ir())?;
        let name = self.name("shift_b");
        let zero = self.splat_i32(0, expo)?;
        let neg = self.binary("neg_exponent", BinaryOp::Subtract, zero, expo)?;
        let sb = self
            .b
            .broadcast(&name, neg, kept, dims)
            .map_err(self.ir())?;
        let name = self.name("scaled");
        let y = self
            .b
            .add(&name, Op::MulQ31, &[e, rb, sb])
            .map_err(self.ir())?;
        let k = self.splat_i32(-128, y)?;
        let y = self.binary("offset", BinaryOp::Add, y, k)?;
        let y = self.clamp_i32(y, -128, 127)?;
        self.set(
            out,
            Val {
                id: y,
                perm: x.perm,
            },
        );
        Ok(())
    }

    /// TFLite's `GetReciprocal(s, 12)` of row sums `s` in `[2^19, 2^24]` (the largest element
    /// of a row contributes 2^19, a row of at most 32 at most 2^24): the Q0.31 reciprocal of the
    /// sum normalised into `[1, 2)` and the output exponent `23 + 12 − clz(s)`.
    fn reciprocal_q31(&mut self, s: InstId) -> R<(InstId, InstId)> {
        // clz(s) = 12 − #{k in 20..=24 : s ≥ 2^k}; and 2^clz(s) alongside.
        let mut clz = self.splat_i32(12, s)?;
        let mut pow = self.splat_i32(1 << 12, s)?;
        for k in 20..=24 {
            let bound = self.splat_i32(1 << k, s)?;
            let name = self.name("above");
            let above = self
                .b
                .add(&name, Op::Compare(CompareDir::Ge), &[s, bound])
                .map_err(self.ir())?;
            let one = self.splat_i32(1, s)?;
            let dec = self.binary("clz_dec", BinaryOp::Subtract, clz, one)?;
            let name = self.name("clz");
            clz = self
                .b
                .add(&name, Op::Select, &[above, dec, clz])
                .map_err(self.ir())?;
            let p = self.splat_i32(1 << (31 - k), s)?;
            let name = self.name("pow");
            pow = self
                .b
                .add(&name, Op::Select, &[above, p, pow])
                .map_err(self.ir())?;
        }
        // a = (s << clz) − 2^31 (wrapping), in [0, 2^31), a multiple of 2^7.
        let shifted = self.binary("normalised", BinaryOp::Multiply, s, pow)?;
        let min = self.splat_i32(i32::MIN, s)?;
        let a = self.binary("fraction", BinaryOp::Subtract, shifted, min)?;
        // one_over_one_plus_x_for_x_in_0_1(a): h = RoundingHalfSum(a, One) = a/2 + 2^30 (a is
        // even), then three Newton–Raphson steps in Q2.29.
        let half = self.q31_mul(a, 1 << 30)?;
        let c = self.splat_i32(1 << 30, a)?;
        let h = self.binary("half_denominator", BinaryOp::Add, half, c)?;
        let t = self.q31_mul(h, -1_010_580_540)?;
        let c = self.splat_i32(1_515_870_810, t)?;
        let mut x = self.binary("x0", BinaryOp::Add, t, c)?;
        for _ in 0..3 {
            let hx = self.q31_mul_v(h, x)?;
            let one = self.splat_i32(1 << 29, hx)?;
            let om = self.binary("one_minus", BinaryOp::Subtract, one, hx)?;
            let p = self.q31_mul_v(x, om)?;
            let p4 = self.sat_mul_pot(p, 2)?;
            x = self.binary("x", BinaryOp::Add, x, p4)?;
        }
        let rec = self.sat_mul_pot(x, 1)?;
        let c = self.splat_i32(35, clz)?;
        let expo = self.binary("exponent", BinaryOp::Subtract, c, clz)?;
        Ok((rec, expo))
    }

    /// SRDHM of `x` by the constant `m` (`multiply-q31` with shift 0).
    fn q31_mul(&mut self, x: InstId, m: i32) -> R<InstId> {
        let mc = self.splat_i32(m, x)?;
        self.q31_mul_v(x, mc)
    }

    /// SRDHM of `x` and `y`.
    fn q31_mul_v(&mut self, x: InstId, y: InstId) -> R<InstId> {
        let zero = self.splat_i32(0, x)?;
        let name = self.name("srdhm");
        self.b
            .add(&name, Op::MulQ31, &[x, y, zero])
            .map_err(self.ir())
    }

    /// gemmlowp's saturating `x · 2^k` (`k` 1 or 2).
    fn sat_mul_pot(&mut self, x: InstId, k: i32) -> R<InstId> {
        let t = (1i32 << (31 - k)) - 1;
        let f = self.splat_i32(1 << k, x)?;
        let v = self.binary("times_pot", BinaryOp::Multiply, x, f)?;
        let hi = self.splat_i32(t, x)?;
        let lo = self.splat_i32(-t, x)?;
        let name = self.name("over");
        let over = self
            .b
            .add(&name, Op::Compare(CompareDir::Gt), &[x, hi])
            .map_err(self.ir())?;
        let name = self.name("under");
        let under = self
            .b
            .add(&name, Op::Compare(CompareDir::Lt), &[x, lo])
            .map_err(self.ir())?;
        let max = self.splat_i32(i32::MAX, x)?;
        let min = self.splat_i32(i32::MIN, x)?;
        let name = self.name("sat_hi");
        let v = self
            .b
            .add(&name, Op::Select, &[over, max, v])
            .map_err(self.ir())?;
        let name = self.name("sat_lo");
        self.b
            .add(&name, Op::Select, &[under, min, v])
            .map_err(self.ir())
    }
}
