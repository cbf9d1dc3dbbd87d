//! Reductions: `reduce` with a recognised reducer computation (one add, maximum or minimum), the
//! variadic (value, index) reduce JAX emits for argmax/argmin, and `reduce-window` (pooling).
//!
//! Contract: any other reducer is an error naming what was found; init values must be the
//! reducer's identity (or a constant, for `reduce-window`'s padding).

use super::super::syntax::{RawComputation, RawInst};
use super::attrs::*;
use super::{TResult, Tr, Val, err, param_index, with_hint};
use crate::ir::{BinaryOp, DType, InstId, Op, ReduceKind, UnaryOp};

impl<'m, 'b, 'w> Tr<'m, 'b, 'w> {
    /// The combiner of a reduce's called computation: a single add, maximum or minimum of its two
    /// parameters.
    pub(super) fn reducer(&self, inst: &RawInst, c: &RawComputation) -> TResult<ReduceKind> {
        let params: Vec<&RawInst> = c.insts.iter().filter(|i| i.opcode == "parameter").collect();
        let root = c.root();
        let refuse = || {
            with_hint(
                err(
                    inst,
                    format!(
                        "the reduction computation `{}` is not a single add, maximum or minimum of its two parameters",
                        c.name
                    ),
                ),
                "xla-aot reduces with sum, max and min (JAX: jnp.sum/mean/max/min, lax.reduce_window with add/max/min)",
            )
        };
        let (Some(root), 2) = (root, params.len()) else {
            return refuse();
        };
        let kind = match root.opcode.as_str() {
            "add" => ReduceKind::Add,
            "maximum" => ReduceKind::Max,
            "minimum" => ReduceKind::Min,
            _ => return refuse(),
        };
        let mut names: Vec<&str> = root.operands.iter().map(|(n, _)| n.as_str()).collect();
        names.sort();
        let mut pnames: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        pnames.sort();
        if names != pnames || c.insts.len() != 3 {
            return refuse();
        }
        Ok(kind)
    }

    pub(super) fn identity(kind: ReduceKind) -> f64 {
        match kind {
            ReduceKind::Add => 0.0,
            ReduceKind::Max => f64::NEG_INFINITY,
            ReduceKind::Min => f64::INFINITY,
        }
    }

    pub(super) fn reduce(&mut self, inst: &RawInst, ops: &[Val]) -> TResult<Val> {
        let dims = usize_list(inst, self.need_attr(inst, "dimensions")?)?;
        let c = self.computation(inst, "to_apply")?;
        let ts: Vec<InstId> = ops
            .iter()
            .map(|v| match v {
                Val::T(id) => Ok(*id),
                Val::Tuple(_) => err(inst, "reduce operands must be arrays"),
            })
            .collect::<TResult<_>>()?;
        let mut sorted = dims.clone();
        sorted.sort();
        sorted.dedup();
        if ts.len() == 4 {
            return self.arg_reduce(inst, c, &ts, &sorted);
        }
        if ts.len() != 2 {
            return err(
                inst,
                format!(
                    "reduce of {} operands is not supported (one input and its initial value, or JAX's argmax/argmin form)",
                    ts.len() / 2
                ),
            );
        }
        let kind = self.reducer(inst, c)?;
        let (x, init) = (ts[0], ts[1]);
        if self.shape(x).dtype != DType::F32 {
            return err(
                inst,
                format!(
                    "reduce of {} values is not supported (f32 only)",
                    self.shape(x).dtype
                ),
            );
        }
        let r = self.add(
            inst,
            Op::Reduce {
                kind,
                dimensions: sorted,
            },
            &[x],
        )?;
        let init_v = self.const_value(init).map(|l| literal_values(&l));
        if init_v.as_deref() == Some(&[Self::identity(kind)][..]) {
            return Ok(Val::T(r));
        }
        // A non-identity initial value is combined once with the result (add, max and min are
        // associative and commutative).
        let out_dims = self.shape(r).dims.clone();
        let i = if out_dims.is_empty() {
            init
        } else {
            self.b
                .broadcast(&inst.name, init, vec![], out_dims)
                .or_else(|m| err(inst, m))?
        };
        let b = match kind {
            ReduceKind::Add => BinaryOp::Add,
            ReduceKind::Max => BinaryOp::Maximum,
            ReduceKind::Min => BinaryOp::Minimum,
        };
        Ok(Val::T(self.add(inst, Op::Binary(b), &[r, i])?))
    }

