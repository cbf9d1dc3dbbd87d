//! bfloat16 tensors inside an ONNX graph, computed as onnx's reference computes them.
//!
//! Contract: the importer computes every float in f32, and bfloat16 inputs and outputs convert at
//! the C API (`ir/api.rs`). onnx's reference runs each node with numpy on `ml_dtypes.bfloat16`
//! arrays, which computes every elementwise operation in f32 and rounds its result to bfloat16,
//! matrix products with an f32 sum rounded once, and sums (`np.sum`) in bfloat16, one rounding
//! per added element in order. [`Importer::bf16_outputs`], run after every node's lowering (also
//! the nodes a rewrite emits, such as `Attention`'s decomposition), follows it at node
//! granularity:
//! - a node whose float inputs include a bfloat16 value (a run-time value or a constant) and that
//!   computes new values ([`COMPUTING`]) has its run-time (first) output rounded to bfloat16
//!   (`round-bf16`, `UnaryOp::RoundBf16`) and typed bfloat16; so does a `Cast`/`CastLike` to
//!   bfloat16;
//! - a node that only moves or selects values ([`MOVING`]) keeps them (already bfloat16 values)
//!   and its float outputs are typed bfloat16;
//! - every other node is untouched (integer, boolean and shape ops; ops whose output type is not
//!   their inputs').
//!
//! `Softmax` over a bfloat16 tensor ([`Importer::softmax_bf16`]) rounds each step as the
//! reference's does: `x - max`, `exp`, the sum along the axis in order with a rounding after
//! each addition (up to [`BF16_SEQUENTIAL_SUM_MAX`] elements; a longer axis sums in f32 and rounds
//! once), and the quotient. Constant folding of bfloat16 constants computes in f64 (only `Cast`
//! rounds). A float32 graph is unchanged: nothing here applies without a bfloat16 value.

use super::context::{Ctx, Importer, R, Val, ty_of};
use super::elementwise::Outs;
use super::proto::data_type as dt;
use crate::ir::{BinaryOp, InstId, Op, ReduceKind, UnaryOp};

/// The longest softmax axis summed in bfloat16 element by element (a slice, an addition and a
/// rounding per element: 3·n instructions); longer axes sum in f32 and round once. onnx's
/// bfloat16 node tests normalise over at most 6 keys; 256 keeps a real model's graph bounded.
pub const BF16_SEQUENTIAL_SUM_MAX: usize = 256;

/// Ops whose output has their float inputs' type and holds newly computed values: rounded.
pub const COMPUTING: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "MatMul",
    "Gemm",
    "Softmax",
    "LogSoftmax",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Exp",
    "Log",
    "Sqrt",
    "Erf",
    "Sin",
    "Cos",
    "Reciprocal",
    "LeakyRelu",
    "Elu",
    "Selu",
    "Celu",
    "HardSigmoid",
    "HardSwish",
    "Swish",
    "Softplus",
    "Softsign",
    "Mish",
    "ThresholdedRelu",
    "Abs",
    "Neg",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Clip",
    "Gelu",
    "PRelu",
    "ReduceSum",
    "ReduceMean",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
    "Einsum",
    "Conv",
    "ConvTranspose",
    "LayerNormalization",
    "BatchNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    "RMSNormalization",
    "LpNormalization",
    "LRN",
    "AveragePool",
    "GlobalAveragePool",
    "CumSum",
    "Resize",
    "Upsample",
    "GridSample",
    "RotaryEmbedding",
    "ScatterND",
    "ScatterElements",
    "Scatter",
];

/// Ops that move or select values without computing new ones: typed, not rounded.
pub const MOVING: &[&str] = &[
    "Identity",
    "Reshape",
    "Transpose",
    "Expand",
    "Concat",
    "Slice",
    "Squeeze",
    "Unsqueeze",
    "Gather",
    "Flatten",
    "Where",
    "Tile",
    "ReduceMax",
    "ReduceMin",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Split",
    "Pad",
    "MaxPool",
    "GlobalMaxPool",
    "DepthToSpace",
    "SpaceToDepth",
    "GatherElements",
    "GatherND",
    "ReverseSequence",
    "Trilu",
    "Dropout",
    "TopK",
    "Hardmax",
];

