//! Reductions: ReduceSum/Mean/Max/Min/Prod/SumSquare/L1/L2/LogSum/LogSumExp and ArgMax/ArgMin.
//!
//! Contract: axes come from input 1 (ReduceSum from opset 13, every reduction from opset 18) or
//! the `axes` attribute (before those opsets), read in the form of the model's opset; both must
//! be compile-time constants. No
//! axes reduces everything unless `noop_with_empty_axes` makes the op an identity. `keepdims`
//! (default 1) keeps reduced axes as extent 1. Integer inputs reduce in f32 and convert back.
//! ReduceProd (no `reduce` kind multiplies) moves the reduced axes last and multiplies halves
//! pairwise, ⌈log₂ n⌉ slice–multiply steps for n reduced elements; an empty reduced axis gives 1.
//! CumSum ([`Importer::cum_sum`]) is a reduce-window sum along its axis. ArgMax/ArgMin return
//! the first extreme index (the last with `select_last_index = 1`) as int64 values held in i32.
//! TopK (K a compile-time input; the `k` attribute before opset 10) on any axis, largest or smallest, returns
//! sorted values and int64 indices (held in i32); ties go to the lower index.

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use super::tensor::runtime_dtype;
use crate::ir::{BinaryOp, DType, InstId, Op, ReduceKind, UnaryOp, Window};

impl Importer {
    /// Broadcasts `r` (reduced over `axes` without keepdims) back to `full`.
    pub fn unreduce(&mut self, cx: &Ctx, r: InstId, axes: &[usize], full: &[usize]) -> R<InstId> {
        let kept: Vec<usize> = (0..full.len()).filter(|i| !axes.contains(i)).collect();
        self.bcast(cx, r, kept, full.to_vec())
    }

    /// A `reduce` over `axes` (sorted), or `x` itself when `axes` is empty.
    pub fn reduce_raw(
        &mut self,
        cx: &Ctx,
        kind: ReduceKind,
        x: InstId,
        axes: &[usize],
    ) -> R<InstId> {
        if axes.is_empty() {
            return Ok(x);
        }
        self.add(
            cx,
            Op::Reduce {
                kind,
                dimensions: axes.to_vec(),
            },
            &[x],
        )
    }

