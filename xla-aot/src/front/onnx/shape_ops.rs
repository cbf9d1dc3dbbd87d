//! Data-movement ONNX ops: Identity, Dropout, Constant, ConstantOfShape, Shape, Size, Reshape,
//! Flatten, Transpose, Squeeze, Unsqueeze, Concat, Slice, Pad, Expand, Tile, Split, Gather.
//!
//! Contract: every shape-like operand (Reshape's shape, Slice's starts/ends/axes/steps, Pad's
//! pads, axes, repeats, split sizes) must be a compile-time constant, and an op whose data inputs
//! are all constants is folded into a constant (so shape arithmetic of exported graphs never
//! reaches run time). Before the opset that made them inputs (Slice 10, Pad 11, Split, Squeeze and
//! Unsqueeze 13) they are attributes, read in the model's opset form. Results with a zero extent
//! are errors (the compiler has no empty tensors).
//! Gather with constant indices on any axis, or run-time indices (negative ones wrap as in ONNX),
//! becomes the `gather` primitive on the gathered axis moved to the front.

use super::context::{Ctx, Importer, R, Val, broadcast_dims, ty_of};
use super::elementwise::{Outs, konst, rt};
use super::proto::data_type as dt;
use super::tensor::{ConstTensor, Values, is_int_type, strides};
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Literal, Op};
use std::rc::Rc;

/// Flat source indices of `take(axis, idx)` on a tensor of `dims`.
fn take_picks(dims: &[usize], axis: usize, idx: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let mut picks = Vec::with_capacity(outer * idx.len() * inner);
    for o in 0..outer {
        for &i in idx {
            for k in 0..inner {
                picks.push((o * dims[axis] + i) * inner + k);
            }
        }
    }
    let mut od = dims.to_vec();
    od[axis] = idx.len();
    (od, picks)
}

/// The indices ONNX Slice selects on one axis of extent `dim`.
fn slice_indices(start: i64, end: i64, step: i64, dim: usize) -> Vec<usize> {
    let d = dim as i64;
    let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    let (mut s, mut e) = (norm(start), norm(end));
    let mut out = Vec::new();
    if step > 0 {
        s = s.clamp(0, d);
        e = e.clamp(0, d);
        let mut i = s;
        while i < e {
            out.push(i as usize);
            i += step;
        }
    } else {
        s = s.clamp(-1, d - 1);
        e = e.clamp(-1, d - 1);
        let mut i = s;
        while i > e {
            out.push(i as usize);
            i += step;
        }
    }
    out
}

impl Importer {
    fn no_empty(&self, cx: &Ctx, dims: &[usize]) -> R<()> {
        if dims.contains(&0) {
            return Err(cx.err(format!(
                "its result {} is empty; the compiler does not support empty tensors",
                dims_str(dims)
            )));
        }
        Ok(())
    }

    /// Gathers `idx` (any dims, values in range) along `axis` of run-time `x`.
    pub fn gather_axis(&mut self, cx: &Ctx, x: InstId, axis: usize, idx: InstId) -> R<InstId> {
        let xd = self.dims(x);
        let k = self.dims(idx).len();
        let r = xd.len();
        let table = if axis == 0 {
            x
        } else {
            let mut perm = vec![axis];
            perm.extend((0..r).filter(|&i| i != axis));
            self.add(cx, Op::Transpose { permutation: perm }, &[x])?
        };
        let g = self.add(cx, Op::Gather, &[table, idx])?;
        if axis == 0 {
            return Ok(g);
        }
        let out_rank = r - 1 + k;
        let perm: Vec<usize> = (0..out_rank)
            .map(|i| {
                if i < axis {
                    k + i
                } else if i < axis + k {
                    i - axis
                } else {
                    i
                }
            })
            .collect();
        self.add(cx, Op::Transpose { permutation: perm }, &[g])
    }

    /// Gathers constant in-range indices along `axis`.
    pub(super) fn take(
        &mut self,
        cx: &Ctx,
        x: InstId,
        axis: usize,
        idx: &[usize],
        idx_dims: Vec<usize>,
    ) -> R<InstId> {
        let lit = Literal::from_i32(idx_dims, &idx.iter().map(|&i| i as i32).collect::<Vec<_>>());
        let i = self.b.constant("indices", lit);
        self.gather_axis(cx, x, axis, i)
    }

