//! The op table: ONNX `op_type` → its lowering.
//!
//! Contract: [`Importer::lower_node`] returns one entry per node output it produces (`None` for
//! outputs it does not support, which the caller rejects only when the graph uses them), or the
//! error of the lowering. An op_type that is not in [`SUPPORTED_OPS`] is an error naming it.

use super::context::{Ctx, Importer, R};
use super::elementwise::Outs;
use crate::ir::{BinaryOp, CompareDir, UnaryOp};
use crate::util::suggest::nearest;

/// Every op_type of the default domain we import (see `docs/import.md` for the limits).
pub const SUPPORTED_OPS: &[&str] = &[
    "Abs",
    "Add",
    "And",
    "ArgMax",
    "TopK",
    "ArgMin",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "CastLike",
    "Ceil",
    "Celu",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Conv",
    "Div",
    "Dropout",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Floor",
    "Gather",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "InstanceNormalization",
    "LayerNormalization",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "LogSoftmax",
    "LRN",
    "MatMul",
    "Max",
    "MaxPool",
    "Mean",
    "Min",
    "Mish",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Pad",
    "Pow",
    "PRelu",
    "Reciprocal",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceSum",
    "ReduceSumSquare",
    "Relu",
    "Reshape",
    "Selu",
    "Shape",
    "Sigmoid",
    "Sign",
    "Size",
    "Slice",
    "Softmax",
    "Softplus",
    "Softsign",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Tanh",
    "ThresholdedRelu",
    "Tile",
    "Transpose",
    "Unsqueeze",
    "Where",
    "Xor",
];

impl Importer {
    /// Lowers one node.
    pub fn lower_node(&mut self, cx: &Ctx) -> R<Outs> {
        let op = cx.node.op_type.as_str();
        match op {
            "Add" => self.binary(cx, BinaryOp::Add),
            "Sub" => self.binary(cx, BinaryOp::Subtract),
            "Mul" => self.binary(cx, BinaryOp::Multiply),
            "Div" => self.binary(cx, BinaryOp::Divide),
            "Pow" => self.binary(cx, BinaryOp::Power),
            "Max" => self.variadic(cx, BinaryOp::Maximum, false),
            "Min" => self.variadic(cx, BinaryOp::Minimum, false),
            "Sum" => self.variadic(cx, BinaryOp::Add, false),
            "Mean" => self.variadic(cx, BinaryOp::Add, true),
            "Equal" => self.compare_op(cx, CompareDir::Eq),
            "Less" => self.compare_op(cx, CompareDir::Lt),
            "Greater" => self.compare_op(cx, CompareDir::Gt),
            "LessOrEqual" => self.compare_op(cx, CompareDir::Le),
            "GreaterOrEqual" => self.compare_op(cx, CompareDir::Ge),
            "Not" | "And" | "Or" | "Xor" => self.logic(cx, op),
            "Where" => self.where_op(cx),
            "Clip" => self.clip(cx),
            "Cast" => self.cast(cx, false),
            "CastLike" => self.cast(cx, true),
            "Abs" => self.abs_neg(cx, UnaryOp::Abs),
            "Neg" => self.abs_neg(cx, UnaryOp::Negate),
            "Relu" | "Sigmoid" | "Tanh" | "Exp" | "Log" | "Sqrt" | "Erf" | "Reciprocal"
            | "LeakyRelu" | "Elu" | "Selu" | "Celu" | "HardSigmoid" | "HardSwish" | "Softplus"
            | "Softsign" | "Mish" | "ThresholdedRelu" | "Sign" | "Floor" | "Ceil" => {
                self.activation(cx, op)
            }
            "PRelu" => self.prelu(cx),
            "Gelu" => self.gelu(cx),
            "Identity" => self.identity(cx),
            "Dropout" => self.dropout(cx),
            "Constant" => self.constant(cx),
            "ConstantOfShape" => self.constant_of_shape(cx),
            "Shape" => self.shape_op(cx, false),
            "Size" => self.shape_op(cx, true),
            "Reshape" => self.reshape_op(cx),
            "Flatten" => self.flatten(cx),
            "Squeeze" => self.squeeze(cx),
            "Unsqueeze" => self.unsqueeze(cx),
            "Transpose" => self.transpose(cx),
            "Concat" => self.concat(cx),
            "Slice" => self.slice(cx),
            "Pad" => self.pad(cx),
            "Expand" => self.expand(cx),
            "Tile" => self.tile(cx),
            "Split" => self.split(cx),
            "Gather" => self.gather(cx),
            "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceSumSquare"
            | "ReduceL1" | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" => self.reduce(cx, op),
            "ArgMax" => self.arg_extreme(cx, false),
            "ArgMin" => self.arg_extreme(cx, true),
            "TopK" => self.top_k(cx),
            "Conv" => self.conv(cx),
            "Gemm" => self.gemm(cx),
            "MatMul" => self.matmul(cx),
            "BatchNormalization" => self.batch_norm(cx),
            "InstanceNormalization" => self.instance_norm(cx),
            "LayerNormalization" => self.layer_norm(cx),
            "Softmax" => self.softmax(cx, false),
            "LogSoftmax" => self.softmax(cx, true),
            "LRN" => self.lrn(cx),
            "Upsample" => Err(cx
                .err("op `Upsample` is not supported: it resizes like Resize (which replaced it in opset 10), and the compiler has no Resize")
                .hint("export the model without Upsample (nearest upsampling by integer scales is Reshape, Expand and Reshape)")),
            "MaxPool" => self.pool(cx, true),
            "AveragePool" => self.pool(cx, false),
            "GlobalAveragePool" => self.global_pool(cx, false),
            "GlobalMaxPool" => self.global_pool(cx, true),
            other => {
                let hint = nearest(other, SUPPORTED_OPS.iter().copied())
                    .map(|s| format!("did you mean `{s}`? "))
                    .unwrap_or_default();
                Err(cx
                    .err(format!("op `{other}` is not supported"))
                    .hint(format!(
                        "{hint}the supported ops are listed in docs/import.md; rewrite the model without `{other}` or replace it in the exporter"
                    )))
            }
        }
    }
}
