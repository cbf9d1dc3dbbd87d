//! Elementwise ONNX ops: arithmetic with numpy broadcasting (Add ... Pow, variadic Max/Min/Sum/
//! Mean), comparisons and logic, Where, Clip, Cast, and the activation functions.
//!
//! Contract: float tensors compute in f32. Integer tensors (held in i32) are converted to f32,
//! computed and converted back, which is exact while values stay below 2^24; integer arithmetic
//! on two compile-time constants is folded exactly in int64 instead (shape arithmetic). Bools are
//! pred; logic ops compute on 0/1 in f32.

use super::context::{Ctx, Importer, R, Val, broadcast_dims, ty_of};
use super::proto::data_type as dt;
use super::tensor::{ConstTensor, Values, is_float_type, is_int_type, runtime_dtype, strides};
use crate::front::decompose::{self, GeluForm};
use crate::ir::{BinaryOp, CompareDir, DType, InstId, Op, UnaryOp};
use std::rc::Rc;

/// Node outputs: `Some` per output produced.
pub type Outs = Vec<Option<Val>>;

/// One run-time output.
pub fn rt(id: InstId, ty: i32) -> Outs {
    vec![Some(Val::Rt { id, ty })]
}

/// One constant output.
pub fn konst(c: ConstTensor) -> Outs {
    vec![Some(Val::Const(Rc::new(c)))]
}

/// From 2^23 on every f32 is an integer (the significand has 23 fraction bits).
const F32_INTEGRAL_FROM: f32 = 8_388_608.0;

/// SELU's default alpha and gamma (the ONNX spec's values).
const SELU_ALPHA: f32 = 1.673_263_2;
const SELU_GAMMA: f32 = 1.050_701;

/// Elementwise f(a, b) of two constants with numpy broadcasting.
fn fold2(
    imp: &Importer,
    a: &ConstTensor,
    b: &ConstTensor,
    f: impl Fn(i64, i64) -> Option<i64>,
) -> Option<ConstTensor> {
    let out = broadcast_dims(&[a.dims.clone(), b.dims.clone()])?;
    let (av, bv) = (a.as_i64(), b.as_i64());
    let index = |d: &[usize], o: &[usize], flat: usize| -> usize {
        let os = strides(o);
        let ds = strides(d);
        let off = o.len() - d.len();
        let mut idx = 0;
        for (i, &e) in d.iter().enumerate() {
            let coord = (flat / os[i + off]) % o[i + off];
            if e != 1 {
                idx += coord * ds[i];
            }
        }
        idx
    };
    let n: usize = out.iter().product();
    if !imp.may_fold(n) {
        return None;
    }
    let mut v = Vec::with_capacity(n);
    for k in 0..n {
        v.push(f(av[index(&a.dims, &out, k)], bv[index(&b.dims, &out, k)])?);
    }
    Some(ConstTensor {
        ty: a.ty,
        dims: out,
        values: Values::I(v),
    })
}

/// `Where(c, x, y)` of three constants of x's type (numpy broadcasting), when x and y agree in
/// type and every value is held exactly.
fn fold_where(
    imp: &Importer,
    c: &ConstTensor,
    x: &ConstTensor,
    y: &ConstTensor,
) -> Option<ConstTensor> {
    if x.ty != y.ty {
        return None;
    }
    let out = broadcast_dims(&[c.dims.clone(), x.dims.clone(), y.dims.clone()])?;
    let n: usize = out.iter().product();
    if !imp.may_fold(n) {
        return None;
    }
    let pick = |t: &ConstTensor, k: usize| -> usize {
        let os = strides(&out);
        let ts = strides(&t.dims);
        let off = out.len() - t.dims.len();
        (0..t.dims.len())
            .filter(|&i| t.dims[i] != 1)
            .map(|i| ((k / os[i + off]) % out[i + off]) * ts[i])
            .sum()
    };
    let cv = c.as_i64();
    let take_x = |k: usize| cv[pick(c, k)] != 0;
    // Each output element's source: (from x, its index there).
    let src: Vec<(bool, usize)> = (0..n)
        .map(|k| {
            if take_x(k) {
                (true, pick(x, k))
            } else {
                (false, pick(y, k))
            }
        })
        .collect();
    fn choose<T: Copy>(src: &[(bool, usize)], a: &[T], b: &[T]) -> Vec<T> {
        src.iter()
            .map(|&(from_a, i)| if from_a { a[i] } else { b[i] })
            .collect()
    }
    let values = match (&x.values, &y.values) {
        (Values::I(a), Values::I(b)) => Values::I(choose(&src, a, b)),
        (Values::F(a), Values::F(b)) => Values::F(choose(&src, a, b)),
        (Values::F(_) | Values::F32(_), Values::F(_) | Values::F32(_)) => {
            Values::F(choose(&src, &x.as_f64(), &y.as_f64()))
        }
        (Values::B(a), Values::B(b)) => Values::B(choose(&src, a, b)),
        _ => return None,
    };
    Some(ConstTensor {
        ty: x.ty,
        dims: out,
        values,
    })
}

