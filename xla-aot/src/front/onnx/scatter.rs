//! Index-addressed reads and writes: GatherND, ScatterND, ScatterElements (and its opset-9/10
//! name Scatter).
//!
//! Contract: GatherND (`batch_dims`) reads rows of the data flattened to
//! `[Π dims[..batch_dims + k], dims[batch_dims + k..]...]` with one gather: constant indices
//! fold to flat row numbers at import time (negative ones wrap, out-of-range ones are errors
//! naming the node); run-time indices compute the row number in f32, each coordinate wrapped
//! when negative and then clamped into its axis, so no read leaves the data. The scatters'
//! run-time indices take the comparison forms of `scatter_rt.rs` (the IR has no scatter); with
//! constant indices (an initializer, a constant or `--freeze`) every update's target is resolved
//! at import time (negative indices wrap, out-of-range ones are errors), then each target
//! position takes its updates in index order, one gather and select per layer of duplicates:
//! `none` keeps the last update, `add`/`mul`/`max`/`min` combine the data with every update
//! (in f32 for integer data, converted back); at most [`MAX_SCATTER_GATHERED`] elements are
//! gathered in all.

use super::context::{Ctx, Importer, R, Val, ty_of};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use super::tensor::{is_int_type, runtime_dtype, strides};
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Literal, Op};

/// Most elements a scatter's layers may gather in all (layers of duplicate targets × data
/// elements): a layer per duplicate keeps the common one-write-per-target scatter at one gather,
/// but thousands of updates to one target would build thousands of full-size gathers; 2^26 (64 Mi
/// elements, a quarter of a second of gathers on one core) stops that at import time.
const MAX_SCATTER_GATHERED: usize = 1 << 26;

/// How a scatter combines an update with the value already at its target.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

impl Importer {
    /// `GatherND(data, indices)`, attribute `batch_dims` (default 0).
    pub fn gather_nd(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let (data, ty) = self.rt(cx, 0)?;
        let dd = self.dims(data);
        let ind = self.input(cx, 1)?;
        if !is_int_type(ty_of(&ind)) {
            return Err(cx.err("input 1 (indices) must be integers"));
        }
        let id = self.dims_of(&ind);
        let b = usize::try_from(cx.attr_i_or("batch_dims", 0)?)
            .map_err(|_| cx.attr_err("batch_dims", "must not be negative"))?;
        let q = id.len();
        let k = id.last().copied().unwrap_or(0);
        if q < 1 || b >= q || b >= dd.len() || k < 1 || b + k > dd.len() || id[..b] != dd[..b] {
            return Err(cx.err(format!(
                "indices {} do not address data {} with batch_dims {b} (the last index dim must be 1 to rank − batch_dims, the batch dims equal)",
                dims_str(&id),
                dims_str(&dd)
            )));
        }
        let pos_dims = id[..q - 1].to_vec();
        let npos: usize = pos_dims.iter().product();
        let rows: usize = dd[..b + k].iter().product();
        let rest = dd[b + k..].to_vec();
        let mut table_dims = vec![rows];
        table_dims.extend(&rest);
        let table = self.reshape(cx, data, table_dims)?;
        // Row stride of each indexed axis and of the batch position.
        let rs = strides(&dd[..b + k]);
        let batch_of = |p: usize| -> usize {
            // Positions are row-major over id[..q-1]; the batch part is the leading b dims.
            let inner: usize = id[b..q - 1].iter().product();
            p / inner.max(1)
        };
        let per_batch: usize = dd[b..b + k].iter().product();
        let base: Vec<usize> = (0..npos).map(|p| batch_of(p) * per_batch).collect();
        let rows_idx = match ind {
            Val::Const(c) => {
                let v = c.as_i64();
                let mut out = Vec::with_capacity(npos);
                for (p, &bp) in base.iter().enumerate() {
                    let mut r = bp;
                    for j in 0..k {
                        let n = dd[b + j] as i64;
                        let i = v[p * k + j];
                        let w = if i < 0 { i + n } else { i };
                        if !(0..n).contains(&w) {
                            return Err(cx.err(format!(
                                "index {i} is out of range for axis {} of extent {n}",
                                b + j
                            )));
                        }
                        r += w as usize * rs[b + j];
                    }
                    out.push(r as i32);
                }
                self.b
                    .constant("indices", Literal::from_i32(pos_dims.clone(), &out))
            }
            Val::Rt { id: iid, .. } => {
                let f = self.convert(cx, iid, DType::F32)?;
                let flat = self.reshape(cx, f, vec![npos, k])?;
                let bf: Vec<f32> = base.iter().map(|&v| v as f32).collect();
                let mut acc = self.b.constant("base", Literal::from_f32(vec![npos], &bf));
                for j in 0..k {
                    let col = self.crop(cx, flat, vec![0, j], vec![npos, j + 1])?;
                    let col = self.reshape(cx, col, vec![npos])?;
                    let n = dd[b + j];
                    let zero = self.splat(cx, 0.0, &[npos])?;
                    let neg = self.add(cx, Op::Compare(CompareDir::Lt), &[col, zero])?;
                    let ext = self.splat(cx, n as f32, &[npos])?;
                    let wrapped = self.bin(cx, BinaryOp::Add, col, ext)?;
                    let col = self.select(cx, neg, wrapped, col)?;
                    let lo = self.b.scalar("constant", 0.0);
                    let hi = self.b.scalar("constant", (n - 1) as f32);
                    let col = self.add(cx, Op::Clamp, &[lo, col, hi])?;
                    let st = self.splat(cx, rs[b + j] as f32, &[npos])?;
                    let off = self.bin(cx, BinaryOp::Multiply, col, st)?;
                    acc = self.bin(cx, BinaryOp::Add, acc, off)?;
                }
                let acc = self.convert(cx, acc, DType::I32)?;
                self.reshape(cx, acc, pos_dims.clone())?
            }
        };
        let g = self.add(cx, Op::Gather, &[table, rows_idx])?;
        let mut out = pos_dims;
        out.extend(rest);
        let g = self.reshape(cx, g, out)?;
        Ok(rt(g, ty))
    }

