//! `Loop` and `Scan` unrolled at import time.
//!
//! Contract: a `Loop` runs while its trip count `M` (input 0, absent: unbounded) is not reached
//! and its condition (input 1, absent: true; then the body's output 0 after each iteration) holds.
//! Both must be compile-time constants (an initializer, a `Constant`, shape arithmetic, or an
//! input frozen with `--freeze`); a value computed at run time is an error naming the node and
//! the flag. The body is lowered once per iteration with the iteration number and condition bound
//! as constants and the loop-carried values threaded through; scan outputs are stacked on a new
//! leading axis. `Scan` is unrolled the same way over its scan inputs' axis, with
//! `scan_input_axes`/`scan_input_directions`/`scan_output_axes`/`scan_output_directions` (opset
//! 9 on); opset 8's batched form (every input and output with a leading batch axis, `directions`)
//! is unrolled per batch entry, without `sequence_lens` (all sequences full length). At most
//! [`MAX_UNROLLED_TRIPS`] iterations are unrolled; a loop that would run zero times with scan
//! outputs is refused (they would be empty tensors).

use super::context::{Ctx, Importer, R, Val, ty_of};
use super::elementwise::Outs;
use super::proto::GraphProto;
use super::proto::data_type as dt;
use super::tensor::{ConstTensor, Values};
use crate::ir::{InstId, Op};
use std::rc::Rc;

/// Where a scan's inputs are sliced and its outputs stacked (per input / output: axis, and
/// direction 1 for reversed).
struct ScanForm {
    in_axes: Vec<i64>,
    in_dirs: Vec<i64>,
    out_axes: Vec<i64>,
    out_dirs: Vec<i64>,
}

/// Most iterations a `Loop` or `Scan` is unrolled to: each iteration copies the body into the
/// module, so this bounds the module at 4096 bodies (sequence loops of exported models run over
/// at most a few hundred steps).
pub const MAX_UNROLLED_TRIPS: usize = 4096;

impl Importer {
    /// `Loop(M?, cond?, v_initial...)` with graph attribute `body`.
    pub fn loop_op(&mut self, cx: &Ctx) -> R<Outs> {
        if cx.n_inputs() < 2 {
            return Err(cx.err(format!(
                "it takes at least 2 inputs (trip count and condition, either may be empty), found {}",
                cx.n_inputs()
            )));
        }
        let Some(body) = cx.attr_g("body")? else {
            return Err(cx.attr_err("body", "is missing"));
        };
        let trips = if cx.has_input(0) {
            let m = self.loop_const(cx, 0, "trip count M")?;
            let v = m.as_i64();
            if v.len() != 1 {
                return Err(cx.err(format!(
                    "input 0 (trip count M) has {} elements; it must have one",
                    v.len()
                )));
            }
            Some(v[0].max(0) as u64)
        } else {
            None
        };
        let mut cond = if cx.has_input(1) {
            let c = self.loop_const(cx, 1, "condition")?;
            self.loop_flag(cx, &c, "input 1 (condition)")?
        } else {
            true
        };
        let n_carried = cx.n_inputs() - 2;
        let mut carried = (0..n_carried)
            .map(|k| self.input(cx, 2 + k))
            .collect::<R<Vec<Val>>>()?;
        if body.input.len() != 2 + n_carried {
            return Err(cx.attr_err(
                "body",
                format!(
                    "the body has {} inputs; it needs 2 + {n_carried} (iteration number, condition, loop-carried values)",
                    body.input.len()
                ),
            ));
        }
        if body.output.len() < 1 + n_carried {
            return Err(cx.attr_err(
                "body",
                format!(
                    "the body has {} outputs; it needs at least 1 + {n_carried} (condition, loop-carried values)",
                    body.output.len()
                ),
            ));
        }
        let n_scan = body.output.len() - 1 - n_carried;
        let mut scans: Vec<Vec<Val>> = vec![Vec::new(); n_scan];
        let mut i = 0u64;
        while cond && trips.is_none_or(|m| i < m) {
            if i as usize >= MAX_UNROLLED_TRIPS {
                return Err(cx
                    .err(format!(
                        "the loop runs more than {MAX_UNROLLED_TRIPS} iterations, the most this compiler unrolls"
                    ))
                    .hint("export the loop with a smaller trip count, or unroll it in the model"));
            }
            let mut ins = vec![
                Val::Const(Rc::new(ConstTensor::ints(Vec::new(), vec![i as i64]))),
                Val::Const(Rc::new(ConstTensor {
                    ty: dt::BOOL,
                    dims: Vec::new(),
                    values: Values::B(vec![true]),
                })),
            ];
            ins.extend(carried.iter().cloned());
            let outs = self.subgraph(cx, "body", body, &ins)?;
            cond = match &outs[0] {
                Val::Const(c) => self.loop_flag(cx, c, "the body's condition output")?,
                Val::Rt { .. } if trips.is_some_and(|m| i + 1 >= m) => false,
                Val::Rt { .. } => {
                    return Err(cx.err(
                        "the body's condition output is computed at run time; only loops whose condition is known at compile time are unrolled",
                    ).hint("make the condition depend on the iteration number and constants only, or freeze the inputs it depends on: --freeze NAME=VALUE"));
                }
            };
            carried = outs[1..1 + n_carried].to_vec();
            for (k, v) in outs[1 + n_carried..].iter().enumerate() {
                scans[k].push(v.clone());
            }
            i += 1;
        }
        let mut result: Outs = carried.into_iter().map(Some).collect();
        for s in scans {
            result.push(Some(self.stack(cx, s, 0)?));
        }
        Ok(result)
    }

