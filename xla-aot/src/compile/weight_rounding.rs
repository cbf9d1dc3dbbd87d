//! Rounds the weights of a module whose precision is not f32 (`ir/precision.rs`).
//!
//! Contract: [`round_weights`] replaces every f32 constant that is the weight (rhs) operand of a
//! dot or convolution (itself an entry instruction or the heavy op of an output fusion, as
//! `codegen/core/packing.rs` finds them) by its values rounded to the module's weight type, still
//! as an f32 literal; it runs after the optimisation pipeline (batch norms and constants are
//! folded into the weights by then) and before the backends, so the optimised module the
//! interpreter can run holds exactly the values the library stores. A finite weight that the
//! weight type cannot hold (beyond ±65504 in f16) is an error naming the constant.
//!
//! With int8 weights (`Precision::Int8Weights`, `Int8WeightsPerTensor`) each such weight becomes
//! `round_half_even(w / s) · s` in f32 with `s = max|w| / 127` over its output channel (every
//! value of one column of a dot's weight: one index of its non-contracting dims; one index of
//! dim 0 of a convolution kernel `[O, C/G, window...]`) or over the tensor; a channel of zeros
//! stays zero. Then the module's precision is set back to f32: its weights are exactly int8 ×
//! scale, which `codegen/core/packing.rs` (`int8_columns`) recognises and stores 1 byte each, as
//! it does a QDQ model's dequantized weights.

use crate::codegen::core::packing::heavy_in;
use crate::ir::{DType, DotDims, InstId, Literal, Module, Op, Precision};

/// The largest magnitude of a symmetric int8 value: scales are `max|w| / INT8_SYMMETRIC_MAX` so
/// that -128 is never used (onnxruntime's and TensorRT's symmetric weight quantization).
pub const INT8_SYMMETRIC_MAX: f32 = 127.0;

/// Why the weights cannot be rounded.
#[derive(Debug, thiserror::Error)]
#[error(
    "constant `{name}` holds {value}, which {precision} cannot store (largest f16: 65504); \
     compile with --precision bf16-weights (f32's range) or f32"
)]
pub struct RoundingError {
    /// The constant.
    pub name: String,
    /// The first value out of range.
    pub value: f32,
    /// The module's precision.
    pub precision: Precision,
}

/// Rounds `m`'s dot and convolution weights to `m.precision`; how many constants it rounded.
pub fn round_weights(m: &mut Module) -> Result<usize, RoundingError> {
    let p = m.precision;
    if p == Precision::F32 {
        return Ok(0);
    }
    if let Some(per_channel) = p.int8_per_channel() {
        let n = int8_weights(m, per_channel);
        m.precision = Precision::F32;
        return Ok(n);
    }
    let n = m.entry.instructions.len();
    let mut weight = vec![false; n];
    for i in 0..n {
        if let Some((_, _, rhs, _)) = heavy_in(m, InstId(i as u32)) {
            let inst = m.entry.inst(rhs);
            weight[rhs.index()] =
                matches!(inst.op, Op::Constant(_)) && inst.shape.dtype == DType::F32;
        }
    }
    let mut rounded = 0;
    for (i, inst) in m.entry.instructions.iter_mut().enumerate() {
        if !weight[i] {
            continue;
        }
        let Op::Constant(lit) = &inst.op else {
            continue;
        };
        let Some(values) = lit.to_f32_vec() else {
            continue;
        };
        let mut out = Vec::with_capacity(values.len());
        for v in values {
            let r = p.round(v);
            if r.is_infinite() && v.is_finite() {
                return Err(RoundingError {
                    name: inst.name.clone(),
                    value: v,
                    precision: p,
                });
            }
            out.push(r);
        }
        inst.op = Op::Constant(Literal::from_f32(lit.dims.clone(), &out));
        rounded += 1;
    }
    Ok(rounded)
}

/// Output channel of every element of a weight `dims` (row-major) read as the rhs of `op`, and
/// the number of channels: a dot's columns (its rhs dims that are not contracting), a
/// convolution's dim 0.
fn channels(op: &Op, dims: &[usize]) -> (Vec<usize>, usize) {
    let n: usize = dims.iter().product();
    let free: Vec<usize> = match op {
        Op::Dot(DotDims {
            rhs_contracting, ..
        }) => (0..dims.len())
            .filter(|d| !rhs_contracting.contains(d))
            .collect(),
        _ if dims.is_empty() => vec![],
        _ => vec![0],
    };
    let count: usize = free.iter().map(|&d| dims[d]).product();
    let mut strides = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    let of = |e: usize| {
        free.iter()
            .fold(0, |c, &d| c * dims[d] + (e / strides[d]) % dims[d])
    };
    ((0..n).map(of).collect(), count)
}

/// `values` rounded to symmetric int8 with one scale per channel (`channel[e]` of each element,
/// `count` channels): `round_half_even(w / s) · s`, `s = max|w| / 127`.
pub fn int8_round(values: &[f32], channel: &[usize], count: usize) -> Vec<f32> {
    let mut max = vec![0f32; count];
    for (v, &c) in values.iter().zip(channel) {
        max[c] = max[c].max(v.abs());
    }
    let scale: Vec<f32> = max.iter().map(|m| m / INT8_SYMMETRIC_MAX).collect();
    values
        .iter()
        .zip(channel)
        .map(|(&w, &c)| {
            let s = scale[c];
            if s == 0.0 || !s.is_finite() {
                return w;
            }
            (w / s)
                .round_ties_even()
                .clamp(-INT8_SYMMETRIC_MAX, INT8_SYMMETRIC_MAX)
                * s
        })
        .collect()
}