impl Importer {
    /// Whether input `j` of the node is a bfloat16 value.
    fn input_is_bf16(&self, cx: &Ctx, j: usize) -> bool {
        cx.node
            .input
            .get(j)
            .filter(|s| !s.is_empty())
            .and_then(|name| self.env.get(name))
            .is_some_and(|v| ty_of(v) == dt::BFLOAT16)
    }

    /// The node's outputs with bfloat16 semantics applied (the module doc).
    pub(super) fn bf16_outputs(&mut self, cx: &Ctx, mut outs: Outs) -> R<Outs> {
        let op = cx.node.op_type.as_str();
        let cast_to_bf16 = matches!(op, "Cast" | "CastLike")
            && matches!(
                outs.first(),
                Some(Some(Val::Rt {
                    ty: dt::BFLOAT16,
                    ..
                }))
            )
            && !self.input_is_bf16(cx, 0);
        let bf16_in = (0..cx.node.input.len()).any(|j| self.input_is_bf16(cx, j));
        let round = cast_to_bf16 || (bf16_in && COMPUTING.contains(&op));
        let retype = round || (bf16_in && MOVING.contains(&op));
        if !retype {
            return Ok(outs);
        }
        // A computing op's first output is its result (LayerNormalization's others are float
        // statistics); a moving op's float outputs are all moved values (Split, TopK's values).
        let n = if round { 1 } else { outs.len() };
        for out in outs.iter_mut().take(n) {
            if let Some(Val::Rt { id, ty }) = out
                && matches!(*ty, dt::FLOAT | dt::BFLOAT16)
            {
                if round && !matches!(self.b.inst(*id).op, Op::Unary(UnaryOp::RoundBf16)) {
                    *id = self.un(cx, UnaryOp::RoundBf16, *id)?;
                }
                *ty = dt::BFLOAT16;
            }
        }
        Ok(outs)
    }

    /// Softmax of the bfloat16 values `x` over `axis`, rounding as onnx's reference does (the
    /// module doc); the caller rounds the quotient (`bf16_outputs`).
    pub(super) fn softmax_bf16(&mut self, cx: &Ctx, x: InstId, axis: usize) -> R<InstId> {
        let xd = self.dims(x);
        let reduced: Vec<usize> = (0..xd.len())
            .filter(|&i| i != axis)
            .map(|i| xd[i])
            .collect();
        let kept: Vec<usize> = (0..xd.len()).filter(|&i| i != axis).collect();
        let round = |imp: &mut Self, v: InstId| imp.un(cx, UnaryOp::RoundBf16, v);
        let m = self.add(
            cx,
            Op::Reduce {
                kind: ReduceKind::Max,
                dimensions: vec![axis],
            },
            &[x],
        )?;
        let mb = self.bcast(cx, m, kept.clone(), xd.clone())?;
        let shifted = self.bin(cx, BinaryOp::Subtract, x, mb)?;
        let shifted = round(self, shifted)?;
        let e = self.un(cx, UnaryOp::Exp, shifted)?;
        let e = round(self, e)?;
        let n = xd[axis];
        let sum = if n <= BF16_SEQUENTIAL_SUM_MAX {
            // e[0] + e[1], rounded, + e[2], rounded, ...: numpy's reduction of bfloat16.
            let column = |imp: &mut Self, k: usize| -> R<InstId> {
                let mut starts = vec![0; xd.len()];
                let mut limits = xd.clone();
                starts[axis] = k;
                limits[axis] = k + 1;
                let c = imp.crop(cx, e, starts, limits)?;
                imp.reshape(cx, c, reduced.clone())
            };
            let mut s = column(self, 0)?;
            for k in 1..n {
                let c = column(self, k)?;
                let t = self.bin(cx, BinaryOp::Add, s, c)?;
                s = round(self, t)?;
            }
            s
        } else {
            let s = self.add(
                cx,
                Op::Reduce {
                    kind: ReduceKind::Add,
                    dimensions: vec![axis],
                },
                &[e],
            )?;
            round(self, s)?
        };
        let sb = self.bcast(cx, sum, kept, xd)?;
        self.bin(cx, BinaryOp::Divide, e, sb)
    }
}