    /// `ScatterElements(data, indices, updates)` (and `Scatter` before opset 11), attributes
    /// `axis` (default 0) and `reduction`.
    pub fn scatter_elements(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(3, 3)?;
        let red = reduction(cx)?;
        let (data, ty) = self.rt(cx, 0)?;
        if matches!(self.input(cx, 1)?, Val::Rt { .. }) {
            return self.scatter_elements_rt(cx, red, data, ty);
        }
        let dd = self.dims(data);
        let idx = self.scatter_indices(cx)?;
        let (id, iv) = (idx.dims.clone(), idx.as_i64());
        let ud = self.in_dims(cx, 2)?;
        if id.len() != dd.len() || ud != id || dd.is_empty() {
            return Err(cx.err(format!(
                "data {}, indices {} and updates {} must have one rank (at least 1), indices and updates one shape",
                dims_str(&dd),
                dims_str(&id),
                dims_str(&ud)
            )));
        }
        let axis = cx.axis("axis", cx.attr_i_or("axis", 0)?, dd.len())?;
        let (ds, is) = (strides(&dd), strides(&id));
        let n = dd[axis] as i64;
        let mut pairs = Vec::with_capacity(iv.len());
        for (u, &i) in iv.iter().enumerate() {
            let j = if i < 0 { i + n } else { i };
            if !(0..n).contains(&j) {
                return Err(cx.err(format!(
                    "index {i} is out of range for axis {axis} of extent {n}"
                )));
            }
            let mut t = j as usize * ds[axis];
            for d in (0..id.len()).filter(|&d| d != axis) {
                let c = (u / is[d]) % id[d];
                if c >= dd[d] {
                    return Err(cx.err(format!(
                        "indices {} are larger than the data {} along axis {d}",
                        dims_str(&id),
                        dims_str(&dd)
                    )));
                }
                t += c * ds[d];
            }
            pairs.push((t, u));
        }
        let y = self.scatter_flat(cx, data, &pairs, red)?;
        Ok(rt(y, ty))
    }

    /// `ScatterND(data, indices, updates)`, attribute `reduction`.
    pub fn scatter_nd(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(3, 3)?;
        let red = reduction(cx)?;
        let (data, ty) = self.rt(cx, 0)?;
        if matches!(self.input(cx, 1)?, Val::Rt { .. }) {
            return self.scatter_nd_rt(cx, red, data, ty);
        }
        let dd = self.dims(data);
        let idx = self.scatter_indices(cx)?;
        let (id, iv) = (idx.dims.clone(), idx.as_i64());
        let ud = self.in_dims(cx, 2)?;
        let k = scatter_nd_depth(cx, &dd, &id, &ud)?;
        let slice: usize = dd[k..].iter().product();
        let ds = strides(&dd[..k]);
        let tuples = iv.len() / k;
        let mut pairs = Vec::with_capacity(tuples * slice);
        for t in 0..tuples {
            let mut row = 0usize;
            for j in 0..k {
                let n = dd[j] as i64;
                let i = iv[t * k + j];
                let w = if i < 0 { i + n } else { i };
                if !(0..n).contains(&w) {
                    return Err(cx.err(format!(
                        "index {i} is out of range for axis {j} of extent {n}"
                    )));
                }
                row += w as usize * ds[j];
            }
            pairs.extend((0..slice).map(|o| (row * slice + o, t * slice + o)));
        }
        let y = self.scatter_flat(cx, data, &pairs, red)?;
        Ok(rt(y, ty))
    }

