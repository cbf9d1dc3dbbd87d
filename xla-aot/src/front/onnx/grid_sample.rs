//! `GridSample` (opsets 16 and 20+) decomposed into elementwise coordinate arithmetic and gathers.
//!
//! Contract: the input `X` is `[N, C, D1, .., Dr]` (r = 2 or 3 spatial dims), the grid
//! `[N, O1, .., Or, r]` of normalised coordinates in [−1, 1] (last entry first: x, y, z), both
//! run-time values; the result is `[N, C, O1, .., Or]`. Every step follows ONNX's reference
//! (PyTorch's `grid_sampler`) in f32: coordinates are unnormalised (`align_corners`), rounded half
//! to even for `nearest`, and a coordinate outside the border range ([0, d−1] with
//! `align_corners`, else [−0.5, d−0.5]) is clamped (`border`) or reflected (`reflection`); the
//! taps (1 nearest, 2 linear, 4 cubic with Keys' a = −0.75, per spatial dim) read pixels with the
//! padding mode: `zeros` weighs an outside tap 0, `border` clamps its index, `reflection`
//! reflects it. Each combination of taps is one gather from X laid out as
//! `[N·D1·…·Dr, C]` (its row number computed in f32, so N·D1·…·Dr must stay below
//! [`F32_EXACT_INDEX`]) times the product of the per-dim weights; every index is clamped into the
//! data, so no read leaves it.

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Literal, Op};

/// Row numbers are computed in f32, exact for integers below 2^24 (24-bit significand).
const F32_EXACT_INDEX: usize = 1 << 24;

/// How far a tap lies outside the floor of its coordinate's range: cubic reads x0 − 1 ..= x0 + 2.
const REFLECT_TAP_REACH: i64 = 2;

/// Keys' cubic convolution parameter of ONNX's (and PyTorch's) grid sampler.
const CUBIC_A: f32 = -0.75;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// One tap along a spatial dim: the index (integral f32, inside the dim) and its weight (`None`:
/// 1).
type Tap = (InstId, Option<InstId>);

