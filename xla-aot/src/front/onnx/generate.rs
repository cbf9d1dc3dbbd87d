//! Ops that generate a tensor from compile-time scalars or a shape: `Range`, `OneHot`, `EyeLike`.
//!
//! [`Importer::eye_like`] folds to a compile-time tensor of the input's (static) 2-D shape: 1 on
//! the diagonal shifted by `k` (positive: above the main one), 0 elsewhere, of type `dtype`
//! (default: the input's type).
//! Contract: [`Importer::one_hot`] compares each (run-time) index, negative ones counted from the
//! end, with the positions `0..depth` inserted at `axis`: `values[1]` where equal, `values[0]`
//! elsewhere (an index outside `[−depth, depth)` gives a row of `values[0]`, as ONNX says);
//! `depth` and `values` must be constants. [`Importer::range`] folds `Range(start, limit, delta)` of constants (initializers,
//! `Constant`s, shape arithmetic, frozen inputs) into a compile-time tensor of
//! max(⌈(limit − start) / delta⌉, 0) elements of `start`'s type, as ONNX defines it; run-time
//! operands, a zero delta and results over [`MAX_RANGE_ELEMENTS`] are errors naming the node.

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, konst, rt};
use super::tensor::{ConstTensor, Values, is_float_type, is_int_type};
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Literal, Op};

/// Largest folded `Range`: index tensors of real models are at most a few thousand long; a
/// million keeps a mistaken delta from building a huge constant.
pub const MAX_RANGE_ELEMENTS: usize = 1 << 20;

impl Importer {
    /// `OneHot(indices, depth, values)`, attribute `axis` (default −1).
    pub fn one_hot(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(3, 3)?;
        let depth = self.konst(cx, 1, "depth")?;
        let values = self.konst(cx, 2, "values")?;
        if depth.element_count() != 1 {
            return Err(cx.err("input 1 (depth) must hold one value"));
        }
        let d = depth.as_f64()[0];
        if !(d >= 1.0 && d <= MAX_RANGE_ELEMENTS as f64) {
            return Err(cx.err(format!(
                "depth is {d}; it must be between 1 and {MAX_RANGE_ELEMENTS}"
            )));
        }
        let depth = d as usize;
        if values.element_count() != 2 {
            return Err(cx.err("input 2 (values) must hold two values: [off_value, on_value]"));
        }
        let vty = values.ty;
        let (off, on) = (values.as_f64()[0], values.as_f64()[1]);
        let (idx, ity) = self.rt(cx, 0)?;
        if !(is_int_type(ity) || is_float_type(ity)) {
            return Err(cx.err("input 0 (indices) must be numeric"));
        }
        let idx = self.convert(cx, idx, DType::I32)?;
        let dims = self.dims(idx);
        let r = dims.len() as i64;
        let axis = cx.attr_i_or("axis", -1)?;
        if !(-r - 1..=r).contains(&axis) {
            return Err(cx.attr_err("axis", format!("is {axis}; the output has rank {}", r + 1)));
        }
        let a = if axis < 0 { axis + r + 1 } else { axis } as usize;
        let mut out = dims.clone();
        out.insert(a, depth);
        let int = |me: &mut Importer, v: i32, to: &[usize]| -> R<InstId> {
            let s = me.b.constant("constant", Literal::from_i32(vec![], &[v]));
            if to.is_empty() {
                return Ok(s);
            }
            me.bcast(cx, s, Vec::new(), to.to_vec())
        };
        // Negative indices count from the end (in f32: exact for these integers; the IR's
        // arithmetic is on floats).
        let idx = self.convert(cx, idx, DType::F32)?;
        let zero = self.splat(cx, 0.0, &dims)?;
        let dd = self.splat(cx, depth as f32, &dims)?;
        let neg = self.add(cx, Op::Compare(CompareDir::Lt), &[idx, zero])?;
        let wrapped = self.add(cx, Op::Binary(BinaryOp::Add), &[idx, dd])?;
        let idx = self.select(cx, neg, wrapped, idx)?;
        let map: Vec<usize> = (0..dims.len())
            .map(|i| if i < a { i } else { i + 1 })
            .collect();
        let ib = self.bcast(cx, idx, map, out.clone())?;
        let pos: Vec<f32> = (0..depth).map(|p| p as f32).collect();
        let iota = self
            .b
            .constant("constant", Literal::from_f32(vec![depth], &pos));
        let iota = self.bcast(cx, iota, vec![a], out.clone())?;
        let eq = self.add(cx, Op::Compare(CompareDir::Eq), &[ib, iota])?;
        let (on_b, off_b) = if is_int_type(vty) {
            (int(self, on as i32, &out)?, int(self, off as i32, &out)?)
        } else {
            (
                self.splat(cx, on as f32, &out)?,
                self.splat(cx, off as f32, &out)?,
            )
        };
        let y = self.select(cx, eq, on_b, off_b)?;
        Ok(rt(y, vty))
    }

    /// `EyeLike(input)`, attributes `dtype` and `k` (default 0).
    pub fn eye_like(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        let v = self.input(cx, 0)?;
        let d = self.dims_of(&v);
        let [rows, cols] = d[..] else {
            return Err(cx.err(format!(
                "input has {} dims; EyeLike takes a 2-D tensor",
                d.len()
            )));
        };
        let ty = match cx.attr_i("dtype")? {
            Some(t) => i32::try_from(t)
                .map_err(|_| cx.attr_err("dtype", format!("{t} is not a tensor element type")))?,
            None => super::context::ty_of(&v),
        };
        let k = cx.attr_i_or("k", 0)?;
        if !self.may_fold(rows * cols) {
            return Err(cx.err(format!(
                "the {rows}x{cols} identity is too large to build at import time"
            )));
        }
        let on = |p: usize| (p % cols) as i64 - (p / cols) as i64 == k;
        let values = if is_float_type(ty) {
            Values::F(
                (0..rows * cols)
                    .map(|p| if on(p) { 1.0 } else { 0.0 })
                    .collect(),
            )
        } else if is_int_type(ty) {
            Values::I((0..rows * cols).map(|p| i64::from(on(p))).collect())
        } else if ty == super::proto::data_type::BOOL {
            Values::B((0..rows * cols).map(on).collect())
        } else {
            return Err(cx.attr_err(
                "dtype",
                format!(
                    "{} is not supported (float, integer or bool types)",
                    super::proto::data_type::name(ty)
                ),
            ));
        };
        Ok(konst(ConstTensor {
            ty,
            dims: vec![rows, cols],
            values,
        }))
    }

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