    /// JAX's argmax/argmin: `reduce((x, iota), (±inf, 0))` over one dimension with a comparator
    /// that keeps the larger (smaller) value and the first index.
    pub(super) fn arg_reduce(
        &mut self,
        inst: &RawInst,
        c: &RawComputation,
        ts: &[InstId],
        dims: &[usize],
    ) -> TResult<Val> {
        let refuse = |why: &str| {
            with_hint(
                err(
                    inst,
                    format!("this variadic reduce is not an argmax or argmin: {why}"),
                ),
                "xla-aot reads the variadic reduce JAX emits for jnp.argmax / jnp.argmin over one axis",
            )
        };
        let [d] = dims[..] else {
            return refuse("it reduces more than one dimension");
        };
        let (x, idx) = (ts[0], ts[1]);
        if d >= self.shape(x).rank() || self.shape(idx).dims != self.shape(x).dims {
            return refuse("the dimension or the operand shapes do not fit");
        }
        if self.shape(x).dims[d] == 0 {
            return refuse("the reduced dimension is empty");
        }
        if self.shape(x).dtype != DType::F32 || self.shape(idx).dtype != DType::I32 {
            return refuse("the operands are not (f32 values, s32 indices)");
        }
        // The comparison of the two values (parameters 0 and 2) decides max or min.
        let pname = |k: usize| {
            c.insts
                .iter()
                .find(|i| i.opcode == "parameter" && param_index(i).ok() == Some(k))
                .map(|i| i.name.as_str())
        };
        let (p0, p2) = (pname(0), pname(2));
        let dir = c.insts.iter().find_map(|i| {
            if i.opcode != "compare" || i.operands.len() != 2 {
                return None;
            }
            let (a, b) = (
                Some(i.operands[0].0.as_str()),
                Some(i.operands[1].0.as_str()),
            );
            let d = i.attr("direction")?.value.trim();
            if a == p0 && b == p2 {
                Some(d == "GT" || d == "GE").filter(|_| matches!(d, "GT" | "GE" | "LT" | "LE"))
            } else if a == p2 && b == p0 {
                Some(d == "LT" || d == "LE").filter(|_| matches!(d, "GT" | "GE" | "LT" | "LE"))
            } else {
                None
            }
        });
        let Some(max) = dir else {
            return refuse("its comparator does not order the two values with GT or LT");
        };
        // The initial values must be the identities: (-inf, 0) for argmax, (+inf, 0) for argmin.
        let want = if max {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
        let v_init = self.const_value(ts[2]).map(|l| literal_values(&l));
        let i_init = self.const_value(ts[3]).map(|l| literal_values(&l));
        if v_init.as_deref() != Some(&[want][..]) || i_init.as_deref() != Some(&[0.0][..]) {
            return refuse(
                "its initial values are not (-inf, 0) for argmax or (+inf, 0) for argmin",
            );
        }
        let is_iota = self.const_value(idx).is_some_and(|l| {
            let dims_x = &self.shape(x).dims;
            let stride: usize = dims_x[d + 1..].iter().product();
            literal_values(&l)
                .iter()
                .enumerate()
                .all(|(i, &v)| v == ((i / stride) % dims_x[d]) as f64)
        });
        if !is_iota {
            return refuse("the second operand is not an iota along the reduced dimension");
        }
        let src = if max {
            x
        } else {
            self.add(inst, Op::Unary(UnaryOp::Negate), &[x])?
        };
        let kind = if max {
            ReduceKind::Max
        } else {
            ReduceKind::Min
        };
        let values = self.add(
            inst,
            Op::Reduce {
                kind,
                dimensions: vec![d],
            },
            &[x],
        )?;
        let index = self.add(inst, Op::Argmax { dimension: d }, &[src])?;
        Ok(Val::Tuple(vec![Val::T(values), Val::T(index)]))
    }

    pub(super) fn reduce_window(
        &mut self,
        inst: &RawInst,
        x: InstId,
        init: InstId,
    ) -> TResult<InstId> {
        let c = self.computation(inst, "to_apply")?;
        let kind = self.reducer(inst, c)?;
        let rank = self.shape(x).rank();
        let window = parse_window(inst, self.need_attr(inst, "window")?, rank)?;
        let init_v = self.const_value(init).map(|l| literal_values(&l));
        if init_v.as_deref() != Some(&[Self::identity(kind)][..]) {
            return err(
                inst,
                format!(
                    "reduce-window with an initial value other than the identity of {} is not supported",
                    kind.name()
                ),
            );
        }
        self.add(inst, Op::ReduceWindow { kind, window }, &[x])
    }
}