impl Importer {
    /// `GridSample(X, grid)`, attributes `mode`, `padding_mode`, `align_corners`.
    pub fn grid_sample(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let x = self.rt_f32(cx, 0)?;
        let grid = self.rt_f32(cx, 1)?;
        let (xd, gd) = (self.dims(x), self.dims(grid));
        let r = xd.len().saturating_sub(2);
        if !(2..=3).contains(&r) || gd.len() != r + 2 || gd[0] != xd[0] || gd[r + 1] != r {
            return Err(cx.err(format!(
                "input {} and grid {} must be [N, C, D1..Dr] and [N, O1..Or, r] with r = 2 or 3",
                dims_str(&xd),
                dims_str(&gd)
            )));
        }
        let mode = match cx.attr_s("mode")?.as_deref() {
            None | Some("linear" | "bilinear") => Mode::Linear,
            Some("nearest") => Mode::Nearest,
            Some("cubic" | "bicubic") => Mode::Cubic,
            Some(o) => {
                return Err(cx.attr_err(
                    "mode",
                    format!("`{o}` is not linear (bilinear), nearest or cubic (bicubic)"),
                ));
            }
        };
        let padding = match cx.attr_s("padding_mode")?.as_deref() {
            None | Some("zeros") => Padding::Zeros,
            Some("border") => Padding::Border,
            Some("reflection") => Padding::Reflection,
            Some(o) => {
                return Err(cx.attr_err(
                    "padding_mode",
                    format!("`{o}` is not zeros, border or reflection"),
                ));
            }
        };
        let align = cx.attr_i_or("align_corners", 0)? != 0;
        let (n, c) = (xd[0], xd[1]);
        let sp = xd[2..].to_vec();
        let positions: usize = sp.iter().product();
        if n.saturating_mul(positions) >= F32_EXACT_INDEX {
            return Err(cx.err(format!(
                "the input has {} pixels per channel over the batch; GridSample computes their row numbers in f32, exact below {F32_EXACT_INDEX}",
                n * positions
            )));
        }
        // The output positions [N, O1..Or] every per-point value has.
        let od = gd[..r + 1].to_vec();
        let mut taps: Vec<Vec<Tap>> = Vec::with_capacity(r);
        for (i, &extent) in sp.iter().enumerate() {
            // Grid entry j is spatial dim r - 1 - j.
            let j = r - 1 - i;
            let mut starts = vec![0; r + 2];
            starts[r + 1] = j;
            let mut limits = gd.clone();
            limits[r + 1] = j + 1;
            let g = self.crop(cx, grid, starts, limits)?;
            let g = self.reshape(cx, g, od.clone())?;
            taps.push(self.grid_taps(cx, g, extent, mode, padding, align)?);
        }
        // X as rows [N·P, C]; the row of batch entry b starts at b·P.
        let mut perm = vec![0];
        perm.extend(2..r + 2);
        perm.push(1);
        let xt = self.add(cx, Op::Transpose { permutation: perm }, &[x])?;
        let table = self.reshape(cx, xt, vec![n * positions, c])?;
        let base: Vec<f32> = (0..n).map(|b| (b * positions) as f32).collect();
        let base = self.b.constant("base", Literal::from_f32(vec![n], &base));
        let base = self.bcast(cx, base, vec![0], od.clone())?;
        let mut strides = vec![1usize; r];
        for i in (0..r.saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * sp[i + 1];
        }
        let mut full = od.clone();
        full.push(c);
        let keep: Vec<usize> = (0..=r).collect();
        let mut acc: Option<InstId> = None;
        let mut pick = vec![0usize; r];
        loop {
            let mut row = base;
            let mut w: Option<InstId> = None;
            for i in 0..r {
                let (idx, wi) = taps[i][pick[i]];
                let st = self.splat(cx, strides[i] as f32, &od)?;
                let off = self.bin(cx, BinaryOp::Multiply, idx, st)?;
                row = self.bin(cx, BinaryOp::Add, row, off)?;
                w = match (w, wi) {
                    (Some(a), Some(b)) => Some(self.bin(cx, BinaryOp::Multiply, a, b)?),
                    (a, b) => a.or(b),
                };
            }
            let row = self.convert(cx, row, DType::I32)?;
            let mut v = self.add(cx, Op::Gather, &[table, row])?;
            if let Some(w) = w {
                let wb = self.bcast(cx, w, keep.clone(), full.clone())?;
                v = self.bin(cx, BinaryOp::Multiply, v, wb)?;
            }
            acc = Some(match acc {
                Some(a) => self.bin(cx, BinaryOp::Add, a, v)?,
                None => v,
            });
            // The next combination of taps (odometer order).
            let mut k = r;
            loop {
                if k == 0 {
                    let acc = acc.ok_or_else(|| cx.err("internal: no taps"))?;
                    let mut back = vec![0, r + 1];
                    back.extend(1..=r);
                    let y = self.add(cx, Op::Transpose { permutation: back }, &[acc])?;
                    return Ok(rt(y, dt::FLOAT));
                }
                k -= 1;
                pick[k] += 1;
                if pick[k] < taps[k].len() {
                    break;
                }
                pick[k] = 0;
            }
        }
    }

