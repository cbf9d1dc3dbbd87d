//! The TFLite operators this importer takes, declared once: name, lowering and what is
//! supported. The dispatch, the "unsupported op" error (with the closest supported op) and the
//! table in docs/import.md are all read from [`OPS`].

use super::int8_tables::UnaryI8;
use super::lower::{Importer, R};
use crate::ir::{BinaryOp, ReduceKind, UnaryOp};

/// One supported builtin operator.
pub struct OpDecl {
    /// TFLite's name (`BuiltinOperator` in schema.fbs).
    pub name: &'static str,
    /// What of it is supported (docs/import.md's table).
    pub note: &'static str,
    /// Whether its int8 form (quantized integers, TFLite Micro's arithmetic) imports.
    pub int8: bool,
    /// Its lowering.
    pub lower: fn(&mut Importer<'_, '_>) -> R<()>,
}

macro_rules! op {
    ($name:literal, $note:literal, $f:expr) => {
        OpDecl {
            name: $name,
            note: $note,
            int8: int8_form($name),
            lower: $f,
        }
    };
}

/// The ops whose int8 form imports (`int8.rs`; the data movement ops move integers as they are).
const INT8_OPS: &[&str] = &[
    "ADD",
    "SUB",
    "MUL",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "FULLY_CONNECTED",
    "AVERAGE_POOL_2D",
    "MAX_POOL_2D",
    "RESHAPE",
    "SQUEEZE",
    "EXPAND_DIMS",
    "CONCATENATION",
    "TRANSPOSE",
    "PAD",
    "PADV2",
    "SLICE",
    "STRIDED_SLICE",
    "SPLIT",
    "SPLIT_V",
    "PACK",
    "UNPACK",
    "GATHER",
    "QUANTIZE",
    "DEQUANTIZE",
    "MAXIMUM",
    "MINIMUM",
    "RELU",
    "RELU6",
    "RELU_N1_TO_1",
    "RELU_0_TO_1",
    "LEAKY_RELU",
    "LOGISTIC",
    "TANH",
    "HARD_SWISH",
    "SOFTMAX",
    "MEAN",
    "SUM",
    "SQUARED_DIFFERENCE",
    "BATCH_MATMUL",
    "REDUCE_MAX",
    "REDUCE_MIN",
    "RSQRT",
    "ABS",
    "RESIZE_NEAREST_NEIGHBOR",
    "TRANSPOSE_CONV",
    "PRELU",
];

const fn int8_form(name: &str) -> bool {
    let mut i = 0;
    while i < INT8_OPS.len() {
        if const_eq(INT8_OPS[i], name) {
            return true;
        }
        i += 1;
    }
    false
}

const fn const_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// `int` when input 0 holds quantized integers, else `float`.
fn q_or(
    imp: &mut Importer<'_, '_>,
    int: impl FnOnce(&mut Importer<'_, '_>) -> R<()>,
    float: impl FnOnce(&mut Importer<'_, '_>) -> R<()>,
) -> R<()> {
    match imp.input_index(0) {
        Some(t) if imp.is_quantized(t) => int(imp),
        _ => float(imp),
    }
}

fn unary(imp: &mut Importer<'_, '_>, u: UnaryOp) -> R<()> {
    imp.unary_op(|me, x| me.math(u, x))
}

