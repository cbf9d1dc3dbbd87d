//! ScatterND and ScatterElements with run-time indices, as comparisons of every data position
//! with every index.
//!
//! Contract (ScatterND): the data is `[P, S]` rows (P = Π dims[..k], S = Π dims[k..]), the U index tuples
//! give row numbers r_u computed in f32 (negative coordinates wrap; a tuple with a coordinate
//! outside its axis after wrapping matches no row, so nothing is written out of bounds). The
//! match matrix M[p, u] = (r_u = p) decides every row: `none` takes the update of the last
//! matching tuple (one max-reduction over u and one gather), `add`/`mul`/`max`/`min` reduce the
//! matching updates (the others replaced by the reduction's identity) over u and combine the
//! result with the row. The work is P·U comparisons (P·U·S for the reductions), linear in the
//! data for the usual few updates (a KV-cache write of one step); beyond
//! [`MAX_RUNTIME_SCATTER_WORK`] it is an error naming the node.
//!
//! ScatterElements works per line along `axis`: with the axis moved last, the L lines of n data
//! elements meet their m indices and updates (the indices' other extents, where smaller than the
//! data's, are padded with an index that matches nothing), M[l, i, j] = (idx[l, j] = i) after
//! negative indices wrap (an index outside the axis writes nothing), and each element takes its
//! last matching update or the reduction of all of them as above: L·n·m comparisons (L·n·m
//! again for the reductions), bounded by the same limit.

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, rt};
use super::scatter::Reduction;
use super::tensor::{is_int_type, runtime_dtype, strides};
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Literal, Op, ReduceKind};

/// Most elements of a run-time scatter's match matrix (P·U, or P·U·S for a reduction): 2^24
/// (16 Mi) keeps the matrix under 64 MB and its comparisons under ~10 ms on one core; larger
/// scatters need constant indices.
pub const MAX_RUNTIME_SCATTER_WORK: usize = 1 << 24;