    /// The taps along one spatial dim of extent `d` for the normalised coordinates `g`.
    fn grid_taps(
        &mut self,
        cx: &Ctx,
        g: InstId,
        d: usize,
        mode: Mode,
        padding: Padding,
        align: bool,
    ) -> R<Vec<Tap>> {
        let od = self.dims(g);
        let df = d as f32;
        // x = (g + 1) / 2 · (d − 1) with align_corners, else ((g + 1) · d − 1) / 2.
        let (scale, shift) = if align {
            ((df - 1.0) / 2.0, (df - 1.0) / 2.0)
        } else {
            (df / 2.0, (df - 1.0) / 2.0)
        };
        let s = self.splat(cx, scale, &od)?;
        let xs = self.bin(cx, BinaryOp::Multiply, g, s)?;
        let sh = self.splat(cx, shift, &od)?;
        let mut x = self.bin(cx, BinaryOp::Add, xs, sh)?;
        if mode == Mode::Nearest {
            x = self.round_even(cx, x)?;
        }
        let (lo, hi) = if align {
            (0.0, df - 1.0)
        } else {
            (-0.5, df - 0.5)
        };
        x = match padding {
            Padding::Zeros => x,
            Padding::Border => {
                let l = self.splat(cx, lo, &od)?;
                let h = self.splat(cx, hi, &od)?;
                let below = self.add(cx, Op::Compare(CompareDir::Lt), &[x, l])?;
                let above = self.add(cx, Op::Compare(CompareDir::Gt), &[x, h])?;
                let c = self.clamp_to(cx, x, 0.0, df - 1.0)?;
                let y = self.select(cx, above, c, x)?;
                self.select(cx, below, c, y)?
            }
            Padding::Reflection => self.reflect(cx, x, lo, hi)?,
        };
        let one = self.splat(cx, 1.0, &od)?;
        let mut out = Vec::new();
        match mode {
            Mode::Nearest => {
                let i = self.truncated(cx, x)?;
                out.push(self.grid_pixel(cx, i, None, d, padding, lo, hi)?);
            }
            Mode::Linear | Mode::Cubic => {
                let x0 = self.rounded(cx, x, false)?;
                let t = self.bin(cx, BinaryOp::Subtract, x, x0)?;
                let weights = if mode == Mode::Linear {
                    vec![self.bin(cx, BinaryOp::Subtract, one, t)?, t]
                } else {
                    self.cubic_coeffs(cx, t)?
                };
                let first = if mode == Mode::Linear { 0.0 } else { -1.0 };
                for (k, w) in weights.into_iter().enumerate() {
                    let o = self.splat(cx, first + k as f32, &od)?;
                    let i = self.bin(cx, BinaryOp::Add, x0, o)?;
                    out.push(self.grid_pixel(cx, i, Some(w), d, padding, lo, hi)?);
                }
            }
        }
        Ok(out)
    }

    /// Tap index `i` (integral f32) read with the padding mode: its in-range index and weight.
    #[allow(clippy::too_many_arguments)]
    fn grid_pixel(
        &mut self,
        cx: &Ctx,
        i: InstId,
        w: Option<InstId>,
        d: usize,
        padding: Padding,
        lo: f32,
        hi: f32,
    ) -> R<Tap> {
        let od = self.dims(i);
        let top = (d - 1) as f32;
        match padding {
            Padding::Zeros => {
                let z = self.splat(cx, 0.0, &od)?;
                let t = self.splat(cx, top, &od)?;
                let ge = self.add(cx, Op::Compare(CompareDir::Ge), &[i, z])?;
                let le = self.add(cx, Op::Compare(CompareDir::Le), &[i, t])?;
                let one = self.splat(cx, 1.0, &od)?;
                let m = self.select(cx, le, one, z)?;
                let m = self.select(cx, ge, m, z)?;
                let w = match w {
                    Some(w) => self.bin(cx, BinaryOp::Multiply, w, m)?,
                    None => m,
                };
                Ok((self.clamp_to(cx, i, 0.0, top)?, Some(w)))
            }
            Padding::Border => Ok((self.clamp_to(cx, i, 0.0, top)?, w)),
            Padding::Reflection => {
                // Taps lie within 2 of the reflected coordinate's range: their reflections
                // (ONNX's `int(_gs_reflect(i))`) come from a table, one gather per tap.
                let first = lo.floor() as i64 - REFLECT_TAP_REACH;
                let last = hi.floor() as i64 + REFLECT_TAP_REACH;
                let table: Vec<f32> = (first..=last)
                    .map(|i| {
                        (reflect_index(i as f64, lo as f64, hi as f64).trunc())
                            .clamp(0.0, top as f64) as f32
                    })
                    .collect();
                let tc = self
                    .b
                    .constant("reflect", Literal::from_f32(vec![table.len()], &table));
                let f = self.splat(cx, -(first as f32), &od)?;
                let at = self.bin(cx, BinaryOp::Add, i, f)?;
                let at = self.convert(cx, at, DType::I32)?;
                Ok((self.add(cx, Op::Gather, &[tc, at])?, w))
            }
        }
    }

    /// `min(max(x, lo), hi)` with scalar bounds.
    fn clamp_to(&mut self, cx: &Ctx, x: InstId, lo: f32, hi: f32) -> R<InstId> {
        let l = self.b.scalar("constant", lo);
        let h = self.b.scalar("constant", hi);
        self.add(cx, Op::Clamp, &[l, x, h])
    }