    pub fn reduce(&mut self, cx: &Ctx, op: &str) -> R<Outs> {
        // ReduceSum-13 and the other reductions' version 18 moved `axes` from an attribute to
        // input 1 (and added `noop_with_empty_axes`).
        let axes_attr = cx.before(if op == "ReduceSum" { 13 } else { 18 });
        cx.arity(1, if axes_attr { 1 } else { 2 })?;
        let (x, ty) = self.rt(cx, 0)?;
        if runtime_dtype(ty).is_none() || ty == dt::BOOL {
            return Err(cx.err(format!(
                "reducing {} tensors is not supported",
                dt::name(ty)
            )));
        }
        let x = self.convert(cx, x, DType::F32)?;
        let xd = self.dims(x);
        let axes = if axes_attr {
            cx.attr_ints("axes")?
        } else if cx.has_input(1) {
            Some(self.konst_ints(cx, 1, "axes")?)
        } else {
            None
        };
        let keep = cx.attr_i_or("keepdims", 1)? != 0;
        let noop = cx.attr_i_or("noop_with_empty_axes", 0)? != 0;
        let axes: Vec<usize> = match axes {
            Some(a) if !a.is_empty() => cx.axes("axes", &a, xd.len())?,
            _ if noop => {
                let back = self.convert(cx, x, runtime_dtype(ty).unwrap_or(DType::F32))?;
                return Ok(rt(back, ty));
            }
            _ => (0..xd.len()).collect(),
        };
        let reduced: Vec<usize> = (0..xd.len())
            .filter(|i| !axes.contains(i))
            .map(|i| xd[i])
            .collect();
        if op == "ReduceProd" && !reduced.contains(&0) && axes.iter().any(|&a| xd[a] == 0) {
            // The product of no elements.
            let one = self.splat(cx, 1.0, &reduced)?;
            return self.reduced_out(cx, one, &axes, &xd, keep, ty);
        }
        if xd.contains(&0) {
            return Err(cx.err("reducing an empty tensor is not supported"));
        }
        let count: usize = axes.iter().map(|&a| xd[a]).product();
        let u = |me: &mut Self, op: UnaryOp, v: InstId| me.add(cx, Op::Unary(op), &[v]);
        let r = match op {
            "ReduceSum" => self.reduce_raw(cx, ReduceKind::Add, x, &axes)?,
            "ReduceMax" => self.reduce_raw(cx, ReduceKind::Max, x, &axes)?,
            "ReduceMin" => self.reduce_raw(cx, ReduceKind::Min, x, &axes)?,
            "ReduceProd" => self.product(cx, x, &axes)?,
            "ReduceMean" => {
                let s = self.reduce_raw(cx, ReduceKind::Add, x, &axes)?;
                let d = self.dims(s);
                let n = self.splat(cx, count as f32, &d)?;
                self.add(cx, Op::Binary(BinaryOp::Divide), &[s, n])?
            }
            "ReduceSumSquare" | "ReduceL2" => {
                let sq = self.add(cx, Op::Binary(BinaryOp::Multiply), &[x, x])?;
                let s = self.reduce_raw(cx, ReduceKind::Add, sq, &axes)?;
                if op == "ReduceL2" {
                    u(self, UnaryOp::Sqrt, s)?
                } else {
                    s
                }
            }
            "ReduceL1" => {
                let a = u(self, UnaryOp::Abs, x)?;
                self.reduce_raw(cx, ReduceKind::Add, a, &axes)?
            }
            "ReduceLogSum" => {
                let s = self.reduce_raw(cx, ReduceKind::Add, x, &axes)?;
                u(self, UnaryOp::Log, s)?
            }
            "ReduceLogSumExp" => {
                // m + log(sum(exp(x - m))): no overflow for large x.
                let m = self.reduce_raw(cx, ReduceKind::Max, x, &axes)?;
                let mb = self.unreduce(cx, m, &axes, &xd)?;
                let sh = self.add(cx, Op::Binary(BinaryOp::Subtract), &[x, mb])?;
                let e = u(self, UnaryOp::Exp, sh)?;
                let s = self.reduce_raw(cx, ReduceKind::Add, e, &axes)?;
                let l = u(self, UnaryOp::Log, s)?;
                self.add(cx, Op::Binary(BinaryOp::Add), &[l, m])?
            }
            other => return Err(cx.err(format!("internal: no reduction `{other}`"))),
        };
        self.reduced_out(cx, r, &axes, &xd, keep, ty)
    }

    /// A reduction's result `r` (the reduced axes removed) with `keepdims` applied, converted
    /// back to the input's ONNX type `ty`.
    fn reduced_out(
        &mut self,
        cx: &Ctx,
        mut r: InstId,
        axes: &[usize],
        xd: &[usize],
        keep: bool,
        ty: i32,
    ) -> R<Outs> {
        if keep {
            let kd: Vec<usize> = (0..xd.len())
                .map(|i| if axes.contains(&i) { 1 } else { xd[i] })
                .collect();
            r = self.reshape(cx, r, kd)?;
        }
        let r = self.convert(cx, r, runtime_dtype(ty).unwrap_or(DType::F32))?;
        Ok(rt(r, ty))
    }