impl Importer {
    /// Inputs as f32 instructions (ints converted), with the first input's ONNX type.
    pub(super) fn as_f32(&mut self, cx: &Ctx, js: &[usize]) -> R<(Vec<InstId>, i32)> {
        let mut ids = Vec::new();
        let mut ty0 = None;
        for &j in js {
            let (id, ty) = self.rt(cx, j)?;
            if runtime_dtype(ty).is_none() {
                return Err(cx.err(format!(
                    "input {j} has element type {}, which is not supported",
                    dt::name(ty)
                )));
            }
            ty0.get_or_insert(ty);
            ids.push(self.convert(cx, id, DType::F32)?);
        }
        Ok((ids, ty0.unwrap_or(dt::FLOAT)))
    }

    /// A result computed in f32 returned as ONNX type `ty` (converted back for ints and bools).
    pub(super) fn back(&mut self, cx: &Ctx, id: InstId, ty: i32) -> R<Outs> {
        let d = runtime_dtype(ty).unwrap_or(DType::F32);
        let id = self.convert(cx, id, d)?;
        Ok(rt(id, ty))
    }

    /// Inputs 0 and 1 as f32 values broadcast to one shape, with the first one's ONNX type; with
    /// `same_type` both must have one type; bool inputs are the error `bool_error`.
    fn numeric_pair(
        &mut self,
        cx: &Ctx,
        same_type: bool,
        bool_error: &str,
    ) -> R<(Vec<InstId>, i32)> {
        let (a, b) = (ty_of(&self.input(cx, 0)?), ty_of(&self.input(cx, 1)?));
        // Float types all compute in f32 (a float16 export's MatMul result meets a float16 bias).
        if same_type && a != b && !(is_float_type(a) && is_float_type(b)) {
            return Err(cx.err(format!(
                "its inputs have different element types ({} and {})",
                dt::name(a),
                dt::name(b)
            )));
        }
        let (ids, ty) = self.as_f32(cx, &[0, 1])?;
        if ty == dt::BOOL {
            return Err(cx.err(bool_error));
        }
        Ok((self.broadcast_all(cx, &ids)?, ty))
    }

    /// Add, Sub, Mul, Div, Pow.
    pub fn binary(&mut self, cx: &Ctx, op: BinaryOp) -> R<Outs> {
        cx.arity(2, 2)?;
        let (a, b) = (self.input(cx, 0)?, self.input(cx, 1)?);
        if let (Val::Const(x), Val::Const(y)) = (&a, &b) {
            if is_int_type(x.ty) && is_int_type(y.ty) {
                let f = |p: i64, q: i64| -> Option<i64> {
                    match op {
                        BinaryOp::Add => p.checked_add(q),
                        BinaryOp::Subtract => p.checked_sub(q),
                        BinaryOp::Multiply => p.checked_mul(q),
                        BinaryOp::Divide => p.checked_div(q),
                        BinaryOp::Maximum => Some(p.max(q)),
                        BinaryOp::Minimum => Some(p.min(q)),
                        BinaryOp::Power => u32::try_from(q).ok().and_then(|q| p.checked_pow(q)),
                    }
                };
                if let Some(c) = fold2(self, x, y, f) {
                    return Ok(konst(c));
                }
            }
        }
        let (v, ty) = self.numeric_pair(
            cx,
            op != BinaryOp::Power,
            "arithmetic on bool tensors is not supported",
        )?;
        let r = self.add(cx, Op::Binary(op), &[v[0], v[1]])?;
        self.back(cx, r, ty)
    }

