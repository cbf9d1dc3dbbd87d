//! A module's precision: in which type the weights of its dots and convolutions are stored, and
//! in which type their products are formed (issue 18's `precision` option).
//!
//! Contract:
//! - [`Precision::F32`] (the default) stores every weight as f32.
//! - [`Precision::F16Weights`] and [`Precision::Bf16Weights`] round every f32 constant that is the
//!   weight (rhs) operand of a dot or convolution to the half type (`round`, nearest even, as
//!   `ir/half.rs` converts), after the optimisation pipeline has folded batch norms and constants
//!   into them (`compile/weight_rounding.rs`). Nothing else changes: activations, biases, every
//!   other constant and all arithmetic stay f32, and products accumulate in f32. So the reference
//!   interpreter run on the rounded module computes exactly what the compiled code computes, up to
//!   summation order, and the error against the f32 model is the weights' rounding alone.
//! - Where a CPU kernel reads a weight packed in GEMM or convolution panels
//!   (`codegen/core/packing.rs`) the library stores it in the half type, 2 bytes per value, and
//!   widens it in registers; other weights (Winograd-transformed kernels, depthwise and batched
//!   products) keep their rounded values in f32.
//! - [`Precision::Bf16`] also rounds the weights to bfloat16, and rounds every other operand of
//!   a dot or convolution to bfloat16 too: after the pipeline, a `round-bf16` instruction
//!   (`UnaryOp::RoundBf16`, XLA's `reduce-precision` with 8 exponent and 7 mantissa bits) is put
//!   on each such operand that is not a rounded weight (`compile/bf16_operands.rs`). Products of
//!   bfloat16 values are exact in f32, so the interpreter on that module is the reference up to
//!   summation order whether the target multiplies in f32 (FMA on the rounded values) or with
//!   `vdpbf16ps` (AVX-512 BF16). Everything else (elementwise ops, reductions, softmax,
//!   normalisation statistics, the accumulation itself) stays f32.
//! - [`Precision::F16`] does the same with IEEE half: the weights are rounded to f16 and every
//!   other operand of a dot or convolution gets a `round-f16` (`UnaryOp::RoundF16`). Where the
//!   target has FP16 arithmetic (aarch64 `+fullfp16`, `Target::has_f16_arith`) a dot whose weight
//!   is packed multiplies and accumulates in f16 (`fmla .8h`) within blocks of
//!   `F16_K_BLOCK` consecutive k, each block's sum added into an f32 accumulator
//!   (`codegen/cpu/gemm_f16.rs`); every other product, and every product on other targets,
//!   multiplies the rounded values in f32 (as `bf16` does without `vdpbf16ps`). The PTX of a
//!   CUDA target sums every dot's and convolution's products in the same f16 blocks
//!   (`fma.rn.f16`, `codegen/gpu/half.rs`). Everything else (elementwise ops, reductions,
//!   softmax, normalisation statistics) stays f32.
//! - On a CUDA target the device arena stores the weights of dots and convolutions in the half
//!   type, 2 bytes per value, for every half precision (`Packings::for_gpu`).
//! - [`Precision::Int8Weights`] and [`Precision::Int8WeightsPerTensor`] replace every f32 weight
//!   of a dot or convolution (after the pipeline, as for the half types) by its symmetric int8
//!   quantization `round_half_even(w / s) · s`, with `s = max|w| / 127` per output channel (the
//!   columns of a dot's weight, dim 0 of a convolution kernel) or per tensor
//!   (`compile/weight_rounding.rs`). The rounded module is an ordinary f32 module whose weights
//!   are exactly int8 × scale, which `codegen/core/packing.rs` (`int8_columns`) stores 1 byte
//!   each where a kernel reads them packed, as it stores a QDQ ONNX model's dequantized weights;
//!   so after rounding the module's precision is f32 again. Activations, biases and arithmetic
//!   stay f32. `xla-aot quantize` (`quant/`) uses these with fake-quantized activations.
//! - The text form names it on the module line (`HloModule m, precision=bf16-weights`) when it is
//!   not f32.

use super::{DType, UnaryOp};

/// In which type the weights of dots and convolutions are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// Every weight in f32.
    #[default]
    F32,
    /// Weights rounded to IEEE half precision (stored 2 bytes where a kernel reads them packed).
    F16Weights,
    /// Weights rounded to bfloat16 (stored 2 bytes where a kernel reads them packed).
    Bf16Weights,
    /// Both operands of every dot and convolution rounded to bfloat16 (weights stored 2 bytes
    /// where packed), products accumulated in f32.
    Bf16,
    /// Both operands of every dot and convolution rounded to IEEE half (weights stored 2 bytes
    /// where packed); packed dots multiply and accumulate in f16 within blocks of
    /// [`F16_K_BLOCK`] k on targets with FP16 arithmetic, the blocks summed in f32.
    F16,
    /// Weights rounded to symmetric int8 with one scale per output channel (stored 1 byte where
    /// packed), f32 arithmetic.
    Int8Weights,
    /// Weights rounded to symmetric int8 with one scale per tensor (stored 1 byte where packed),
    /// f32 arithmetic.
    Int8WeightsPerTensor,
}

/// How many consecutive k (from k = 0, in blocks of this many) a `precision: f16` dot sums in f16
/// (`fmla .8h`) before the block's sum is widened and added into the f32 accumulator
/// (`codegen/cpu/gemm_f16.rs`). The f16 sum's rounding error grows with the block (each of its
/// 16 steps rounds at 2⁻¹¹ of the running sum; measured in docs/precision.md), the widening
/// (`fcvtl`, `fcvtl2` and two `fadd` per 8 columns and block) with its inverse: 16 is the shortest
/// block whose widening costs at most a quarter of its `fmla`s.
pub const F16_K_BLOCK: usize = 16;

