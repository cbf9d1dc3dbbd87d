//! `BitShift(x, s)` on integer tensors, computed in f32 like the other integer arithmetic.
//!
//! Contract: for element width w (8, 16, 32 or 64, from the ONNX type), `LEFT` gives x · 2^s
//! wrapped to w bits (two's complement for signed types) and `RIGHT` gives ⌊x / 2^s⌋ (an arithmetic
//! shift for signed types); a shift outside [0, w) gives 0 (`LEFT`) or the sign fill −1 / 0
//! (`RIGHT`), as opset 28 defines it. The power 2^±s comes from a (w + 1)-entry table read by the
//! clamping `gather` (entry w is the out-of-range shift), so every step is exact: scaling by a
//! power of two, ⌊·⌋ and the wrap (v − ⌊v / 2^w⌋ · 2^w) are exact in f32 whenever x itself is, that
//! is for |x| < 2^24 (integers are held in i32 and computed in f32 throughout the importer).

use super::context::{Ctx, Importer, R};
use super::elementwise::{Outs, rt};
use super::proto::data_type as dt;
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Literal, Op};

impl Importer {
    /// `BitShift(X, Y)`, attribute `direction` (`LEFT` or `RIGHT`).
    pub fn bit_shift(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let left = match cx.attr_s("direction")?.as_deref() {
            Some("LEFT") => true,
            Some("RIGHT") => false,
            Some(o) => return Err(cx.attr_err("direction", format!("`{o}` is not LEFT or RIGHT"))),
            None => return Err(cx.attr_err("direction", "is required (LEFT or RIGHT)")),
        };
        let (ty, ty1) = (
            super::context::ty_of(&self.input(cx, 0)?),
            super::context::ty_of(&self.input(cx, 1)?),
        );
        let (width, signed) = match ty {
            dt::UINT8 => (8, false),
            dt::UINT16 => (16, false),
            dt::UINT32 => (32, false),
            dt::UINT64 => (64, false),
            dt::INT8 => (8, true),
            dt::INT16 => (16, true),
            dt::INT32 => (32, true),
            dt::INT64 => (64, true),
            other => {
                return Err(cx.err(format!(
                    "shifting {} tensors is not supported (integers of 8 to 64 bits held in i32)",
                    dt::name(other)
                )));
            }
        };
        if ty1 != ty {
            return Err(cx.err(format!(
                "its inputs have different element types ({} and {})",
                dt::name(ty),
                dt::name(ty1)
            )));
        }
        let (ids, _) = self.as_f32(cx, &[0, 1])?;
        let v = self.broadcast_all(cx, &ids)?;
        let (x, s) = (v[0], v[1]);
        let d = self.dims(x);
        // Entry k is 2^k (LEFT) or 2^-k (RIGHT) for k < w; entry w serves every shift outside
        // [0, w): 0 zeroes a left shift, 2^-w leaves the sign fill ⌊x / 2^w⌋ ∈ {−1, 0}.
        let table: Vec<f32> = (0..=width)
            .map(|k| match (left, k == width) {
                (true, true) => 0.0,
                (true, false) => 2f32.powi(k),
                (false, _) => 2f32.powi(-k),
            })
            .collect();
        let tc = self
            .b
            .constant("shift_table", Literal::from_f32(vec![table.len()], &table));
        let zero = self.splat(cx, 0.0, &d)?;
        let neg = self.add(cx, Op::Compare(CompareDir::Lt), &[s, zero])?;
        let w = self.splat(cx, width as f32, &d)?;
        let s = self.select(cx, neg, w, s)?;
        let si = self.convert(cx, s, DType::I32)?;
        let p = self.add(cx, Op::Gather, &[tc, si])?;
        let scaled = self.bin(cx, BinaryOp::Multiply, x, p)?;
        let y = if left {
            self.wrap(cx, scaled, width, signed)?
        } else {
            self.rounded(cx, scaled, false)?
        };
        let y = self.convert(cx, y, DType::I32)?;
        Ok(rt(y, ty))
    }

    /// An integral f32 `v` wrapped to `width` bits: v mod 2^w, then for a signed type the values
    /// from 2^(w−1) on moved down by 2^w. A signed value already in range passes unchanged (so a
    /// small negative one is not rounded through 2^w − |v|).
    fn wrap(&mut self, cx: &Ctx, v: InstId, width: i32, signed: bool) -> R<InstId> {
        let d = self.dims(v);
        let full = self.splat(cx, 2f32.powi(width), &d)?;
        let inv = self.splat(cx, 2f32.powi(-width), &d)?;
        let q = self.bin(cx, BinaryOp::Multiply, v, inv)?;
        let q = self.rounded(cx, q, false)?;
        let qm = self.bin(cx, BinaryOp::Multiply, q, full)?;
        let r = self.bin(cx, BinaryOp::Subtract, v, qm)?;
        if !signed {
            return Ok(r);
        }
        let half = self.splat(cx, 2f32.powi(width - 1), &d)?;
        let high = self.add(cx, Op::Compare(CompareDir::Ge), &[r, half])?;
        let down = self.bin(cx, BinaryOp::Subtract, r, full)?;
        let r = self.select(cx, high, down, r)?;
        let nhalf = self.splat(cx, -(2f32.powi(width - 1)), &d)?;
        let lo = self.add(cx, Op::Compare(CompareDir::Ge), &[v, nhalf])?;
        let hi = self.add(cx, Op::Compare(CompareDir::Lt), &[v, half])?;
        let in_lo = self.select(cx, lo, v, r)?;
        self.select(cx, hi, in_lo, r)
    }
}
