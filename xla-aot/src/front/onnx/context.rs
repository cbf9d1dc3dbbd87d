//! The importer's state and the helpers every op lowering uses: the value environment (ONNX
//! name → run-time instruction or compile-time constant), node attributes and inputs, errors that
//! name the node, and building blocks (numpy broadcasting, scalars, integer ops done in f32).
//!
//! Contract: a [`Val`] is either a run-time value (an instruction plus its ONNX element type: an
//! int64 value is held in i32) or a [`ConstTensor`]; a constant is materialised as an HLO constant
//! (once per tensor) only when a run-time op reads it. Every helper that can fail returns a
//! [`SpecError`] built by [`Ctx::err`], which names the node.

use super::proto::data_type as dt;
use super::proto::{AttributeProto, GraphProto, NodeProto, TensorProto, attribute_type as at};
use super::tensor::{ConstTensor, is_float_type, is_int_type};
use crate::front::decompose::Emitter;
use crate::front::diag::{SpecError, SpecErrorKind};
use crate::ir::shape::dims_str;
use crate::ir::{Builder, DType, InstId, Op};
use crate::limits::{IMPORT_FOLD_MAX_ELEMENTS, IMPORT_FOLD_TOTAL_ELEMENTS};
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

/// A value of the ONNX graph.
#[derive(Debug, Clone)]
pub enum Val {
    /// Computed at run time by `id`; `ty` is the ONNX element type.
    Rt { id: InstId, ty: i32 },
    /// Known at import time.
    Const(Rc<ConstTensor>),
}

/// Result of a lowering step.
pub type R<T> = Result<T, SpecError>;

/// The node being lowered: where it is, for errors.
pub struct Ctx<'a> {
    pub path: &'a Path,
    pub node: &'a NodeProto,
    pub index: usize,
    /// The model's default-domain opset: the version of every op's signature.
    pub opset: i64,
}

