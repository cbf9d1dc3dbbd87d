//! The trigonometric and hyperbolic functions the IR has no op for: Tan, Asin, Acos, Atan, Sinh,
//! Cosh, Asinh, Acosh, Atanh, decomposed into its elementwise ops (float, computed in f32).
//!
//! Contract, with the IR's sine, cosine, exp, log and sqrt:
//! - `tan x = sin x / cos x`;
//! - `atan x`: Cephes' `atanf` — the argument reduced to |t| ≤ tan(π/8) by
//!   `atan x = π/2 + atan(−1/x)` past tan(3π/8) and `π/4 + atan((x − 1)/(x + 1))` past tan(π/8),
//!   odd symmetry for negative x, then a degree-9 odd polynomial (relative error about 1e-7);
//!   ±∞ gives ±π/2, NaN stays NaN;
//! - `asin x = atan(x / √(1 − x²))` (±1 gives ±π/2), `acos x = 2·atan(√((1 − x)/(1 + x)))`
//!   (accurate near 1, where `π/2 − asin x` would cancel); outside [−1, 1] both give NaN;
//! - `sinh x = (eˣ − e⁻ˣ)/2`, `cosh x = (eˣ + e⁻ˣ)/2` (absolute error about 1e-7 near 0);
//! - `asinh x = sign(x)·ln(|x| + √(x² + 1))`, `acosh x = ln(x + √(x² − 1))`,
//!   `atanh x = ln((1 + x)/(1 − x))/2`.

use super::context::{Ctx, Importer, R};
use super::elementwise::Outs;
use crate::ir::{BinaryOp, CompareDir, InstId, Op, UnaryOp};
use std::f32::consts::{FRAC_PI_2, FRAC_PI_4};

/// The op_types this file lowers.
pub const TRIG_OPS: &[&str] = &[
    "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
];

/// tan(3π/8) and tan(π/8): Cephes' `atanf` reduction points.
const TAN_3PI_8: f32 = 2.414_213_6;
const TAN_PI_8: f32 = 0.414_213_57;

/// Cephes' `atanf` polynomial in z = t², highest degree first: `atan t ≈ t + t·z·P(z)` for
/// |t| ≤ tan(π/8).
const ATAN_P: [f32; 4] = [
    8.053_744_5e-2,
    -1.387_768_6e-1,
    1.997_771_1e-1,
    -3.333_295e-1,
];

/// Builds elementwise steps on values of one shape.
struct Ew<'a, 'c> {
    me: &'a mut Importer,
    cx: &'a Ctx<'c>,
    d: Vec<usize>,
}

impl Ew<'_, '_> {
    fn k(&mut self, v: f32) -> R<InstId> {
        self.me.splat(self.cx, v, &self.d)
    }
    fn b(&mut self, op: BinaryOp, a: InstId, b: InstId) -> R<InstId> {
        self.me.bin(self.cx, op, a, b)
    }
    fn u(&mut self, op: UnaryOp, a: InstId) -> R<InstId> {
        self.me.un(self.cx, op, a)
    }
    fn cmp(&mut self, dir: CompareDir, a: InstId, b: InstId) -> R<InstId> {
        self.me.add(self.cx, Op::Compare(dir), &[a, b])
    }
    fn sel(&mut self, p: InstId, a: InstId, b: InstId) -> R<InstId> {
        self.me.select(self.cx, p, a, b)
    }

    /// `a ⊕ constant`.
    fn bk(&mut self, op: BinaryOp, a: InstId, v: f32) -> R<InstId> {
        let k = self.k(v)?;
        self.b(op, a, k)
    }

