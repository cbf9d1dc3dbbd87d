//! Normalisations beyond batch/instance/layer norm: RMSNormalization, LpNormalization,
//! GroupNormalization and MeanVarianceNormalization.
//!
//! Contract: [`Importer::rms_norm`] computes `x / sqrt(mean(x², axes axis..) + epsilon) · scale`
//! (ONNX RMSNormalization, opset 23; statistics in f32 whatever `stash_type` says, which is f32
//! for f32 models); [`Importer::lp_norm`] computes `x / ‖x‖ₚ` along one axis for p = 1 or 2
//! (a zero norm gives 0/0 = NaN where onnxruntime gives NaN too). [`Importer::group_norm`]
//! normalises each of `num_groups` groups of consecutive channels over its channels and spatial
//! dims (population variance + `epsilon`), then applies scale and bias per channel (opset 21) or
//! per group (opset 18's form, read when their length is `num_groups`).
//! [`Importer::mean_variance_norm`] is ONNX's function body: `(x − E[x]) / (√(E[x²] − E[x]²) +
//! 1e-9)` over `axes` (default [0, 2, 3]).

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use crate::front::decompose::{self, CountOrder};
use crate::ir::{BinaryOp, InstId, Op, ReduceKind, UnaryOp};

/// ONNX's default epsilon of the normalisations.
const DEFAULT_EPSILON: f32 = 1e-5;

/// The epsilon MeanVarianceNormalization's function body adds to the standard deviation.
const MVN_EPSILON: f32 = 1e-9;

impl Importer {
    /// Sum of `x` over `axes`, kept as size-1 dims and broadcast back to `x`'s shape.
    fn sum_back(&mut self, cx: &Ctx, x: InstId, axes: &[usize]) -> R<InstId> {
        let xd = self.dims(x);
        let s = self.add(
            cx,
            Op::Reduce {
                kind: ReduceKind::Add,
                dimensions: axes.to_vec(),
            },
            &[x],
        )?;
        let kept: Vec<usize> = (0..xd.len()).filter(|i| !axes.contains(i)).collect();
        self.bcast(cx, s, kept, xd)
    }

    /// `RMSNormalization(X, scale)`.
    pub fn rms_norm(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let (x, xd) = self.rt_f32_nonscalar(cx, 0)?;
        let axis = cx.axis("axis", cx.attr_i_or("axis", -1)?, xd.len())?;
        let eps = cx.attr_f_or("epsilon", DEFAULT_EPSILON)?;
        let axes: Vec<usize> = (axis..xd.len()).collect();
        let count: usize = axes.iter().map(|&a| xd[a]).product();
        let sq = self.bin(cx, BinaryOp::Multiply, x, x)?;
        let ss = self.sum_back(cx, sq, &axes)?;
        let n = self.splat(cx, count as f32, &xd)?;
        let ms = self.bin(cx, BinaryOp::Divide, ss, n)?;
        let e = self.splat(cx, eps, &xd)?;
        let var = self.bin(cx, BinaryOp::Add, ms, e)?;
        let inv = self.un(cx, UnaryOp::Rsqrt, var)?;
        let y = self.bin(cx, BinaryOp::Multiply, x, inv)?;
        let s = self.rt_f32(cx, 1)?;
        let s = self.stretch(cx, s, &xd)?;
        let y = self.bin(cx, BinaryOp::Multiply, y, s)?;
        Ok(rt(y, dt::FLOAT))
    }

    /// `LpNormalization(X)`.
    pub fn lp_norm(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        let (x, xd) = self.rt_f32_nonscalar(cx, 0)?;
        let axis = cx.axis("axis", cx.attr_i_or("axis", -1)?, xd.len())?;
        let p = cx.attr_i_or("p", 2)?;
        let norm = match p {
            1 => {
                let a = self.un(cx, UnaryOp::Abs, x)?;
                self.sum_back(cx, a, &[axis])?
            }
            2 => {
                let sq = self.bin(cx, BinaryOp::Multiply, x, x)?;
                let s = self.sum_back(cx, sq, &[axis])?;
                self.un(cx, UnaryOp::Sqrt, s)?
            }
            p => return Err(cx.attr_err("p", format!("{p} is not 1 or 2"))),
        };
        let y = self.bin(cx, BinaryOp::Divide, x, norm)?;
        Ok(rt(y, dt::FLOAT))
    }