impl Ctx<'_> {
    /// Whether the model's opset is older than `version`, the opset that changed this op's
    /// signature (each lowering names it next to the rule).
    pub fn before(&self, version: i64) -> bool {
        self.opset < version
    }

    /// `node #i `name` (OpType)`.
    pub fn describe(&self) -> String {
        if self.node.name.is_empty() {
            format!("node #{} ({})", self.index, self.node.op_type)
        } else {
            format!(
                "node #{} `{}` ({})",
                self.index, self.node.name, self.node.op_type
            )
        }
    }

    /// An error about this node (rendered `--> model.onnx: node #i `name` (OpType)`).
    pub fn err(&self, msg: impl AsRef<str>) -> SpecError {
        SpecError::new(self.path, SpecErrorKind::Invalid(msg.as_ref().to_string()))
            .in_node(self.describe())
    }

    /// An error about attribute `attr`.
    pub fn attr_err(&self, attr: &str, msg: impl AsRef<str>) -> SpecError {
        self.err(format!("attribute `{attr}`: {}", msg.as_ref()))
    }

    fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.node.attribute.iter().find(|a| a.name == name)
    }

    fn typed(&self, name: &str, want: i32, what: &str) -> R<Option<&AttributeProto>> {
        let Some(a) = self.attr(name) else {
            return Ok(None);
        };
        if !a.ref_attr_name.is_empty() {
            return Err(self.attr_err(
                name,
                "refers to a function attribute, which is not supported",
            ));
        }
        if a.r#type != 0 && a.r#type != want {
            return Err(self.attr_err(
                name,
                format!("expected {what}, found attribute type {}", a.r#type),
            ));
        }
        Ok(Some(a))
    }

    /// Whether the node has attribute `name`.
    pub fn has_attr(&self, name: &str) -> bool {
        self.attr(name).is_some()
    }

    /// An int attribute.
    pub fn attr_i(&self, name: &str) -> R<Option<i64>> {
        Ok(self.typed(name, at::INT, "an int")?.map(|a| a.i))
    }

    /// An int attribute with a default.
    pub fn attr_i_or(&self, name: &str, default: i64) -> R<i64> {
        Ok(self.attr_i(name)?.unwrap_or(default))
    }

    /// A float attribute with a default.
    pub fn attr_f_or(&self, name: &str, default: f32) -> R<f32> {
        Ok(self
            .typed(name, at::FLOAT, "a float")?
            .map_or(default, |a| a.f))
    }

    /// An ints attribute.
    pub fn attr_ints(&self, name: &str) -> R<Option<Vec<i64>>> {
        Ok(self
            .typed(name, at::INTS, "a list of ints")?
            .map(|a| a.ints.clone()))
    }

    /// A floats attribute.
    pub fn attr_floats(&self, name: &str) -> R<Option<Vec<f32>>> {
        Ok(self
            .typed(name, at::FLOATS, "a list of floats")?
            .map(|a| a.floats.clone()))
    }

    /// A string attribute.
    pub fn attr_s(&self, name: &str) -> R<Option<String>> {
        Ok(self
            .typed(name, at::STRING, "a string")?
            .map(|a| String::from_utf8_lossy(&a.s).into_owned()))
    }

    /// A strings attribute.
    pub fn attr_strings(&self, name: &str) -> R<Option<Vec<String>>> {
        Ok(self
            .typed(name, at::STRINGS, "a list of strings")?
            .map(|a| {
                a.strings
                    .iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()
            }))
    }

    /// A graph attribute (a subgraph).
    pub fn attr_g(&self, name: &str) -> R<Option<&GraphProto>> {
        match self.typed(name, at::GRAPH, "a graph")? {
            None => Ok(None),
            Some(a) => {
                a.g.as_deref()
                    .map(Some)
                    .ok_or_else(|| self.attr_err(name, "the graph value is missing"))
            }
        }
    }

    /// A tensor attribute.
    pub fn attr_t(&self, name: &str) -> R<Option<&TensorProto>> {
        match self.typed(name, at::TENSOR, "a tensor")? {
            None => Ok(None),
            Some(a) => {
                a.t.as_ref()
                    .map(Some)
                    .ok_or_else(|| self.attr_err(name, "the tensor value is missing"))
            }
        }
    }

    /// Number of inputs given (trailing empty names count: they are absent optional inputs).
    pub fn n_inputs(&self) -> usize {
        self.node.input.len()
    }

    /// Whether optional input `j` is present.
    pub fn has_input(&self, j: usize) -> bool {
        self.node.input.get(j).is_some_and(|s| !s.is_empty())
    }

    /// Checks the input count.
    pub fn arity(&self, min: usize, max: usize) -> R<()> {
        let n = self.node.input.len();
        if n < min || n > max {
            let want = if min == max {
                format!("{min}")
            } else {
                format!("{min} to {max}")
            };
            return Err(self.err(format!("it takes {want} input(s), found {n}")));
        }
        Ok(())
    }

    /// A possibly negative axis into `rank` dims.
    pub fn axis(&self, what: &str, axis: i64, rank: usize) -> R<usize> {
        let r = rank as i64;
        if axis < -r || axis >= r {
            return Err(self.err(format!(
                "{what} {axis} is out of range for a tensor of rank {rank} (valid: {} to {})",
                -r,
                r - 1
            )));
        }
        Ok(if axis < 0 { axis + r } else { axis } as usize)
    }

    /// Axes normalised, sorted and checked for duplicates.
    pub fn axes(&self, what: &str, axes: &[i64], rank: usize) -> R<Vec<usize>> {
        let mut out = axes
            .iter()
            .map(|&a| self.axis(what, a, rank))
            .collect::<R<Vec<_>>>()?;
        out.sort();
        if out.windows(2).any(|w| w[0] == w[1]) {
            return Err(self.err(format!("{what} {axes:?} lists an axis twice")));
        }
        Ok(out)
    }
}

/// The importer: a builder and the value environment.
pub struct Importer {
    pub b: Builder,
    pub env: HashMap<String, Val>,
    /// Materialised constants, by tensor identity.
    consts: HashMap<*const ConstTensor, (Rc<ConstTensor>, InstId)>,
    /// Subgraphs being lowered inside one another (`If` branches).
    pub depth: usize,
    /// Elements computed at import time so far (see [`Importer::may_fold`]).
    folded: std::cell::Cell<usize>,
}

impl Importer {
    /// A fresh importer.
    pub fn new(b: Builder) -> Importer {
        Importer {
            b,
            env: HashMap::new(),
            consts: HashMap::new(),
            depth: 0,
            folded: std::cell::Cell::new(0),
        }
    }

    /// Whether a value of `n` elements may be computed at import time: at most
    /// [`IMPORT_FOLD_MAX_ELEMENTS`] each and [`IMPORT_FOLD_TOTAL_ELEMENTS`] in all (`limits.rs`);
    /// counts it when it may. Over either limit the caller builds the run-time op instead, so the
    /// importer never allocates gigabytes for a value the library computes anyway.
    pub fn may_fold(&self, n: usize) -> bool {
        let total = self.folded.get().saturating_add(n);
        let ok = n <= IMPORT_FOLD_MAX_ELEMENTS && total <= IMPORT_FOLD_TOTAL_ELEMENTS;
        if ok {
            self.folded.set(total);
        }
        ok
    }

    /// The HLO instruction of a value (materialising a constant).
    pub fn materialize_val(&mut self, v: &Val) -> Result<InstId, String> {
        match v {
            Val::Rt { id, .. } => Ok(*id),
            Val::Const(c) => {
                let key = Rc::as_ptr(c);
                if let Some((_, id)) = self.consts.get(&key) {
                    return Ok(*id);
                }
                let lit = c.to_literal()?;
                let id = self.b.constant("constant", lit);
                self.consts.insert(key, (c.clone(), id));
                Ok(id)
            }
        }
    }