    pub fn identity(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        Ok(vec![Some(self.input(cx, 0)?)])
    }

    pub fn dropout(&mut self, cx: &Ctx) -> R<Outs> {
        // Dropout-12 moved `ratio` from an attribute to input 1 and added `training_mode` (input
        // 2); before it the model runs in inference (`is_test` left at opset 7), so the op is an
        // identity whatever the ratio.
        cx.arity(1, if cx.before(12) { 1 } else { 3 })?;
        if cx.has_input(2) {
            let t = self.konst(cx, 2, "training_mode")?;
            if t.as_i64().first().copied().unwrap_or(0) != 0 {
                return Err(cx.err("training_mode is true; only inference (identity) is supported"));
            }
        }
        let x = self.input(cx, 0)?;
        let d = self.dims_of(&x);
        let n = d.iter().product();
        if cx.node.output.get(1).is_none_or(|m| m.is_empty()) {
            return Ok(vec![Some(x)]);
        }
        // Dropout-10 made the mask bool; before it the mask has the input's type (all ones).
        if !self.may_fold(n) {
            // Too large to hold at import time: the library fills it at run time.
            let one = if cx.before(10) {
                ConstTensor {
                    ty: dt::FLOAT,
                    dims: Vec::new(),
                    values: Values::F(vec![1.0]),
                }
            } else {
                ConstTensor {
                    ty: dt::BOOL,
                    dims: Vec::new(),
                    values: Values::B(vec![true]),
                }
            };
            let ty = one.ty;
            let one = self
                .materialize_val(&Val::Const(Rc::new(one)))
                .map_err(|m| cx.err(m))?;
            let id = self
                .b
                .broadcast(&format!("{}.mask", self.out_name(cx)), one, Vec::new(), d)
                .map_err(|m| cx.err(m))?;
            return Ok(vec![Some(x), Some(Val::Rt { id, ty })]);
        }
        let mask = if cx.before(10) {
            ConstTensor {
                ty: dt::FLOAT,
                dims: d,
                values: Values::F(vec![1.0; n]),
            }
        } else {
            ConstTensor {
                ty: dt::BOOL,
                dims: d,
                values: Values::B(vec![true; n]),
            }
        };
        Ok(vec![Some(x), Some(Val::Const(Rc::new(mask)))])
    }

    pub fn constant(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(0, 0)?;
        if let Some(t) = cx.attr_t("value")? {
            let c = ConstTensor::from_proto(t).map_err(|m| cx.attr_err("value", m))?;
            return Ok(konst(c));
        }
        if cx.has_attr("value_float") {
            let v = cx.attr_f_or("value_float", 0.0)?;
            return Ok(konst(ConstTensor {
                ty: dt::FLOAT,
                dims: vec![],
                values: Values::F(vec![v as f64]),
            }));
        }
        if let Some(v) = cx.attr_floats("value_floats")? {
            return Ok(konst(ConstTensor {
                ty: dt::FLOAT,
                dims: vec![v.len()],
                values: Values::F(v.iter().map(|&x| x as f64).collect()),
            }));
        }
        if let Some(v) = cx.attr_i("value_int")? {
            return Ok(konst(ConstTensor::ints(vec![], vec![v])));
        }
        if let Some(v) = cx.attr_ints("value_ints")? {
            return Ok(konst(ConstTensor::ints(vec![v.len()], v)));
        }
        Err(cx.err(
            "it has no supported value attribute (value, value_float(s), value_int(s)); string and sparse constants are not supported",
        ))
    }

