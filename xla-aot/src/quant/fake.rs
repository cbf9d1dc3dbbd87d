//! Fake quantization of activations: `x → dequantize(quantize(x))` in existing IR ops.
//!
//! Contract: [`Params::uint8`] turns a range into onnxruntime's uint8 asymmetric parameters (the
//! range widened to hold 0; `scale = (high - low) / 255`, `zero_point = round_half_even(-low /
//! scale)` within [0, 255]; an empty range gets scale 1). [`insert`] puts, once per site, the
//! instructions the ONNX import produces for `QuantizeLinear` → `DequantizeLinear`
//! (`front/onnx/quant.rs`): `clamp(x / scale, -zp, 255 - zp)` rounded half to even by adding and
//! subtracting 1.5·2^23, plus `zp`, converted to i32 (the quantized value) and back to f32, minus
//! `zp`, times `scale`; and makes every dot and convolution that reads the site read the
//! dequantized value instead. Other readers keep the f32 value.

use crate::ir::value_range::ROUND_SHIFT;
use crate::ir::{BinaryOp, DType, InstId, Instruction, Literal, Module, Op, Shape};
use crate::passes::rewrite::{Rewriter, rebuild};

/// The uint8 range.
const Q_MAX: f32 = 255.0;

/// A uint8 asymmetric quantization.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// The step between quantized values.
    pub scale: f32,
    /// The quantized value of 0.
    pub zero_point: f32,
}

impl Params {
    /// The parameters of range [low, high].
    pub fn uint8(low: f32, high: f32) -> Params {
        let (lo, hi) = (low.min(0.0), high.max(0.0));
        let scale = (hi - lo) / Q_MAX;
        if !(scale > 0.0 && scale.is_finite()) {
            return Params {
                scale: 1.0,
                zero_point: 0.0,
            };
        }
        Params {
            scale,
            zero_point: (-lo / scale).round_ties_even().clamp(0.0, Q_MAX),
        }
    }

    /// `x` quantized and dequantized, as the inserted instructions compute it.
    pub fn fake(&self, x: f32) -> f32 {
        let c = (x / self.scale).clamp(-self.zero_point, Q_MAX - self.zero_point);
        let q = ((c + ROUND_SHIFT) - ROUND_SHIFT) + self.zero_point;
        (q - self.zero_point) * self.scale
    }
}

/// `m` with every product that reads a site reading its fake quantization instead.
pub fn insert(m: &Module, sites: &[(InstId, Params)]) -> Module {
    let mut out = m.clone();
    let n = m.entry.instructions.len();
    let mut params: Vec<Option<Params>> = vec![None; n];
    for &(s, p) in sites {
        params[s.index()] = Some(p);
    }
    let mut done: Vec<Option<InstId>> = vec![None; n];
    let old = m.entry.clone();
    rebuild(&mut out, |rw, id, inst, mut operands| {
        let mut changed = false;
        if matches!(inst.op, Op::Dot(_) | Op::Convolution { .. }) {
            let lhs = inst.operands[0];
            if let Some(p) = params[lhs.index()] {
                let q = match done[lhs.index()] {
                    Some(q) => q,
                    None => {
                        let src = old.inst(lhs);
                        let q = fake_quant(rw, rw.get(lhs), &src.name, &src.shape, p);
                        done[lhs.index()] = Some(q);
                        q
                    }
                };
                operands[0] = q;
                changed = true;
            }
        }
        let mut new = inst.clone();
        new.operands = operands;
        let id2 = rw.push(new);
        rw.replace(id, id2);
        changed
    });
    out
}