    /// Input `j`, which must be present.
    pub fn input(&self, cx: &Ctx, j: usize) -> R<Val> {
        let Some(name) = cx.node.input.get(j).filter(|s| !s.is_empty()) else {
            return Err(cx.err(format!("input {j} is missing")));
        };
        self.env.get(name).cloned().ok_or_else(|| {
            cx.err(format!(
                "input {j} `{name}` is not defined by an earlier node, an initializer or a graph input"
            ))
            .hint("nodes must be listed in topological order (onnx.checker checks this)")
        })
    }

    /// Input `j` as a run-time instruction with its ONNX type.
    pub fn rt(&mut self, cx: &Ctx, j: usize) -> R<(InstId, i32)> {
        let v = self.input(cx, j)?;
        let ty = ty_of(&v);
        let id = self
            .materialize_val(&v)
            .map_err(|m| cx.err(format!("input {j}: {m}")))?;
        Ok((id, ty))
    }

    /// Input `j` as a float (f32) instruction.
    pub fn rt_f32(&mut self, cx: &Ctx, j: usize) -> R<InstId> {
        let (id, ty) = self.rt(cx, j)?;
        if !is_float_type(ty) {
            return Err(cx.err(format!(
                "input {j} has element type {}; this op is supported on float tensors only",
                dt::name(ty)
            )));
        }
        Ok(id)
    }

    /// Input `j` as a float tensor of rank >= 1 (normalisations and arg-max along an axis), with
    /// its dims.
    pub fn rt_f32_nonscalar(&mut self, cx: &Ctx, j: usize) -> R<(InstId, Vec<usize>)> {
        let x = self.rt_f32(cx, j)?;
        let xd = self.dims(x);
        if xd.is_empty() {
            return Err(cx.err(format!("input {j} is a scalar; it needs rank >= 1")));
        }
        Ok((x, xd))
    }

    /// Input `j` as a compile-time constant.
    pub fn konst(&self, cx: &Ctx, j: usize, what: &str) -> R<Rc<ConstTensor>> {
        match self.input(cx, j)? {
            Val::Const(c) => Ok(c),
            Val::Rt { .. } => Err(cx
                .err(format!(
                    "input {j} ({what}) must be known at compile time, but it is computed at run time"
                ))
                .hint("make it an initializer or a Constant (e.g. export with static shapes and constant folding: torch.onnx.export(..., do_constant_folding=True))")),
        }
    }

    /// Input `j` as compile-time integers.
    pub fn konst_ints(&self, cx: &Ctx, j: usize, what: &str) -> R<Vec<i64>> {
        let c = self.konst(cx, j, what)?;
        if !is_int_type(c.ty) {
            return Err(cx.err(format!(
                "input {j} ({what}) has element type {}, expected integers",
                dt::name(c.ty)
            )));
        }
        Ok(c.as_i64())
    }

    /// The dims of a value.
    pub fn dims_of(&self, v: &Val) -> Vec<usize> {
        match v {
            Val::Rt { id, .. } => self.b.shape(*id).dims.clone(),
            Val::Const(c) => c.dims.clone(),
        }
    }

    /// The dims of input `j`.
    pub fn in_dims(&self, cx: &Ctx, j: usize) -> R<Vec<usize>> {
        Ok(self.dims_of(&self.input(cx, j)?))
    }

    /// The dims of an instruction.
    pub fn dims(&self, id: InstId) -> Vec<usize> {
        self.b.shape(id).dims.clone()
    }

    // ---- building -------------------------------------------------------------------------------

    /// Adds an op whose shape is inferred; a rule failure is a compiler-side shape error.
    pub fn add(&mut self, cx: &Ctx, op: Op, operands: &[InstId]) -> R<InstId> {
        let name = self.out_name(cx);
        self.b
            .add(&name, op, operands)
            .map_err(|m| cx.err(format!("shape error: {m}")))
    }

    /// Broadcast.
    pub fn bcast(
        &mut self,
        cx: &Ctx,
        x: InstId,
        dims: Vec<usize>,
        result: Vec<usize>,
    ) -> R<InstId> {
        let name = self.out_name(cx);
        self.b
            .broadcast(&name, x, dims, result)
            .map_err(|m| cx.err(format!("shape error: {m}")))
    }

    /// The box `[starts, limits)` of `x` (unit strides).
    pub fn crop(
        &mut self,
        cx: &Ctx,
        x: InstId,
        starts: Vec<usize>,
        limits: Vec<usize>,
    ) -> R<InstId> {
        let strides = vec![1; starts.len()];
        self.add(
            cx,
            Op::Slice {
                starts,
                limits,
                strides,
            },
            &[x],
        )
    }

