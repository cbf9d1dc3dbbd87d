//! Composite ops as HLO primitives, one implementation each, for every front end that has them:
//! GELU (erf and tanh forms), batch norm, the moments and normalisation of layer norm (and of
//! ONNX's InstanceNormalization), and softmax / log-softmax.
//!
//! Contract: a front end checks the op first (arity, dtypes, shapes, attributes); these functions
//! then append the primitives that compute it, in a fixed order, to the front end's [`Emitter`],
//! which names each instruction after the `part` it plays (the spec calls the result of op `y` `y`
//! and its parts `y.mean`, `y.inv_std`, ...; the ONNX importer names them all after the node's
//! output). The same checked op therefore always lowers to the same instructions, whichever front
//! end reads it. Builder failures (which the front ends' checks should rule out) come back as the
//! front end's own error through [`Emitter::shape_error`].

use crate::ir::{BinaryOp, Builder, InstId, Op, ReduceKind, UnaryOp};

/// The `part` of the composite's result: the instruction the front end names after the op.
pub const RESULT: &str = "";

/// Default epsilon of the normalisations (batch norm, layer norm, instance norm): PyTorch's and
/// the ONNX spec's default.
pub const DEFAULT_EPSILON: f32 = 1e-5;

/// Coefficient of the cubic term of GELU's tanh form (Hendrycks & Gimpel, 2016).
pub const GELU_TANH_COEFF: f32 = 0.044715;

/// Where a front end builds its instructions, and how it names them.
pub trait Emitter {
    /// The front end's error.
    type Error;
    /// The builder of the module being imported or lowered.
    fn builder(&mut self) -> &mut Builder;
    /// The name of the instruction that plays `part` ([`RESULT`]: the composite's result).
    fn name(&self, part: &str) -> String;
    /// The name of a scalar constant that plays `part` (by default, [`Emitter::name`]).
    fn scalar_name(&self, part: &str) -> String {
        self.name(part)
    }
    /// A builder's message (an operand shape the op cannot take) as the front end's error.
    fn shape_error(&self, message: String) -> Self::Error;
}

type R<E> = Result<InstId, <E as Emitter>::Error>;

fn dims<E: Emitter>(g: &mut E, x: InstId) -> Vec<usize> {
    g.builder().shape(x).dims.clone()
}

fn op<E: Emitter>(g: &mut E, part: &str, op: Op, operands: &[InstId]) -> R<E> {
    let name = g.name(part);
    g.builder()
        .add(&name, op, operands)
        .map_err(|m| g.shape_error(m))
}

fn unary<E: Emitter>(g: &mut E, part: &str, u: UnaryOp, x: InstId) -> R<E> {
    op(g, part, Op::Unary(u), &[x])
}

fn binary<E: Emitter>(g: &mut E, part: &str, b: BinaryOp, x: InstId, y: InstId) -> R<E> {
    op(g, part, Op::Binary(b), &[x, y])
}

fn broadcast<E: Emitter>(
    g: &mut E,
    part: &str,
    x: InstId,
    map: Vec<usize>,
    result: Vec<usize>,
) -> R<E> {
    let name = g.name(part);
    g.builder()
        .broadcast(&name, x, map, result)
        .map_err(|m| g.shape_error(m))
}

/// A scalar constant broadcast to `dims` (the scalar itself when `dims` is empty).
pub fn splat<E: Emitter>(g: &mut E, part: &str, v: f32, dims: &[usize]) -> R<E> {
    let name = g.scalar_name(part);
    let s = g.builder().scalar(&name, v);
    if dims.is_empty() {
        return Ok(s);
    }
    broadcast(g, part, s, Vec::new(), dims.to_vec())
}

/// Broadcasts `x`, reduced over `axes` (without keepdims), back to `full`.
pub fn unreduce<E: Emitter>(
    g: &mut E,
    part: &str,
    x: InstId,
    axes: &[usize],
    full: &[usize],
) -> R<E> {
    let kept: Vec<usize> = (0..full.len()).filter(|i| !axes.contains(i)).collect();
    broadcast(g, part, x, kept, full.to_vec())
}

/// A reduction of `x` over `axes` (sorted), or `x` itself when `axes` is empty.
pub fn reduce<E: Emitter>(
    g: &mut E,
    part: &str,
    kind: ReduceKind,
    x: InstId,
    axes: &[usize],
) -> R<E> {
    if axes.is_empty() {
        return Ok(x);
    }
    let r = Op::Reduce {
        kind,
        dimensions: axes.to_vec(),
    };
    op(g, part, r, &[x])
}

