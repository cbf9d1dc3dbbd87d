//! Normalisations beyond batch/instance/layer norm: RMSNormalization and LpNormalization.
//!
//! Contract: [`Importer::rms_norm`] computes `x / sqrt(mean(x², axes axis..) + epsilon) · scale`
//! (ONNX RMSNormalization, opset 23; statistics in f32 whatever `stash_type` says, which is f32
//! for f32 models); [`Importer::lp_norm`] computes `x / ‖x‖ₚ` along one axis for p = 1 or 2
//! (a zero norm gives 0/0 = NaN where onnxruntime gives NaN too).

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use crate::ir::{BinaryOp, InstId, Op, ReduceKind, UnaryOp};

/// ONNX's default epsilon of the normalisations.
const DEFAULT_EPSILON: f32 = 1e-5;

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
}
