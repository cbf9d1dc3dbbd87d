//! Control flow whose decision is known at compile time: `If` on a constant condition.
//!
//! Contract: [`Importer::if_op`] reads the condition as a compile-time constant (an initializer,
//! a `Constant`, shape arithmetic, or an input frozen with `--freeze`), lowers the chosen branch's
//! initializers and nodes in place (they may read any value of the enclosing graphs) and returns
//! the branch's outputs as the node's. A condition computed at run time is an error naming the
//! node and the flag that freezes an input. [`Importer::subgraph`] lowers one subgraph in place
//! (also the unrolled `Loop`/`Scan` bodies of `loops.rs`); subgraphs nest at most
//! [`MAX_SUBGRAPH_DEPTH`] deep.

use super::context::{Ctx, Importer, R, Val};
use super::elementwise::Outs;
use super::proto::GraphProto;
use super::tensor::ConstTensor;

/// Deepest nesting of subgraphs (`If` branches, `Loop`/`Scan` bodies): deeper models are refused
/// rather than risking the stack (exporters nest a handful; 64 leaves a wide margin).
pub const MAX_SUBGRAPH_DEPTH: usize = 64;

impl Importer {
    /// `If(cond)` with `then_branch` / `else_branch` graphs.
    pub fn if_op(&mut self, cx: &Ctx) -> R<Outs> {
        cx.arity(1, 1)?;
        let cond = match self.input(cx, 0)? {
            Val::Const(c) => c,
            Val::Rt { .. } => {
                return Err(cx
                    .err("its condition is computed at run time; only an `If` whose condition is known at compile time is supported")
                    .hint("freeze the input the condition depends on: --freeze NAME=VALUE (or `freeze:` under `graph:` in a spec)"));
            }
        };
        if cond.element_count() != 1 {
            return Err(cx.err(format!(
                "its condition has {} elements; it must have one",
                cond.element_count()
            )));
        }
        let take_then = cond.as_f64()[0] != 0.0;
        let which = if take_then {
            "then_branch"
        } else {
            "else_branch"
        };
        let Some(g) = cx.attr_g(which)? else {
            return Err(cx.attr_err(which, "is missing"));
        };
        if g.output.len() != cx.node.output.len() {
            return Err(cx.attr_err(
                which,
                format!(
                    "the branch has {} outputs, the node {}",
                    g.output.len(),
                    cx.node.output.len()
                ),
            ));
        }
        let outs = self.subgraph(cx, which, g, &[])?;
        Ok(outs.into_iter().map(Some).collect())
    }

    /// Lowers subgraph `g` (attribute `which` of the node) in place: binds its declared inputs to
    /// `inputs`, in order (the counts must match, unless `inputs` is empty: `If` branches take
    /// none), its initializers as constants, lowers its nodes (they may read any
    /// value of the enclosing graphs) and returns its outputs.
    pub(super) fn subgraph(
        &mut self,
        cx: &Ctx,
        which: &str,
        g: &GraphProto,
        inputs: &[Val],
    ) -> R<Vec<Val>> {
        if self.depth >= MAX_SUBGRAPH_DEPTH {
            return Err(cx.err(format!(
                "subgraphs (`If`, `Loop`, `Scan` bodies) nest more than {MAX_SUBGRAPH_DEPTH} deep"
            )));
        }
        if !inputs.is_empty() && g.input.len() != inputs.len() {
            return Err(cx.attr_err(
                which,
                format!(
                    "the body declares {} inputs; the node gives it {}",
                    g.input.len(),
                    inputs.len()
                ),
            ));
        }
        for (vi, v) in g.input.iter().zip(inputs) {
            self.env.insert(vi.name.clone(), v.clone());
        }
        for t in &g.initializer {
            let c = ConstTensor::from_proto(t)
                .map_err(|m| cx.attr_err(which, format!("initializer `{}`: {m}", t.name)))?;
            self.env.insert(t.name.clone(), Val::Const(c.into()));
        }
        self.depth += 1;
        let given: std::collections::HashSet<&str> = g
            .input
            .iter()
            .map(|vi| vi.name.as_str())
            .chain(g.initializer.iter().map(|t| t.name.as_str()))
            .collect();
        let lowered = super::lower_nodes(self, cx.path, &g.node, cx.opset, &given);
        self.depth -= 1;
        lowered?;
        g.output
            .iter()
            .map(|vi| {
                self.env.get(&vi.name).cloned().ok_or_else(|| {
                    cx.attr_err(
                        which,
                        format!("subgraph output `{}` is produced by no node", vi.name),
                    )
                })
            })
            .collect()
    }
}