    pub fn constant_of_shape(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        let shape = self.konst_ints(cx, 0, "shape")?;
        if shape.iter().any(|&d| d < 0) {
            return Err(cx.err(format!("shape {shape:?} has a negative dimension")));
        }
        let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let n = crate::ir::shape::checked_element_count(&dims).ok_or_else(|| {
            cx.err(format!(
                "shape {} has more than {} elements",
                dims_str(&dims),
                crate::ir::shape::MAX_ELEMENTS
            ))
        })?;
        let value = match cx.attr_t("value")? {
            None => ConstTensor {
                ty: dt::FLOAT,
                dims: vec![1],
                values: Values::F(vec![0.0]),
            },
            Some(t) => ConstTensor::from_proto(t).map_err(|m| cx.attr_err("value", m))?,
        };
        if value.element_count() != 1 {
            return Err(cx.attr_err("value", "must hold exactly one element"));
        }
        if !self.may_fold(n) {
            // Too large to hold at import time: the library fills it at run time.
            let one = self
                .materialize_val(&Val::Const(Rc::new(value.with_dims(Vec::new()))))
                .map_err(|m| cx.err(m))?;
            let id = self
                .b
                .broadcast(&self.out_name(cx), one, Vec::new(), dims)
                .map_err(|m| cx.err(m))?;
            return Ok(rt(id, value.ty));
        }
        let values = match &value.values {
            Values::F(v) => Values::F(vec![v[0]; n]),
            Values::F32(_) => Values::F(vec![value.as_f64()[0]; n]),
            Values::I(v) => Values::I(vec![v[0]; n]),
            Values::B(v) => Values::B(vec![v[0]; n]),
        };
        Ok(konst(ConstTensor {
            ty: value.ty,
            dims,
            values,
        }))
    }

    pub fn shape_op(&mut self, cx: &Ctx, size: bool) -> R<Outs> {
        cx.arity(1, 1)?;
        let d = self.in_dims(cx, 0)?;
        if size {
            let n: usize = d.iter().product();
            return Ok(konst(ConstTensor::ints(vec![], vec![n as i64])));
        }
        let r = d.len() as i64;
        let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let start = clampi(cx.attr_i_or("start", 0)?);
        let end = clampi(cx.attr_i_or("end", r)?);
        let v: Vec<i64> = if start < end {
            d[start..end].iter().map(|&x| x as i64).collect()
        } else {
            Vec::new()
        };
        Ok(konst(ConstTensor::ints(vec![v.len()], v)))
    }

    /// The result of a pure re-dimensioning of input 0 (Reshape, Flatten, Squeeze, Unsqueeze).
    fn redim(&mut self, cx: &Ctx, dims: Vec<usize>) -> R<Outs> {
        let x = self.input(cx, 0)?;
        let n: usize = self.dims_of(&x).iter().product();
        if dims.iter().product::<usize>() != n {
            return Err(cx.err(format!(
                "cannot reshape {} to {}",
                dims_str(&self.dims_of(&x)),
                dims_str(&dims)
            )));
        }
        match x {
            Val::Const(c) => Ok(konst(c.with_dims(dims))),
            Val::Rt { id, ty } => {
                let r = self.reshape(cx, id, dims)?;
                Ok(rt(r, ty))
            }
        }
    }

    pub fn reshape_op(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let xd = self.in_dims(cx, 0)?;
        let shape = self.konst_ints(cx, 1, "shape")?;
        let allowzero = cx.attr_i_or("allowzero", 0)? != 0;
        let total: usize = xd.iter().product();
        let mut dims = Vec::with_capacity(shape.len());
        let mut infer = None;
        for (i, &s) in shape.iter().enumerate() {
            match s {
                -1 => {
                    if infer.replace(i).is_some() {
                        return Err(cx.err(format!("shape {shape:?} has more than one -1")));
                    }
                    dims.push(1);
                }
                0 if !allowzero => {
                    let Some(&d) = xd.get(i) else {
                        return Err(cx.err(format!(
                            "shape {shape:?} copies dimension {i} (0) but the input {} has rank {}",
                            dims_str(&xd),
                            xd.len()
                        )));
                    };
                    dims.push(d);
                }
                s if s < 0 => {
                    return Err(cx.err(format!("shape {shape:?} has a negative dimension")));
                }
                s => dims.push(s as usize),
            }
        }
        if let Some(i) = infer {
            let known: usize = dims.iter().product();
            if known == 0 || total % known != 0 {
                return Err(cx.err(format!(
                    "cannot infer the -1 of {shape:?} for {} elements of {}",
                    total,
                    dims_str(&xd)
                )));
            }
            dims[i] = total / known;
        }
        self.redim(cx, dims)
    }