impl Importer {
    /// `ScatterND(data, indices, updates)` with run-time `indices`.
    pub(super) fn scatter_nd_rt(
        &mut self,
        cx: &Ctx,
        red: Reduction,
        data: InstId,
        ty: i32,
    ) -> R<Outs> {
        let dd = self.dims(data);
        let ((ind, id), (upd, uty, ud)) = self.scatter_rt_operands(cx)?;
        let k = super::scatter::scatter_nd_depth(cx, &dd, &id, &ud)?;
        let dty = self.b.dtype(data);
        if runtime_dtype(uty) != Some(dty) {
            return Err(cx.err("updates must have the data's element type"));
        }
        let p: usize = dd[..k].iter().product();
        let s: usize = dd[k..].iter().product();
        let u: usize = id[..id.len() - 1].iter().product();
        let work = if red == Reduction::None {
            p.saturating_mul(u)
        } else {
            p.saturating_mul(u).saturating_mul(s)
        };
        if work > MAX_RUNTIME_SCATTER_WORK {
            return Err(cx
                .err(format!(
                    "a run-time scatter of {u} index tuples into {p} rows compares {work} elements (at most {MAX_RUNTIME_SCATTER_WORK})"
                ))
                .hint("make the indices an initializer or a Constant, or freeze the input (--freeze NAME=VALUE)"));
        }
        if p == 0 || s == 0 || u == 0 {
            return Err(cx.err("scattering empty tensors is not supported"));
        }
        // Row number of every tuple, -1 for a tuple outside the data.
        let f = self.convert(cx, ind, DType::F32)?;
        let f = self.reshape(cx, f, vec![u, k])?;
        let rs = strides(&dd[..k]);
        let mut row = self.splat(cx, 0.0, &[u])?;
        let mut valid: Option<InstId> = None;
        let zero = self.splat(cx, 0.0, &[u])?;
        for (j, &st) in rs.iter().enumerate() {
            let col = self.crop(cx, f, vec![0, j], vec![u, j + 1])?;
            let col = self.reshape(cx, col, vec![u])?;
            let n = self.splat(cx, dd[j] as f32, &[u])?;
            let neg = self.add(cx, Op::Compare(CompareDir::Lt), &[col, zero])?;
            let wrapped = self.bin(cx, BinaryOp::Add, col, n)?;
            let col = self.select(cx, neg, wrapped, col)?;
            let ge = self.add(cx, Op::Compare(CompareDir::Ge), &[col, zero])?;
            let lt = self.add(cx, Op::Compare(CompareDir::Lt), &[col, n])?;
            let ok = self.select(cx, ge, lt, ge)?;
            valid = Some(match valid {
                Some(v) => self.select(cx, v, ok, v)?,
                None => ok,
            });
            let stv = self.splat(cx, st as f32, &[u])?;
            let off = self.bin(cx, BinaryOp::Multiply, col, stv)?;
            row = self.bin(cx, BinaryOp::Add, row, off)?;
        }
        let none = self.splat(cx, -1.0, &[u])?;
        let valid = valid.ok_or_else(|| cx.err("internal: no index columns"))?;
        let row = self.select(cx, valid, row, none)?;
        // M[p, u] = (row_u == p).
        let iota: Vec<f32> = (0..p).map(|v| v as f32).collect();
        let rows = self.b.constant("rows", Literal::from_f32(vec![p], &iota));
        let rows = self.bcast(cx, rows, vec![0], vec![p, u])?;
        let rb = self.bcast(cx, row, vec![1], vec![p, u])?;
        let m = self.add(cx, Op::Compare(CompareDir::Eq), &[rows, rb])?;
        let arith = red != Reduction::None;
        let to = if arith { DType::F32 } else { dty };
        if arith && dty == DType::Pred {
            return Err(cx.err("a reducing scatter of bool tensors is not supported"));
        }
        let data2 = self.reshape(cx, data, vec![p, s])?;
        let data2 = self.convert(cx, data2, to)?;
        let upd2 = self.reshape(cx, upd, vec![u, s])?;
        let upd2 = self.convert(cx, upd2, to)?;
        let y = if red == Reduction::None {
            // The last matching tuple: max over u of (u + 1 where matching, else 0).
            let ord: Vec<f32> = (1..=u).map(|v| v as f32).collect();
            let ord = self.b.constant("order", Literal::from_f32(vec![u], &ord));
            let ord = self.bcast(cx, ord, vec![1], vec![p, u])?;
            let z = self.splat(cx, 0.0, &[p, u])?;
            let key = self.select(cx, m, ord, z)?;
            let last = self.reduce_raw(cx, ReduceKind::Max, key, &[1])?;
            let zp = self.splat(cx, 0.0, &[p])?;
            let hit = self.add(cx, Op::Compare(CompareDir::Gt), &[last, zp])?;
            let one = self.splat(cx, 1.0, &[p])?;
            let src = self.bin(cx, BinaryOp::Subtract, last, one)?;
            let src = self.bin(cx, BinaryOp::Maximum, src, zp)?;
            let src = self.convert(cx, src, DType::I32)?;
            let g = self.add(cx, Op::Gather, &[upd2, src])?;
            let hb = self.bcast(cx, hit, vec![0], vec![p, s])?;
            self.select(cx, hb, g, data2)?
        } else {
            let mb = self.bcast(cx, m, vec![0, 1], vec![p, u, s])?;
            let ub = self.bcast(cx, upd2, vec![1, 2], vec![p, u, s])?;
            self.reduce_matches(cx, red, mb, ub, 1, data2)?
        };
        let y = self.convert(cx, y, dty)?;
        let y = self.reshape(cx, y, dd)?;
        Ok(rt(y, ty))
    }

