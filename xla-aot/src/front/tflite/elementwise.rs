//! Elementwise ops of float models: ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, SQUARED_DIFFERENCE
//! (numpy broadcasting, fused activation), the activations (RELU, RELU6, RELU_N1_TO_1,
//! LEAKY_RELU, PRELU, LOGISTIC, TANH, HARD_SWISH), the unary math ops and SOFTMAX.
//!
//! Contract: the result is held in the layout of the operand of full rank that is not in TFLite
//! order, if any (`lower.rs`): the other operand is reshaped to full rank (leading 1s, numpy's
//! rule), permuted the same way and broadcast, so a per-channel constant added to a convolution's
//! NCHW result costs one broadcast of a constant and no transpose of the activation.
//! Definitions: HARD_SWISH `x · relu6(x + 3) / 6`; LEAKY_RELU `x > 0 ? x : α·x`; PRELU
//! `x ≥ 0 ? x : α·x` with `α` broadcast against `x`; SOFTMAX `softmax(β·x)` over the last dim
//! (computed stably, `front/decompose.rs`).

use super::lower::{Importer, R, Val};
use crate::front::decompose;
use crate::ir::{BinaryOp, CompareDir, InstId, Op, UnaryOp};
use xla_aot_tflite_schema::tflite::{ActivationFunctionType, BuiltinOptionsRef as O};

impl Importer<'_, '_> {
    /// The numpy-broadcast TFLite dims of `a` and `b`.
    pub(super) fn broadcast_dims(&self, a: &[usize], b: &[usize]) -> R<Vec<usize>> {
        let n = a.len().max(b.len());
        let at = |d: &[usize], i: usize| {
            let pad = n - d.len();
            if i < pad { 1 } else { d[i - pad] }
        };
        (0..n)
            .map(|i| match (at(a, i), at(b, i)) {
                (x, y) if x == y => Ok(x),
                (1, y) => Ok(y),
                (x, 1) => Ok(x),
                _ => Err(self.err(format!(
                    "the operands {a:?} and {b:?} do not broadcast together"
                ))),
            })
            .collect()
    }

    /// `v` brought to full-rank TFLite dims `out` held in layout `perm`.
    pub fn broadcast_to(&mut self, v: &Val, out: &[usize], perm: &[usize]) -> R<InstId> {
        let d = self.dims(v);
        if d == out {
            return self.permuted(v, perm);
        }
        let mut x = self.plain(v)?;
        let mut full = vec![1; out.len() - d.len()];
        full.extend(&d);
        if full.len() != d.len() {
            let name = self.name("rank");
            x = self.b.reshape(&name, x, full.clone()).map_err(self.ir())?;
        }
        let held = Val {
            id: x,
            perm: (0..out.len()).collect(),
        };
        let x = self.permuted(&held, perm)?;
        let target: Vec<usize> = perm.iter().map(|&p| out[p]).collect();
        let name = self.name("broadcast");
        self.b
            .broadcast(&name, x, (0..out.len()).collect(), target)
            .map_err(self.ir())
    }

    /// The layout of a result of TFLite dims `out` computed from `vals`: the first full-rank
    /// operand's not in TFLite order, else TFLite order.
    pub(super) fn common_layout(&self, vals: &[&Val], out: &[usize]) -> Vec<usize> {
        vals.iter()
            .find(|v| v.perm.len() == out.len() && !v.is_plain() && self.dims(v) == out)
            .map(|v| v.perm.clone())
            .unwrap_or_else(|| (0..out.len()).collect())
    }

    /// A binary elementwise op with numpy broadcasting and the op's fused activation.
    pub fn binary_op(&mut self, op: BinaryOp, squared: bool) -> R<()> {
        let act = self.fused_activation()?;
        let (at, bt) = (self.need(0)?, self.need(1)?);
        if self.is_quantized(at) || self.is_quantized(bt) {
            return match (op, squared) {
                (BinaryOp::Add, false) => self.add_i8(false, act),
                (BinaryOp::Subtract, false) => self.add_i8(true, act),
                (BinaryOp::Multiply, false) => self.mul_i8(act),
                (BinaryOp::Subtract, true) => self.squared_difference_i8(),
                _ => Err(self.integer_not_yet()),
            };
        }
        self.check_float(at)?;
        self.check_float(bt)?;
        let (a, b) = (self.val(at)?, self.val(bt)?);
        let out = self.broadcast_dims(&self.dims(&a), &self.dims(&b))?;
        let perm = self.common_layout(&[&a, &b], &out);
        let x = self.broadcast_to(&a, &out, &perm)?;
        let y = self.broadcast_to(&b, &out, &perm)?;
        let mut r = self.binary("", op, x, y)?;
        if squared {
            r = self.binary("square", BinaryOp::Multiply, r, r)?;
        }
        r = self.activation(r, act)?;
        let o = self.output_index(0)?;
        self.set(o, Val { id: r, perm });
        Ok(())
    }