    /// Loop input `j` as a constant, or the error that says how to make it one.
    fn loop_const(&self, cx: &Ctx, j: usize, what: &str) -> R<Rc<ConstTensor>> {
        match self.input(cx, j)? {
            Val::Const(c) => Ok(c),
            Val::Rt { .. } => Err(cx
                .err(format!(
                    "input {j} ({what}) must be known at compile time, but it is computed at run time; loops are unrolled"
                ))
                .hint("freeze the input it depends on: --freeze NAME=VALUE (or `freeze:` under `graph:` in a spec)")),
        }
    }

    fn loop_flag(&self, cx: &Ctx, c: &ConstTensor, what: &str) -> R<bool> {
        if c.element_count() != 1 {
            return Err(cx.err(format!(
                "{what} has {} elements; it must have one",
                c.element_count()
            )));
        }
        Ok(c.as_f64()[0] != 0.0)
    }

    /// `Scan(initial_state..., scan_input...)` with graph attribute `body`; opset 8's form
    /// `Scan(sequence_lens?, initial_state..., scan_input...)` has a leading batch axis on every
    /// input and output and is unrolled batch by batch.
    pub fn scan(&mut self, cx: &Ctx) -> R<Outs> {
        let batched = cx.before(9);
        let first = usize::from(batched);
        if batched && cx.has_input(0) {
            return Err(cx
                .err("input 0 (sequence_lens) is given; only Scan-8 without sequence_lens (every sequence full length) is supported")
                .hint("export with equal-length sequences, or convert the model to opset 9+ (onnx.version_converter.convert_version)"));
        }
        let Some(body) = cx.attr_g("body")? else {
            return Err(cx.attr_err("body", "is missing"));
        };
        let Some(m) = cx.attr_i("num_scan_inputs")? else {
            return Err(cx.attr_err("num_scan_inputs", "is required"));
        };
        let n_in = cx.n_inputs().saturating_sub(first);
        if m < 1 || m as usize > n_in {
            return Err(cx.attr_err(
                "num_scan_inputs",
                format!("{m} must be between 1 and the number of state and scan inputs ({n_in})"),
            ));
        }
        let m = m as usize;
        let n_state = n_in - m;
        if body.input.len() != n_in || body.output.len() < n_state {
            return Err(cx.attr_err(
                "body",
                format!(
                    "the body has {} inputs and {} outputs; the node needs {n_in} inputs and at least {n_state} outputs",
                    body.input.len(),
                    body.output.len()
                ),
            ));
        }
        let k = body.output.len() - n_state;
        let list = |name: &str, n: usize| -> R<Vec<i64>> {
            let v = cx.attr_ints(name)?.unwrap_or_else(|| vec![0; n]);
            if v.len() != n {
                return Err(cx.attr_err(name, format!("{v:?} must have {n} entries")));
            }
            Ok(v)
        };
        let form = if batched {
            ScanForm {
                in_axes: vec![0; m],
                in_dirs: list("directions", m)?,
                out_axes: vec![0; k],
                out_dirs: vec![0; k],
            }
        } else {
            ScanForm {
                in_axes: list("scan_input_axes", m)?,
                in_dirs: list("scan_input_directions", m)?,
                out_axes: list("scan_output_axes", k)?,
                out_dirs: list("scan_output_directions", k)?,
            }
        };
        let mut state = Vec::new();
        for j in 0..n_state {
            state.push(self.input(cx, first + j)?);
        }
        let mut xs = Vec::new();
        for s in 0..m {
            xs.push(self.rt(cx, first + n_state + s)?);
        }
        if !batched {
            let outs = self.scan_unrolled(cx, body, &form, state, xs)?;
            return Ok(outs.into_iter().map(Some).collect());
        }
        // Scan-8: every input has the batch axis first; run each batch entry and stack.
        if let Some(j) = xs.iter().position(|&(x, _)| self.dims(x).len() < 2) {
            return Err(cx.err(format!(
                "scan input {j} has rank {}; Scan-8's scan inputs are [batch, sequence, ...]",
                self.dims(xs[j].0).len()
            )));
        }
        let batch = self.dims(xs[0].0)[0];
        let mut per_batch: Vec<Vec<Val>> = vec![Vec::new(); n_state + k];
        for b in 0..batch {
            let mut st = Vec::new();
            for v in &state {
                let id = self
                    .materialize_val(v)
                    .map_err(|e| cx.err(format!("scan state: {e}")))?;
                st.push(Val::Rt {
                    id: self.step_slice(cx, id, 0, b)?,
                    ty: ty_of(v),
                });
            }
            let mut bx = Vec::new();
            for &(x, ty) in &xs {
                if self.dims(x).first() != Some(&batch) {
                    return Err(cx.err(format!(
                        "scan inputs must share the batch extent {batch} on axis 0 (Scan-8)"
                    )));
                }
                bx.push((self.step_slice(cx, x, 0, b)?, ty));
            }
            let outs = self.scan_unrolled(cx, body, &form, st, bx)?;
            for (j, v) in outs.into_iter().enumerate() {
                per_batch[j].push(v);
            }
        }
        per_batch
            .into_iter()
            .map(|vals| Ok(Some(self.stack(cx, vals, 0)?)))
            .collect()
    }