    /// `ScatterElements(data, indices, updates)` with run-time `indices`, attribute `axis`.
    pub(super) fn scatter_elements_rt(
        &mut self,
        cx: &Ctx,
        red: Reduction,
        data: InstId,
        ty: i32,
    ) -> R<Outs> {
        let dd = self.dims(data);
        let ((ind, id), (upd, uty, ud)) = self.scatter_rt_operands(cx)?;
        let r = dd.len();
        if id.len() != r || ud != id || r == 0 || id.iter().zip(&dd).any(|(i, d)| i > d) {
            return Err(cx.err(format!(
                "data {}, indices {} and updates {} must have one rank (at least 1), indices and updates one shape within the data's",
                dims_str(&dd),
                dims_str(&id),
                dims_str(&ud)
            )));
        }
        let dty = self.b.dtype(data);
        if runtime_dtype(uty) != Some(dty) {
            return Err(cx.err("updates must have the data's element type"));
        }
        let axis = cx.axis("axis", cx.attr_i_or("axis", 0)?, r)?;
        let (n, m) = (dd[axis], id[axis]);
        let lines: usize = dd.iter().product::<usize>() / n.max(1);
        let work = lines.saturating_mul(n).saturating_mul(m);
        if work > MAX_RUNTIME_SCATTER_WORK {
            return Err(cx
                .err(format!(
                    "a run-time scatter of {m} indices into each of {lines} lines of {n} compares {work} elements (at most {MAX_RUNTIME_SCATTER_WORK})"
                ))
                .hint("make the indices an initializer or a Constant, or freeze the input (--freeze NAME=VALUE)"));
        }
        if work == 0 {
            return Err(cx.err("scattering empty tensors is not supported"));
        }
        let arith = red != Reduction::None;
        if arith && dty == DType::Pred {
            return Err(cx.err("a reducing scatter of bool tensors is not supported"));
        }
        let to = if arith { DType::F32 } else { dty };
        // The axis last: [.., n] data lines, [.., m] index and update lines.
        let mut perm: Vec<usize> = (0..r).filter(|&d| d != axis).collect();
        perm.push(axis);
        let mut inv = vec![0; r];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        let last = |me: &mut Self, x: InstId| -> R<InstId> {
            if axis == r - 1 {
                Ok(x)
            } else {
                me.add(
                    cx,
                    Op::Transpose {
                        permutation: perm.clone(),
                    },
                    &[x],
                )
            }
        };
        let dt_ = self.convert(cx, data, to)?;
        let dt_ = last(self, dt_)?;
        let fi = self.convert(cx, ind, DType::F32)?;
        let fi = last(self, fi)?;
        let ut = self.convert(cx, upd, to)?;
        let ut = last(self, ut)?;
        // Index lines padded to the data's line extents with an index that matches nothing.
        let td = self.dims(dt_);
        let ti = self.dims(fi);
        let mut high: Vec<usize> = td.iter().zip(&ti).map(|(d, i)| d - i).collect();
        high[r - 1] = 0;
        let (fi, ut) = if high.iter().any(|&h| h > 0) {
            let none = self.b.scalar("constant", -(n as f32) - 1.0);
            let fi = self.add(
                cx,
                Op::Pad {
                    low: vec![0; r],
                    high: high.clone(),
                },
                &[fi, none],
            )?;
            let zero = match to {
                DType::I32 => self.b.constant("constant", Literal::from_i32(vec![], &[0])),
                DType::Pred => self
                    .b
                    .constant("constant", Literal::from_pred(vec![], &[false])),
                _ => self.b.scalar("constant", 0.0),
            };
            let ut = self.add(
                cx,
                Op::Pad {
                    low: vec![0; r],
                    high,
                },
                &[ut, zero],
            )?;
            (fi, ut)
        } else {
            (fi, ut)
        };
        let fi = self.reshape(cx, fi, vec![lines, m])?;
        let ut = self.reshape(cx, ut, vec![lines, m])?;
        let dl = self.reshape(cx, dt_, vec![lines, n])?;
        // Negative indices wrap; M[l, i, j] = (idx[l, j] == i).
        let zero = self.splat(cx, 0.0, &[lines, m])?;
        let ext = self.splat(cx, n as f32, &[lines, m])?;
        let neg = self.add(cx, Op::Compare(CompareDir::Lt), &[fi, zero])?;
        let wrapped = self.bin(cx, BinaryOp::Add, fi, ext)?;
        let fi = self.select(cx, neg, wrapped, fi)?;
        let pos: Vec<f32> = (0..n).map(|v| v as f32).collect();
        let pos = self
            .b
            .constant("positions", Literal::from_f32(vec![n], &pos));
        let full = vec![lines, n, m];
        let pb = self.bcast(cx, pos, vec![1], full.clone())?;
        let ib = self.bcast(cx, fi, vec![0, 2], full.clone())?;
        let mm = self.add(cx, Op::Compare(CompareDir::Eq), &[pb, ib])?;
        let y = if red == Reduction::None {
            let ord: Vec<f32> = (1..=m).map(|v| v as f32).collect();
            let ord = self.b.constant("order", Literal::from_f32(vec![m], &ord));
            let ord = self.bcast(cx, ord, vec![2], full.clone())?;
            let z = self.splat(cx, 0.0, &full)?;
            let key = self.select(cx, mm, ord, z)?;
            let lastm = self.reduce_raw(cx, ReduceKind::Max, key, &[2])?;
            let zl = self.splat(cx, 0.0, &[lines, n])?;
            let hit = self.add(cx, Op::Compare(CompareDir::Gt), &[lastm, zl])?;
            let one = self.splat(cx, 1.0, &[lines, n])?;
            let j = self.bin(cx, BinaryOp::Subtract, lastm, one)?;
            let j = self.bin(cx, BinaryOp::Maximum, j, zl)?;
            // The update at [l, j]: flat l·m + j.
            let base: Vec<f32> = (0..lines).map(|l| (l * m) as f32).collect();
            let base = self
                .b
                .constant("base", Literal::from_f32(vec![lines], &base));
            let base = self.bcast(cx, base, vec![0], vec![lines, n])?;
            let at = self.bin(cx, BinaryOp::Add, base, j)?;
            let at = self.convert(cx, at, DType::I32)?;
            let uflat = self.reshape(cx, ut, vec![lines * m])?;
            let g = self.add(cx, Op::Gather, &[uflat, at])?;
            self.select(cx, hit, g, dl)?
        } else {
            let ub = self.bcast(cx, ut, vec![0, 2], full.clone())?;
            self.reduce_matches(cx, red, mm, ub, 2, dl)?
        };
        let y = self.reshape(cx, y, td)?;
        let y = if axis == r - 1 {
            y
        } else {
            self.add(cx, Op::Transpose { permutation: inv }, &[y])?
        };
        let y = self.convert(cx, y, dty)?;
        Ok(rt(y, ty))
    }
}