/// The names `--precision`, `Build::precision`, CMake's `PRECISION` and a spec's `precision:`
/// accept, with what each means.
pub const PRECISIONS: &[(&str, &str)] = &[
    ("f32", "everything in f32 (the default)"),
    (
        "f16-weights",
        "dot and convolution weights stored as IEEE half, f32 arithmetic",
    ),
    (
        "bf16-weights",
        "dot and convolution weights stored as bfloat16, f32 arithmetic",
    ),
    (
        "bf16",
        "dot and convolution operands rounded to bfloat16, products accumulated in f32",
    ),
    (
        "f16",
        "dot and convolution operands rounded to IEEE half; f16 products and sums in blocks of 16 k where the target has FP16 arithmetic (aarch64 +fullfp16, the PTX of CUDA targets), f32 products elsewhere",
    ),
    (
        "int8-weights",
        "dot and convolution weights rounded to symmetric int8 per output channel (1 byte each where packed), f32 arithmetic",
    ),
    (
        "int8-weights-per-tensor",
        "dot and convolution weights rounded to symmetric int8 with one scale per tensor, f32 arithmetic",
    ),
];

impl Precision {
    /// The option's name (`bf16-weights`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16Weights => "f16-weights",
            Precision::Bf16Weights => "bf16-weights",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
            Precision::Int8Weights => "int8-weights",
            Precision::Int8WeightsPerTensor => "int8-weights-per-tensor",
        }
    }

    /// The precision named `s`, or an error listing the names.
    pub fn parse(s: &str) -> Result<Precision, String> {
        match s {
            "f32" => Ok(Precision::F32),
            "f16-weights" => Ok(Precision::F16Weights),
            "bf16-weights" => Ok(Precision::Bf16Weights),
            "bf16" => Ok(Precision::Bf16),
            "f16" => Ok(Precision::F16),
            "int8-weights" => Ok(Precision::Int8Weights),
            "int8-weights-per-tensor" => Ok(Precision::Int8WeightsPerTensor),
            _ => Err(format!(
                "unknown precision `{s}`; expected one of: {}",
                PRECISIONS
                    .iter()
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// The type weights are stored in where a kernel reads them packed (`None`: f32).
    pub fn weight_dtype(self) -> Option<DType> {
        match self {
            Precision::F32 | Precision::Int8Weights | Precision::Int8WeightsPerTensor => None,
            Precision::F16Weights | Precision::F16 => Some(DType::F16),
            Precision::Bf16Weights | Precision::Bf16 => Some(DType::BF16),
        }
    }

    /// Whether every operand of a dot or convolution, not only its weight, is rounded to the
    /// weight type (`compile/bf16_operands.rs`).
    pub fn rounds_operands(self) -> bool {
        self.operand_rounding().is_some()
    }

    /// The unary op that rounds the operands of dots and convolutions (`round-bf16` for `bf16`,
    /// `round-f16` for `f16`), if this precision rounds them.
    pub fn operand_rounding(self) -> Option<UnaryOp> {
        match self {
            Precision::Bf16 => Some(UnaryOp::RoundBf16),
            Precision::F16 => Some(UnaryOp::RoundF16),
            _ => None,
        }
    }

    /// With int8 weights: whether each output channel has its own scale (`None`: not int8).
    pub fn int8_per_channel(self) -> Option<bool> {
        match self {
            Precision::Int8Weights => Some(true),
            Precision::Int8WeightsPerTensor => Some(false),
            _ => None,
        }
    }

    /// `x` rounded to the weight type (nearest even) and widened back: what a weight of this
    /// precision holds. Identity for f32 and the int8 precisions (whose rounding depends on the
    /// whole channel: `compile/weight_rounding.rs`).
    pub fn round(self, x: f32) -> f32 {
        use super::half::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
        match self {
            Precision::F32 | Precision::Int8Weights | Precision::Int8WeightsPerTensor => x,
            Precision::F16Weights | Precision::F16 => f16_to_f32(f32_to_f16(x)),
            Precision::Bf16Weights | Precision::Bf16 => bf16_to_f32(f32_to_bf16(x)),
        }
    }

    /// The 2-byte pattern of `x` in the weight type (`x` already rounded; f32 has none).
    pub fn half_bits(self, x: f32) -> Option<u16> {
        use super::half::{f32_to_bf16, f32_to_f16};
        match self {
            Precision::F32 | Precision::Int8Weights | Precision::Int8WeightsPerTensor => None,
            Precision::F16Weights | Precision::F16 => Some(f32_to_f16(x)),
            Precision::Bf16Weights | Precision::Bf16 => Some(f32_to_bf16(x)),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (n, _) in PRECISIONS {
            assert_eq!(Precision::parse(n).unwrap().name(), *n);
        }
        assert_eq!(Precision::parse("f16"), Ok(Precision::F16));
        assert_eq!(Precision::parse("bf16"), Ok(Precision::Bf16));
        assert!(Precision::parse("fp8").unwrap_err().contains("f16-weights"));
    }

    #[test]
    fn rounding_is_nearest_even() {
        let p = Precision::Bf16Weights;
        assert_eq!(p.round(1.0 + 2f32.powi(-8)), 1.0);
        assert_eq!(p.round(1.0 + 3.0 * 2f32.powi(-8)), 1.0 + 2f32.powi(-6));
        let h = Precision::F16Weights;
        assert_eq!(h.round(1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(h.round(0.1), 0.099975586);
        assert_eq!(Precision::F32.round(0.1), 0.1);
    }
}
