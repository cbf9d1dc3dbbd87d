//! Rounds the weights of a module whose precision is not f32 (`ir/precision.rs`).
//!
//! Contract: [`round_weights`] replaces every f32 constant that is the weight (rhs) operand of a
//! dot or convolution (itself an entry instruction or the heavy op of an output fusion, as
//! `codegen/core/packing.rs` finds them) by its values rounded to the module's weight type, still
//! as an f32 literal; it runs after the optimisation pipeline (batch norms and constants are
//! folded into the weights by then) and before the backends, so the optimised module the
//! interpreter can run holds exactly the values the library stores. A finite weight that the
//! weight type cannot hold (beyond ±65504 in f16) is an error naming the constant.

use crate::codegen::core::packing::heavy_in;
use crate::ir::{DType, InstId, Literal, Module, Op, Precision};

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
    fn f16_overflow_names_the_constant() {
        let mut m = module(&[1.0, 70000.0, 0.0, 0.0], Precision::F16Weights);
        let e = round_weights(&mut m).unwrap_err();
        assert_eq!(e.name, "w");
        assert!(e.to_string().contains("bf16-weights"), "{e}");
    }
}