    pub fn flatten(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        let xd = self.in_dims(cx, 0)?;
        let r = xd.len() as i64;
        let axis = cx.attr_i_or("axis", 1)?;
        if axis < -r || axis > r {
            return Err(cx.attr_err("axis", format!("{axis} is out of range for rank {r}")));
        }
        let axis = if axis < 0 { axis + r } else { axis } as usize;
        let dims = vec![xd[..axis].iter().product(), xd[axis..].iter().product()];
        self.redim(cx, dims)
    }

    /// Axes of Squeeze/Unsqueeze: Squeeze-13 and Unsqueeze-13 moved them from the `axes`
    /// attribute to input 1.
    fn axes_input(&mut self, cx: &Ctx) -> R<Option<Vec<i64>>> {
        if cx.before(13) {
            cx.arity(1, 1)?;
            return cx.attr_ints("axes");
        }
        cx.arity(1, 2)?;
        if cx.has_input(1) {
            return self.konst_ints(cx, 1, "axes").map(Some);
        }
        Ok(None)
    }

    pub fn squeeze(&mut self, cx: &Ctx) -> R<Outs> {
        let xd = self.in_dims(cx, 0)?;
        let axes = match self.axes_input(cx)? {
            None => (0..xd.len()).filter(|&i| xd[i] == 1).collect(),
            Some(a) => cx.axes("axes", &a, xd.len())?,
        };
        for &a in &axes {
            if xd[a] != 1 {
                return Err(cx.err(format!(
                    "axis {a} of {} has extent {}, not 1",
                    dims_str(&xd),
                    xd[a]
                )));
            }
        }
        let dims = (0..xd.len())
            .filter(|i| !axes.contains(i))
            .map(|i| xd[i])
            .collect();
        self.redim(cx, dims)
    }

    pub fn unsqueeze(&mut self, cx: &Ctx) -> R<Outs> {
        let xd = self.in_dims(cx, 0)?;
        let Some(axes) = self.axes_input(cx)? else {
            return Err(cx.err(if cx.before(13) {
                "it needs the `axes` attribute"
            } else {
                "it needs axes (input 1)"
            }));
        };
        let r = xd.len() + axes.len();
        let axes = cx.axes("axes", &axes, r)?;
        let mut src = xd.iter();
        let dims = (0..r)
            .map(|i| {
                if axes.contains(&i) {
                    1
                } else {
                    *src.next().unwrap_or(&1)
                }
            })
            .collect();
        self.redim(cx, dims)
    }

    pub fn transpose(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        let x = self.input(cx, 0)?;
        let xd = self.dims_of(&x);
        let r = xd.len();
        let perm: Vec<usize> = match cx.attr_ints("perm")? {
            None => (0..r).rev().collect(),
            Some(p) => {
                let mut seen = vec![false; r];
                let mut out = Vec::new();
                for &a in &p {
                    let ok = p.len() == r && a >= 0 && (a as usize) < r && !seen[a as usize];
                    if !ok {
                        return Err(cx.attr_err(
                            "perm",
                            format!("{p:?} is not a permutation of the {r} axes"),
                        ));
                    }
                    seen[a as usize] = true;
                    out.push(a as usize);
                }
                out
            }
        };
        if let Val::Const(c) = &x {
            if is_int_type(c.ty) {
                let od: Vec<usize> = perm.iter().map(|&p| xd[p]).collect();
                let (is, os) = (strides(&xd), strides(&od));
                let n: usize = od.iter().product();
                let picks: Vec<usize> = (0..n)
                    .map(|k| (0..r).map(|i| (k / os[i]) % od[i] * is[perm[i]]).sum())
                    .collect();
                return Ok(konst(c.pick(od, &picks)));
            }
        }
        let (id, ty) = self.rt(cx, 0)?;
        let r = self.add(cx, Op::Transpose { permutation: perm }, &[id])?;
        Ok(rt(r, ty))
    }

