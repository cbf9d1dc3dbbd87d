//! Spec ops that reduce or rearrange a tensor: reduce_sum/mean/max, reshape's shape inference,
//! and slice.
//!
//! Contract: axes, shapes and slice bounds are checked with errors at the attribute; the
//! semantics are numpy's (negative indices count from the end, slices are clamped).

use super::{Lowerer, OpDecl, R};
use crate::front::diag::SpecErrorKind;
use crate::ir::shape::dims_str;
use crate::ir::{BinaryOp, InstId, Op, ReduceKind};

impl<'a> Lowerer<'a> {
    pub(super) fn reduce(&mut self, d: &OpDecl, x: InstId) -> R<InstId> {
        let xd = self.dims(x);
        let mut axes: Vec<usize> = match self.attr_ints(d, "axes")? {
            None => (0..xd.len()).collect(),
            Some(list) => list
                .iter()
                .map(|&a| self.axis(d, "axes", a, xd.len()))
                .collect::<R<_>>()?,
        };
        axes.sort();
        if axes.windows(2).any(|w| w[0] == w[1]) {
            return Err(self.attr_err(d, "axes", "an axis is listed twice".into()));
        }
        let keep = self.attr_bool(d, "keepdims")?.unwrap_or(false);
        let name = d.name.clone();
        let kind = if d.kind == "reduce_max" {
            ReduceKind::Max
        } else {
            ReduceKind::Add
        };
        let mean = d.kind == "reduce_mean";
        let last_is_reduce = !mean && !keep;
        let rname = if last_is_reduce {
            name.clone()
        } else {
            format!("{name}.reduce")
        };
        let mut r = self.add(
            d,
            &rname,
            Op::Reduce {
                kind,
                dimensions: axes.clone(),
            },
            &[x],
        )?;
        if mean {
            let count: usize = axes.iter().map(|&a| xd[a]).product();
            let rd = self.dims(r);
            let c = self.splat(d, &format!("{name}.count"), count as f32, &rd)?;
            let mname = if keep {
                format!("{name}.mean")
            } else {
                name.clone()
            };
            r = self.binary(d, &mname, BinaryOp::Divide, r, c)?;
        }
        if keep {
            let kd: Vec<usize> = (0..xd.len())
                .map(|i| if axes.contains(&i) { 1 } else { xd[i] })
                .collect();
            r = self.reshape(d, &name, r, kd)?;
        }
        Ok(r)
    }

    pub(super) fn infer_reshape(&self, d: &OpDecl, xd: &[usize], shape: &[i64]) -> R<Vec<usize>> {
        let total: usize = xd.iter().product();
        let mut infer = None;
        let mut known: usize = 1;
        for (i, &s) in shape.iter().enumerate() {
            if s == -1 {
                if infer.is_some() {
                    return Err(self.attr_err(d, "shape", "only one dimension may be -1".into()));
                }
                infer = Some(i);
            } else if s <= 0 {
                return Err(self.attr_err(
                    d,
                    "shape",
                    format!("dimension {s} is not positive (use -1 for one inferred dimension)"),
                ));
            } else {
                known = known.checked_mul(s as usize).ok_or_else(|| {
                    self.err(
                        &format!("{}.shape", d.path()),
                        SpecErrorKind::DimensionOverflow(format!(
                            "reshape target {shape:?} is too large"
                        )),
                    )
                })?;
            }
        }
        let mut dims: Vec<usize> = shape.iter().map(|&s| s.max(0) as usize).collect();
        if let Some(i) = infer {
            if known == 0 || total % known != 0 {
                return Err(self.attr_err(
                    d,
                    "shape",
                    format!(
                        "cannot infer -1: {} elements of {} are not a multiple of {known}",
                        total,
                        dims_str(xd)
                    ),
                ));
            }
            dims[i] = total / known;
        } else if known != total {
            return Err(self.attr_err(
                d,
                "shape",
                format!(
                    "{shape:?} holds {known} elements but `{}` {} holds {total}",
                    d.inputs[0],
                    dims_str(xd)
                ),
            ));
        }
        Ok(dims)
    }

    pub(super) fn slice(&mut self, d: &OpDecl, x: InstId) -> R<InstId> {
        let xd = self.dims(x);
        let starts = self.required(d, "starts", self.attr_ints(d, "starts")?)?;
        let ends = self.required(d, "ends", self.attr_ints(d, "ends")?)?;
        let n = starts.len();
        if ends.len() != n {
            return Err(self.attr_err(
                d,
                "ends",
                format!("has {} entries but starts has {n}", ends.len()),
            ));
        }
        let axes: Vec<usize> = match self.attr_ints(d, "axes")? {
            None => {
                if n > xd.len() {
                    return Err(self.attr_err(
                        d,
                        "starts",
                        format!("{n} entries for a tensor of rank {}", xd.len()),
                    ));
                }
                (0..n).collect()
            }
            Some(a) => {
                if a.len() != n {
                    return Err(self.attr_err(
                        d,
                        "axes",
                        format!("has {} entries but starts has {n}", a.len()),
                    ));
                }
                a.iter()
                    .map(|&v| self.axis(d, "axes", v, xd.len()))
                    .collect::<R<_>>()?
            }
        };
        let steps = match self.attr_ints(d, "steps")? {
            None => vec![1; n],
            Some(s) => {
                if s.len() != n {
                    return Err(self.attr_err(
                        d,
                        "steps",
                        format!("has {} entries but starts has {n}", s.len()),
                    ));
                }
                if let Some(bad) = s.iter().find(|&&v| v <= 0) {
                    return Err(self.attr_err(
                        d,
                        "steps",
                        format!("step {bad} is not supported; steps must be positive"),
                    ));
                }
                s
            }
        };
        let mut lo: Vec<usize> = vec![0; xd.len()];
        let mut hi = xd.clone();
        let mut st = vec![1; xd.len()];
        for i in 0..n {
            let ax = axes[i];
            if axes[..i].contains(&ax) {
                return Err(self.attr_err(d, "axes", format!("axis {ax} is listed twice")));
            }
            let dim = xd[ax] as i64;
            let norm = |v: i64| -> i64 { if v < 0 { (v + dim).max(0) } else { v.min(dim) } };
            let (s, e) = (norm(starts[i]), norm(ends[i]));
            if e <= s {
                return Err(self.attr_err(d, "starts", format!(
                    "the slice [{}:{}] of axis {ax} (extent {dim}) is empty; empty tensors are not supported",
                    starts[i], ends[i]
                )));
            }
            lo[ax] = s as usize;
            hi[ax] = e as usize;
            st[ax] = steps[i] as usize;
        }
        self.add(
            d,
            &d.name,
            Op::Slice {
                starts: lo,
                limits: hi,
                strides: st,
            },
            &[x],
        )
    }
}