    /// `x[.., at, ..]` along `axis`, with that axis removed.
    fn step_slice(&mut self, cx: &Ctx, x: InstId, axis: usize, at: usize) -> R<InstId> {
        let xd = self.dims(x);
        let mut starts = vec![0; xd.len()];
        let mut limits = xd.clone();
        starts[axis] = at;
        limits[axis] = at + 1;
        let slice = self.crop(cx, x, starts, limits)?;
        let mut sd = xd;
        sd.remove(axis);
        self.reshape(cx, slice, sd)
    }

    /// One unrolled scan: the final states, then the stacked scan outputs.
    fn scan_unrolled(
        &mut self,
        cx: &Ctx,
        body: &GraphProto,
        form: &ScanForm,
        mut state: Vec<Val>,
        xs: Vec<(InstId, i32)>,
    ) -> R<Vec<Val>> {
        let n_state = state.len();
        let k = form.out_axes.len();
        let mut axes = Vec::new();
        let mut trips = None;
        for (s, &(x, _)) in xs.iter().enumerate() {
            let xd = self.dims(x);
            let axis = cx.axis("scan input axis", form.in_axes[s], xd.len())?;
            match trips {
                None => trips = Some(xd[axis]),
                Some(t) if t != xd[axis] => {
                    return Err(cx.err(format!(
                        "scan input {s} has {} steps along axis {axis}; the first has {t}",
                        xd[axis]
                    )));
                }
                Some(_) => {}
            }
            axes.push(axis);
        }
        let trips = trips.unwrap_or(0);
        if trips > MAX_UNROLLED_TRIPS {
            return Err(cx.err(format!(
                "the scan runs {trips} iterations; this compiler unrolls at most {MAX_UNROLLED_TRIPS}"
            )));
        }
        let mut scans: Vec<Vec<Val>> = vec![Vec::new(); k];
        for t in 0..trips {
            let mut ins = state.clone();
            for (s, &(x, ty)) in xs.iter().enumerate() {
                let at = if form.in_dirs[s] != 0 {
                    trips - 1 - t
                } else {
                    t
                };
                let id = self.step_slice(cx, x, axes[s], at)?;
                ins.push(Val::Rt { id, ty });
            }
            let outs = self.subgraph(cx, "body", body, &ins)?;
            state = outs[..n_state].to_vec();
            for (j, v) in outs[n_state..].iter().enumerate() {
                scans[j].push(v.clone());
            }
        }
        let mut result = state;
        for (j, mut s) in scans.into_iter().enumerate() {
            if form.out_dirs[j] != 0 {
                s.reverse();
            }
            let rank = s.first().map_or(0, |v| self.dims_of(v).len()) + 1;
            let axis = cx.axis("scan output axis", form.out_axes[j], rank)?;
            result.push(self.stack(cx, s, axis)?);
        }
        Ok(result)
    }