    /// Max, Min, Sum, Mean: variadic with broadcasting.
    pub fn variadic(&mut self, cx: &Ctx, op: BinaryOp, mean: bool) -> R<Outs> {
        if cx.n_inputs() == 0 {
            return Err(cx.err("it needs at least one input"));
        }
        let js: Vec<usize> = (0..cx.n_inputs()).collect();
        let (ids, ty) = self.as_f32(cx, &js)?;
        let v = self.broadcast_all(cx, &ids)?;
        let mut acc = v[0];
        for &x in &v[1..] {
            acc = self.add(cx, Op::Binary(op), &[acc, x])?;
        }
        if mean {
            let d = self.dims(acc);
            let n = self.splat(cx, v.len() as f32, &d)?;
            acc = self.add(cx, Op::Binary(BinaryOp::Divide), &[acc, n])?;
        }
        self.back(cx, acc, ty)
    }

    /// Equal, Less, Greater, LessOrEqual, GreaterOrEqual.
    pub fn compare_op(&mut self, cx: &Ctx, dir: CompareDir) -> R<Outs> {
        cx.arity(2, 2)?;
        if let (Val::Const(x), Val::Const(y)) = (self.input(cx, 0)?, self.input(cx, 1)?) {
            if is_int_type(x.ty) && is_int_type(y.ty) {
                let f = |p: i64, q: i64| {
                    Some(match dir {
                        CompareDir::Eq => p == q,
                        CompareDir::Ne => p != q,
                        CompareDir::Lt => p < q,
                        CompareDir::Le => p <= q,
                        CompareDir::Gt => p > q,
                        CompareDir::Ge => p >= q,
                    } as i64)
                };
                if let Some(c) = fold2(self, &x, &y, f) {
                    return Ok(konst(c.cast(dt::BOOL)));
                }
            }
        }
        let ints =
            is_int_type(ty_of(&self.input(cx, 0)?)) && is_int_type(ty_of(&self.input(cx, 1)?));
        let ids = if ints {
            // Integers compare exactly in i32 (f32 would merge neighbours above 2^24).
            vec![self.rt(cx, 0)?.0, self.rt(cx, 1)?.0]
        } else {
            self.as_f32(cx, &[0, 1])?.0
        };
        let v = self.broadcast_all(cx, &ids)?;
        let r = self.add(cx, Op::Compare(dir), &[v[0], v[1]])?;
        Ok(rt(r, dt::BOOL))
    }

