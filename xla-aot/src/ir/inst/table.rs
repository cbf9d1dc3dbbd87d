//! The op table: every HLO opcode declared once, with what the rest of the compiler derives
//! from it (a part of `inst.rs`, whose `Op` it describes).
//!
//! Contract: [`OPCODES`] lists every opcode of the IR with its operand count, its shape class
//! (elementwise, index remap, or neither) and, for the opcodes without attributes, the op it
//! parses to. [`UNARY`] and [`BINARY`] list the elementwise functions in the order of their enums
//! with the opcode, the per-element cost class and the reference semantics in f64 (what the
//! interpreter computes). Everything that needs a list of opcodes reads these tables: the text
//! parser (`ir/parse.rs`), `Op::opcode` and `Op::arity` (and through it the verifier and shape
//! inference), the fusion cost model (`passes/fusion.rs`), the interpreter's elementwise
//! functions, the HLO text importer's supported set and the op battery. `docs/adding-an-op.md`
//! walks a new op through every file that must change.

use super::{BinaryOp, Op, UnaryOp};

/// How much one element of an op costs, in "simple arithmetic op" units (the fusion cost model,
/// `passes/fusion.rs`, weighs recomputation against memory traffic with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// Index remaps and simple arithmetic: one unit.
    Simple,
    /// Division and square roots: about four (multi-cycle units on the cores we target).
    MultiCycle,
    /// The inline polynomials of `codegen/math.rs` (`exp`, `log`, `tanh`, `erf`, ...): 15–25
    /// operations each, counted as 20.
    Transcendental,
    /// Two of those polynomials (`pow` = an `exp` of a `log` with the sign and integer-exponent
    /// handling; `softplus` = a `log1p` of an `exp`): 40.
    TwoTranscendental,
}

impl Cost {
    /// The cost in simple-op units.
    pub const fn units(self) -> u32 {
        match self {
            Cost::Simple => 1,
            Cost::MultiCycle => 4,
            Cost::Transcendental => 20,
            Cost::TwoTranscendental => 40,
        }
    }
}

/// How an op's output elements relate to its operands' elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Element `i` of the output is a function of element `i` of each operand.
    Elementwise,
    /// Each output element is one operand element moved (or a pad value): fusible loops.
    Remap,
    /// Anything else (reductions, products, windows, the sampler, ...).
    Other,
}

/// One opcode of the IR.
#[derive(Debug, Clone)]
pub struct OpcodeInfo {
    /// The opcode as printed in HLO text.
    pub opcode: &'static str,
    /// Operands it takes; `None` when variadic.
    pub arity: Option<usize>,
    /// How its elements relate to its operands'.
    pub class: Class,
    /// The op, for an opcode with no attributes (the parser needs nothing else).
    pub bare: Option<Op>,
}

const fn opcode(opcode: &'static str, arity: usize, class: Class) -> OpcodeInfo {
    OpcodeInfo {
        opcode,
        arity: Some(arity),
        class,
        bare: None,
    }
}

const fn bare(opcode: &'static str, arity: usize, class: Class, op: Op) -> OpcodeInfo {
    OpcodeInfo {
        opcode,
        arity: Some(arity),
        class,
        bare: Some(op),
    }
}

/// Every opcode but the elementwise functions of [`UNARY`] and [`BINARY`], in the order the
/// parser's error lists them.
pub const OPCODES: &[OpcodeInfo] = &[
    opcode("parameter", 0, Class::Other),
    opcode("constant", 0, Class::Other),
    opcode("compare", 2, Class::Elementwise),
    bare("select", 3, Class::Elementwise, Op::Select),
    bare("clamp", 3, Class::Elementwise, Op::Clamp),
    bare("fma", 3, Class::Elementwise, Op::Fma),
    bare("multiply-q31", 3, Class::Elementwise, Op::MulQ31),
    opcode("convert", 1, Class::Elementwise),
    opcode("broadcast", 1, Class::Remap),
    bare("reshape", 1, Class::Remap, Op::Reshape),
    opcode("transpose", 1, Class::Remap),
    opcode("slice", 1, Class::Remap),
    opcode("pad", 2, Class::Remap),
    OpcodeInfo {
        opcode: "concatenate",
        arity: None,
        class: Class::Remap,
        bare: None,
    },
    opcode("reduce", 1, Class::Other),
    opcode("reduce-window", 1, Class::Other),
    opcode("dot", 2, Class::Other),
    opcode("convolution", 2, Class::Other),
    opcode("argmax", 1, Class::Other),
    opcode("top-k", 1, Class::Other),
    bare("sample", 6, Class::Other, Op::Sample),
    bare("gather", 2, Class::Remap, Op::Gather),
    OpcodeInfo {
        opcode: "fusion",
        arity: None,
        class: Class::Other,
        bare: None,
    },
];