    /// The fused activation of ADD, SUB, MUL, DIV, CONCATENATION (NONE where the op has none).
    pub fn fused_activation(&self) -> R<ActivationFunctionType> {
        let p = crate::front::tflite::read::pb(self.path, "the operator's options");
        let f = match &self.op().options {
            Some(O::AddOptions(o)) => o.fused_activation_function(),
            Some(O::SubOptions(o)) => o.fused_activation_function(),
            Some(O::MulOptions(o)) => o.fused_activation_function(),
            Some(O::DivOptions(o)) => o.fused_activation_function(),
            Some(O::ConcatenationOptions(o)) => o.fused_activation_function(),
            _ => Ok(ActivationFunctionType::None),
        };
        f.map_err(|e| p(e).in_node(self.op().describe()))
    }

    /// A unary op on input 0, in its layout.
    pub fn unary_op(&mut self, f: impl FnOnce(&mut Self, InstId) -> R<InstId>) -> R<()> {
        let xt = self.need(0)?;
        self.check_float(xt)?;
        let x = self.val(xt)?;
        let y = f(self, x.id)?;
        let o = self.output_index(0)?;
        self.set(
            o,
            Val {
                id: y,
                perm: x.perm,
            },
        );
        Ok(())
    }

    /// `u(x)`.
    pub fn math(&mut self, u: UnaryOp, x: InstId) -> R<InstId> {
        let name = self.name("");
        self.b.add(&name, Op::Unary(u), &[x]).map_err(self.ir())
    }

    /// `x · relu6(x + 3) / 6`.
    pub fn hard_swish(&mut self, x: InstId) -> R<InstId> {
        let three = self.splat(3.0, x)?;
        let s = self.binary("shift", BinaryOp::Add, x, three)?;
        let r = self.clamp(s, 0.0, 6.0)?;
        let sixth = self.splat(1.0 / 6.0, x)?;
        let g = self.binary("gate", BinaryOp::Multiply, r, sixth)?;
        self.binary("", BinaryOp::Multiply, x, g)
    }

    /// `x > 0 ? x : alpha·x` (or `>=` with `ge`), `alpha` already broadcast to `x`.
    pub fn leaky(&mut self, x: InstId, alpha: InstId, ge: bool) -> R<InstId> {
        let z = self.splat(0.0, x)?;
        let name = self.name("positive");
        let dir = if ge { CompareDir::Ge } else { CompareDir::Gt };
        let p = self
            .b
            .add(&name, Op::Compare(dir), &[x, z])
            .map_err(self.ir())?;
        let ax = self.binary("scaled", BinaryOp::Multiply, x, alpha)?;
        let name = self.name("");
        self.b
            .add(&name, Op::Select, &[p, x, ax])
            .map_err(self.ir())
    }

    /// LEAKY_RELU.
    pub fn leaky_relu(&mut self) -> R<()> {
        let alpha = match &self.op().options {
            Some(O::LeakyReluOptions(o)) => o.alpha().map_err(crate::front::tflite::read::pb(
                self.path,
                "LeakyReluOptions",
            ))?,
            _ => 0.2,
        };
        if self.input_index(0).is_some_and(|t| self.is_quantized(t)) {
            return self.unary_i8(super::int8_tables::UnaryI8::LeakyRelu(alpha));
        }
        self.unary_op(|me, x| {
            let a = me.splat(alpha, x)?;
            me.leaky(x, a, false)
        })
    }

    /// PRELU: `alpha` (input 1) broadcast against `x`.
    pub fn prelu(&mut self) -> R<()> {
        let (xt, at) = (self.need(0)?, self.need(1)?);
        if self.is_quantized(xt) {
            return self.prelu_i8();
        }
        self.check_float(xt)?;
        self.check_float(at)?;
        let (x, a) = (self.val(xt)?, self.val(at)?);
        let out = self.broadcast_dims(&self.dims(&x), &self.dims(&a))?;
        let perm = self.common_layout(&[&x, &a], &out);
        let xb = self.broadcast_to(&x, &out, &perm)?;
        let ab = self.broadcast_to(&a, &out, &perm)?;
        let y = self.leaky(xb, ab, true)?;
        let o = self.output_index(0)?;
        self.set(o, Val { id: y, perm });
        Ok(())
    }

    /// SOFTMAX over the last TFLite dim, of `beta · x`.
    pub fn softmax(&mut self) -> R<()> {
        let beta = match &self.op().options {
            Some(O::SoftmaxOptions(o)) => o
                .beta()
                .map_err(crate::front::tflite::read::pb(self.path, "SoftmaxOptions"))?,
            _ => 1.0,
        };
        let xt = self.need(0)?;
        if self.is_quantized(xt) {
            return self.softmax_i8(beta);
        }
        self.check_float(xt)?;
        let v = self.val(xt)?;
        let rank = v.perm.len();
        if rank == 0 {
            return Err(self.err("SOFTMAX of a scalar"));
        }
        let axis = v
            .perm
            .iter()
            .position(|&p| p == rank - 1)
            .unwrap_or(rank - 1);
        let mut x = v.id;
        if beta != 1.0 {
            let b = self.splat(beta, x)?;
            x = self.binary("beta", BinaryOp::Multiply, x, b)?;
        }
        let y = decompose::softmax(self, x, axis, false)?;
        let o = self.output_index(0)?;
        self.set(
            o,
            Val {
                id: y,
                perm: v.perm,
            },
        );
        Ok(())
    }
}