    /// Not, And, Or, Xor (on 0/1 in f32).
    pub fn logic(&mut self, cx: &Ctx, op: &str) -> R<Outs> {
        let n = if op == "Not" { 1 } else { 2 };
        cx.arity(n, n)?;
        for j in 0..n {
            if ty_of(&self.input(cx, j)?) != dt::BOOL {
                return Err(cx.err(format!("input {j} must be bool")));
            }
        }
        // Constants fold (shape logic of exported functions: `Where(And(Not(Equal(..))))`).
        let consts: Vec<Option<Rc<ConstTensor>>> = (0..n)
            .map(|j| match self.input(cx, j) {
                Ok(Val::Const(c)) => Some(c),
                _ => None,
            })
            .collect();
        if consts.iter().all(Option::is_some) {
            let c: Vec<&ConstTensor> = consts.iter().map(|c| c.as_deref().unwrap()).collect();
            let folded = if n == 1 {
                fold2(self, c[0], c[0], |p, _| Some((p == 0) as i64))
            } else {
                fold2(self, c[0], c[1], |p, q| {
                    let (p, q) = (p != 0, q != 0);
                    Some(match op {
                        "And" => p && q,
                        "Or" => p || q,
                        _ => p != q,
                    } as i64)
                })
            };
            if let Some(t) = folded {
                return Ok(konst(t.cast(dt::BOOL)));
            }
        }
        let js: Vec<usize> = (0..n).collect();
        let (ids, _) = self.as_f32(cx, &js)?;
        let v = self.broadcast_all(cx, &ids)?;
        let d = self.dims(v[0]);
        let zero = self.splat(cx, 0.0, &d)?;
        let r = match op {
            "Not" => self.add(cx, Op::Compare(CompareDir::Eq), &[v[0], zero])?,
            "Xor" => self.add(cx, Op::Compare(CompareDir::Ne), &[v[0], v[1]])?,
            _ => {
                let b = if op == "And" {
                    BinaryOp::Minimum
                } else {
                    BinaryOp::Maximum
                };
                let m = self.add(cx, Op::Binary(b), &[v[0], v[1]])?;
                self.add(cx, Op::Compare(CompareDir::Ne), &[m, zero])?
            }
        };
        Ok(rt(r, dt::BOOL))
    }

    /// Where(cond, x, y).
    pub fn where_op(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(3, 3)?;
        if let (Val::Const(c), Val::Const(x), Val::Const(y)) =
            (self.input(cx, 0)?, self.input(cx, 1)?, self.input(cx, 2)?)
        {
            if let Some(t) = fold_where(self, &c, &x, &y) {
                return Ok(konst(t));
            }
        }
        let (c, cty) = self.rt(cx, 0)?;
        if cty != dt::BOOL {
            return Err(cx.err("input 0 (condition) must be bool"));
        }
        let (xs, ty) = self.as_f32(cx, &[1, 2])?;
        let v = self.broadcast_all(cx, &[c, xs[0], xs[1]])?;
        let r = self.select(cx, v[0], v[1], v[2])?;
        self.back(cx, r, ty)
    }

    /// Clip(x, min?, max?).
    pub fn clip(&mut self, cx: &Ctx) -> R<Outs> {
        // Clip-11 moved `min` and `max` from attributes (default: the float range) to inputs.
        if cx.before(11) {
            cx.arity(1, 1)?;
            let (ids, ty) = self.as_f32(cx, &[0])?;
            let lo = cx.attr_f_or("min", f32::MIN)?;
            let hi = cx.attr_f_or("max", f32::MAX)?;
            let lo = self.b.scalar("constant", lo);
            let hi = self.b.scalar("constant", hi);
            let r = self.add(cx, Op::Clamp, &[lo, ids[0], hi])?;
            return self.back(cx, r, ty);
        }
        cx.arity(1, 3)?;
        let (ids, ty) = self.as_f32(cx, &[0])?;
        let x = ids[0];
        let bound = |me: &mut Self, j: usize, default: f32| -> R<InstId> {
            if !cx.has_input(j) {
                return Ok(me.b.scalar("constant", default));
            }
            let (id, _) = me.rt(cx, j)?;
            if !me.dims(id).iter().all(|&d| d == 1) {
                return Err(cx.err(format!("input {j} must be a scalar")));
            }
            let id = me.convert(cx, id, DType::F32)?;
            me.reshape(cx, id, Vec::new())
        };
        let lo = bound(self, 1, f32::NEG_INFINITY)?;
        let hi = bound(self, 2, f32::INFINITY)?;
        let r = self.add(cx, Op::Clamp, &[lo, x, hi])?;
        self.back(cx, r, ty)
    }

