//! Losses: `NegativeLogLikelihoodLoss` (opsets 12–13+) and `SoftmaxCrossEntropyLoss`, decomposed.
//!
//! Contract: the input is [N, C, d1..dk] (k ≥ 0) floats and the target [N, d1..dk] class indices
//! (integers, at run time or constant); the optional weight is [C]. Per position
//! `loss = −x[n, t, d] · w[t]` (w = 1 without a weight), 0 where `t == ignore_index`.
//! `reduction`: `none` keeps [N, d1..dk], `sum` sums to a scalar, `mean` (default) divides the
//! sum by Σ w[t] over the positions not ignored (by their count without a weight, by the element
//! count without a weight or `ignore_index`), as onnx's reference does. A target outside [0, C)
//! that is not ignored picks nothing: its loss and weight are 0 (ONNX leaves it undefined).
//! `SoftmaxCrossEntropyLoss` is that loss of `log_softmax(scores)` over dim 1, and returns the
//! log-probabilities as its optional second output.
//!
//! The class is picked with a comparison against `0..C` along dim 1 and a sum of the one selected
//! value (`select`, not a product, so a `-inf` log-probability elsewhere cannot make a NaN): the
//! picked value is exact.

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use super::tensor::is_int_type;
use crate::front::decompose;
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Literal, Op, ReduceKind, UnaryOp};

impl Importer {
    /// `NegativeLogLikelihoodLoss(input, target[, weight])`.
    pub fn nll_loss(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 3)?;
        let x = self.rt_f32(cx, 0)?;
        let loss = self.picked_loss(cx, x)?;
        Ok(rt(loss, dt::FLOAT))
    }

    /// `SoftmaxCrossEntropyLoss(scores, labels[, weights])` → `(output[, log_prob])`.
    pub fn softmax_cross_entropy(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 3)?;
        let x = self.rt_f32(cx, 0)?;
        if self.dims(x).len() < 2 {
            return Err(cx.err("input 0 (scores) must be [N, C, d1, ...]: at least 2-D"));
        }
        let log_prob = decompose::softmax(&mut self.composite(cx), x, 1, true)?;
        let loss = self.picked_loss(cx, log_prob)?;
        let mut out = rt(loss, dt::FLOAT);
        out.extend(rt(log_prob, dt::FLOAT));
        Ok(out)
    }

    /// The reduced loss of log-probabilities `x` [N, C, d...] against input 1 (the target) and
    /// the optional weight input 2.
    fn picked_loss(&mut self, cx: &Ctx, x: InstId) -> R<InstId> {
        let xd = self.dims(x);
        if xd.len() < 2 {
            return Err(cx.err("input 0 must be [N, C, d1, ...]: at least 2-D"));
        }
        let c = xd[1];
        let (t, tty) = self.rt(cx, 1)?;
        if !is_int_type(tty) {
            return Err(cx.err(format!(
                "input 1 (the target) has element type {}; it must hold integer class indices",
                dt::name(tty)
            )));
        }
        let td: Vec<usize> = std::iter::once(xd[0])
            .chain(xd[2..].iter().copied())
            .collect();
        if self.dims(t) != td {
            return Err(cx.err(format!(
                "input 1 (the target) is {:?}; input 0 is {xd:?}, so it must be {td:?}",
                self.dims(t)
            )));
        }
        // Class indices are exact in f32 (C is far below 2^24).
        let t = self.convert(cx, t, DType::F32)?;
        let to_x: Vec<usize> = std::iter::once(0).chain(2..xd.len()).collect();
        let tb = self.bcast(cx, t, to_x, xd.clone())?;
        let classes: Vec<f32> = (0..c).map(|k| k as f32).collect();
        let iota = self
            .b
            .constant("constant", Literal::from_f32(vec![c], &classes));
        let iota = self.bcast(cx, iota, vec![1], xd.clone())?;
        let hit = self.add(cx, Op::Compare(CompareDir::Eq), &[tb, iota])?;
        let zero = self.splat(cx, 0.0, &xd)?;
        // The one value of each position's class (0 where the target is out of range).
        let pick = |me: &mut Importer, v: InstId| -> R<InstId> {
            let sel = me.select(cx, hit, v, zero)?;
            me.reduce_raw(cx, ReduceKind::Add, sel, &[1])
        };
        let picked = pick(self, x)?;
        let mut loss = self.un(cx, UnaryOp::Negate, picked)?;
        // Each position's weight, when a weight or ignore_index makes them differ.
        let mut weight = None;
        if cx.has_input(2) {
            let w = self.rt_f32(cx, 2)?;
            if self.dims(w) != [c] {
                return Err(cx.err(format!(
                    "input 2 (the weight) is {:?}; it must hold one value per class: [{c}]",
                    self.dims(w)
                )));
            }
            let wb = self.bcast(cx, w, vec![1], xd.clone())?;
            let wt = pick(self, wb)?;
            loss = self.bin(cx, BinaryOp::Multiply, loss, wt)?;
            weight = Some(wt);
        }
        if let Some(ii) = cx.attr_i("ignore_index")? {
            let iiv = self.splat(cx, ii as f32, &td)?;
            let kept = self.add(cx, Op::Compare(CompareDir::Ne), &[t, iiv])?;
            let none = self.splat(cx, 0.0, &td)?;
            loss = self.select(cx, kept, loss, none)?;
            let w = match weight {
                Some(w) => w,
                None => self.splat(cx, 1.0, &td)?,
            };
            weight = Some(self.select(cx, kept, w, none)?);
        }
        let all: Vec<usize> = (0..td.len()).collect();
        let reduction = cx.attr_s("reduction")?.unwrap_or_else(|| "mean".into());
        match reduction.as_str() {
            "none" => Ok(loss),
            "sum" => self.reduce_raw(cx, ReduceKind::Add, loss, &all),
            "mean" => {
                let sum = self.reduce_raw(cx, ReduceKind::Add, loss, &all)?;
                let den = match weight {
                    Some(w) => self.reduce_raw(cx, ReduceKind::Add, w, &all)?,
                    None => {
                        let n: usize = td.iter().product();
                        self.splat(cx, n as f32, &[])?
                    }
                };
                self.bin(cx, BinaryOp::Divide, sum, den)
            }
            other => Err(cx.attr_err(
                "reduction",
                format!("is `{other}`; it must be `none`, `sum` or `mean`"),
            )),
        }
    }
}
