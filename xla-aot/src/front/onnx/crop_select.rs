//! `CenterCropPad` and `Compress`: ops that keep a compile-time choice of a tensor's elements.
//!
//! Contract: [`Importer::center_crop_pad`] crops each of `axes` (default all) to the compile-time
//! `shape` around its centre, or pads it with zeros around the input (the extra element of an odd
//! difference going to the end: ONNX's `(dim − s) / 2` start and offset).
//! [`Importer::compress`] keeps the positions where the compile-time `condition` is true along
//! `axis` (a condition shorter than the axis leaves the rest out), or of the flattened input
//! without `axis`. Run-time shapes and conditions are errors naming the node.

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, rt};
use crate::ir::{DType, Literal, Op};

impl Importer {
    /// `CenterCropPad(input_data, shape)`, attribute `axes`.
    pub fn center_crop_pad(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let (x, ty) = self.rt(cx, 0)?;
        let xd = self.dims(x);
        let r = xd.len() as i64;
        let shape = self.konst_ints(cx, 1, "shape")?;
        let axes: Vec<usize> = match cx.attr_ints("axes")? {
            Some(a) => a
                .iter()
                .map(|&v| {
                    if (-r..r).contains(&v) {
                        Ok(v.rem_euclid(r) as usize)
                    } else {
                        Err(cx.attr_err("axes", format!("{v} is out of range for rank {r}")))
                    }
                })
                .collect::<R<_>>()?,
            None => (0..xd.len()).collect(),
        };
        if shape.len() != axes.len() || shape.iter().any(|&s| s < 1) {
            return Err(cx.err(format!(
                "shape must hold one positive size per axis ({} axes), found {shape:?}",
                axes.len()
            )));
        }
        let mut starts = vec![0; xd.len()];
        let mut limits = xd.clone();
        let (mut low, mut high) = (vec![0; xd.len()], vec![0; xd.len()]);
        for (&a, &s) in axes.iter().zip(&shape) {
            let (d, s) = (xd[a], s as usize);
            if d > s {
                starts[a] = (d - s) / 2;
                limits[a] = starts[a] + s;
            } else {
                low[a] = (s - d) / 2;
                high[a] = s - d - low[a];
            }
        }
        let mut id = x;
        if starts.iter().any(|&v| v > 0) || limits != xd {
            id = self.crop(cx, id, starts, limits)?;
        }
        if low.iter().chain(&high).any(|&p| p > 0) {
            let lit = match self.b.dtype(x) {
                DType::I32 => Literal::from_i32(vec![], &[0]),
                DType::Pred => Literal::from_pred(vec![], &[false]),
                _ => Literal::scalar_f32(0.0),
            };
            let zero = self.b.constant("constant", lit);
            id = self.add(cx, Op::Pad { low, high }, &[id, zero])?;
        }
        Ok(rt(id, ty))
    }

    /// `Compress(input, condition)`, attribute `axis`.
    pub fn compress(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let (x, ty) = self.rt(cx, 0)?;
        let cond = self.konst(cx, 1, "condition")?.as_i64();
        let xd = self.dims(x);
        let (x, axis) = match cx.attr_i("axis")? {
            Some(a) => {
                let r = xd.len() as i64;
                if !(-r..r).contains(&a) {
                    return Err(cx.attr_err("axis", format!("{a} is out of range for rank {r}")));
                }
                (x, a.rem_euclid(r) as usize)
            }
            None => {
                let n = xd.iter().product();
                (self.reshape(cx, x, vec![n])?, 0)
            }
        };
        let len = self.dims(x)[axis];
        let keep: Vec<usize> = (0..len.min(cond.len())).filter(|&i| cond[i] != 0).collect();
        if keep.is_empty() {
            return Err(cx.err("the condition keeps no element (empty tensors are not supported)"));
        }
        let n = keep.len();
        let y = self.take(cx, x, axis, &keep, vec![n])?;
        Ok(rt(y, ty))
    }
}