    /// Cast / CastLike.
    pub fn cast(&mut self, cx: &Ctx, like: bool) -> R<Outs> {
        let to = if like {
            cx.arity(2, 2)?;
            ty_of(&self.input(cx, 1)?)
        } else {
            cx.arity(1, 1)?;
            cx.attr_i("to")?
                .ok_or_else(|| cx.attr_err("to", "is required"))? as i32
        };
        let Some(d) = runtime_dtype(to) else {
            return Err(cx.attr_err(
                "to",
                format!(
                    "casting to {} is not supported (float32, float64, integers and bool are)",
                    dt::name(to)
                ),
            ));
        };
        let x = self.input(cx, 0)?;
        if runtime_dtype(ty_of(&x)).is_none() {
            return Err(cx.err(format!(
                "casting from {} is not supported",
                dt::name(ty_of(&x))
            )));
        }
        if let Val::Const(c) = &x {
            return Ok(konst(c.cast(to)));
        }
        let (id, from) = self.rt(cx, 0)?;
        // float → int truncates toward zero, as Convert does.
        let id = if is_float_type(to) && from == dt::BOOL {
            self.convert(cx, id, DType::F32)?
        } else {
            self.convert(cx, id, d)?
        };
        Ok(rt(id, to))
    }

    /// A float-only unary function built by `f`.
    pub fn unary_with(
        &mut self,
        cx: &Ctx,
        f: impl FnOnce(&mut Self, &Ctx, InstId, &[usize]) -> R<InstId>,
    ) -> R<Outs> {
        cx.arity(1, 1)?;
        let x = self.rt_f32(cx, 0)?;
        let d = self.dims(x);
        let r = f(self, cx, x, &d)?;
        Ok(rt(r, dt::FLOAT))
    }

    /// `Shrink(x)`: `x + bias` below `−lambd`, `x − bias` above `lambd`, else 0 (any numeric
    /// type, computed in f32).
    pub fn shrink(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        let lambd = cx.attr_f_or("lambd", 0.5)?;
        let bias = cx.attr_f_or("bias", 0.0)?;
        let (ids, ty) = self.as_f32(cx, &[0])?;
        let x = ids[0];
        let d = self.dims(x);
        let (lo, hi) = (self.splat(cx, -lambd, &d)?, self.splat(cx, lambd, &d)?);
        let b = self.splat(cx, bias, &d)?;
        let below = self.add(cx, Op::Compare(CompareDir::Lt), &[x, lo])?;
        let above = self.add(cx, Op::Compare(CompareDir::Gt), &[x, hi])?;
        let up = self.bin(cx, BinaryOp::Add, x, b)?;
        let down = self.bin(cx, BinaryOp::Subtract, x, b)?;
        let zero = self.splat(cx, 0.0, &d)?;
        let y = self.select(cx, above, down, zero)?;
        let y = self.select(cx, below, up, y)?;
        self.back(cx, y, ty)
    }

    /// Abs and Neg also take integers.
    pub fn abs_neg(&mut self, cx: &Ctx, u: UnaryOp) -> R<Outs> {
        cx.arity(1, 1)?;
        if let Val::Const(c) = self.input(cx, 0)? {
            if is_int_type(c.ty) {
                let v = c.as_i64();
                let v = v
                    .iter()
                    .map(|&x| if u == UnaryOp::Abs { x.abs() } else { -x })
                    .collect();
                return Ok(konst(ConstTensor {
                    ty: c.ty,
                    dims: c.dims.clone(),
                    values: Values::I(v),
                }));
            }
        }
        let (ids, ty) = self.as_f32(cx, &[0])?;
        let r = self.add(cx, Op::Unary(u), &[ids[0]])?;
        self.back(cx, r, ty)
    }

    pub fn bin(&mut self, cx: &Ctx, op: BinaryOp, a: InstId, b: InstId) -> R<InstId> {
        self.add(cx, Op::Binary(op), &[a, b])
    }

    pub fn un(&mut self, cx: &Ctx, op: UnaryOp, a: InstId) -> R<InstId> {
        self.add(cx, Op::Unary(op), &[a])
    }