    /// Stacks same-shape values on a new axis `axis` (constants stay constants on axis 0).
    fn stack(&mut self, cx: &Ctx, vals: Vec<Val>, axis: usize) -> R<Val> {
        let Some(first) = vals.first() else {
            return Err(cx.err(
                "the loop runs zero times, so its scan outputs would be empty tensors, which the compiler does not support",
            ));
        };
        let dims = self.dims_of(first);
        let ty = ty_of(first);
        if let Some(v) = vals
            .iter()
            .find(|v| self.dims_of(v) != dims || ty_of(v) != ty)
        {
            return Err(cx.err(format!(
                "scan output values differ in shape or type between iterations ({:?} and {:?})",
                dims,
                self.dims_of(v)
            )));
        }
        let mut out_dims = dims.clone();
        out_dims.insert(axis, vals.len());
        if axis == 0 {
            let consts: Option<Vec<Rc<ConstTensor>>> = vals
                .iter()
                .map(|v| match v {
                    Val::Const(c) => Some(c.clone()),
                    Val::Rt { .. } => None,
                })
                .collect();
            if let Some(cs) = consts {
                let values = match &cs[0].values {
                    Values::F(_) | Values::F32(_) => {
                        Values::F(cs.iter().flat_map(|c| c.as_f64()).collect())
                    }
                    Values::I(_) => Values::I(cs.iter().flat_map(|c| c.as_i64()).collect()),
                    Values::B(_) => Values::B(
                        cs.iter()
                            .flat_map(|c| c.as_f64())
                            .map(|x| x != 0.0)
                            .collect(),
                    ),
                };
                return Ok(Val::Const(Rc::new(ConstTensor {
                    ty,
                    dims: out_dims,
                    values,
                })));
            }
        }
        let mut unit = dims.clone();
        unit.insert(axis, 1);
        let mut parts = Vec::new();
        for v in &vals {
            let id = self
                .materialize_val(v)
                .map_err(|m| cx.err(format!("scan output: {m}")))?;
            parts.push(self.reshape(cx, id, unit.clone())?);
        }
        let id = if parts.len() == 1 {
            parts[0]
        } else {
            self.add(cx, Op::Concatenate { dimension: axis }, &parts)?
        };
        Ok(Val::Rt { id, ty })
    }
}