/// Where a unary function is defined (the op battery draws its test inputs there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    /// Every finite number.
    All,
    /// Positive numbers (`log`, `sqrt`, `rsqrt`).
    Positive,
}

/// One elementwise function of one operand.
#[derive(Debug, Clone, Copy)]
pub struct UnaryInfo {
    /// The op (the table is in the enum's order).
    pub op: UnaryOp,
    /// Its HLO opcode.
    pub opcode: &'static str,
    /// Per-element cost.
    pub cost: Cost,
    /// Where it is defined.
    pub domain: Domain,
    /// The exact result in f64 (the interpreter rounds it to f32).
    pub reference: fn(f64) -> f64,
}

/// Every unary function, in [`UnaryOp`]'s order.
pub const UNARY: &[UnaryInfo] = &[
    unary(UnaryOp::Negate, "negate", Cost::Simple, Domain::All, |x| -x),
    unary(UnaryOp::Abs, "abs", Cost::Simple, Domain::All, f64::abs),
    unary(
        UnaryOp::Exp,
        "exponential",
        Cost::Transcendental,
        Domain::All,
        f64::exp,
    ),
    unary(
        UnaryOp::Log,
        "log",
        Cost::Transcendental,
        Domain::Positive,
        f64::ln,
    ),
    unary(
        UnaryOp::Sqrt,
        "sqrt",
        Cost::MultiCycle,
        Domain::Positive,
        f64::sqrt,
    ),
    unary(
        UnaryOp::Rsqrt,
        "rsqrt",
        Cost::MultiCycle,
        Domain::Positive,
        // Two f32 roundings, as the compiled code computes it (`sqrt`, then `1 / s`) and as
        // onnxruntime's BatchNormalization does: a folded batch-norm scale then has the bits
        // a run-time one has (one f64 rounding differed in the last bit, and the QDQ resnet50
        // with float batch-norm biases landed a quantization step away on 2 of 802816 values).
        |x| 1.0 / f64::from(x.sqrt() as f32),
    ),
    unary(
        UnaryOp::Tanh,
        "tanh",
        Cost::Transcendental,
        Domain::All,
        f64::tanh,
    ),
    unary(
        UnaryOp::Logistic,
        "logistic",
        Cost::Transcendental,
        Domain::All,
        |x| 1.0 / (1.0 + (-x).exp()),
    ),
    unary(
        UnaryOp::Erf,
        "erf",
        Cost::Transcendental,
        Domain::All,
        libm::erf,
    ),
    unary(
        UnaryOp::Softplus,
        "softplus",
        Cost::TwoTranscendental,
        Domain::All,
        |x| x.max(0.0) + (-x.abs()).exp().ln_1p(),
    ),
    unary(
        UnaryOp::Sine,
        "sine",
        Cost::Transcendental,
        Domain::All,
        f64::sin,
    ),
    unary(
        UnaryOp::Cosine,
        "cosine",
        Cost::Transcendental,
        Domain::All,
        f64::cos,
    ),
    unary(
        UnaryOp::RoundBf16,
        "round-bf16",
        Cost::Simple,
        Domain::All,
        |x| crate::ir::half::bf16_to_f32(crate::ir::half::f32_to_bf16(x as f32)) as f64,
    ),
    unary(
        UnaryOp::RoundF16,
        "round-f16",
        Cost::Simple,
        Domain::All,
        |x| crate::ir::half::f16_to_f32(crate::ir::half::f32_to_f16(x as f32)) as f64,
    ),
];

const fn unary(
    op: UnaryOp,
    opcode: &'static str,
    cost: Cost,
    domain: Domain,
    reference: fn(f64) -> f64,
) -> UnaryInfo {
    UnaryInfo {
        op,
        opcode,
        cost,
        domain,
        reference,
    }
}

/// One elementwise function of two operands of the same shape.
#[derive(Debug, Clone, Copy)]
pub struct BinaryInfo {
    /// The op (the table is in the enum's order).
    pub op: BinaryOp,
    /// Its HLO opcode.
    pub opcode: &'static str,
    /// Per-element cost.
    pub cost: Cost,
    /// The exact result in f64 (the interpreter rounds it to f32).
    pub reference: fn(f64, f64) -> f64,
}

