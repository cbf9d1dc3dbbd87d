//! Ops that pick or rearrange elements by position: GatherElements, Trilu, Hardmax,
//! DepthToSpace, SpaceToDepth and ReverseSequence.
//!
//! Contract: GatherElements reads the flattened data at `base + index · stride(axis)` (the base
//! and stride known at import time; constant indices fold to one constant gather, run-time int32
//! indices wrap when negative and are clamped by the gather like Gather's); Trilu keeps the upper
//! or lower triangle of the last two dims (a constant mask; `k` a compile-time input); Hardmax is
//! 1 at the first maximum along its axis (opset 13's single axis, and before 13 the 2-D coercion);
//! DepthToSpace (DCR and CRD) and SpaceToDepth are reshape–transpose–reshape. ReverseSequence
//! reverses the first `sequence_lens[b]` steps along `time_axis` of every batch entry b (the
//! lengths compile-time constants in [0, time extent]) as one constant-index gather.

use super::context::{Ctx, Importer, R, Val};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use super::tensor::{is_int_type, strides};
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, CompareDir, DType, Literal, Op};

impl Importer {
    /// `GatherElements(data, indices)`.
    pub fn gather_elements(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let (data, ty) = self.rt(cx, 0)?;
        let dd = self.dims(data);
        let ind = self.input(cx, 1)?;
        if !is_int_type(super::context::ty_of(&ind)) {
            return Err(cx.err("input 1 (indices) must be integers"));
        }
        let id = self.dims_of(&ind);
        if id.len() != dd.len() || dd.is_empty() {
            return Err(cx.err(format!(
                "indices {} must have the rank of the data {} (at least 1)",
                dims_str(&id),
                dims_str(&dd)
            )));
        }
        let axis = cx.axis("axis", cx.attr_i_or("axis", 0)?, dd.len())?;
        let ds = strides(&dd);
        let is = strides(&id);
        let count: usize = id.iter().product();
        let n = dd[axis] as i64;
        // The flat offset of every output position but for its axis coordinate.
        let base: Vec<i64> = (0..count)
            .map(|k| {
                (0..id.len())
                    .filter(|&d| d != axis)
                    .map(|d| ((k / is[d]) % id[d]) as i64 * ds[d] as i64)
                    .sum()
            })
            .collect();
        let total: usize = dd.iter().product();
        let flat = self.reshape(cx, data, vec![total])?;
        let g = match ind {
            Val::Const(c) => {
                let mut idx = Vec::with_capacity(count);
                for (k, &i) in c.as_i64().iter().enumerate() {
                    let j = if i < 0 { i + n } else { i };
                    if j < 0 || j >= n {
                        return Err(cx.err(format!(
                            "index {i} is out of range for axis {axis} of extent {n}"
                        )));
                    }
                    idx.push((base[k] + j * ds[axis] as i64) as usize);
                }
                self.take(cx, flat, 0, &idx, id.clone())?
            }
            Val::Rt { id: iid, .. } => {
                let f = self.convert(cx, iid, DType::F32)?;
                let zero = self.splat(cx, 0.0, &id)?;
                let neg = self.add(cx, Op::Compare(CompareDir::Lt), &[f, zero])?;
                let ext = self.splat(cx, n as f32, &id)?;
                let wrapped = self.bin(cx, BinaryOp::Add, f, ext)?;
                let f = self.select(cx, neg, wrapped, f)?;
                let st = self.splat(cx, ds[axis] as f32, &id)?;
                let off = self.bin(cx, BinaryOp::Multiply, f, st)?;
                let b: Vec<f32> = base.iter().map(|&v| v as f32).collect();
                let bc = self.b.constant("base", Literal::from_f32(id.clone(), &b));
                let at = self.bin(cx, BinaryOp::Add, off, bc)?;
                let at = self.convert(cx, at, DType::I32)?;
                self.add(cx, Op::Gather, &[flat, at])?
            }
        };
        Ok(rt(g, ty))
    }

