//! HLO instructions: the primitive vocabulary every pass and backend sees.
//!
//! Contract: an [`Instruction`] is one SSA value: a unique name, an [`Op`] (opcode plus its
//! attributes), operands that refer to *earlier* instructions of the same computation by [`InstId`],
//! and the [`Shape`] of its result. The vocabulary is deliberately small (XLA-like): every spec op
//! lowers to these primitives, so passes and backends handle one set of opcodes. Operand order and the
//! meaning of each attribute are documented on each variant; `docs/hlo.md` gives the text form.

pub mod table;

use super::literal::Literal;
use super::shape::Shape;
use std::fmt;

/// Index of an instruction inside its computation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstId(pub u32);

impl InstId {
    /// The index as `usize`.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Elementwise functions of one operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Negate,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    /// 1 / (1 + e^-x).
    Logistic,
    /// The Gauss error function.
    Erf,
    /// log(1 + eˣ), without overflow: max(x, 0) + log1p(e^-|x|).
    Softplus,
    /// sin x (radians).
    Sine,
    /// cos x (radians).
    Cosine,
    /// x rounded to bfloat16 (nearest even, NaN stays NaN) and widened back to f32: XLA's
    /// `reduce-precision` with `exponent_bits=8, mantissa_bits=7`. `precision: bf16` puts it on
    /// the operands of dots and convolutions (`compile/bf16_operands.rs`).
    RoundBf16,
    /// x rounded to IEEE half (nearest even, beyond ±65504 to ±infinity, NaN stays NaN) and
    /// widened back to f32: `reduce-precision` with `exponent_bits=5, mantissa_bits=10`.
    /// `precision: f16` puts it on the operands of dots and convolutions
    /// (`compile/bf16_operands.rs`).
    RoundF16,
}

/// Elementwise functions of two operands of the same shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Subtract,
    Multiply,
    Divide,
    Maximum,
    Minimum,
    Power,
}

/// Comparison of `compare`; the result is `pred`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompareDir {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// Combiner of `reduce` and `reduce-window`; its identity is the initial value
/// (0 for `add`, -inf for `max`, +inf for `min`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceKind {
    Add,
    Max,
    Min,
}

/// A sliding window, one entry per windowed dimension.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Window {
    /// Window extent per dimension.
    pub size: Vec<usize>,
    /// Step between window positions.
    pub stride: Vec<usize>,
    /// Padding before the first element.
    pub pad_low: Vec<usize>,
    /// Padding after the last element.
    pub pad_high: Vec<usize>,
    /// Spacing between window taps (1 = dense).
    pub dilation: Vec<usize>,
}

impl Window {
    /// A dense window with unit stride, no padding.
    pub fn new(size: Vec<usize>) -> Window {
        let n = size.len();
        Window {
            size,
            stride: vec![1; n],
            pad_low: vec![0; n],
            pad_high: vec![0; n],
            dilation: vec![1; n],
        }
    }

    /// Number of windowed dimensions.
    pub fn rank(&self) -> usize {
        self.size.len()
    }

    /// Whether all per-dimension lists have the same length.
    pub fn is_consistent(&self) -> bool {
        let n = self.size.len();
        self.stride.len() == n
            && self.pad_low.len() == n
            && self.pad_high.len() == n
            && self.dilation.len() == n
    }

    /// Output extent along dimension `i` for an input extent `input`, or `None` when the dilated
    /// window does not fit in the padded input or a field is zero.
    pub fn output_extent(&self, i: usize, input: usize) -> Option<usize> {
        if self.size[i] == 0 || self.stride[i] == 0 || self.dilation[i] == 0 {
            return None;
        }
        let padded = input
            .checked_add(self.pad_low[i])?
            .checked_add(self.pad_high[i])?;
        let span = self.dilation[i]
            .checked_mul(self.size[i] - 1)?
            .checked_add(1)?;
        if span > padded {
            return None;
        }
        Some((padded - span) / self.stride[i] + 1)
    }
}

/// Dimension numbers of a `dot` (XLA's DotGeneral). The result dims are the batch dims, then the
/// lhs dims that are neither batch nor contracting, then the same for the rhs, each in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct DotDims {
    pub lhs_batch: Vec<usize>,
    pub lhs_contracting: Vec<usize>,
    pub rhs_batch: Vec<usize>,
    pub rhs_contracting: Vec<usize>,
}

