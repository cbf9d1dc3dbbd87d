//! Data movement and reductions: RESHAPE, SQUEEZE, EXPAND_DIMS, CONCATENATION, TRANSPOSE, PAD,
//! PADV2, SLICE, STRIDED_SLICE, MEAN, SUM, REDUCE_MAX, REDUCE_MIN.
//!
//! Contract: shapes, axes, paddings and slice bounds are compile-time constants (as the
//! converter writes them). CONCATENATION, PAD, the reductions and TRANSPOSE work in the layout
//! their input is held in (`lower.rs`): axes are mapped through the layout, a TRANSPOSE only
//! relabels the layout (no data moves), a reduction's result keeps the remaining dims in the
//! held order when that is TFLite's order of them too. RESHAPE, SQUEEZE, EXPAND_DIMS and the
//! slices read TFLite order. STRIDED_SLICE takes positive strides, `begin_mask`, `end_mask`
//! and `shrink_axis_mask`; an ellipsis, a new axis or a negative stride is an error naming the
//! mask. MEAN divides the sum by the number of elements reduced.

use super::lower::{Importer, R, Val};
use crate::front::tflite::read::pb;
use crate::ir::{BinaryOp, InstId, Literal, Op, ReduceKind};
use xla_aot_tflite_schema::tflite::BuiltinOptionsRef as O;

impl Importer<'_, '_> {
    fn set_plain(&mut self, y: InstId) -> R<()> {
        let o = self.output_index(0)?;
        let rank = self.b.shape(y).dims.len();
        self.set(o, Val::plain(y, rank));
        Ok(())
    }

    /// Dims from a list with at most one −1 (inferred from `count` elements).
    fn resolve_shape(&self, want: &[i64], count: usize) -> R<Vec<usize>> {
        let known: Option<usize> = want.iter().filter(|&&d| d != -1).try_fold(1usize, |a, &d| {
            usize::try_from(d).ok().and_then(|d| a.checked_mul(d))
        });
        let holes = want.iter().filter(|&&d| d == -1).count();
        let bad = || {
            self.err(format!(
                "the new shape {want:?} does not fit the input's {count} elements"
            ))
        };
        let known = known.ok_or_else(bad)?;
        match holes {
            0 if known == count => Ok(want.iter().map(|&d| d as usize).collect()),
            1 if known > 0 && count % known == 0 => Ok(want
                .iter()
                .map(|&d| if d == -1 { count / known } else { d as usize })
                .collect()),
            _ => Err(bad()),
        }
    }

    /// RESHAPE: the shape input (or `new_shape`, or the output tensor's shape).
    pub fn reshape(&mut self) -> R<()> {
        let xt = self.need(0)?;
        let x = self.tflite(xt)?;
        let count: usize = self.b.shape(x).dims.iter().product();
        let want: Vec<i64> = match self.input_index(1) {
            Some(st) if self.tensor(st).data.is_some() => self.const_ints(st)?,
            _ => match &self.op().options {
                Some(O::ReshapeOptions(o)) => {
                    match o.new_shape().map_err(pb(self.path, "ReshapeOptions"))? {
                        Some(v) => v.iter().map(i64::from).collect(),
                        None => self.output_shape()?,
                    }
                }
                _ => self.output_shape()?,
            },
        };
        let dims = self.resolve_shape(&want, count)?;
        let name = self.name("");
        let y = self.b.reshape(&name, x, dims).map_err(self.ir())?;
        self.set_plain(y)
    }

    fn output_shape(&self) -> R<Vec<i64>> {
        let o = self.output_index(0)?;
        Ok(self.tensor(o).shape.iter().map(|&d| d as i64).collect())
    }