    pub fn concat(&mut self, cx: &Ctx) -> R<Outs> {
        if cx.n_inputs() == 0 {
            return Err(cx.err("it needs at least one input"));
        }
        let ins: Vec<Val> = (0..cx.n_inputs())
            .map(|j| self.input(cx, j))
            .collect::<R<_>>()?;
        let d0 = self.dims_of(&ins[0]);
        let axis = cx
            .attr_i("axis")?
            .ok_or_else(|| cx.attr_err("axis", "is required"))?;
        let axis = cx.axis("axis", axis, d0.len())?;
        for (j, v) in ins.iter().enumerate() {
            let dj = self.dims_of(v);
            if dj.len() != d0.len() || (0..d0.len()).any(|i| i != axis && dj[i] != d0[i]) {
                return Err(cx.err(format!(
                    "input {j} has shape {} but input 0 has {}; they must match on every axis but {axis}",
                    dims_str(&dj),
                    dims_str(&d0)
                )));
            }
        }
        // Drop empty pieces (shape arithmetic concatenates empty lists).
        let ins: Vec<Val> = ins
            .into_iter()
            .filter(|v| self.dims_of(v)[axis] > 0)
            .collect();
        if ins.is_empty() {
            let mut d = d0.clone();
            d[axis] = 0;
            return Ok(konst(ConstTensor::ints(d, Vec::new())));
        }
        if ins
            .iter()
            .all(|v| matches!(v, Val::Const(c) if is_int_type(c.ty)))
        {
            let consts: Vec<&ConstTensor> = ins
                .iter()
                .map(|v| match v {
                    Val::Const(c) => c.as_ref(),
                    Val::Rt { .. } => unreachable!("all constants"),
                })
                .collect();
            let outer: usize = d0[..axis].iter().product();
            let mut out = Vec::new();
            for o in 0..outer {
                for c in &consts {
                    let chunk: usize = c.dims[axis..].iter().product();
                    out.extend_from_slice(&c.as_i64()[o * chunk..(o + 1) * chunk]);
                }
            }
            let mut dims = d0.clone();
            dims[axis] = consts.iter().map(|c| c.dims[axis]).sum();
            return Ok(konst(ConstTensor {
                ty: consts[0].ty,
                dims,
                values: Values::I(out),
            }));
        }
        let ty = ty_of(&ins[0]);
        let mut ids = Vec::new();
        for v in &ins {
            ids.push(self.materialize_val(v).map_err(|m| cx.err(m))?);
        }
        let r = self.add(cx, Op::Concatenate { dimension: axis }, &ids)?;
        Ok(rt(r, ty))
    }

    pub fn slice(&mut self, cx: &Ctx) -> R<Outs> {
        let x = self.input(cx, 0)?;
        let xd = self.dims_of(&x);
        // Slice-10 moved `starts`, `ends` and `axes` from attributes to inputs and added `steps`.
        let (starts, ends, attr_axes) = if cx.before(10) {
            cx.arity(1, 1)?;
            let need = |name: &str| {
                cx.attr_ints(name)?
                    .ok_or_else(|| cx.attr_err(name, "is required"))
            };
            (need("starts")?, need("ends")?, cx.attr_ints("axes")?)
        } else {
            cx.arity(3, 5)?;
            let starts = self.konst_ints(cx, 1, "starts")?;
            let ends = self.konst_ints(cx, 2, "ends")?;
            let axes = if cx.has_input(3) {
                Some(self.konst_ints(cx, 3, "axes")?)
            } else {
                None
            };
            (starts, ends, axes)
        };
        let n = starts.len();
        if ends.len() != n {
            return Err(cx.err(format!(
                "starts has {n} entries but ends has {}",
                ends.len()
            )));
        }
        let axes: Vec<usize> = if let Some(a) = attr_axes {
            if a.len() != n {
                return Err(cx.err(format!("axes has {} entries but starts has {n}", a.len())));
            }
            let v = a
                .iter()
                .map(|&v| cx.axis("axis", v, xd.len()))
                .collect::<R<Vec<_>>>()?;
            cx.axes("axes", &a, xd.len())?;
            v
        } else {
            (0..n).collect()
        };
        if axes.iter().any(|&a| a >= xd.len()) {
            return Err(cx.err(format!("{n} starts for a tensor of rank {}", xd.len())));
        }
        let steps = if cx.has_input(4) {
            self.konst_ints(cx, 4, "steps")?
        } else {
            vec![1; n]
        };
        if steps.len() != n || steps.contains(&0) {
            return Err(cx.err(format!("steps {steps:?} must have {n} non-zero entries")));
        }
        let mut picks: Vec<Vec<usize>> = xd.iter().map(|&d| (0..d).collect()).collect();
        for i in 0..n {
            picks[axes[i]] = slice_indices(starts[i], ends[i], steps[i], xd[axes[i]]);
        }
        let od: Vec<usize> = picks.iter().map(Vec::len).collect();
        if let Val::Const(c) = &x {
            let mut cur = (**c).clone();
            for (a, p) in picks.iter().enumerate() {
                let (d, pk) = take_picks(&cur.dims, a, p);
                cur = cur.pick(d, &pk);
            }
            return Ok(konst(cur));
        }
        self.no_empty(cx, &od)?;
        let (mut id, ty) = self.rt(cx, 0)?;
        // Positive steps: one slice. Negative steps: gather the picked indices on that axis.
        let mut lo = vec![0; xd.len()];
        let mut hi = xd.clone();
        let mut st = vec![1; xd.len()];
        let mut reversed = Vec::new();
        for i in 0..n {
            let a = axes[i];
            let p = &picks[a];
            if steps[i] > 0 {
                lo[a] = p[0];
                hi[a] = p[p.len() - 1] + 1;
                st[a] = steps[i] as usize;
            } else {
                reversed.push(a);
            }
        }
        if lo.iter().any(|&v| v > 0) || hi != xd || st.iter().any(|&s| s > 1) {
            id = self.add(
                cx,
                Op::Slice {
                    starts: lo,
                    limits: hi,
                    strides: st,
                },
                &[id],
            )?;
        }
        for a in reversed {
            let p = picks[a].clone();
            let len = p.len();
            id = self.take(cx, id, a, &p, vec![len])?;
        }
        Ok(rt(id, ty))
    }