/// An opcode with its attributes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    /// Entry parameter number `index` (a model input, in spec order). No operands.
    Parameter { index: usize },
    /// A literal constant (weights, inline constants). No operands.
    Constant(Literal),
    /// `f(x)` elementwise. Operands: `[x]`.
    Unary(UnaryOp),
    /// `f(a, b)` elementwise, same shapes. Operands: `[a, b]`.
    Binary(BinaryOp),
    /// Elementwise change of element type to `to` (`pred`, `i32`, `f32`): f32 → i32 rounds toward
    /// zero and saturates (NaN gives 0), anything → pred is `x != 0`, pred → number is 0 or 1.
    /// Operands: `[x]`.
    Convert { to: super::shape::DType },
    /// Elementwise comparison giving `pred`: floats ordered (a NaN operand gives false, except
    /// for `NE`), `i32` signed, `pred` with false < true. Operands: `[a, b]` of one element type.
    Compare(CompareDir),
    /// `pred ? on_true : on_false` elementwise. Operands: `[pred, on_true, on_false]`.
    Select,
    /// `min(max(x, lo), hi)` elementwise; `lo`/`hi` scalars or the shape of `x`.
    /// Operands: `[lo, x, hi]` (XLA order).
    Clamp,
    /// `a · b + c` elementwise with one rounding (IEEE fusedMultiplyAdd), f32 operands of one
    /// shape. Operands: `[a, b, c]`. (Not an XLA opcode: a quantized add computes with it as
    /// onnxruntime's kernels do, `front/onnx/quant.rs`.)
    Fma,
    /// TFLite's fixed-point requantization of int32 `x` by a Q31 multiplier `m` and a power-of-two
    /// `shift`, elementwise: `MultiplyByQuantizedMultiplier(x, m, shift)` with its double rounding
    /// (`ir/fixed_point.rs` defines it). Operands: `[x, m, shift]`, i32 of one shape. (Not an XLA
    /// opcode: TFLite's integer kernels requantize with it, `front/tflite/`.)
    MulQ31,
    /// Operand dim `i` becomes result dim `dimensions[i]` (strictly increasing); the other result
    /// dims replicate, and an operand dim of extent 1 stretches to any extent (numpy-style).
    /// Operands: `[x]`.
    Broadcast { dimensions: Vec<usize> },
    /// Same elements in row-major order, new dims. Operands: `[x]`.
    Reshape,
    /// Result dim `i` is operand dim `permutation[i]`. Operands: `[x]`.
    Transpose { permutation: Vec<usize> },
    /// `x[start:limit:stride]` per dim (`stride > 0`, `start <= limit <= dim`). Operands: `[x]`.
    Slice {
        starts: Vec<usize>,
        limits: Vec<usize>,
        strides: Vec<usize>,
    },
    /// Edge padding with a scalar value. Operands: `[x, value]`.
    Pad { low: Vec<usize>, high: Vec<usize> },
    /// Joins operands along `dimension`; other dims equal. Operands: one or more.
    Concatenate { dimension: usize },
    /// Reduces away `dimensions` (sorted, unique) with `kind`. Operands: `[x]`.
    Reduce {
        kind: ReduceKind,
        dimensions: Vec<usize>,
    },
    /// Sliding-window reduction over every dim of the operand; padded cells hold the identity
    /// of `kind`. Operands: `[x]`.
    ReduceWindow { kind: ReduceKind, window: Window },
    /// General matrix product (see [`DotDims`]). Operands: `[lhs, rhs]`.
    Dot(DotDims),
    /// 2-D (or N-D) convolution, input `[N, C, spatial...]`, kernel `[O, C/groups, window...]`,
    /// result `[N, O, spatial...]` (`dim_labels=bf01_oi01->bf01`). Operands: `[input, kernel]`.
    Convolution {
        window: Window,
        feature_group_count: usize,
    },
    /// Index (i32) of the first maximum along `dimension`, which is removed. Operands: `[x]`.
    Argmax { dimension: usize },
    /// The `k` largest elements along the last dimension, largest first (ties: lower index
    /// first; NaN above every number): the values (f32 result) or their indices (i32 result), the
    /// last dimension becoming `k`. Operands: `[x]`.
    TopK { k: usize, indices: bool },
    /// A token drawn from each row (last dimension) of logits: temperature scaling, top-k and
    /// top-p (nucleus) filtering, then one Philox-4x32-10 draw keyed by `seed` and counted by
    /// `step` and the row. The exact definition is in `docs/sampling.md`; result i32, the logits'
    /// dims without the last. Operands: `[logits, seed, step, temperature, top_k, top_p]` (all but
    /// the logits are scalars: i32 seed, step and top_k; f32 temperature and top_p).
    Sample,
    /// Rows of a table: result = `indices.dims ++ table.dims[1..]`; indices (i32) are clamped into
    /// `[0, table.dims[0])`. Operands: `[table, indices]`.
    Gather,
    /// A fused computation run as one kernel: its parameter `i` is operand `i`, its single output
    /// is the result. Operands: any number.
    Fusion {
        kind: FusionKind,
        computation: Box<Computation>,
    },
}

/// How a fused computation is computed (XLA's fusion kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FusionKind {
    /// Elementwise chains: one loop over the output computing every element from the inputs.
    Loop,
    /// A reduction (or windowed reduction) whose operand is computed inline from the inputs.
    Input,
    /// A dot or convolution with an elementwise epilogue applied to its output in place.
    Output,
}

impl FusionKind {
    /// Every kind.
    pub const ALL: [FusionKind; 3] = [FusionKind::Loop, FusionKind::Input, FusionKind::Output];

    /// The name printed in `kind=`.
    pub fn name(self) -> &'static str {
        match self {
            FusionKind::Loop => "loop",
            FusionKind::Input => "input",
            FusionKind::Output => "output",
        }
    }
}