impl Importer {
    /// A run-time scatter's indices (input 1, integers) and updates (input 2), with their dims
    /// and the updates' ONNX type.
    #[allow(clippy::type_complexity)]
    fn scatter_rt_operands(
        &mut self,
        cx: &Ctx,
    ) -> R<((InstId, Vec<usize>), (InstId, i32, Vec<usize>))> {
        let (ind, ity) = self.rt(cx, 1)?;
        if !is_int_type(ity) {
            return Err(cx.err("input 1 (indices) must be integers"));
        }
        let id = self.dims(ind);
        let (upd, uty) = self.rt(cx, 2)?;
        let ud = self.dims(upd);
        Ok(((ind, id), (upd, uty, ud)))
    }

    /// `data ⊕ reduce_axis(select(matches, updates, identity))`: the updates that match each
    /// position (`matches` and `updates` of one shape), the others replaced by the reduction's
    /// identity, reduced along `axis` and combined with `data` (add, mul, max or min).
    fn reduce_matches(
        &mut self,
        cx: &Ctx,
        red: Reduction,
        matches: InstId,
        updates: InstId,
        axis: usize,
        data: InstId,
    ) -> R<InstId> {
        let identity = match red {
            Reduction::Add => 0.0,
            Reduction::Mul => 1.0,
            Reduction::Max => f32::NEG_INFINITY,
            _ => f32::INFINITY,
        };
        let dims = self.b.shape(matches).dims.clone();
        let id = self.splat(cx, identity, &dims)?;
        let t = self.select(cx, matches, updates, id)?;
        let (r, op) = match red {
            Reduction::Add => (
                self.reduce_raw(cx, ReduceKind::Add, t, &[axis])?,
                BinaryOp::Add,
            ),
            Reduction::Max => (
                self.reduce_raw(cx, ReduceKind::Max, t, &[axis])?,
                BinaryOp::Maximum,
            ),
            Reduction::Min => (
                self.reduce_raw(cx, ReduceKind::Min, t, &[axis])?,
                BinaryOp::Minimum,
            ),
            _ => (self.product(cx, t, &[axis])?, BinaryOp::Multiply),
        };
        self.bin(cx, op, data, r)
    }
}
