//! Rewriting one ONNX node as a chain of default-domain nodes: fresh value names, attribute and
//! constant builders, and lowering each node of the chain through the importer's dispatch.
//!
//! Contract: every node of the chain is read in the signatures of opset
//! [`CONTRIB_LOWERING_OPSET`] and named after the rewritten node (`name` of `domain Op`), so an
//! error in any of them still points at the node the user wrote; its values live under names no
//! ONNX graph uses (`<output>::contrib.<k>`). Constants are bound in the environment, never
//! materialised unless a run-time op reads them.

use super::context::{Ctx, Importer, R, Val};
use super::elementwise::Outs;
use super::proto::{AttributeProto, NodeProto, attribute_type as at, data_type as dt};
use super::tensor::{ConstTensor, Values};
use std::rc::Rc;

/// The default-domain opset the rewritten nodes are read in: 23 has every op they use
/// (Gelu from 20, RMSNormalization from 23; ReduceMax, Split and Unsqueeze with axes and sizes
/// as inputs) with inputs-not-attributes signatures.
pub const CONTRIB_LOWERING_OPSET: i64 = 23;

pub(super) fn attr_f(name: &str, f: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::FLOAT,
        f,
        ..Default::default()
    }
}

pub(super) fn attr_i(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::INT,
        i,
        ..Default::default()
    }
}

pub(super) fn attr_ints(name: &str, ints: Vec<i64>) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::INTS,
        ints,
        ..Default::default()
    }
}

pub(super) fn attr_s(name: &str, s: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: at::STRING,
        s: s.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// Input `j` of the rewritten node by name ("" when absent).
pub(super) fn input_name(cx: &Ctx, j: usize) -> String {
    cx.node.input.get(j).cloned().unwrap_or_default()
}

/// Builds the default-domain chain of one node.
pub(super) struct Rewrite<'n> {
    pub(super) node: &'n NodeProto,
    /// The node's index in its graph (names the values of a node whose first output is unused).
    pub(super) index: usize,
    pub(super) next: usize,
}

impl Rewrite<'_> {
    /// A fresh value name.
    pub(super) fn fresh(&mut self) -> String {
        self.next += 1;
        let base = match self.node.output.iter().find(|s| !s.is_empty()) {
            Some(out) => out.clone(),
            None => format!("{}#{}", self.node.op_type, self.index),
        };
        format!("{base}::contrib.{}", self.next)
    }
}

impl Importer {
    /// A scalar f32 constant under a fresh name.
    pub(super) fn const_f32(&mut self, rw: &mut Rewrite, v: f32) -> String {
        let name = rw.fresh();
        let c = ConstTensor {
            ty: dt::FLOAT,
            dims: Vec::new(),
            values: Values::F(vec![v as f64]),
        };
        self.env.insert(name.clone(), Val::Const(Rc::new(c)));
        name
    }

    /// An f32 constant of `dims` under a fresh name.
    pub(super) fn const_f32s(&mut self, rw: &mut Rewrite, dims: Vec<usize>, v: Vec<f32>) -> String {
        self.bind_const(
            rw,
            dt::FLOAT,
            dims,
            Values::F(v.into_iter().map(f64::from).collect()),
        )
    }

    /// An int64 constant of `dims` under a fresh name (shapes, axes, split sizes).
    pub(super) fn const_i64s(&mut self, rw: &mut Rewrite, dims: Vec<usize>, v: Vec<i64>) -> String {
        self.bind_const(rw, dt::INT64, dims, Values::I(v))
    }

    /// A 1-D int64 constant (a shape or a list of axes).
    pub(super) fn const_shape(&mut self, rw: &mut Rewrite, v: &[usize]) -> String {
        self.const_i64s(rw, vec![v.len()], v.iter().map(|&d| d as i64).collect())
    }

    fn bind_const(
        &mut self,
        rw: &mut Rewrite,
        ty: i32,
        dims: Vec<usize>,
        values: Values,
    ) -> String {
        let name = rw.fresh();
        let c = ConstTensor { ty, dims, values };
        self.env.insert(name.clone(), Val::Const(Rc::new(c)));
        name
    }

    /// Lowers the default-domain node `op(inputs) -> n_outputs` with `attrs`; returns its
    /// outputs (also bound under fresh names).
    pub(super) fn via(
        &mut self,
        cx: &Ctx,
        rw: &mut Rewrite,
        op: &str,
        inputs: &[String],
        n_outputs: usize,
        attrs: Vec<AttributeProto>,
    ) -> R<Outs> {
        let outputs: Vec<String> = (0..n_outputs).map(|_| rw.fresh()).collect();
        self.emit(cx, op, inputs, &outputs, attrs)
    }

    /// [`Self::via`] with `n_outputs` outputs, returned by name.
    pub(super) fn via_n(
        &mut self,
        cx: &Ctx,
        rw: &mut Rewrite,
        op: &str,
        inputs: &[String],
        n_outputs: usize,
        attrs: Vec<AttributeProto>,
    ) -> R<Vec<String>> {
        let outputs: Vec<String> = (0..n_outputs).map(|_| rw.fresh()).collect();
        let outs = self.emit(cx, op, inputs, &outputs, attrs)?;
        if outs.iter().take(n_outputs).filter(|o| o.is_some()).count() != n_outputs {
            return Err(cx.err(format!("{op} produced fewer than {n_outputs} values")));
        }
        Ok(outputs)
    }

    /// [`Self::via`] with one output, returned by name.
    pub(super) fn via1(
        &mut self,
        cx: &Ctx,
        rw: &mut Rewrite,
        op: &str,
        inputs: &[String],
        attrs: Vec<AttributeProto>,
    ) -> R<String> {
        let name = rw.fresh();
        self.emit(cx, op, inputs, std::slice::from_ref(&name), attrs)?;
        Ok(name)
    }

    /// Lowers `op(inputs) -> outputs` as a default-domain node named after the contrib node
    /// (`node #i `name` of `com.microsoft Op` (DefaultOp)` in errors) and binds its outputs.
    pub(super) fn emit(
        &mut self,
        cx: &Ctx,
        op: &str,
        inputs: &[String],
        outputs: &[String],
        attrs: Vec<AttributeProto>,
    ) -> R<Outs> {
        let contrib = if cx.node.domain.is_empty() {
            cx.node.op_type.clone()
        } else {
            format!("{} {}", cx.node.domain, cx.node.op_type)
        };
        let node = NodeProto {
            input: inputs.to_vec(),
            output: outputs.to_vec(),
            name: if cx.node.name.is_empty() {
                contrib
            } else {
                format!("{}` of `{contrib}", cx.node.name)
            },
            op_type: op.to_string(),
            domain: String::new(),
            attribute: attrs,
        };
        let sub = Ctx {
            path: cx.path,
            node: &node,
            index: cx.index,
            opset: CONTRIB_LOWERING_OPSET,
        };
        let outs = self.lower_node(&sub)?;
        for (name, v) in outputs.iter().zip(&outs) {
            if let Some(v) = v {
                self.env.insert(name.clone(), v.clone());
            }
        }
        Ok(outs)
    }
}