/// Rounds every f32 weight of a dot or convolution to int8 × scale; how many constants.
fn int8_weights(m: &mut Module, per_channel: bool) -> usize {
    let n = m.entry.instructions.len();
    let mut weight: Vec<Option<Op>> = vec![None; n];
    for i in 0..n {
        if let Some((op, _, rhs, _)) = heavy_in(m, InstId(i as u32)) {
            let inst = m.entry.inst(rhs);
            if matches!(inst.op, Op::Constant(_))
                && inst.shape.dtype == DType::F32
                && weight[rhs.index()].is_none()
            {
                weight[rhs.index()] = Some(op);
            }
        }
    }
    let mut rounded = 0;
    for (inst, op) in m.entry.instructions.iter_mut().zip(weight) {
        let (Some(op), Op::Constant(lit)) = (op, &inst.op) else {
            continue;
        };
        let Some(values) = lit.to_f32_vec() else {
            continue;
        };
        let (channel, count) = if per_channel {
            channels(&op, &lit.dims)
        } else {
            (vec![0; values.len()], 1)
        };
        let out = int8_round(&values, &channel, count);
        inst.op = Op::Constant(Literal::from_f32(lit.dims.clone(), &out));
        rounded += 1;
    }
    rounded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(w: &[f32], p: Precision) -> Module {
        let text = format!(
            "HloModule m, precision={p}\n\nENTRY %main {{\n  \
             %x = f32[1,2]{{1,0}} parameter(0)\n  \
             %w = f32[2,2]{{1,0}} constant({{{}, {}, {}, {}}})\n  \
             %b = f32[2]{{0}} constant({{{}, {}}})\n  \
             %y = f32[1,2]{{1,0}} dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n  \
             %z = f32[1,2]{{1,0}} add(%y, %b)\n  \
             ROOT %outputs = (f32[1,2]{{1,0}}) tuple(%z), names={{z}}\n}}\n",
            w[0], w[1], w[2], w[3], w[0], w[1]
        );
        crate::ir::parse_module(&text).unwrap()
    }

    #[test]
    fn only_weights_are_rounded() {
        let w = [0.1, 1.0 + 2f32.powi(-9), -3.0, 1e-3];
        let mut m = module(&w, Precision::Bf16Weights);
        assert_eq!(round_weights(&mut m).unwrap(), 1);
        let lit = |name: &str| {
            let inst = m
                .entry
                .instructions
                .iter()
                .find(|i| i.name == name)
                .unwrap();
            match &inst.op {
                Op::Constant(l) => l.to_f32_vec().unwrap(),
                _ => unreachable!(),
            }
        };
        let want: Vec<f32> = w.iter().map(|&v| Precision::Bf16Weights.round(v)).collect();
        assert_eq!(lit("w"), want);
        assert_eq!(lit("b"), vec![0.1, 1.0 + 2f32.powi(-9)]);
    }

    #[test]
    fn int8_weights_are_int8_times_a_column_scale() {
        let w = [0.1, 1.0, -0.3, 1e-3];
        let mut m = module(&w, Precision::Int8Weights);
        assert_eq!(round_weights(&mut m).unwrap(), 1);
        assert_eq!(m.precision, Precision::F32);
        let id = m.entry.find("w").unwrap();
        let Op::Constant(l) = &m.entry.inst(id).op else {
            unreachable!()
        };
        let got = l.to_f32_vec().unwrap();
        // Columns of the [2, 2] weight (k, n): {0.1, -0.3} and {1.0, 1e-3}.
        let (s0, s1) = (0.3f32 / 127.0, 1.0f32 / 127.0);
        let want = [
            (0.1f32 / s0).round_ties_even() * s0,
            127.0 * s1,
            -127.0 * s0,
            (1e-3f32 / s1).round_ties_even() * s1,
        ];
        assert_eq!(got, want);
        // What the int8 packing needs: every value an integer multiple of its column's scale.
        let shape = crate::ir::Shape::new(DType::F32, vec![2, 2]);
        let d = DotDims {
            lhs_contracting: vec![1],
            rhs_contracting: vec![0],
            ..Default::default()
        };
        let bytes: Vec<u8> = got.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert!(crate::codegen::core::packing::int8_columns(&bytes, &shape, &d).is_some());
        // Per tensor: one scale.
        let mut m = module(&w, Precision::Int8WeightsPerTensor);
        round_weights(&mut m).unwrap();
        let Op::Constant(l) = &m.entry.inst(id).op else {
            unreachable!()
        };
        let s = 1.0f32 / 127.0;
        let want: Vec<f32> = w.iter().map(|v| (v / s).round_ties_even() * s).collect();
        assert_eq!(l.to_f32_vec().unwrap(), want);
    }

    #[test]
    fn conv_channels_are_dim_0() {
        let op = Op::Convolution {
            window: crate::ir::Window::new(vec![1, 1]),
            feature_group_count: 1,
        };
        let (c, n) = channels(&op, &[2, 3, 1, 1]);
        assert_eq!(n, 2);
        assert_eq!(c, vec![0, 0, 0, 1, 1, 1]);
        let dot = Op::Dot(DotDims {
            rhs_contracting: vec![1],
            ..Default::default()
        });
        // Weight [n=2, k=3] contracted on dim 1: its rows are the channels.
        assert_eq!(channels(&dot, &[2, 3]).0, vec![0, 0, 0, 1, 1, 1]);
    }

    #[test]
    fn f16_overflow_names_the_constant() {
        let mut m = module(&[1.0, 70000.0, 0.0, 0.0], Precision::F16Weights);
        let e = round_weights(&mut m).unwrap_err();
        assert_eq!(e.name, "w");
        assert!(e.to_string().contains("bf16-weights"), "{e}");
    }
}