    /// SQUEEZE: the `squeeze_dims` of extent 1 (all of them when none are given).
    pub fn squeeze(&mut self) -> R<()> {
        let xt = self.need(0)?;
        let x = self.tflite(xt)?;
        let d = self.b.shape(x).dims.clone();
        let axes: Vec<i64> = match &self.op().options {
            Some(O::SqueezeOptions(o)) => o
                .squeeze_dims()
                .map_err(pb(self.path, "SqueezeOptions"))?
                .map(|v| v.iter().map(i64::from).collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        let mut drop = vec![false; d.len()];
        if axes.is_empty() {
            for (i, &n) in d.iter().enumerate() {
                drop[i] = n == 1;
            }
        }
        for &a in &axes {
            let a = self.axis(a, d.len())?;
            if d[a] != 1 {
                return Err(self.err(format!(
                    "squeeze_dims names dim {a} of {d:?}, which is not 1"
                )));
            }
            drop[a] = true;
        }
        let dims: Vec<usize> = d
            .iter()
            .zip(&drop)
            .filter(|(_, k)| !**k)
            .map(|(&n, _)| n)
            .collect();
        let name = self.name("");
        let y = self.b.reshape(&name, x, dims).map_err(self.ir())?;
        self.set_plain(y)
    }

    /// EXPAND_DIMS: a dim of extent 1 at the axis input.
    pub fn expand_dims(&mut self) -> R<()> {
        let (xt, at) = (self.need(0)?, self.need(1)?);
        let x = self.tflite(xt)?;
        let mut d = self.b.shape(x).dims.clone();
        let a = self.const_ints(at)?;
        let a = *a
            .first()
            .ok_or_else(|| self.err("the axis input is empty"))?;
        let a = self.axis(a, d.len() + 1)?;
        d.insert(a, 1);
        let name = self.name("");
        let y = self.b.reshape(&name, x, d).map_err(self.ir())?;
        self.set_plain(y)
    }

    /// CONCATENATION along `axis`, in the first input's layout.
    pub fn concatenation(&mut self) -> R<()> {
        let Some(O::ConcatenationOptions(o)) = &self.op().options else {
            return Err(self.err("the operator has no ConcatenationOptions"));
        };
        let axis = o.axis().map_err(pb(self.path, "ConcatenationOptions"))?;
        let mut act = self.fused_activation()?;
        let n = self.op().inputs.len();
        let out = self.output_index(0)?;
        let quantized = self.is_quantized(out);
        let mut vals = Vec::new();
        for j in 0..n {
            let t = self.need(j)?;
            if quantized {
                // TFLite Micro concatenates integers of the output's quantization only, and
                // copies them (no activation).
                let (s, z, _, _) = self.q_scalar(t)?;
                let (so, zo, _, _) = self.q_scalar(out)?;
                if (s, z) != (so, zo) {
                    return Err(self.err(format!(
                        "{} has scale {s} and zero point {z}, the output {so} and {zo}; TFLite Micro concatenates integers of one quantization",
                        self.tensor_name(t)
                    )));
                }
            } else {
                self.check_float(t)?;
            }
            vals.push(self.val(t)?);
        }
        if quantized {
            act = xla_aot_tflite_schema::tflite::ActivationFunctionType::None;
        }
        let Some(first) = vals.first().cloned() else {
            return Err(self.err("CONCATENATION of nothing"));
        };
        let rank = first.perm.len();
        let axis = self.axis(axis.into(), rank)?;
        let perm = if vals.iter().all(|v| v.perm.len() == rank) {
            first.perm.clone()
        } else {
            (0..rank).collect()
        };
        let mut ids = Vec::new();
        for v in &vals {
            ids.push(self.permuted(v, &perm)?);
        }
        let dim = perm.iter().position(|&p| p == axis).unwrap_or(axis);
        let name = self.name("");
        let mut y = self
            .b
            .add(&name, Op::Concatenate { dimension: dim }, &ids)
            .map_err(self.ir())?;
        y = self.activation(y, act)?;
        let o = self.output_index(0)?;
        self.set(o, Val { id: y, perm });
        Ok(())
    }

    /// TRANSPOSE: the layout is relabelled, no data moves.
    pub fn transpose(&mut self) -> R<()> {
        let (xt, pt) = (self.need(0)?, self.need(1)?);
        let x = self.val(xt)?;
        let p = self.const_ints(pt)?;
        let rank = x.perm.len();
        let mut seen = vec![false; rank];
        let mut inv = vec![0; rank];
        for (i, &a) in p.iter().enumerate() {
            match usize::try_from(a).ok().filter(|&a| a < rank && !seen[a]) {
                Some(a) => {
                    seen[a] = true;
                    inv[a] = i;
                }
                None => {
                    return Err(self.err(format!(
                        "the permutation {p:?} is not one of the {rank} dims"
                    )));
                }
            }
        }
        if p.len() != rank {
            return Err(self.err(format!(
                "the permutation {p:?} is not one of the {rank} dims"
            )));
        }
        // Output TFLite dim i is input TFLite dim p[i]: IR dim j, holding input dim perm[j],
        // holds output dim inv[perm[j]].
        let perm = x.perm.iter().map(|&q| inv[q]).collect();
        let o = self.output_index(0)?;
        self.set(o, Val { id: x.id, perm });
        Ok(())
    }

    /// PAD / PADV2 (constant value, input 2, default 0) in the held layout.
    pub fn pad(&mut self) -> R<()> {
        let (xt, pt) = (self.need(0)?, self.need(1)?);
        let quantized = self.is_quantized(xt);
        if !quantized {
            self.check_float(xt)?;
        }
        let x = self.val(xt)?;
        let rank = x.perm.len();
        let p = self.const_ints(pt)?;
        if p.len() != 2 * rank || p.iter().any(|&v| v < 0) {
            return Err(self.err(format!(
                "the paddings {p:?} must be [{rank}, 2] non-negative values"
            )));
        }
        let low = x.perm.iter().map(|&q| p[2 * q] as usize).collect();
        let high = x.perm.iter().map(|&q| p[2 * q + 1] as usize).collect();
        let c = if quantized {
            // TFLite Micro pads integers with PADV2's value, else the output's zero point.
            let value = match self.input_index(2) {
                Some(vt) => *self
                    .int_data(vt)?
                    .first()
                    .ok_or_else(|| self.err("the padding value is empty"))?,
                None => self.q_scalar(self.output_index(0)?)?.1,
            };
            self.b
                .constant(&self.name("value"), Literal::from_i32(vec![], &[value]))
        } else {
            let value = match self.input_index(2) {
                Some(vt) => {
                    let v = self.literal(vt)?.to_f32_vec().unwrap_or_default();
                    *v.first()
                        .ok_or_else(|| self.err("the padding value is empty"))?
                }
                None => 0.0,
            };
            self.b.scalar(&self.name("value"), value)
        };
        let name = self.name("");
        let y = self
            .b
            .add(&name, Op::Pad { low, high }, &[x.id, c])
            .map_err(self.ir())?;
        let o = self.output_index(0)?;
        self.set(
            o,
            Val {
                id: y,
                perm: x.perm,
            },
        );
        Ok(())
    }

    /// SLICE: `begin`, `size` (−1: to the end).
    pub fn slice(&mut self) -> R<()> {
        let (xt, bt, st) = (self.need(0)?, self.need(1)?, self.need(2)?);
        let x = self.tflite(xt)?;
        let d = self.b.shape(x).dims.clone();
        let (b, s) = (self.const_ints(bt)?, self.const_ints(st)?);
        if b.len() != d.len() || s.len() != d.len() {
            return Err(self.err(format!(
                "begin {b:?} and size {s:?} must have one entry per dim of {d:?}"
            )));
        }
        let mut starts = Vec::new();
        let mut limits = Vec::new();
        for i in 0..d.len() {
            let start = b[i];
            let end = if s[i] == -1 {
                d[i] as i64
            } else {
                start + s[i]
            };
            if start < 0 || end < start || end > d[i] as i64 {
                return Err(self.err(format!("begin {b:?}, size {s:?} leave the input {d:?}")));
            }
            starts.push(start as usize);
            limits.push(end as usize);
        }
        let y = self.unit_slice("", x, starts, limits)?;
        self.set_plain(y)
    }

    /// STRIDED_SLICE with positive strides.
    pub fn strided_slice(&mut self) -> R<()> {
        let (bm, em, ell, new, shrink, offset) = match &self.op().options {
            Some(O::StridedSliceOptions(o)) => {
                let p = pb(self.path, "StridedSliceOptions");
                (
                    o.begin_mask().map_err(&p)?,
                    o.end_mask().map_err(&p)?,
                    o.ellipsis_mask().map_err(&p)?,
                    o.new_axis_mask().map_err(&p)?,
                    o.shrink_axis_mask().map_err(&p)?,
                    o.offset().map_err(&p)?,
                )
            }
            _ => (0, 0, 0, 0, 0, false),
        };
        if ell != 0 || new != 0 || offset {
            return Err(self.err(format!(
                "ellipsis_mask {ell}, new_axis_mask {new}, offset {offset}: only begin, end and shrink masks are supported"
            )));
        }
        let (xt, bt, et, st) = (self.need(0)?, self.need(1)?, self.need(2)?, self.need(3)?);
        let x = self.tflite(xt)?;
        let d = self.b.shape(x).dims.clone();
        let (b, e, s) = (
            self.const_ints(bt)?,
            self.const_ints(et)?,
            self.const_ints(st)?,
        );
        let n = b.len();
        if n > d.len() || e.len() != n || s.len() != n {
            return Err(self.err(format!(
                "begin {b:?}, end {e:?}, strides {s:?} do not fit {d:?}"
            )));
        }
        let (mut starts, mut limits, mut strides, mut keep) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for i in 0..d.len() {
            let dim = d[i] as i64;
            if i >= n {
                starts.push(0);
                limits.push(d[i]);
                strides.push(1);
                keep.push(d[i]);
                continue;
            }
            if s[i] <= 0 {
                return Err(self.err(format!(
                    "stride {} on dim {i}: only positive strides are supported",
                    s[i]
                )));
            }
            let clampi = |v: i64| {
                let v = if v < 0 { v + dim } else { v };
                v.clamp(0, dim)
            };
            let shrinks = shrink & (1 << i) != 0;
            let start = if bm & (1 << i) != 0 { 0 } else { clampi(b[i]) };
            let end = if shrinks {
                start + 1
            } else if em & (1 << i) != 0 {
                dim
            } else {
                clampi(e[i])
            };
            if shrinks && start >= dim {
                return Err(self.err(format!(
                    "shrink_axis on dim {i} at {} is outside {dim}",
                    b[i]
                )));
            }
            let end = end.max(start);
            starts.push(start as usize);
            limits.push(end as usize);
            strides.push(s[i] as usize);
            if !shrinks {
                keep.push(((end - start) as usize).div_ceil(s[i] as usize));
            }
        }
        let mut y = self.slice_with_strides("", x, starts, limits, strides)?;
        if keep.len() != d.len() {
            let name = self.name("shrink");
            y = self.b.reshape(&name, y, keep).map_err(self.ir())?;
        }
        self.set_plain(y)
    }

    /// MEAN, SUM, REDUCE_MAX, REDUCE_MIN over the axes input, in the held layout.
    pub fn reduce(&mut self, kind: ReduceKind, mean: bool) -> R<()> {
        self.reduce_generic(kind, mean, false)
    }

    /// [`Self::reduce`]; with `integer`, of i32 integers (through exact f32, back to i32).
    pub fn reduce_generic(&mut self, kind: ReduceKind, mean: bool, integer: bool) -> R<()> {
        let xt = self.need(0)?;
        if !integer {
            self.check_float(xt)?;
        }
        let mut x = self.val(xt)?;
        if integer {
            x.id = self.convert(x.id, crate::ir::DType::F32, "as_f32")?;
        }
        let (axes, ir_axes, keep) = self.reduction(&x)?;
        let ir_dims = self.b.shape(x.id).dims.clone();
        let count: usize = ir_axes.iter().map(|&i| ir_dims[i]).product();
        let mut y = crate::front::decompose::reduce(self, "", kind, x.id, &ir_axes)?;
        if mean {
            let c = self.splat(count.max(1) as f32, y)?;
            y = self.binary("mean", BinaryOp::Divide, y, c)?;
        }
        if integer {
            y = self.convert(y, crate::ir::DType::I32, "as_i32")?;
        }
        self.set_reduced(y, &x, &axes, &ir_axes, keep)
    }

    /// A reduction's axes (input 1) of `x`: the TFLite axes, the IR dims holding them (sorted)
    /// and `keep_dims`.
    pub(super) fn reduction(&self, x: &Val) -> R<(Vec<usize>, Vec<usize>, bool)> {
        let keep = match &self.op().options {
            Some(O::ReducerOptions(o)) => o.keep_dims().map_err(pb(self.path, "ReducerOptions"))?,
            _ => false,
        };
        let at = self.need(1)?;
        let rank = x.perm.len();
        let mut axes = Vec::new();
        for a in self.const_ints(at)? {
            let a = self.axis(a, rank)?;
            if !axes.contains(&a) {
                axes.push(a);
            }
        }
        let mut ir_axes: Vec<usize> = axes
            .iter()
            .map(|&a| x.perm.iter().position(|&p| p == a).unwrap_or(a))
            .collect();
        ir_axes.sort_unstable();
        Ok((axes, ir_axes, keep))
    }

    /// Records `y`, `x` reduced over `ir_axes` (TFLite `axes`), as output 0: with `keep` the
    /// reduced dims stay as 1s in `x`'s layout; else the remaining dims keep their held order,
    /// renumbered by their TFLite order.
    pub(super) fn set_reduced(
        &mut self,
        y: InstId,
        x: &Val,
        axes: &[usize],
        ir_axes: &[usize],
        keep: bool,
    ) -> R<()> {
        let o = self.output_index(0)?;
        if keep {
            let dims = self
                .b
                .shape(x.id)
                .dims
                .iter()
                .enumerate()
                .map(|(i, &n)| if ir_axes.contains(&i) { 1 } else { n })
                .collect();
            let name = self.name("keep_dims");
            let y = self.b.reshape(&name, y, dims).map_err(self.ir())?;
            self.set(
                o,
                Val {
                    id: y,
                    perm: x.perm.clone(),
                },
            );
            return Ok(());
        }
        let rest: Vec<usize> = x
            .perm
            .iter()
            .copied()
            .filter(|p| !axes.contains(p))
            .collect();
        let perm = rest
            .iter()
            .map(|&p| rest.iter().filter(|&&q| q < p).count())
            .collect();
        self.set(o, Val { id: y, perm });
        Ok(())
    }
}