/// Appends the fake quantization of `x` (named after `name`).
fn fake_quant(rw: &mut Rewriter, x: InstId, name: &str, shape: &Shape, p: Params) -> InstId {
    let f32s = Shape::new(DType::F32, shape.dims.clone());
    let push = |rw: &mut Rewriter, suffix: &str, op: Op, operands: Vec<InstId>, dt: DType| {
        rw.push(Instruction {
            name: format!("{name}.q.{suffix}"),
            op,
            operands,
            shape: Shape::new(dt, shape.dims.clone()),
        })
    };
    let splat = |rw: &mut Rewriter, suffix: &str, v: f32| {
        let c = rw.constant(&format!("{name}.q.{suffix}"), Literal::scalar_f32(v));
        rw.push(Instruction {
            name: format!("{name}.q.{suffix}.b"),
            op: Op::Broadcast { dimensions: vec![] },
            operands: vec![c],
            shape: f32s.clone(),
        })
    };
    let scale = splat(rw, "scale", p.scale);
    let t = push(
        rw,
        "div",
        Op::Binary(BinaryOp::Divide),
        vec![x, scale],
        DType::F32,
    );
    let lo = rw.constant(&format!("{name}.q.lo"), Literal::scalar_f32(-p.zero_point));
    let hi = rw.constant(
        &format!("{name}.q.hi"),
        Literal::scalar_f32(Q_MAX - p.zero_point),
    );
    let c = push(rw, "clamp", Op::Clamp, vec![lo, t, hi], DType::F32);
    let k = splat(rw, "shift", ROUND_SHIFT);
    let up = push(rw, "up", Op::Binary(BinaryOp::Add), vec![c, k], DType::F32);
    let r = push(
        rw,
        "round",
        Op::Binary(BinaryOp::Subtract),
        vec![up, k],
        DType::F32,
    );
    let zp = splat(rw, "zp", p.zero_point);
    let q = push(
        rw,
        "add_zp",
        Op::Binary(BinaryOp::Add),
        vec![r, zp],
        DType::F32,
    );
    let qi = push(
        rw,
        "u8",
        Op::Convert { to: DType::I32 },
        vec![q],
        DType::I32,
    );
    let qf = push(
        rw,
        "f",
        Op::Convert { to: DType::F32 },
        vec![qi],
        DType::F32,
    );
    let d = push(
        rw,
        "sub_zp",
        Op::Binary(BinaryOp::Subtract),
        vec![qf, zp],
        DType::F32,
    );
    push(
        rw,
        "dq",
        Op::Binary(BinaryOp::Multiply),
        vec![d, scale],
        DType::F32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uint8_parameters() {
        let p = Params::uint8(0.0, 2.55);
        assert_eq!(p.zero_point, 0.0);
        assert!((p.scale - 0.01).abs() < 1e-9);
        // A range that excludes 0 is widened to hold it.
        let p = Params::uint8(1.0, 2.55);
        assert_eq!(p.zero_point, 0.0);
        let p = Params::uint8(-1.0, 1.0);
        assert_eq!(p.zero_point, (1.0 / p.scale).round_ties_even());
        assert_eq!(p.fake(0.0), 0.0);
        // Saturated at the ends of [0, 255].
        assert_eq!(p.fake(5.0), (255.0 - p.zero_point) * p.scale);
        assert_eq!(p.fake(-5.0), -p.zero_point * p.scale);
        assert_eq!(Params::uint8(0.0, 0.0).scale, 1.0);
    }

    #[test]
    fn interpreter_computes_the_fake_quantization() {
        let text = "HloModule m\n\nENTRY %main {\n  \
             %x = f32[1,4]{1,0} parameter(0)\n  \
             %w = f32[4,1]{1,0} constant({1, 10, 100, 1000})\n  \
             %y = f32[1,1]{1,0} dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n  \
             ROOT %outputs = (f32[1,1]{1,0}, f32[1,4]{1,0}) tuple(%y, %x), names={y, x}\n}\n";
        let m = crate::ir::parse_module(text).unwrap();
        let p = Params::uint8(-1.0, 3.0);
        let q = insert(&m, &[(m.entry.find("x").unwrap(), p)]);
        crate::ir::verify(&q).unwrap();
        let xs = [0.013f32, -2.0, 2.996, 0.5];
        let out = crate::interp::evaluate(&q, &[Literal::from_f32(vec![1, 4], &xs)]).unwrap();
        let want: f32 = xs
            .iter()
            .zip([1.0f32, 10.0, 100.0, 1000.0])
            .map(|(&x, w)| p.fake(x) * w)
            .sum();
        let got = out[0].to_f32_vec().unwrap()[0];
        assert!((got - want).abs() <= 1e-3 * want.abs(), "{got} vs {want}");
        // The output `x` itself is not quantized.
        assert_eq!(out[1].to_f32_vec().unwrap(), xs);
        assert_ne!(p.fake(0.013), 0.013);
    }
}