    /// `x` reflected into [lo, hi] by the near border until inside (ONNX's `_gs_reflect`), as
    /// the triangle wave lo + w − |((x − lo) mod 2w) − w| of width w = hi − lo (each use of `x`
    /// is recomputed inside a fused kernel, so the form with the fewest uses is kept); a
    /// zero-width range gives `lo`.
    fn reflect(&mut self, cx: &Ctx, x: InstId, lo: f32, hi: f32) -> R<InstId> {
        let od = self.dims(x);
        let w = hi - lo;
        let l = self.splat(cx, lo, &od)?;
        if w <= 0.0 {
            return Ok(l);
        }
        let y = self.bin(cx, BinaryOp::Subtract, x, l)?;
        let inv = self.splat(cx, 0.5 / w, &od)?;
        let q = self.bin(cx, BinaryOp::Multiply, y, inv)?;
        let q = self.rounded(cx, q, false)?;
        let period = self.splat(cx, 2.0 * w, &od)?;
        let qp = self.bin(cx, BinaryOp::Multiply, q, period)?;
        let m = self.bin(cx, BinaryOp::Subtract, y, qp)?;
        let wv = self.splat(cx, w, &od)?;
        let dm = self.bin(cx, BinaryOp::Subtract, m, wv)?;
        let a = self.un(cx, crate::ir::UnaryOp::Abs, dm)?;
        let top = self.splat(cx, hi, &od)?;
        self.bin(cx, BinaryOp::Subtract, top, a)
    }

    /// Keys' cubic weights of the taps x0 − 1, x0, x0 + 1, x0 + 2 for the fraction `t`.
    fn cubic_coeffs(&mut self, cx: &Ctx, t: InstId) -> R<Vec<InstId>> {
        let od = self.dims(t);
        let a = CUBIC_A;
        // Outer taps at distance u ∈ [1, 2]: ((a·u − 5a)·u + 8a)·u − 4a.
        let outer = |me: &mut Self, u: InstId| -> R<InstId> {
            let c1 = me.splat(cx, a, &od)?;
            let v = me.bin(cx, BinaryOp::Multiply, c1, u)?;
            let c2 = me.splat(cx, -5.0 * a, &od)?;
            let v = me.bin(cx, BinaryOp::Add, v, c2)?;
            let v = me.bin(cx, BinaryOp::Multiply, v, u)?;
            let c3 = me.splat(cx, 8.0 * a, &od)?;
            let v = me.bin(cx, BinaryOp::Add, v, c3)?;
            let v = me.bin(cx, BinaryOp::Multiply, v, u)?;
            let c4 = me.splat(cx, -4.0 * a, &od)?;
            me.bin(cx, BinaryOp::Add, v, c4)
        };
        // Inner taps at distance u ∈ [0, 1]: ((a + 2)·u − (a + 3))·u² + 1.
        let inner = |me: &mut Self, u: InstId| -> R<InstId> {
            let c1 = me.splat(cx, a + 2.0, &od)?;
            let v = me.bin(cx, BinaryOp::Multiply, c1, u)?;
            let c2 = me.splat(cx, -(a + 3.0), &od)?;
            let v = me.bin(cx, BinaryOp::Add, v, c2)?;
            let v = me.bin(cx, BinaryOp::Multiply, v, u)?;
            let v = me.bin(cx, BinaryOp::Multiply, v, u)?;
            let one = me.splat(cx, 1.0, &od)?;
            me.bin(cx, BinaryOp::Add, v, one)
        };
        let one = self.splat(cx, 1.0, &od)?;
        let two = self.splat(cx, 2.0, &od)?;
        let tp1 = self.bin(cx, BinaryOp::Add, t, one)?;
        let omt = self.bin(cx, BinaryOp::Subtract, one, t)?;
        let tmt = self.bin(cx, BinaryOp::Subtract, two, t)?;
        Ok(vec![
            outer(self, tp1)?,
            inner(self, t)?,
            inner(self, omt)?,
            outer(self, tmt)?,
        ])
    }
}

/// ONNX's `_gs_reflect` on one value (f64): reflected by the near border until inside [lo, hi].
fn reflect_index(x: f64, lo: f64, hi: f64) -> f64 {
    let rng = hi - lo;
    if rng <= 0.0 {
        return lo;
    }
    let (dx, from_lo) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let n = (dx / rng).trunc();
    let r = dx - n * rng;
    if (n as i64 % 2 == 0) == from_lo {
        lo + r
    } else {
        hi - r
    }
}