/// Every builtin operator the importer lowers, by name.
pub const OPS: &[OpDecl] = &[
    op!("ADD", "numpy broadcasting, fused activation", |i| i
        .binary_op(BinaryOp::Add, false)),
    op!("SUB", "numpy broadcasting, fused activation", |i| i
        .binary_op(BinaryOp::Subtract, false)),
    op!("MUL", "numpy broadcasting, fused activation", |i| i
        .binary_op(BinaryOp::Multiply, false)),
    op!("DIV", "numpy broadcasting, fused activation", |i| i
        .binary_op(BinaryOp::Divide, false)),
    op!("MAXIMUM", "numpy broadcasting", |i| q_or(
        i,
        |i| i.max_min_i8(BinaryOp::Maximum),
        |i| i.binary_op(BinaryOp::Maximum, false)
    )),
    op!("MINIMUM", "numpy broadcasting", |i| q_or(
        i,
        |i| i.max_min_i8(BinaryOp::Minimum),
        |i| i.binary_op(BinaryOp::Minimum, false)
    )),
    op!("SQUARED_DIFFERENCE", "numpy broadcasting", |i| i
        .binary_op(BinaryOp::Subtract, true)),
    op!(
        "CONV_2D",
        "SAME/VALID padding, strides, dilations, groups, fused activation",
        |i| i.conv(false)
    ),
    op!(
        "DEPTHWISE_CONV_2D",
        "any depth multiplier, strides, dilations, fused activation",
        |i| i.conv(true)
    ),
    op!(
        "FULLY_CONNECTED",
        "DEFAULT weights format, keep_num_dims, fused activation",
        |i| i.fully_connected()
    ),
    op!("BATCH_MATMUL", "adj_x, adj_y, broadcast batch dims", |i| i
        .batch_matmul()),
    op!("AVERAGE_POOL_2D", "padding excluded from the count", |i| i
        .pool(false)),
    op!("MAX_POOL_2D", "", |i| i.pool(true)),
    op!("RELU", "", |i| q_or(
        i,
        |i| i.unary_i8(UnaryI8::Relu(0.0, None)),
        |i| i.unary_op(|me, x| me.maximum_with(x, 0.0))
    )),
    op!(
        "RELU6",
        "int8: clamped in the input's quantization, as TFLite Micro does",
        |i| q_or(
            i,
            |i| i.unary_i8(UnaryI8::Relu6),
            |i| i.unary_op(|me, x| me.clamp(x, 0.0, 6.0))
        )
    ),
    op!("RELU_N1_TO_1", "", |i| q_or(
        i,
        |i| i.unary_i8(UnaryI8::Relu(-1.0, Some(1.0))),
        |i| i.unary_op(|me, x| me.clamp(x, -1.0, 1.0))
    )),
    op!("RELU_0_TO_1", "", |i| q_or(
        i,
        |i| i.unary_i8(UnaryI8::Relu(0.0, Some(1.0))),
        |i| i.unary_op(|me, x| me.clamp(x, 0.0, 1.0))
    )),
    op!("LEAKY_RELU", "", |i| i.leaky_relu()),
    op!("PRELU", "alpha broadcast against the input", |i| i.prelu()),
    op!("LOGISTIC", "", |i| q_or(
        i,
        |i| i.unary_i8(UnaryI8::Logistic),
        |i| unary(i, UnaryOp::Logistic)
    )),
    op!("TANH", "", |i| q_or(
        i,
        |i| i.unary_i8(UnaryI8::Tanh),
        |i| unary(i, UnaryOp::Tanh)
    )),
    op!("HARD_SWISH", "", |i| q_or(
        i,
        |i| i.unary_i8(UnaryI8::HardSwish),
        |i| i.unary_op(|me, x| me.hard_swish(x))
    )),
    op!("EXP", "", |i| unary(i, UnaryOp::Exp)),
    op!("LOG", "", |i| unary(i, UnaryOp::Log)),
    op!("SQRT", "", |i| unary(i, UnaryOp::Sqrt)),
    op!("RSQRT", "", |i| q_or(
        i,
        |i| i.unary_i8(UnaryI8::Rsqrt),
        |i| unary(i, UnaryOp::Rsqrt)
    )),
    op!("ABS", "", |i| q_or(
        i,
        |i| i.unary_i8(UnaryI8::Abs),
        |i| unary(i, UnaryOp::Abs)
    )),
    op!("NEG", "", |i| unary(i, UnaryOp::Negate)),
    op!("SOFTMAX", "beta, over the last dim", |i| i.softmax()),
    op!("RESHAPE", "shape input or new_shape, one −1", |i| i
        .reshape()),
    op!("SQUEEZE", "", |i| i.squeeze()),
    op!("EXPAND_DIMS", "", |i| i.expand_dims()),
    op!("CONCATENATION", "fused activation", |i| i.concatenation()),
    op!(
        "TRANSPOSE",
        "no data moves: the layout is relabelled",
        |i| i.transpose()
    ),
    op!("PAD", "", |i| i.pad()),
    op!("PADV2", "constant padding value", |i| i.pad()),
    op!("SLICE", "", |i| i.slice()),
    op!(
        "STRIDED_SLICE",
        "positive strides; begin, end and shrink masks",
        |i| i.strided_slice()
    ),
    op!(
        "TRANSPOSE_CONV",
        "SAME/VALID, strides, bias; the output shape a constant",
        |i| i.transpose_conv()
    ),
    op!("SPLIT", "", |i| i.split()),
    op!("SPLIT_V", "one size may be −1", |i| i.split_v()),
    op!("PACK", "", |i| i.pack()),
    op!("UNPACK", "", |i| i.unpack()),
    op!(
        "GATHER",
        "batch_dims 0; int32 indices, constant or run-time",
        |i| i.gather()
    ),
    op!(
        "RESIZE_BILINEAR",
        "align_corners, half_pixel_centers",
        |i| i.resize(false)
    ),
    op!(
        "RESIZE_NEAREST_NEIGHBOR",
        "align_corners, half_pixel_centers",
        |i| i.resize(true)
    ),
    op!("MEAN", "keep_dims", |i| q_or(
        i,
        |i| i.reduce_i8(true),
        |i| i.reduce(ReduceKind::Add, true)
    )),
    op!("SUM", "keep_dims", |i| q_or(
        i,
        |i| i.reduce_i8(false),
        |i| i.reduce(ReduceKind::Add, false)
    )),
    op!("REDUCE_MAX", "keep_dims", |i| q_or(
        i,
        |i| i.reduce_max_min_i8(ReduceKind::Max),
        |i| i.reduce(ReduceKind::Max, false)
    )),
    op!("REDUCE_MIN", "keep_dims", |i| q_or(
        i,
        |i| i.reduce_max_min_i8(ReduceKind::Min),
        |i| i.reduce(ReduceKind::Min, false)
    )),
    op!(
        "DEQUANTIZE",
        "float16 and int8 weights; run-time int8/uint8",
        |i| i.dequantize()
    ),
    op!(
        "QUANTIZE",
        "float to int8/uint8; between quantizations",
        |i| i.quantize()
    ),
];

/// The declaration of the op called `name`.
pub fn find(name: &str) -> Option<&'static OpDecl> {
    OPS.iter().find(|d| d.name == name)
}

/// The supported op closest in spelling to `name`, for "did you mean".
pub fn closest(name: &str) -> Option<&'static str> {
    crate::util::suggest::nearest(name, OPS.iter().map(|d| d.name))
}