    /// `IsNaN(x)` (`x != x`) and `IsInf(x)` (`|x| == ∞`, or only `+∞` / `−∞` by
    /// `detect_positive` / `detect_negative`) of a float tensor: bool.
    pub fn is_special(&mut self, cx: &Ctx, op: &str) -> R<Outs> {
        cx.arity(1, 1)?;
        let x = self.rt_f32(cx, 0)?;
        let d = self.dims(x);
        let cmp = |me: &mut Importer, dir: CompareDir, a: InstId, b: InstId| {
            me.add(cx, Op::Compare(dir), &[a, b])
        };
        let r = if op == "IsNaN" {
            cmp(self, CompareDir::Ne, x, x)?
        } else {
            let pos = cx.attr_i_or("detect_positive", 1)? != 0;
            let neg = cx.attr_i_or("detect_negative", 1)? != 0;
            match (pos, neg) {
                (true, true) => {
                    let a = self.un(cx, UnaryOp::Abs, x)?;
                    let inf = self.splat(cx, f32::INFINITY, &d)?;
                    cmp(self, CompareDir::Eq, a, inf)?
                }
                (true, false) | (false, true) => {
                    let v = if pos {
                        f32::INFINITY
                    } else {
                        f32::NEG_INFINITY
                    };
                    let inf = self.splat(cx, v, &d)?;
                    cmp(self, CompareDir::Eq, x, inf)?
                }
                (false, false) => {
                    // Nothing is detected: |x| < −1 is false for every x, NaN included.
                    let a = self.un(cx, UnaryOp::Abs, x)?;
                    let m1 = self.splat(cx, -1.0, &d)?;
                    cmp(self, CompareDir::Lt, a, m1)?
                }
            }
        };
        Ok(rt(r, dt::BOOL))
    }