    /// `ReverseSequence(input, sequence_lens)`, attributes `batch_axis` (default 1) and
    /// `time_axis` (default 0).
    pub fn reverse_sequence(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let (x, ty) = self.rt(cx, 0)?;
        let xd = self.dims(x);
        if xd.len() < 2 {
            return Err(cx.err(format!("input {} needs rank >= 2", dims_str(&xd))));
        }
        let lens = self.konst_ints(cx, 1, "sequence_lens").map_err(|e| {
            e.hint("the lengths decide which elements move: freeze the input (--freeze NAME=VALUE) or make it an initializer")
        })?;
        let batch = cx.axis("batch_axis", cx.attr_i_or("batch_axis", 1)?, 2)?;
        let time = cx.axis("time_axis", cx.attr_i_or("time_axis", 0)?, 2)?;
        if batch == time {
            return Err(cx.err("batch_axis and time_axis must differ (0 and 1)"));
        }
        if lens.len() != xd[batch] {
            return Err(cx.err(format!(
                "sequence_lens has {} entries; the batch axis {batch} has extent {}",
                lens.len(),
                xd[batch]
            )));
        }
        let steps = xd[time];
        if let Some(&bad) = lens.iter().find(|&&l| l < 0 || l as u64 > steps as u64) {
            return Err(cx.err(format!(
                "sequence length {bad} is outside [0, {steps}] (the extent of the time axis)"
            )));
        }
        let st = strides(&xd);
        let total: usize = xd.iter().product();
        let idx: Vec<usize> = (0..total)
            .map(|p| {
                let (b, t) = ((p / st[batch]) % xd[batch], (p / st[time]) % steps);
                let len = lens[b] as usize;
                if t < len {
                    p - t * st[time] + (len - 1 - t) * st[time]
                } else {
                    p
                }
            })
            .collect();
        let flat = self.reshape(cx, x, vec![total])?;
        let y = self.take(cx, flat, 0, &idx, xd)?;
        Ok(rt(y, ty))
    }