    /// The product of f32 `x` over `axes` (sorted, non-empty, no zero extent): the reduced axes
    /// moved last and flattened to `n`, then halves multiplied pairwise until one column is left
    /// (an odd column carried over), ⌈log₂ n⌉ steps and n − 1 multiplies per result.
    pub(super) fn product(&mut self, cx: &Ctx, x: InstId, axes: &[usize]) -> R<InstId> {
        let xd = self.dims(x);
        let kept: Vec<usize> = (0..xd.len()).filter(|i| !axes.contains(i)).collect();
        let perm: Vec<usize> = kept.iter().chain(axes).copied().collect();
        let t = if perm.iter().enumerate().all(|(i, &p)| i == p) {
            x
        } else {
            self.add(cx, Op::Transpose { permutation: perm }, &[x])?
        };
        let out: Vec<usize> = kept.iter().map(|&i| xd[i]).collect();
        let rows: usize = out.iter().product();
        let mut n: usize = axes.iter().map(|&a| xd[a]).product();
        let mut cur = self.reshape(cx, t, vec![rows, n])?;
        while n > 1 {
            let h = n / 2;
            let a = self.crop(cx, cur, vec![0, 0], vec![rows, h])?;
            let b = self.crop(cx, cur, vec![0, h], vec![rows, 2 * h])?;
            let p = self.bin(cx, BinaryOp::Multiply, a, b)?;
            cur = if n % 2 == 1 {
                let odd = self.crop(cx, cur, vec![0, 2 * h], vec![rows, n])?;
                self.add(cx, Op::Concatenate { dimension: 1 }, &[p, odd])?
            } else {
                p
            };
            n = h + n % 2;
        }
        self.reshape(cx, cur, out)
    }

    /// Input 0 of an index-producing op: a numeric run-time tensor of rank >= 1, converted to f32;
    /// with its ONNX type and dims.
    fn ranked_numeric_input(&mut self, cx: &Ctx) -> R<(InstId, i32, Vec<usize>)> {
        let (x, ty) = self.rt(cx, 0)?;
        if runtime_dtype(ty).is_none() || ty == dt::BOOL {
            return Err(cx.err(format!("{} inputs are not supported", dt::name(ty))));
        }
        let x = self.convert(cx, x, DType::F32)?;
        let xd = self.dims(x);
        if xd.is_empty() {
            return Err(cx.err("input 0 is a scalar; it needs rank >= 1"));
        }
        Ok((x, ty, xd))
    }

    pub fn arg_extreme(&mut self, cx: &Ctx, min: bool) -> R<Outs> {
        cx.arity(1, 1)?;
        let last = cx.attr_i_or("select_last_index", 0)? != 0;
        let (mut x, _, xd) = self.ranked_numeric_input(cx)?;
        let axis = cx.axis("axis", cx.attr_i_or("axis", 0)?, xd.len())?;
        let keep = cx.attr_i_or("keepdims", 1)? != 0;
        if min {
            x = self.add(cx, Op::Unary(UnaryOp::Negate), &[x])?;
        }
        // The last extreme: the first of the reversed axis, counted from the end.
        let n = xd[axis];
        if last {
            let rev: Vec<usize> = (0..n).rev().collect();
            x = self.take(cx, x, axis, &rev, vec![n])?;
        }
        let mut r = self.add(cx, Op::Argmax { dimension: axis }, &[x])?;
        if last {
            let f = self.convert(cx, r, DType::F32)?;
            let top = self.splat(cx, (n - 1) as f32, &self.dims(f))?;
            let back = self.bin(cx, BinaryOp::Subtract, top, f)?;
            r = self.convert(cx, back, DType::I32)?;
        }
        if keep {
            let mut kd = xd.clone();
            kd[axis] = 1;
            r = self.reshape(cx, r, kd)?;
        }
        Ok(rt(r, dt::INT64))
    }