    pub fn pad(&mut self, cx: &Ctx) -> R<Outs> {
        // Pad-11 moved `pads` and the constant `value` from attributes to inputs 1 and 2.
        let old = cx.before(11);
        cx.arity(if old { 1 } else { 2 }, if old { 1 } else { 4 })?;
        let mode = cx.attr_s("mode")?.unwrap_or_else(|| "constant".into());
        if !matches!(mode.as_str(), "constant" | "reflect" | "edge" | "wrap") {
            return Err(cx.attr_err(
                "mode",
                format!("`{mode}` is not constant, reflect, edge or wrap"),
            ));
        }
        let (x, ty) = self.rt(cx, 0)?;
        let xd = self.dims(x);
        let r = xd.len();
        let pads = if old {
            cx.attr_ints("pads")?
                .ok_or_else(|| cx.attr_err("pads", "is required"))?
        } else {
            self.konst_ints(cx, 1, "pads")?
        };
        let axes: Vec<usize> = if cx.has_input(3) {
            let a = self.konst_ints(cx, 3, "axes")?;
            a.iter()
                .map(|&v| cx.axis("axis", v, r))
                .collect::<R<Vec<_>>>()?
        } else {
            (0..r).collect()
        };
        let k = axes.len();
        if pads.len() != 2 * k {
            return Err(cx.err(format!(
                "pads has {} entries; {} axes need {}",
                pads.len(),
                k,
                2 * k
            )));
        }
        let mut low = vec![0i64; r];
        let mut high = vec![0i64; r];
        for (i, &a) in axes.iter().enumerate() {
            low[a] = pads[i];
            high[a] = pads[k + i];
        }
        let value = if old {
            let v = cx.attr_f_or("value", 0.0)?;
            let s = self.b.scalar("constant", v);
            self.convert(cx, s, self.b.dtype(x))?
        } else if cx.has_input(2) {
            let (v, _) = self.rt(cx, 2)?;
            let v = self.convert(cx, v, self.b.dtype(x))?;
            self.reshape(cx, v, Vec::new())?
        } else {
            let lit = match self.b.dtype(x) {
                DType::I32 => Literal::from_i32(vec![], &[0]),
                DType::Pred => Literal::from_pred(vec![], &[false]),
                _ => Literal::scalar_f32(0.0),
            };
            self.b.constant("constant", lit)
        };
        // Negative pads crop first.
        let mut id = x;
        if low.iter().chain(&high).any(|&p| p < 0) {
            let starts: Vec<usize> = low.iter().map(|&p| (-p).max(0) as usize).collect();
            let limits: Vec<usize> = (0..r)
                .map(|i| (xd[i] as i64 - (-high[i]).max(0)).max(0) as usize)
                .collect();
            if (0..r).any(|i| limits[i] <= starts[i]) {
                return Err(cx.err("negative pads crop the input to nothing"));
            }
            id = self.crop(cx, id, starts, limits)?;
        }
        let lo: Vec<usize> = low.iter().map(|&p| p.max(0) as usize).collect();
        let hi: Vec<usize> = high.iter().map(|&p| p.max(0) as usize).collect();
        if mode != "constant" {
            // Each padded axis gathers its source positions (numpy's reflect, edge and wrap).
            for a in 0..r {
                if lo[a] == 0 && hi[a] == 0 {
                    continue;
                }
                let n = self.dims(id)[a] as i64;
                let idx: Vec<usize> = (-(lo[a] as i64)..n + hi[a] as i64)
                    .map(|i| pad_source(&mode, i, n))
                    .collect();
                let len = idx.len();
                id = self.take(cx, id, a, &idx, vec![len])?;
            }
            return Ok(rt(id, ty));
        }
        if lo.iter().chain(&hi).any(|&p| p > 0) {
            id = self.add(cx, Op::Pad { low: lo, high: hi }, &[id, value])?;
        }
        Ok(rt(id, ty))
    }