    /// `Trilu(input[, k])`.
    pub fn trilu(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 2)?;
        let (x, ty) = self.rt(cx, 0)?;
        let xd = self.dims(x);
        let r = xd.len();
        if r < 2 {
            return Err(cx.err(format!("input {} needs rank >= 2", dims_str(&xd))));
        }
        let k = if cx.has_input(1) {
            let v = self.konst_ints(cx, 1, "k")?;
            *v.first().ok_or_else(|| cx.err("input 1 (k) is empty"))?
        } else {
            0
        };
        let upper = cx.attr_i_or("upper", 1)? != 0;
        let (m, n) = (xd[r - 2], xd[r - 1]);
        let mask: Vec<bool> = (0..m * n)
            .map(|p| {
                let (i, j) = ((p / n) as i64, (p % n) as i64);
                if upper { j - i >= k } else { j - i <= k }
            })
            .collect();
        let mc = self
            .b
            .constant("mask", Literal::from_pred(vec![m, n], &mask));
        let mb = self.bcast(cx, mc, vec![r - 2, r - 1], xd.clone())?;
        let zero = match self.b.dtype(x) {
            DType::I32 => Literal::from_i32(vec![], &[0]),
            DType::Pred => Literal::from_pred(vec![], &[false]),
            _ => Literal::scalar_f32(0.0),
        };
        let z = self.b.constant("constant", zero);
        let zb = self.bcast(cx, z, vec![], xd)?;
        let y = self.select(cx, mb, x, zb)?;
        Ok(rt(y, ty))
    }

    /// `Hardmax(input)`: 1.0 at the first maximum along `axis`, 0.0 elsewhere.
    pub fn hardmax(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        let (x, xd) = self.rt_f32_nonscalar(cx, 0)?;
        // Hardmax-13 made `axis` (default -1) the one axis; before, the input is coerced to 2-D
        // at `axis` (default 1) and the maximum is taken over the whole second part.
        let coerce = cx.before(13);
        let axis = cx.axis(
            "axis",
            cx.attr_i_or("axis", if coerce { 1 } else { -1 })?,
            xd.len(),
        )?;
        let (x2, a) = if coerce {
            let rows: usize = xd[..axis].iter().product();
            let cols: usize = xd[axis..].iter().product();
            (self.reshape(cx, x, vec![rows, cols])?, 1)
        } else {
            (x, axis)
        };
        let d2 = self.dims(x2);
        let am = self.add(cx, Op::Argmax { dimension: a }, &[x2])?;
        let amf = self.convert(cx, am, DType::F32)?;
        let kept: Vec<usize> = (0..d2.len()).filter(|&i| i != a).collect();
        let amb = self.bcast(cx, amf, kept, d2.clone())?;
        let n = d2[a];
        let pos: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let pc = self
            .b
            .constant("positions", Literal::from_f32(vec![n], &pos));
        let pb = self.bcast(cx, pc, vec![a], d2.clone())?;
        let hit = self.add(cx, Op::Compare(CompareDir::Eq), &[amb, pb])?;
        let one = self.splat(cx, 1.0, &d2)?;
        let zero = self.splat(cx, 0.0, &d2)?;
        let y = self.select(cx, hit, one, zero)?;
        let y = self.reshape(cx, y, xd)?;
        Ok(rt(y, dt::FLOAT))
    }

    /// `DepthToSpace` (`space` false: SpaceToDepth) with `blocksize`.
    pub fn depth_space(&mut self, cx: &Ctx, to_space: bool) -> R<Outs> {
        cx.arity(1, 1)?;
        let (x, ty) = self.rt(cx, 0)?;
        let xd = self.dims(x);
        let b = cx.attr_i("blocksize")?.unwrap_or(0);
        if xd.len() != 4 || b < 1 {
            return Err(cx.err(format!(
                "needs a rank-4 [N, C, H, W] input and a positive blocksize (got {} and {b})",
                dims_str(&xd)
            )));
        }
        let b = b as usize;
        let [nn, c, h, w] = [xd[0], xd[1], xd[2], xd[3]];
        let (shape6, perm, out) = if to_space {
            if c % (b * b) != 0 {
                return Err(cx.err(format!(
                    "the channels {c} are not a multiple of blocksize² = {}",
                    b * b
                )));
            }
            let c2 = c / (b * b);
            match cx.attr_s("mode")?.as_deref().unwrap_or("DCR") {
                "DCR" => (
                    vec![nn, b, b, c2, h, w],
                    vec![0, 3, 4, 1, 5, 2],
                    vec![nn, c2, h * b, w * b],
                ),
                "CRD" => (
                    vec![nn, c2, b, b, h, w],
                    vec![0, 1, 4, 2, 5, 3],
                    vec![nn, c2, h * b, w * b],
                ),
                o => return Err(cx.attr_err("mode", format!("`{o}` is not DCR or CRD"))),
            }
        } else {
            if h % b != 0 || w % b != 0 {
                return Err(cx.err(format!(
                    "H {h} and W {w} must be multiples of the blocksize {b}"
                )));
            }
            // DCR (the default; the only form before opset 25): blocks before channels.
            let perm = match cx.attr_s("mode")?.as_deref().unwrap_or("DCR") {
                "DCR" => vec![0, 3, 5, 1, 2, 4],
                "CRD" => vec![0, 1, 3, 5, 2, 4],
                o => return Err(cx.attr_err("mode", format!("`{o}` is not DCR or CRD"))),
            };
            (
                vec![nn, c, h / b, b, w / b, b],
                perm,
                vec![nn, c * b * b, h / b, w / b],
            )
        };
        let r = self.reshape(cx, x, shape6)?;
        let t = self.add(cx, Op::Transpose { permutation: perm }, &[r])?;
        let y = self.reshape(cx, t, out)?;
        Ok(rt(y, ty))
    }
}