    /// The activation functions and float unary ops.
    pub fn activation(&mut self, cx: &Ctx, op: &str) -> R<Outs> {
        let alpha_default = match op {
            "LeakyRelu" => 0.01,
            "HardSigmoid" => 0.2,
            "Selu" => SELU_ALPHA,
            _ => 1.0,
        };
        let alpha = cx.attr_f_or("alpha", alpha_default)?;
        let beta = cx.attr_f_or("beta", 0.5)?;
        let gamma = cx.attr_f_or("gamma", SELU_GAMMA)?;
        let op = op.to_string();
        self.unary_with(cx, move |me, cx, x, d| {
            let u = |me: &mut Importer, u: UnaryOp, a| me.un(cx, u, a);
            match op.as_str() {
                "Relu" => {
                    let z = me.splat(cx, 0.0, d)?;
                    me.bin(cx, BinaryOp::Maximum, x, z)
                }
                "Sigmoid" => u(me, UnaryOp::Logistic, x),
                "Tanh" => u(me, UnaryOp::Tanh, x),
                "Exp" => u(me, UnaryOp::Exp, x),
                "Log" => u(me, UnaryOp::Log, x),
                "Sqrt" => u(me, UnaryOp::Sqrt, x),
                "Erf" => u(me, UnaryOp::Erf, x),
                "Sin" => u(me, UnaryOp::Sine, x),
                "Cos" => u(me, UnaryOp::Cosine, x),
                "Reciprocal" => {
                    let one = me.splat(cx, 1.0, d)?;
                    me.bin(cx, BinaryOp::Divide, one, x)
                }
                "LeakyRelu" | "Elu" | "Selu" => {
                    let z = me.splat(cx, 0.0, d)?;
                    let neg = me.add(cx, Op::Compare(CompareDir::Lt), &[x, z])?;
                    let a = me.splat(cx, alpha, d)?;
                    let lo = if op == "LeakyRelu" {
                        me.bin(cx, BinaryOp::Multiply, x, a)?
                    } else {
                        let e = u(me, UnaryOp::Exp, x)?;
                        let one = me.splat(cx, 1.0, d)?;
                        let em1 = me.bin(cx, BinaryOp::Subtract, e, one)?;
                        me.bin(cx, BinaryOp::Multiply, a, em1)?
                    };
                    if op == "Selu" {
                        let neg = me.add(cx, Op::Compare(CompareDir::Le), &[x, z])?;
                        let s = me.select(cx, neg, lo, x)?;
                        let g = me.splat(cx, gamma, d)?;
                        me.bin(cx, BinaryOp::Multiply, g, s)
                    } else {
                        me.select(cx, neg, lo, x)
                    }
                }
                "Celu" => {
                    let z = me.splat(cx, 0.0, d)?;
                    let a = me.splat(cx, alpha, d)?;
                    let one = me.splat(cx, 1.0, d)?;
                    let xa = me.bin(cx, BinaryOp::Divide, x, a)?;
                    let e = u(me, UnaryOp::Exp, xa)?;
                    let em1 = me.bin(cx, BinaryOp::Subtract, e, one)?;
                    let ae = me.bin(cx, BinaryOp::Multiply, a, em1)?;
                    let lo = me.bin(cx, BinaryOp::Minimum, z, ae)?;
                    let hi = me.bin(cx, BinaryOp::Maximum, z, x)?;
                    me.bin(cx, BinaryOp::Add, hi, lo)
                }
                "HardSigmoid" | "HardSwish" => {
                    let (a, bt) = if op == "HardSwish" {
                        (1.0 / 6.0, 0.5)
                    } else {
                        (alpha, beta)
                    };
                    let a = me.splat(cx, a, d)?;
                    let bt = me.splat(cx, bt, d)?;
                    let ax = me.bin(cx, BinaryOp::Multiply, a, x)?;
                    let axb = me.bin(cx, BinaryOp::Add, ax, bt)?;
                    let lo = me.b.scalar("constant", 0.0);
                    let hi = me.b.scalar("constant", 1.0);
                    let h = me.add(cx, Op::Clamp, &[lo, axb, hi])?;
                    if op == "HardSwish" {
                        me.bin(cx, BinaryOp::Multiply, x, h)
                    } else {
                        Ok(h)
                    }
                }
                "Softplus" => u(me, UnaryOp::Softplus, x),
                "Softsign" => {
                    let one = me.splat(cx, 1.0, d)?;
                    let ax = u(me, UnaryOp::Abs, x)?;
                    let den = me.bin(cx, BinaryOp::Add, one, ax)?;
                    me.bin(cx, BinaryOp::Divide, x, den)
                }
                "Swish" => {
                    // x · sigmoid(alpha · x) (opset 24).
                    let a = me.splat(cx, alpha, d)?;
                    let ax = me.bin(cx, BinaryOp::Multiply, a, x)?;
                    let s = u(me, UnaryOp::Logistic, ax)?;
                    me.bin(cx, BinaryOp::Multiply, x, s)
                }
                "Mish" => {
                    let sp = u(me, UnaryOp::Softplus, x)?;
                    let t = u(me, UnaryOp::Tanh, sp)?;
                    me.bin(cx, BinaryOp::Multiply, x, t)
                }
                "ThresholdedRelu" => {
                    let a = me.splat(cx, alpha, d)?;
                    let z = me.splat(cx, 0.0, d)?;
                    let gt = me.add(cx, Op::Compare(CompareDir::Gt), &[x, a])?;
                    me.select(cx, gt, x, z)
                }
                "Sign" => {
                    let z = me.splat(cx, 0.0, d)?;
                    let one = me.splat(cx, 1.0, d)?;
                    let m1 = me.splat(cx, -1.0, d)?;
                    let gt = me.add(cx, Op::Compare(CompareDir::Gt), &[x, z])?;
                    let lt = me.add(cx, Op::Compare(CompareDir::Lt), &[x, z])?;
                    let s = me.select(cx, lt, m1, z)?;
                    me.select(cx, gt, one, s)
                }
                "Floor" => me.rounded(cx, x, false),
                "Ceil" => me.rounded(cx, x, true),
                other => Err(cx.err(format!("internal: no activation `{other}`"))),
            }
        })
    }