    fn atan(&mut self, x: InstId) -> R<InstId> {
        use BinaryOp::*;
        let ax = self.u(UnaryOp::Abs, x)?;
        let k3 = self.k(TAN_3PI_8)?;
        let k1 = self.k(TAN_PI_8)?;
        let far = self.cmp(CompareDir::Gt, ax, k3)?;
        let mid = self.cmp(CompareDir::Gt, ax, k1)?;
        // t: −1/|x| past tan(3π/8), (|x| − 1)/(|x| + 1) past tan(π/8), else |x|.
        let minus_one = self.k(-1.0)?;
        let inv = self.b(Divide, minus_one, ax)?;
        let num = self.bk(Subtract, ax, 1.0)?;
        let den = self.bk(Add, ax, 1.0)?;
        let frac = self.b(Divide, num, den)?;
        let t = self.sel(mid, frac, ax)?;
        let t = self.sel(far, inv, t)?;
        let (pi2, pi4, zero) = (self.k(FRAC_PI_2)?, self.k(FRAC_PI_4)?, self.k(0.0)?);
        let y0 = self.sel(mid, pi4, zero)?;
        let y0 = self.sel(far, pi2, y0)?;
        let z = self.b(Multiply, t, t)?;
        let mut p = self.k(ATAN_P[0])?;
        for &c in &ATAN_P[1..] {
            p = self.b(Multiply, p, z)?;
            p = self.bk(Add, p, c)?;
        }
        let tz = self.b(Multiply, t, z)?;
        let poly = self.b(Multiply, p, tz)?;
        let poly = self.b(Add, poly, t)?;
        let y = self.b(Add, y0, poly)?;
        // Odd. A NaN took the |x| branch above and stays NaN.
        let neg = self.cmp(CompareDir::Lt, x, zero)?;
        let ny = self.u(UnaryOp::Negate, y)?;
        self.sel(neg, ny, y)
    }

    fn lower(&mut self, op: &str, x: InstId) -> R<InstId> {
        use BinaryOp::*;
        Ok(match op {
            "Tan" => {
                let s = self.u(UnaryOp::Sine, x)?;
                let c = self.u(UnaryOp::Cosine, x)?;
                self.b(Divide, s, c)?
            }
            "Atan" => self.atan(x)?,
            "Asin" => {
                let x2 = self.b(Multiply, x, x)?;
                let one = self.k(1.0)?;
                let r = self.b(Subtract, one, x2)?;
                let r = self.u(UnaryOp::Sqrt, r)?;
                let q = self.b(Divide, x, r)?;
                self.atan(q)?
            }
            "Acos" => {
                let one = self.k(1.0)?;
                let num = self.b(Subtract, one, x)?;
                let den = self.b(Add, one, x)?;
                let q = self.b(Divide, num, den)?;
                let q = self.u(UnaryOp::Sqrt, q)?;
                let a = self.atan(q)?;
                self.bk(Multiply, a, 2.0)?
            }
            "Sinh" | "Cosh" => {
                let e = self.u(UnaryOp::Exp, x)?;
                let nx = self.u(UnaryOp::Negate, x)?;
                let en = self.u(UnaryOp::Exp, nx)?;
                let s = self.b(if op == "Sinh" { Subtract } else { Add }, e, en)?;
                self.bk(Multiply, s, 0.5)?
            }
            "Asinh" => {
                let ax = self.u(UnaryOp::Abs, x)?;
                let x2 = self.b(Multiply, x, x)?;
                let r = self.bk(Add, x2, 1.0)?;
                let r = self.u(UnaryOp::Sqrt, r)?;
                let s = self.b(Add, ax, r)?;
                let y = self.u(UnaryOp::Log, s)?;
                let zero = self.k(0.0)?;
                let neg = self.cmp(CompareDir::Lt, x, zero)?;
                let ny = self.u(UnaryOp::Negate, y)?;
                self.sel(neg, ny, y)?
            }
            "Acosh" => {
                let x2 = self.b(Multiply, x, x)?;
                let r = self.bk(Subtract, x2, 1.0)?;
                let r = self.u(UnaryOp::Sqrt, r)?;
                let s = self.b(Add, x, r)?;
                self.u(UnaryOp::Log, s)?
            }
            "Atanh" => {
                let one = self.k(1.0)?;
                let num = self.b(Add, one, x)?;
                let den = self.b(Subtract, one, x)?;
                let q = self.b(Divide, num, den)?;
                let l = self.u(UnaryOp::Log, q)?;
                self.bk(Multiply, l, 0.5)?
            }
            other => unreachable!("{other} is not in TRIG_OPS"),
        })
    }
}

impl Importer {
    /// One of [`TRIG_OPS`] on a float tensor.
    pub fn trig(&mut self, cx: &Ctx, op: &str) -> R<Outs> {
        let op = op.to_string();
        self.unary_with(cx, move |me, cx, x, d| {
            let mut e = Ew {
                me,
                cx,
                d: d.to_vec(),
            };
            e.lower(&op, x)
        })
    }
}