    /// Reshape (a no-op when the dims are already right).
    pub fn reshape(&mut self, cx: &Ctx, x: InstId, result: Vec<usize>) -> R<InstId> {
        if self.dims(x) == result {
            return Ok(x);
        }
        let name = self.out_name(cx);
        self.b
            .reshape(&name, x, result)
            .map_err(|m| cx.err(format!("shape error: {m}")))
    }

    /// A scalar f32 constant broadcast to `dims`.
    pub fn splat(&mut self, cx: &Ctx, v: f32, dims: &[usize]) -> R<InstId> {
        let s = self.b.scalar("constant", v);
        if dims.is_empty() {
            return Ok(s);
        }
        self.bcast(cx, s, Vec::new(), dims.to_vec())
    }

    /// This node as the [`Emitter`] of a shared decomposition (`front::decompose`).
    pub fn composite<'i, 'c>(&'i mut self, cx: &'i Ctx<'c>) -> Composite<'i, 'c> {
        Composite { imp: self, cx }
    }

    /// Name for the instructions of this node: its first output, sanitised.
    pub fn out_name(&self, cx: &Ctx) -> String {
        let base = cx
            .node
            .output
            .first()
            .filter(|s| !s.is_empty())
            .cloned()
            .unwrap_or_else(|| cx.node.op_type.to_ascii_lowercase());
        crate::util::c_name::identifier(&base)
    }

    /// Broadcasts `x` to `out` dims (numpy: aligned at the right).
    pub fn stretch(&mut self, cx: &Ctx, x: InstId, out: &[usize]) -> R<InstId> {
        let xd = self.dims(x);
        if xd == out {
            return Ok(x);
        }
        if xd.len() > out.len() {
            return Err(cx.err(format!(
                "cannot broadcast {} to {}",
                dims_str(&xd),
                dims_str(out)
            )));
        }
        let map: Vec<usize> = (out.len() - xd.len()..out.len()).collect();
        self.bcast(cx, x, map, out.to_vec())
    }

    /// numpy broadcasting of several operands: returns them stretched to the common dims.
    pub fn broadcast_all(&mut self, cx: &Ctx, xs: &[InstId]) -> R<Vec<InstId>> {
        let all: Vec<Vec<usize>> = xs.iter().map(|&x| self.dims(x)).collect();
        let out = broadcast_dims(&all).ok_or_else(|| {
            let shapes: Vec<String> = all.iter().map(|d| dims_str(d)).collect();
            cx.err(format!(
                "input shapes {} do not broadcast (numpy rules: equal extents or 1)",
                shapes.join(", ")
            ))
        })?;
        xs.iter().map(|&x| self.stretch(cx, x, &out)).collect()
    }

    /// Converts to `to` (no-op if already).
    pub fn convert(&mut self, cx: &Ctx, x: InstId, to: DType) -> R<InstId> {
        if self.b.dtype(x) == to {
            return Ok(x);
        }
        self.add(cx, Op::Convert { to }, &[x])
    }

    /// `p ? a : b` on same-shape f32 values.
    pub fn select(&mut self, cx: &Ctx, p: InstId, a: InstId, b: InstId) -> R<InstId> {
        self.add(cx, Op::Select, &[p, a, b])
    }
}

/// The ONNX element type of a value.
pub fn ty_of(v: &Val) -> i32 {
    match v {
        Val::Rt { ty, .. } => *ty,
        Val::Const(c) => c.ty,
    }
}

/// numpy broadcasting of several shapes.
pub fn broadcast_dims(all: &[Vec<usize>]) -> Option<Vec<usize>> {
    let rank = all.iter().map(Vec::len).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for d in all {
        for (i, &e) in d.iter().enumerate() {
            let o = &mut out[rank - d.len() + i];
            if *o == 1 {
                *o = e;
            } else if e != 1 && e != *o {
                return None;
            }
        }
    }
    Some(out)
}

/// A node as the [`Emitter`] of a shared decomposition: every instruction is named after the
/// node's output (scalars `constant`), as the importer's own lowerings are, and builder failures
/// are errors about the node.
pub struct Composite<'i, 'c> {
    imp: &'i mut Importer,
    cx: &'i Ctx<'c>,
}

impl Emitter for Composite<'_, '_> {
    type Error = SpecError;

    fn builder(&mut self) -> &mut Builder {
        &mut self.imp.b
    }

    fn name(&self, _part: &str) -> String {
        self.imp.out_name(self.cx)
    }

    fn scalar_name(&self, _part: &str) -> String {
        "constant".into()
    }

    fn shape_error(&self, message: String) -> SpecError {
        self.cx.err(format!("shape error: {message}"))
    }
}