    /// trunc of an f32 value via f32 → i32 → f32; values at or above 2^23 in magnitude (and
    /// non-finite ones) are already integral and pass unchanged.
    pub(super) fn truncated(&mut self, cx: &Ctx, x: InstId) -> R<InstId> {
        let d = self.dims(x);
        let i = self.convert(cx, x, DType::I32)?;
        let t = self.convert(cx, i, DType::F32)?;
        let big = self.splat(cx, F32_INTEGRAL_FROM, &d)?;
        let ax = self.un(cx, UnaryOp::Abs, x)?;
        let small = self.add(cx, Op::Compare(CompareDir::Lt), &[ax, big])?;
        self.select(cx, small, t, x)
    }

    /// Floor (or with `up`, Ceil) of an f32 value: the truncation, stepped toward -inf / +inf
    /// where it moved the other way.
    pub(super) fn rounded(&mut self, cx: &Ctx, x: InstId, up: bool) -> R<InstId> {
        let t = self.truncated(cx, x)?;
        let one = self.splat(cx, 1.0, &self.dims(x))?;
        let (dir, step) = if up {
            (CompareDir::Gt, BinaryOp::Add)
        } else {
            (CompareDir::Lt, BinaryOp::Subtract)
        };
        let moved = self.add(cx, Op::Compare(dir), &[x, t])?;
        let stepped = self.bin(cx, step, t, one)?;
        self.select(cx, moved, stepped, t)
    }

    /// Mod: with `fmod` = 1 C's fmod (the remainder has the dividend's sign), else the divisor's
    /// sign (Python's `%`); integers fold at import time when both are constants, else compute
    /// in f32 (exact below 2^24).
    pub fn modulo(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let fmod = cx.attr_i_or("fmod", 0)? != 0;
        let (a, b) = (self.input(cx, 0)?, self.input(cx, 1)?);
        if let (Val::Const(x), Val::Const(y)) = (&a, &b) {
            if is_int_type(x.ty) && is_int_type(y.ty) {
                let f = |p: i64, q: i64| -> Option<i64> {
                    let r = p.checked_rem(q)?;
                    Some(if !fmod && r != 0 && (r < 0) != (q < 0) {
                        r + q
                    } else {
                        r
                    })
                };
                if let Some(c) = fold2(self, x, y, f) {
                    return Ok(konst(c));
                }
            }
        }
        let (v, ty) = self.numeric_pair(cx, true, "Mod of bool tensors is not supported")?;
        let q = self.bin(cx, BinaryOp::Divide, v[0], v[1])?;
        // fmod: a − trunc(a/b)·b; Python: a − floor(a/b)·b.
        let whole = if fmod {
            self.truncated(cx, q)?
        } else {
            self.rounded(cx, q, false)?
        };
        let m = self.bin(cx, BinaryOp::Multiply, whole, v[1])?;
        let r = self.bin(cx, BinaryOp::Subtract, v[0], m)?;
        self.back(cx, r, ty)
    }

    /// PRelu(x, slope) with slope broadcast to x.
    pub fn prelu(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(2, 2)?;
        let x = self.rt_f32(cx, 0)?;
        let s = self.rt_f32(cx, 1)?;
        let d = self.dims(x);
        let s = self.stretch(cx, s, &d)?;
        let z = self.splat(cx, 0.0, &d)?;
        let neg = self.add(cx, Op::Compare(CompareDir::Lt), &[x, z])?;
        let sx = self.bin(cx, BinaryOp::Multiply, s, x)?;
        let r = self.select(cx, neg, sx, x)?;
        Ok(rt(r, dt::FLOAT))
    }

    /// Gelu (opset 20): `approximate` none or tanh.
    pub fn gelu(&mut self, cx: &Ctx) -> R<Outs> {
        let approx = cx.attr_s("approximate")?.unwrap_or_else(|| "none".into());
        let Some(form) = GeluForm::from_approximate(&approx) else {
            return Err(cx.attr_err(
                "approximate",
                format!("expected `none` or `tanh`, found `{approx}`"),
            ));
        };
        self.unary_with(cx, move |me, cx, x, _| {
            decompose::gelu(&mut me.composite(cx), x, form)
        })
    }
}
