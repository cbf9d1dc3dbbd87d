//! Ops that generate a tensor from compile-time scalars: `Range`.
//!
//! Contract: [`Importer::range`] folds `Range(start, limit, delta)` of constants (initializers,
//! `Constant`s, shape arithmetic, frozen inputs) into a compile-time tensor of
//! max(⌈(limit − start) / delta⌉, 0) elements of `start`'s type, as ONNX defines it; run-time
//! operands, a zero delta and results over [`MAX_RANGE_ELEMENTS`] are errors naming the node.

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, konst};
use super::tensor::{ConstTensor, Values, is_float_type, is_int_type};

/// Largest folded `Range`: index tensors of real models are at most a few thousand long; a
/// million keeps a mistaken delta from building a huge constant.
pub const MAX_RANGE_ELEMENTS: usize = 1 << 20;

impl Importer {
    /// `Range(start, limit, delta)`.
    pub fn range(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(3, 3)?;
        let names = ["start", "limit", "delta"];
        let mut scalars = Vec::new();
        for (j, what) in names.iter().enumerate() {
            let c = self.konst(cx, j, what).map_err(|e| {
                e.hint("fix the dims it is computed from (--input-shape, --dim) or freeze the input it reads (--freeze)")
            })?;
            if c.element_count() != 1 {
                return Err(cx.err(format!("input {j} ({what}) must be a scalar")));
            }
            scalars.push(c);
        }
        let ty = scalars[0].ty;
        let [start, limit, delta] = [0, 1, 2].map(|j| scalars[j].as_f64()[0]);
        if delta == 0.0 || !delta.is_finite() {
            return Err(cx.err(format!("delta is {delta}; it must be a non-zero number")));
        }
        let n = ((limit - start) / delta).ceil().max(0.0);
        if !n.is_finite() || n > MAX_RANGE_ELEMENTS as f64 {
            return Err(cx.err(format!(
                "the range has {n} elements; at most {MAX_RANGE_ELEMENTS} are folded"
            )));
        }
        let n = n as usize;
        let values = if is_int_type(ty) {
            let (s, d) = (scalars[0].as_i64()[0], scalars[2].as_i64()[0]);
            Values::I((0..n as i64).map(|i| s + i * d).collect())
        } else if is_float_type(ty) {
            Values::F((0..n).map(|i| start + i as f64 * delta).collect())
        } else {
            return Err(cx.err("start must be a number (float or integer)"));
        };
        Ok(konst(ConstTensor {
            ty,
            dims: vec![n],
            values,
        }))
    }
}