    pub fn expand(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let (x, ty) = self.rt(cx, 0)?;
        let xd = self.dims(x);
        let shape = self.konst_ints(cx, 1, "shape")?;
        if shape.iter().any(|&d| d < 0) {
            return Err(cx.err(format!("shape {shape:?} has a negative dimension")));
        }
        let sd: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let out = broadcast_dims(&[xd.clone(), sd])
            .ok_or_else(|| cx.err(format!("{} does not broadcast to {shape:?}", dims_str(&xd))))?;
        self.no_empty(cx, &out)?;
        let r = self.stretch(cx, x, &out)?;
        Ok(rt(r, ty))
    }

    pub fn tile(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let (x, ty) = self.rt(cx, 0)?;
        let xd = self.dims(x);
        let reps = self.konst_ints(cx, 1, "repeats")?;
        if reps.len() != xd.len() || reps.iter().any(|&v| v < 1) {
            return Err(cx.err(format!(
                "repeats {reps:?} must have {} positive entries",
                xd.len()
            )));
        }
        // [d0, d1] → reshape [1, d0, 1, d1] → broadcast [r0, d0, r1, d1] → reshape [r0 d0, r1 d1].
        let mut split = Vec::new();
        let mut big = Vec::new();
        let mut map = Vec::new();
        for (i, &d) in xd.iter().enumerate() {
            split.push(1);
            split.push(d);
            big.push(reps[i] as usize);
            big.push(d);
            map.push(2 * i);
            map.push(2 * i + 1);
        }
        let s = self.reshape(cx, x, split)?;
        let b = self.bcast(cx, s, map, big)?;
        let out: Vec<usize> = xd
            .iter()
            .zip(&reps)
            .map(|(&d, &r)| d * r as usize)
            .collect();
        let r = self.reshape(cx, b, out)?;
        Ok(rt(r, ty))
    }