impl Op {
    /// The opcode as printed in HLO text.
    pub fn opcode(&self) -> &'static str {
        match self {
            Op::Parameter { .. } => "parameter",
            Op::Constant(_) => "constant",
            Op::Unary(u) => u.info().opcode,
            Op::Binary(b) => b.info().opcode,
            Op::Convert { .. } => "convert",
            Op::Compare(_) => "compare",
            Op::Select => "select",
            Op::Clamp => "clamp",
            Op::Fma => "fma",
            Op::MulQ31 => "multiply-q31",
            Op::Broadcast { .. } => "broadcast",
            Op::Reshape => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Slice { .. } => "slice",
            Op::Pad { .. } => "pad",
            Op::Concatenate { .. } => "concatenate",
            Op::Reduce { .. } => "reduce",
            Op::ReduceWindow { .. } => "reduce-window",
            Op::Dot(_) => "dot",
            Op::Convolution { .. } => "convolution",
            Op::Argmax { .. } => "argmax",
            Op::TopK { .. } => "top-k",
            Op::Sample => "sample",
            Op::Gather => "gather",
            Op::Fusion { .. } => "fusion",
        }
    }

    /// Whether this op is applied independently to each element (`table::Class::Elementwise`).
    pub fn is_elementwise(&self) -> bool {
        match self {
            Op::Unary(_) | Op::Binary(_) => true,
            _ => table::opcode_info(self.opcode())
                .is_some_and(|i| i.class == table::Class::Elementwise),
        }
    }

    /// The number of operands the op takes, or `None` when variadic (`concatenate`, `fusion`):
    /// the op table's arity.
    pub fn arity(&self) -> Option<usize> {
        match self {
            Op::Unary(_) => Some(1),
            Op::Binary(_) => Some(2),
            _ => table::opcode_info(self.opcode()).and_then(|i| i.arity),
        }
    }
}

impl CompareDir {
    /// Every direction.
    pub const ALL: [CompareDir; 6] = [
        CompareDir::Eq,
        CompareDir::Ne,
        CompareDir::Lt,
        CompareDir::Le,
        CompareDir::Gt,
        CompareDir::Ge,
    ];

    /// The name printed in `direction=`.
    pub fn name(self) -> &'static str {
        match self {
            CompareDir::Eq => "EQ",
            CompareDir::Ne => "NE",
            CompareDir::Lt => "LT",
            CompareDir::Le => "LE",
            CompareDir::Gt => "GT",
            CompareDir::Ge => "GE",
        }
    }
}

impl ReduceKind {
    /// Every kind.
    pub const ALL: [ReduceKind; 3] = [ReduceKind::Add, ReduceKind::Max, ReduceKind::Min];

    /// The name printed in `kind=`.
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Add => "add",
            ReduceKind::Max => "max",
            ReduceKind::Min => "min",
        }
    }
}

/// One SSA value of a computation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Instruction {
    /// Unique within the computation; printed as `%name`.
    pub name: String,
    /// Opcode and attributes.
    pub op: Op,
    /// Earlier instructions this one reads.
    pub operands: Vec<InstId>,
    /// Result type.
    pub shape: Shape,
}

impl fmt::Display for InstId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_extent_matches_the_conv_formula() {
        let mut w = Window::new(vec![3]);
        w.pad_low = vec![1];
        w.pad_high = vec![1];
        assert_eq!(w.output_extent(0, 32), Some(32));
        w.stride = vec![2];
        assert_eq!(w.output_extent(0, 64), Some(32));
        w.dilation = vec![20];
        assert_eq!(w.output_extent(0, 8), None);
    }
}

/// A named result of a computation; the name is the one the C API and `.npy` outputs use.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Output {
    /// Output name (from the spec's `outputs`).
    pub name: String,
    /// The instruction that produces it.
    pub value: InstId,
}

/// A list of instructions in topological order, and its outputs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Computation {
    /// Computation name (`main` for the entry).
    pub name: String,
    /// Instructions; an instruction's operands have smaller indices.
    pub instructions: Vec<Instruction>,
    /// The values the computation returns, in order (printed as the ROOT tuple).
    pub outputs: Vec<Output>,
}

impl Computation {
    /// The instruction with a given id.
    pub fn inst(&self, id: InstId) -> &Instruction {
        &self.instructions[id.index()]
    }

    /// Ids of all instructions in order.
    pub fn ids(&self) -> impl Iterator<Item = InstId> + '_ {
        (0..self.instructions.len()).map(|i| InstId(i as u32))
    }

    /// The parameters in index order.
    pub fn parameters(&self) -> Vec<InstId> {
        let mut params: Vec<(usize, InstId)> = self
            .ids()
            .filter_map(|id| match self.inst(id).op {
                Op::Parameter { index } => Some((index, id)),
                _ => None,
            })
            .collect();
        params.sort();
        params.into_iter().map(|(_, id)| id).collect()
    }

    /// Finds an instruction by name.
    pub fn find(&self, name: &str) -> Option<InstId> {
        self.instructions
            .iter()
            .position(|i| i.name == name)
            .map(|i| InstId(i as u32))
    }
}