/// The two forms of GELU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeluForm {
    /// `0.5 x (1 + erf(x / sqrt 2))` (`approximate: none`).
    Erf,
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` (`approximate: tanh`).
    Tanh,
}

impl GeluForm {
    /// The form an `approximate` attribute names (`none` or `tanh`, as in PyTorch and ONNX).
    pub fn from_approximate(s: &str) -> Option<GeluForm> {
        match s {
            "none" => Some(GeluForm::Erf),
            "tanh" => Some(GeluForm::Tanh),
            _ => None,
        }
    }
}

/// GELU of the f32 tensor `x`.
pub fn gelu<E: Emitter>(g: &mut E, x: InstId, form: GeluForm) -> R<E> {
    let xd = dims(g, x);
    let inner = match form {
        GeluForm::Erf => {
            let c = splat(g, "rsqrt2", std::f32::consts::FRAC_1_SQRT_2, &xd)?;
            let s = binary(g, "scaled", BinaryOp::Multiply, x, c)?;
            unary(g, "erf", UnaryOp::Erf, s)?
        }
        GeluForm::Tanh => {
            let x2 = binary(g, "x2", BinaryOp::Multiply, x, x)?;
            let x3 = binary(g, "x3", BinaryOp::Multiply, x2, x)?;
            let c = splat(g, "coeff", GELU_TANH_COEFF, &xd)?;
            let cx3 = binary(g, "cx3", BinaryOp::Multiply, x3, c)?;
            let sum = binary(g, "poly", BinaryOp::Add, x, cx3)?;
            let k = (2.0f64 / std::f64::consts::PI).sqrt() as f32;
            let k = splat(g, "sqrt_2_pi", k, &xd)?;
            let arg = binary(g, "arg", BinaryOp::Multiply, sum, k)?;
            unary(g, "tanh", UnaryOp::Tanh, arg)?
        }
    };
    let one = splat(g, "one", 1.0, &xd)?;
    let p1 = binary(g, "one_plus", BinaryOp::Add, one, inner)?;
    let half = splat(g, "half", 0.5, &xd)?;
    let hx = binary(g, "half_x", BinaryOp::Multiply, x, half)?;
    binary(g, RESULT, BinaryOp::Multiply, hx, p1)
}

/// `x * scale + shift` per channel (dim 1 of `x`; `scale` and `shift` are `[C]`).
pub fn channel_affine<E: Emitter>(g: &mut E, x: InstId, scale: InstId, shift: InstId) -> R<E> {
    let xd = dims(g, x);
    let sb = broadcast(g, "scale_b", scale, vec![1], xd.clone())?;
    let hb = broadcast(g, "shift_b", shift, vec![1], xd)?;
    let scaled = binary(g, "scaled", BinaryOp::Multiply, x, sb)?;
    binary(g, RESULT, BinaryOp::Add, scaled, hb)
}

/// Inference batch norm of `x` `[N, C, ...]` with per-channel `[C]` statistics:
/// `y = x * scale + shift`, `scale = gamma / sqrt(var + eps)`, `shift = beta - mean * scale`.
/// Two broadcast ops touch the activation; the rest is per-channel math that constant folding
/// removes when the statistics are weights.
pub fn batch_norm<E: Emitter>(
    g: &mut E,
    x: InstId,
    [gamma, beta, mean, var]: [InstId; 4],
    eps: f32,
) -> R<E> {
    let c = dims(g, x)[1];
    let e = splat(g, "epsilon", eps, &[c])?;
    let ve = binary(g, "var_eps", BinaryOp::Add, var, e)?;
    let inv = unary(g, "inv_std", UnaryOp::Rsqrt, ve)?;
    let scale = binary(g, "scale", BinaryOp::Multiply, gamma, inv)?;
    let ms = binary(g, "mean_scale", BinaryOp::Multiply, mean, scale)?;
    let shift = binary(g, "shift", BinaryOp::Subtract, beta, ms)?;
    channel_affine(g, x, scale, shift)
}

/// The statistics of `x` over some axes (the others kept, in order).
#[derive(Debug, Clone, Copy)]
pub struct Moments {
    /// The mean over the axes.
    pub mean: InstId,
    /// `1 / sqrt(var + eps)` over the axes (population variance).
    pub inv_std: InstId,
    /// `x - mean`, in the shape of `x`.
    pub centered: InstId,
}

/// Where [`moments`] puts the element-count constant it divides by. Both orders compute the same
/// values, but instruction order reaches the compiled code, and each front end's output is kept
/// byte for byte: the spec has always built the count first, the ONNX importer after the sum.
/// (Settling on one order is a deliberate output change for the other front end.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountOrder {
    /// The count constant, then the sum (the spec's `layer_norm`).
    BeforeSum,
    /// The sum, then the count constant (ONNX's LayerNormalization and InstanceNormalization).
    AfterSum,
}

/// Mean, `1 / sqrt(var + eps)` and `x - mean` of `x` over `axes` (sorted, not kept).
pub fn moments<E: Emitter>(
    g: &mut E,
    x: InstId,
    axes: &[usize],
    eps: f32,
    order: CountOrder,
) -> Result<Moments, E::Error> {
    let xd = dims(g, x);
    let kept: Vec<usize> = (0..xd.len())
        .filter(|i| !axes.contains(i))
        .map(|i| xd[i])
        .collect();
    let count: usize = axes.iter().map(|&a| xd[a]).product();
    let (n, sum) = match order {
        CountOrder::BeforeSum => {
            let n = splat(g, "count", count as f32, &kept)?;
            (n, reduce(g, "sum", ReduceKind::Add, x, axes)?)
        }
        CountOrder::AfterSum => {
            let sum = reduce(g, "sum", ReduceKind::Add, x, axes)?;
            (splat(g, "count", count as f32, &kept)?, sum)
        }
    };
    let mean = binary(g, "mean", BinaryOp::Divide, sum, n)?;
    let mb = unreduce(g, "mean_b", mean, axes, &xd)?;
    let centered = binary(g, "centered", BinaryOp::Subtract, x, mb)?;
    let sq = binary(g, "square", BinaryOp::Multiply, centered, centered)?;
    let ss = reduce(g, "sum_sq", ReduceKind::Add, sq, axes)?;
    let var = binary(g, "var", BinaryOp::Divide, ss, n)?;
    let e = splat(g, "epsilon", eps, &kept)?;
    let ve = binary(g, "var_eps", BinaryOp::Add, var, e)?;
    let inv_std = unary(g, "inv_std", UnaryOp::Rsqrt, ve)?;
    Ok(Moments {
        mean,
        inv_std,
        centered,
    })
}

/// `(x - mean) / sqrt(var + eps)` over `axes` (the normalisation of layer and instance norm,
/// before any scale and shift), with the moments it used. The normalised tensor is the
/// composite's result when `last` (nothing scales it), else the part `normalized`.
pub fn normalize<E: Emitter>(
    g: &mut E,
    x: InstId,
    axes: &[usize],
    eps: f32,
    order: CountOrder,
    last: bool,
) -> Result<(InstId, Moments), E::Error> {
    let xd = dims(g, x);
    let m = moments(g, x, axes, eps, order)?;
    let ib = unreduce(g, "inv_std_b", m.inv_std, axes, &xd)?;
    let part = if last { RESULT } else { "normalized" };
    let y = binary(g, part, BinaryOp::Multiply, m.centered, ib)?;
    Ok((y, m))
}

/// Softmax (or, with `log`, log-softmax) of `x` along `axis`, computed stably: the max along the
/// axis is subtracted first.
pub fn softmax<E: Emitter>(g: &mut E, x: InstId, axis: usize, log: bool) -> R<E> {
    let xd = dims(g, x);
    let m = reduce(g, "max", ReduceKind::Max, x, &[axis])?;
    let mb = unreduce(g, "max_b", m, &[axis], &xd)?;
    let sh = binary(g, "shifted", BinaryOp::Subtract, x, mb)?;
    let e = unary(g, "exp", UnaryOp::Exp, sh)?;
    let s = reduce(g, "sum", ReduceKind::Add, e, &[axis])?;
    if log {
        let ls = unary(g, "log_sum", UnaryOp::Log, s)?;
        let lb = unreduce(g, "log_sum_b", ls, &[axis], &xd)?;
        binary(g, RESULT, BinaryOp::Subtract, sh, lb)
    } else {
        let sb = unreduce(g, "sum_b", s, &[axis], &xd)?;
        binary(g, RESULT, BinaryOp::Divide, e, sb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, Shape};

    /// Names parts as the spec does (`y.part`).
    struct Spec(Builder);

    impl Emitter for Spec {
        type Error = String;
        fn builder(&mut self) -> &mut Builder {
            &mut self.0
        }
        fn name(&self, part: &str) -> String {
            if part.is_empty() {
                "y".into()
            } else {
                format!("y.{part}")
            }
        }
        fn shape_error(&self, message: String) -> String {
            message
        }
    }

    #[test]
    fn the_default_epsilon_is_the_one_specs_always_had() {
        // Specs read epsilon as f64 and lowered `1e-5 as f32`; the shared constant is f32.
        assert_eq!(1e-5f64 as f32, DEFAULT_EPSILON);
        assert_eq!(f64::from(DEFAULT_EPSILON) as f32, DEFAULT_EPSILON);
    }

    #[test]
    fn the_result_is_named_after_the_op() {
        let mut g = Spec(Builder::new("m"));
        let x =
            g.0.parameter("x", Shape::new(DType::F32, vec![2, 3]))
                .unwrap();
        let y = softmax(&mut g, x, 1, false).unwrap();
        assert_eq!(g.0.inst(y).name, "y");
        let order = CountOrder::BeforeSum;
        let (n, _) = normalize(&mut g, x, &[1], DEFAULT_EPSILON, order, false).unwrap();
        assert_eq!(g.0.inst(n).name, "y.normalized");
    }
}