    pub fn split(&mut self, cx: &Ctx) -> R<Outs> {
        // Split-13 moved the sizes from the `split` attribute to input 1 (Split-18 added
        // `num_outputs` for equal parts).
        cx.arity(1, if cx.before(13) { 1 } else { 2 })?;
        let (x, ty) = self.rt(cx, 0)?;
        let xd = self.dims(x);
        let axis = cx.axis("axis", cx.attr_i_or("axis", 0)?, xd.len())?;
        let n_out = cx.node.output.len();
        let dim = xd[axis];
        let given = if cx.before(13) {
            cx.attr_ints("split")?
        } else if cx.has_input(1) {
            Some(self.konst_ints(cx, 1, "split")?)
        } else {
            None
        };
        let sizes: Vec<usize> = if let Some(s) = given {
            if s.len() != n_out || s.iter().any(|&v| v < 0) || s.iter().sum::<i64>() != dim as i64 {
                return Err(cx.err(format!(
                    "split {s:?} must have {n_out} non-negative sizes summing to {dim}"
                )));
            }
            s.iter().map(|&v| v as usize).collect()
        } else {
            let n = cx.attr_i_or("num_outputs", n_out as i64)?.max(1) as usize;
            if n != n_out {
                return Err(cx.attr_err(
                    "num_outputs",
                    format!("{n} does not match the {n_out} outputs"),
                ));
            }
            let chunk = dim.div_ceil(n);
            if !cx.has_attr("num_outputs") && dim % n != 0 {
                return Err(cx.err(format!(
                    "axis {axis} (extent {dim}) does not split into {n} equal parts"
                )));
            }
            (0..n)
                .map(|i| chunk.min(dim.saturating_sub(i * chunk)))
                .collect()
        };
        let mut outs = Vec::new();
        let mut at = 0;
        for s in sizes {
            if s == 0 {
                return Err(
                    cx.err("an output would be empty; the compiler does not support empty tensors")
                );
            }
            let mut lo = vec![0; xd.len()];
            let mut hi = xd.clone();
            lo[axis] = at;
            hi[axis] = at + s;
            at += s;
            let id = if s == dim {
                x
            } else {
                self.add(
                    cx,
                    Op::Slice {
                        starts: lo,
                        limits: hi,
                        strides: vec![1; xd.len()],
                    },
                    &[x],
                )?
            };
            outs.push(Some(Val::Rt { id, ty }));
        }
        Ok(outs)
    }

    pub fn gather(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let data = self.input(cx, 0)?;
        let xd = self.dims_of(&data);
        if xd.is_empty() {
            return Err(cx.err("input 0 is a scalar; Gather needs rank >= 1"));
        }
        let axis = cx.axis("axis", cx.attr_i_or("axis", 0)?, xd.len())?;
        let dim = xd[axis] as i64;
        let ind = self.input(cx, 1)?;
        if !is_int_type(ty_of(&ind)) {
            return Err(cx.err("input 1 (indices) must be integers"));
        }
        if let Val::Const(ic) = &ind {
            let mut idx = Vec::new();
            for &i in &ic.as_i64() {
                let j = if i < 0 { i + dim } else { i };
                if j < 0 || j >= dim {
                    return Err(cx.err(format!(
                        "index {i} is out of range for axis {axis} of extent {dim}"
                    )));
                }
                idx.push(j as usize);
            }
            let mut od = xd[..axis].to_vec();
            od.extend_from_slice(&ic.dims);
            od.extend_from_slice(&xd[axis + 1..]);
            if let Val::Const(c) = &data
                && self.may_fold(od.iter().product())
            {
                let (_, picks) = take_picks(&xd, axis, &idx);
                return Ok(konst(c.pick(od, &picks)));
            }
            self.no_empty(cx, &od)?;
            let (x, ty) = self.rt(cx, 0)?;
            let r = self.take(cx, x, axis, &idx, ic.dims.clone())?;
            return Ok(rt(r, ty));
        }
        let (x, ty) = self.rt(cx, 0)?;
        let (i, _) = self.rt(cx, 1)?;
        // Negative indices count from the end: i + dim where i < 0.
        let id = self.dims(i);
        let f = self.convert(cx, i, DType::F32)?;
        let z = self.splat(cx, 0.0, &id)?;
        let n = self.splat(cx, dim as f32, &id)?;
        let neg = self.add(cx, Op::Compare(CompareDir::Lt), &[f, z])?;
        let wrapped = self.add(cx, Op::Binary(BinaryOp::Add), &[f, n])?;
        let fixed = self.select(cx, neg, wrapped, f)?;
        let i = self.convert(cx, fixed, DType::I32)?;
        let r = self.gather_axis(cx, x, axis, i)?;
        Ok(rt(r, ty))
    }
}

/// The input position that padded position `i` of an axis of extent `n` reads in Pad's `mode`:
/// `reflect` mirrors without repeating the edge, `edge` repeats it, `wrap` is periodic.
fn pad_source(mode: &str, i: i64, n: i64) -> usize {
    let j = match mode {
        "reflect" if n > 1 => {
            let period = 2 * (n - 1);
            let j = i.rem_euclid(period);
            if j >= n { period - j } else { j }
        }
        "wrap" => i.rem_euclid(n),
        _ => i.clamp(0, n - 1),
    };
    j as usize
}