/// Every binary function, in [`BinaryOp`]'s order.
pub const BINARY: &[BinaryInfo] = &[
    binary(BinaryOp::Add, "add", Cost::Simple, |x, y| x + y),
    binary(BinaryOp::Subtract, "subtract", Cost::Simple, |x, y| x - y),
    binary(BinaryOp::Multiply, "multiply", Cost::Simple, |x, y| x * y),
    binary(BinaryOp::Divide, "divide", Cost::MultiCycle, |x, y| x / y),
    // NaN propagates, as in XLA and numpy.
    binary(BinaryOp::Maximum, "maximum", Cost::Simple, |x, y| {
        if x.is_nan() || y.is_nan() {
            f64::NAN
        } else {
            x.max(y)
        }
    }),
    binary(BinaryOp::Minimum, "minimum", Cost::Simple, |x, y| {
        if x.is_nan() || y.is_nan() {
            f64::NAN
        } else {
            x.min(y)
        }
    }),
    binary(BinaryOp::Power, "power", Cost::TwoTranscendental, f64::powf),
];

const fn binary(
    op: BinaryOp,
    opcode: &'static str,
    cost: Cost,
    reference: fn(f64, f64) -> f64,
) -> BinaryInfo {
    BinaryInfo {
        op,
        opcode,
        cost,
        reference,
    }
}

impl UnaryOp {
    /// Its row of [`UNARY`].
    pub fn info(self) -> &'static UnaryInfo {
        &UNARY[self as usize]
    }

    /// Every unary op, in order.
    pub fn all() -> impl Iterator<Item = UnaryOp> {
        UNARY.iter().map(|i| i.op)
    }
}

impl BinaryOp {
    /// Its row of [`BINARY`].
    pub fn info(self) -> &'static BinaryInfo {
        &BINARY[self as usize]
    }

    /// Every binary op, in order.
    pub fn all() -> impl Iterator<Item = BinaryOp> {
        BINARY.iter().map(|i| i.op)
    }

    /// Whether the op also takes i32 operands (wrapping two's-complement `add`, `subtract` and
    /// `multiply`; `maximum`, `minimum`): the integer arithmetic of TFLite's quantized kernels.
    pub fn takes_i32(self) -> bool {
        matches!(
            self,
            BinaryOp::Add
                | BinaryOp::Subtract
                | BinaryOp::Multiply
                | BinaryOp::Maximum
                | BinaryOp::Minimum
        )
    }

    /// The op on two i32 values (two's complement, wrapping), for an op that [`Self::takes_i32`].
    pub fn eval_i32(self, a: i32, b: i32) -> i32 {
        match self {
            BinaryOp::Add => a.wrapping_add(b),
            BinaryOp::Subtract => a.wrapping_sub(b),
            BinaryOp::Multiply => a.wrapping_mul(b),
            BinaryOp::Maximum => a.max(b),
            BinaryOp::Minimum => a.min(b),
            BinaryOp::Divide | BinaryOp::Power => 0,
        }
    }
}

/// The row of `opcode` in [`OPCODES`] (not the elementwise functions).
pub fn opcode_info(opcode: &str) -> Option<&'static OpcodeInfo> {
    OPCODES.iter().find(|i| i.opcode == opcode)
}

/// Every opcode of the IR: [`OPCODES`], then the unary and binary functions.
pub fn all_opcodes() -> impl Iterator<Item = &'static str> {
    OPCODES
        .iter()
        .map(|i| i.opcode)
        .chain(UNARY.iter().map(|i| i.opcode))
        .chain(BINARY.iter().map(|i| i.opcode))
}

/// The op an attribute-free opcode parses to (`None` for unknown opcodes and those that need
/// attributes).
pub fn bare_op(opcode: &str) -> Option<Op> {
    UNARY
        .iter()
        .find(|i| i.opcode == opcode)
        .map(|i| Op::Unary(i.op))
        .or_else(|| {
            BINARY
                .iter()
                .find(|i| i.opcode == opcode)
                .map(|i| Op::Binary(i.op))
        })
        .or_else(|| opcode_info(opcode).and_then(|i| i.bare.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_in_enum_order_and_opcodes_are_unique() {
        for (i, u) in UNARY.iter().enumerate() {
            assert_eq!(u.op as usize, i, "UNARY row {i} ({})", u.opcode);
        }
        for (i, b) in BINARY.iter().enumerate() {
            assert_eq!(b.op as usize, i, "BINARY row {i} ({})", b.opcode);
        }
        let mut seen = std::collections::HashSet::new();
        for o in all_opcodes() {
            assert!(seen.insert(o), "opcode `{o}` declared twice");
        }
    }

    #[test]
    fn every_bare_op_prints_as_its_opcode() {
        for o in all_opcodes() {
            if let Some(op) = bare_op(o) {
                assert_eq!(op.opcode(), o);
            }
        }
    }
}