    /// Input 1 of a scatter: integer indices known at compile time.
    fn scatter_indices(&self, cx: &Ctx) -> R<std::rc::Rc<super::tensor::ConstTensor>> {
        let c = self.konst(cx, 1, "indices").map_err(|e| {
            e.hint("the IR has no run-time scatter: make the indices an initializer or a Constant, or freeze the input (--freeze NAME=VALUE)")
        })?;
        if !is_int_type(c.ty) {
            return Err(cx.err("input 1 (indices) must be integers"));
        }
        Ok(c)
    }

    /// Writes updates (input 2) into `data`: `pairs` are (flat target in the data, flat index in
    /// the updates) in ONNX's order; each target takes its updates layer by layer.
    fn scatter_flat(
        &mut self,
        cx: &Ctx,
        data: InstId,
        pairs: &[(usize, usize)],
        red: Reduction,
    ) -> R<InstId> {
        let (upd, uty) = self.rt(cx, 2)?;
        let dty = self.b.dtype(data);
        if runtime_dtype(uty) != Some(dty) {
            return Err(cx.err(format!(
                "updates have element type {}; the data's type is needed",
                dt::name(uty)
            )));
        }
        let dd = self.dims(data);
        let total: usize = dd.iter().product();
        let ucount: usize = self.dims(upd).iter().product();
        let mut by_target: Vec<Vec<usize>> = vec![Vec::new(); total];
        for &(t, u) in pairs {
            by_target[t].push(u);
        }
        if red == Reduction::None {
            // The last write wins (ONNX leaves duplicates undefined; its reference keeps the last).
            for l in &mut by_target {
                if let Some(&last) = l.last() {
                    *l = vec![last];
                }
            }
        }
        let layers = by_target.iter().map(Vec::len).max().unwrap_or(0);
        if layers.saturating_mul(total) > MAX_SCATTER_GATHERED {
            return Err(cx.err(format!(
                "{layers} updates go to one element; the scatter would gather {layers} × {total} elements (at most {MAX_SCATTER_GATHERED})"
            ))
            .hint("scatter fewer updates to one position (a histogram is better written as a one-hot MatMul or ReduceSum)"));
        }
        let arith = red != Reduction::None;
        if arith && dty == DType::Pred {
            return Err(cx.err("a reducing scatter of bool tensors is not supported"));
        }
        let to = if arith { DType::F32 } else { dty };
        let flat = self.reshape(cx, data, vec![total])?;
        let mut acc = self.convert(cx, flat, to)?;
        let uflat = self.reshape(cx, upd, vec![ucount.max(1)])?;
        let uflat = self.convert(cx, uflat, to)?;
        for layer in 0..layers {
            let src: Vec<usize> = by_target
                .iter()
                .map(|l| l.get(layer).copied().unwrap_or(0))
                .collect();
            let mask: Vec<bool> = by_target.iter().map(|l| l.len() > layer).collect();
            let g = self.take(cx, uflat, 0, &src, vec![total])?;
            let v = match red {
                Reduction::None => g,
                Reduction::Add => self.bin(cx, BinaryOp::Add, acc, g)?,
                Reduction::Mul => self.bin(cx, BinaryOp::Multiply, acc, g)?,
                Reduction::Max => self.bin(cx, BinaryOp::Maximum, acc, g)?,
                Reduction::Min => self.bin(cx, BinaryOp::Minimum, acc, g)?,
            };
            let m = self
                .b
                .constant("mask", Literal::from_pred(vec![total], &mask));
            acc = self.select(cx, m, v, acc)?;
        }
        let acc = self.convert(cx, acc, dty)?;
        self.reshape(cx, acc, dd)
    }
}

/// The `reduction` attribute (default `none`).
fn reduction(cx: &Ctx) -> R<Reduction> {
    Ok(match cx.attr_s("reduction")?.as_deref().unwrap_or("none") {
        "none" => Reduction::None,
        "add" => Reduction::Add,
        "mul" => Reduction::Mul,
        "max" => Reduction::Max,
        "min" => Reduction::Min,
        o => {
            return Err(cx.attr_err(
                "reduction",
                format!("`{o}` is not none, add, mul, max or min"),
            ));
        }
    })
}

/// ScatterND's index depth `k` (the last index dim), checking that `updates` has the dims
/// `indices.dims[..-1] ++ data.dims[k..]` with `1 ≤ k ≤ rank(data)`.
pub(super) fn scatter_nd_depth(cx: &Ctx, dd: &[usize], id: &[usize], ud: &[usize]) -> R<usize> {
    let q = id.len();
    let k = id.last().copied().unwrap_or(0);
    let mut want = id[..q.saturating_sub(1)].to_vec();
    if k <= dd.len() {
        want.extend(&dd[k..]);
    }
    if q < 1 || k < 1 || k > dd.len() || ud != want {
        return Err(cx.err(format!(
            "indices {} and updates {} do not address data {} (updates must be indices.dims[..-1] ++ data.dims[k..], k = the last index dim, 1 to rank)",
            dims_str(id),
            dims_str(ud),
            dims_str(dd)
        )));
    }
    Ok(k)
}