    pub fn top_k(&mut self, cx: &Ctx) -> R<Outs> {
        // TopK-10 moved `k` from an attribute to input 1 (K).
        let k = if cx.before(10) {
            cx.arity(1, 1)?;
            vec![
                cx.attr_i("k")?
                    .ok_or_else(|| cx.attr_err("k", "is required"))?,
            ]
        } else {
            cx.arity(2, 2)?;
            self.konst_ints(cx, 1, "K")?
        };
        let (mut x, ty, xd) = self.ranked_numeric_input(cx)?;
        let axis = cx.axis("axis", cx.attr_i_or("axis", -1)?, xd.len())?;
        let [k] = k[..] else {
            return Err(cx.err("input 1 (K) must hold one value"));
        };
        if k < 1 || k as u64 > xd[axis] as u64 {
            return Err(cx.err(format!(
                "K = {k} is outside [1, {}] (the extent of axis {axis})",
                xd[axis]
            )));
        }
        let smallest = cx.attr_i_or("largest", 1)? == 0;
        // The op works on the last axis: move `axis` there and back (a self-inverse swap).
        let last = xd.len() - 1;
        let mut perm: Vec<usize> = (0..xd.len()).collect();
        perm.swap(axis, last);
        if axis != last {
            x = self.add(
                cx,
                Op::Transpose {
                    permutation: perm.clone(),
                },
                &[x],
            )?;
        }
        if smallest {
            x = self.add(cx, Op::Unary(UnaryOp::Negate), &[x])?;
        }
        let k = k as usize;
        let mut values = self.add(cx, Op::TopK { k, indices: false }, &[x])?;
        let mut indices = self.add(cx, Op::TopK { k, indices: true }, &[x])?;
        if smallest {
            values = self.add(cx, Op::Unary(UnaryOp::Negate), &[values])?;
        }
        if axis != last {
            values = self.add(
                cx,
                Op::Transpose {
                    permutation: perm.clone(),
                },
                &[values],
            )?;
            indices = self.add(cx, Op::Transpose { permutation: perm }, &[indices])?;
        }
        let values = self.convert(cx, values, runtime_dtype(ty).unwrap_or(DType::F32))?;
        let mut out = rt(values, ty);
        out.extend(rt(indices, dt::INT64));
        Ok(out)
    }

    /// `CumSum(x, axis)`: a reduce-window sum along `axis` whose window is the whole axis, padded
    /// with zeros before it (after it with `reverse`), so output `i` sums inputs `..=i` (`i..`);
    /// `exclusive` pads one more and drops the first (last) sum. `axis` must be a compile-time
    /// constant. n² additions for an axis of n: the cumulative sums of exported models (position
    /// ids, masks) are over a few hundred elements.
    pub fn cum_sum(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let (ids, ty) = self.as_f32(cx, &[0])?;
        let x = ids[0];
        let xd = self.dims(x);
        if xd.is_empty() {
            return Err(cx.err("input 0 must have at least one dim"));
        }
        let axis = self.konst_ints(cx, 1, "axis")?;
        let [axis] = axis[..] else {
            return Err(cx.err("input 1 (axis) must hold one value"));
        };
        let a = cx.axis("axis", axis, xd.len())?;
        let exclusive = cx.attr_i_or("exclusive", 0)? != 0;
        let reverse = cx.attr_i_or("reverse", 0)? != 0;
        let n = xd[a];
        if n == 0 {
            return self.back(cx, x, ty);
        }
        let r = xd.len();
        let mut size = vec![1; r];
        size[a] = n;
        let mut window = Window::new(size);
        let pad = if exclusive { n } else { n - 1 };
        if reverse {
            window.pad_high[a] = pad;
        } else {
            window.pad_low[a] = pad;
        }
        let mut y = self.add(
            cx,
            Op::ReduceWindow {
                kind: ReduceKind::Add,
                window,
            },
            &[x],
        )?;
        if exclusive {
            // n + 1 sums: the exclusive ones are the first n (the last n with `reverse`).
            let skip = usize::from(reverse);
            let mut starts = vec![0; r];
            starts[a] = skip;
            let mut limits = xd.clone();
            limits[a] = n + skip;
            y = self.crop(cx, y, starts, limits)?;
        }
        self.back(cx, y, ty)
    }
}