    /// `GroupNormalization(X, scale, bias)`.
    pub fn group_norm(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(3, 3)?;
        let (x, xd) = self.rt_f32_nonscalar(cx, 0)?;
        if xd.len() < 2 {
            return Err(cx.err("input 0 must be [N, C, ...]: at least 2-D"));
        }
        let Some(groups) = cx.attr_i("num_groups")? else {
            return Err(cx.attr_err("num_groups", "is required"));
        };
        let c = xd[1];
        if groups < 1 || c % groups as usize != 0 {
            return Err(cx.attr_err(
                "num_groups",
                format!("is {groups}; it must divide the {c} channels"),
            ));
        }
        let g = groups as usize;
        let eps = cx.attr_f_or("epsilon", DEFAULT_EPSILON)?;
        let rest: usize = xd[2..].iter().product();
        let grouped = self.reshape(cx, x, vec![xd[0], g, c / g * rest])?;
        let (y, _) = {
            let mut comp = self.composite(cx);
            decompose::normalize(&mut comp, grouped, &[2], eps, CountOrder::AfterSum, false)?
        };
        let y = self.reshape(cx, y, xd.clone())?;
        let per_channel = |me: &mut Importer, j: usize, role: &str| -> R<InstId> {
            let v = me.rt_f32(cx, j)?;
            let vd = me.dims(v);
            let v = if vd == [c] {
                v
            } else if vd == [g] {
                // Opset 18's per-group scale and bias: each value for its group's channels.
                let v = me.bcast(cx, v, vec![0], vec![g, c / g])?;
                me.reshape(cx, v, vec![c])?
            } else {
                return Err(cx.err(format!(
                    "{role} is {vd:?}; it must hold one value per channel ([{c}]) or, as in opset 18, per group ([{g}])"
                )));
            };
            me.bcast(cx, v, vec![1], xd.clone())
        };
        let s = per_channel(self, 1, "scale")?;
        let b = per_channel(self, 2, "bias")?;
        let y = self.bin(cx, BinaryOp::Multiply, y, s)?;
        let y = self.bin(cx, BinaryOp::Add, y, b)?;
        Ok(rt(y, dt::FLOAT))
    }

    /// `MeanVarianceNormalization(X)`.
    pub fn mean_variance_norm(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        let (x, xd) = self.rt_f32_nonscalar(cx, 0)?;
        let axes = cx.attr_ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]);
        let mut axes = cx.axes("axes", &axes, xd.len())?;
        axes.sort_unstable();
        axes.dedup();
        let count: usize = axes.iter().map(|&a| xd[a]).product();
        let n = self.splat(cx, count as f32, &xd)?;
        let s = self.sum_back(cx, x, &axes)?;
        let mean = self.bin(cx, BinaryOp::Divide, s, n)?;
        let sq = self.bin(cx, BinaryOp::Multiply, x, x)?;
        let ssq = self.sum_back(cx, sq, &axes)?;
        let msq = self.bin(cx, BinaryOp::Divide, ssq, n)?;
        let mean2 = self.bin(cx, BinaryOp::Multiply, mean, mean)?;
        let var = self.bin(cx, BinaryOp::Subtract, msq, mean2)?;
        let std = self.un(cx, UnaryOp::Sqrt, var)?;
        let e = self.splat(cx, MVN_EPSILON, &xd)?;
        let den = self.bin(cx, BinaryOp::Add, std, e)?;
        let centered = self.bin(cx, BinaryOp::Subtract, x, mean)?;
        let y = self.bin(cx, BinaryOp::Divide, centered, den)?;
        Ok(rt(y, dt::FLOAT))
    }
}
